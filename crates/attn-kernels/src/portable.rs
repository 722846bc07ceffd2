//! The SIMD layer's kernels in plain Rust, left to LLVM's auto-vectoriser: the fallback for
//! CPUs without AVX2 and FMA, and for other architectures.

use crate::exp::{exp2, mul_add};
use crate::simd::{Kernels, MR, NR};

/// Plain Rust that LLVM vectorises as well as it can for the target it compiles for: the
/// fallback for CPUs without AVX2 and FMA, and for other architectures (aarch64 has FMA).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Portable;

impl Portable {
    /// Whether `f32::mul_add` is one instruction: aarch64 always has FMA; elsewhere without
    /// AVX2 and FMA an unfused multiply-add is the fast one.
    const FMA: bool = cfg!(target_arch = "aarch64");
}

impl Kernels for Portable {
    #[inline(always)]
    fn mul_add(self, a: f32, b: f32, c: f32) -> f32 {
        mul_add::<{ Self::FMA }>(a, b, c)
    }

    #[inline(always)]
    fn exp2(self, x: f32) -> f32 {
        exp2::<{ Self::FMA }>(x)
    }

    #[inline(always)]
    fn scores_tile(self, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize) {
        let mut acc = [[0.0f32; NR]; MR];
        for (a_step, b_row) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
            for (acc_row, &x) in acc.iter_mut().zip(a_step) {
                for (acc, &y) in acc_row.iter_mut().zip(b_row) {
                    *acc = mul_add::<{ Self::FMA }>(x, y, *acc);
                }
            }
        }
        for (r, acc_row) in acc.iter().enumerate() {
            c[r * ldc..][..NR].copy_from_slice(acc_row);
        }
    }

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
        let k = b.len() / NR;
        let mut acc = [[0.0f32; NR]; MR];
        if !overwrite {
            for (r, acc_row) in acc.iter_mut().enumerate() {
                acc_row.copy_from_slice(&c[r * ldc..][..NR]);
            }
        }
        let a_rows: [&[f32]; MR] = std::array::from_fn(|r| &a[r * lda..][..k]);
        for (kk, b_row) in b.chunks_exact(NR).enumerate() {
            for (acc_row, a_row) in acc.iter_mut().zip(&a_rows) {
                let x = a_row[kk];
                for (acc, &y) in acc_row.iter_mut().zip(b_row) {
                    *acc = mul_add::<{ Self::FMA }>(x, y, *acc);
                }
            }
        }
        for (r, acc_row) in acc.iter().enumerate() {
            c[r * ldc..][..NR].copy_from_slice(acc_row);
        }
    }

    #[inline(always)]
    fn row_max(self, row: &[f32]) -> f32 {
        row.iter()
            .fold(f32::NEG_INFINITY, |a, &x| if x > a { x } else { a })
    }

    #[inline(always)]
    fn exp2_in_place(self, row: &mut [f32], max: f32) -> f32 {
        let mut sum = 0.0;
        for x in row {
            *x = exp2::<{ Self::FMA }>(*x - max);
            sum += *x;
        }
        sum
    }
}
