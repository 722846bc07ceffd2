//! cargo run --release --example train_reverse -- --device flex
//!
//! The whole training loop on one screen: a Transformer encoder learns to reverse a sequence of
//! tokens.
//!
//! `attn-train` does the same with checkpoints, schedules, clipping, metrics files and plots
//! (see `docs/training.md`); this example keeps only what learning needs, so that every step
//! is visible:
//!
//! 1. a batch: random tokens `x`, and targets `y[i] = x[seq_len − 1 − i]`;
//! 2. forward: `logits = model(x)`, `[batch, seq_len, vocab]`, one distribution over tokens per
//!    position ([`TokenEncoder`]);
//! 3. loss: cross-entropy between the logits and the targets, averaged over positions;
//! 4. backward: `loss.backward()` gives the gradient of every parameter;
//! 5. update: Adam moves every parameter against its gradient ([`AdamConfig`]), with the
//!    learning rate warming up linearly over the first steps.
//!
//! Every `--eval-every` steps it measures the model, without dropout and without gradients, on
//! a held-out set: token accuracy (positions right) and sequence accuracy (whole sequences
//! right). At the end it prints a few held-out sequences with the model's answers.
//!
//! Reversing needs positions: the output at position `i` must come from position
//! `seq_len − 1 − i`, and attention alone cannot tell positions apart. With `--pos none` the
//! model stays near chance, whatever the number of steps.
//!
//! # Arguments
//!
//! - `--device NAME`: the backend (`flex` by default).
//! - `--pos SCHEME`: `sinusoidal` (default), `learned`, `rope`, `alibi` or `none`.
//! - `--steps N` (600), `--batch-size N` (64), `--lr X` (0.002), `--warmup-steps N` (50).
//! - `--seq-len N` (10), `--vocab N` (10): the task's size.
//! - `--d-model N` (64), `--n-heads N` (4), `--n-layers N` (2), `--d-ff N` (128): the model's.
//! - `--eval-every N` (100), `--seed N` (1).

use anyhow::{Context, Result, anyhow, ensure};
use attn::model::{NormPlacement, TokenEncoder, TokenEncoderConfig, TokenEncoderInput};
use attn::train::backend;
use attn::train::config::PosName;
use attn::train::random::Rng;
use attn::train::tasks::{TaskConfig, TaskKind};
use burn::module::Module;
use burn::nn::loss::{CrossEntropyLoss, CrossEntropyLossConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Int, Tensor, TensorData};
use clap::Parser;

/// Command-line arguments.
#[derive(Parser, Debug)]
#[command(about = "Train a Transformer encoder to reverse sequences, the loop written out")]
struct Args {
    /// Backend to run on (flex, ndarray, wgpu, vulkan, metal, cuda; as compiled in).
    #[arg(long, default_value_t = backend::default_backend().to_string())]
    device: String,
    /// How the model learns where each token is.
    #[arg(long, value_enum, default_value_t = PosName::Sinusoidal)]
    pos: PosName,
    /// Optimizer updates.
    #[arg(long, default_value_t = 600)]
    steps: usize,
    /// Sequences per update.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Peak learning rate, reached after the warm-up.
    #[arg(long, default_value_t = 2e-3)]
    lr: f64,
    /// Updates over which the learning rate rises linearly from 0 to `lr`.
    #[arg(long, default_value_t = 50)]
    warmup_steps: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 10)]
    seq_len: usize,
    /// Distinct tokens.
    #[arg(long, default_value_t = 10)]
    vocab: usize,
    /// Model width.
    #[arg(long, default_value_t = 64)]
    d_model: usize,
    /// Attention heads per layer.
    #[arg(long, default_value_t = 4)]
    n_heads: usize,
    /// Encoder blocks.
    #[arg(long, default_value_t = 2)]
    n_layers: usize,
    /// Hidden width of the feed-forward networks.
    #[arg(long, default_value_t = 128)]
    d_ff: usize,
    /// Evaluate every this many steps.
    #[arg(long, default_value_t = 100)]
    eval_every: usize,
    /// Seed of the weights and of the data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        args.seq_len >= 2 && args.vocab >= 2,
        "seq_len and vocab must be at least 2"
    );
    ensure!(args.eval_every > 0, "eval_every must be at least 1");
    let device = backend::device(&args.device).context("choosing the backend")?;
    // Gradients are recorded only for tensors on an autodiff device.
    let train_device = device.clone().autodiff();

    // The model: embeddings (+ positions), encoder blocks, and a linear head with one class per
    // token. Pre-norm with a final LayerNorm and no dropout: the task is small and noise-free.
    train_device.seed(args.seed);
    let config = TokenEncoderConfig::new(
        args.vocab,
        args.vocab,
        args.d_model,
        args.n_heads,
        args.n_layers,
        args.d_ff,
        args.pos.scheme(args.seq_len),
    )
    .with_dropout(0.0)
    .with_norm(NormPlacement::Pre)
    .with_final_norm(true);
    let mut model: TokenEncoder = config.init(&train_device).context("building the model")?;
    // Adam with the paper's β₂ = 0.98 and ε = 1e-9 (§5.3).
    let mut optim = AdamConfig::new()
        .with_beta_2(0.98)
        .with_epsilon(1e-9)
        .init();
    let loss_fn = CrossEntropyLossConfig::new().init(&train_device);
    println!(
        "reverse: seq_len {}, vocab {}; model d_model {}, {} heads, {} layers, d_ff {}, {} parameters, positions {:?}",
        args.seq_len,
        args.vocab,
        args.d_model,
        args.n_heads,
        args.n_layers,
        args.d_ff,
        model.num_params(),
        args.pos
    );

    // The reverse task of attn-train: random tokens, and the same tokens backwards as targets.
    let task = TaskConfig {
        kind: TaskKind::Reverse,
        seq_len: args.seq_len,
        vocab: args.vocab,
        min_distance: 1,
        ..TaskConfig::default()
    };
    let mut data = Rng::new(args.seed);
    let held_out = task.batch(512, &mut Rng::new(args.seed ^ 0xE7A1));
    let held_out = (held_out.tokens, held_out.targets);
    println!(
        "{:>6} {:>10} {:>10} {:>10} {:>10}",
        "step", "lr", "train loss", "token acc", "seq acc"
    );
    for step in 1..=args.steps {
        // 1. A batch.
        let batch = task.batch(args.batch_size, &mut data);
        let x = batch.tokens_tensor(&train_device); // [batch, seq_len]
        let y = batch.targets_tensor(&train_device); // [batch, seq_len]
        // 2. Forward.
        let logits = model.forward(TokenEncoderInput::new(x)).logits; // [batch, seq_len, vocab]
        // 3. Loss.
        let loss = token_loss(&loss_fn, logits, y);
        // 4. Backward.
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        // 5. Update.
        let lr = args.lr * (step as f64 / args.warmup_steps.max(1) as f64).min(1.0);
        model = optim.step(lr, model, grads);

        if step % args.eval_every == 0 || step == args.steps {
            let train_loss = loss.into_scalar::<f32>();
            let (token_acc, seq_acc) = accuracy(&model.valid(), &held_out, args.seq_len, &device)?;
            println!("{step:>6} {lr:>10.2e} {train_loss:>10.4} {token_acc:>10.3} {seq_acc:>10.3}");
        }
    }

    println!("\nheld-out examples (input → output, * marks a wrong token):");
    let (x, _) = &held_out;
    let predictions = predict(
        &model.valid(),
        x,
        x.len() / args.seq_len,
        args.seq_len,
        &device,
    )?;
    for (input, output) in x
        .chunks(args.seq_len)
        .zip(predictions.chunks(args.seq_len))
        .take(4)
    {
        let wanted = input.iter().rev();
        let shown: Vec<String> = output
            .iter()
            .zip(wanted)
            .map(|(o, w)| {
                if o == w {
                    format!("{o}")
                } else {
                    format!("{o}*")
                }
            })
            .collect();
        println!("  {input:?} → [{}]", shown.join(", "));
    }
    Ok(())
}

/// Token ids as a `[batch, seq_len]` tensor.
fn tensor(ids: &[i64], batch: usize, seq_len: usize, device: &Device) -> Tensor<2, Int> {
    Tensor::from_data(TensorData::new(ids.to_vec(), [batch, seq_len]), device)
}

/// Mean cross-entropy over every position of every sequence.
///
/// # Shapes
/// - `logits`: `[batch, seq_len, vocab]`
/// - `targets`: `[batch, seq_len]`
/// - returns: `[1]`
fn token_loss(loss_fn: &CrossEntropyLoss, logits: Tensor<3>, targets: Tensor<2, Int>) -> Tensor<1> {
    let [batch, seq_len, vocab] = logits.dims();
    let logits = logits.reshape([batch * seq_len, vocab]); // [batch * seq_len, vocab]
    let targets = targets.reshape([batch * seq_len]); // [batch * seq_len]
    loss_fn.forward(logits, targets)
}

/// The model's most likely token at every position, row-major `[batch, seq_len]`.
fn predict(
    model: &TokenEncoder,
    x: &[i64],
    batch: usize,
    seq_len: usize,
    device: &Device,
) -> Result<Vec<i64>> {
    let logits = model
        .forward(TokenEncoderInput::new(tensor(x, batch, seq_len, device)))
        .logits; // [batch, seq_len, vocab]
    logits
        .argmax(2) // [batch, seq_len, 1]
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .map_err(|e| anyhow!("reading predictions back: {e:?}"))
}

/// Token accuracy and whole-sequence accuracy on `(x, y)`.
fn accuracy(
    model: &TokenEncoder,
    (x, y): &(Vec<i64>, Vec<i64>),
    seq_len: usize,
    device: &Device,
) -> Result<(f64, f64)> {
    let batch = x.len() / seq_len;
    let predictions = predict(model, x, batch, seq_len, device)?;
    let right = predictions.iter().zip(y).filter(|(p, t)| p == t).count();
    let whole = predictions
        .chunks(seq_len)
        .zip(y.chunks(seq_len))
        .filter(|(p, t)| p == t)
        .count();
    Ok((right as f64 / y.len() as f64, whole as f64 / batch as f64))
}
