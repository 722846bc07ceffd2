//! The training loop: seeded batches from a task, Adam or AdamW with warm-up and decay,
//! global-norm gradient clipping, dropout while training, evaluation on a held-out set every
//! `eval_every` steps, checkpoints, plots, and resumption from the last checkpoint.
//!
//! One update, for a batch `(x, y)` with `x, y: [batch, seq_len]`:
//!
//! ```text
//! logits = model(x)                                [batch, seq_len, n_classes]
//! loss   = mean over scored positions of -log softmax(logits)[y]
//! g      = clip(∇ loss, grad_clip)                 global L2 norm
//! θ      = Adam(θ, g, lr(step))
//! ```
//!
//! The model is the task's ([`crate::model::Model`]): an encoder classifying each position, or a
//! decoder (decoder-only, or reading an encoder's output) trained with teacher forcing, `x` the
//! text and `y` the text shifted by one.
//!
//! The pieces live by job: the objective in [`crate::loss`], the held-out set and its metrics
//! in [`crate::evaluate`], the attention heatmaps and cue weights in [`crate::inspect`], the
//! files in [`crate::run_dir`] and [`crate::checkpoint`], the learning rate in
//! [`crate::schedule`].
//!
//! Determinism: every random number comes from the run's seed (see [`crate::random`]). Model
//! initialisation and each step's dropout reseed the backend from the seed (and the step), and
//! the training batches and the learning-rate scheduler have states that the checkpoint stores,
//! so a resumed run repeats an unbroken run's numbers on the same backend. burn's backend
//! generator is global, so two runs must not train at the same time in one process on the same
//! backend.
//!
//! Safety of a run:
//!
//! - a fresh run writes only into a missing or empty folder, or with `overwrite` removes only
//!   the files of an earlier run ([`crate::run_dir`]), and only once the configuration is
//!   valid;
//! - a checkpoint is due every `checkpoint_every` steps, every `checkpoint_seconds` seconds,
//!   at the end, and when [`RunOptions::interrupt`] is raised, after which the run stops;
//! - the run stops as diverged when a loss is not finite or passes
//!   [`DIVERGENCE_FACTOR`](crate::error::DIVERGENCE_FACTOR) times the first step's loss, and
//!   writes no checkpoint from those weights.
//!
//! One file per job:
//!
//! - this file: the entry points, fresh ([`run`], [`run_on`]) or resumed ([`resume`]);
//! - `options`: how to run beyond the configuration ([`RunOptions`]);
//! - `start`: the model, optimizer and scheduler, built afresh or loaded from a checkpoint;
//! - `run_loop`: the loop ([`run_data_parallel`]), one named step after another;
//! - `update`: one update, on one device ([`update()`]) or shared among several
//!   ([`update_data_parallel`]), and the optimizer ([`optimizer`]);
//! - `checkpoint_policy`: when a step is evaluated, logged and checkpointed;
//! - `divergence`: the guard that stops a run whose loss runs away;
//! - `summary`: the final metrics, plots and [`RunSummary`].

use std::path::Path;

use burn::tensor::Device;

use crate::config::{Overrides, TrainConfig};
use crate::error::TrainError;
use crate::run_dir;

mod checkpoint_policy;
mod divergence;
mod options;
mod run_loop;
mod start;
mod summary;
mod update;

pub use options::RunOptions;
pub use run_loop::run_data_parallel;
pub use summary::RunSummary;
pub use update::{optimizer, update, update_data_parallel};

/// Trains on the backend named by `config.device`.
///
/// # Errors
///
/// Any [`TrainError`]: a bad configuration, an unknown backend, file trouble, a corrupt or
/// mismatched checkpoint when resuming, or a loss that is not finite.
pub fn run(config: &TrainConfig, options: &RunOptions) -> Result<RunSummary, TrainError> {
    let devices = crate::backend::devices(&config.device)?;
    run_data_parallel(config, devices, options)
}

/// Continues the run whose output folder is `dir`, with the configuration saved there changed
/// by `overrides`. A new `steps` stretches (or shortens) the schedule; a new task, model or
/// seed does not fit the checkpoint and is refused.
///
/// # Errors
///
/// As [`run`], plus [`TrainError::NoCheckpoint`] when `dir` holds no checkpoint.
pub fn resume(
    dir: &Path,
    overrides: &Overrides,
    options: &RunOptions,
) -> Result<RunSummary, TrainError> {
    let mut config = run_dir::read_config(dir)?;
    config.apply(overrides)?;
    let options = RunOptions {
        out: Some(dir.to_path_buf()),
        resume: true,
        ..options.clone()
    };
    run(&config, &options)
}

/// Trains on `device` (without autodiff; the loop adds it). `config.device` only labels the run.
///
/// # Errors
///
/// As [`run`].
pub fn run_on(
    config: &TrainConfig,
    device: Device,
    options: &RunOptions,
) -> Result<RunSummary, TrainError> {
    run_data_parallel(config, vec![device], options)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::PathBuf;
    use std::sync::Mutex;

    use attn_testing::{TestDevice, for_each_device};

    use super::*;
    use crate::config::PosName;
    use crate::tasks::{TaskConfig, TaskKind};

    /// Sets every weight to NaN.
    pub(crate) struct Poison;

    impl burn::module::ModuleMapper for Poison {
        fn map_float<const D: usize>(
            &mut self,
            param: burn::module::Param<burn::tensor::Tensor<D>>,
        ) -> burn::module::Param<burn::tensor::Tensor<D>> {
            param.map(|weights| weights.mul_scalar(f32::NAN))
        }
    }

    /// burn's random generator is global per backend: training runs take turns.
    pub(crate) static TRAINING: Mutex<()> = Mutex::new(());

    pub(super) fn tiny(d: &TestDevice, kind: TaskKind, steps: usize) -> TrainConfig {
        let mut c = TrainConfig {
            task: TaskConfig {
                kind,
                seq_len: 5,
                vocab: 3,
                min_distance: 1,
                digits: 2,
                ..TaskConfig::default()
            },
            ..TrainConfig::default()
        };
        c.model.d_model = 8;
        c.model.n_heads = 2;
        c.model.n_layers = 1;
        c.model.d_ff = 12;
        c.model.dropout = 0.1;
        c.model.pos = PosName::Learned.scheme(5);
        c.optim.lr = 1e-2;
        c.optim.warmup_steps = 2;
        c.steps = steps;
        c.batch_size = 6;
        c.eval_every = steps;
        c.eval_sequences = 6;
        c.checkpoint_every = 0;
        // No checkpoints by the clock: on a slow device a timed one would add checkpoints that
        // a test counting them, or corrupting the newest, does not expect.
        c.checkpoint_seconds = 0.0;
        c.seed = 5;
        c.device = d.name.to_string();
        c
    }

    pub(super) fn temp_out(name: &str, device: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("attn-train-{name}-{device}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    pub(super) fn quiet(out: Option<PathBuf>) -> RunOptions {
        RunOptions {
            out,
            skip_plots: true,
            ..RunOptions::default()
        }
    }

    /// Each evaluation's step, training loss, held-out loss and token accuracy.
    pub(super) fn losses(summary: &RunSummary) -> Vec<(usize, f64, f64, f64)> {
        summary
            .history
            .rows
            .iter()
            .map(|r| (r.step, r.train_loss, r.eval_loss, r.eval_token_accuracy))
            .collect()
    }

    #[test]
    fn data_parallel_runs_with_dropout_repeat_and_bad_device_lists_are_refused() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            let config = tiny(d, TaskKind::Copy, 4); // dropout 0.1
            let twice = || {
                let devices = vec![d.device.clone(); 2];
                losses(&run_data_parallel(&config, devices, &quiet(None)).expect("trains"))
            };
            assert_eq!(twice(), twice());

            let mut config = tiny(d, TaskKind::Copy, 2);
            config.batch_size = 2;
            config.device = [d.name; 3].join(",");
            let err = run(&config, &quiet(None)).expect_err("3 replicas, 2 sequences");
            let message = err.to_string();
            assert!(
                message.contains("batch_size 2") && message.contains("3 devices"),
                "{message}"
            );
            config.device = format!("{},", d.name);
            let err = run(&config, &quiet(None)).expect_err("an empty entry");
            assert!(err.to_string().contains("empty entry"), "{err}");
        });
    }
}
