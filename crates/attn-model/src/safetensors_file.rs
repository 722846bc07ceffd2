//! A safetensors file read tensor by tensor, each one's bytes read once, straight into the
//! buffer that becomes its tensor.
//!
//! burn-store's `SafetensorsStore::from_file` maps the file and copies each tensor out of the
//! map. The mapped pages a load touches stay resident in the process beside the copies, so
//! loading a model takes twice its file in memory at its peak (a 942 MB bfloat16 folder peaked
//! at 2.06 GB). Here each tensor is read with a positioned read of its byte range when the
//! loader asks for it: the file's pages stay in the kernel's cache, not in the process, and
//! every value is held once. The header is bounded, parsed and checked by the `safetensors`
//! crate (offsets contiguous, each byte range the size its dtype and shape need) before
//! anything else is read, and the data must end where the file ends.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use burn::store::bridge;
use burn::store::burn_pack::Tensor as PackTensor;
use burn::tensor::{BoolStore, DType, Shape, TensorData};
use safetensors::tensor::{Dtype, Metadata};

use crate::ModelError;

/// The longest header read (the `safetensors` crate's own bound).
const HEADER_MAX_BYTES: u64 = 100_000_000;

/// Every tensor of the safetensors file at `path`, each read when it is asked for.
///
/// # Errors
/// [`ModelError::File`] naming the path when nothing is there or it is not a regular file
/// (checked before it is opened: opening a FIFO would block), [`ModelError::Load`] naming it
/// when the file cannot be opened, or its header is too long, malformed or does not describe
/// the bytes that follow it.
pub(crate) fn tensors(path: &Path) -> Result<BTreeMap<String, PackTensor>, ModelError> {
    let fail = |reason: String| ModelError::Load {
        reason: format!("{}: {reason}", path.display()),
    };
    crate::files::regular_file(path)?;
    let mut file = File::open(path).map_err(|e| fail(e.to_string()))?;
    let meta = file.metadata().map_err(|e| fail(e.to_string()))?;
    if !meta.is_file() {
        return Err(fail("not a regular file".into()));
    }
    let length = meta.len();
    let mut prefix = [0u8; 8];
    file.read_exact(&mut prefix)
        .map_err(|e| fail(format!("cannot read the header's length ({e})")))?;
    let header_len = u64::from_le_bytes(prefix);
    if header_len > HEADER_MAX_BYTES || header_len > length - 8 {
        return Err(fail(format!(
            "the header claims {header_len} bytes, in a file of {length} bytes (at most \
             {HEADER_MAX_BYTES} are read)"
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header)
        .map_err(|e| fail(format!("cannot read the header ({e})")))?;
    let metadata: Metadata = serde_json::from_slice(&header)
        .map_err(|e| fail(format!("the header is not a safetensors header ({e})")))?;
    let start = 8 + header_len;
    let data_len = metadata.data_len() as u64;
    if start.checked_add(data_len) != Some(length) {
        return Err(fail(format!(
            "the header describes {data_len} bytes of data after its {start}, but the file \
             holds {length} bytes"
        )));
    }
    let file = Arc::new(Positioned::new(file));
    let mut tensors = BTreeMap::new();
    for (name, info) in metadata.tensors() {
        let dtype = burn_dtype(info.dtype).ok_or_else(|| {
            fail(format!(
                "tensor `{name}` has dtype {:?}, which is not read",
                info.dtype
            ))
        })?;
        let shape = Shape::from(info.shape.clone());
        let (from, to) = info.data_offsets;
        let (at, size) = (start + from as u64, to - from);
        let source = Arc::clone(&file);
        let (read_shape, read_name) = (shape.clone(), name.clone());
        let tensor = bridge::deferred(name.clone(), dtype, shape, None, move || {
            let mut bytes = vec![0u8; size];
            source.read_exact_at(&mut bytes, at).map_err(|e| {
                burn::store::burn_pack::Error::ValidationError(format!(
                    "reading tensor `{read_name}` ({size} bytes at {at}): {e}"
                ))
            })?;
            Ok(TensorData::from_bytes_vec(bytes, read_shape.clone(), dtype))
        });
        tensors.insert(name, tensor);
    }
    Ok(tensors)
}

/// The types burn holds that a safetensors dtype names (burn-store's own mapping).
fn burn_dtype(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::F64 => DType::F64,
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::I16 => DType::I16,
        Dtype::I8 => DType::I8,
        Dtype::U64 => DType::U64,
        Dtype::U32 => DType::U32,
        Dtype::U8 => DType::U8,
        Dtype::BOOL => DType::Bool(BoolStore::Native),
        _ => return None,
    })
}

/// A file read at given offsets, from any thread.
struct Positioned {
    #[cfg(unix)]
    file: File,
    #[cfg(not(unix))]
    file: std::sync::Mutex<File>,
}

impl Positioned {
    fn new(file: File) -> Self {
        #[cfg(unix)]
        return Self { file };
        #[cfg(not(unix))]
        return Self {
            file: std::sync::Mutex::new(file),
        };
    }

    /// Fills `buf` from byte `at` of the file.
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> std::io::Result<()> {
        #[cfg(unix)]
        {
            std::os::unix::fs::FileExt::read_exact_at(&self.file, buf, at)
        }
        #[cfg(not(unix))]
        {
            use std::io::{Seek, SeekFrom};
            let mut file = self
                .file
                .lock()
                .map_err(|_| std::io::Error::other("the file's lock is poisoned"))?;
            file.seek(SeekFrom::Start(at))?;
            file.read_exact(buf)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!(
            "attn-safetensors-file-{name}-{}.safetensors",
            std::process::id()
        ));
        std::fs::write(&path, bytes).expect("write");
        path
    }

    /// A file of one `[2, 3]` f32 tensor `w` holding 0..6 and one bf16 `[2]` tensor `b`.
    fn file_bytes() -> Vec<u8> {
        use safetensors::tensor::TensorView;
        let w: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let b: Vec<u8> = [0x3f80u16, 0xc000]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let views = [
            (
                "w",
                TensorView::new(Dtype::F32, vec![2, 3], &w).expect("view"),
            ),
            (
                "b",
                TensorView::new(Dtype::BF16, vec![2], &b).expect("view"),
            ),
        ];
        safetensors::tensor::serialize(views, None).expect("serialize")
    }

    #[test]
    fn each_tensor_reads_its_own_bytes() {
        let path = scratch("good", &file_bytes());
        let tensors = tensors(&path).expect("a valid file");
        let w = bridge::to_data(&tensors["w"]).expect("reads");
        assert_eq!(w.shape().as_slice(), &[2, 3]);
        assert_eq!(
            w.try_to_vec::<f32>().expect("f32"),
            [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        );
        let b = bridge::to_data(&tensors["b"]).expect("reads");
        assert_eq!(b.dtype(), DType::BF16);
        assert_eq!(
            b.convert::<f32>().try_to_vec::<f32>().expect("f32"),
            [1.0, -2.0]
        );
        std::fs::remove_file(path).expect("clean up");
    }

    #[test]
    fn a_file_whose_header_and_length_disagree_is_refused_with_both_numbers() {
        let bytes = file_bytes();
        let truncated = scratch("short", &bytes[..bytes.len() - 4]);
        let err = tensors(&truncated)
            .expect_err("4 bytes missing")
            .to_string();
        assert!(
            err.contains("describes 28 bytes of data")
                && err.contains(&format!("{}", bytes.len() - 4)),
            "{err}"
        );
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0; 3]);
        let padded = scratch("long", &longer);
        assert!(tensors(&padded).is_err(), "3 bytes past the data");
        let mut huge = bytes.clone();
        huge[..8].copy_from_slice(&(1u64 << 60).to_le_bytes());
        let claimed = scratch("huge", &huge);
        let err = tensors(&claimed)
            .expect_err("2^60 bytes of header")
            .to_string();
        assert!(err.contains(&format!("{}", 1u64 << 60)), "{err}");
        for path in [truncated, padded, claimed] {
            std::fs::remove_file(path).expect("clean up");
        }
    }
}
