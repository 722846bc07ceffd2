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
    Task(#[from] TaskError),
    /// The encoder cannot be built or run.
    #[error("model: {0}")]
    Model(#[from] ModelError),
    /// The backend is unknown or not compiled in.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A file or folder could not be read or written.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done (`"writing"`, `"reading"`, ...).
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
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
        "checkpoint {} was written for a different run; it has {saved} but this run has {current}",
        path.display()
    )]
    CheckpointMismatch {
        /// The checkpoint folder.
        path: PathBuf,
        /// The saved task, model and seed, as JSON.
        saved: String,
        /// This run's task, model and seed, as JSON.
        current: String,
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
    /// A plot could not be drawn.
    #[error("drawing {}: {reason}", path.display())]
    Plot {
        /// The image file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

impl TrainError {
    /// An I/O error while doing `action` on `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
