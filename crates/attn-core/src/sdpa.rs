//! The entry point: checks shapes and options ([`PreparedAttention`]), then runs the one
//! [`Route`] they and the device settle.

use burn::tensor::Tensor;

use crate::{AttentionError, AttentionOptions, AttentionOutput, PreparedAttention, Route};

/// Scaled dot-product attention, `softmax(q·kᵀ · scale + bias, masked → −∞) · v`.
///
/// Rows whose keys are all masked return zeros (context and weights) with zero gradients.
///
/// # Shapes
/// - `q`: `[batch, n_heads, seq_len_q, d_head]`
/// - `k`: `[batch, n_kv_heads, seq_len_kv, d_head]`, `n_kv_heads` dividing `n_heads`
/// - `v`: `[batch, n_kv_heads, seq_len_kv, d_value]`
/// - `options.mask`, `options.bias`: broadcast to `[batch, n_heads, seq_len_q, seq_len_kv]`
/// - returns: context `[batch, n_heads, seq_len_q, d_value]`, weights
///   `[batch, n_heads, seq_len_q, seq_len_kv]`
///
/// # Errors
/// An [`AttentionError`] naming the dimensions when the shapes cannot work, or when a forced
/// strategy cannot honour the options (weights or dropout from `Chunked`, `Fused` or `Native`;
/// gradients from `Native`).
pub fn try_scaled_dot_product_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    options: &AttentionOptions,
) -> Result<AttentionOutput, AttentionError> {
    let plan = PreparedAttention::new(&q, &k, &v, options)?;
    let route = Route::choose(&plan, &q, &k, &v, options)?;
    Ok(route.run(q, k, v, &plan, options.need_weights))
}

/// [`try_scaled_dot_product_attention`] for callers whose shapes are known to be valid.
///
/// # Shapes
/// As [`try_scaled_dot_product_attention`].
///
/// # Panics
/// On any [`AttentionError`], with its message (which names the dimensions).
pub fn scaled_dot_product_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    options: &AttentionOptions,
) -> AttentionOutput {
    try_scaled_dot_product_attention(q, k, v, options).unwrap_or_else(|e| panic!("attention: {e}"))
}
