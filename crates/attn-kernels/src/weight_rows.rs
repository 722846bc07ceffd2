//! Weights stored as rows (PyTorch's `Linear` layout: each output's `d_input` weights
//! contiguous), of `f32` or of `bfloat16` bits; the check of a product's operands; and the
//! conversions between `f32` and `bfloat16`.
//! What the `bfloat16` products share: [`half`] (a few rows, and the choice of kernel for
//! many), `bf16_tiles` (AMX) and `bf16_dot` (`vdpbf16ps`) import it, and it imports none of
//! them.
//!
//! [`half`]: crate::half

/// `W` in PyTorch's `Linear` layout: `d_output` rows of `d_input` values, row `j` starting at
/// `offset + j · row`; `T` is `u16` for `bfloat16` bits ([`Bf16Rows`]) or `f32`.
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a, T> {
    /// The stored values (`bfloat16` as `u16` bit patterns).
    pub values: &'a [T],
    /// Index of `W[0, 0]` in `values`.
    pub offset: usize,
    /// Rows (outputs).
    pub d_output: usize,
    /// Values per row (inputs).
    pub d_input: usize,
    /// Distance between the starts of two rows, at least `d_input`.
    pub row: usize,
}

/// `bfloat16` weights, as their bits.
pub type Bf16Rows<'a> = Rows<'a, u16>;

impl<T> Rows<'_, T> {
    /// Row `j`'s `d_input` values.
    pub(crate) fn row(&self, j: usize) -> &[T] {
        let start = self.offset + j * self.row;
        &self.values[start..start + self.d_input]
    }
}

/// A stored weight, read as the `f32` it is or widens to.
pub trait Weight: Copy + Send + Sync {
    /// The value as an `f32`.
    fn widen(self) -> f32;
}

impl Weight for u16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        bf16_to_f32(self)
    }
}

impl Weight for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

/// `bits` as the `f32` whose upper half they are.
#[inline(always)]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// `f32` rounded to the nearest `bfloat16` (ties to even), as its bits; a NaN stays a NaN.
#[inline]
pub fn round_to_bf16(v: f32) -> u16 {
    let bits = v.to_bits();
    if v.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let lsb = (bits >> 16) & 1;
    (bits.wrapping_add(0x7fff + lsb) >> 16) as u16
}

/// Panics unless `x` is `rows · d_input` long, `bias` is `d_output` long and `W`'s rows lie
/// inside its values: the operands of a product `x · Wᵀ + bias`.
pub(crate) fn check_operands<T>(x: &[f32], rows: usize, w: &Rows<'_, T>, bias: Option<&[f32]>) {
    assert_eq!(x.len(), rows * w.d_input, "x is [rows, d_input]");
    assert!(w.row >= w.d_input, "rows overlap");
    if w.d_output > 0 {
        let end = w.offset + (w.d_output - 1) * w.row + w.d_input;
        assert!(end <= w.values.len(), "W ends at {end}, past its values");
    }
    if let Some(b) = bias {
        assert_eq!(b.len(), w.d_output, "bias is [d_output]");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_to_the_nearest_bfloat16_ties_to_even() {
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
        assert_eq!(round_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        // 1 + 3·2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
        assert_eq!(round_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(round_to_bf16(1.0 + 2f32.powi(-8) + 2f32.powi(-20)), 0x3f81);
        assert_eq!(round_to_bf16(-2.5), 0xc020);
        assert_eq!(round_to_bf16(f32::INFINITY), 0x7f80);
        assert_eq!(
            round_to_bf16(f32::MAX),
            0x7f80,
            "past the largest bfloat16: infinity"
        );
        assert!(bf16_to_f32(round_to_bf16(f32::NAN)).is_nan());
    }
}
