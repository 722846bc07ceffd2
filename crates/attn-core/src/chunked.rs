//! Online softmax over blocks of keys (Milakov & Gimelshein 2018; FlashAttention): the
//! `[seq_len_q, seq_len_kv]` matrix is never formed, only `[seq_len_q, block]` slices of it.
//!
//! For each block of keys, with running row maximum `m`, running denominator `l` and running
//! unnormalised output `o`:
//!
//! ```text
//! s   = q·k_blockᵀ · scale (masked → −∞, + bias)
//! m'  = max(m, rowmax(s))
//! p   = exp(s − m')
//! l   = l · exp(m − m') + rowsum(p)
//! o   = o · exp(m − m') + p·v_block
//! ```
//!
//! and finally `context = o / l`. Starting `m` at the most negative finite float (not `−∞`)
//! keeps `exp(m − m')` defined when a whole block is masked; a fully masked row ends with
//! `l = 0`, `o = 0` and returns zeros.

use burn::tensor::Tensor;

use crate::{PreparedAttention, repeat_kv_heads};

/// Keys per block when [`Strategy::Chunked`](crate::Strategy::Chunked) is built by default.
pub const DEFAULT_BLOCK: usize = 256;

pub(crate) fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
    block: usize,
) -> Tensor<4> {
    let [batch, n_heads, seq_len_q, seq_len_kv] = plan.scores_shape;
    let d_value = v.dims()[3];
    let device = q.device();
    let k = repeat_kv_heads(k, n_heads); // [batch, n_heads, seq_len_kv, d_head]
    let v = repeat_kv_heads(v, n_heads); // [batch, n_heads, seq_len_kv, d_value]
    let q = q.mul_scalar(plan.scale);

    let mut row_max = Tensor::<4>::full([batch, n_heads, seq_len_q, 1], f32::MIN, &device);
    let mut row_sum = Tensor::<4>::zeros([batch, n_heads, seq_len_q, 1], &device);
    let mut out = Tensor::<4>::zeros([batch, n_heads, seq_len_q, d_value], &device);

    for kv_start in (0..seq_len_kv).step_by(block) {
        let len = block.min(seq_len_kv - kv_start);
        let k_block = k.clone().narrow(2, kv_start, len); // [batch, n_heads, len, d_head]
        let v_block = v.clone().narrow(2, kv_start, len); // [batch, n_heads, len, d_value]

        let scores = q.clone().matmul(k_block.swap_dims(2, 3)); // [batch, n_heads, seq_len_q, len]
        let scores = plan.mask_and_bias(scores, kv_start);

        let new_max = row_max.clone().max_pair(scores.clone().max_dim(3)); // [batch, n_heads, seq_len_q, 1]
        let p = (scores - new_max.clone()).exp();
        let rescale = (row_max - new_max.clone()).exp();
        row_sum = row_sum * rescale.clone() + p.clone().sum_dim(3);
        out = out * rescale + p.matmul(v_block); // [batch, n_heads, seq_len_q, d_value]
        row_max = new_max;
    }
    out / row_sum.clamp_min(f32::MIN_POSITIVE)
}
