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
