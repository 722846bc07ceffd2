//! The article's claims about attention, each as a check with a threshold that a broken model
//! would miss.
//!
//! Every check prints its measured figure next to its threshold, passed or not, so a run with
//! `--nocapture` reads as a table of the claims:
//!
//! ```sh
//! ATTN_TEST_DEVICES=flex cargo test -p attn-train --test claims -- --nocapture
//! ```
//!
//! A claim is about the model, not the backend: the trainings run on flex only, one at a time
//! (burn's backend generator is global), and one trained context model serves several claims.
//! The scaling claim trains nothing and runs on every listed device.

use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use attn_core::{AttentionOptions, scaled_dot_product_attention};
use attn_model::{TokenEncoder, TokenEncoderInput};
use attn_testing::{SeededRng, TestDevice, devices, for_each_device};
use attn_train::config::PosName;
use attn_train::evaluate::{eval_set, evaluate};
use attn_train::inspect::{attention_maps, cue_hits, head_distance};
use attn_train::loss::{loss_function, token_loss};
use attn_train::model::Model;
use attn_train::random::{self, Rng, Stream};
use attn_train::tasks::{Batch, TaskConfig, TaskKind};
use attn_train::{RunOptions, TrainConfig, checkpoint, train};
use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::Tensor;

/// Trainings take turns: burn's backend generator is global to the process.
static TRAINING: Mutex<()> = Mutex::new(());

fn take_turn() -> MutexGuard<'static, ()> {
    TRAINING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The flex device, or `None` (after saying so) when `ATTN_TEST_DEVICES` leaves it out.
fn flex(claim: &str) -> Option<TestDevice> {
    let found = devices().into_iter().find(|d| d.name == "flex");
    if found.is_none() {
        println!("claim {claim}: trains on flex, which ATTN_TEST_DEVICES leaves out; not run here");
    }
    found
}

/// The checks of one claim: each is printed as it is made, and the claim fails at the end
/// with every check that missed, so one miss does not hide the others' figures.
struct Claim {
    name: &'static str,
    missed: Vec<String>,
}

impl Claim {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            missed: Vec::new(),
        }
    }

    fn check(&mut self, what: &str, figure: f64, relation: &str, threshold: f64, holds: bool) {
        let line = format!(
            "claim {}: {what} = {figure:.4} (needs {relation} {threshold:.4}) {}",
            self.name,
            if holds { "ok" } else { "MISSED" }
        );
        println!("{line}");
        if !holds {
            self.missed.push(line);
        }
    }

    fn at_least(&mut self, what: &str, figure: f64, threshold: f64) {
        self.check(what, figure, "≥", threshold, figure >= threshold);
    }

    fn at_most(&mut self, what: &str, figure: f64, threshold: f64) {
        self.check(what, figure, "≤", threshold, figure <= threshold);
    }

    fn note(&self, what: &str) {
        println!("claim {}: {what}", self.name);
    }

    fn finish(self) {
        assert!(
            self.missed.is_empty(),
            "{} check(s) missed:\n{}",
            self.missed.len(),
            self.missed.join("\n")
        );
    }
}

/// A small encoder on `task`, evaluated every `eval_every` steps on 256 held-out sequences.
fn small(
    d: &TestDevice,
    task: TaskConfig,
    pos: PosName,
    steps: usize,
    eval_every: usize,
) -> TrainConfig {
    let mut c = TrainConfig {
        task,
        ..TrainConfig::default()
    };
    c.model.d_model = 32;
    c.model.n_heads = 2;
    c.model.n_layers = 2;
    c.model.d_ff = 64;
    c.model.pos = pos.scheme(c.task.seq_len);
    c.optim.lr = 3e-3;
    c.optim.warmup_steps = 20;
    c.steps = steps;
    c.batch_size = 32;
    c.eval_every = eval_every;
    c.eval_sequences = 256;
    c.checkpoint_every = 0;
    c.seed = 1;
    c.device = d.name.to_string();
    c
}

fn reverse(d: &TestDevice, pos: PosName, steps: usize) -> TrainConfig {
    let task = TaskConfig {
        kind: TaskKind::Reverse,
        seq_len: 8,
        vocab: 8,
        ..TaskConfig::default()
    };
    small(d, task, pos, steps, steps)
}

fn context(d: &TestDevice, seq_len: usize, min_distance: usize, steps: usize) -> TrainConfig {
    let task = TaskConfig {
        kind: TaskKind::Context,
        seq_len,
        min_distance,
        ..TaskConfig::default()
    };
    let mut c = small(d, task, PosName::Sinusoidal, steps, 5);
    c.model.n_heads = 4;
    c.model.n_layers = 1;
    c
}

fn temp_out(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("attn-claims-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A trained model, read back from its run's one checkpoint, whose folder goes when the model
/// does (burn reads the weights from the file lazily).
struct Kept {
    model: TokenEncoder,
    dir: PathBuf,
}

impl Drop for Kept {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Trains `config` and returns its summary; with `keep`, also the trained model.
fn trained(config: &TrainConfig, d: &TestDevice, keep: bool) -> (train::RunSummary, Option<Kept>) {
    let out = keep.then(|| temp_out(&format!("{}-{}", config.task.kind, config.task.seq_len)));
    let options = RunOptions {
        out: out.clone(),
        skip_plots: true,
        ..RunOptions::default()
    };
    let summary = train::run_on(config, d.device.clone(), &options).expect("trains");
    let kept = out.map(|dir| {
        let checkpoint = checkpoint::latest(&dir)
            .expect("readable")
            .expect("the run's final checkpoint");
        let model = match checkpoint::load_model(
            &checkpoint,
            Model::init(config, &d.device).expect("valid config"),
        )
        .expect("the checkpoint loads")
        {
            Model::Encoder(encoder) => encoder,
            _ => unreachable!("the claims train encoder tasks"),
        };
        Kept { model, dir }
    });
    (summary, kept)
}

#[test]
fn order_needs_positions() {
    let Some(d) = flex("order needs positions") else {
        return;
    };
    let _turn = take_turn();
    let mut claim = Claim::new("order needs positions");
    // Rotary embedding gives attention only the signed distance, and learns the task more
    // slowly: it gets more steps.
    for (pos, steps, relation, threshold) in [
        (PosName::Sinusoidal, 400, "≥", 0.99),
        (PosName::None, 400, "≤", 0.05),
        (PosName::Rope, 2000, "≥", 0.95),
    ] {
        let (summary, _) = trained(&reverse(&d, pos, steps), &d, false);
        let m = summary.final_metrics;
        let what = format!(
            "reverse, positions {pos:?}, {steps} steps: held-out sequence accuracy \
             (token accuracy {:.4})",
            m.token_accuracy
        );
        match relation {
            "≥" => claim.at_least(&what, m.sequence_accuracy, threshold),
            _ => claim.at_most(&what, m.sequence_accuracy, threshold),
        }
    }
    claim.finish();
}

#[test]
fn meaning_depends_on_the_neighbours() {
    let Some(d) = flex("meaning depends on the neighbours") else {
        return;
    };
    let _turn = take_turn();
    let config = context(&d, 16, 1, 200);
    let (summary, kept) = trained(&config, &d, true);
    let kept = kept.expect("kept");
    let model = &kept.model;
    let task = &config.task;
    let held_out = eval_set(&config);

    let mut claim = Claim::new("meaning depends on the neighbours");
    claim.at_least(
        "context, 16 tokens: held-out token accuracy on the ambiguous word",
        summary.final_metrics.token_accuracy,
        0.99,
    );
    let heads = cue_hits(model, task, &held_out[0], 128, &d.device).expect("cue hits");
    let last = heads.last().expect("one layer at least");
    let uniform = 1.0 / task.seq_len as f64;
    for (h, head) in last.iter().enumerate() {
        claim.note(&format!(
            "last layer, head {h}: strongest key is the cue in {:.1}% of held-out sentences, \
             mean weight on the cue {:.4} (a uniform head gives {uniform:.4})",
            100.0 * head.hit_rate,
            head.mean_weight
        ));
    }
    let looking = last.iter().filter(|h| h.hit_rate > 0.5).count();
    claim.at_least(
        "fraction of the last layer's heads whose strongest key from the ambiguous word is the cue \
         (in most held-out sentences)",
        looking as f64 / last.len() as f64,
        0.5,
    );

    // Multi-head attention looks from several subspaces: the heads of one layer do not all
    // attend alike. A freshly initialised model, whose heads are all near uniform, is the
    // baseline.
    let spread = |model: &TokenEncoder| {
        let mut best = 0.0_f64;
        let sentences = 32;
        let mut sums: Vec<f64> = Vec::new();
        for b in 0..sentences {
            let maps = attention_maps(model, held_out[0].sequence(b), &d.device).expect("maps");
            let mut pairs = Vec::new();
            for layer in &maps {
                for a in 0..layer.n_heads {
                    for c in a + 1..layer.n_heads {
                        pairs.push(head_distance(layer, a, c));
                    }
                }
            }
            sums.resize(pairs.len(), 0.0);
            for (s, p) in sums.iter_mut().zip(pairs) {
                *s += p;
            }
        }
        for s in sums {
            best = best.max(s / sentences as f64);
        }
        best
    };
    let fresh = config
        .encoder_config()
        .init(&d.device)
        .expect("valid config");
    claim.note(&format!(
        "a freshly initialised model's most different pair of heads: {:.4}",
        spread(&fresh)
    ));
    claim.at_least(
        "trained model: mean total variation distance between the most different pair of heads \
         of one layer",
        spread(model),
        0.3,
    );
    claim.finish();
}

/// The context task at `seq_len` tokens with the cue's distance from the ambiguous word in
/// `distances`: the task's own sentences, those at other distances left out.
fn sentences(
    task: &TaskConfig,
    distances: &RangeInclusive<usize>,
    n: usize,
    rng: &mut Rng,
) -> Batch {
    let mut kept = Vec::with_capacity(n);
    while kept.len() < n {
        let one = task.batch(1, rng);
        let at = task.cue_positions(&one.tokens).expect("a context sentence");
        if distances.contains(&at.word.abs_diff(at.cue)) {
            kept.push(one);
        }
    }
    Batch::concat(&kept).expect("n > 0")
}

/// Trains `config`'s model on context sentences whose cue stands `distances` away, with
/// `config`'s optimizer settings (Adam, linear warm-up, then a constant rate), and returns the
/// first step, evaluated every `config.eval_every`, at which the held-out token accuracy reaches
/// `threshold`, with the last accuracy measured.
fn steps_to_learn(
    config: &TrainConfig,
    d: &TestDevice,
    distances: RangeInclusive<usize>,
    threshold: f64,
) -> (Option<usize>, f64) {
    let task = &config.task;
    let train_device = d.device.clone().autodiff();
    train_device.seed(random::init_seed(config.seed));
    let mut model: TokenEncoder = config.encoder_config().init(&train_device).expect("valid");
    let mut optim = AdamConfig::new()
        .with_beta_1(config.optim.beta_1)
        .with_beta_2(config.optim.beta_2)
        .with_epsilon(config.optim.epsilon)
        .init();
    let loss_fn = loss_function(task, &d.device);
    let held_out = [sentences(
        task,
        &distances,
        config.eval_sequences,
        &mut Rng::stream(config.seed, Stream::Eval),
    )];
    let mut rng = Rng::stream(config.seed, Stream::Train);
    let mut accuracy = 0.0;
    for step in 1..=config.steps {
        let batch = sentences(task, &distances, config.batch_size, &mut rng);
        let logits = model
            .forward(TokenEncoderInput::new(batch.tokens_tensor(&train_device)))
            .logits; // [batch, seq_len, n_classes]
        let loss = token_loss(&loss_fn, logits, batch.targets_tensor(&train_device));
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let warm = (step as f64 / config.optim.warmup_steps.max(1) as f64).min(1.0);
        model = optim.step(config.optim.lr * warm, model, grads);
        if step % config.eval_every == 0 {
            let m = evaluate(
                &Model::Encoder(model.valid()),
                task,
                &held_out,
                &loss_fn,
                &d.device,
            )
            .expect("evaluates");
            accuracy = m.token_accuracy;
            if accuracy >= threshold {
                return (Some(step), accuracy);
            }
        }
    }
    (None, accuracy)
}

#[test]
fn long_range_is_one_step_away() {
    let Some(d) = flex("long range is one step away") else {
        return;
    };
    let _turn = take_turn();
    let mut claim = Claim::new("long range is one step away");
    let threshold = 0.99;
    // One sentence length for both, so that only the distance differs.
    let config = context(&d, 48, 1, 400);
    let mut steps = Vec::new();
    for distances in [1..=3, 30..=47] {
        let (reached, accuracy) = steps_to_learn(&config, &d, distances.clone(), threshold);
        claim.note(&format!(
            "cue {distances:?} away in {} tokens: {threshold} held-out token accuracy first at step {} \
             (evaluated every {} steps), last accuracy {accuracy:.4}",
            config.task.seq_len,
            reached.map_or("never".to_string(), |s| s.to_string()),
            config.eval_every,
        ));
        claim.at_least(
            &format!("cue {distances:?} away: held-out token accuracy reached"),
            accuracy,
            threshold,
        );
        steps.push(reached.unwrap_or(usize::MAX));
    }
    claim.at_most(
        "steps to reach it with the cue far, over steps with the cue near",
        steps[1] as f64 / steps[0] as f64,
        1.5,
    );
    claim.finish();
}

/// The mean over rows of the largest weight, and of the L2 norm of the loss's gradient with
/// respect to the scores, for random `q, k` with unit-variance entries.
fn softmax_health(d: &TestDevice, d_head: usize, scaled: bool) -> (f64, f64) {
    const ROWS: usize = 256;
    const SEQ_LEN_KV: usize = 16;
    let mut rng = SeededRng::new(d_head as u64);
    let unit = 3.0_f32.sqrt(); // uniform on [-1, 1) has variance 1/3
    let q = rng.tensor([1, 1, ROWS, d_head], &d.device) * unit;
    let k = rng.tensor([1, 1, SEQ_LEN_KV, d_head], &d.device) * unit;
    let v = rng.tensor([1, 1, SEQ_LEN_KV, 4], &d.device);
    let upstream = rng.tensor([1, 1, ROWS, SEQ_LEN_KV], &d.device) * unit;
    let autodiff = d.device.clone().autodiff();
    // A zero bias added to the scores: its gradient is the gradient with respect to the scores,
    // the signal softmax passes back.
    let bias = Tensor::<4>::zeros([1, 1, ROWS, SEQ_LEN_KV], &d.device)
        .to_device(&autodiff)
        .autodiff()
        .require_grad();
    let mut options = AttentionOptions::new()
        .with_bias(bias.clone())
        .with_need_weights(true);
    if !scaled {
        options = options.with_scale(1.0);
    }
    let on = |t: Tensor<4>| t.to_device(&autodiff).autodiff();
    let out = scaled_dot_product_attention(on(q), on(k), on(v), &options);
    let weights = out.weights.expect("asked for");
    let loss = (weights.clone() * on(upstream)).sum();
    let grads = loss.backward();
    let grad = bias.grad(&grads).expect("the bias is in the graph");
    let read = |t: Tensor<4>| t.into_data().try_to_vec::<f32>().expect("f32");
    let w = read(weights);
    let g = read(grad);
    let max_weight = w
        .chunks(SEQ_LEN_KV)
        .map(|row| f64::from(row.iter().copied().fold(0.0, f32::max)))
        .sum::<f64>()
        / ROWS as f64;
    let grad_norm = g
        .chunks(SEQ_LEN_KV)
        .map(|row| f64::from(row.iter().map(|x| x * x).sum::<f32>()).sqrt())
        .sum::<f64>()
        / ROWS as f64;
    (max_weight, grad_norm)
}

#[test]
fn scaling_keeps_softmax_trainable() {
    for_each_device(|d| {
        let mut claim = Claim::new("scaling keeps softmax trainable");
        let widths = [16, 64, 256, 1024];
        let table: Vec<_> = widths
            .iter()
            .map(|&d_head| {
                let (none_w, none_g) = softmax_health(d, d_head, false);
                let (sqrt_w, sqrt_g) = softmax_health(d, d_head, true);
                claim.note(&format!(
                    "{}: d_head {d_head:>4}: unscaled max weight {none_w:.4}, gradient norm \
                     {none_g:.4}; scaled by 1/√d_head max weight {sqrt_w:.4}, gradient norm \
                     {sqrt_g:.4}",
                    d.name
                ));
                (none_w, none_g, sqrt_w, sqrt_g)
            })
            .collect();
        let (first, last) = (table[0], table[table.len() - 1]);
        claim.at_least("unscaled, d_head 1024: mean largest weight", last.0, 0.9);
        claim.at_most(
            "unscaled: gradient norm at d_head 1024 over the one at d_head 16",
            last.1 / first.1,
            0.35,
        );
        let rising = table.windows(2).all(|p| p[1].0 > p[0].0 && p[1].1 < p[0].1);
        claim.check(
            "unscaled: largest weight rises and gradient norm falls at every step of d_head \
             (1 = yes)",
            f64::from(u8::from(rising)),
            "=",
            1.0,
            rising,
        );
        let band = |f: fn(&(f64, f64, f64, f64)) -> f64| {
            let v: Vec<f64> = table.iter().map(f).collect();
            let hi = v.iter().copied().fold(f64::MIN, f64::max);
            let lo = v.iter().copied().fold(f64::MAX, f64::min);
            hi / lo
        };
        claim.at_most(
            "scaled: largest over smallest mean largest weight across d_head",
            band(|r| r.2),
            1.25,
        );
        claim.at_most(
            "scaled: largest over smallest gradient norm across d_head",
            band(|r| r.3),
            1.25,
        );
        claim.at_most(
            "scaled, every d_head: mean largest weight",
            table.iter().map(|r| r.2).fold(0.0, f64::max),
            0.5,
        );
        claim.finish();
    });
}
