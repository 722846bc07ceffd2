//! A PyTorch `state_dict` as a file holds it: tensors by name, each with its shape and dtype,
//! read from safetensors or a pickled `torch.save` file, and read as `f32` (or a matrix in
//! half precision) when a loader asks for one.

use std::collections::BTreeMap;
use std::path::Path;

use burn::store::burn_pack::Tensor as PackTensor;
use burn::store::{ModuleStore, PytorchStore, SafetensorsStore, bridge};
use burn::tensor::{DType, Device, Tensor};

use crate::error::ModelError;

/// A PyTorch `state_dict` read through burn-store: safetensors (`safetensors.torch.save_file`,
/// Hugging Face's `model.safetensors`) with [`SafetensorsStore`], pickled `torch.save` files
/// (`.pt`, `.pth`, Hugging Face's `pytorch_model.bin`) with [`PytorchStore`].
///
/// burn-store reads the files and converts dtypes (F64, F16 and BF16 become f32 here); the
/// names stay the checkpoint's own, and the loaders of this crate look each tensor up by that
/// name, in the checkpoint's layout. They do not go through burn-store's `apply_to` with a
/// `KeyRemapper` and the `PyTorchToBurnAdapter`, for two reasons: the applier reports a
/// missing or misshapen tensor by the module's path and in burn's layout after the adapter's
/// transpose, where these errors name the checkpoint's tensor and its stored shape; and a
/// remapper maps one tensor to one parameter, while `in_proj_weight` and GPT-2's `c_attn`
/// are each split into three projections.
///
/// Built from bytes ([`from_safetensors`](Self::from_safetensors)) or from a path its caller
/// gives ([`from_safetensors_file`](Self::from_safetensors_file),
/// [`from_pytorch_file`](Self::from_pytorch_file)).
#[derive(Clone)]
pub struct StateDict {
    tensors: BTreeMap<String, PackTensor>,
    /// The type matrices are read as, where it is not `f32` ([`keep_matrices`](Self::keep_matrices)).
    matrices: Option<DType>,
}

impl std::fmt::Debug for StateDict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(
                self.tensors
                    .iter()
                    .map(|(name, t)| (name, (t.dtype, t.shape.as_slice()))),
            )
            .finish()
    }
}

impl StateDict {
    /// Parses a safetensors buffer.
    ///
    /// # Errors
    /// [`ModelError::Load`] with the parser's reason when the bytes are not a valid
    /// safetensors file (truncated, corrupt header, offsets out of range).
    pub fn from_safetensors(bytes: &[u8]) -> Result<Self, ModelError> {
        Self::from_store(SafetensorsStore::from_bytes(Some(bytes.to_vec())), "")
    }

    /// Reads and parses a safetensors file, at its caller's path.
    ///
    /// # Errors
    /// [`ModelError::File`] naming the path when nothing is there or it is not a regular file,
    /// [`ModelError::Load`] naming it when it cannot be read or is not safetensors.
    pub fn from_safetensors_file(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        // Each tensor read once, into its own buffer, rather than copied out of a map whose
        // pages would stay resident beside the copies (`safetensors_file`).
        Ok(Self {
            tensors: crate::safetensors_file::tensors(path.as_ref())?,
            matrices: None,
        })
    }

    /// Reads a pickled PyTorch file (`torch.save(model.state_dict())`, `pytorch_model.bin`).
    ///
    /// # Errors
    /// [`ModelError::File`] naming the path when nothing is there or it is not a regular file,
    /// [`ModelError::Load`] naming it when it cannot be read or unpickled.
    pub fn from_pytorch_file(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        crate::files::regular_file(path)?;
        Self::from_store(
            PytorchStore::from_file(path),
            &format!("{}: ", path.display()),
        )
    }

    fn from_store(mut store: impl ModuleStore, context: &str) -> Result<Self, ModelError> {
        let tensors = store
            .get_all_tensors()
            .map_err(|e| ModelError::Load {
                reason: format!("{context}{e}"),
            })?
            .clone();
        Ok(Self {
            tensors,
            matrices: None,
        })
    }

    /// Reads every two-dimensional floating-point tensor (the projections, the token table)
    /// as `dtype` (`BF16` or `F16`) instead of `f32`: a half-precision checkpoint stays half
    /// precision in memory, and the products widen its values as they read them. Vectors (norms,
    /// biases) are still read as `f32`.
    pub fn keep_matrices(mut self, dtype: DType) -> Self {
        self.matrices = (dtype != DType::F32).then_some(dtype);
        self
    }

    /// Adds `other`'s tensors (a further shard of the same checkpoint); a name both hold
    /// keeps `other`'s, so a caller that must not replace a tensor checks the names first
    /// ([`read_llama_weights`](crate::hf::read_llama_weights) refuses a tensor outside the
    /// shard its index names).
    pub fn extend(&mut self, other: StateDict) {
        self.tensors.extend(other.tensors);
    }

    /// How many values the tensors hold together, every tensor counted (saturating at
    /// `u64::MAX`).
    pub fn values(&self) -> u64 {
        self.tensors
            .values()
            .map(|t| {
                t.shape
                    .as_slice()
                    .iter()
                    .fold(1u64, |n, &d| n.saturating_mul(d as u64))
            })
            .fold(0u64, u64::saturating_add)
    }

    /// The tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// Whether a tensor of that name is present.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// The stored shape of a tensor, if present.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.tensors.get(name).map(|t| t.shape.as_slice())
    }

    /// The stored dtype of a tensor, if present.
    pub fn dtype(&self, name: &str) -> Option<DType> {
        self.tensors.get(name).map(|t| t.dtype)
    }

    /// Checks that tensor `name` is present with shape `expected`, reading nothing.
    ///
    /// # Errors
    /// [`ModelError::MissingTensor`], [`ModelError::TensorShape`].
    pub fn expect_shape(&self, name: &str, expected: &[usize]) -> Result<(), ModelError> {
        let stored = self
            .tensors
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor { name: name.into() })?;
        if stored.shape.as_slice() != expected {
            return Err(ModelError::TensorShape {
                name: name.into(),
                expected: expected.to_vec(),
                got: stored.shape.to_vec(),
            });
        }
        Ok(())
    }

    /// One tensor on `device`, checked against the shape the caller needs.
    ///
    /// # Errors
    /// [`ModelError::MissingTensor`], [`ModelError::TensorShape`], [`ModelError::TensorDtype`]
    /// (floating-point tensors are read and converted to f32).
    pub fn tensor<const D: usize>(
        &self,
        name: &str,
        expected: [usize; D],
        device: &Device,
    ) -> Result<Tensor<D>, ModelError> {
        self.expect_shape(name, &expected)?;
        let stored = self
            .tensors
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor { name: name.into() })?;
        if !stored.dtype.is_float() {
            return Err(ModelError::TensorDtype {
                name: name.into(),
                dtype: format!("{:?}", stored.dtype),
            });
        }
        let data = bridge::to_data(stored).map_err(|e| ModelError::Load {
            reason: format!("tensor `{name}`: {e}"),
        })?;
        // F64, F16 and BF16 are widened or narrowed to the f32 every module computes in, but
        // for matrices kept in half precision.
        Ok(match self.matrices {
            Some(dtype) if D == 2 => Tensor::from_data(data.convert_dtype(dtype), (device, dtype)),
            _ => Tensor::from_data(data.convert::<f32>(), device),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::data_dir;

    fn relu_post_norm_bytes() -> Vec<u8> {
        std::fs::read(data_dir().join("encoder_layer_relu_post_norm.safetensors"))
            .expect("reference file")
    }

    #[test]
    fn a_corrupt_file_is_a_load_error() {
        let mut bytes = relu_post_norm_bytes();
        bytes.truncate(bytes.len() / 2);
        let err = StateDict::from_safetensors(&bytes).expect_err("truncated");
        assert!(matches!(err, ModelError::Load { .. }), "{err}");
        let missing = data_dir().join("no_such_layer.safetensors");
        let err = StateDict::from_safetensors_file(&missing).expect_err("no file");
        assert!(
            matches!(
                err,
                ModelError::File(crate::files::FileError::NotFound { .. })
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("no_such_layer.safetensors"),
            "{err}"
        );
        let err = StateDict::from_safetensors(b"not a safetensors file").expect_err("garbage");
        assert!(
            err.to_string().starts_with("cannot read the weights"),
            "{err}"
        );
    }
}
