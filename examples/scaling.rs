//! cargo run --release --example scaling -- --device flex
//!
//! Why attention divides by `√d_k`: two tables, one row per key width `d_k`.
//!
//! Queries and keys are drawn with independent entries of mean 0 and variance 1, as they
//! roughly are in a freshly initialised model. A dot product `q·k` is then a sum of `d_k`
//! products of variance 1, so its variance is `d_k`: the scores spread further apart the wider
//! the heads. Softmax turns a wide spread into a near one-hot row (saturation), where
//! the gradient that flows back through it vanishes.
//!
//! The first table shows the variance of the scores under three scales:
//!
//! - `1` (no scaling): variance grows like `d_k`;
//! - `1/√d_k` (the paper's choice, [`scaled_scores`] by default): variance stays near 1;
//! - `1/d_k`: variance shrinks like `1/d_k`, and attention flattens towards uniform.
//!
//! The second table shows what softmax ([`safe_softmax`]) makes of them, averaged over rows:
//!
//! - `max w`: the largest weight of a row; `1/seq_len_kv` is uniform, 1 is one-hot;
//! - `1−Σw²`: the trace of softmax's Jacobian `diag(w) − w·wᵀ`, i.e. `Σ ∂w_i/∂s_i`: how much
//!   the weights still move when the scores move. It is `1 − 1/seq_len_kv` for a uniform row
//!   and 0 for a saturated one.
//!
//! # Arguments
//!
//! - `--device NAME`: the backend (`flex` by default).
//! - `--seq-len-kv N`: keys per query row (16).
//! - `--rows N`: query rows averaged over (2048).
//! - `--seed N`: seed of the device's random generator (0).

use anyhow::{Context, Result};
use attn::core::{safe_softmax, scaled_scores};
use attn::train::backend;
use burn::tensor::{Distribution, Tensor};
use clap::Parser;

/// Command-line arguments.
#[derive(Parser, Debug)]
#[command(about = "Score variance and softmax saturation with and without 1/sqrt(d_k)")]
struct Args {
    /// Backend to run on (flex, ndarray, wgpu, vulkan, metal, cuda; as compiled in).
    #[arg(long, default_value_t = backend::default_backend().to_string())]
    device: String,
    /// Keys per query row.
    #[arg(long, default_value_t = 16)]
    seq_len_kv: usize,
    /// Query rows to average over.
    #[arg(long, default_value_t = 2048)]
    rows: usize,
    /// Seed of the device's random generator.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// Key widths, one row of each table per width.
const D_KS: [usize; 7] = [1, 4, 16, 64, 256, 1024, 4096];

/// Statistics of one row of scores under one scale.
struct Stats {
    /// Variance of the scores.
    variance: f64,
    /// Mean over rows of the largest weight.
    max_weight: f64,
    /// Mean over rows of `1 − Σ w²`.
    slope: f64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let device = backend::device(&args.device).context("choosing the backend")?;
    device.seed(args.seed);
    println!(
        "q, k ~ N(0, 1) entries; {} query rows × {} keys per d_k, on {}.",
        args.rows, args.seq_len_kv, args.device
    );
    println!(
        "Uniform attention would give max w = {:.3} and 1−Σw² = {:.3}.",
        1.0 / args.seq_len_kv as f64,
        1.0 - 1.0 / args.seq_len_kv as f64
    );

    let mut table = Vec::new();
    for d_k in D_KS {
        let normal = Distribution::Normal(0.0, 1.0);
        let q = Tensor::<4>::random([1, 1, args.rows, d_k], normal, &device); // [1, 1, rows, d_k]
        let k = Tensor::<4>::random([1, 1, args.seq_len_kv, d_k], normal, &device); // [1, 1, seq_len_kv, d_k]
        let scales = [1.0, 1.0 / (d_k as f64).sqrt(), 1.0 / d_k as f64];
        let stats =
            scales.map(|scale| stats(scaled_scores(q.clone(), k.clone(), scale), args.seq_len_kv));
        table.push((d_k, stats));
    }

    println!("\nVariance of the scores q·k · scale");
    println!(
        "{:>6} | {:>12} {:>12} {:>12}",
        "d_k", "scale 1", "1/√d_k", "1/d_k"
    );
    for (d_k, [none, sqrt, full]) in &table {
        let [a, b, c] = [none, sqrt, full].map(|s| s.variance);
        println!("{d_k:>6} | {a:>12.3} {b:>12.3} {c:>12.5}");
    }

    println!(
        "\nSoftmax of those scores: mean largest weight, and mean 1−Σw² (how much the weights can still move)"
    );
    println!(
        "{:>6} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9}",
        "d_k", "max w:1", "1/√d_k", "1/d_k", "1−Σw²:1", "1/√d_k", "1/d_k"
    );
    for (d_k, stats) in &table {
        let m = stats.each_ref().map(|s| s.max_weight);
        let g = stats.each_ref().map(|s| s.slope);
        println!(
            "{d_k:>6} | {:>9.3} {:>9.3} {:>9.3} | {:>9.3} {:>9.3} {:>9.3}",
            m[0], m[1], m[2], g[0], g[1], g[2]
        );
    }
    Ok(())
}

/// Variance of `scores` and the softmax statistics of its rows.
///
/// # Shapes
/// - `scores`: `[1, 1, rows, seq_len_kv]`
fn stats(scores: Tensor<4>, seq_len_kv: usize) -> Stats {
    let weights = safe_softmax(scores.clone()); // [1, 1, rows, seq_len_kv]
    let s = read(scores);
    let w = read(weights);
    let n = s.len() as f64;
    let mean = s.iter().sum::<f64>() / n;
    let variance = s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    let rows = w.len() / seq_len_kv;
    let (mut max_weight, mut slope) = (0.0, 0.0);
    for row in w.chunks(seq_len_kv) {
        max_weight += row.iter().copied().fold(0.0, f64::max);
        slope += 1.0 - row.iter().map(|x| x * x).sum::<f64>();
    }
    Stats {
        variance,
        max_weight: max_weight / rows as f64,
        slope: slope / rows as f64,
    }
}

fn read(t: Tensor<4>) -> Vec<f64> {
    t.into_data()
        .try_to_vec::<f32>()
        .expect("a float tensor reads back as f32")
        .into_iter()
        .map(f64::from)
        .collect()
}
