//! The SIMD layer's kernels written with explicit 8-wide AVX2 + FMA vectors (through
//! [`pulp`]'s safe wrappers, so no `unsafe` here either).
//!
//! LLVM's auto-vectoriser gets the portable loops of `portable.rs` only partly right: it spills
//! the micro-kernel's twelve accumulators to the stack and vectorises `2^x` four lanes wide.
//! Spelling the vectors out keeps the accumulators in registers and gives eight lanes.

use pulp::x86::V3;
use pulp::{f32x8, u32x8};

use crate::exp::{LOWEST, P, ROUND_MAGIC, exp2, mul_add};
use crate::simd::{Gemm, Kernels, MR, NR, Vectorized};

/// The AVX2 + FMA instruction set, proven present by [`V3::try_new`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2(pub V3);

/// Eight values from the front of `values`.
#[inline(always)]
fn load(values: &[f32]) -> f32x8 {
    let lanes: [f32; 8] = values[..8].try_into().expect("eight values");
    pulp::cast(lanes)
}

/// Writes eight values to the front of `out`.
#[inline(always)]
fn store(out: &mut [f32], x: f32x8) {
    let lanes: [f32; 8] = pulp::cast(x);
    out[..8].copy_from_slice(&lanes);
}

/// Writes an `[MR, NR]` accumulator to `c` (row stride `ldc`).
#[inline(always)]
fn store_tile(acc: [[f32x8; 2]; MR], c: &mut [f32], ldc: usize) {
    const { assert!(NR == 16, "two 8-wide vectors per row") };
    for (r, acc_row) in acc.iter().enumerate() {
        let c_row = &mut c[r * ldc..][..NR];
        store(c_row, acc_row[0]);
        store(&mut c_row[8..], acc_row[1]);
    }
}

/// The arguments of one [`Kernels::accumulate_tile`], to run inside `vectorize`.
struct AccumulateTile<'a> {
    kernels: Avx2,
    a: &'a [f32],
    lda: usize,
    b: &'a [f32],
    c: &'a mut [f32],
    ldc: usize,
    overwrite: bool,
}

impl pulp::NullaryFnOnce for AccumulateTile<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let AccumulateTile {
            kernels,
            a,
            lda,
            b,
            c,
            ldc,
            overwrite,
        } = self;
        kernels.accumulate_tile_inlined(a, lda, b, c, ldc, overwrite);
    }
}

impl Avx2 {
    /// `c += a · b` on one `[MR, NR]` tile (`c = a · b` with `overwrite`), the body of
    /// [`Kernels::accumulate_tile`].
    #[inline(always)]
    fn accumulate_tile_inlined(
        self,
        a: &[f32],
        lda: usize,
        b: &[f32],
        c: &mut [f32],
        ldc: usize,
        overwrite: bool,
    ) {
        let s = self.0;
        let k = b.len() / NR;
        let mut acc = [[s.splat_f32x8(0.0); 2]; MR];
        if !overwrite {
            for (r, acc_row) in acc.iter_mut().enumerate() {
                let c_row = &c[r * ldc..][..NR];
                *acc_row = [load(c_row), load(&c_row[8..])];
            }
        }
        let a_rows: [&[f32]; MR] = std::array::from_fn(|r| &a[r * lda..][..k]);
        for (kk, b_row) in b.chunks_exact(NR).enumerate() {
            let (b0, b1) = (load(b_row), load(&b_row[8..]));
            for (acc_row, a_row) in acc.iter_mut().zip(&a_rows) {
                let x = s.splat_f32x8(a_row[kk]);
                acc_row[0] = s.mul_add_f32x8(x, b0, acc_row[0]);
                acc_row[1] = s.mul_add_f32x8(x, b1, acc_row[1]);
            }
        }
        store_tile(acc, c, ldc);
    }

    /// `2^x` on eight lanes: [`exp2`] line for line.
    #[inline(always)]
    fn exp2_x8(self, x: f32x8) -> f32x8 {
        let s = self.0;
        let x = s.max_f32x8(x, s.splat_f32x8(LOWEST));
        let shifted = s.add_f32x8(x, s.splat_f32x8(ROUND_MAGIC));
        let n = s.sub_f32x8(shifted, s.splat_f32x8(ROUND_MAGIC));
        let f = s.sub_f32x8(x, n);
        // (bits(shifted) + 127) << 23: the magic's own bits vanish in the shift (its low nine
        // bits are zero), leaving n + 127 in the exponent field.
        let bits: u32x8 = pulp::cast(shifted);
        let two_to_n: f32x8 =
            pulp::cast(s.shl_const_u32x8::<23>(s.wrapping_add_u32x8(bits, s.splat_u32x8(127))));
        let mut poly = s.splat_f32x8(P[0]);
        for &c in &P[1..] {
            poly = s.mul_add_f32x8(poly, f, s.splat_f32x8(c));
        }
        let two_to_f = s.mul_add_f32x8(f, poly, s.splat_f32x8(1.0));
        s.mul_f32x8(two_to_f, two_to_n)
    }

    /// The sum of the eight lanes.
    #[inline(always)]
    fn sum_x8(x: f32x8) -> f32 {
        let lanes: [f32; 8] = pulp::cast(x);
        lanes.iter().sum()
    }
}

impl Kernels for Avx2 {
    /// One `weights · v` tile as its own AVX2 + FMA function. Inlined into a pass with everything
    /// else, its accumulators can be spilled to the stack, depending on what surrounds it (the
    /// forward ran up to 2.7x slower at s = 512 when the pass's entry point changed shape).
    #[inline(always)]
    fn accumulate_tile(
        self,
        a: &[f32],
        lda: usize,
        b: &[f32],
        c: &mut [f32],
        ldc: usize,
        overwrite: bool,
    ) {
        self.0.vectorize(AccumulateTile {
            kernels: self,
            a,
            lda,
            b,
            c,
            ldc,
            overwrite,
        });
    }

    /// One [`Gemm`] as its own AVX2 + FMA function: inlined into the backward pass's loop with
    /// everything else, LLVM schedules the micro-kernel worse (the pass ran 1.5x slower).
    #[inline(always)]
    fn gemm(self, product: Gemm<'_>) {
        self.0.vectorize(Vectorized(product, self));
    }

    #[inline(always)]
    fn mul_add(self, a: f32, b: f32, c: f32) -> f32 {
        mul_add::<true>(a, b, c)
    }

    #[inline(always)]
    fn exp2(self, x: f32) -> f32 {
        exp2::<true>(x)
    }

    /// Two 8-wide running sums (two chains of multiply-adds in flight), added and reduced
    /// across the lanes once at the end.
    #[inline(always)]
    fn dot(self, a: &[f32], b: &[f32]) -> f32 {
        use pulp::Simd;
        let s = self.0;
        let n = a.len().min(b.len());
        let (a16, a_rest) = a[..n].as_chunks::<16>();
        let (b16, b_rest) = b[..n].as_chunks::<16>();
        let mut acc = [s.splat_f32x8(0.0); 2];
        for (x, y) in a16.iter().zip(b16) {
            acc[0] = s.mul_add_f32x8(load(&x[..8]), load(&y[..8]), acc[0]);
            acc[1] = s.mul_add_f32x8(load(&x[8..]), load(&y[8..]), acc[1]);
        }
        let mut sum = s.add_f32x8(acc[0], acc[1]);
        let (a8, a_tail) = a_rest.as_chunks::<8>();
        let (b8, b_tail) = b_rest.as_chunks::<8>();
        for (x, y) in a8.iter().zip(b8) {
            sum = s.mul_add_f32x8(load(x), load(y), sum);
        }
        a_tail
            .iter()
            .zip(b_tail)
            .fold(s.reduce_sum_f32s(sum), |sum, (&x, &y)| {
                mul_add::<true>(x, y, sum)
            })
    }

    #[inline(always)]
    fn scores_tile(self, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize) {
        let s = self.0;
        let mut acc = [[s.splat_f32x8(0.0); 2]; MR];
        for (a_step, b_row) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
            let (b0, b1) = (load(b_row), load(&b_row[8..]));
            for (acc_row, &x) in acc.iter_mut().zip(a_step) {
                let x = s.splat_f32x8(x);
                acc_row[0] = s.mul_add_f32x8(x, b0, acc_row[0]);
                acc_row[1] = s.mul_add_f32x8(x, b1, acc_row[1]);
            }
        }
        store_tile(acc, c, ldc);
    }

    #[inline(always)]
    fn row_max(self, row: &[f32]) -> f32 {
        let s = self.0;
        let mut chunks = row.chunks_exact(8);
        let mut max = s.splat_f32x8(f32::NEG_INFINITY);
        for chunk in &mut chunks {
            max = s.max_f32x8(max, load(chunk));
        }
        let lanes: [f32; 8] = pulp::cast(max);
        lanes
            .iter()
            .chain(chunks.remainder())
            .fold(f32::NEG_INFINITY, |a, &x| if x > a { x } else { a })
    }

    #[inline(always)]
    fn exp2_in_place(self, row: &mut [f32], max: f32) -> f32 {
        let s = self.0;
        let max_x8 = s.splat_f32x8(max);
        let mut sum = s.splat_f32x8(0.0);
        let mut chunks = row.chunks_exact_mut(8);
        for chunk in &mut chunks {
            let p = self.exp2_x8(s.sub_f32x8(load(chunk), max_x8));
            store(chunk, p);
            sum = s.add_f32x8(sum, p);
        }
        let mut tail = 0.0;
        for x in chunks.into_remainder() {
            *x = exp2::<true>(*x - max);
            tail += *x;
        }
        Self::sum_x8(sum) + tail
    }
}
