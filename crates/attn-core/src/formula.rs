//! The formula, and nothing else: `softmax(Q·Kᵀ·scale + mask)·V` in five burn tensor
//! operations. Every strategy of [`scaled_dot_product_attention`](crate::scaled_dot_product_attention)
//! is tested against it.

use burn::tensor::Tensor;
use burn::tensor::activation::softmax;

/// Scaled dot-product attention as the paper writes it: `softmax(q·kᵀ · scale + mask) · v`.
///
/// `mask` is additive, as PyTorch's float `attn_mask`: `0` where a key is attended, `−∞` where
/// it is masked, or any bias (ALiBi, relative positions). There are no options, no strategies
/// and no grouped heads; a row whose keys are all `−∞` gives NaN (`0/0`), where
/// [`scaled_dot_product_attention`](crate::scaled_dot_product_attention) gives zeros.
///
/// # Shapes
/// - `q`: `[batch, n_heads, seq_len_q, d_head]`
/// - `k`: `[batch, n_heads, seq_len_kv, d_head]`
/// - `v`: `[batch, n_heads, seq_len_kv, d_value]`
/// - `mask`: broadcasts to `[batch, n_heads, seq_len_q, seq_len_kv]`
/// - returns: `[batch, n_heads, seq_len_q, d_value]`
///
/// ```
/// use attn_core::formula;
/// use burn::tensor::{Device, Tensor};
///
/// let device = Device::flex();
/// let q = Tensor::<4>::from_floats([[[[0.0, 4.0]]]], &device); // [1, 1, 1, 2]
/// let k = Tensor::<4>::from_floats([[[[1.0, 0.0], [0.0, 1.0]]]], &device); // [1, 1, 2, 2]
/// let v = Tensor::<4>::from_floats([[[[10.0], [20.0]]]], &device); // [1, 1, 2, 1]
/// // scores = [0, 4] / √2, weights = [0.0558, 0.9442], context = 10·0.0558 + 20·0.9442
/// let context = formula::attention(q.clone(), k.clone(), v.clone(), None, 0.5f64.sqrt());
/// assert!((context.into_scalar::<f32>() - 19.441_93).abs() < 1e-4);
/// // Masking the second key leaves the first key's value alone.
/// let mask = Tensor::<4>::from_floats([[[[0.0, f32::NEG_INFINITY]]]], &device); // [1, 1, 1, 2]
/// let context = formula::attention(q, k, v, Some(mask), 0.5f64.sqrt());
/// assert_eq!(context.into_scalar::<f32>(), 10.0);
/// ```
pub fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    mask: Option<Tensor<4>>,
    scale: f64,
) -> Tensor<4> {
    let k_t = k.swap_dims(2, 3); // [batch, n_heads, d_head, seq_len_kv]
    let scores = q.matmul(k_t).mul_scalar(scale); // [batch, n_heads, seq_len_q, seq_len_kv]
    let scores = match mask {
        Some(mask) => scores + mask,
        None => scores,
    };
    let weights = softmax(scores, 3); // [batch, n_heads, seq_len_q, seq_len_kv]
    weights.matmul(v) // [batch, n_heads, seq_len_q, d_value]
}
