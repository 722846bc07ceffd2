//! The error of this crate: configurations that cannot run, files that cannot be read or
//! written, checkpoints that are corrupt or belong to another run, and a loss that diverged.

use std::path::PathBuf;

use attn_model::ModelError;
use thiserror::Error;

use crate::backend::BackendError;
use crate::tasks::TaskError;

/// Why a run could not start, continue or finish.
#[derive(Debug, Error)]
pub enum TrainError {
    /// A loop or optimizer setting that cannot work.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Task sizes that cannot be generated.
    #[error("invalid task: {0}")]
    Task(TaskError),
    /// The encoder cannot be built or run.
    #[error("model: {0}")]
    Model(ModelError),
    /// A text the `text` task cannot train on.
    #[error(transparent)]
    Text(#[from] crate::text::TextError),
    /// The backend is unknown or not compiled in.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A file or folder could not be read or written.
    ///
    /// The underlying error is part of the message, not a separate cause, so that it is printed
    /// once.
    #[error("{action} {}: {error}", path.display())]
    Io {
        /// What was being done (`"writing"`, `"reading"`, ...).
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// An output folder that holds files already, for a fresh run.
    #[error(
        "{} is not empty ({found}); give another --out, continue that run with `attn resume {}`, \
         or replace the files an earlier run wrote there with --overwrite",
        path.display(),
        path.display()
    )]
    OutNotEmpty {
        /// The folder.
        path: PathBuf,
        /// What is in it, in a few words.
        found: String,
    },
    /// `--overwrite` into a folder where a file this run would write is not one an earlier run
    /// wrote.
    #[error(
        "{} is not a file of an earlier run (its manifest does not list it); move it away, \
         or give another --out",
        path.display()
    )]
    NotOurs {
        /// The file.
        path: PathBuf,
    },
    /// A `metrics.csv` row that does not parse.
    #[error("{} does not parse: {reason}", path.display())]
    BadMetrics {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A checkpoint whose files are missing, truncated or unreadable.
    #[error("checkpoint {} is corrupt or incomplete: {reason}", path.display())]
    CorruptCheckpoint {
        /// The checkpoint folder or file.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
    /// A checkpoint written by a run with a different task, model or seed.
    #[error(
        "checkpoint {} was written for a different run: {differences}",
        path.display()
    )]
    CheckpointMismatch {
        /// The checkpoint folder.
        path: PathBuf,
        /// Each setting that differs, with the saved value and this run's.
        differences: String,
    },
    /// `--resume` asked for fewer steps (or an earlier `--stop-at`) than the checkpoint has done.
    #[error(
        "{what} is {asked}, but the checkpoint {} has done {done} steps already; \
         give at least {done}",
        path.display()
    )]
    FewerStepsThanDone {
        /// `--steps` or `--stop-at`.
        what: &'static str,
        /// The number asked for.
        asked: usize,
        /// Steps the checkpoint has done.
        done: usize,
        /// The checkpoint.
        path: PathBuf,
    },
    /// `--resume` pointed at a folder with no checkpoint in it.
    #[error("no checkpoint to resume from in {}", path.display())]
    NoCheckpoint {
        /// The folder searched.
        path: PathBuf,
    },
    /// The training or held-out loss became NaN or infinite; the run stopped without updating
    /// the weights or writing a checkpoint.
    #[error(
        "training loss is {loss} at step {step}: the run diverged (try a lower --lr or a \
         tighter gradient clip); {}",
        match last_checkpoint {
            Some(p) => format!("the last good checkpoint is {}", p.display()),
            None => "no checkpoint was written before it".to_string(),
        }
    )]
    NonFiniteLoss {
        /// Updates done when the loss was found not finite.
        step: usize,
        /// The loss value.
        loss: f64,
        /// The newest checkpoint written before the divergence, kept untouched.
        last_checkpoint: Option<PathBuf>,
    },
    /// The loss grew past the bound of a diverging run: [`DIVERGENCE_FACTOR`] times the loss of
    /// the first step. The run stopped without writing a checkpoint from these weights.
    #[error(
        "loss is {loss} at step {step}, more than {bound} ({DIVERGENCE_FACTOR} times the first \
         step's loss): the run diverged (try a lower --lr or a tighter gradient clip); {}",
        match last_checkpoint {
            Some(p) => format!("the last good checkpoint is {}", p.display()),
            None => "no checkpoint was written before it".to_string(),
        }
    )]
    LossDiverged {
        /// Updates done when the loss passed the bound.
        step: usize,
        /// The loss value.
        loss: f64,
        /// The bound it passed.
        bound: f64,
        /// The newest checkpoint written before the divergence, kept untouched.
        last_checkpoint: Option<PathBuf>,
    },
    /// A path the run would write or remove that is a symbolic link, goes through one, or is
    /// not a regular file.
    #[error(
        "{} {reason}; a run writes and removes only regular files inside its own folder, never \
         through a link; move it away, or give another --out",
        path.display()
    )]
    UnsafePath {
        /// The link, or what stands where a file or folder should.
        path: PathBuf,
        /// What it is.
        reason: String,
    },
    /// Another process is writing into the run folder.
    #[error(
        "{} is in use by another run (it holds the folder's lock); wait for it to end, or give \
         another --out",
        path.display()
    )]
    Locked {
        /// The run folder.
        path: PathBuf,
    },
    /// A run that would need more memory than the machine has available.
    #[error(
        "this run would need about {need} of memory, but {available} is available; the most \
         goes to {part}; make those smaller"
    )]
    TooLarge {
        /// The estimate ([`crate::budget::estimate`]).
        need: String,
        /// What the machine has available.
        available: String,
        /// The largest part, and the settings that size it.
        part: String,
    },
    /// A plot could not be drawn.
    #[error("drawing {}: {reason}", path.display())]
    Plot {
        /// The image file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

/// A loss larger than this many times the first step's loss stops the run as diverged.
///
/// An untrained model's loss is about `ln(n_classes)`; a hundred times that means confident,
/// wrong predictions everywhere, which no healthy run of these tasks reaches.
pub const DIVERGENCE_FACTOR: f64 = 100.0;

impl TrainError {
    /// An I/O error while doing `action` on `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, error: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            error,
        }
    }
}

impl From<crate::files::Unsafe> for TrainError {
    fn from(e: crate::files::Unsafe) -> Self {
        use crate::files::Unsafe;
        let (path, reason) = match e {
            Unsafe::Link(path) => (path, "is a symbolic link".to_string()),
            Unsafe::NotFile(path) => (path, "is not a regular file or folder here".to_string()),
            Unsafe::Outside(relative) => (PathBuf::from(relative), "leaves the folder".into()),
            Unsafe::Io(path, error) => return Self::io("examining", path, error),
        };
        Self::UnsafePath { path, reason }
    }
}

impl From<(PathBuf, std::io::Error)> for TrainError {
    fn from((path, error): (PathBuf, std::io::Error)) -> Self {
        Self::io("writing", path, error)
    }
}

impl From<TaskError> for TrainError {
    fn from(e: TaskError) -> Self {
        Self::Task(e)
    }
}

impl From<ModelError> for TrainError {
    fn from(e: ModelError) -> Self {
        Self::Model(e)
    }
}
