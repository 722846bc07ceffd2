//! A branch-free `2^x` on `f32` that LLVM vectorises: the softmax of the native kernel spends
//! one of these per score, so it must cost a handful of vector instructions, not a libm call.
//!
//! ```text
//! 2^x = 2^n · 2^f,   n = round(x),  f = x − n ∈ [−½, ½]
//! ```
//!
//! `2^f` is Cephes' `exp2f` polynomial (relative error about `2e-7` on `[−½, ½]`) and `2^n` is
//! built directly in the exponent bits. Rounding uses the `1.5 · 2^23` trick: adding it pushes
//! the fraction out of the mantissa, and the mantissa's low bits then hold `n`.
//!
//! Inputs are clamped to `x ≥ −127`, where `n + 127 = 0` gives exponent bits 0 and so the
//! result is exactly `0`: a masked score (`−∞`) gets exactly zero weight. The kernel only ever
//! evaluates `x ≤ 0` (scores minus their running maximum), so there is no upper clamp.

/// `1.5 · 2^23`: adding it rounds an `f32` of magnitude below `2^22` to an integer.
pub(crate) const ROUND_MAGIC: f32 = 12_582_912.0;

/// Below this `2^x` is flushed to zero (it would be subnormal).
pub(crate) const LOWEST: f32 = -127.0;

/// Cephes `exp2f` coefficients: `2^f ≈ 1 + f·P(f)` on `[−½, ½]`, highest degree first.
pub(crate) const P: [f32; 6] = [
    1.535_336_2e-4,
    1.339_887_4e-3,
    9.618_438e-3,
    5.550_332_5e-2,
    2.402_264_8e-1,
    6.931_472e-1,
];

/// `a · b + c`, fused where the target has FMA (one rounding, one instruction) and plain
/// otherwise: without hardware FMA, `f32::mul_add` is a slow libm call.
#[inline(always)]
pub(crate) fn mul_add<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// `2^x` for `x ≤ 0`, exactly `0` for `x ≤ −127` (and for `x = −∞`).
#[inline(always)]
pub(crate) fn exp2<const FMA: bool>(x: f32) -> f32 {
    // A compare and select rather than `f32::max`, whose NaN rules cost extra instructions.
    let x = if x < LOWEST { LOWEST } else { x };
    let shifted = x + ROUND_MAGIC;
    let n = shifted - ROUND_MAGIC;
    let f = x - n;
    // The low mantissa bits of `shifted` are `n` in two's complement; adding 127 and moving
    // them into the exponent field gives the bits of `2^n` (0 for n = −127).
    let n_bits = shifted.to_bits().wrapping_sub(ROUND_MAGIC.to_bits());
    let two_to_n = f32::from_bits(n_bits.wrapping_add(127) << 23);
    let mut poly = P[0];
    for &c in &P[1..] {
        poly = mul_add::<FMA>(poly, f, c);
    }
    let two_to_f = mul_add::<FMA>(f, poly, 1.0);
    two_to_f * two_to_n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp2_is_accurate_to_a_few_ulps_on_the_range_softmax_uses() {
        let mut worst = 0.0f64;
        for i in 0..=200_000 {
            // Compare against 2^x of the f32 input itself: rounding x to f32 alone moves 2^x by
            // up to |x|·ln 2·2⁻²⁴ ≈ 5e-6 relative near x = −126.
            let x = (-126.0 * f64::from(i) / 200_000.0) as f32;
            let want = f64::from(x).exp2();
            for got in [exp2::<true>(x), exp2::<false>(x)] {
                let rel = ((f64::from(got) - want) / want).abs();
                worst = worst.max(rel);
            }
        }
        assert!(worst < 2e-6, "largest relative error {worst:e}");
    }

    #[test]
    fn exp2_of_integers_is_exact() {
        for n in -126..=0 {
            assert_eq!(exp2::<true>(n as f32), (n as f32).exp2(), "2^{n}");
        }
    }

    #[test]
    fn masked_scores_get_exactly_zero() {
        for x in [f32::NEG_INFINITY, f32::MIN, -1e6, -127.0, -126.8] {
            assert_eq!(exp2::<true>(x), 0.0, "2^{x}");
            assert_eq!(exp2::<false>(x), 0.0, "2^{x}");
        }
    }
}
