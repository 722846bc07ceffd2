//! burn's own attention kernel (`burn::tensor::module::attention`): flex's tiled online-softmax
//! kernel, the CubeCL flash kernel on GPUs, burn's decomposed fallback elsewhere.

use burn::tensor::Tensor;
use burn::tensor::module::attention as burn_attention;
use burn::tensor::ops::AttentionModuleOptions;

use crate::{PreparedAttention, repeat_kv_heads};

pub(crate) fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
) -> Tensor<4> {
    let [_, n_heads, seq_len_q, seq_len_kv] = plan.scores_shape;
    // Not every backend's kernel takes fewer key/value heads than query heads.
    let k = repeat_kv_heads(k, n_heads); // [batch, n_heads, seq_len_kv, d_head]
    let v = repeat_kv_heads(v, n_heads); // [batch, n_heads, seq_len_kv, d_value]

    // burn's `is_causal` is bottom-right aligned; any other causal offset becomes a mask.
    let bottom_right = seq_len_kv as i64 - seq_len_q as i64;
    let is_causal = plan.causal_offset == Some(bottom_right);
    let mask = if is_causal {
        let [batch, _, _, _] = plan.scores_shape;
        plan.mask
            .clone()
            .map(|m| m.expand([batch, n_heads, seq_len_q, seq_len_kv]))
    } else {
        plan.mask_for_keys(0, seq_len_kv, &q.device())
    };
    let bias = plan.bias_for_keys(0, seq_len_kv);
    let options = AttentionModuleOptions {
        scale: Some(plan.scale),
        softcap: None,
        is_causal,
    };
    burn_attention(q, k, v, mask, bias, options) // [batch, n_heads, seq_len_q, d_value]
}
