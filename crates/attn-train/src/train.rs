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
//!   [`DIVERGENCE_FACTOR`] times the first step's loss, and
//!   writes no checkpoint from those weights.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::loss::CrossEntropyLoss;
use burn::optim::{AdamWConfig, GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor};
use serde::Serialize;

use crate::adam::FusedAdam;
use crate::checkpoint::{self, TrainState};
use crate::clip::clip_global_norm;
use crate::config::{OptimConfig, OptimizerKind, Overrides, TrainConfig};
use crate::error::{DIVERGENCE_FACTOR, TrainError};
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
use crate::tasks::{Batch, TaskKind};

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
    /// A fresh run may reuse a folder that is not empty, removing the files its manifest lists
    /// (an earlier run's) and nothing else.
    pub overwrite: bool,
    /// Raised (by a signal handler, say) to stop the run: the step under way finishes, a
    /// checkpoint is written, and the run returns with [`RunSummary::interrupted`] set.
    pub interrupt: Option<Arc<AtomicBool>>,
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
    /// The run stopped early because [`RunOptions::interrupt`] was raised.
    pub interrupted: bool,
    /// The newest checkpoint written or resumed from, if any.
    pub last_checkpoint: Option<PathBuf>,
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
            loss_sum: 0.0,
            loss_count: 0,
            first_loss: None,
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
        let (path, skipped) = checkpoint::newest_intact(out)?;
        for skip in &skipped {
            eprintln!(
                "skipping checkpoint {}: {}",
                skip.path.display(),
                skip.error
            );
        }
        if !skipped.is_empty() {
            eprintln!(
                "resuming from {}, the newest intact checkpoint",
                path.display()
            );
        }
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
        let done = start.state.step;
        for (what, asked) in [
            ("--steps", Some(config.steps)),
            ("--stop-at", options.stop_at),
        ] {
            if let Some(asked) = asked
                && asked < done
            {
                return Err(TrainError::FewerStepsThanDone {
                    what,
                    asked,
                    done,
                    path: path.clone(),
                });
            }
        }
        start.resumed_from = Some(done);
        if run_dir.metrics().exists() {
            start.log = MetricsLog::read_csv(&run_dir.metrics())?;
            start.log.truncate_after(start.state.step);
        }
        start.last_checkpoint = Some(path);
        run_dir
    } else {
        RunDir::fresh(out, options.overwrite)?
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
    run_data_parallel(config, vec![device], options)
}

/// Trains one replica of the model on each of `devices` (without autodiff; the loop adds it),
/// every update through [`update_data_parallel`]: the first device holds the model, the
/// optimizer, evaluation and checkpoints, and the run's numbers are those of the whole batch
/// on that device alone, up to the order of floating-point sums. One device is [`run_on`].
/// `config.device` only labels the run.
///
/// With dropout, the shares run one after another, each drawing its masks from its device's
/// generator reseeded from `(seed, step, share)`, so a resumed run still repeats an unbroken one.
///
/// # Errors
///
/// As [`run`]; [`TrainError::Config`] when `devices` is empty or outnumbers the batch's rows.
pub fn run_data_parallel(
    config: &TrainConfig,
    devices: Vec<Device>,
    options: &RunOptions,
) -> Result<RunSummary, TrainError> {
    config.validate()?;
    let Some(device) = devices.first().cloned() else {
        return Err(TrainError::Config("no device to train on".into()));
    };
    if devices.len() > config.batch_size {
        return Err(TrainError::Config(format!(
            "batch_size {} is smaller than the {} devices to train on: each replica needs at \
             least one sequence",
            config.batch_size,
            devices.len()
        )));
    }
    let replica_devices: Vec<Device> = devices.iter().map(|d| d.clone().autodiff()).collect();
    if options.stop_at == Some(0) {
        return Err(TrainError::Config(
            "--stop-at is 0; it must be at least 1 (a run stopped before its first step has \
             nothing to checkpoint)"
                .into(),
        ));
    }
    // Before anything is built or written: a fresh run's folder must be free.
    if let Some(out) = &options.out
        && !options.resume
    {
        RunDir::check_fresh(out, options.overwrite)?;
    }
    let started = Instant::now();
    let task = &config.task;
    let train_device = replica_devices[0].clone(); // holds the model and the optimizer
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

    let mut train_time = 0.0;
    let wall_before = state.wall_seconds;
    let mut since_checkpoint = Instant::now();
    let mut interrupted = false;
    let diverged = |step: usize, loss: f64, first: Option<f64>, last: &Option<PathBuf>| {
        let bound = first.map(|f| DIVERGENCE_FACTOR * f);
        if !loss.is_finite() {
            Some(TrainError::NonFiniteLoss {
                step,
                loss,
                last_checkpoint: last.clone(),
            })
        } else if let Some(bound) = bound
            && loss > bound
        {
            Some(TrainError::LossDiverged {
                step,
                loss,
                bound,
                last_checkpoint: last.clone(),
            })
        } else {
            None
        }
    };

    while state.step < end {
        let step = state.step;
        let lr = scheduler.step();
        let batch = task.batch(config.batch_size, &mut state.train_rng);
        let tick = Instant::now();

        // Dropout draws from the backend's generator: reseeding it per step makes the masks a
        // function of (seed, step), whatever ran before.
        train_device.seed(random::dropout_seed(config.seed, step));
        let loss_value;
        (model, loss_value) = if replica_devices.len() == 1 {
            update(
                model,
                &mut optim,
                &loss_fn,
                &batch,
                lr,
                config.optim.grad_clip,
                &train_device,
            )?
        } else {
            update_data_parallel(
                model,
                &mut optim,
                &loss_fn,
                &batch,
                lr,
                config.optim.grad_clip,
                &replica_devices,
                config.model.dropout == 0.0,
                &|share| {
                    replica_devices[share].seed(random::share_dropout_seed(
                        config.seed,
                        step,
                        share,
                    ))
                },
            )?
        };
        // A diverged step's update is never checkpointed: the run ends here.
        if let Some(err) = diverged(step, loss_value, state.first_loss, &last_checkpoint) {
            progress.finish();
            return Err(err);
        }
        state.first_loss.get_or_insert(loss_value);

        train_time += tick.elapsed().as_secs_f64();
        state.step += 1;
        state.tokens_seen += tokens_per_batch;
        state.loss_sum += loss_value;
        state.loss_count += 1;
        progress.step(state.step, loss_value);

        let done = state.step == end;
        interrupted = options
            .interrupt
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::SeqCst));
        // Checkpoints by step and at the end add a row to metrics.csv; those by the clock or on
        // an interruption do not, so that when they fall does not change the run's numbers.
        let on_schedule = run_dir.is_some()
            && (done
                || (config.checkpoint_every > 0
                    && state.step.is_multiple_of(config.checkpoint_every)));
        let timed = config.checkpoint_seconds > 0.0
            && since_checkpoint.elapsed().as_secs_f64() >= config.checkpoint_seconds;
        let checkpoint_due = run_dir.is_some() && (on_schedule || timed || interrupted);
        let logged = state.step.is_multiple_of(config.eval_every) || on_schedule || done;
        // Every checkpoint is evaluated first, so none is written from diverged weights.
        if logged || checkpoint_due {
            let metrics = evaluate(&model.valid(), task, &eval_set, &loss_fn, &device)?;
            if let Some(err) =
                diverged(state.step, metrics.loss, state.first_loss, &last_checkpoint)
            {
                progress.finish();
                return Err(err);
            }
            state.wall_seconds = wall_before + started.elapsed().as_secs_f64();
            if logged {
                let row = MetricsRow {
                    step: state.step,
                    lr,
                    train_loss: state.loss_sum / state.loss_count.max(1) as f64,
                    eval_loss: metrics.loss,
                    eval_token_accuracy: metrics.token_accuracy,
                    eval_sequence_accuracy: metrics.sequence_accuracy,
                    wall_seconds: state.wall_seconds,
                };
                (state.loss_sum, state.loss_count) = (0.0, 0);
                progress.eval(&row);
                log.rows.push(row);
                if let Some(dir) = &run_dir {
                    dir.write_metrics(&log)?;
                }
            }
        }
        if let Some(dir) = &run_dir
            && checkpoint_due
        {
            state.wall_seconds = wall_before + started.elapsed().as_secs_f64();
            state.train_seconds = train_seconds_before + train_time;
            dir.claim_checkpoint(state.step)?;
            let saved = checkpoint::save(dir.root(), &model, &optim, &scheduler, &state)?;
            last_checkpoint = Some(saved);
            since_checkpoint = Instant::now();
        }
        if interrupted {
            break;
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
        && !interrupted
    {
        plot::loss_curve(&dir.loss_plot()?, &log)?;
        plot::accuracy_curve(&dir.accuracy_plot()?, &log)?;
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
        interrupted,
        last_checkpoint,
        history: log,
    })
}

/// One update of the loop: the logits of `batch` on the autodiff `device`, the loss, its
/// gradients (scaled down to the global L2 norm `grad_clip` when they exceed it), burn's
/// optimizer step at `lr`. Returns the updated model and the loss, read back to the host (the
/// one synchronisation of a step, which NaN and divergence detection need).
///
/// The bench program times this same function (`attn-bench`'s training cases).
///
/// The update runs on rayon's global pool, whose threads run the CPU backends' parallel
/// operations (flex, ndarray). Called from a thread outside the pool (the program's main
/// thread), that thread waits for it: otherwise it would run the update's many small
/// operations itself while the pool's idle threads, woken by each parallel one, spin and
/// yield on the same cores. On 2 cores of an AMD EPYC (Zen 4) this took the toy update from
/// 19.2 to 16.0 ms (docs/benchmarks.md). Called from a pool thread, it runs in place.
///
/// Only on the CPU backends (`attn_core::native_serves`): elsewhere the update stays on the
/// calling thread. On wgpu, with the update on a pool thread and the checkpoint written from
/// the calling thread, a run resumed after Ctrl-C no longer ended like an unbroken one (the
/// `run_safety` test: a loss of 0.591 against 0.561 at step 260); the cause was not found.
///
/// # Errors
/// [`TrainError`] when the batch does not fit the model.
pub fn update(
    model: Model,
    optim: &mut ModuleOptimizer,
    loss_fn: &CrossEntropyLoss,
    batch: &Batch,
    lr: f64,
    grad_clip: Option<f32>,
    device: &Device,
) -> Result<(Model, f64), TrainError> {
    let run = || {
        let (loss_value, grads) = loss_and_gradients(&model, loss_fn, batch, 1.0, device)?;
        Ok((step(model, optim, grads, lr, grad_clip), loss_value))
    };
    if attn_core::native_serves(device) {
        rayon::scope(|_| run())
    } else {
        run()
    }
}

/// One data-parallel update over `devices` (autodiff devices; the first holds `model` and the
/// optimizer's state): the batch is [split](Batch::split) into one share per device, each
/// device runs the forward and backward pass of its share on its own replica of the model,
/// and the replicas' gradients meet on the first device, where they are summed, clipped and
/// applied by one optimizer step, exactly as [`update`] applies the gradients of the whole
/// batch on one device:
///
/// ```text
/// loss = Σ_r (n_r / n) · loss_r          n_r scored positions of share r, n of the batch
/// g    = Σ_r (n_r / n) · ∇ loss_r        = ∇ loss, the whole batch's gradient
/// ```
///
/// This is burn's local multi-device scheme (burn-train's `MultiDeviceNaive` strategy), built
/// from burn's own parts: `Module::fork` puts a replica on its device, `GradientsParams::to_device`
/// brings its gradients to the first device, and `GradientsAccumulator` sums them. burn
/// 0.22.1's collective `all_reduce` (burn-train's DDP strategy) dispatches only on its CUDA and
/// remote backends, so it serves none of the backends tested here.
///
/// The shares run at the same time, one thread each (on the CPU backends as tasks of rayon's
/// pool, as [`update`] runs), when `concurrent`; otherwise one after another, each after
/// `before_share(r)` (which reseeds the backend's generator: burn's generator is global per
/// backend, so replicas that draw dropout masks at the same time from one backend would draw
/// in an order set by the threads' timing).
///
/// # Errors
/// [`TrainError`] when a share does not fit the model, or the batch has fewer rows than there
/// are devices.
#[allow(clippy::too_many_arguments)]
pub fn update_data_parallel(
    model: Model,
    optim: &mut ModuleOptimizer,
    loss_fn: &CrossEntropyLoss,
    batch: &Batch,
    lr: f64,
    grad_clip: Option<f32>,
    devices: &[Device],
    concurrent: bool,
    before_share: &(dyn Fn(usize) + Sync),
) -> Result<(Model, f64), TrainError> {
    let Some(main) = devices.first() else {
        return Err(TrainError::Config(
            "data-parallel training needs a device".into(),
        ));
    };
    if batch.batch < devices.len() {
        return Err(TrainError::Config(format!(
            "a batch of {} sequences cannot be shared among {} devices: each needs at least one",
            batch.batch,
            devices.len()
        )));
    }
    let shares = batch.split(devices.len());
    let scored: Vec<usize> = shares
        .iter()
        .map(|share| scored_positions(loss_fn, share))
        .collect();
    let total = scored.iter().sum::<usize>().max(1) as f64;
    // Each share's loss and gradients, the gradients moved to the first device.
    let share_job = |r: usize| -> Result<Option<(f64, GradientsParams)>, TrainError> {
        if scored[r] == 0 {
            return Ok(None); // no position to score: its weight in the sum is 0
        }
        before_share(r);
        let device = &devices[r];
        let replica = if r == 0 {
            model.clone()
        } else {
            model.clone().fork(device)
        };
        let weight = scored[r] as f64 / total;
        let (loss, grads) = loss_and_gradients(&replica, loss_fn, &shares[r], weight, device)?;
        let grads = if r == 0 {
            grads
        } else {
            grads.to_device(main, &replica)
        };
        Ok(Some((loss, grads)))
    };
    let gather = || -> Vec<Result<Option<(f64, GradientsParams)>, TrainError>> {
        let n = devices.len();
        if !concurrent {
            return (0..n).map(share_job).collect();
        }
        let mut results = Vec::with_capacity(n);
        // burn draws a parameter's initial value lazily, at its first use, from the backend's
        // global generator, so one device's first forward pass draws them in the order it uses
        // them. Until all are drawn, share 0 runs alone: the replicas then fork the weights one
        // device would have had, whatever the threads' timing.
        if !all_drawn(&model) {
            results.push(share_job(0));
        }
        let rest = results.len()..n;
        if devices.iter().all(attn_core::native_serves) {
            use rayon::prelude::*;
            results.par_extend(rest.into_par_iter().map(share_job));
        } else {
            std::thread::scope(|scope| {
                let mut rest = rest;
                let here = rest.next(); // runs on this thread, the rest on their own
                let others: Vec<_> = rest.map(|r| scope.spawn(move || share_job(r))).collect();
                results.extend(here.map(share_job));
                results.extend(others.into_iter().map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                }));
            });
        }
        results
    };
    let on_pool = attn_core::native_serves(main);
    let results = if on_pool {
        rayon::scope(|_| gather())
    } else {
        gather()
    };
    let apply = || -> Result<(Model, f64), TrainError> {
        let mut sum = GradientsAccumulator::<Model>::new();
        let mut loss = 0.0;
        for result in results {
            if let Some((share_loss, grads)) = result? {
                loss += share_loss;
                sum.accumulate(&model, grads);
            }
        }
        Ok((step(model, optim, sum.grads(), lr, grad_clip), loss))
    };
    if on_pool {
        rayon::scope(|_| apply())
    } else {
        apply()
    }
}

/// The loss of `batch` times `weight`, read back to the host, and its gradients.
fn loss_and_gradients(
    model: &Model,
    loss_fn: &CrossEntropyLoss,
    batch: &Batch,
    weight: f64,
    device: &Device,
) -> Result<(f64, GradientsParams), TrainError> {
    let logits = model.logits(batch, device)?; // [batch, seq_len, n_classes]
    let mut loss = token_loss(loss_fn, logits, batch.targets_tensor(device));
    if weight != 1.0 {
        loss = loss * weight;
    }
    let loss_value = value_of(loss.clone())?;
    Ok((
        loss_value,
        GradientsParams::from_grads(loss.backward(), model),
    ))
}

/// Clipping, then burn's optimizer step.
fn step(
    model: Model,
    optim: &mut ModuleOptimizer,
    grads: GradientsParams,
    lr: f64,
    grad_clip: Option<f32>,
) -> Model {
    let grads = match grad_clip {
        Some(max_norm) => clip_global_norm(&model, grads, max_norm).0,
        None => grads,
    };
    optim.step(lr, model, grads)
}

/// Whether every float parameter of `model` holds its value (none is still lazily waiting for
/// its first use to be drawn).
fn all_drawn(model: &Model) -> bool {
    struct Drawn(bool);
    impl ModuleVisitor for Drawn {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0 &= param.is_initialized();
        }
    }
    let mut drawn = Drawn(true);
    model.visit(&mut drawn);
    drawn.0
}

/// The positions of `batch` that the loss scores: those whose target is not one of the loss's
/// ignored classes.
fn scored_positions(loss_fn: &CrossEntropyLoss, batch: &Batch) -> usize {
    let ignored = loss_fn.pad_tokens.as_deref().unwrap_or(&[]);
    batch
        .targets
        .iter()
        .filter(|&&t| !ignored.iter().any(|&i| i as i64 == t))
        .count()
}

/// Adam ([`FusedAdam`]: burn's, with its step as one pass on flex) or burn's AdamW from the
/// configuration. Clipping is done by [`clip_global_norm`] before the step (in [`update`]), not
/// by burn's per-parameter clipping.
pub fn optimizer(o: &OptimConfig) -> ModuleOptimizer {
    match o.kind {
        OptimizerKind::Adam => ModuleOptimizer::from(FusedAdam::new(
            o.beta_1,
            o.beta_2,
            o.epsilon,
            (o.weight_decay > 0.0).then_some(o.weight_decay as f32),
        )),
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
        // No checkpoints by the clock: on a slow device a timed one would add checkpoints that
        // a test counting them, or corrupting the newest, does not expect.
        c.checkpoint_seconds = 0.0;
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
            let mut config = tiny(d, TaskKind::Reverse, 8); // with dropout
            config.eval_every = 4;
            config.checkpoint_every = 4;
            // One device, and two replicas of it (data-parallel, the shares drawing their
            // dropout masks one after another).
            for replicas in [1, 2] {
                let devices = vec![d.device.clone(); replicas];
                let whole_dir = temp_out(&format!("whole{replicas}"), d.name);
                let whole =
                    run_data_parallel(&config, devices.clone(), &quiet(Some(whole_dir.clone())))
                        .expect("unbroken run");

                let split_dir = temp_out(&format!("split{replicas}"), d.name);
                let first = RunOptions {
                    stop_at: Some(4),
                    ..quiet(Some(split_dir.clone()))
                };
                let half = run_data_parallel(&config, devices.clone(), &first).expect("first half");
                assert_eq!(half.steps, 4);
                let second = RunOptions {
                    resume: true,
                    ..quiet(Some(split_dir.clone()))
                };
                let resumed = run_data_parallel(&config, devices, &second).expect("second half");
                assert_eq!(resumed.resumed_from, Some(4));
                assert_eq!(resumed.steps, 8);

                let (a, b) = (losses(&whole), losses(&resumed));
                assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
                for (x, y) in a.iter().zip(&b) {
                    assert_eq!(x.0, y.0);
                    assert!(
                        (x.1 - y.1).abs() < 1e-5 && (x.2 - y.2).abs() < 1e-5,
                        "{replicas} replicas: {x:?} vs {y:?}"
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
            }
        });
    }

    /// Each evaluation's step, training loss, held-out loss and token accuracy.
    fn losses(summary: &RunSummary) -> Vec<(usize, f64, f64, f64)> {
        summary
            .history
            .rows
            .iter()
            .map(|r| (r.step, r.train_loss, r.eval_loss, r.eval_token_accuracy))
            .collect()
    }

    #[test]
    fn data_parallel_runs_end_like_one_device_taking_the_whole_batch() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            // Reverse scores every position; add scores only the answer, so the shares' losses
            // are weighted by their scored positions, and 7 rows split unevenly (4 + 3, 3 + 2 + 2).
            for kind in [TaskKind::Reverse, TaskKind::Add] {
                let mut config = tiny(d, kind, 6);
                config.model.pos = PosName::Learned.scheme(config.task.model_seq_len());
                config.model.dropout = 0.0;
                config.batch_size = 7;
                config.eval_every = 2;
                let one = run_on(&config, d.device.clone(), &quiet(None)).expect("one device");
                let want = losses(&one);
                assert_ne!(want[0].2, want[2].2, "{kind:?}: the run must move");
                for replicas in [2, 3] {
                    let devices = vec![d.device.clone(); replicas];
                    let got =
                        run_data_parallel(&config, devices, &quiet(None)).expect("data-parallel");
                    let got = losses(&got);
                    assert_eq!(got.len(), want.len());
                    for (x, y) in want.iter().zip(&got) {
                        assert_eq!(x.0, y.0);
                        assert!(
                            (x.1 - y.1).abs() < 1e-4 && (x.2 - y.2).abs() < 1e-4,
                            "{kind:?} on {replicas} replicas: {y:?}, one device {x:?}"
                        );
                    }
                }
            }
        });
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
            assert!(!empty.exists(), "a failed resume creates no folder");
            std::fs::remove_dir_all(out).expect("cleanup");
        });
    }

    /// Usually a value from `valid`, now and then one of the `edges` (which may be refused).
    fn mostly<T: Clone + std::fmt::Debug + 'static>(
        valid: impl proptest::strategy::Strategy<Value = T> + 'static,
        edges: Vec<T>,
    ) -> proptest::strategy::BoxedStrategy<T> {
        use proptest::prelude::*;
        prop_oneof![24 => valid, 1 => proptest::sample::select(edges)].boxed()
    }

    /// Any configuration over tiny sizes: each setting usually one that works, now and then
    /// one at or past the edge of what works, so that some are accepted and some refused.
    fn any_config() -> impl proptest::strategy::Strategy<Value = TrainConfig> {
        use proptest::prelude::*;
        use proptest::sample::select;

        use crate::config::{Act, Norm};
        use crate::schedule::Decay;

        let task = (
            0..6usize,
            mostly(2..7usize, vec![0, 1]),
            mostly(2..6usize, vec![0, 1, 3_000_000_000]),
            mostly(1..3usize, vec![0, 6]),
            mostly(1..3usize, vec![0, 10]),
        );
        let model = (
            mostly(1..4usize, vec![0]),
            1..3usize,
            mostly(Just(None), vec![Some(0), Some(5), Some(7)]),
            mostly(1..3usize, vec![0]),
            mostly(1..13usize, vec![0]),
            mostly(select(vec![0.0, 0.1, 0.5]), vec![-0.1, 1.0, 1.5, f64::NAN]),
            0..5usize,
            mostly(Just(1usize), vec![0]),
            any::<(bool, bool, bool, bool)>(),
        );
        let optim = (
            mostly(
                select(vec![1e-3, 1e-2]),
                vec![-1.0, 0.0, f64::NAN, f64::INFINITY],
            ),
            mostly(select(vec![0.0f32, 0.9]), vec![-0.1, 1.0, 1.5, f32::NAN]),
            mostly(select(vec![0.5f32, 0.98]), vec![-0.1, 1.0]),
            mostly(
                select(vec![1e-9f32, 1e-6]),
                vec![-1.0, 0.0, f32::NAN, f32::INFINITY],
            ),
            mostly(
                select(vec![None, Some(1.0f32), Some(0.5)]),
                vec![Some(-1.0), Some(0.0), Some(f32::NAN)],
            ),
            mostly(select(vec![0.0, 0.01]), vec![-1.0, f64::NAN]),
            mostly(select(vec![0.0, 0.5, 1.0]), vec![-0.5, 1.5]),
            (0..3usize, 0..3usize, any::<bool>()),
        );
        let run = (
            mostly(1..3usize, vec![0]),
            mostly(1..4usize, vec![0]),
            mostly(1..4usize, vec![0]),
            mostly(1..3usize, vec![0]),
            0..3usize,
            mostly(select(vec![0.0, 60.0]), vec![-1.0, f64::NAN]),
        );
        (task, model, optim, run).prop_map(|(task, model, optim, run)| {
            let mut c = TrainConfig::default();
            let (kind, seq_len, vocab, min_distance, digits) = task;
            c.task = TaskConfig {
                kind: [
                    TaskKind::Copy,
                    TaskKind::Reverse,
                    TaskKind::Sort,
                    TaskKind::Context,
                    TaskKind::Add,
                    TaskKind::Translate,
                ][kind],
                seq_len,
                vocab,
                min_distance,
                digits,
            };
            let (n_heads, half_d_head, d_model, n_layers, d_ff, dropout, pos, table, flags) = model;
            let (post, gelu, final_norm, scale_embedding) = flags;
            // Heads of an even width (rotary needs one), unless the edge gives another width.
            c.model.d_model = d_model.unwrap_or(n_heads * 2 * half_d_head);
            c.model.n_heads = n_heads;
            c.model.n_layers = n_layers;
            c.model.d_ff = d_ff;
            c.model.dropout = dropout;
            let pos = [
                PosName::None,
                PosName::Sinusoidal,
                PosName::Learned,
                PosName::Rope,
                PosName::Alibi,
            ][pos];
            // A learned table as long as the sequences, or (at the edge) one too short.
            c.model.pos = pos.scheme((seq_len + table).saturating_sub(1));
            c.model.norm = if post { Norm::Post } else { Norm::Pre };
            c.model.activation = if gelu { Act::Gelu } else { Act::Relu };
            c.model.final_norm = final_norm;
            c.model.scale_embedding = scale_embedding;
            let (lr, beta_1, beta_2, epsilon, grad_clip, weight_decay, final_fraction, rest) =
                optim;
            let (warmup, decay, adamw) = rest;
            c.optim.lr = lr;
            c.optim.beta_1 = beta_1;
            c.optim.beta_2 = beta_2;
            c.optim.epsilon = epsilon;
            c.optim.grad_clip = grad_clip;
            c.optim.weight_decay = weight_decay;
            c.optim.final_fraction = final_fraction;
            c.optim.warmup_steps = warmup;
            c.optim.decay = [Decay::Constant, Decay::Linear, Decay::Cosine][decay];
            c.optim.kind = if adamw {
                OptimizerKind::Adamw
            } else {
                OptimizerKind::Adam
            };
            let (steps, batch_size, eval_sequences, eval_every, checkpoint_every, seconds) = run;
            c.steps = steps;
            c.batch_size = batch_size;
            c.eval_sequences = eval_sequences;
            c.eval_every = eval_every;
            c.checkpoint_every = checkpoint_every;
            c.checkpoint_seconds = seconds;
            c
        })
    }

    #[test]
    fn validation_never_panics_and_what_it_accepts_trains_a_step() {
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        let config = Config {
            cases: 16,
            failure_persistence: None,
            ..Config::default()
        };
        let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut runner = TestRunner::new_with_rng(config, rng);
        let (accepted, refused) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        runner
            .run(&any_config(), |mut config| {
                let valid = config.validate();
                refused.set(refused.get() + usize::from(valid.is_err()));
                if valid.is_ok() {
                    accepted.set(accepted.get() + 1);
                    for_each_device(|d| {
                        config.device = d.name.to_string();
                        let options = RunOptions {
                            stop_at: Some(1),
                            ..quiet(None)
                        };
                        let summary = run_on(&config, d.device.clone(), &options)
                            .unwrap_or_else(|e| panic!("{config:?}: {e}"));
                        assert_eq!(summary.steps, 1);
                    });
                }
                Ok(())
            })
            .expect("no configuration panics");
        // Both halves of the property have cases.
        let (accepted, refused) = (accepted.get(), refused.get());
        assert!(
            accepted > 0 && refused > 0,
            "{accepted} accepted, {refused} refused"
        );
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
