//! The loop: after the checks and the start, each step draws a batch, updates the model,
//! guards against divergence, and evaluates, logs and checkpoints when they are due.

use std::sync::atomic::Ordering;
use std::time::Instant;

use burn::module::Module;
use burn::nn::loss::CrossEntropyLoss;
use burn::optim::ModuleOptimizer;
use burn::tensor::Device;

use super::checkpoint_policy::CheckpointPolicy;
use super::divergence::diverged;
use super::start::{Start, start};
use super::summary::{Ended, RunSummary, summarize};
use super::{RunOptions, update, update_data_parallel};
use crate::checkpoint::{self, TrainState};
use crate::config::TrainConfig;
use crate::error::TrainError;
use crate::evaluate::{eval_set, evaluate};
use crate::loss::loss_function;
use crate::metrics::{EvalMetrics, MetricsLog, MetricsRow};
use crate::model::Model;
use crate::progress::Progress;
use crate::random;
use crate::run_dir::RunDir;
use crate::tasks::Batch;
use crate::text::{Continuation, SAMPLES_FILE, TextData, continue_text};
use attn_model::Sampling;

/// Trains one replica of the model on each of `devices` (without autodiff; the loop adds it),
/// every update through [`update_data_parallel`]: the first device holds the model, the
/// optimizer, evaluation and checkpoints, and the run's numbers are those of the whole batch
/// on that device alone, up to the order of floating-point sums. One device is [`run_on`](super::run_on).
/// `config.device` only labels the run.
///
/// With dropout, the shares run one after another, each drawing its masks from its device's
/// generator reseeded from `(seed, step, share)`, so a resumed run still repeats an unbroken one.
///
/// # Errors
///
/// As [`run`](super::run); [`TrainError::Config`] when `devices` is empty or outnumbers the batch's rows.
pub fn run_data_parallel(
    config: &TrainConfig,
    devices: Vec<Device>,
    options: &RunOptions,
) -> Result<RunSummary, TrainError> {
    let device = check(config, &devices, options)?;
    let replica_devices: Vec<Device> = devices.iter().map(|d| d.clone().autodiff()).collect();
    let started = Instant::now();
    let train_device = replica_devices[0].clone(); // holds the model and the optimizer
    let Start {
        config,
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
    let config = &config;
    let task = &config.task;
    let loss_fn = loss_function(task, &device);

    let eval_set = eval_set(config);
    let end = options
        .stop_at
        .map_or(config.steps, |s| s.min(config.steps));
    let progress = Progress::new(options.progress, state.step, config.steps);
    let tokens_per_batch = (config.batch_size * task.model_seq_len()) as u64;

    let mut train_time = 0.0;
    let wall_before = state.wall_seconds;
    let mut policy = CheckpointPolicy::new(config, run_dir.is_some());
    let mut interrupted = false;

    while state.step < end {
        let step = state.step;
        let lr = scheduler.step();
        let batch = task.batch(config.batch_size, &mut state.train_rng);
        let tick = Instant::now();
        let loss_value;
        (model, loss_value) = train_step(
            config,
            model,
            &mut optim,
            &loss_fn,
            &batch,
            lr,
            step,
            &replica_devices,
        )?;
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
        let due = policy.due(state.step, done, interrupted);
        if due.evaluate() {
            let metrics = evaluate(&model.valid(), task, &eval_set, &loss_fn, &device)?;
            if let Some(err) =
                diverged(state.step, metrics.loss, state.first_loss, &last_checkpoint)
            {
                progress.finish();
                return Err(err);
            }
            state.wall_seconds = wall_before + started.elapsed().as_secs_f64();
            if due.log {
                log_evaluation(&mut state, &mut log, lr, metrics, &progress, &run_dir)?;
                if let Some(data) = &task.text.loaded {
                    let sample = sample_text(&model.valid(), &data.0, config, state.step, &device)?;
                    progress.sample(state.step, &sample);
                    if let Some(dir) = &run_dir {
                        append_sample(dir, state.step, &sample)?;
                    }
                }
            }
        }
        if let Some(dir) = &run_dir
            && due.checkpoint
        {
            state.wall_seconds = wall_before + started.elapsed().as_secs_f64();
            state.train_seconds = train_seconds_before + train_time;
            dir.claim_checkpoint(state.step)?;
            let saved = checkpoint::save(dir.root(), &model, &optim, &scheduler, &state)?;
            last_checkpoint = Some(saved);
            policy.saved();
        }
        if interrupted {
            break;
        }
    }
    progress.finish();

    let ended = Ended {
        model,
        state,
        log,
        resumed_from,
        last_checkpoint,
        run_dir,
        interrupted,
        train_seconds: train_seconds_before + train_time,
        wall_before,
        started,
    };
    summarize(config, options, ended, &eval_set, &loss_fn, &device)
}

/// Checks the configuration, the devices and the options before anything is built or written,
/// and returns the first device (without autodiff), which evaluates.
fn check(
    config: &TrainConfig,
    devices: &[Device],
    options: &RunOptions,
) -> Result<Device, TrainError> {
    config.validate()?;
    crate::budget::check(config, crate::budget::available())?;
    let Some(device) = devices.first().cloned() else {
        return Err(TrainError::Config("no device to train on".into()));
    };
    config.check_replicas(devices.len(), "to train on")?;
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
    Ok(device)
}

/// One step's update of `model` on `batch` at `lr`: on the one device, or shared among the
/// replicas. Returns the updated model and the loss.
#[allow(clippy::too_many_arguments)]
fn train_step(
    config: &TrainConfig,
    model: Model,
    optim: &mut ModuleOptimizer,
    loss_fn: &CrossEntropyLoss,
    batch: &Batch,
    lr: f64,
    step: usize,
    replica_devices: &[Device],
) -> Result<(Model, f64), TrainError> {
    let train_device = &replica_devices[0];
    // Dropout draws from the backend's generator: reseeding it per step makes the masks a
    // function of (seed, step), whatever ran before.
    train_device.seed(random::dropout_seed(config.seed, step));
    if replica_devices.len() == 1 {
        update(
            model,
            optim,
            loss_fn,
            batch,
            lr,
            config.optim.grad_clip,
            train_device,
        )
    } else {
        update_data_parallel(
            model,
            optim,
            loss_fn,
            batch,
            lr,
            config.optim.grad_clip,
            replica_devices,
            config.model.dropout == 0.0,
            &|share| {
                replica_devices[share].seed(random::share_dropout_seed(config.seed, step, share))
            },
        )
    }
}

/// Tokens of the sample written at each evaluation of a `text` run.
pub const SAMPLE_TOKENS: usize = 200;

/// The `text` task's sample after `step` steps: [`SAMPLE_TOKENS`] tokens written by `model` after
/// a line break (or, where the tokenizer has none, the validation split's first token),
/// sampled as nanoGPT's `sample.py` samples (temperature 0.8, the 200 most likely tokens).
fn sample_text(
    model: &Model,
    data: &TextData,
    config: &TrainConfig,
    step: usize,
    device: &Device,
) -> Result<String, TrainError> {
    let Model::Decoder(decoder) = model else {
        return Err(TrainError::Config("the text task trains a decoder".into()));
    };
    let tokenizer = &data.tokenizer;
    let prompt = match tokenizer.encode("\n")?.as_slice() {
        [id] if tokenizer.token_name(*id as usize) == "\n" => vec![*id],
        _ => vec![data.validation.get(0)],
    };
    let how = Continuation {
        new_tokens: SAMPLE_TOKENS,
        window: config.task.seq_len,
        sampling: Sampling::Sample {
            temperature: 0.8,
            top_k: Some(200),
            top_p: None,
        },
        seed: config.seed.wrapping_add(step as u64),
    };
    let ids = continue_text(decoder, &prompt, &how, device, |_| Ok(()))?;
    Ok(tokenizer.decode(&ids)?)
}

/// Appends the sample of `step` to the run folder's `samples.txt`.
fn append_sample(dir: &RunDir, step: usize, sample: &str) -> Result<(), TrainError> {
    use std::io::Write;
    let path = dir.claim(SAMPLES_FILE)?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| TrainError::io("opening", &path, e))?;
    writeln!(file, "--- step {step} ---\n{sample}\n")
        .map_err(|e| TrainError::io("writing", &path, e))
}

/// Adds the row of an evaluation after `state.step` steps to `log` (and `metrics.csv`), with
/// the mean training loss since the last row, which starts afresh.
fn log_evaluation(
    state: &mut TrainState,
    log: &mut MetricsLog,
    lr: f64,
    metrics: EvalMetrics,
    progress: &Progress,
    run_dir: &Option<RunDir>,
) -> Result<(), TrainError> {
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
    if let Some(dir) = run_dir {
        dir.write_metrics(log)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use attn_testing::for_each_device;

    use super::super::tests::{TRAINING, losses, quiet, temp_out, tiny};
    use super::super::{RunOptions, run_on};
    use super::*;
    use crate::config::{OptimizerKind, PosName};
    use crate::metrics::MetricsLog;
    use crate::run_dir::METRICS_FILE;
    use crate::tasks::{TaskConfig, TaskKind};

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
                let mut one = TrainConfig {
                    steps: 1,
                    eval_every: 1,
                    ..config.clone()
                };
                one.optim.warmup_steps = 1;
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
                ..TaskConfig::default()
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
}
