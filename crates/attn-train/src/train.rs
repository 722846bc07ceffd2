//! The training loop: seeded batches from a task, Adam or AdamW with warm-up and decay,
//! global-norm gradient clipping, dropout while training, evaluation on a held-out set every
//! `eval_every` steps, checkpoints, plots, and resumption from the last checkpoint.
//!
//! One update, for a batch `(x, y)` with `x, y: [batch, seq_len]`:
//!
//! ```text
//! logits = encoder(x)                              [batch, seq_len, n_classes]
//! loss   = mean over scored positions of -log softmax(logits)[y]
//! g      = clip(∇ loss, grad_clip)                 global L2 norm
//! θ      = Adam(θ, g, lr(step))
//! ```
//!
//! Determinism: every random number comes from the run's seed (see [`crate::random`]). Model
//! initialisation and each step's dropout reseed the backend from `(seed, stream, step)`, and the
//! training batches come from a generator whose state the checkpoint stores, so a resumed run
//! repeats an unbroken run's numbers on the same backend. burn's backend generator is global,
//! so two runs must not train at the same time in one process on the same backend.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use attn_model::TokenEncoder;
use burn::module::Module;
use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::{AdamConfig, AdamWConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::checkpoint::{self, TrainState};
use crate::clip::clip_global_norm;
use crate::config::{OptimConfig, OptimizerKind, TrainConfig};
use crate::error::TrainError;
use crate::metrics::{Counts, EvalMetrics, MetricsLog, MetricsRow};
use crate::plot;
use crate::random::{Rng, derive_seed, stream};
use crate::tasks::{Batch, TaskConfig, TaskKind};

/// The configuration file written into (and read back from) the output folder.
pub const CONFIG_FILE: &str = "config.json";
/// The metrics file in the output folder.
pub const METRICS_FILE: &str = "metrics.csv";
/// The folder of attention heatmaps in the output folder.
pub const ATTENTION_DIR: &str = "attention";

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

/// Continues the run whose output folder is `dir`, with the configuration saved there;
/// `steps` (when given) replaces the saved number of steps, which also stretches the schedule.
///
/// # Errors
///
/// As [`run`], plus [`TrainError::NoCheckpoint`] when `dir` holds no checkpoint.
pub fn resume(
    dir: &Path,
    steps: Option<usize>,
    options: &RunOptions,
) -> Result<RunSummary, TrainError> {
    let mut config = read_config(dir)?;
    if let Some(steps) = steps {
        config.steps = steps;
    }
    let options = RunOptions {
        out: Some(dir.to_path_buf()),
        resume: true,
        ..options.clone()
    };
    run(&config, &options)
}

/// Reads `config.json` from an output folder.
///
/// # Errors
///
/// [`TrainError::Io`] when it cannot be read, [`TrainError::Config`] when it does not parse.
pub fn read_config(dir: &Path) -> Result<TrainConfig, TrainError> {
    let path = dir.join(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| TrainError::io("reading", &path, e))?;
    TrainConfig::from_json(&text)
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

    let fresh_model = || -> Result<TokenEncoder, TrainError> {
        train_device.seed(derive_seed(config.seed, stream::INIT));
        Ok(config.encoder_config().init(&train_device)?)
    };
    let mut model = fresh_model()?;
    let mut optim = optimizer(&config.optim);
    let mut state = TrainState {
        step: 0,
        train_rng: Rng::new(derive_seed(config.seed, stream::TRAIN)),
        wall_seconds: 0.0,
        train_seconds: 0.0,
        tokens_seen: 0,
        run: config.identity(),
    };
    let mut train_seconds_before = 0.0;
    let mut log = MetricsLog::default();
    let mut resumed_from = None;
    let mut last_checkpoint = None;

    if let Some(out) = &options.out {
        std::fs::create_dir_all(out).map_err(|e| TrainError::io("creating", out, e))?;
        if options.resume {
            let dir = checkpoint::latest(out)?
                .ok_or_else(|| TrainError::NoCheckpoint { path: out.clone() })?;
            let loaded = checkpoint::load(&dir, model, optim, &config.identity())?;
            (model, optim, state) = (loaded.model, loaded.optim, loaded.state);
            resumed_from = Some(state.step);
            train_seconds_before = state.train_seconds;
            let metrics = out.join(METRICS_FILE);
            if metrics.exists() {
                log = MetricsLog::read_csv(&metrics)?;
                log.truncate_after(state.step);
            }
            last_checkpoint = Some(dir);
        } else {
            clear_previous_run(out)?;
        }
        let json = serde_json::to_string_pretty(config).expect("TrainConfig is plain data");
        let path = out.join(CONFIG_FILE);
        std::fs::write(&path, json).map_err(|e| TrainError::io("writing", &path, e))?;
    }

    let eval_set = eval_set(config);
    let end = options
        .stop_at
        .map_or(config.steps, |s| s.min(config.steps));
    let schedule = config.schedule();
    let progress = Progress::new(options.progress, state.step, config.steps);
    let tokens_per_batch = (config.batch_size * task.seq_len) as u64;

    let mut loss_sum = 0.0;
    let mut loss_count = 0usize;
    let mut train_time = 0.0;
    let wall_before = state.wall_seconds;

    while state.step < end {
        let step = state.step;
        let lr = schedule.at(step);
        let batch = task.batch(config.batch_size, &mut state.train_rng);
        let tick = Instant::now();

        // Dropout draws from the backend's generator: reseeding it per step makes the masks a
        // function of (seed, step), whatever ran before.
        train_device.seed(derive_seed(config.seed ^ step as u64, stream::DROPOUT));
        let logits = model.forward(batch.tokens_tensor(&train_device)); // [batch, seq_len, n_classes]
        let loss = token_loss(&loss_fn, logits, batch.targets_tensor(&train_device));
        let loss_value = scalar(loss.clone())?;
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
        let checkpoint_due = options.out.is_some()
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
            if let Some(out) = &options.out {
                log.write_csv(&out.join(METRICS_FILE))?;
            }
        }
        if let Some(out) = &options.out
            && checkpoint_due
        {
            state.wall_seconds = wall_before + started.elapsed().as_secs_f64();
            state.train_seconds = train_seconds_before + train_time;
            last_checkpoint = Some(checkpoint::save(out, &model, &optim, &state)?);
        }
    }
    progress.finish();

    let valid = model.valid();
    let final_metrics = match log.last() {
        Some(row) if row.step == state.step => row.eval(),
        _ => evaluate(&valid, task, &eval_set, &loss_fn, &device)?,
    };
    if let Some(out) = &options.out
        && !options.skip_plots
    {
        draw_plots(out, &valid, task, &eval_set, &log, &device)?;
    }
    let cue_attention = match task.kind {
        TaskKind::Context => Some(cue_attention(&valid, &eval_set[0], &device)?),
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

/// Cross-entropy over classes that skips the task's ignored class, if it has one.
fn loss_function(task: &TaskConfig, device: &Device) -> CrossEntropyLoss {
    CrossEntropyLossConfig::new()
        .with_pad_tokens(task.ignored_class().map(|c| vec![c]))
        .init(device)
}

/// Mean cross-entropy per scored position.
///
/// # Shapes
///
/// - logits: `[batch, seq_len, n_classes]`
/// - targets: `[batch, seq_len]`
/// - output: `[1]`
fn token_loss(loss_fn: &CrossEntropyLoss, logits: Tensor<3>, targets: Tensor<2, Int>) -> Tensor<1> {
    let [batch, seq_len, n_classes] = logits.dims();
    let logits = logits.reshape([batch * seq_len, n_classes]); // [batch * seq_len, n_classes]
    let targets = targets.reshape([batch * seq_len]); // [batch * seq_len]
    loss_fn.forward(logits, targets)
}

/// Reads a one-element tensor back to the host.
fn scalar(t: Tensor<1>) -> Result<f64, TrainError> {
    t.try_into_scalar::<f32>().map(f64::from).map_err(|e| {
        TrainError::Config(format!("cannot read the loss back from the device: {e:?}"))
    })
}

/// The held-out set: `eval_sequences` examples from their own stream, in batches.
fn eval_set(config: &TrainConfig) -> Vec<Batch> {
    let mut rng = Rng::new(derive_seed(config.seed, stream::EVAL));
    let chunk = config.batch_size.max(256);
    let mut left = config.eval_sequences;
    let mut batches = Vec::new();
    while left > 0 {
        let n = left.min(chunk);
        batches.push(config.task.batch(n, &mut rng));
        left -= n;
    }
    batches
}

/// Loss and accuracies of `model` (in evaluation mode: no dropout) on `eval_set`.
///
/// # Errors
///
/// [`TrainError::Config`] when results cannot be read back from the device.
pub fn evaluate(
    model: &TokenEncoder,
    task: &TaskConfig,
    eval_set: &[Batch],
    loss_fn: &CrossEntropyLoss,
    device: &Device,
) -> Result<EvalMetrics, TrainError> {
    let mut counts = Counts::default();
    for batch in eval_set {
        let logits = model.forward(batch.tokens_tensor(device)); // [batch, seq_len, n_classes]
        let predictions = logits.clone().argmax(2).squeeze_dim::<2>(2); // [batch, seq_len]
        let loss = scalar(token_loss(loss_fn, logits, batch.targets_tensor(device)))?;
        let predictions = predictions
            .into_data()
            .try_into_vec_as::<i64>()
            .map_err(|e| TrainError::Config(format!("cannot read predictions back: {e:?}")))?;
        counts.add(Counts::score(
            &predictions,
            batch,
            loss,
            task.ignored_class(),
        ));
    }
    Ok(counts.metrics())
}

/// Per layer, attention weights `[n_heads, seq_len, seq_len]` of one sequence, row-major.
fn attention_maps(
    model: &TokenEncoder,
    tokens: &[i64],
    device: &Device,
) -> Result<Vec<(usize, Vec<f32>)>, TrainError> {
    let seq_len = tokens.len();
    let one = Batch {
        batch: 1,
        seq_len,
        tokens: tokens.to_vec(),
        targets: vec![0; seq_len],
    };
    let (_, weights) = model.forward_with_weights(one.tokens_tensor(device))?;
    weights
        .into_iter()
        .map(|w| {
            let [_, n_heads, _, _] = w.dims(); // [1, n_heads, seq_len, seq_len]
            let values = w.into_data().try_into_vec_as::<f32>().map_err(|e| {
                TrainError::Config(format!("cannot read attention weights back: {e:?}"))
            })?;
            Ok((n_heads, values))
        })
        .collect()
}

/// Per layer, the mean over `batch`'s sequences of the largest weight any head puts on the cue
/// from the ambiguous word. Meaningful for the `context` task only.
fn cue_attention(
    model: &TokenEncoder,
    batch: &Batch,
    device: &Device,
) -> Result<Vec<f64>, TrainError> {
    let seq_len = batch.seq_len;
    let n = batch.batch.min(64);
    let mut sums: Vec<f64> = Vec::new();
    for b in 0..n {
        let tokens = batch.sequence(b);
        let targets = &batch.targets[b * seq_len..(b + 1) * seq_len];
        let Some(apple) = targets
            .iter()
            .position(|&t| t != crate::tasks::IGNORED as i64)
        else {
            continue;
        };
        // Cue words are the ids right after the ambiguous word (see tasks.rs).
        let Some(cue) = tokens.iter().position(|&t| (1..=10).contains(&t)) else {
            continue;
        };
        let maps = attention_maps(model, tokens, device)?;
        sums.resize(maps.len(), 0.0);
        for (layer, (n_heads, w)) in maps.iter().enumerate() {
            let best = (0..*n_heads)
                .map(|h| w[(h * seq_len + apple) * seq_len + cue])
                .fold(0.0_f32, f32::max);
            sums[layer] += f64::from(best);
        }
    }
    Ok(sums.into_iter().map(|s| s / n.max(1) as f64).collect())
}

/// `loss.png`, `accuracy.png` and one heatmap per layer and head on the first held-out example.
fn draw_plots(
    out: &Path,
    model: &TokenEncoder,
    task: &TaskConfig,
    eval_set: &[Batch],
    log: &MetricsLog,
    device: &Device,
) -> Result<(), TrainError> {
    plot::loss_curve(&out.join("loss.png"), log)?;
    plot::accuracy_curve(&out.join("accuracy.png"), log)?;
    let dir = out.join(ATTENTION_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| TrainError::io("creating", &dir, e))?;
    let tokens = eval_set[0].sequence(0);
    let names: Vec<String> = tokens.iter().map(|&t| task.token_name(t)).collect();
    let seq_len = tokens.len();
    for (layer, (n_heads, weights)) in attention_maps(model, tokens, device)?
        .into_iter()
        .enumerate()
    {
        for head in 0..n_heads {
            let w = &weights[head * seq_len * seq_len..(head + 1) * seq_len * seq_len];
            let title = format!("{}: layer {layer}, head {head}", task.kind);
            plot::heatmap(
                &dir.join(format!("layer{layer}-head{head}.png")),
                &title,
                w,
                &names,
            )?;
        }
    }
    Ok(())
}

/// Removes what an earlier run left in `out` (only this crate's own files), so that a fresh run
/// never mixes its checkpoints or metrics with another's.
fn clear_previous_run(out: &Path) -> Result<(), TrainError> {
    for dir in [checkpoint::CHECKPOINTS, ATTENTION_DIR] {
        let path = out.join(dir);
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(|e| TrainError::io("removing", &path, e))?;
        }
    }
    for file in [METRICS_FILE, "loss.png", "accuracy.png"] {
        let path = out.join(file);
        if path.exists() {
            std::fs::remove_file(&path).map_err(|e| TrainError::io("removing", &path, e))?;
        }
    }
    Ok(())
}

/// The progress bar, or plain lines at each evaluation when stderr is not a terminal.
struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
    total: usize,
}

impl Progress {
    fn new(enabled: bool, start: usize, total: usize) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = (enabled && terminal).then(|| {
            let bar = ProgressBar::new(total as u64);
            let style = ProgressStyle::with_template(
                "{bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_position(start as u64);
            bar
        });
        Self {
            bar,
            lines: enabled && !terminal,
            total,
        }
    }

    fn step(&self, step: usize, loss: f64) {
        if let Some(bar) = &self.bar {
            bar.set_position(step as u64);
            if step.is_multiple_of(10) {
                let msg = bar.message();
                let acc = msg.split_once(" | ").map_or("", |(_, acc)| acc).to_string();
                bar.set_message(format!("loss {loss:.4} | {acc}"));
            }
        }
    }

    fn eval(&self, row: &MetricsRow) {
        let acc = format!(
            "held-out loss {:.4} token acc {:.1}% seq acc {:.1}%",
            row.eval_loss,
            100.0 * row.eval_token_accuracy,
            100.0 * row.eval_sequence_accuracy
        );
        if let Some(bar) = &self.bar {
            bar.set_message(format!("loss {:.4} | {acc}", row.train_loss));
        } else if self.lines {
            eprintln!(
                "step {}/{} train loss {:.4} {acc} lr {:.2e} ({:.0}s)",
                row.step, self.total, row.train_loss, row.lr, row.wall_seconds
            );
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use attn_testing::{TestDevice, for_each_device};

    use super::*;
    use crate::config::PosName;

    /// burn's random generator is global per backend: training runs take turns.
    static TRAINING: Mutex<()> = Mutex::new(());

    fn tiny(d: &TestDevice, kind: TaskKind, steps: usize) -> TrainConfig {
        let mut c = TrainConfig {
            task: TaskConfig {
                kind,
                seq_len: 5,
                vocab: 3,
                min_distance: 1,
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
