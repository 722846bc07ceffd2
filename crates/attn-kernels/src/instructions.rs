//! Which instruction set runs a pass: [`pulp`]'s run-time feature detection and the one
//! dispatch from a [`Pass`] to the widest [`Kernels`](super::simd::Kernels) the CPU has.
//!
//! This file names the instruction sets and the SIMD layer, never a pass; the passes name it.
//!
//! `ATTN_NATIVE_ISA=avx2` (or `portable`) caps what [`Instructions::Best`] picks, to measure
//! the narrower kernels on a machine that has wider ones (as PyTorch's `ATEN_CPU_CAPABILITY`
//! does for its own); `avx512` is the default cap. Any other value is an error naming it.

use std::sync::OnceLock;

use crate::portable::Portable;
use crate::simd::Pass;
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
use crate::simd::Vectorized;

/// Which [`Kernels`](super::simd::Kernels) a pass uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Instructions {
    /// AVX-512 where the CPU has it, else AVX2 + FMA, else [`Portable`].
    Best,
    /// AVX2 + FMA where the CPU has them, else [`Portable`] (so that tests cover the AVX2
    /// loops on machines with AVX-512 too).
    Avx2,
    /// [`Portable`] everywhere (so that tests cover it on every machine).
    Portable,
}

impl Instructions {
    /// Runs `pass` with the widest vectors `self` allows and the CPU has: inside
    /// `vectorize` for AVX-512 or AVX2 + FMA, so that the pass is compiled for them.
    pub(crate) fn run<P: Pass>(self, pass: P) {
        let this = if self == Instructions::Best {
            capped()
        } else {
            self
        };
        this.run_on_the_cpu(pass);
    }

    fn run_on_the_cpu<P: Pass>(self, pass: P) {
        #[cfg(target_arch = "x86_64")]
        if self == Instructions::Best
            && let Some(simd) = pulp::x86::V4::try_new()
        {
            return simd.vectorize(Vectorized(pass, crate::avx512::Avx512(simd)));
        }
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if self != Instructions::Portable
            && let Some(simd) = pulp::x86::V3::try_new()
        {
            return simd.vectorize(Vectorized(pass, crate::avx2::Avx2(simd)));
        }
        pass.run(Portable);
    }
}

/// Whether `ATTN_NATIVE_ISA` leaves AVX-512 to the kernels (kernels outside the [`Pass`]
/// dispatch, such as `bf16_dot`'s, ask before they run).
pub(crate) fn avx512_allowed() -> bool {
    capped() == Instructions::Best
}

/// [`Instructions::Best`] as capped by `ATTN_NATIVE_ISA`, read once per process.
fn capped() -> Instructions {
    static CAP: OnceLock<Instructions> = OnceLock::new();
    *CAP.get_or_init(|| match std::env::var("ATTN_NATIVE_ISA") {
        Err(_) => Instructions::Best,
        Ok(text) => parse_cap(&text).unwrap_or_else(|why| panic!("{why}")),
    })
}

fn parse_cap(text: &str) -> Result<Instructions, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "avx512" | "" => Ok(Instructions::Best),
        "avx2" => Ok(Instructions::Avx2),
        "portable" => Ok(Instructions::Portable),
        _ => Err(format!(
            "ATTN_NATIVE_ISA={text:?}: expected one of avx512, avx2, portable"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_names_an_instruction_set_or_is_refused() {
        assert_eq!(parse_cap("AVX2"), Ok(Instructions::Avx2));
        assert_eq!(parse_cap("portable"), Ok(Instructions::Portable));
        assert_eq!(parse_cap("avx512"), Ok(Instructions::Best));
        let Err(why) = parse_cap("sse4") else {
            panic!("sse4 was accepted as a cap");
        };
        assert!(why.contains("\"sse4\"") && why.contains("avx2"), "{why}");
    }
}
