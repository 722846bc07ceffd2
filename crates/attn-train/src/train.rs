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

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::Module;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::{AdamConfig, AdamWConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::Device;
use serde::Serialize;

use crate::checkpoint::{self, TrainState};
use crate::clip::clip_global_norm;
use crate::config::{OptimConfig, OptimizerKind, Overrides, TrainConfig};
use crate::error::TrainError;
use crate::evaluate::{eval_set, evaluate};
use crate::inspect;
use crate::loss::{loss_function, token_loss, value_of};
use crate::metrics::{EvalMetrics, MetricsLog, MetricsRow};
use crate::model::Model;
use crate::plot;
use crate::progress::Progress;
use crate::random::{self, Rng, Stream};
use crate::run_dir::{self, RunDir};
use crate::schedule::Scheduler;
use crate::tasks::TaskKind;

/// How to run, beyond the configuration itself.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Folder for `metrics.csv`, `config.json`, checkpoints and plots; `None` writes nothing
    /// (and so can neither checkpoint nor resume).
    pub out: Option<PathBuf>,
    /// Continue from the newest checkpoint in `out` instead of starting afresh.
    pub resume: bool,
    /// Stop after this many steps (checkpointing there) although the schedule spans
    /// `config.steps`: an interrupted run, to be resumed later.
    pub stop_at: Option<usize>,
    /// Show a progress bar on stderr (plain lines at each evaluation when stderr is not a
    /// terminal).
    pub progress: bool,
    /// Skip the PNG plots (they take a moment; tests do not need them).
    pub skip_plots: bool,
}

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
    /// Every evaluation of the run, in step order (not printed).
    #[serde(skip)]
    pub history: MetricsLog,
}

/// Trains on the backend named by `config.device`.
///
/// # Errors
///
/// Any [`TrainError`]: a bad configuration, an unknown backend, file trouble, a corrupt or
/// mismatched checkpoint when resuming, or a loss that is not finite.
pub fn run(config: &TrainConfig, options: &RunOptions) -> Result<RunSummary, TrainError> {
    let device = crate::backend::device(&config.device)?;
    run_on(config, device, options)
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

/// Where a run starts: afresh, or from the newest checkpoint of its folder.
struct Start {
    model: Model,
    optim: ModuleOptimizer,
    scheduler: Scheduler,
    state: TrainState,
    log: MetricsLog,
    resumed_from: Option<usize>,
    last_checkpoint: Option<PathBuf>,
    run_dir: Option<RunDir>,
}

/// Builds the model, optimizer and scheduler, then loads the newest checkpoint into them when
/// resuming, and prepares the run folder (cleared for a fresh run) with `config.json` in it.
fn start(
    config: &TrainConfig,
    train_device: &Device,
    options: &RunOptions,
) -> Result<Start, TrainError> {
    let schedule = config.schedule();
    train_device.seed(random::init_seed(config.seed));
    let mut start = Start {
        model: Model::init(config, train_device)?,
        optim: optimizer(&config.optim),
        scheduler: schedule.scheduler()?,
        state: TrainState {
            step: 0,
            train_rng: Rng::stream(config.seed, Stream::Train),
            schedule,
            wall_seconds: 0.0,
            train_seconds: 0.0,
            tokens_seen: 0,
            run: config.identity(),
        },
        log: MetricsLog::default(),
        resumed_from: None,
        last_checkpoint: None,
        run_dir: None,
    };
    let Some(out) = &options.out else {
        return Ok(start);
    };
    let run_dir = if options.resume {
        let run_dir = RunDir::existing(out)?;
        let path = checkpoint::latest(out)?
            .ok_or_else(|| TrainError::NoCheckpoint { path: out.clone() })?;
        let loaded = checkpoint::load(
            &path,
            start.model,
            start.optim,
            &schedule,
            &config.identity(),
        )?;
        start.model = loaded.model;
        start.optim = loaded.optim;
        start.scheduler = loaded.scheduler;
        // From here on the scheduler follows this run's schedule, whatever the checkpoint's was.
        start.state = TrainState {
            schedule,
            ..loaded.state
        };
        start.resumed_from = Some(start.state.step);
        if run_dir.metrics().exists() {
            start.log = MetricsLog::read_csv(&run_dir.metrics())?;
            start.log.truncate_after(start.state.step);
        }
        start.last_checkpoint = Some(path);
        run_dir
    } else {
        RunDir::fresh(out)?
    };
    run_dir.write_config(config)?;
    start.run_dir = Some(run_dir);
    Ok(start)
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
    config.validate()?;
    let started = Instant::now();
    let task = &config.task;
    let train_device = device.clone().autodiff();
    let loss_fn = loss_function(task, &device);
    let Start {
        mut model,
        mut optim,
        mut scheduler,
        mut state,
        mut log,
        resumed_from,
        mut last_checkpoint,
        run_dir,
    } = start(config, &train_device, options)?;
    let train_seconds_before = state.train_seconds;

    let eval_set = eval_set(config);
    let end = options
        .stop_at
        .map_or(config.steps, |s| s.min(config.steps));
    let progress = Progress::new(options.progress, state.step, config.steps);
    let tokens_per_batch = (config.batch_size * task.model_seq_len()) as u64;

    let mut loss_sum = 0.0;
    let mut loss_count = 0usize;
    let mut train_time = 0.0;
    let wall_before = state.wall_seconds;

    while state.step < end {
        let step = state.step;
        let lr = scheduler.step();
        let batch = task.batch(config.batch_size, &mut state.train_rng);
        let tick = Instant::now();

        // Dropout draws from the backend's generator: reseeding it per step makes the masks a
        // function of (seed, step), whatever ran before.
        train_device.seed(random::dropout_seed(config.seed, step));
        let logits = model.logits(&batch, &train_device)?; // [batch, seq_len, n_classes]
        let loss = token_loss(&loss_fn, logits, batch.targets_tensor(&train_device));
        let loss_value = value_of(loss.clone())?;
        if !loss_value.is_finite() {
            progress.finish();
            return Err(TrainError::NonFiniteLoss {
                step,
                loss: loss_value,
                last_checkpoint,
            });
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let grads = match config.optim.grad_clip {
            Some(max_norm) => clip_global_norm(&model, grads, max_norm).0,
            None => grads,
        };
        model = optim.step(lr, model, grads);

        train_time += tick.elapsed().as_secs_f64();
        state.step += 1;
        state.tokens_seen += tokens_per_batch;
        loss_sum += loss_value;
        loss_count += 1;
        progress.step(state.step, loss_value);

        let done = state.step == end;
        let checkpoint_due = run_dir.is_some()
            && (done
                || (config.checkpoint_every > 0
                    && state.step.is_multiple_of(config.checkpoint_every)));
        // Every checkpoint is evaluated first, so none is written from diverged weights.
        if state.step.is_multiple_of(config.eval_every) || checkpoint_due || done {
            let metrics = evaluate(&model.valid(), task, &eval_set, &loss_fn, &device)?;
            if !metrics.loss.is_finite() {
                progress.finish();
                return Err(TrainError::NonFiniteLoss {
                    step: state.step,
                    loss: metrics.loss,
                    last_checkpoint,
                });
            }
            state.wall_seconds = wall_before + started.elapsed().as_secs_f64();
            let row = MetricsRow {
                step: state.step,
                lr,
                train_loss: loss_sum / loss_count.max(1) as f64,
                eval_loss: metrics.loss,
                eval_token_accuracy: metrics.token_accuracy,
                eval_sequence_accuracy: metrics.sequence_accuracy,
                wall_seconds: state.wall_seconds,
            };
            (loss_sum, loss_count) = (0.0, 0);
            progress.eval(&row);
            log.rows.push(row);
            if let Some(dir) = &run_dir {
                log.write_csv(&dir.metrics())?;
            }
        }
        if let Some(dir) = &run_dir
            && checkpoint_due
        {
            state.wall_seconds = wall_before + started.elapsed().as_secs_f64();
            state.train_seconds = train_seconds_before + train_time;
            let saved = checkpoint::save(dir.root(), &model, &optim, &scheduler, &state)?;
            last_checkpoint = Some(saved);
        }
    }
    progress.finish();

    let valid = model.valid();
    let final_metrics = match log.last() {
        Some(row) if row.step == state.step => row.eval(),
        _ => evaluate(&valid, task, &eval_set, &loss_fn, &device)?,
    };
    if let Some(dir) = &run_dir
        && !options.skip_plots
    {
        plot::loss_curve(&dir.loss_plot(), &log)?;
        plot::accuracy_curve(&dir.accuracy_plot(), &log)?;
        inspect::draw_heads(dir, &valid, task, &eval_set[0], &device)?;
    }
    let cue_attention = match (task.kind, &valid) {
        (TaskKind::Context, Model::Encoder(encoder)) => Some(inspect::cue_attention(
            encoder,
            task,
            &eval_set[0],
            &device,
        )?),
        _ => None,
    };

    let total_train_seconds = train_seconds_before + train_time;
    Ok(RunSummary {
        task: task.kind.to_string(),
        device: config.device.clone(),
        steps: state.step,
        final_metrics,
        wall_seconds: wall_before + started.elapsed().as_secs_f64(),
        tokens_per_second: if total_train_seconds > 0.0 {
            state.tokens_seen as f64 / total_train_seconds
        } else {
            0.0
        },
        resumed_from,
        cue_attention,
        out: options.out.clone(),
        history: log,
    })
}

/// burn's Adam or AdamW from the configuration. Clipping is done by [`clip_global_norm`]
/// before the step, not by burn's per-parameter clipping.
fn optimizer(o: &OptimConfig) -> ModuleOptimizer {
    match o.kind {
        OptimizerKind::Adam => AdamConfig::new()
            .with_beta_1(o.beta_1)
            .with_beta_2(o.beta_2)
            .with_epsilon(o.epsilon)
            .with_weight_decay(
                (o.weight_decay > 0.0).then(|| WeightDecayConfig::new(o.weight_decay as f32)),
            )
            .init(),
        OptimizerKind::Adamw => AdamWConfig::new()
            .with_beta_1(o.beta_1)
            .with_beta_2(o.beta_2)
            .with_epsilon(o.epsilon)
            .with_weight_decay(o.weight_decay as f32)
            .init(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use attn_testing::{TestDevice, for_each_device};

    use super::*;
    use crate::config::PosName;
    use crate::run_dir::{METRICS_FILE, read_config};
    use crate::tasks::TaskConfig;

    /// burn's random generator is global per backend: training runs take turns.
    static TRAINING: Mutex<()> = Mutex::new(());

    fn tiny(d: &TestDevice, kind: TaskKind, steps: usize) -> TrainConfig {
        let mut c = TrainConfig {
            task: TaskConfig {
                kind,
                seq_len: 5,
                vocab: 3,
                min_distance: 1,
                digits: 2,
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
        c.seed = 5;
        c.device = d.name.to_string();
        c
    }

    fn temp_out(name: &str, device: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("attn-train-{name}-{device}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn quiet(out: Option<PathBuf>) -> RunOptions {
        RunOptions {
            out,
            skip_plots: true,
            ..RunOptions::default()
        }
    }

    #[test]
    fn tiny_model_loss_falls() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            let mut config = tiny(d, TaskKind::Copy, 16);
            config.eval_every = 4;
            let summary = run_on(&config, d.device.clone(), &quiet(None)).expect("trains");
            let rows = &summary.history.rows;
            assert_eq!(rows.len(), 4);
            let (first, last) = (rows[0], rows[3]);
            assert!(
                last.train_loss < 0.8 * first.train_loss,
                "train loss {first:?} -> {last:?}"
            );
            assert!(
                last.eval_loss < first.eval_loss,
                "held-out loss {first:?} -> {last:?}"
            );
            assert!(
                summary.final_metrics.token_accuracy > 1.0 / 3.0,
                "{:?}",
                summary.final_metrics
            );
        });
    }

    #[test]
    fn generating_tasks_train_and_their_loss_falls() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            for kind in [TaskKind::Add, TaskKind::Translate] {
                let mut config = tiny(d, kind, 60);
                config.task.seq_len = 4;
                config.model.pos = PosName::Learned.scheme(config.task.model_seq_len());
                config.model.d_model = 16;
                config.model.dropout = 0.0;
                config.batch_size = 16;
                config.eval_every = 15;
                config.eval_sequences = 8;
                let one = TrainConfig {
                    steps: 1,
                    eval_every: 1,
                    ..config.clone()
                };
                let first = run_on(&one, d.device.clone(), &quiet(None)).expect("one step");
                assert_eq!(first.steps, 1);
                let summary = run_on(&config, d.device.clone(), &quiet(None)).expect("trains");
                let rows = &summary.history.rows;
                assert_eq!(rows.len(), 4);
                let (start, end) = (rows[0], rows[3]);
                assert!(
                    end.train_loss < 0.9 * start.train_loss && end.eval_loss < start.eval_loss,
                    "{kind}: {start:?} -> {end:?}"
                );
                let m = summary.final_metrics;
                assert!((0.0..=1.0).contains(&m.token_accuracy), "{kind}: {m:?}");
                assert!(m.sequence_accuracy <= m.token_accuracy, "{kind}: {m:?}");
            }
        });
    }

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
    fn resumed_run_ends_like_an_unbroken_one() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            let mut config = tiny(d, TaskKind::Reverse, 8);
            config.eval_every = 4;
            config.checkpoint_every = 4;

            let whole_dir = temp_out("whole", d.name);
            let whole = run_on(&config, d.device.clone(), &quiet(Some(whole_dir.clone())))
                .expect("unbroken run");

            let split_dir = temp_out("split", d.name);
            let first = RunOptions {
                stop_at: Some(4),
                ..quiet(Some(split_dir.clone()))
            };
            let half = run_on(&config, d.device.clone(), &first).expect("first half");
            assert_eq!(half.steps, 4);
            let second = RunOptions {
                resume: true,
                ..quiet(Some(split_dir.clone()))
            };
            let resumed = run_on(&config, d.device.clone(), &second).expect("second half");
            assert_eq!(resumed.resumed_from, Some(4));
            assert_eq!(resumed.steps, 8);

            let rows = |s: &RunSummary| {
                s.history
                    .rows
                    .iter()
                    .map(|r| (r.step, r.train_loss, r.eval_loss, r.eval_token_accuracy))
                    .collect::<Vec<_>>()
            };
            let (a, b) = (rows(&whole), rows(&resumed));
            assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
            for (x, y) in a.iter().zip(&b) {
                assert_eq!(x.0, y.0);
                assert!(
                    (x.1 - y.1).abs() < 1e-5 && (x.2 - y.2).abs() < 1e-5,
                    "{x:?} vs {y:?}"
                );
                assert_eq!(x.3, y.3);
            }
            // The run really moved between the halves, so equality is not trivial.
            assert_ne!(a[0].2, a[1].2);
            let csv = MetricsLog::read_csv(&split_dir.join(METRICS_FILE)).expect("metrics.csv");
            assert_eq!(csv.rows.len(), 2);
            for dir in [whole_dir, split_dir] {
                std::fs::remove_dir_all(dir).expect("cleanup");
            }
        });
    }

    #[test]
    fn resuming_with_more_steps_stretches_the_schedule() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            let mut config = tiny(d, TaskKind::Reverse, 8);
            config.eval_every = 4;
            config.checkpoint_every = 4;
            let out = temp_out("stretch", d.name);
            let first = RunOptions {
                stop_at: Some(4),
                ..quiet(Some(out.clone()))
            };
            run_on(&config, d.device.clone(), &first).expect("first half");

            config.steps = 12;
            let resume = RunOptions {
                resume: true,
                ..quiet(Some(out.clone()))
            };
            let resumed = run_on(&config, d.device.clone(), &resume).expect("stretched");
            let mut scheduler = config.schedule().scheduler().expect("valid");
            let lrs: Vec<f64> = (0..12).map(|_| scheduler.step()).collect();
            let logged: Vec<(usize, f64)> = resumed
                .history
                .rows
                .iter()
                .map(|r| (r.step, r.lr))
                .collect();
            assert_eq!(logged.len(), 3, "{logged:?}");
            for &(step, lr) in &logged[1..] {
                assert_eq!(lr, lrs[step - 1], "step {step}: {logged:?}");
            }
            std::fs::remove_dir_all(out).expect("cleanup");
        });
    }

    #[test]
    fn diverging_loss_stops_and_keeps_the_last_good_checkpoint() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            let mut config = tiny(d, TaskKind::Copy, 6);
            config.eval_every = 1;
            config.checkpoint_every = 2;
            let out = temp_out("nan", d.name);
            let first = RunOptions {
                stop_at: Some(2),
                ..quiet(Some(out.clone()))
            };
            run_on(&config, d.device.clone(), &first).expect("two good steps");
            let good = checkpoint::latest(&out)
                .expect("readable")
                .expect("a checkpoint");

            // A learning rate beyond f32's range turns the weights infinite (or NaN) at once.
            config.optim.lr = f64::MAX;
            config.optim.warmup_steps = 0;
            let resume = RunOptions {
                resume: true,
                ..quiet(Some(out.clone()))
            };
            let err = run_on(&config, d.device.clone(), &resume).expect_err("diverges");
            match &err {
                TrainError::NonFiniteLoss {
                    step,
                    last_checkpoint,
                    ..
                } => {
                    assert!(*step <= 4, "diverged only at step {step}");
                    assert_eq!(last_checkpoint.as_deref(), Some(good.as_path()));
                }
                other => panic!("expected NonFiniteLoss, got {other}"),
            }
            assert!(err.to_string().contains("step-000002"), "{err}");
            assert_eq!(checkpoint::latest(&out).expect("readable"), Some(good));
            std::fs::remove_dir_all(out).expect("cleanup");
        });
    }

    #[test]
    fn corrupt_or_mismatched_checkpoints_are_clear_errors() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            let config = tiny(d, TaskKind::Copy, 2);
            let out = temp_out("corrupt", d.name);
            run_on(&config, d.device.clone(), &quiet(Some(out.clone()))).expect("trains");
            let resume = RunOptions {
                resume: true,
                ..quiet(Some(out.clone()))
            };

            let mut other = config.clone();
            other.model.d_model = 12;
            other.model.n_heads = 3;
            let err = run_on(&other, d.device.clone(), &resume).expect_err("different model");
            assert!(
                matches!(err, TrainError::CheckpointMismatch { .. }),
                "{err}"
            );

            let dir = checkpoint::latest(&out)
                .expect("readable")
                .expect("a checkpoint");
            std::fs::write(dir.join("model.bpk"), b"not a burnpack file").expect("overwrite");
            let err = run_on(&config, d.device.clone(), &resume).expect_err("corrupt model file");
            assert!(matches!(err, TrainError::CorruptCheckpoint { .. }), "{err}");
            assert!(err.to_string().contains("model.bpk"), "{err}");

            let empty = temp_out("empty", d.name);
            let resume_empty = RunOptions {
                resume: true,
                ..quiet(Some(empty.clone()))
            };
            let err =
                run_on(&config, d.device.clone(), &resume_empty).expect_err("nothing to resume");
            assert!(matches!(err, TrainError::NoCheckpoint { .. }), "{err}");
            for dir in [out, empty] {
                std::fs::remove_dir_all(dir).expect("cleanup");
            }
        });
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
