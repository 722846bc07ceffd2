//! Training for the `attn` workspace: synthetic sequence tasks, the training loop, checkpoints,
//! metrics and plots, and the choice of backend.
//!
//! Training alone: generation, chat and the explorer are `attn-infer`'s, and the `attn` program
//! (`attn-cli`) is a thin command line over [`train::run`] and [`train::resume`], its flags
//! [`config::Overrides`] of a [`TrainConfig`].
//!
//! One module per job:
//!
//! - [`tasks`]: the synthetic tasks and the `text` task, and where the `context` task's cue
//!   stands;
//! - [`text`]: the `text` task's data: files, tokenizers, splits, and text written by a model;
//! - [`model`]: the model a task trains (encoder, decoder-only or encoder-decoder), its
//!   teacher-forced logits and its predictions, generated for the decoders;
//! - [`config`]: the whole configuration, and the command line's overrides of it;
//! - [`train`]: the loop, fresh or resumed;
//! - [`loss`]: the objective, shared by training and evaluation;
//! - [`evaluate`]: the held-out set and a model's loss and accuracies on it;
//! - [`inspect`]: attention weights of every head, heatmaps, cue attention;
//! - [`schedule`]: the learning rate, run by burn's schedulers;
//! - [`clip`]: global-norm gradient clipping;
//! - [`budget`]: the memory a run will take, checked before anything is allocated;
//! - [`adam`]: burn's Adam with its step as one pass on flex;
//! - [`random`]: the run's seeded ChaCha8 streams;
//! - [`metrics`], [`plot`]: what is measured, and its pictures;
//! - [`run_dir`], [`checkpoint`]: what a run writes where, and how it resumes;
//! - [`files`]: files read within a bound, and written whole and never through a link;
//! - `allocator` (with the `mimalloc` feature): the programs' allocator setting.
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
pub mod adam;
#[cfg(feature = "mimalloc")]
pub mod allocator;
pub mod budget;
pub mod checkpoint;
pub mod clip;
pub mod config;
pub mod error;
pub mod evaluate;
pub mod files;
pub mod inspect;
pub mod loss;
pub mod metrics;
pub mod model;
pub mod plot;
mod progress;
pub mod random;
pub mod run_dir;
pub mod schedule;
pub mod tasks;
pub mod text;
pub mod train;

pub use config::TrainConfig;
pub use error::TrainError;
pub use train::{RunOptions, RunSummary, run};
