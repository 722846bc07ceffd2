//! LayerNorm's row loops on plain slices, forward and backward, and RMSNorm's forward, the rows
//! split among rayon's threads.
//!
//! ```text
//! LayerNorm:  μ = mean(x)      r = 1 / √(mean((x − μ)²) + ε)      x̂ = (x − μ) · r
//!             y = γ ∘ x̂ + β
//! RMSNorm:    r = 1 / √(mean(x²) + ε)                             y = γ ∘ (x · r)
//! ```
//!
//! Each sum runs over [`LANES`] partial sums, an order the compiler keeps in vector registers
//! (a single running sum would pin it to one lane, as float addition does not reassociate).

use rayon::prelude::*;

/// Values per rayon task: enough to pay for a task.
const CHUNK: usize = 1 << 14;
/// Partial sums per reduction.
const LANES: usize = 16;

/// Rows per task for rows of `d` values.
fn rows_per_task(d: usize) -> usize {
    (CHUNK / d.max(1)).max(1)
}

/// `Σ f(a[i], b[i])` over [`LANES`] partial sums.
#[inline(always)]
fn sum2(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let (a_blocks, b_blocks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_blocks
        .remainder()
        .iter()
        .zip(b_blocks.remainder())
        .map(|(&a, &b)| f(a, b))
        .sum();
    for (a, b) in a_blocks.zip(b_blocks) {
        for l in 0..LANES {
            acc[l] += f(a[l], b[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `(y, mean, rstd)` of the rows of `x`, `gamma.len()` values each:
/// `y = γ ∘ (x − μ) · rstd + β`, `rstd = 1 / √(σ² + ε)` with the biased variance `σ²`.
///
/// # Shapes
/// - `x`, `y`: `[rows, d]`, row-major
/// - `gamma`, `beta`: `[d]`
/// - `mean`, `rstd`: `[rows]`
pub fn layer_norm(
    x: &[f32],
    gamma: &[f32],
    beta: &[f32],
    epsilon: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let d = gamma.len();
    let n_rows = x.len() / d;
    let (mut y, mut mean, mut rstd) = (vec![0.0; x.len()], vec![0.0; n_rows], vec![0.0; n_rows]);
    let task = rows_per_task(d);
    y.par_chunks_mut(task * d)
        .zip(x.par_chunks(task * d))
        .zip(mean.par_chunks_mut(task).zip(rstd.par_chunks_mut(task)))
        .for_each(|((y, x), (mean, rstd))| {
            for (((y, x), mean), rstd) in y
                .chunks_exact_mut(d)
                .zip(x.chunks_exact(d))
                .zip(mean.iter_mut())
                .zip(rstd.iter_mut())
            {
                let mu = sum2(x, x, |v, _| v) / d as f32;
                let var = sum2(x, x, |v, _| (v - mu) * (v - mu)) / d as f32;
                let r = 1.0 / (var + epsilon).sqrt();
                for (((y, &x), &g), &b) in y.iter_mut().zip(x).zip(gamma).zip(beta) {
                    *y = (x - mu) * r * g + b;
                }
                (*mean, *rstd) = (mu, r);
            }
        });
    (y, mean, rstd)
}

/// RMSNorm of the rows of `x`, `gamma.len()` values each: `y = γ ∘ (x · r)` with
/// `r = 1 / √(mean(x²) + ε)`, in the order transformers' `LlamaRMSNorm` computes it in `f32`.
///
/// # Shapes
/// - `x`, `y`: `[rows, d]`, row-major
/// - `gamma`: `[d]`
///
/// # Panics
/// When `x` is not a whole number of rows of `gamma.len()` values.
pub fn rms_norm(x: &[f32], gamma: &[f32], epsilon: f32) -> Vec<f32> {
    let d = gamma.len();
    assert!(
        d > 0 && x.len().is_multiple_of(d),
        "x holds {} values, not rows of {d}",
        x.len()
    );
    let mut y = vec![0.0; x.len()];
    let task = rows_per_task(d);
    y.par_chunks_mut(task * d)
        .zip(x.par_chunks(task * d))
        .for_each(|(y, x)| {
            for (y, x) in y.chunks_exact_mut(d).zip(x.chunks_exact(d)) {
                let r = 1.0 / (sum2(x, x, |v, _| v * v) / d as f32 + epsilon).sqrt();
                for ((y, &x), &g) in y.iter_mut().zip(x).zip(gamma) {
                    *y = g * (x * r);
                }
            }
        });
    y
}

/// `(dx, dgamma, dbeta)` of `Σ y ∘ dy`, given the forward's `mean` and `rstd`:
///
/// ```text
/// dβ = Σ_rows dy      dγ = Σ_rows dy ∘ x̂      g = dy ∘ γ      dx = r · (g − mean(g) − x̂ · mean(g ∘ x̂))
/// ```
///
/// Each task sums its rows' share of `dgamma` and `dbeta`, and the shares are added at the end.
pub fn layer_norm_backward(
    x: &[f32],
    gamma: &[f32],
    mean: &[f32],
    rstd: &[f32],
    dy: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let d = gamma.len();
    let task = rows_per_task(d);
    let mut dx = vec![0.0; x.len()];
    let (dgamma, dbeta) = dx
        .par_chunks_mut(task * d)
        .zip(x.par_chunks(task * d).zip(dy.par_chunks(task * d)))
        .zip(mean.par_chunks(task).zip(rstd.par_chunks(task)))
        .map(|((dx, (x, dy)), (mean, rstd))| {
            let (mut dgamma, mut dbeta) = (vec![0.0f32; d], vec![0.0f32; d]);
            for ((dx, (x, dy)), (&mu, &r)) in dx
                .chunks_exact_mut(d)
                .zip(x.chunks_exact(d).zip(dy.chunks_exact(d)))
                .zip(mean.iter().zip(rstd))
            {
                // dx holds x̂ until the last loop overwrites it.
                for (x_hat, &x) in dx.iter_mut().zip(x) {
                    *x_hat = (x - mu) * r;
                }
                let x_hat: &[f32] = dx;
                for (((dg, db), &dy), &x_hat) in
                    dgamma.iter_mut().zip(dbeta.iter_mut()).zip(dy).zip(x_hat)
                {
                    *dg += dy * x_hat;
                    *db += dy;
                }
                let mean_g = sum2(dy, gamma, |dy, g| dy * g) / d as f32;
                let mut acc = [0.0f32; LANES];
                let mut tail = 0.0f32;
                let blocks = d / LANES * LANES;
                for i in (0..blocks).step_by(LANES) {
                    for l in 0..LANES {
                        acc[l] += dy[i + l] * gamma[i + l] * x_hat[i + l];
                    }
                }
                for i in blocks..d {
                    tail += dy[i] * gamma[i] * x_hat[i];
                }
                let mean_g_x_hat = (acc.iter().sum::<f32>() + tail) / d as f32;
                for ((dx, &dy), &g) in dx.iter_mut().zip(dy).zip(gamma) {
                    let x_hat = *dx;
                    *dx = r * (dy * g - mean_g - x_hat * mean_g_x_hat);
                }
            }
            (dgamma, dbeta)
        })
        .reduce(
            || (vec![0.0; d], vec![0.0; d]),
            |(mut ga, mut ba), (gb, bb)| {
                ga.iter_mut().zip(gb).for_each(|(a, b)| *a += b);
                ba.iter_mut().zip(bb).for_each(|(a, b)| *a += b);
                (ga, ba)
            },
        );
    (dx, dgamma, dbeta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{SeededRng, assert_close_slices};

    fn f32s(v: &[f64]) -> Vec<f32> {
        v.iter().map(|&x| x as f32).collect()
    }

    /// RMSNorm against the `f64` definition, on rows shorter and longer than [`LANES`], one
    /// row (a decoding step's) and enough rows to split among tasks.
    #[test]
    fn rms_norm_matches_the_definition() {
        let mut rng = SeededRng::new(23);
        for (n_rows, d) in [(1, 5), (1, 576), (7, 16), (2, 37), (600, 40)] {
            let mut draw = |n: usize| -> Vec<f64> {
                (0..n).map(|_| f64::from(rng.unit()) * 4.0 - 2.0).collect()
            };
            let (x, gamma) = (draw(n_rows * d), draw(d));
            let eps = 1e-6;
            let y = rms_norm(&f32s(&x), &f32s(&gamma), eps as f32);
            let want = crate::oracle::rms_norm(&x, &gamma, eps);
            assert_close_slices(&y, &f32s(&want), 1e-5, 1e-5, &format!("[{n_rows}, {d}]"));
        }
    }

    #[test]
    #[should_panic(expected = "x holds 7 values, not rows of 3")]
    fn rms_norm_refuses_a_partial_row() {
        rms_norm(&[0.0; 7], &[1.0; 3], 1e-6);
    }

    /// Both passes against the `f64` definitions, on rows shorter and longer than [`LANES`]
    /// and enough rows to split among tasks.
    #[test]
    fn forward_and_backward_match_the_definitions() {
        let mut rng = SeededRng::new(17);
        for (n_rows, d) in [(3, 5), (7, 16), (2, 37), (600, 40)] {
            let mut draw =
                |n: usize| -> Vec<f64> { (0..n).map(|_| f64::from(rng.unit()) * 2.0).collect() };
            let (x, gamma, beta, dy) = (draw(n_rows * d), draw(d), draw(d), draw(n_rows * d));
            let eps = 1e-5;
            let (y, mean, rstd) = layer_norm(&f32s(&x), &f32s(&gamma), &f32s(&beta), eps as f32);
            let want = crate::oracle::layer_norm(&x, &gamma, &beta, eps);
            assert_close_slices(
                &y,
                &f32s(&want),
                1e-5,
                1e-4,
                &format!("y of [{n_rows}, {d}]"),
            );
            let (dx, dgamma, dbeta) =
                layer_norm_backward(&f32s(&x), &f32s(&gamma), &mean, &rstd, &f32s(&dy));
            let [want_dx, want_dgamma, want_dbeta] =
                crate::oracle::layer_norm_backward(&x, &gamma, &dy, eps);
            assert_close_slices(
                &dx,
                &f32s(&want_dx),
                1e-4,
                1e-3,
                &format!("dx of [{n_rows}, {d}]"),
            );
            assert_close_slices(&dgamma, &f32s(&want_dgamma), 1e-3, 1e-4, "dgamma");
            assert_close_slices(&dbeta, &f32s(&want_dbeta), 1e-3, 1e-4, "dbeta");
        }
    }
}
