//! The readable reference: every intermediate of `softmax(q·kᵀ/√d_head)·v` is a tensor.

use burn::tensor::{Distribution, Tensor};

use crate::{PreparedAttention, repeat_kv_heads, safe_softmax};

/// Raw similarity of every query with every key, scaled: `q·kᵀ · scale`.
///
/// # Shapes
/// - `q`: `[batch, n_heads, seq_len_q, d_head]`
/// - `k`: `[batch, n_heads, seq_len_kv, d_head]`
/// - returns: `[batch, n_heads, seq_len_q, seq_len_kv]`
pub fn scaled_scores(q: Tensor<4>, k: Tensor<4>, scale: f64) -> Tensor<4> {
    q.matmul(k.swap_dims(2, 3)) // [batch, n_heads, seq_len_q, seq_len_kv]
        .mul_scalar(scale)
}

/// Zeroes each weight with probability `p` and scales the survivors by `1/(1 − p)`.
fn dropout(weights: Tensor<4>, p: f64) -> Tensor<4> {
    if p == 0.0 {
        return weights;
    }
    let keep = Tensor::<4>::random(
        weights.shape(),
        Distribution::Bernoulli(1.0 - p),
        &weights.device(),
    );
    (weights * keep).div_scalar(1.0 - p)
}

/// Explicit attention: returns the context and the weights that produced it.
pub(crate) fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
) -> (Tensor<4>, Tensor<4>) {
    let [_, n_heads, _, seq_len_kv] = plan.scores_shape;
    let k = repeat_kv_heads(k, n_heads); // [batch, n_heads, seq_len_kv, d_head]
    let v = repeat_kv_heads(v, n_heads); // [batch, n_heads, seq_len_kv, d_value]

    let scores = scaled_scores(q, k, plan.scale); // [batch, n_heads, seq_len_q, seq_len_kv]
    let scores = plan.mask_and_bias(scores, 0);
    debug_assert_eq!(scores.dims()[3], seq_len_kv);
    let weights = dropout(safe_softmax(scores), plan.dropout);
    let context = weights.clone().matmul(v); // [batch, n_heads, seq_len_q, d_value]
    (context, weights)
}
