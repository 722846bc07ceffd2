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

use crate::weight_rows::{Bf16Rows, round_to_bf16};

/// Rows of `x` per register block.
const MR: usize = 12;
/// Outputs per register block: two vectors of 16.
pub(crate) const NR: usize = 32;
/// Outputs whose weights one task copies and multiplies by its rows.
const STRIPE: usize = 4 * NR;
/// Pairs of inputs per pass over a panel: the panel's share, `KC · NR` pairs (16 KiB), stays
/// in the L1 cache while every block of rows is multiplied by it.
const KC: usize = 128;

/// Whether this CPU runs [`linear_bf16_dot`](crate::half::linear_bf16_dot) (AVX-512 F, BW and
/// BF16), and `ATTN_NATIVE_ISA` does not cap the kernels below AVX-512.
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

/// [`linear_bf16_dot`](crate::half::linear_bf16_dot) on `vdpbf16ps`, once
/// [`has_bf16_dot`] has held.
pub(crate) fn on_vectors(
    x: &[f32],
    rows: usize,
    w: &Bf16Rows<'_>,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let mut y = vec![0f32; rows * w.d_output];
    if rows == 0 || w.d_output == 0 {
        return y;
    }
    let pairs = w.d_input.div_ceil(2);
    let a = pack_rows(x, rows, w.d_input, MR, pairs);
    let blocks = rows.div_ceil(MR);
    let tasks = Tasks::of(w.d_output, blocks);
    let out = Out(y.as_mut_ptr());
    let (out, a) = (&out, &a);
    (0..tasks.count()).into_par_iter().for_each(|task| {
        let (first, outputs, blocks) = tasks.task(task);
        if blocks.is_empty() {
            return;
        }
        let packed = pack_stripe(w, first, outputs, pairs);
        let bias = bias.map(|b| &b[first..first + outputs]);
        #[cfg(target_arch = "x86_64")]
        avx512::stripe(&avx512::Stripe {
            a,
            pairs,
            rows,
            blocks,
            packed: &packed,
            outputs,
            bias,
            out,
            d_output: w.d_output,
            first,
        });
    });
    y
}

/// The tasks of a product: stripes of [`STRIPE`] outputs, and where they are few, ranges of
/// the blocks of rows too, so that every thread has several.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tasks {
    d_output: usize,
    blocks: usize,
    splits: usize,
    blocks_per_task: usize,
}

impl Tasks {
    /// The tasks of `d_output` outputs by `blocks` blocks of rows.
    pub(crate) fn of(d_output: usize, blocks: usize) -> Tasks {
        let stripes = d_output.div_ceil(STRIPE);
        let wanted = 4 * rayon::current_num_threads();
        let splits = wanted.div_ceil(stripes.max(1)).clamp(1, blocks.max(1));
        Tasks {
            d_output,
            blocks,
            splits,
            blocks_per_task: blocks.div_ceil(splits),
        }
    }

    /// How many.
    pub(crate) fn count(&self) -> usize {
        self.d_output.div_ceil(STRIPE) * self.splits
    }

    /// Task `task`'s first output, its number of outputs and its blocks of rows (empty for
    /// the last splits when the blocks run out).
    pub(crate) fn task(&self, task: usize) -> (usize, usize, std::ops::Range<usize>) {
        let (stripe, split) = (task / self.splits, task % self.splits);
        let first = stripe * STRIPE;
        let start = (split * self.blocks_per_task).min(self.blocks);
        let end = ((split + 1) * self.blocks_per_task).min(self.blocks);
        (first, STRIPE.min(self.d_output - first), start..end)
    }
}

/// The output's first value, shared by the tasks: each writes only its own outputs of its own
/// rows.
pub(crate) struct Out(pub(crate) *mut f32);
// SAFETY: the tasks of `linear_bf16_dot` write disjoint elements of the output (their stripe
// of outputs in their blocks of rows), which outlives them.
#[allow(unsafe_code)]
unsafe impl Sync for Out {}

/// The rows of `x` rounded to `bfloat16`, `pairs` pairs a row (at least `d_input / 2`, rounded
/// up): value `r · pairs + p` holds `x[r, 2p]` and `x[r, 2p+1]`, zero past `d_input`, and rows
/// of zeros up to a whole block of `block` rows.
pub(crate) fn pack_rows(
    x: &[f32],
    rows: usize,
    d_input: usize,
    block: usize,
    pairs: usize,
) -> Vec<u32> {
    assert!(
        2 * pairs >= d_input,
        "{pairs} pairs hold fewer than {d_input} inputs"
    );
    let mut a = vec![0u32; rows.div_ceil(block) * block * pairs];
    if pairs == 0 {
        return a;
    }
    a.par_chunks_mut(pairs)
        .zip(x.par_chunks(d_input))
        .for_each(|(packed, row)| {
            #[cfg(target_arch = "x86_64")]
            let done = avx512::round_row(row, packed);
            #[cfg(not(target_arch = "x86_64"))]
            let done = 0;
            for (pair, values) in packed[done..].iter_mut().zip(row[2 * done..].chunks(2)) {
                let low = u32::from(round_to_bf16(values[0]));
                let high = values.get(1).map_or(0, |&v| u32::from(round_to_bf16(v)));
                *pair = low | (high << 16);
            }
        });
    a
}

/// Outputs `first..first + outputs` of `w` as panels of [`NR`] outputs, each `[p, j]` for
/// `pairs` pairs (at least `d_input / 2`, rounded up): value `(panel · pairs + p) · NR + j`
/// holds `W[first + panel · NR + j, 2p]` and `W[.., 2p+1]`, zero past `d_input` and past the
/// last output.
pub(crate) fn pack_stripe(
    w: &Bf16Rows<'_>,
    first: usize,
    outputs: usize,
    pairs: usize,
) -> Vec<u32> {
    assert!(
        2 * pairs >= w.d_input,
        "{pairs} pairs hold fewer than {} inputs",
        w.d_input
    );
    let mut packed = vec![0u32; outputs.div_ceil(NR) * pairs * NR];
    if pairs == 0 {
        return packed;
    }
    let full = w.d_input / 2;
    for (panel, values) in packed.chunks_exact_mut(pairs * NR).enumerate() {
        let columns = NR.min(outputs - panel * NR);
        let rows: Vec<&[u16]> = (0..columns)
            .map(|j| {
                let start = w.offset + (first + panel * NR + j) * w.row;
                &w.values[start..start + w.d_input]
            })
            .collect();
        // Whole panels, sixteen pairs at a time, through a transpose in registers.
        #[cfg(target_arch = "x86_64")]
        let done = if columns == NR {
            avx512::transpose_panel(&rows, full, values)
        } else {
            0
        };
        #[cfg(not(target_arch = "x86_64"))]
        let done = 0;
        // The rest pair by pair, the panel's rows side by side.
        for (p, out) in values
            .chunks_exact_mut(NR)
            .enumerate()
            .take(full)
            .skip(done)
        {
            for (o, row) in out.iter_mut().zip(&rows) {
                *o = u32::from(row[2 * p]) | (u32::from(row[2 * p + 1]) << 16);
            }
        }
        if w.d_input % 2 == 1 {
            // The last pair holds one input.
            let out = &mut values[full * NR..];
            for (o, row) in out.iter_mut().zip(&rows) {
                *o = u32::from(row[2 * full]);
            }
        }
    }
    packed
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod avx512 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{KC, MR, NR, Out};

    /// One task: its blocks of rows against its stripe of outputs.
    pub(super) struct Stripe<'a> {
        /// Every row of the input, packed by `pack_rows`.
        pub a: &'a [u32],
        /// Pairs per row.
        pub pairs: usize,
        /// Rows of the output.
        pub rows: usize,
        /// This task's blocks of [`MR`] rows.
        pub blocks: Range<usize>,
        /// The stripe's weights, packed by `pack_stripe`.
        pub packed: &'a [u32],
        /// Outputs in the stripe.
        pub outputs: usize,
        /// The stripe's bias.
        pub bias: Option<&'a [f32]>,
        /// The output, `[rows, d_output]`.
        pub out: &'a Out,
        /// Outputs per row of the output.
        pub d_output: usize,
        /// The stripe's first output.
        pub first: usize,
    }

    /// A task's share of the output: for each chunk of [`KC`] pairs, each panel of the stripe
    /// against each block of rows, so that the panel's chunk (16 KiB) stays in the L1 cache
    /// while the blocks stream past it.
    pub(super) fn stripe(task: &Stripe<'_>) {
        let Stripe {
            a,
            pairs,
            rows,
            ref blocks,
            packed,
            outputs,
            bias,
            out,
            d_output,
            first,
        } = *task;
        assert!(blocks.end * MR * pairs <= a.len());
        assert!(packed.len() == outputs.div_ceil(NR) * pairs * NR);
        for chunk in (0..pairs).step_by(KC) {
            let length = KC.min(pairs - chunk);
            for panel in 0..outputs.div_ceil(NR) {
                let columns = NR.min(outputs - panel * NR);
                let bias = if chunk == 0 {
                    bias.map(|b| &b[panel * NR..][..columns])
                } else {
                    None
                };
                for block in blocks.clone() {
                    let valid = MR.min(rows - block * MR);
                    // SAFETY: `has_bf16_dot` held before any task started. The block's
                    // chunk lies inside `a` and the panel's inside `packed` (the assertions
                    // above); the elements of the output read and written are rows
                    // `block · MR..` + `valid` of columns `first + panel · NR..` + `columns`,
                    // inside `[rows, d_output]` and this task's own.
                    unsafe {
                        tile(
                            a.as_ptr().add(block * MR * pairs + chunk),
                            pairs,
                            packed.as_ptr().add((panel * pairs + chunk) * NR),
                            length,
                            out.0.add(block * MR * d_output + first + panel * NR),
                            d_output,
                            valid,
                            columns,
                            Sums::of(chunk == 0, bias),
                        );
                    }
                }
            }
        }
    }

    /// Where a tile's sums start: from the bias (or zero) on the first chunk of pairs, from
    /// what the earlier chunks wrote after it.
    #[derive(Clone, Copy)]
    enum Sums<'a> {
        Start(Option<&'a [f32]>),
        Continue,
    }

    impl<'a> Sums<'a> {
        fn of(first_chunk: bool, bias: Option<&'a [f32]>) -> Self {
            if first_chunk {
                Sums::Start(bias)
            } else {
                Sums::Continue
            }
        }
    }

    /// [`MR`] rows by [`NR`] outputs over `length` pairs: the block's pairs at `a` (rows `lda`
    /// apart), the panel's at `b` (`[p, j]`, [`NR`] a pair), written to `c` (rows `ldc` apart):
    /// `valid` rows of `columns` values.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        a: *const u32,
        lda: usize,
        b: *const u32,
        length: usize,
        c: *mut f32,
        ldc: usize,
        valid: usize,
        columns: usize,
        start: Sums<'_>,
    ) {
        let mut sums = [_mm512_setzero_ps(); 2 * MR];
        for p in 0..length {
            // SAFETY (the caller's): pair `p` of the panel and of the block.
            let (b0, b1, a) = unsafe {
                let at = b.add(p * NR);
                (
                    bf16x32(_mm512_loadu_si512(at.cast())),
                    bf16x32(_mm512_loadu_si512(at.add(16).cast())),
                    a.add(p),
                )
            };
            for i in 0..MR {
                let x = bf16x32(_mm512_set1_epi32(unsafe { *a.add(i * lda) } as i32));
                sums[2 * i] = _mm512_dpbf16_ps(sums[2 * i], x, b0);
                sums[2 * i + 1] = _mm512_dpbf16_ps(sums[2 * i + 1], x, b1);
            }
        }
        let mask = |from: usize| -> __mmask16 {
            let n = columns.saturating_sub(from).min(16);
            ((1u32 << n) - 1) as __mmask16
        };
        let (low, high) = (mask(0), mask(16));
        let bias = match start {
            // SAFETY: `bias` holds `columns` values; the masked loads read no others.
            Sums::Start(Some(b)) => unsafe {
                Some((
                    _mm512_maskz_loadu_ps(low, b.as_ptr()),
                    _mm512_maskz_loadu_ps(high, b.as_ptr().wrapping_add(16)),
                ))
            },
            Sums::Start(None) => Some((_mm512_setzero_ps(), _mm512_setzero_ps())),
            Sums::Continue => None,
        };
        for i in 0..valid {
            // SAFETY (the caller's): row `i` of the tile, `columns` values, masked.
            unsafe {
                let row = c.add(i * ldc);
                let (before0, before1) = match bias {
                    Some(start) => start,
                    None => (
                        _mm512_maskz_loadu_ps(low, row),
                        _mm512_maskz_loadu_ps(high, row.wrapping_add(16)),
                    ),
                };
                _mm512_mask_storeu_ps(row, low, _mm512_add_ps(sums[2 * i], before0));
                _mm512_mask_storeu_ps(
                    row.wrapping_add(16),
                    high,
                    _mm512_add_ps(sums[2 * i + 1], before1),
                );
            }
        }
    }

    /// `row` rounded to `bfloat16` pairs into `packed`, 32 values at a time; how many pairs
    /// it wrote (the rest is the caller's).
    pub(super) fn round_row(row: &[f32], packed: &mut [u32]) -> usize {
        let whole = row.len() / 32;
        assert!(packed.len() >= 16 * whole);
        // SAFETY: `has_bf16_dot` held before any task started; values `32 i..32 i + 32` of
        // `row` and pairs `16 i..16 i + 16` of `packed` lie inside them for `i < whole`.
        unsafe { round_blocks(row.as_ptr(), packed.as_mut_ptr(), whole) };
        16 * whole
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    unsafe fn round_blocks(row: *const f32, packed: *mut u32, whole: usize) {
        for i in 0..whole {
            // SAFETY (the caller's).
            unsafe {
                let low = _mm512_loadu_ps(row.add(32 * i));
                let high = _mm512_loadu_ps(row.add(32 * i + 16));
                // Values 0..16 from `low` in the lower half, as in memory.
                let pairs: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(high, low));
                _mm512_storeu_si512(packed.add(16 * i).cast(), pairs);
            }
        }
    }

    /// The pairs of a whole panel's [`NR`] rows of weights into `[p, j]` order, sixteen pairs
    /// of sixteen rows at a time (a transpose of 32-bit pairs in registers); how many pairs it
    /// wrote (the rest is the caller's).
    pub(super) fn transpose_panel(rows: &[&[u16]], full: usize, out: &mut [u32]) -> usize {
        assert!(rows.len() == NR && rows.iter().all(|r| r.len() >= 2 * full));
        assert!(out.len() >= full * NR);
        let whole = full / 16;
        for half in 0..NR / 16 {
            let starts: [*const u16; 16] = std::array::from_fn(|j| rows[16 * half + j].as_ptr());
            for block in 0..whole {
                // SAFETY: `has_bf16_dot` held; pairs `16 block..16 block + 16` (values up to
                // `32 block + 32 <= 2 full`) of each row, and the 16 destinations of `out`
                // (`(16 block + p) · NR + 16 half..` + 16 `<= full · NR`), lie inside them.
                unsafe {
                    transpose_16(
                        &starts,
                        32 * block,
                        out.as_mut_ptr().add(16 * block * NR + 16 * half),
                    );
                }
            }
        }
        16 * whole
    }

    /// Pairs `from / 2..` + 16 of sixteen rows, written as sixteen vectors of sixteen (one per
    /// pair, [`NR`] apart) at `out`.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    unsafe fn transpose_16(rows: &[*const u16; 16], from: usize, out: *mut u32) {
        // SAFETY (the caller's): 32 values of each row from `from`.
        let r: [__m512i; 16] =
            std::array::from_fn(|j| unsafe { _mm512_loadu_si512(rows[j].add(from).cast()) });
        // Within each 128-bit lane: pairs of rows, then fours (columns 4L..4L + 4).
        let mut t = [_mm512_setzero_si512(); 16];
        for g in 0..4 {
            let (a, b, c, d) = (r[4 * g], r[4 * g + 1], r[4 * g + 2], r[4 * g + 3]);
            t[4 * g] = _mm512_unpacklo_epi32(a, b);
            t[4 * g + 1] = _mm512_unpackhi_epi32(a, b);
            t[4 * g + 2] = _mm512_unpacklo_epi32(c, d);
            t[4 * g + 3] = _mm512_unpackhi_epi32(c, d);
        }
        let mut u = [_mm512_setzero_si512(); 16];
        for g in 0..4 {
            u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
            u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
            u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
            u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
        }
        // Across lanes: column 4L + q gathers lane L of u[q], u[4 + q], u[8 + q], u[12 + q].
        for q in 0..4 {
            let low01 = _mm512_shuffle_i32x4::<0x44>(u[q], u[4 + q]);
            let high01 = _mm512_shuffle_i32x4::<0xEE>(u[q], u[4 + q]);
            let low23 = _mm512_shuffle_i32x4::<0x44>(u[8 + q], u[12 + q]);
            let high23 = _mm512_shuffle_i32x4::<0xEE>(u[8 + q], u[12 + q]);
            let columns = [
                _mm512_shuffle_i32x4::<0x88>(low01, low23),
                _mm512_shuffle_i32x4::<0xDD>(low01, low23),
                _mm512_shuffle_i32x4::<0x88>(high01, high23),
                _mm512_shuffle_i32x4::<0xDD>(high01, high23),
            ];
            for (lane, column) in columns.into_iter().enumerate() {
                // SAFETY (the caller's): pair 4·lane + q of the block.
                unsafe { _mm512_storeu_si512(out.add((4 * lane + q) * NR).cast(), column) };
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
    use crate::half::linear_bf16_dot;
    use crate::testing::{assert_a_nan_stays_in_its_row, for_each_bf16_product};

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
        // Rows around the register block (12), outputs around a panel (32) and a stripe (128),
        // inputs around a chunk of pairs (128); odd inputs leave the last pair half empty.
        let shapes = [
            (1, 1, 1),
            (13, 7, 33),
            (12, 64, 32),
            (25, 33, 129),
            (40, 96, 300),
            (9, 3, 5),
            (100, 31, 64),
            // Past one chunk of pairs (KC = 128): the sums go on from what was written.
            (30, 301, 70),
            (13, 600, 40),
        ];
        for_each_bf16_product(7, &shapes, |product, bias| {
            let (x, rows, w) = (&product.x, product.rows, product.w());
            product.assert_sums(&on_vectors(x, rows, &w, bias), bias, "vdpbf16ps");
            // What the CPU runs: AMX's tiles from 16 rows where it has them.
            let dispatched = linear_bf16_dot(x, rows, &w, bias).expect("vdpbf16ps");
            product.assert_sums(&dispatched, bias, "linear_bf16_dot");
        });
    }

    #[test]
    fn a_nan_input_reaches_every_output_of_its_row_and_no_other() {
        if !has_bf16_dot() {
            return;
        }
        assert_a_nan_stays_in_its_row(14, &[13], |x, w| on_vectors(x, 14, w, None));
    }
}
