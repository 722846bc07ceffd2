//! Reading a reference file: any JSON layout through [`read`], and the known files, each a type
//! that knows its path inside a reference folder, through [`ReferenceFile::read_from`].

use std::path::Path;

use serde::de::DeserializeOwned;

use crate::ReferenceError;

/// A file of a reference folder, with the layout of its cases.
///
/// Each file is one module of this crate: its case types, and this trait for its top-level
/// type. Adding a file is adding such a module.
pub trait ReferenceFile: DeserializeOwned {
    /// Where the file lies inside a reference folder, `/`-separated (`sdpa.json`).
    const PATH: &'static str;

    /// Reads the file from the reference folder `dir`.
    ///
    /// # Errors
    ///
    /// As [`read`].
    fn read_from(dir: &Path) -> Result<Self, ReferenceError> {
        read(&dir.join(Self::PATH))
    }
}

/// Parses the JSON file at `path` into `T`.
///
/// # Errors
///
/// [`ReferenceError::Read`] when the file cannot be read, and [`ReferenceError::Parse`] when it
/// is not JSON of `T`'s layout (a missing field, a tensor whose data does not fill its shape);
/// both name the file, and the second says what is wrong where.
pub fn read<T: DeserializeOwned>(path: &Path) -> Result<T, ReferenceError> {
    let text = std::fs::read_to_string(path).map_err(|error| ReferenceError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    serde_json::from_str(&text).map_err(|error| ReferenceError::Parse {
        path: path.to_path_buf(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::*;
    use crate::{EncoderLayerFile, MhaFile, PositionalFile, RefTensor, SdpaFile};

    /// The folder of reference files shipped with the workspace.
    fn shipped() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../attn-testing/data")
    }

    fn temp_file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("attn-reference-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn every_shipped_file_reads() {
        let dir = shipped();
        let sdpa = SdpaFile::read_from(&dir).expect("sdpa.json");
        assert_eq!(sdpa.cases.len(), 8);
        assert!(sdpa.cases.iter().all(|c| c.weights.is_some()));
        let positional = PositionalFile::read_from(&dir).expect("positional.json");
        let alibi = positional.alibi.expect("ALiBi slopes");
        assert_eq!(alibi.slopes[&12].len(), 12);
        let mha = MhaFile::read_from(&dir).expect("mha.json");
        assert_eq!(mha.cases.len(), 2);
        let encoder = EncoderLayerFile::read_from(&dir).expect("encoder_layer.json");
        assert_eq!(encoder.cases.len(), 4);
    }

    #[test]
    fn a_missing_file_is_named() {
        let dir = Path::new("/nonexistent/reference/folder");
        let err = SdpaFile::read_from(dir).expect_err("no such folder");
        let message = err.to_string();
        assert!(
            message.starts_with(
                "cannot read reference file /nonexistent/reference/folder/sdpa.json: "
            ),
            "{message}"
        );
    }

    #[test]
    fn a_malformed_tensor_names_the_file_and_the_place() {
        let path = temp_file(
            "short.json",
            "{\"x\":\n {\"shape\": [2, 2], \"data\": [1, 2, 3]}}",
        );
        let message = read::<BTreeMap<String, RefTensor>>(&path)
            .expect_err("3 of 4 values")
            .to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(
            message.contains("shape [2, 2] needs 4 values, the tensor has 3"),
            "{message}"
        );
        assert!(message.contains("line 2"), "{message}");
        std::fs::remove_file(path).expect("cleanup");
    }

    #[test]
    fn a_missing_field_is_named() {
        let path = temp_file("no_out.json", r#"{"cases": [{"name": "plain"}]}"#);
        let message = read::<SdpaFile>(&path).expect_err("no tensors").to_string();
        assert!(message.contains("missing field `q`"), "{message}");
        std::fs::remove_file(path).expect("cleanup");
    }
}
