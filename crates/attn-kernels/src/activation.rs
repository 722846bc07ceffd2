//! GELU, exact and GPT-2's tanh form, forward and backward, and the SiLU gate of Llama's
//! feed-forward, on plain `f32` slices: one pass over the values, on every core.
//!
//! ```text
//! exact   gelu(x) = x · Φ(x) = x/2 · erfc(−x/√2)         gelu'(x) = Φ(x) + x · φ(x)
//! tanh    gelu(x) = x/2 · (1 + tanh(u)) = x · σ(2u)       gelu'(x) = σ + 2x · σ(1 − σ) · u'
//!         u = √(2/π) · (x + 0.044715 x³),  u' = √(2/π) · (1 + 3 · 0.044715 x²),  σ = σ(2u)
//! ```
//!
//! `erfc` is Numerical Recipes' `erfcc` (Press et al., *Numerical Recipes in C*, 2nd ed., §6.2):
//!
//! ```text
//! t = 1 / (1 + a/2),  a = |z|       erfc(|z|) = t · exp(−a² + P(t))      erfc(−z) = 2 − erfc(z)
//! ```
//!
//! with a fractional error below `1.2e-7` everywhere, so that `Φ(x)` keeps its relative
//! accuracy far into the negative tail, where `x · Φ(x)` is tiny. Every exponential is the
//! kernels' own `2^x` (`exp.rs`), so that each loop is a few vector instructions per value
//! inside `vectorize`. In the tanh form, `e^(−2u)` is `2^t` with `t = −2u · log2 e`, clamped to
//! `[−127, 127]`: below, `2^t` is `0` and the result is `x`; above, `2^127` keeps the
//! denominator finite and the result is `x · 2^−127`, within `1e-37` of the limit `0`.
//!
//! Written as burn operations the exact form is five passes over the tensor (with the C
//! library's `erff` one value at a time) and its backward about a dozen, each on one thread
//! (flex's element-wise operations are single-threaded): on a GPT-2 prompt of 512 tokens the
//! `[512, 3072]` activation of each of twelve layers, and in training every feed-forward's
//! hidden layer twice.

use rayon::prelude::*;

use crate::instructions::Instructions;
use crate::simd::{Kernels, Pass};

/// Values per rayon task: enough to pay for a task, few enough to share a layer's activation
/// among the threads.
const CHUNK: usize = 1 << 14;

/// Which GELU: the exact `x · Φ(x)` (BERT's, PyTorch's default) or GPT-2's tanh approximation
/// (Hugging Face's `gelu_new`, PyTorch's `approximate="tanh"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GeluForm {
    /// `x · Φ(x)`, with `Φ` the standard normal distribution function.
    Exact,
    /// `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`.
    Tanh,
}

/// `−2 · √(2/π) · log2 e`.
const MINUS_TWO_U_LOG2E: f32 = (-2.0
    * std::f64::consts::FRAC_2_SQRT_PI
    * std::f64::consts::FRAC_1_SQRT_2
    * std::f64::consts::LOG2_E) as f32;

/// `2 · √(2/π)`.
const TWO_SQRT_2_OVER_PI: f32 =
    (2.0 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2) as f32;

/// `3 · 0.044715`.
const THREE_CUBIC: f32 = 3.0 * 0.044715;

/// `1 / √(2π)`.
const FRAC_1_SQRT_2PI: f32 =
    (std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2 / 2.0) as f32;

/// `P(t)` of `erfcc`, highest power first, as published.
const ERFC_P_PUBLISHED: [f64; 10] = [
    0.170_872_77,
    -0.822_152_23,
    1.488_515_87,
    -1.135_203_98,
    0.278_868_07,
    -0.186_288_06,
    0.096_784_18,
    0.374_091_96,
    1.000_023_68,
    -1.265_512_23,
];

/// [`ERFC_P_PUBLISHED`] rounded to `f32`.
const ERFC_P: [f32; 10] = {
    let mut p = [0.0; 10];
    let mut i = 0;
    while i < 10 {
        p[i] = ERFC_P_PUBLISHED[i] as f32;
        i += 1;
    }
    p
};

/// `out[i] = gelu(x[i])` in the given form.
///
/// # Panics
/// When the slices differ in length.
pub fn gelu(form: GeluForm, x: &[f32], out: &mut [f32]) {
    assert_eq!(x.len(), out.len(), "input and output lengths");
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(out, x)| match form {
            GeluForm::Exact => Instructions::Best.run(GeluExact { x, out }),
            GeluForm::Tanh => Instructions::Best.run(GeluTanh { x, out }),
        });
}

/// `dx[i] = dy[i] · gelu'(x[i])` in the given form: the backward of [`gelu`].
///
/// # Panics
/// When the slices differ in length.
pub fn gelu_backward(form: GeluForm, x: &[f32], dy: &[f32], dx: &mut [f32]) {
    assert_eq!(x.len(), dx.len(), "input and gradient lengths");
    assert_eq!(dy.len(), dx.len(), "output gradient and gradient lengths");
    dx.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .zip(dy.par_chunks(CHUNK))
        .for_each(|((dx, x), dy)| match form {
            GeluForm::Exact => Instructions::Best.run(GeluExactBackward { x, dy, dx }),
            GeluForm::Tanh => Instructions::Best.run(GeluTanhBackward { x, dy, dx }),
        });
}

/// `out[i] = gelu_tanh(x[i])`: [`gelu`] in [`GeluForm::Tanh`].
///
/// # Panics
/// When the slices differ in length.
pub fn gelu_tanh(x: &[f32], out: &mut [f32]) {
    gelu(GeluForm::Tanh, x, out);
}

/// `(Φ(x), a²)` with `a = |x|/√2`: the distribution function by `erfcc`, and the square that
/// the density `φ(x) = e^(−a²)/√(2π)` needs.
#[inline(always)]
fn normal_cdf<K: Kernels>(kernels: K, x: f32) -> (f32, f32) {
    let a = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / kernels.mul_add(0.5, a, 1.0);
    let mut p = ERFC_P[0];
    for &c in &ERFC_P[1..] {
        p = kernels.mul_add(p, t, c);
    }
    let a2 = a * a;
    // erfc(a) = t · e^(−a² + P(t)); the exponent is at most about 3e-8 (at a = 0).
    let half_erfc = 0.5 * t * kernels.exp2((p - a2) * std::f32::consts::LOG2_E);
    // Φ(x) = erfc(−x/√2)/2: erfc(a)/2 for x ≤ 0, 1 − erfc(a)/2 above.
    let phi = if x > 0.0 { 1.0 - half_erfc } else { half_erfc };
    (phi, a2)
}

/// One chunk of [`gelu`] in the exact form.
struct GeluExact<'a> {
    x: &'a [f32],
    out: &'a mut [f32],
}

impl Pass for GeluExact<'_> {
    #[inline(always)]
    fn run<K: Kernels>(self, kernels: K) {
        for (y, &x) in self.out.iter_mut().zip(self.x) {
            *y = x * normal_cdf(kernels, x).0;
        }
    }
}

/// One chunk of [`gelu_backward`] in the exact form.
struct GeluExactBackward<'a> {
    x: &'a [f32],
    dy: &'a [f32],
    dx: &'a mut [f32],
}

impl Pass for GeluExactBackward<'_> {
    #[inline(always)]
    fn run<K: Kernels>(self, kernels: K) {
        for ((dx, &x), &dy) in self.dx.iter_mut().zip(self.x).zip(self.dy) {
            let (phi, a2) = normal_cdf(kernels, x);
            let density = FRAC_1_SQRT_2PI * kernels.exp2(-a2 * std::f32::consts::LOG2_E);
            *dx = dy * kernels.mul_add(x, density, phi);
        }
    }
}

/// One chunk of [`gelu`] in the tanh form.
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

/// One chunk of [`gelu_backward`] in the tanh form.
struct GeluTanhBackward<'a> {
    x: &'a [f32],
    dy: &'a [f32],
    dx: &'a mut [f32],
}

impl Pass for GeluTanhBackward<'_> {
    #[inline(always)]
    fn run<K: Kernels>(self, kernels: K) {
        for ((dx, &x), &dy) in self.dx.iter_mut().zip(self.x).zip(self.dy) {
            let t = MINUS_TWO_U_LOG2E * x * kernels.mul_add(0.044715 * x, x, 1.0);
            let t = if t > 127.0 { 127.0 } else { t };
            let s = 1.0 / (1.0 + kernels.exp2(t)); // σ(2u)
            // 2x · u' = 2√(2/π) · x · (1 + 3 · 0.044715 x²)
            let two_x_du = TWO_SQRT_2_OVER_PI * x * kernels.mul_add(THREE_CUBIC * x, x, 1.0);
            *dx = dy * kernels.mul_add(two_x_du * s, 1.0 - s, s);
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
    use crate::oracle;

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

    /// Inputs across the range that matters, the tails and the limits.
    fn inputs() -> Vec<f32> {
        (-40_000..=40_000)
            .map(|i| i as f32 / 4000.0)
            .chain([
                -1e4, -100.0, -20.0, -12.0, 12.0, 20.0, 100.0, 1e4, 0.0, -0.0,
            ])
            .collect()
    }

    /// Within `1e-6` absolute and `2e-6` relative of `want`, or names the input.
    fn check(what: &str, x: f32, got: f32, want: f64) {
        let err = (f64::from(got) - want).abs();
        assert!(
            err <= 1e-6 + 2e-6 * want.abs(),
            "{what}({x}) = {got}, the definition gives {want}"
        );
    }

    #[test]
    fn the_exact_form_matches_x_phi_on_every_instruction_set() {
        let xs = inputs();
        for instructions in [
            Instructions::Best,
            Instructions::Avx2,
            Instructions::Portable,
        ] {
            let mut out = vec![f32::NAN; xs.len()];
            instructions.run(GeluExact {
                x: &xs,
                out: &mut out,
            });
            for (&x, &y) in xs.iter().zip(&out) {
                check(
                    &format!("{instructions:?}: gelu"),
                    x,
                    y,
                    oracle::gelu(f64::from(x)),
                );
            }
        }
        // Far in the negative tail the value is tiny, and still accurate relative to itself:
        // gelu(−5) = −5 · Φ(−5) ≈ −1.43e-6.
        let mut out = [0.0];
        gelu(GeluForm::Exact, &[-5.0], &mut out);
        let want = oracle::gelu(-5.0);
        assert!(
            ((f64::from(out[0]) - want) / want).abs() < 1e-5,
            "gelu(-5) = {}, the definition gives {want}",
            out[0]
        );
    }

    #[test]
    fn backward_passes_match_the_derivatives_on_every_instruction_set() {
        let xs = inputs();
        let dys: Vec<f32> = (0..xs.len()).map(|i| (i % 7) as f32 / 2.0 - 1.5).collect();
        type Derivative = fn(f64) -> f64;
        let forms: [(GeluForm, Derivative); 2] = [
            (GeluForm::Exact, oracle::gelu_derivative),
            (GeluForm::Tanh, oracle::gelu_tanh_derivative),
        ];
        for (form, derivative) in forms {
            for instructions in [
                Instructions::Best,
                Instructions::Avx2,
                Instructions::Portable,
            ] {
                let mut dx = vec![f32::NAN; xs.len()];
                match form {
                    GeluForm::Exact => instructions.run(GeluExactBackward {
                        x: &xs,
                        dy: &dys,
                        dx: &mut dx,
                    }),
                    GeluForm::Tanh => instructions.run(GeluTanhBackward {
                        x: &xs,
                        dy: &dys,
                        dx: &mut dx,
                    }),
                }
                for ((&x, &dy), &g) in xs.iter().zip(&dys).zip(&dx) {
                    let want = f64::from(dy) * derivative(f64::from(x));
                    check(
                        &format!("{instructions:?} {form:?}: dy · gelu'"),
                        x,
                        g,
                        want,
                    );
                }
            }
        }
    }

    #[test]
    fn the_oracle_derivatives_are_the_slopes_of_the_oracle_functions() {
        // Central differences of the f64 definitions, so that the backward's reference is
        // itself checked against the forward's.
        let h = 1e-5;
        for i in -80..=80 {
            let x = f64::from(i) / 10.0;
            for (f, df) in [
                (
                    oracle::gelu as fn(f64) -> f64,
                    oracle::gelu_derivative as fn(f64) -> f64,
                ),
                (oracle::gelu_tanh, oracle::gelu_tanh_derivative),
            ] {
                let slope = (f(x + h) - f(x - h)) / (2.0 * h);
                assert!(
                    (slope - df(x)).abs() < 1e-8,
                    "x = {x}: {slope} against {}",
                    df(x)
                );
            }
        }
    }

    #[test]
    fn nan_stays_nan() {
        for form in [GeluForm::Exact, GeluForm::Tanh] {
            let (mut y, mut dx) = ([0.0], [0.0]);
            gelu(form, &[f32::NAN], &mut y);
            gelu_backward(form, &[f32::NAN], &[1.0], &mut dx);
            assert!(y[0].is_nan() && dx[0].is_nan(), "{form:?}: {y:?} {dx:?}");
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
        let dys: Vec<f32> = xs.iter().map(|x| 1.0 - x / 8.0).collect();
        gelu(GeluForm::Exact, &xs, &mut out);
        let mut dx = vec![f32::NAN; xs.len()];
        gelu_backward(GeluForm::Exact, &xs, &dys, &mut dx);
        for ((&x, &dy), (&y, &g)) in xs.iter().zip(&dys).zip(out.iter().zip(&dx)) {
            check("gelu", x, y, oracle::gelu(f64::from(x)));
            check(
                "dy · gelu'",
                x,
                g,
                f64::from(dy) * oracle::gelu_derivative(f64::from(x)),
            );
        }
    }
}
