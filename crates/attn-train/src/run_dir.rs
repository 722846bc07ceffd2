//! The run folder: what a run writes where, and the manifest that says which files are the
//! run's own.
//!
//! ```text
//! DIR/manifest.json                     every file this program wrote here, relative to DIR
//! DIR/config.json                       the whole configuration; a resumed run reads it back
//! DIR/metrics.csv                       one row per evaluation (crate::metrics)
//! DIR/timings.csv                       the wall time of each of those rows
//! DIR/loss.png, DIR/accuracy.png        the curves (crate::plot)
//! DIR/attention/layer<L>-head<H>.png    each head's weights on the first held-out sequence
//! DIR/attention/cross-layer<L>-head<H>.png   each cross-attention head's (encoder-decoder)
//! DIR/checkpoints/                      weights, optimizer and loop state (crate::checkpoint)
//! ```
//!
//! A fresh run needs a folder that is missing or empty ([`RunDir::check_fresh`]). With
//! `overwrite` it may reuse one, and then removes only the files that the folder's manifest
//! lists, so whatever else is there (a user's notes, another model's checkpoints) stays.
//! A path is recorded in the manifest before the file is written ([`RunDir::claim`]), so a run
//! that stops half-way still owns what it wrote.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::checkpoint;
use crate::config::TrainConfig;
use crate::error::TrainError;
use crate::metrics::MetricsLog;
pub use crate::metrics::TIMINGS_FILE;

/// The configuration file written into (and read back from) the run folder.
pub const CONFIG_FILE: &str = "config.json";
/// The metrics file in the run folder.
pub const METRICS_FILE: &str = "metrics.csv";
/// The list of the files the program wrote into the run folder.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The loss curve in the run folder.
pub const LOSS_PLOT: &str = "loss.png";
/// The accuracy curve in the run folder.
pub const ACCURACY_PLOT: &str = "accuracy.png";
/// The folder of attention heatmaps in the run folder.
pub const ATTENTION_DIR: &str = "attention";

/// The files at fixed places that every run writes; `--overwrite` refuses to write over one that
/// the manifest does not list.
const FIXED_FILES: [&str; 6] = [
    CONFIG_FILE,
    METRICS_FILE,
    TIMINGS_FILE,
    LOSS_PLOT,
    ACCURACY_PLOT,
    "checkpoints/latest",
];

/// `manifest.json`: the run's own files, as paths relative to the run folder.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The files, `/`-separated.
    pub files: BTreeSet<String>,
}

impl Manifest {
    /// Reads the manifest of the run folder `root`; an empty one where there is none.
    ///
    /// # Errors
    ///
    /// [`TrainError::Io`] when it cannot be read, [`TrainError::Config`] when it does not parse.
    pub fn read(root: &Path) -> Result<Self, TrainError> {
        let path = root.join(MANIFEST_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| TrainError::Config(format!("{} does not parse: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(TrainError::io("reading", &path, e)),
        }
    }

    fn write(&self, root: &Path) -> Result<(), TrainError> {
        let path = root.join(MANIFEST_FILE);
        let tmp = root.join(format!("{MANIFEST_FILE}.tmp"));
        let json = serde_json::to_string_pretty(self).expect("a manifest is plain data");
        std::fs::write(&tmp, json).map_err(|e| TrainError::io("writing", &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| TrainError::io("renaming", &tmp, e))
    }
}

/// `relative` as a path inside the run folder, or `None` for one that could leave it (absolute,
/// or with `..`): such an entry is never acted on.
fn inside(root: &Path, relative: &str) -> Option<PathBuf> {
    let path = Path::new(relative);
    path.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| root.join(path))
}

/// A run's output folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// Checks, touching nothing, that a fresh run may write into `root`: it is missing or
    /// empty, or `overwrite` is given and no file this run writes at a fixed place is there
    /// unless the manifest lists it.
    ///
    /// # Errors
    ///
    /// [`TrainError::OutNotEmpty`] for a folder with something in it and no `overwrite`,
    /// [`TrainError::NotOurs`] for a file in the way that no earlier run wrote,
    /// [`TrainError::Io`] when the folder cannot be read.
    pub fn check_fresh(root: &Path, overwrite: bool) -> Result<(), TrainError> {
        let entries = match std::fs::read_dir(root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(TrainError::io("reading", root, e)),
        };
        let mut names = entries
            .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TrainError::io("reading", root, e))?;
        if names.is_empty() {
            return Ok(());
        }
        if !overwrite {
            names.sort();
            let shown = names.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
            let more = names.len().saturating_sub(3);
            let found = if more > 0 {
                format!("{shown} and {more} more")
            } else {
                shown
            };
            return Err(TrainError::OutNotEmpty {
                path: root.to_path_buf(),
                found,
            });
        }
        let manifest = Manifest::read(root)?;
        for file in FIXED_FILES {
            let path = root.join(file);
            if path.symlink_metadata().is_ok() && !manifest.files.contains(file) {
                return Err(TrainError::NotOurs { path });
            }
        }
        Ok(())
    }

    /// The folder for a fresh run, created if missing. With `overwrite`, the files that its
    /// manifest lists (an earlier run's) are removed, and then the folders they leave empty;
    /// nothing else is. Call [`check_fresh`](Self::check_fresh) first, before anything else is
    /// done.
    ///
    /// # Errors
    ///
    /// [`TrainError::Io`] when the folder cannot be created or an old file removed, and as
    /// [`check_fresh`](Self::check_fresh).
    pub fn fresh(root: &Path, overwrite: bool) -> Result<Self, TrainError> {
        Self::check_fresh(root, overwrite)?;
        std::fs::create_dir_all(root).map_err(|e| TrainError::io("creating", root, e))?;
        let old = Manifest::read(root)?;
        let mut folders = BTreeSet::new();
        for relative in &old.files {
            let Some(path) = inside(root, relative) else {
                continue;
            };
            match path.symlink_metadata() {
                Ok(meta) if !meta.is_dir() => {
                    std::fs::remove_file(&path)
                        .map_err(|e| TrainError::io("removing", &path, e))?;
                }
                _ => continue,
            }
            let mut folder = path.parent();
            while let Some(f) = folder
                && f != root
            {
                folders.insert(f.to_path_buf());
                folder = f.parent();
            }
        }
        // Deepest first; a folder that still holds something not ours stays.
        for folder in folders.iter().rev() {
            let _ = std::fs::remove_dir(folder);
        }
        Manifest::default().write(root)?;
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// The folder of a run to continue, its files kept.
    ///
    /// # Errors
    ///
    /// [`TrainError::NoCheckpoint`] when the folder is not there.
    pub fn existing(root: &Path) -> Result<Self, TrainError> {
        if !root.is_dir() {
            return Err(TrainError::NoCheckpoint {
                path: root.to_path_buf(),
            });
        }
        Ok(Self {
            root: root.to_path_buf(),
        })
    }

    /// Records `relative` (`/`-separated, inside the folder) in the manifest as a file of this
    /// run, and returns its path, its folder created.
    ///
    /// # Errors
    ///
    /// [`TrainError::Io`] when the manifest cannot be written or the folder created.
    pub fn claim(&self, relative: &str) -> Result<PathBuf, TrainError> {
        let path = inside(&self.root, relative)
            .expect("the program names its own files inside the run folder");
        let mut manifest = Manifest::read(&self.root)?;
        if manifest.files.insert(relative.to_string()) {
            manifest.write(&self.root)?;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| TrainError::io("creating", parent, e))?;
        }
        Ok(path)
    }

    /// Records every file of the checkpoint of `step` in the manifest, before it is written.
    ///
    /// # Errors
    ///
    /// As [`claim`](Self::claim).
    pub fn claim_checkpoint(&self, step: usize) -> Result<(), TrainError> {
        let folder = format!(
            "{}/{}",
            checkpoint::CHECKPOINTS,
            checkpoint::folder_name(step)
        );
        for file in checkpoint::FILES {
            self.claim(&format!("{folder}/{file}"))?;
        }
        self.claim(&format!(
            "{}/{}",
            checkpoint::CHECKPOINTS,
            checkpoint::LATEST
        ))?;
        Ok(())
    }

    /// Writes `metrics.csv` and `timings.csv`.
    ///
    /// # Errors
    ///
    /// [`TrainError::Io`] when they cannot be written.
    pub fn write_metrics(&self, log: &MetricsLog) -> Result<(), TrainError> {
        self.claim(TIMINGS_FILE)?;
        log.write_csv(&self.claim(METRICS_FILE)?)
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

    /// `loss.png`, recorded in the manifest.
    ///
    /// # Errors
    ///
    /// As [`claim`](Self::claim).
    pub fn loss_plot(&self) -> Result<PathBuf, TrainError> {
        self.claim(LOSS_PLOT)
    }

    /// `accuracy.png`, recorded in the manifest.
    ///
    /// # Errors
    ///
    /// As [`claim`](Self::claim).
    pub fn accuracy_plot(&self) -> Result<PathBuf, TrainError> {
        self.claim(ACCURACY_PLOT)
    }

    /// `attention/layer<layer>-head<head>.png`, recorded in the manifest, its folder created if
    /// missing.
    ///
    /// # Errors
    ///
    /// As [`claim`](Self::claim).
    pub fn head_heatmap(&self, layer: usize, head: usize) -> Result<PathBuf, TrainError> {
        self.claim(&format!("{ATTENTION_DIR}/layer{layer}-head{head}.png"))
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
        let path = self.claim(CONFIG_FILE)?;
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

    fn temp_root(name: &str) -> PathBuf {
        let root =
            std::env::temp_dir().join(format!("attn-train-run-dir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        root
    }

    #[test]
    fn a_fresh_run_refuses_a_folder_with_anything_in_it() {
        let root = temp_root("refuse");
        RunDir::check_fresh(&root, false).expect("a missing folder is fine");
        std::fs::create_dir_all(&root).expect("created");
        RunDir::check_fresh(&root, false).expect("an empty folder is fine");
        std::fs::write(root.join("notes.md"), "mine").expect("written");
        let err = RunDir::check_fresh(&root, false).expect_err("not empty");
        let message = err.to_string();
        assert!(message.contains("notes.md"), "{message}");
        assert!(
            message.contains("--resume") && message.contains("--overwrite"),
            "{message}"
        );
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn overwrite_removes_only_the_files_the_manifest_lists() {
        let root = temp_root("overwrite");
        let old = RunDir::fresh(&root, false).expect("created");
        old.write_config(&TrainConfig::default()).expect("config");
        let heatmap = old.head_heatmap(0, 1).expect("attention folder");
        std::fs::write(&heatmap, "x").expect("heatmap");
        std::fs::write(old.loss_plot().expect("claimed"), "x").expect("plot");
        old.claim_checkpoint(4).expect("claimed");
        let checkpoint = root.join("checkpoints/step-000004");
        std::fs::create_dir_all(&checkpoint).expect("checkpoint folder");
        std::fs::write(checkpoint.join("model.bpk"), "x").expect("model");
        let theirs = [
            root.join("notes.txt"),
            root.join("attention/notes.md"),
            root.join("checkpoints/my-other-model/model.bpk"),
        ];
        for path in &theirs {
            std::fs::create_dir_all(path.parent().expect("inside")).expect("folder");
            std::fs::write(path, "mine").expect("written");
        }

        let fresh = RunDir::fresh(&root, true).expect("overwritten");
        assert!(!heatmap.exists() && !fresh.loss_plot_path_exists());
        assert!(!checkpoint.exists(), "an emptied folder of ours goes");
        assert!(!fresh.config().exists());
        for path in &theirs {
            assert_eq!(
                std::fs::read_to_string(path).expect("kept"),
                "mine",
                "{}",
                path.display()
            );
        }
        assert_eq!(Manifest::read(&root).expect("parses"), Manifest::default());

        // A file at one of the run's places that no run of ours wrote is not overwritten.
        std::fs::write(root.join(METRICS_FILE), "mine").expect("written");
        let err = RunDir::fresh(&root, true).expect_err("not ours");
        assert!(matches!(err, TrainError::NotOurs { .. }), "{err}");
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn manifest_entries_that_leave_the_folder_are_never_removed() {
        let root = temp_root("escape");
        let outside = temp_root("escape-outside");
        std::fs::create_dir_all(&root).expect("created");
        std::fs::create_dir_all(&outside).expect("created");
        let victim = outside.join("keep.txt");
        std::fs::write(&victim, "mine").expect("written");
        let manifest = Manifest {
            files: [
                format!(
                    "../{}/keep.txt",
                    outside.file_name().expect("named").to_string_lossy()
                ),
                victim.display().to_string(),
            ]
            .into(),
        };
        manifest.write(&root).expect("written");
        RunDir::fresh(&root, true).expect("overwritten");
        assert!(victim.is_file());
        for dir in [root, outside] {
            std::fs::remove_dir_all(dir).expect("cleanup");
        }
    }

    impl RunDir {
        fn loss_plot_path_exists(&self) -> bool {
            self.root.join(LOSS_PLOT).exists()
        }
    }
}
