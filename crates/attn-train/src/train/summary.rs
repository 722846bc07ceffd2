//! How a run ends: the final held-out metrics, the plots and heatmaps, the cue attention of
//! the `context` task, and the [`RunSummary`] the binary prints.

use std::path::PathBuf;
use std::time::Instant;

use burn::module::Module;
use burn::nn::loss::CrossEntropyLoss;
use burn::tensor::Device;
use serde::Serialize;

use super::RunOptions;
use crate::checkpoint::TrainState;
use crate::config::TrainConfig;
use crate::error::TrainError;
use crate::evaluate::evaluate;
use crate::inspect;
use crate::metrics::{EvalMetrics, MetricsLog};
use crate::model::Model;
use crate::plot;
use crate::run_dir::RunDir;
use crate::tasks::Batch;

/// What a run did, printed by the binary as one JSON line.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    /// Task name.
    pub task: String,
    /// Backend name.
    pub device: String,
    /// Steps done (equal to the configured steps unless stopped early).
    pub steps: usize,
    /// Held-out metrics after the last step.
    #[serde(rename = "final")]
    pub final_metrics: EvalMetrics,
    /// Seconds since the run started (summed over resumed parts), including evaluation and
    /// writing files.
    pub wall_seconds: f64,
    /// Training tokens per second of training-step time.
    pub tokens_per_second: f64,
    /// The step this part of the run resumed from, if it did.
    pub resumed_from: Option<usize>,
    /// `context` only: per layer, the mean over held-out examples of the largest weight any
    /// head gives from the ambiguous word to its cue (a uniform head would give `1 / seq_len`).
    pub cue_attention: Option<Vec<f64>>,
    /// The output folder, if any.
    pub out: Option<PathBuf>,
    /// The run stopped early because [`RunOptions::interrupt`] was raised.
    pub interrupted: bool,
    /// The newest checkpoint written or resumed from, if any.
    pub last_checkpoint: Option<PathBuf>,
    /// Every evaluation of the run, in step order (not printed).
    #[serde(skip)]
    pub history: MetricsLog,
}

/// What the loop leaves behind when it stops.
pub(super) struct Ended {
    /// The trained model (on the autodiff device).
    pub model: Model,
    /// The loop's state after its last step.
    pub state: TrainState,
    /// Every evaluation of the run.
    pub log: MetricsLog,
    /// The step this part of the run resumed from, if it did.
    pub resumed_from: Option<usize>,
    /// The newest checkpoint written or resumed from.
    pub last_checkpoint: Option<PathBuf>,
    /// The run folder, if any.
    pub run_dir: Option<RunDir>,
    /// The run stopped because it was asked to.
    pub interrupted: bool,
    /// Seconds of training steps over the whole run (resumed parts included).
    pub train_seconds: f64,
    /// Wall seconds of the earlier parts of a resumed run.
    pub wall_before: f64,
    /// When this part of the run started.
    pub started: Instant,
}

/// The final metrics (the last logged row's, or a fresh evaluation), the plots and heatmaps
/// (unless skipped or interrupted), the cue attention, and the summary of the run.
pub(super) fn summarize(
    config: &TrainConfig,
    options: &RunOptions,
    ended: Ended,
    eval_set: &[Batch],
    loss_fn: &CrossEntropyLoss,
    device: &Device,
) -> Result<RunSummary, TrainError> {
    let task = &config.task;
    let Ended {
        model,
        state,
        log,
        resumed_from,
        last_checkpoint,
        run_dir,
        interrupted,
        train_seconds,
        wall_before,
        started,
    } = ended;
    let valid = model.valid();
    let final_metrics = match log.last() {
        Some(row) if row.step == state.step => row.eval(),
        _ => evaluate(&valid, task, eval_set, loss_fn, device)?,
    };
    if let Some(dir) = &run_dir
        && !options.skip_plots
        && !interrupted
    {
        plot::loss_curve(&dir.loss_plot()?, &log)?;
        plot::accuracy_curve(&dir.accuracy_plot()?, &log)?;
        inspect::draw_heads(dir, &valid, task, &eval_set[0], device)?;
    }
    let cue_attention = match &valid {
        Model::Encoder(encoder) if task.task().has_cue() => {
            Some(inspect::cue_attention(encoder, task, &eval_set[0], device)?)
        }
        _ => None,
    };

    Ok(RunSummary {
        task: task.kind.to_string(),
        device: config.device.clone(),
        steps: state.step,
        final_metrics,
        wall_seconds: wall_before + started.elapsed().as_secs_f64(),
        tokens_per_second: if train_seconds > 0.0 {
            state.tokens_seen as f64 / train_seconds
        } else {
            0.0
        },
        resumed_from,
        cue_attention,
        out: options.out.clone(),
        interrupted,
        last_checkpoint,
        history: log,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{TRAINING, temp_out, tiny};
    use super::super::{RunOptions, run_on};
    use crate::config::PosName;
    use crate::run_dir::read_config;
    use crate::tasks::TaskKind;

    #[test]
    fn a_translate_run_writes_a_cross_attention_heatmap_per_head() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        let d = &attn_testing::devices()[0];
        let mut config = tiny(d, TaskKind::Translate, 2);
        config.task.seq_len = 4;
        let out = temp_out("cross", d.name);
        let options = RunOptions {
            out: Some(out.clone()),
            ..RunOptions::default()
        };
        run_on(&config, d.device.clone(), &options).expect("trains");
        for f in [
            "attention/layer0-head0.png",
            "attention/cross-layer0-head0.png",
            "attention/cross-layer0-head1.png",
        ] {
            assert!(out.join(f).is_file(), "{f} missing");
        }
        std::fs::remove_dir_all(out).expect("cleanup");
    }

    #[test]
    fn run_writes_metrics_config_plots_and_heatmaps() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        let d = &attn_testing::devices()[0];
        let mut config = tiny(d, TaskKind::Context, 3);
        config.task.seq_len = 6;
        config.model.pos = PosName::Sinusoidal.scheme(6);
        let out = temp_out("files", d.name);
        let options = RunOptions {
            out: Some(out.clone()),
            ..RunOptions::default()
        };
        let summary = run_on(&config, d.device.clone(), &options).expect("trains");
        let cue = summary
            .cue_attention
            .expect("context reports cue attention");
        assert_eq!(cue.len(), 1);
        assert!(cue[0] > 0.0 && cue[0] <= 1.0, "{cue:?}");
        for f in [
            "metrics.csv",
            "config.json",
            "loss.png",
            "accuracy.png",
            "attention/layer0-head0.png",
            "attention/layer0-head1.png",
        ] {
            assert!(out.join(f).is_file(), "{f} missing");
        }
        let back = read_config(&out).expect("config.json parses");
        assert_eq!(back.identity(), config.identity());
        std::fs::remove_dir_all(out).expect("cleanup");
    }
}
