//! Cutting `d_model` into heads and gluing them back, and sharing key/value heads among
//! query heads (grouped-query attention).

use burn::tensor::Tensor;

use crate::AttentionError;

/// Cuts the last dimension into `n_heads` heads and moves heads before the sequence.
///
/// # Shapes
/// - `x`: `[batch, seq_len, d_model]`
/// - returns: `[batch, n_heads, seq_len, d_head]` with `d_head = d_model / n_heads`
///
/// # Errors
/// [`AttentionError::HeadsDoNotDivide`] when `n_heads` is zero or does not divide `d_model`.
pub fn try_split_heads(x: Tensor<3>, n_heads: usize) -> Result<Tensor<4>, AttentionError> {
    let [batch, seq_len, d_model] = x.dims();
    if n_heads == 0 || !d_model.is_multiple_of(n_heads) {
        return Err(AttentionError::HeadsDoNotDivide { d_model, n_heads });
    }
    let d_head = d_model / n_heads;
    Ok(
        x.reshape([batch, seq_len, n_heads, d_head]) // [batch, seq_len, n_heads, d_head]
            .swap_dims(1, 2),
    ) // [batch, n_heads, seq_len, d_head]
}

/// [`try_split_heads`] for callers that validated `n_heads` already.
///
/// # Shapes
/// - `x`: `[batch, seq_len, d_model]`
/// - returns: `[batch, n_heads, seq_len, d_model / n_heads]`
///
/// # Panics
/// When `n_heads` does not divide `d_model`, with both numbers in the message.
pub fn split_heads(x: Tensor<3>, n_heads: usize) -> Tensor<4> {
    try_split_heads(x, n_heads).unwrap_or_else(|e| panic!("{e}"))
}

/// Moves heads back after the sequence and concatenates them: the inverse of [`split_heads`].
///
/// # Shapes
/// - `x`: `[batch, n_heads, seq_len, d_head]`
/// - returns: `[batch, seq_len, n_heads * d_head]`
pub fn merge_heads(x: Tensor<4>) -> Tensor<3> {
    let [batch, n_heads, seq_len, d_head] = x.dims();
    x.swap_dims(1, 2) // [batch, seq_len, n_heads, d_head]
        .reshape([batch, seq_len, n_heads * d_head]) // [batch, seq_len, d_model]
}

/// Repeats each of `n_kv_heads` key/value heads for the `n_heads / n_kv_heads` query heads
/// that share it: query head `h` uses key/value head `h / (n_heads / n_kv_heads)`, as
/// PyTorch's `enable_gqa` does.
///
/// # Shapes
/// - `x`: `[batch, n_kv_heads, seq_len_kv, d_head]`
/// - returns: `[batch, n_heads, seq_len_kv, d_head]`
///
/// # Panics
/// When `n_kv_heads` does not divide `n_heads` (callers validate first).
pub fn repeat_kv_heads(x: Tensor<4>, n_heads: usize) -> Tensor<4> {
    let [batch, n_kv_heads, seq_len_kv, d_head] = x.dims();
    if n_kv_heads == n_heads {
        return x;
    }
    assert!(
        n_kv_heads > 0 && n_heads.is_multiple_of(n_kv_heads),
        "n_kv_heads ({n_kv_heads}) must divide n_heads ({n_heads})"
    );
    let group = n_heads / n_kv_heads;
    x.reshape([batch, n_kv_heads, 1, seq_len_kv, d_head]) // [batch, n_kv_heads, 1, seq_len_kv, d_head]
        .expand([batch, n_kv_heads, group, seq_len_kv, d_head]) // [batch, n_kv_heads, group, seq_len_kv, d_head]
        .reshape([batch, n_heads, seq_len_kv, d_head]) // [batch, n_heads, seq_len_kv, d_head]
}
