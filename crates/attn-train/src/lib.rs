//! Training for the `attn` workspace: synthetic sequence tasks, the training loop, checkpoints,
//! metrics and plots, and the choice of backend.
//!
//! This is the only crate of the workspace that picks a device, reads the clock, prints, or
//! touches files. The `attn-train` binary is a thin command line over [`train::run`].
//!
//! ```no_run
//! use attn_train::{config::TrainConfig, tasks::TaskKind, train};
//!
//! let mut config = TrainConfig::default();
//! config.task.kind = TaskKind::Reverse;
//! let summary = train::run(&config, &train::RunOptions::default())?;
//! println!("sequence accuracy {}", summary.final_metrics.sequence_accuracy);
//! # Ok::<(), attn_train::error::TrainError>(())
//! ```

#![warn(missing_docs)]

pub use attn_core::backend;
pub mod checkpoint;
pub mod clip;
pub mod config;
pub mod error;
pub mod metrics;
pub mod plot;
pub mod random;
pub mod schedule;
pub mod tasks;
pub mod train;

pub use config::TrainConfig;
pub use error::TrainError;
pub use train::{RunOptions, RunSummary, run};
