//! The machine's `f32` multiply-add peak: every worker thread runs [`CHAINS`] independent
//! chains of fused multiply-adds on the widest vectors the CPU has, with nothing to load or
//! store, so that the rate is what the cores can do at most.
//!
//! It is the ceiling every other figure sits under: a matrix product, an attention kernel or a
//! training update can run at most at this rate, and the share of it a case reaches says how
//! much room is left there (`burn/sgemm` and the training cases are set beside it in the
//! report). The rate is measured, not computed from a clock and a datasheet, because the clock
//! under load (turbo, AVX-512 offsets, a hypervisor's share) is what the other cases get too.
//!
//! The chains are dependent multiply-adds `x ← x·a + b`: one chain waits on the latency of the
//! one before (four cycles on current x86 cores), so [`CHAINS`] of them keep two FMA units busy
//! (2 × 4 = 8 in flight are needed) while fitting the 16 vector registers of AVX2 beside the
//! two constants.

use pulp::{Arch, Simd, WithSimd};

/// Independent accumulators per thread.
pub const CHAINS: usize = 12;

/// Multiply-adds of each chain in one run of the case on one thread.
pub const STEPS: usize = 1 << 20;

/// Lanes of the widest `f32` vector [`Arch`] dispatches to on this CPU (16 with AVX-512, 8
/// with AVX2, 4 with SSE or NEON, 1 in the scalar fallback).
pub fn lanes() -> usize {
    struct Lanes;
    impl WithSimd for Lanes {
        type Output = usize;
        #[inline(always)]
        fn with_simd<S: Simd>(self, _simd: S) -> usize {
            size_of::<S::f32s>() / size_of::<f32>()
        }
    }
    Arch::new().dispatch(Lanes)
}

/// Flops of one run on `threads` threads: two (a multiply and an add) per lane of each
/// multiply-add.
pub fn flops(threads: usize) -> f64 {
    2.0 * (threads * CHAINS * STEPS * lanes()) as f64
}

/// The chains on one thread for `steps` steps; the sum of every lane at the end, so that the
/// work cannot be left out.
pub fn chains(steps: usize) -> f32 {
    struct Chains {
        steps: usize,
    }
    impl WithSimd for Chains {
        type Output = f32;
        #[inline(always)]
        fn with_simd<S: Simd>(self, simd: S) -> f32 {
            // A fixed point at 1: x·(1 - 2⁻²⁰) + 2⁻²⁰ stays 1 for any number of steps, so the
            // values never overflow or become subnormal (which would slow some cores down).
            // The values pass through `black_box`, or the compiler would fold the first step
            // and find the loop does nothing.
            let opaque = |x: f32| simd.splat_f32s(std::hint::black_box(x));
            let a = opaque(1.0 - 1.0 / (1 << 20) as f32);
            let b = opaque(1.0 / (1 << 20) as f32);
            let mut acc = [opaque(1.0); CHAINS];
            for _ in 0..self.steps {
                for x in &mut acc {
                    *x = simd.mul_add_f32s(*x, a, b);
                }
            }
            acc.iter().map(|&x| simd.reduce_sum_f32s(x)).sum()
        }
    }
    Arch::new().dispatch(Chains { steps })
}

/// One run of the case: [`chains`] for [`STEPS`] steps on every thread of rayon's pool at
/// once; the sum of every thread's lanes.
pub fn run() -> f32 {
    rayon::broadcast(|_| chains(std::hint::black_box(STEPS)))
        .into_iter()
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lane_of_every_chain_stays_at_its_fixed_point() {
        let lanes = lanes();
        assert!([1, 4, 8, 16].contains(&lanes), "{lanes} lanes");
        for steps in [0, 1, 1000] {
            // Each lane is exactly 1 after any number of steps (a chain that dropped `b`
            // would be 2⁻²⁰ lower per step).
            assert_eq!(chains(steps), (CHAINS * lanes) as f32, "{steps} steps");
        }
    }

    #[test]
    fn a_run_counts_two_flops_per_lane_of_each_multiply_add() {
        assert_eq!(flops(2), 2.0 * 2.0 * (CHAINS * STEPS * lanes()) as f64);
        let threads = rayon::current_num_threads();
        assert_eq!(run(), (threads * CHAINS * lanes()) as f32);
    }
}
