//! GPT-2's tanh GELU, and the SiLU gate of Llama's feed-forward, on plain `f32` slices: one
//! pass over the values, on every core.
//!
//! ```text
//! gelu(x) = x/2 · (1 + tanh(u)) = x / (1 + e^(−2u)),   u = √(2/π) · (x + 0.044715 x³)
//! ```
//!
//! `e^(−2u)` is `2^t` with `t = −2u · log2 e`, the kernels' own `2^x` (`exp.rs`), so that the
//! loop is a handful of vector instructions per value inside `vectorize`. `t` is clamped to
//! `[−127, 127]`: below, `2^t` is `0` and the result is `x`; above, `2^127` keeps the
//! denominator finite and the result is `x · 2^−127`, within `1e-37` of the limit `0`.
//!
//! Written as burn operations the same function is eight passes over the tensor, each on one
//! thread (flex's element-wise operations are single-threaded): on a GPT-2 prompt of 512 tokens
//! the `[512, 3072]` activation of each of twelve layers.

use rayon::prelude::*;

use crate::instructions::Instructions;
use crate::simd::{Kernels, Pass};

/// Values per rayon task: enough to pay for a task, few enough to share a layer's activation
/// among the threads.
const CHUNK: usize = 1 << 14;

/// `−2 · √(2/π) · log2 e`.
const MINUS_TWO_U_LOG2E: f32 = (-2.0
    * std::f64::consts::FRAC_2_SQRT_PI
    * std::f64::consts::FRAC_1_SQRT_2
    * std::f64::consts::LOG2_E) as f32;

/// `out[i] = gelu_tanh(x[i])`.
///
/// # Panics
/// When the slices differ in length.
pub fn gelu_tanh(x: &[f32], out: &mut [f32]) {
    assert_eq!(x.len(), out.len(), "input and output lengths");
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(out, x)| Instructions::Best.run(GeluTanh { x, out }));
}

/// One chunk of [`gelu_tanh`].
struct GeluTanh<'a> {
    x: &'a [f32],
    out: &'a mut [f32],
}

impl Pass for GeluTanh<'_> {
    #[inline(always)]
    fn run<K: Kernels>(self, kernels: K) {
        for (y, &x) in self.out.iter_mut().zip(self.x) {
            // t = −2u · log2 e = MINUS_TWO_U_LOG2E · x · (1 + 0.044715 x²)
            let t = MINUS_TWO_U_LOG2E * x * kernels.mul_add(0.044715 * x, x, 1.0);
            let t = if t > 127.0 { 127.0 } else { t };
            *y = x / (1.0 + kernels.exp2(t));
        }
    }
}

/// `−log2 e`.
const MINUS_LOG2E: f32 = -std::f32::consts::LOG2_E;

/// `out[i] = silu(gate[i]) · up[i]`, where `silu(x) = x / (1 + e^(−x))`: SwiGLU's hidden
/// values (Llama, Qwen, Mistral), in one pass instead of burn's four (negate, exponentiate,
/// divide, multiply by the expansion).
///
/// `e^(−x)` is `2^t` with `t = −x · log2 e`, clamped at 127 as in [`gelu_tanh`]: below
/// `x ≈ −88` the gate is `x · 2^−127` instead of its limit `0`, within `1e-36`.
///
/// # Panics
/// When the slices differ in length.
pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) {
    assert_eq!(gate.len(), out.len(), "gate and output lengths");
    assert_eq!(up.len(), out.len(), "expansion and output lengths");
    out.par_chunks_mut(CHUNK)
        .zip(gate.par_chunks(CHUNK))
        .zip(up.par_chunks(CHUNK))
        .for_each(|((out, gate), up)| Instructions::Best.run(SiluMul { gate, up, out }));
}

/// One chunk of [`silu_mul`].
struct SiluMul<'a> {
    gate: &'a [f32],
    up: &'a [f32],
    out: &'a mut [f32],
}

impl Pass for SiluMul<'_> {
    #[inline(always)]
    fn run<K: Kernels>(self, kernels: K) {
        for ((y, &g), &u) in self.out.iter_mut().zip(self.gate).zip(self.up) {
            let t = MINUS_LOG2E * g;
            let t = if t > 127.0 { 127.0 } else { t };
            *y = g / (1.0 + kernels.exp2(t)) * u;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definition(x: f32) -> f64 {
        crate::oracle::gelu_tanh(f64::from(x))
    }

    #[test]
    fn silu_mul_matches_the_definition_on_every_instruction_set() {
        let xs: Vec<f32> = (-40_000..=40_000)
            .map(|i| i as f32 / 1000.0)
            .chain([-1e4, -100.0, -88.0, -87.0, 88.0, 100.0, 1e4, 0.0, -0.0])
            .collect();
        let ups: Vec<f32> = (0..xs.len()).map(|i| (i % 7) as f32 - 3.0).collect();
        for instructions in [
            Instructions::Best,
            Instructions::Avx2,
            Instructions::Portable,
        ] {
            let mut out = vec![f32::NAN; xs.len()];
            instructions.run(SiluMul {
                gate: &xs,
                up: &ups,
                out: &mut out,
            });
            for ((&x, &u), &y) in xs.iter().zip(&ups).zip(&out) {
                let want = crate::oracle::silu(f64::from(x)) * f64::from(u);
                let err = (f64::from(y) - want).abs();
                assert!(
                    err <= 1e-6 + 2e-6 * want.abs(),
                    "{instructions:?}: silu({x}) · {u} = {y}, the definition gives {want}"
                );
            }
        }
        // The threaded pass covers every value once.
        let mut out = vec![f32::NAN; xs.len()];
        silu_mul(&xs, &ups, &mut out);
        for ((&x, &u), &y) in xs.iter().zip(&ups).zip(&out) {
            let want = crate::oracle::silu(f64::from(x)) * f64::from(u);
            assert!((f64::from(y) - want).abs() <= 1e-6 + 2e-6 * want.abs());
        }
    }

    #[test]
    fn matches_the_tanh_definition_on_every_instruction_set() {
        let xs: Vec<f32> = (-40_000..=40_000)
            .map(|i| i as f32 / 4000.0)
            .chain([-1e4, -100.0, -20.0, 20.0, 100.0, 1e4, 0.0, -0.0])
            .collect();
        for instructions in [
            Instructions::Best,
            Instructions::Avx2,
            Instructions::Portable,
        ] {
            let mut out = vec![f32::NAN; xs.len()];
            instructions.run(GeluTanh {
                x: &xs,
                out: &mut out,
            });
            for (&x, &y) in xs.iter().zip(&out) {
                let want = definition(x);
                let err = (f64::from(y) - want).abs();
                assert!(
                    err <= 1e-6 + 2e-6 * want.abs(),
                    "{instructions:?}: gelu({x}) = {y}, the definition gives {want}"
                );
            }
        }
    }

    #[test]
    fn the_threaded_pass_covers_every_value_once() {
        // Longer than several chunks, with a ragged end.
        let xs: Vec<f32> = (0..3 * CHUNK + 17)
            .map(|i| (i % 97) as f32 / 8.0 - 6.0)
            .collect();
        let mut out = vec![f32::NAN; xs.len()];
        gelu_tanh(&xs, &mut out);
        for (&x, &y) in xs.iter().zip(&out) {
            assert!(
                (f64::from(y) - definition(x)).abs() <= 1e-5,
                "gelu({x}) = {y}"
            );
        }
    }
}
