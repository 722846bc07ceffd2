//! Which instruction set runs a pass: [`pulp`]'s run-time feature detection and the one
//! dispatch from a [`Pass`] to the widest [`Kernels`](super::simd::Kernels) the CPU has.
//!
//! This file names the instruction sets and the SIMD layer, never a pass; the passes name it.
//!
//! `ATTN_NATIVE_ISA=avx512` (or `avx2`, or `portable`) caps what the kernels pick, to measure
//! the narrower kernels on a machine that has wider ones (as PyTorch's `ATEN_CPU_CAPABILITY`
//! and oneDNN's `ONEDNN_MAX_CPU_ISA` do for their own): `avx512` leaves AMX's tiles out, and
//! `amx`, the default, caps nothing. Any other value is an error naming it.

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
    cap().vectors == Instructions::Best
}

/// Whether `ATTN_NATIVE_ISA` leaves AMX's tiles to the kernels (`bf16_tiles`).
pub(crate) fn tiles_allowed() -> bool {
    cap().tiles
}

/// What `ATTN_NATIVE_ISA` leaves to the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cap {
    /// The widest vectors.
    vectors: Instructions,
    /// Whether AMX's tiles may run.
    tiles: bool,
}

/// [`Instructions::Best`] as capped by `ATTN_NATIVE_ISA`.
fn capped() -> Instructions {
    cap().vectors
}

/// The cap of `ATTN_NATIVE_ISA`, read once per process.
fn cap() -> Cap {
    static CAP: OnceLock<Cap> = OnceLock::new();
    *CAP.get_or_init(|| match std::env::var("ATTN_NATIVE_ISA") {
        Err(_) => parse_cap("").expect("no cap is the default"),
        Ok(text) => parse_cap(&text).unwrap_or_else(|why| panic!("{why}")),
    })
}

fn parse_cap(text: &str) -> Result<Cap, String> {
    let (vectors, tiles) = match text.trim().to_ascii_lowercase().as_str() {
        "amx" | "" => (Instructions::Best, true),
        "avx512" => (Instructions::Best, false),
        "avx2" => (Instructions::Avx2, false),
        "portable" => (Instructions::Portable, false),
        _ => {
            return Err(format!(
                "ATTN_NATIVE_ISA={text:?}: expected one of amx, avx512, avx2, portable"
            ));
        }
    };
    Ok(Cap { vectors, tiles })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_names_an_instruction_set_or_is_refused() {
        let cap = |vectors, tiles| Ok(Cap { vectors, tiles });
        assert_eq!(parse_cap("AVX2"), cap(Instructions::Avx2, false));
        assert_eq!(parse_cap("portable"), cap(Instructions::Portable, false));
        assert_eq!(parse_cap("avx512"), cap(Instructions::Best, false));
        assert_eq!(parse_cap("amx"), cap(Instructions::Best, true));
        assert_eq!(parse_cap(""), cap(Instructions::Best, true));
        let Err(why) = parse_cap("sse4") else {
            panic!("sse4 was accepted as a cap");
        };
        assert!(why.contains("\"sse4\"") && why.contains("avx2"), "{why}");
    }
}
