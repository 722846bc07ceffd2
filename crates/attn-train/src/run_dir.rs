//! The run folder: what a run writes where, and how a fresh run clears what an earlier one left.
//!
//! ```text
//! DIR/config.json                       the whole configuration; a resumed run reads it back
//! DIR/metrics.csv                       one row per evaluation (crate::metrics)
//! DIR/loss.png, DIR/accuracy.png        the curves (crate::plot)
//! DIR/attention/layer<L>-head<H>.png    each head's weights on the first held-out sequence
//! DIR/attention/cross-layer<L>-head<H>.png   each cross-attention head's (encoder-decoder)
//! DIR/checkpoints/                      weights, optimizer and loop state (crate::checkpoint)
//! ```

use std::path::{Path, PathBuf};

use crate::checkpoint;
use crate::config::TrainConfig;
use crate::error::TrainError;

/// The configuration file written into (and read back from) the run folder.
pub const CONFIG_FILE: &str = "config.json";
/// The metrics file in the run folder.
pub const METRICS_FILE: &str = "metrics.csv";
/// The loss curve in the run folder.
pub const LOSS_PLOT: &str = "loss.png";
/// The accuracy curve in the run folder.
pub const ACCURACY_PLOT: &str = "accuracy.png";
/// The folder of attention heatmaps in the run folder.
pub const ATTENTION_DIR: &str = "attention";

/// A run's output folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// The folder for a fresh run, created if missing; what an earlier run left there (this
    /// crate's own files only) is removed, so that checkpoints or metrics of two runs never mix.
    ///
    /// # Errors
    ///
    /// [`TrainError::Io`] when the folder cannot be created or an old file removed.
    pub fn fresh(root: &Path) -> Result<Self, TrainError> {
        let dir = Self::existing(root)?;
        for folder in [checkpoint::CHECKPOINTS, ATTENTION_DIR] {
            let path = root.join(folder);
            if path.exists() {
                std::fs::remove_dir_all(&path).map_err(|e| TrainError::io("removing", &path, e))?;
            }
        }
        for file in [METRICS_FILE, LOSS_PLOT, ACCURACY_PLOT] {
            let path = root.join(file);
            if path.exists() {
                std::fs::remove_file(&path).map_err(|e| TrainError::io("removing", &path, e))?;
            }
        }
        Ok(dir)
    }

    /// The folder of a run to continue, created if missing, its files kept.
    ///
    /// # Errors
    ///
    /// [`TrainError::Io`] when the folder cannot be created.
    pub fn existing(root: &Path) -> Result<Self, TrainError> {
        std::fs::create_dir_all(root).map_err(|e| TrainError::io("creating", root, e))?;
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// The folder itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `config.json`.
    pub fn config(&self) -> PathBuf {
        self.root.join(CONFIG_FILE)
    }

    /// `metrics.csv`.
    pub fn metrics(&self) -> PathBuf {
        self.root.join(METRICS_FILE)
    }

    /// `loss.png`.
    pub fn loss_plot(&self) -> PathBuf {
        self.root.join(LOSS_PLOT)
    }

    /// `accuracy.png`.
    pub fn accuracy_plot(&self) -> PathBuf {
        self.root.join(ACCURACY_PLOT)
    }

    /// `attention/layer<layer>-head<head>.png`, its folder created if missing.
    ///
    /// # Errors
    ///
    /// [`TrainError::Io`] when the folder cannot be created.
    pub fn head_heatmap(&self, layer: usize, head: usize) -> Result<PathBuf, TrainError> {
        let dir = self.root.join(ATTENTION_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| TrainError::io("creating", &dir, e))?;
        Ok(dir.join(format!("layer{layer}-head{head}.png")))
    }

    /// `attention/cross-layer<layer>-head<head>.png`, its folder created if missing.
    ///
    /// # Errors
    ///
    /// [`TrainError::Io`] when the folder cannot be created.
    pub fn cross_heatmap(&self, layer: usize, head: usize) -> Result<PathBuf, TrainError> {
        let path = self.head_heatmap(layer, head)?;
        Ok(path.with_file_name(format!("cross-layer{layer}-head{head}.png")))
    }

    /// Writes `config.json`.
    ///
    /// # Errors
    ///
    /// [`TrainError::Io`] when it cannot be written.
    pub fn write_config(&self, config: &TrainConfig) -> Result<(), TrainError> {
        let json = serde_json::to_string_pretty(config).expect("TrainConfig is plain data");
        let path = self.config();
        std::fs::write(&path, json).map_err(|e| TrainError::io("writing", &path, e))
    }
}

/// Reads `config.json` from the run folder `dir`.
///
/// # Errors
///
/// [`TrainError::Io`] when it cannot be read, [`TrainError::Config`] when it does not parse.
pub fn read_config(dir: &Path) -> Result<TrainConfig, TrainError> {
    TrainConfig::from_file(&dir.join(CONFIG_FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_run_clears_only_the_files_of_an_earlier_run() {
        let root = std::env::temp_dir().join(format!("attn-train-run-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let old = RunDir::fresh(&root).expect("created");
        old.write_config(&TrainConfig::default()).expect("config");
        let heatmap = old.head_heatmap(0, 1).expect("attention folder");
        for path in [
            old.metrics(),
            old.loss_plot(),
            heatmap.clone(),
            root.join("notes.txt"),
        ] {
            std::fs::write(&path, "x").expect("written");
        }
        let checkpoints = root.join(checkpoint::CHECKPOINTS);
        std::fs::create_dir_all(&checkpoints).expect("checkpoints folder");

        let again = RunDir::existing(&root).expect("kept");
        assert!(again.metrics().is_file() && heatmap.is_file() && checkpoints.is_dir());

        let fresh = RunDir::fresh(&root).expect("cleared");
        assert!(!fresh.metrics().exists() && !fresh.loss_plot().exists());
        assert!(!heatmap.exists() && !checkpoints.exists());
        assert!(root.join("notes.txt").is_file(), "not a file of this crate");
        assert!(
            fresh.config().is_file(),
            "rewritten by every run, never removed"
        );
        assert_eq!(
            read_config(&root).expect("parses").identity(),
            TrainConfig::default().identity()
        );
        std::fs::remove_dir_all(&root).expect("cleanup");
    }
}
