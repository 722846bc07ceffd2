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
//!
//! Nothing is written or removed through a symbolic link: a link where the run writes, or a
//! linked folder on the way, is refused by name ([`crate::files::inside`]), and files are
//! written whole through a rename ([`crate::files`]). The folder is locked (`flock`) while a
//! run writes into it, so a second run into the same folder is refused.

use std::collections::BTreeSet;
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::checkpoint;
use crate::config::TrainConfig;
use crate::error::TrainError;
use crate::files::{self, Entry};
use crate::metrics::MetricsLog;
pub use crate::metrics::TIMINGS_FILE;

/// The configuration file written into (and read back from) the run folder.
pub const CONFIG_FILE: &str = "config.json";
/// The metrics file in the run folder.
pub const METRICS_FILE: &str = "metrics.csv";
/// The list of the files the program wrote into the run folder.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The most bytes a run folder's manifest may hold.
const MANIFEST_LIMIT: u64 = 64 << 20;
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
        if files::entry(&path).map_err(|e| TrainError::io("examining", &path, e))? == Entry::Missing
        {
            return Ok(Self::default());
        }
        // A regular file of a sensible size only: a FIFO would block, /dev/zero never end.
        let bytes = crate::files::read_bounded(&path, MANIFEST_LIMIT)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| TrainError::Config(format!("{} does not parse: {e}", path.display())))
    }

    fn write(&self, root: &Path) -> Result<(), TrainError> {
        let json = serde_json::to_string_pretty(self).expect("a manifest is plain data");
        Ok(files::write_atomically(
            &root.join(MANIFEST_FILE),
            json.as_bytes(),
        )?)
    }
}

/// The names in the folder `path`.
fn names(path: &Path) -> std::io::Result<Vec<String>> {
    std::fs::read_dir(path)?
        .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect()
}

/// The names in the folder `relative` of `root`; none where it is missing.
fn folder_names(root: &Path, relative: &str) -> Result<Vec<String>, TrainError> {
    let path = root.join(relative);
    match files::entry(&path).map_err(|e| TrainError::io("examining", &path, e))? {
        Entry::Missing => Ok(Vec::new()),
        Entry::Folder => names(&path).map_err(|e| TrainError::io("reading", &path, e)),
        Entry::Link => Err(files::Unsafe::Link(path).into()),
        Entry::File | Entry::Other => Err(files::Unsafe::NotFile(path).into()),
    }
}

/// A run's output folder, locked for as long as this value (or a clone) lives.
#[derive(Clone, Debug)]
pub struct RunDir {
    root: PathBuf,
    /// The folder opened and locked (`flock`), so that a second run into it is refused.
    _lock: Option<Arc<File>>,
}

/// Names in `attention/` that a run writes: `layer<L>-head<H>.png` and
/// `cross-layer<L>-head<H>.png`.
fn heatmap_name(name: &str) -> bool {
    (name.starts_with("layer") || name.starts_with("cross-layer")) && name.ends_with(".png")
}

impl RunDir {
    /// Checks, touching nothing, that a fresh run may write into `root`: it is missing or
    /// empty, or `overwrite` is given and no file this run writes is there unless the manifest
    /// lists it, and nothing it writes or removes is a link or goes through one.
    ///
    /// # Errors
    ///
    /// [`TrainError::OutNotEmpty`] for a folder with something in it and no `overwrite`,
    /// [`TrainError::NotOurs`] for a file in the way that no earlier run wrote,
    /// [`TrainError::UnsafePath`] for a link where the run writes,
    /// [`TrainError::Io`] when the folder cannot be read.
    pub fn check_fresh(root: &Path, overwrite: bool) -> Result<(), TrainError> {
        let mut names = match names(root) {
            Ok(names) => names,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(TrainError::io("reading", root, e)),
        };
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
        files::inside(root, MANIFEST_FILE)?;
        let manifest = Manifest::read(root)?;
        let ours = |relative: &str| -> Result<(), TrainError> {
            let (path, found) = files::inside(root, relative)?;
            if found == Entry::File && !manifest.files.contains(relative) {
                return Err(TrainError::NotOurs { path });
            }
            Ok(())
        };
        for file in FIXED_FILES {
            ours(file)?;
        }
        // The heatmaps, and each checkpoint's files: their names depend on the model and the
        // steps, so every name of that form is checked.
        for name in folder_names(root, ATTENTION_DIR)? {
            if heatmap_name(&name) {
                ours(&format!("{ATTENTION_DIR}/{name}"))?;
            }
        }
        for name in folder_names(root, checkpoint::CHECKPOINTS)? {
            let Some(step) = name.strip_prefix("step-") else {
                continue;
            };
            let folder = format!("{}/{name}", checkpoint::CHECKPOINTS);
            let path = root.join(&folder);
            if let Entry::File | Entry::Other =
                files::entry(&path).map_err(|e| TrainError::io("examining", &path, e))?
            {
                continue;
            }
            for file in folder_names(root, &folder)? {
                let relative = format!("{folder}/{file}");
                if step.ends_with(".partial") && checkpoint::FILES.contains(&file.as_str()) {
                    // A checkpoint being written when a run stopped: only its own files.
                    files::inside(root, &relative)?;
                } else {
                    ours(&relative)?;
                }
            }
        }
        Ok(())
    }

    /// The folder for a fresh run, created if missing and locked. With `overwrite`, the files
    /// that its manifest lists (an earlier run's) are removed, and then the folders they leave
    /// empty; nothing else is, and nothing through a link. Call
    /// [`check_fresh`](Self::check_fresh) first, before anything else is done.
    ///
    /// # Errors
    ///
    /// [`TrainError::Locked`] when another run holds the folder, [`TrainError::Io`] when the
    /// folder cannot be created or an old file removed, and as
    /// [`check_fresh`](Self::check_fresh).
    pub fn fresh(root: &Path, overwrite: bool) -> Result<Self, TrainError> {
        Self::check_fresh(root, overwrite)?;
        std::fs::create_dir_all(root).map_err(|e| TrainError::io("creating", root, e))?;
        let dir = Self::locked(root)?;
        // Checked again under the lock: another run may have written here in between.
        Self::check_fresh(root, overwrite)?;
        let old = Manifest::read(root)?;
        let mut folders = BTreeSet::new();
        for relative in &old.files {
            // A listed path that is a link, passes through one, or leaves the folder is not
            // a file of ours, whatever the manifest says.
            let Ok((path, Entry::File)) = files::inside(root, relative) else {
                continue;
            };
            std::fs::remove_file(&path).map_err(|e| TrainError::io("removing", &path, e))?;
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
        Ok(dir)
    }

    /// Takes back everything this run wrote into its folder, for a run that failed before its
    /// first step: the files its manifest lists, the manifest, this process's temporary files
    /// beside them (`.tmp-PID-…`), the folders that are left empty, and the folder itself when
    /// this run created it (`created`). A file the run did not write is never touched, and a
    /// folder that still holds one stays.
    pub fn discard(self, created: bool) {
        let own_temporary = format!(".tmp-{}-", std::process::id());
        let mut folders = BTreeSet::new();
        folders.insert(self.root.clone());
        if let Ok(manifest) = Manifest::read(&self.root) {
            for relative in &manifest.files {
                if let Ok((path, Entry::File)) = files::inside(&self.root, relative) {
                    let _ = std::fs::remove_file(&path);
                }
                let mut folder = Path::new(relative).parent();
                while let Some(f) = folder
                    && !f.as_os_str().is_empty()
                {
                    if let Ok((path, Entry::Folder)) =
                        files::inside(&self.root, &f.to_string_lossy())
                    {
                        folders.insert(path);
                    }
                    folder = f.parent();
                }
            }
        }
        for folder in &folders {
            let Ok(entries) = std::fs::read_dir(folder) else {
                continue;
            };
            for entry in entries.flatten() {
                let ours = entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(&own_temporary);
                if ours && entry.file_type().is_ok_and(|t| t.is_file()) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let _ = std::fs::remove_file(self.root.join(MANIFEST_FILE));
        // Deepest first; `remove_dir` leaves a folder that is not empty.
        for folder in folders.iter().rev() {
            if folder != &self.root {
                let _ = std::fs::remove_dir(folder);
            }
        }
        if created {
            let _ = std::fs::remove_dir(&self.root);
        }
    }

    /// `root` opened and locked against other runs.
    fn locked(root: &Path) -> Result<Self, TrainError> {
        let handle = File::open(root).map_err(|e| TrainError::io("opening", root, e))?;
        let lock = match handle.try_lock() {
            Ok(()) => Some(Arc::new(handle)),
            Err(TryLockError::WouldBlock) => {
                return Err(TrainError::Locked {
                    path: root.to_path_buf(),
                });
            }
            // A file system without locks: the run goes on unguarded.
            Err(TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => None,
            Err(TryLockError::Error(e)) => return Err(TrainError::io("locking", root, e)),
        };
        Ok(Self {
            root: root.to_path_buf(),
            _lock: lock,
        })
    }

    /// The folder of a run to continue, its files kept, locked.
    ///
    /// # Errors
    ///
    /// [`TrainError::NoCheckpoint`] when the folder is not there, [`TrainError::Locked`] when
    /// another run holds it.
    pub fn existing(root: &Path) -> Result<Self, TrainError> {
        if !root.is_dir() {
            return Err(TrainError::NoCheckpoint {
                path: root.to_path_buf(),
            });
        }
        Self::locked(root)
    }

    /// Records `relative` (`/`-separated, inside the folder) in the manifest as a file of this
    /// run, and returns its path, its folder created.
    ///
    /// # Errors
    ///
    /// [`TrainError::UnsafePath`] when the path is a link or passes through one,
    /// [`TrainError::NotOurs`] when a file the manifest does not list stands there,
    /// [`TrainError::Io`] when the manifest cannot be written or the folder created.
    pub fn claim(&self, relative: &str) -> Result<PathBuf, TrainError> {
        let path = self.record(relative)?;
        if let Some((folder, _)) = relative.rsplit_once('/') {
            files::create_folders(&self.root, folder)?;
        }
        Ok(path)
    }

    /// As [`claim`](Self::claim), without creating the folder.
    fn record(&self, relative: &str) -> Result<PathBuf, TrainError> {
        let (path, found) = files::inside(&self.root, relative)?;
        let mut manifest = Manifest::read(&self.root)?;
        if !manifest.files.contains(relative) {
            if found == Entry::File {
                return Err(TrainError::NotOurs { path });
            }
            manifest.files.insert(relative.to_string());
            manifest.write(&self.root)?;
        }
        Ok(path)
    }

    /// Records every file of the checkpoint of `step` in the manifest, before it is written.
    /// Its folder is not created: it appears whole, renamed from a partial one
    /// ([`checkpoint::save`]).
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
            self.record(&format!("{folder}/{file}"))?;
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
        Ok(files::write_atomically(&path, json.as_bytes())?)
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
            message.contains("attn resume") && message.contains("--overwrite"),
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

        drop(old);
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
        drop(fresh);

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

    #[test]
    fn a_second_run_into_a_locked_folder_is_refused_until_the_first_ends() {
        let root = temp_root("lock");
        let first = RunDir::fresh(&root, false).expect("created");
        let err = RunDir::existing(&root).expect_err("locked");
        assert!(matches!(err, TrainError::Locked { .. }), "{err}");
        assert!(err.to_string().contains("another run"), "{err}");
        drop(first);
        RunDir::existing(&root).expect("free again");
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    #[test]
    fn links_where_the_run_writes_are_refused_and_never_followed() {
        let root = temp_root("links");
        let outside = temp_root("links-outside");
        std::fs::create_dir_all(&outside).expect("created");
        let victim = outside.join("victim.txt");
        std::fs::write(&victim, "precious").expect("written");
        let run = RunDir::fresh(&root, false).expect("created");
        std::fs::write(run.head_heatmap(0, 0).expect("claimed"), "png").expect("written");
        drop(run);

        // The heatmap replaced by a link to a file outside: refused, the file untouched.
        let heatmap = root.join("attention/layer0-head0.png");
        std::fs::remove_file(&heatmap).expect("removed");
        std::os::unix::fs::symlink(&victim, &heatmap).expect("linked");
        let err = RunDir::fresh(&root, true).expect_err("a link");
        assert!(matches!(err, TrainError::UnsafePath { .. }), "{err}");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        std::fs::remove_file(&heatmap).expect("unlinked");

        // The checkpoints folder a link to another folder: refused before anything is removed.
        std::os::unix::fs::symlink(&outside, root.join("checkpoints")).expect("linked");
        let err = RunDir::fresh(&root, true).expect_err("a linked folder");
        assert!(matches!(err, TrainError::UnsafePath { .. }), "{err}");
        std::fs::remove_file(root.join("checkpoints")).expect("unlinked");

        // A listed file reached through a linked folder is not removed.
        std::os::unix::fs::symlink(&outside, root.join("sub")).expect("linked");
        Manifest {
            files: ["sub/victim.txt".to_string()].into(),
        }
        .write(&root)
        .expect("written");
        let run = RunDir::fresh(&root, true).expect("the link is left alone");
        let err = run
            .claim("sub/victim.txt")
            .expect_err("never written through");
        assert!(matches!(err, TrainError::UnsafePath { .. }), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).expect("kept"), "precious");
        drop(run);
        for dir in [root, outside] {
            std::fs::remove_dir_all(dir).expect("cleanup");
        }
    }

    #[test]
    fn a_users_file_in_a_checkpoint_folder_stops_overwrite_before_anything_goes() {
        let root = temp_root("checkpoint-user");
        let run = RunDir::fresh(&root, false).expect("created");
        run.claim_checkpoint(10).expect("claimed");
        let folder = root.join("checkpoints/step-000010");
        assert!(!folder.exists(), "the folder appears whole, when written");
        std::fs::create_dir_all(&folder).expect("created");
        for file in checkpoint::FILES {
            std::fs::write(folder.join(file), "x").expect("written");
        }
        run.write_config(&TrainConfig::default()).expect("written");
        drop(run);
        std::fs::write(folder.join("README.txt"), "mine").expect("written");
        let err = RunDir::fresh(&root, true).expect_err("not ours");
        assert!(
            matches!(&err, TrainError::NotOurs { path } if path.ends_with("README.txt")),
            "{err}"
        );
        assert!(folder.join("model.bpk").exists(), "nothing removed yet");
        std::fs::remove_dir_all(&root).expect("cleanup");
    }

    impl RunDir {
        fn loss_plot_path_exists(&self) -> bool {
            self.root.join(LOSS_PLOT).exists()
        }
    }
}
