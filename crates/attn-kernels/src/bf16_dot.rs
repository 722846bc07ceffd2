//! Products of many rows with `bfloat16` weights on AVX-512 BF16's `vdpbf16ps`: the inputs are
//! rounded to `bfloat16` and each instruction multiplies 32 pairs and adds them, in pairs, to 16
//! `f32` sums. This is how PyTorch multiplies a `bfloat16` model's activations by its weights on
//! such a CPU; it does twice the multiply-adds of an `f32` fused multiply-add per instruction.
//!
//! ```text
//! y[r, j] = bias[j] + Σ_p  bf16(x[r, 2p])·W[j, 2p] + bf16(x[r, 2p+1])·W[j, 2p+1]
//! ```
//!
//! `vdpbf16ps` takes its operands as pairs along the sum: one 32-bit lane holds `x[r, 2p]` and
//! `x[r, 2p+1]`, and the matching lane of the other operand `W[j, 2p]` and `W[j, 2p+1]`. So
//! a row of `x` rounded to `bfloat16` is already in that form, one pair broadcast to every lane;
//! the weights are copied, 128 outputs at a time into a buffer of the thread's, as `[p, j]`
//! pairs (a transpose of 32-bit pairs), and 32 outputs are two vectors. A register block of 12
//! rows by 32 outputs is 24 sums, with no horizontal addition at the end.
//!
//! Like Intel's definition of the instruction, products of denormal values count as zero.
//!
//! The loads, the stores and the broadcasts are `core::arch` intrinsics on raw pointers: this
//! module alone in the crate allows unsafe code for them, each block with its bounds stated.

use rayon::prelude::*;

use crate::half::Bf16Rows;

/// Rows of `x` per register block.
const MR: usize = 12;
/// Outputs per register block: two vectors of 16.
const NR: usize = 32;
/// Outputs whose weights one task copies and multiplies by its rows.
const STRIPE: usize = 4 * NR;

/// Whether this CPU runs [`linear_bf16_dot`] (AVX-512 F, BW and BF16), and `ATTN_NATIVE_ISA`
/// does not cap the kernels below AVX-512.
pub fn has_bf16_dot() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::instructions::avx512_allowed()
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `f32` rounded to the nearest `bfloat16` (ties to even), as its bits; a NaN stays a NaN.
#[inline]
pub fn round_to_bf16(v: f32) -> u16 {
    let bits = v.to_bits();
    if v.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let lsb = (bits >> 16) & 1;
    (bits.wrapping_add(0x7fff + lsb) >> 16) as u16
}

/// `y = bf16(x) · Wᵀ + bias` for `rows` rows of `x` (`[rows, d_input]`, contiguous), `W` as
/// [`Bf16Rows`]: `[rows, d_output]`, row-major. `None` where the CPU has no `vdpbf16ps`
/// ([`has_bf16_dot`]).
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
    assert_eq!(x.len(), rows * w.d_input, "x is [rows, d_input]");
    assert!(w.row >= w.d_input, "rows overlap");
    if w.d_output > 0 {
        let end = w.offset + (w.d_output - 1) * w.row + w.d_input;
        assert!(end <= w.values.len(), "W ends at {end}, past its values");
    }
    if let Some(b) = bias {
        assert_eq!(b.len(), w.d_output, "bias is [d_output]");
    }
    if !has_bf16_dot() {
        return None;
    }
    let pairs = w.d_input.div_ceil(2);
    // Each row of x as bfloat16 pairs, the last one zero-padded when d_input is odd.
    let mut a = vec![0u32; rows * pairs];
    if pairs > 0 {
        a.par_chunks_mut(pairs)
            .zip(x.par_chunks(w.d_input.max(1)))
            .for_each(|(packed, row)| {
                for (pair, values) in packed.iter_mut().zip(row.chunks(2)) {
                    let low = u32::from(round_to_bf16(values[0]));
                    let high = values.get(1).map_or(0, |&v| u32::from(round_to_bf16(v)));
                    *pair = low | (high << 16);
                }
            });
    }
    let mut y = vec![0f32; rows * w.d_output];
    if rows == 0 || w.d_output == 0 {
        return Some(y);
    }
    // Tasks: stripes of outputs, and where they are few, blocks of rows too, so that every
    // thread has several.
    let stripes = w.d_output.div_ceil(STRIPE);
    let wanted = 4 * rayon::current_num_threads();
    let row_blocks = rows.div_ceil(MR);
    let splits = wanted.div_ceil(stripes).clamp(1, row_blocks);
    let rows_per_task = row_blocks.div_ceil(splits) * MR;
    let out = Out(y.as_mut_ptr());
    let out = &out;
    let a = &a;
    (0..stripes * splits).into_par_iter().for_each(|task| {
        let (stripe, split) = (task / splits, task % splits);
        let first = stripe * STRIPE;
        let outputs = STRIPE.min(w.d_output - first);
        let row_range = split * rows_per_task..((split + 1) * rows_per_task).min(rows);
        if row_range.is_empty() {
            return;
        }
        let packed = pack_stripe(w, first, outputs, pairs);
        let bias = bias.map(|b| &b[first..first + outputs]);
        #[cfg(target_arch = "x86_64")]
        avx512::stripe(
            a, pairs, row_range, &packed, outputs, bias, out, w.d_output, first,
        );
    });
    Some(y)
}

/// The output's first value, shared by the tasks: each writes only its own outputs of its own
/// rows.
struct Out(*mut f32);
// SAFETY: the tasks of `linear_bf16_dot` write disjoint elements of the output (their stripe
// of outputs in their block of rows), which outlives them.
#[allow(unsafe_code)]
unsafe impl Sync for Out {}

/// Outputs `first..first + outputs` of `w` as `[p, j]` pairs, `j` padded with zeros to a
/// multiple of [`NR`]: value `p · width + j` holds `W[first + j, 2p]` and `W[first + j, 2p+1]`
/// (zero past `d_input`).
fn pack_stripe(w: &Bf16Rows<'_>, first: usize, outputs: usize, pairs: usize) -> Vec<u32> {
    let width = outputs.div_ceil(NR) * NR;
    let mut packed = vec![0u32; pairs * width];
    for j in 0..outputs {
        let start = w.offset + (first + j) * w.row;
        let row = &w.values[start..start + w.d_input];
        for (p, values) in row.chunks(2).enumerate() {
            let high = values.get(1).map_or(0, |&v| u32::from(v));
            packed[p * width + j] = u32::from(values[0]) | (high << 16);
        }
    }
    packed
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod avx512 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{MR, NR, Out};

    /// Rows `rows` of the output's stripe: `outputs` values from `first`, from the packed
    /// inputs `a` (`pairs` per row) and the packed stripe of weights.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn stripe(
        a: &[u32],
        pairs: usize,
        rows: Range<usize>,
        packed: &[u32],
        outputs: usize,
        bias: Option<&[f32]>,
        out: &Out,
        d_output: usize,
        first: usize,
    ) {
        let width = outputs.div_ceil(NR) * NR;
        assert!(rows.end * pairs <= a.len() && packed.len() == pairs * width);
        let mut row = rows.start;
        while row < rows.end {
            let block = MR.min(rows.end - row);
            for panel in (0..outputs).step_by(NR) {
                let columns = NR.min(outputs - panel);
                let bias = bias.map(|b| &b[panel..panel + columns]);
                // SAFETY: `has_bf16_dot` held before any task started; the block's rows of `a`
                // lie inside `a` (the assertion above), its `pairs` rows of the panel inside
                // `packed`, and the output elements written are rows `row..row + block` of
                // columns `first + panel..` + `columns`, inside `[rows, d_output]` and this
                // task's own.
                unsafe {
                    tile(
                        a.as_ptr().add(row * pairs),
                        pairs,
                        block,
                        packed.as_ptr().add(panel),
                        width,
                        bias,
                        out.0.add(row * d_output + first + panel),
                        d_output,
                        columns,
                    );
                }
            }
            row += block;
        }
    }

    /// Up to [`MR`] rows by up to [`NR`] outputs: `block` rows of `a` (each `pairs` pairs,
    /// `pairs` apart), the panel's pairs `width` apart in `b`, written to `c` (rows `ldc`
    /// apart), `columns` of them.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        a: *const u32,
        pairs: usize,
        block: usize,
        b: *const u32,
        width: usize,
        bias: Option<&[f32]>,
        c: *mut f32,
        ldc: usize,
        columns: usize,
    ) {
        let mut sums = [_mm512_setzero_ps(); 2 * MR];
        macro_rules! rows {
            ($n:literal) => {{
                for p in 0..pairs {
                    // SAFETY (the caller's): pair `p` of the panel and of each of the rows.
                    let (b0, b1) = unsafe {
                        let at = b.add(p * width);
                        (
                            bf16x32(_mm512_loadu_si512(at.cast())),
                            bf16x32(_mm512_loadu_si512(at.add(16).cast())),
                        )
                    };
                    for i in 0..$n {
                        let pair = unsafe { *a.add(i * pairs + p) };
                        let x = bf16x32(_mm512_set1_epi32(pair as i32));
                        sums[2 * i] = _mm512_dpbf16_ps(sums[2 * i], x, b0);
                        sums[2 * i + 1] = _mm512_dpbf16_ps(sums[2 * i + 1], x, b1);
                    }
                }
            }};
        }
        match block {
            12 => rows!(12),
            11 => rows!(11),
            10 => rows!(10),
            9 => rows!(9),
            8 => rows!(8),
            7 => rows!(7),
            6 => rows!(6),
            5 => rows!(5),
            4 => rows!(4),
            3 => rows!(3),
            2 => rows!(2),
            _ => rows!(1),
        }
        let mask = |from: usize| -> __mmask16 {
            let n = columns.saturating_sub(from).min(16);
            ((1u32 << n) - 1) as __mmask16
        };
        let (low, high) = (mask(0), mask(16));
        let (bias0, bias1) = match bias {
            // SAFETY: `bias` holds `columns` values; the masked loads read no others.
            Some(b) => unsafe {
                (
                    _mm512_maskz_loadu_ps(low, b.as_ptr()),
                    _mm512_maskz_loadu_ps(high, b.as_ptr().wrapping_add(16)),
                )
            },
            None => (_mm512_setzero_ps(), _mm512_setzero_ps()),
        };
        for i in 0..block {
            // SAFETY (the caller's): row `i` of the tile, `columns` values, masked.
            unsafe {
                let row = c.add(i * ldc);
                _mm512_mask_storeu_ps(row, low, _mm512_add_ps(sums[2 * i], bias0));
                _mm512_mask_storeu_ps(
                    row.wrapping_add(16),
                    high,
                    _mm512_add_ps(sums[2 * i + 1], bias1),
                );
            }
        }
    }

    /// The 32 `bfloat16` values of a vector of 16 pairs.
    #[inline(always)]
    fn bf16x32(v: __m512i) -> __m512bh {
        // SAFETY: both are 64 bytes of plain vector data, and every bit pattern is a value.
        unsafe { std::mem::transmute::<__m512i, __m512bh>(v) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::half::bf16_to_f32;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn rounding_is_to_the_nearest_bfloat16_ties_to_even() {
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
        assert_eq!(round_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        // 1 + 3·2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
        assert_eq!(round_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(round_to_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)), 0x3f81);
        assert_eq!(round_to_bf16(-2.5), 0xc020);
        assert_eq!(round_to_bf16(f32::INFINITY), 0x7f80);
        assert_eq!(
            round_to_bf16(f32::MAX),
            0x7f80,
            "past the largest bfloat16: infinity"
        );
        assert!(bf16_to_f32(round_to_bf16(f32::NAN)).is_nan());
    }

    /// `Σ bf16(x)·W + bias` in f64, and the sum of the terms' magnitudes.
    fn definition(
        x: &[f32],
        rows: usize,
        w: &Bf16Rows<'_>,
        bias: Option<&[f32]>,
    ) -> (Vec<f64>, Vec<f64>) {
        let mut y = Vec::new();
        let mut scale = Vec::new();
        for r in 0..rows {
            for j in 0..w.d_output {
                let (mut sum, mut size) = (bias.map_or(0.0, |b| f64::from(b[j])), 0.0);
                for i in 0..w.d_input {
                    let xi = f64::from(bf16_to_f32(round_to_bf16(x[r * w.d_input + i])));
                    let wi = f64::from(bf16_to_f32(w.values[w.offset + j * w.row + i]));
                    sum += xi * wi;
                    size += (xi * wi).abs();
                }
                y.push(sum);
                scale.push(size + 1.0);
            }
        }
        (y, scale)
    }

    #[test]
    fn equals_the_sums_of_the_rounded_inputs_for_every_shape_stride_and_tail() {
        if !has_bf16_dot() {
            let w = Bf16Rows {
                values: &[0x3f80],
                offset: 0,
                d_output: 1,
                d_input: 1,
                row: 1,
            };
            assert_eq!(linear_bf16_dot(&[1.0], 1, &w, None), None);
            return;
        }
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        // Rows around the register block (12) and outputs around a panel (32) and a stripe
        // (128); odd inputs leave the last pair half empty.
        for (rows, d_input, d_output) in [
            (1, 1, 1),
            (13, 7, 33),
            (12, 64, 32),
            (25, 33, 129),
            (40, 96, 300),
            (9, 3, 5),
            (100, 31, 64),
        ] {
            let row = d_input + rng.random_range(0..3);
            let offset = rng.random_range(0..5);
            let values: Vec<u16> = (0..offset + d_output * row)
                .map(|_| round_to_bf16(rng.random_range(-1.0f32..1.0)))
                .collect();
            let w = Bf16Rows {
                values: &values,
                offset,
                d_output,
                d_input,
                row,
            };
            let x: Vec<f32> = (0..rows * d_input)
                .map(|_| rng.random_range(-2.0f32..2.0))
                .collect();
            let bias: Vec<f32> = (0..d_output).map(|_| rng.random_range(-1.0..1.0)).collect();
            for bias in [None, Some(bias.as_slice())] {
                let y = linear_bf16_dot(&x, rows, &w, bias).expect("the CPU has vdpbf16ps");
                let (expected, scale) = definition(&x, rows, &w, bias);
                for (k, ((&got, want), size)) in y.iter().zip(&expected).zip(&scale).enumerate() {
                    // f32 sums of exact products: a few roundings of the running sum each.
                    let tolerance = 1e-6 * size * (d_input as f64).sqrt();
                    assert!(
                        (f64::from(got) - want).abs() <= tolerance,
                        "[{rows}, {d_input}] x [{d_output}]: y[{k}] = {got}, expected {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_nan_input_reaches_every_output_of_its_row_and_no_other() {
        if !has_bf16_dot() {
            return;
        }
        let (rows, d_input, d_output) = (14, 10, 40);
        let values = vec![round_to_bf16(0.5); d_output * d_input];
        let w = Bf16Rows {
            values: &values,
            offset: 0,
            d_output,
            d_input,
            row: d_input,
        };
        let mut x = vec![1.0f32; rows * d_input];
        x[13 * d_input + 3] = f32::NAN;
        let y = linear_bf16_dot(&x, rows, &w, None).expect("the CPU has vdpbf16ps");
        for (r, row) in y.chunks(d_output).enumerate() {
            if r == 13 {
                assert!(row.iter().all(|v| v.is_nan()), "row 13: {row:?}");
            } else {
                assert!(row.iter().all(|&v| v == 5.0), "row {r}: {row:?}");
            }
        }
    }
}
