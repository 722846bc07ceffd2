//! `decoder_layer.json`: `torch.nn.TransformerDecoderLayer(batch_first=True, dropout=0)` with a
//! causal target and a memory with key padding, ReLU post-norm and GELU pre-norm; each layer's
//! `state_dict()` is a safetensors file beside it, named by the case.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::encoder_layer::Activation;
use crate::{RefTensor, ReferenceError, ReferenceFile};

/// The whole file.
#[derive(Clone, Debug, Deserialize)]
pub struct DecoderLayerFile {
    /// What made the file (`torch 2.15.0 nn.TransformerDecoderLayer`).
    pub source: String,
    /// Every case, in file order.
    pub cases: Vec<DecoderLayerCase>,
}

impl ReferenceFile for DecoderLayerFile {
    const PATH: &'static str = "decoder_layer.json";
}

/// One decoder layer, its inputs and its output.
#[derive(Clone, Debug, Deserialize)]
pub struct DecoderLayerCase {
    /// `relu_post_norm`, `gelu_pre_norm`.
    pub name: String,
    /// The feed-forward activation.
    pub activation: Activation,
    /// Pre-norm (`true`) or post-norm.
    pub norm_first: bool,
    /// Width of a token.
    pub d_model: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Hidden width of the feed-forward layer.
    pub d_ff: usize,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// The target `[batch, seq_len, d_model]`.
    pub tgt: RefTensor,
    /// The encoder's output `[batch, seq_len_kv, d_model]`.
    pub memory: RefTensor,
    /// `true` where a memory position is padding, `[batch, seq_len_kv]`.
    pub memory_padding: RefTensor,
    /// Whether the target attends causally (PyTorch's `tgt_is_causal`).
    pub tgt_causal: bool,
    /// Output `[batch, seq_len, d_model]`.
    pub out: RefTensor,
    /// The safetensors file of the layer's `state_dict()`, beside this file.
    pub weights: String,
}

impl DecoderLayerCase {
    /// The layer's safetensors file in the reference folder `dir`.
    ///
    /// # Errors
    /// [`ReferenceError::NotAFileName`] when `weights` is not a plain file name (a path, `..`,
    /// empty): a reference file names only files beside it.
    pub fn weights_path(&self, dir: &Path) -> Result<PathBuf, ReferenceError> {
        let plain = Path::new(&self.weights)
            .file_name()
            .is_some_and(|name| name == self.weights.as_str());
        if !plain || self.weights.contains(['/', '\\']) {
            return Err(ReferenceError::NotAFileName {
                field: "weights",
                name: self.weights.clone(),
            });
        }
        Ok(dir.join(&self.weights))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(weights: &str) -> DecoderLayerCase {
        let tensor = RefTensor {
            shape: vec![1],
            data: vec![0.0],
        };
        DecoderLayerCase {
            name: "relu_post_norm".into(),
            activation: Activation::Relu,
            norm_first: false,
            d_model: 1,
            n_heads: 1,
            d_ff: 1,
            layer_norm_eps: 1e-5,
            tgt: tensor.clone(),
            memory: tensor.clone(),
            memory_padding: tensor.clone(),
            tgt_causal: true,
            out: tensor,
            weights: weights.into(),
        }
    }

    #[test]
    fn the_weights_are_a_file_beside_the_reference_file_and_nowhere_else() {
        let dir = Path::new("refs");
        assert_eq!(
            case("decoder_layer_relu_post_norm.safetensors")
                .weights_path(dir)
                .expect("a plain name"),
            dir.join("decoder_layer_relu_post_norm.safetensors")
        );
        for name in [
            "../secret.safetensors",
            "/etc/passwd",
            "a/b.safetensors",
            "..",
            "",
            "a\\b",
        ] {
            let err = case(name).weights_path(dir).expect_err(name);
            assert!(err.to_string().contains(&format!("{name:?}")), "{err}");
        }
    }
}
