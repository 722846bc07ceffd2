//! Which instruction set runs a pass: [`pulp`]'s run-time feature detection and the one
//! dispatch from a [`Pass`] to the widest [`Kernels`](super::simd::Kernels) the CPU has.
//!
//! This file names the instruction sets and the SIMD layer, never a pass; the passes name it.

use super::portable::Portable;
use super::simd::Pass;
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
use super::simd::Vectorized;

/// Which [`Kernels`](super::simd::Kernels) a pass uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Instructions {
    /// AVX-512 where the CPU has it, else AVX2 + FMA, else [`Portable`].
    Best,
    /// AVX2 + FMA where the CPU has them, else [`Portable`] (so that tests cover the AVX2
    /// loops on machines with AVX-512 too).
    #[cfg_attr(not(test), allow(dead_code))]
    Avx2,
    /// [`Portable`] everywhere (so that tests cover it on every machine).
    #[cfg_attr(not(test), allow(dead_code))]
    Portable,
}

impl Instructions {
    /// Runs `pass` with the widest vectors `self` allows and the CPU has: inside
    /// `vectorize` for AVX-512 or AVX2 + FMA, so that the pass is compiled for them.
    pub(super) fn run<P: Pass>(self, pass: P) {
        #[cfg(target_arch = "x86_64")]
        if self == Instructions::Best
            && let Some(simd) = pulp::x86::V4::try_new()
        {
            return simd.vectorize(Vectorized(pass, super::avx512::Avx512(simd)));
        }
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if self != Instructions::Portable
            && let Some(simd) = pulp::x86::V3::try_new()
        {
            return simd.vectorize(Vectorized(pass, super::avx2::Avx2(simd)));
        }
        pass.run(Portable);
    }
}
