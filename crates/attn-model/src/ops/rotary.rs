//! Rotary positions on queries and keys, `x ∘ cos + rot(x) ∘ sin`, as one pass where it can be.
//!
//! `attn_pos::RotaryEncoding::apply` is burn operations: the table's rows, the two halves, a
//! negation, a `cat`, two products and a sum, for the queries and again for the keys of every
//! layer. In a decoding step they are a few hundred values each and the cost is the operations
//! themselves. On flex, for inference, in `f32`, [`rotary`] runs it as one pass of
//! `attn_kernels::rotate` over the same `cos` and `sin` rows; everywhere else (autodiff included)
//! through `apply`.

use attn_pos::{RotaryEncoding, RotaryPairing};
use burn::tensor::Tensor;

/// `x` rotated as positions `offset..offset + seq_len` by `encoding` (its pairing and scaling).
///
/// # Shapes
/// - `x`: `[batch, n_heads, seq_len, d_head]`
/// - returns: `[batch, n_heads, seq_len, d_head]`
///
/// # Panics
/// When `x`'s last dimension is not the encoding's `d_head`.
pub fn rotary(encoding: &RotaryEncoding, x: Tensor<4>, offset: usize) -> Tensor<4> {
    #[cfg(feature = "flex")]
    if let Some(y) = flex::rotary(encoding, &x, offset) {
        return y;
    }
    encoding.apply(x, offset)
}

#[cfg(feature = "flex")]
mod flex {
    use super::{RotaryEncoding, RotaryPairing};
    use burn::backend::Flex;
    use burn::tensor::{DType, Tensor, TensorData};

    use attn_core::backend::flex_floats;

    use super::super::is_flex_inference;

    /// The native pass, or `None` outside flex inference, when `x` is not `f32` or its width is
    /// not the encoding's.
    pub(super) fn rotary(
        encoding: &RotaryEncoding,
        x: &Tensor<4>,
        offset: usize,
    ) -> Option<Tensor<4>> {
        let dims = x.dims();
        let [_, _, seq_len, d_head] = dims;
        if x.dtype() != DType::F32 || !is_flex_inference(x) || d_head != encoding.d_head() {
            return None;
        }
        let device = x.device();
        let (cos, sin) = encoding.cos_sin(seq_len, offset, &device); // [seq_len, d_head] each
        let [cos, sin] = [cos, sin].map(|t| t.try_into_primitive::<Flex>().ok());
        let (cos, sin) = (cos?, sin?);
        let values = x.clone().try_into_primitive::<Flex>().ok()?;
        let y = attn_kernels::rotate(
            &flex_floats(&values),
            &flex_floats(&cos),
            &flex_floats(&sin),
            seq_len,
            d_head,
            encoding.pairing() == RotaryPairing::HalfSplit,
        );
        Some(Tensor::from_data(TensorData::new(y, dims), &device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{SeededRng, assert_close_slices, for_each_device, to_vec};
    use burn::tensor::TensorData;

    /// Both pairings, with and without autodiff, on a contiguous input and on heads split from
    /// `[batch, seq_len, n_heads, d_head]` (a strided view), at an offset: against the rotation
    /// of each pair by `position · θ^(−2j / d_head)` in `f64`.
    #[test]
    fn turns_each_pair_by_its_angle_everywhere() {
        let (batch, n_heads, seq_len, d_head, offset) = (2, 3, 4, 8, 5);
        let theta = 500.0;
        for_each_device(|d| {
            let mut rng = SeededRng::new(3);
            let stored = to_vec(rng.tensor([batch, seq_len, n_heads, d_head], &d.device));
            for pairing in [RotaryPairing::HalfSplit, RotaryPairing::Interleaved] {
                let encoding = RotaryEncoding::new(d_head, theta, pairing).expect("valid");
                // x[b, h, s, i] = stored[b, s, h, i]
                let mut want = vec![0.0f32; stored.len()];
                let mut contiguous = vec![0.0f32; stored.len()];
                for b in 0..batch {
                    for h in 0..n_heads {
                        for s in 0..seq_len {
                            let at = ((b * seq_len + s) * n_heads + h) * d_head;
                            let row = &stored[at..at + d_head];
                            let out = ((b * n_heads + h) * seq_len + s) * d_head;
                            contiguous[out..out + d_head].copy_from_slice(row);
                            for j in 0..d_head / 2 {
                                let (ia, ib) = match pairing {
                                    RotaryPairing::HalfSplit => (j, j + d_head / 2),
                                    RotaryPairing::Interleaved => (2 * j, 2 * j + 1),
                                };
                                let t = (offset + s) as f64
                                    * f64::powf(theta, -((2 * j) as f64) / d_head as f64);
                                let (a, c) = (f64::from(row[ia]), f64::from(row[ib]));
                                want[out + ia] = (a * t.cos() - c * t.sin()) as f32;
                                want[out + ib] = (a * t.sin() + c * t.cos()) as f32;
                            }
                        }
                    }
                }
                let shape = [batch, seq_len, n_heads, d_head];
                for device in [d.device.clone(), d.device.clone().autodiff()] {
                    let view =
                        Tensor::<4>::from_data(TensorData::new(stored.clone(), shape), &device)
                            .swap_dims(1, 2); // [batch, n_heads, seq_len, d_head]
                    let plain = Tensor::<4>::from_data(
                        TensorData::new(contiguous.clone(), [batch, n_heads, seq_len, d_head]),
                        &device,
                    );
                    for (what, x) in [("view", view), ("contiguous", plain)] {
                        assert_close_slices(
                            &to_vec(rotary(&encoding, x, offset)),
                            &want,
                            1e-5,
                            1e-5,
                            &format!(
                                "{}: {pairing:?}, {what}, autodiff {}",
                                d.name,
                                device.is_autodiff()
                            ),
                        );
                    }
                }
            }
        });
    }
}
