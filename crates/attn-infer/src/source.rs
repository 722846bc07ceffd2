//! What a `MODEL` argument names: a run folder written by `attn train`, or a model folder
//! written by transformers' `save_pretrained`. Their contents tell them apart:
//!
//! ```text
//! run folder     manifest.json, config.json with "task", checkpoints/
//! model folder   config.json with "model_type", the weights, tokenizer.json
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use attn_train::run_dir::MANIFEST_FILE;

/// A `MODEL` argument, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A folder written by `attn train`.
    Run(PathBuf),
    /// A Hugging Face model folder.
    Folder(PathBuf),
}

impl Source {
    /// Which kind of folder `path` is.
    ///
    /// # Errors
    /// When `path` is not a folder, or is neither kind, naming what it lacks.
    pub fn of(path: &Path) -> Result<Self> {
        if !path.is_dir() {
            if path.exists() {
                bail!(
                    "{} is not a folder: MODEL is a run folder (from `attn train`) or a model \
                     folder (config.json, the weights, tokenizer.json)",
                    path.display()
                );
            }
            bail!("{} does not exist", path.display());
        }
        if path.join(MANIFEST_FILE).is_file() {
            return Ok(Self::Run(path.to_path_buf()));
        }
        if path.join(attn_model::hf::CONFIG_FILE).is_file() {
            return Ok(Self::Folder(path.to_path_buf()));
        }
        bail!(
            "{} holds neither {MANIFEST_FILE} (a run folder, from `attn train`) nor {} (a model \
             folder, from transformers' save_pretrained)",
            path.display(),
            attn_model::hf::CONFIG_FILE
        )
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        match self {
            Self::Run(path) | Self::Folder(path) => path,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("attn-source-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        dir
    }

    #[test]
    fn a_folder_is_told_by_its_contents() {
        let run = scratch("run");
        std::fs::write(run.join(MANIFEST_FILE), "{}").expect("written");
        std::fs::write(run.join("config.json"), "{}").expect("written");
        assert_eq!(Source::of(&run).expect("a run"), Source::Run(run.clone()));
        let folder = scratch("folder");
        std::fs::write(folder.join("config.json"), "{}").expect("written");
        assert_eq!(
            Source::of(&folder).expect("a folder"),
            Source::Folder(folder.clone())
        );
        let empty = scratch("empty");
        let message = Source::of(&empty).expect_err("neither").to_string();
        assert!(message.contains("manifest.json") && message.contains("config.json"));
        let missing = empty.join("missing");
        let message = Source::of(&missing).expect_err("missing").to_string();
        assert!(message.contains("does not exist"), "{message}");
        for dir in [run, folder, empty] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
