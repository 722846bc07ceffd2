//! Products of a few rows with weights stored as rows (`bfloat16` or `f32`), accumulated in
//! `f32`: what decoding needs, where every weight is read once per token and the bytes read
//! are the time taken.
//!
//! ```text
//! y[r, j] = bias[j] + Σ_i x[r, i] · W[j, i]          W stored [d_output, d_input], bf16
//! ```
//!
//! A `bfloat16` is the upper half of an `f32`'s bits, so widening one is a shift by 16: the
//! loop reads 16-bit values, widens them in registers and multiplies, and no `f32` copy of the
//! weights is ever made. The weight rows are PyTorch's `Linear` layout (each output's weights
//! contiguous), read as dot products: the same layout as burn's `[d_input, d_output]` weight
//! when it is a transposed view of that storage, as a loaded checkpoint's is, and as a tied
//! embedding table seen as the output head is. Output rows are split among rayon's threads.
//!
//! Many rows are a matrix product: [`linear_bf16_dot`] rounds `x` to `bfloat16` and runs on
//! `vdpbf16ps` (`bf16_dot.rs`) or, from 16 rows on a CPU with AMX, on its tiles
//! (`bf16_tiles.rs`). The choice is made here, above both kernels, so that neither imports the
//! other's caller.

use rayon::prelude::*;

pub use crate::bf16_dot::has_bf16_dot;
use crate::bf16_tiles::Amx;
use crate::instructions::Instructions;
use crate::simd::{Kernels, Pass};
use crate::weight_rows::check_operands;
pub use crate::weight_rows::{Bf16Rows, Rows, Weight, bf16_to_f32, round_to_bf16};

/// Values accumulated side by side in each dot product: two AVX-512 registers' worth, so that
/// two chains of additions run at once.
const LANES: usize = 32;

/// Output values per rayon task: enough weights (`OUTPUTS · d_input`) to pay for a task.
const OUTPUTS: usize = 64;

/// `y = x · Wᵀ + bias` for `rows` rows of `x` (`[rows, d_input]`, contiguous), `W` as
/// [`Bf16Rows`]: `[rows, d_output]`, row-major.
///
/// # Panics
/// When `x` is not `rows · d_input` long, `bias` not `d_output`, or `W`'s rows run past its
/// values.
pub fn linear_bf16(x: &[f32], rows: usize, w: &Bf16Rows<'_>, bias: Option<&[f32]>) -> Vec<f32> {
    linear_rows(x, rows, w, bias)
}

/// `y = x · Wᵀ + bias` for a few rows of `x` (`[rows, d_input]`, contiguous) and `W` stored as
/// [`Rows`] of `f32` or `bfloat16`: `[rows, d_output]`, row-major. Each row of `W` is read once
/// for all the rows of `x`, as dot products, its outputs split among rayon's threads: what a
/// decoding step needs, where the bytes of `W` read are the time taken.
///
/// # Panics
/// When `x` is not `rows · d_input` long, `bias` not `d_output`, or `W`'s rows run past its
/// values.
pub fn linear_rows<T: Weight>(
    x: &[f32],
    rows: usize,
    w: &Rows<'_, T>,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let mut ys = linear_rows_many(x, rows, &[(*w, bias)]);
    ys.pop().unwrap_or_default()
}

/// [`linear_rows`] for several products of the same rows of `x` at once (a layer's queries,
/// keys and values; SwiGLU's gate and expansion): one split of all their outputs among the
/// threads, so that the threads meet once for all of them and the small products share the
/// large ones' tasks. Returns each product's `y = x · Wᵀ + bias`, `[rows, d_output]`, in order.
///
/// # Panics
/// As [`linear_rows`], for any of the products.
pub fn linear_rows_many<T: Weight>(
    x: &[f32],
    rows: usize,
    products: &[(Rows<'_, T>, Option<&[f32]>)],
) -> Vec<Vec<f32>> {
    for (w, bias) in products {
        check_operands(x, rows, w, *bias);
    }
    // Outputs first: each task reads its rows of W once for every row of x.
    let mut by_output: Vec<Vec<f32>> = products
        .iter()
        .map(|(w, _)| vec![0f32; w.d_output * rows]) // [d_output, rows]
        .collect();
    let tasks: Vec<(&Rows<'_, T>, usize, &mut [f32])> = by_output
        .iter_mut()
        .zip(products)
        .flat_map(|(out, (w, _))| {
            out.chunks_mut(OUTPUTS * rows.max(1))
                .enumerate()
                .map(move |(task, out)| (w, task * OUTPUTS, out))
        })
        .collect();
    tasks.into_par_iter().for_each(|(w, first, out)| {
        Instructions::Best.run(Dots {
            x,
            rows,
            w,
            first,
            out,
        });
    });
    by_output
        .into_iter()
        .zip(products)
        .map(|(by_output, (w, bias))| by_rows(by_output, rows, w.d_output, *bias))
        .collect()
}

/// `[d_output, rows]` products as `[rows, d_output]`, the bias added.
fn by_rows(
    mut by_output: Vec<f32>,
    rows: usize,
    d_output: usize,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    if rows == 1 {
        // [d_output, 1] is already [1, d_output].
        if let Some(b) = bias {
            for (y, b) in by_output.iter_mut().zip(b) {
                *y += b;
            }
        }
        return by_output;
    }
    let mut y = vec![0f32; rows * d_output];
    for (j, column) in by_output.chunks_exact(rows.max(1)).enumerate() {
        let b = bias.map_or(0.0, |b| b[j]);
        for (r, value) in column.iter().enumerate() {
            y[r * d_output + j] = value + b;
        }
    }
    y
}

/// `y = bf16(x) · Wᵀ + bias` for `rows` rows of `x` (`[rows, d_input]`, contiguous), `W` as
/// [`Bf16Rows`]: `[rows, d_output]`, row-major. `None` where the CPU has no `vdpbf16ps`
/// ([`has_bf16_dot`]). From 16 rows on a CPU with AMX, the products run on its tiles (as
/// PyTorch's do there), else on `vdpbf16ps`; the sums are the same but for their rounding.
///
/// # Panics
/// When `x` is not `rows · d_input` long, `bias` not `d_output`, or `W`'s rows run past its
/// values.
pub fn linear_bf16_dot(
    x: &[f32],
    rows: usize,
    w: &Bf16Rows<'_>,
    bias: Option<&[f32]>,
) -> Option<Vec<f32>> {
    check_operands(x, rows, w, bias);
    if !has_bf16_dot() {
        return None;
    }
    if w.d_input == 0 {
        // No inputs: every output is its bias.
        return Some(bias.map_or_else(|| vec![0.0; rows * w.d_output], |b| b.repeat(rows)));
    }
    if let Some(tiles) = Amx::for_rows(rows) {
        return Some(crate::bf16_tiles::linear(&|| tiles, x, rows, w, bias));
    }
    Some(crate::bf16_dot::on_vectors(x, rows, w, bias))
}

/// The instructions on which [`linear_bf16_dot`] multiplies `rows` rows in this process, by
/// the names `/proc/cpuinfo` gives them: `amx-bf16` (AMX's `tdpbf16ps`, from 16 rows) or
/// `avx512bf16` (`vdpbf16ps`); `None` where it returns `None`.
pub fn bf16_dot_instructions(rows: usize) -> Option<&'static str> {
    if !has_bf16_dot() {
        return None;
    }
    let tiles = Amx::for_rows(rows).is_some();
    Some(if tiles { "amx-bf16" } else { "avx512bf16" })
}

/// The dot products of outputs `first..` (as many as `out` holds, `rows` values each) with
/// every row of `x`.
struct Dots<'a, T> {
    x: &'a [f32],
    rows: usize,
    w: &'a Rows<'a, T>,
    first: usize,
    out: &'a mut [f32],
}

impl<T: Weight> Pass for Dots<'_, T> {
    #[inline(always)]
    fn run<K: Kernels>(self, kernels: K) {
        let d_input = self.w.d_input;
        for (k, out) in self.out.chunks_exact_mut(self.rows.max(1)).enumerate() {
            let weights = self.w.row(self.first + k);
            for (r, y) in out.iter_mut().enumerate() {
                *y = dot(kernels, &self.x[r * d_input..(r + 1) * d_input], weights);
            }
        }
    }
}

/// `Σ x[i] · widen(w[i])`, in [`LANES`] running sums.
#[inline(always)]
fn dot<K: Kernels, T: Weight>(kernels: K, x: &[f32], w: &[T]) -> f32 {
    let mut sums = [0f32; LANES];
    let (x_blocks, x_tail) = x.split_at(x.len() / LANES * LANES);
    let (w_blocks, w_tail) = w.split_at(x_blocks.len());
    for (xs, ws) in x_blocks
        .chunks_exact(LANES)
        .zip(w_blocks.chunks_exact(LANES))
    {
        for ((s, &x), &w) in sums.iter_mut().zip(xs).zip(ws) {
            *s = kernels.mul_add(x, w.widen(), *s);
        }
    }
    let mut total = sums.iter().sum::<f32>();
    for (&x, &w) in x_tail.iter().zip(w_tail) {
        total = kernels.mul_add(x, w.widen(), total);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// `f32` rounded to the nearest `bfloat16` (ties to even), as its bits.
    fn to_bf16(v: f32) -> u16 {
        let bits = v.to_bits();
        let rounding = 0x7fff + ((bits >> 16) & 1);
        ((bits + rounding) >> 16) as u16
    }

    /// Asserts that `y` is `x · Wᵀ + bias` summed in f64 over the widened weights, within f32
    /// accumulation's rounding.
    fn assert_f64_sums<T: Weight>(
        x: &[f32],
        rows: usize,
        w: &Rows<'_, T>,
        bias: &[f32],
        y: &[f32],
    ) {
        let d_input = w.d_input;
        for r in 0..rows {
            for j in 0..w.d_output {
                let exact: f64 = f64::from(bias[j])
                    + (0..d_input)
                        .map(|i| f64::from(x[r * d_input + i]) * f64::from(w.row(j)[i].widen()))
                        .sum::<f64>();
                let got = f64::from(y[r * w.d_output + j]);
                assert!(
                    (got - exact).abs() <= 1e-5 * (1.0 + d_input as f64).sqrt(),
                    "rows {rows}, d_input {d_input}, output [{r}, {j}]: {got} vs {exact}"
                );
            }
        }
    }

    #[test]
    fn widening_is_exact_and_matches_rounding() {
        for v in [0.0f32, -0.0, 1.0, -2.5, 3.140625, 1e-30, -6.5e30] {
            let bits = to_bf16(v);
            let back = bf16_to_f32(bits);
            assert!((back - v).abs() <= v.abs() / 128.0, "{v} -> {back}");
            assert_eq!(
                to_bf16(back),
                bits,
                "{v}: widening then rounding is the identity"
            );
        }
        assert!(bf16_to_f32(0x7fc0).is_nan());
        assert_eq!(bf16_to_f32(0x7f80), f32::INFINITY);
    }

    #[test]
    fn matches_the_f64_sums_for_rows_strides_and_tails() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for (rows, d_input, d_output, pad, offset) in [
            (1, 64, 200, 0, 0),
            (1, 67, 129, 5, 3),
            (3, 31, 70, 0, 11),
            (2, 576, 130, 64, 0),
            (1, 1, 1, 0, 0),
        ] {
            let row = d_input + pad;
            let values: Vec<u16> = (0..offset + d_output * row)
                .map(|_| to_bf16(rng.random_range(-1.0f32..1.0)))
                .collect();
            let x: Vec<f32> = (0..rows * d_input)
                .map(|_| rng.random_range(-1.0f32..1.0))
                .collect();
            let bias: Vec<f32> = (0..d_output).map(|j| j as f32 * 0.01).collect();
            let w = Bf16Rows {
                values: &values,
                offset,
                d_output,
                d_input,
                row,
            };
            let y = linear_bf16(&x, rows, &w, Some(&bias));
            assert_f64_sums(&x, rows, &w, &bias, &y);
        }
    }

    /// Several products of the same rows at once, of different widths (one narrower than a
    /// task, one not a whole number of tasks), with and without a bias: each against its
    /// `f64` sums.
    #[test]
    fn many_products_at_once_match_their_f64_sums() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        for rows in [1, 3] {
            let d_input = 96;
            let widths = [200, 40, 64];
            let stores: Vec<Vec<u16>> = widths
                .iter()
                .map(|&d_output| {
                    (0..d_output * d_input)
                        .map(|_| to_bf16(rng.random_range(-1.0f32..1.0)))
                        .collect()
                })
                .collect();
            let x: Vec<f32> = (0..rows * d_input)
                .map(|_| rng.random_range(-1.0f32..1.0))
                .collect();
            let biases: Vec<Vec<f32>> = widths
                .iter()
                .map(|&d| (0..d).map(|j| j as f32 * 0.02 - 0.5).collect())
                .collect();
            let products: Vec<(Bf16Rows<'_>, Option<&[f32]>)> = stores
                .iter()
                .zip(&widths)
                .zip(&biases)
                .enumerate()
                .map(|(i, ((values, &d_output), bias))| {
                    let w = Bf16Rows {
                        values,
                        offset: 0,
                        d_output,
                        d_input,
                        row: d_input,
                    };
                    (w, (i != 1).then_some(bias.as_slice()))
                })
                .collect();
            let ys = linear_rows_many(&x, rows, &products);
            assert_eq!(ys.len(), 3);
            for ((y, (w, bias)), &d_output) in ys.iter().zip(&products).zip(&widths) {
                let zeros = vec![0.0; d_output];
                assert_f64_sums(&x, rows, w, bias.unwrap_or(&zeros), y);
            }
        }
    }

    #[test]
    fn f32_rows_match_the_f64_sums() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for (rows, d_input, d_output, pad, offset) in
            [(1, 576, 193, 0, 0), (3, 67, 129, 5, 3), (8, 1, 2, 0, 1)]
        {
            let row = d_input + pad;
            let values: Vec<f32> = (0..offset + d_output * row)
                .map(|_| rng.random_range(-1.0f32..1.0))
                .collect();
            let x: Vec<f32> = (0..rows * d_input)
                .map(|_| rng.random_range(-1.0f32..1.0))
                .collect();
            let bias: Vec<f32> = (0..d_output).map(|j| 0.5 - j as f32 * 0.01).collect();
            let w = Rows {
                values: &values,
                offset,
                d_output,
                d_input,
                row,
            };
            let y = linear_rows(&x, rows, &w, Some(&bias));
            assert_f64_sums(&x, rows, &w, &bias, &y);
        }
    }

    #[test]
    fn every_instruction_set_gives_the_same_sums() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let (d_input, d_output) = (100, 5);
        let values: Vec<u16> = (0..d_input * d_output)
            .map(|_| to_bf16(rng.random_range(-1.0f32..1.0)))
            .collect();
        let x: Vec<f32> = (0..d_input)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let w = Bf16Rows {
            values: &values,
            offset: 0,
            d_output,
            d_input,
            row: d_input,
        };
        let mut results = Vec::new();
        for instructions in [
            Instructions::Best,
            Instructions::Avx2,
            Instructions::Portable,
        ] {
            let mut out = vec![f32::NAN; d_output];
            instructions.run(Dots {
                x: &x,
                rows: 1,
                w: &w,
                first: 0,
                out: &mut out,
            });
            results.push(out);
        }
        for pair in results.windows(2) {
            for (a, b) in pair[0].iter().zip(&pair[1]) {
                assert!((a - b).abs() <= 1e-5, "{a} vs {b}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "past its values")]
    fn rows_past_the_values_are_refused() {
        let values = vec![0u16; 10];
        let w = Bf16Rows {
            values: &values,
            offset: 0,
            d_output: 3,
            d_input: 4,
            row: 4,
        };
        linear_bf16(&[0.0; 4], 1, &w, None);
    }
}
