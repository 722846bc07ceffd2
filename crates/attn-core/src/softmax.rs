//! A softmax that stays finite for scores in the thousands and for rows where every key is
//! masked (all `−∞`), which it maps to all-zero weights.

use burn::tensor::Tensor;

/// `softmax` over the last dimension, safe for `−∞` rows.
///
/// `exp(s − max)` keeps the largest exponent at `0`, so scores in the thousands do not
/// overflow. A row that is entirely `−∞` would give `−∞ − (−∞) = NaN` and then `0/0`; clamping
/// the row maximum to the most negative finite float and the row sum to the smallest positive
/// normal float turns that row into zeros instead, and keeps its gradient finite (zero).
///
/// # Shapes
/// - `scores`: `[..., seq_len_kv]`
/// - returns: the same shape, each row summing to 1 (or 0 when fully masked).
pub fn safe_softmax<const D: usize>(scores: Tensor<D>) -> Tensor<D> {
    let row_max = scores.clone().max_dim(D - 1).clamp_min(f32::MIN); // [..., 1]
    let exp = (scores - row_max).exp();
    let row_sum = exp.clone().sum_dim(D - 1).clamp_min(f32::MIN_POSITIVE); // [..., 1]
    exp / row_sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{assert_close_slices, for_each_device, to_vec};
    use burn::tensor::Tensor;

    #[test]
    fn softmax_of_large_and_masked_rows_is_finite() {
        for_each_device(|d| {
            let scores = Tensor::<2>::from_floats(
                [
                    [1000.0, 999.0, -1000.0],
                    [f32::NEG_INFINITY, f32::NEG_INFINITY, f32::NEG_INFINITY],
                    [0.0, f32::NEG_INFINITY, 0.0],
                ],
                &d.device,
            );
            let w = to_vec(safe_softmax(scores));
            let e = 1.0 / (1.0 + (-1.0f32).exp());
            assert_close_slices(
                &w,
                &[e, 1.0 - e, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.5],
                1e-6,
                1e-6,
                "softmax",
            );
        });
    }
}
