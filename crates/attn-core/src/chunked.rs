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

/// The context `[batch, n_heads, seq_len_q, d_value]`.
pub(crate) fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
    block: usize,
) -> Tensor<4> {
    forward(q, k, v, plan, block).0
}

/// The context and each row's log-sum-exp `ln l + m` `[batch, n_heads, seq_len_q]` (`−∞` for
/// a fully masked row), which is what [`backward`] needs besides the inputs.
pub(crate) fn forward(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
    block: usize,
) -> (Tensor<4>, Tensor<3>) {
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
    let lse = (row_sum.clone().log() + row_max).reshape([batch, n_heads, seq_len_q]);
    (out / row_sum.clamp_min(f32::MIN_POSITIVE), lse)
}

/// FlashAttention-2's backward over the same blocks of keys: with `p = exp(s − lse)`
/// recomputed for each block and `D = rowsum(d_context ∘ context)`,
///
/// ```text
/// dv_block = pᵀ · d_context         dp = d_context · v_blockᵀ
/// ds = p ∘ (dp − D)                 dq += ds · k_block · scale,   dk_block = dsᵀ · q · scale
/// ```
///
/// Returns `[dq, dk, dv]` shaped like `q`, `k` and `v` (grouped key/value heads get the sum
/// over the query heads that share them).
#[allow(clippy::too_many_arguments)]
pub(crate) fn backward(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
    block: usize,
    context: Tensor<4>,
    lse: Tensor<3>,
    d_context: Tensor<4>,
) -> [Tensor<4>; 3] {
    let [batch, n_heads, _, seq_len_kv] = plan.scores_shape;
    let [_, n_kv_heads, _, d_head] = k.dims();
    let d_value = v.dims()[3];
    let rows = Rows::new([q, k, v], plan, lse, context, d_context);

    let mut dq = Tensor::<4>::zeros(rows.q_scaled.dims(), &rows.q_scaled.device());
    let mut dk_blocks = Vec::new();
    let mut dv_blocks = Vec::new();
    for kv_start in (0..seq_len_kv).step_by(block) {
        let (k_block, p, ds) = rows.block(plan, kv_start, block);
        dv_blocks.push(p.swap_dims(2, 3).matmul(rows.d_context.clone())); // [batch, n_heads, len, d_value]
        dq = dq + ds.clone().matmul(k_block); // [batch, n_heads, seq_len_q, d_head]
        dk_blocks.push(ds.swap_dims(2, 3).matmul(rows.q_scaled.clone())); // [batch, n_heads, len, d_head]
    }
    let per_kv_head = |blocks: Vec<Tensor<4>>, d: usize| {
        Tensor::cat(blocks, 2) // [batch, n_heads, seq_len_kv, d]
            .reshape([batch, n_kv_heads, n_heads / n_kv_heads, seq_len_kv, d])
            .sum_dim(2) // [batch, n_kv_heads, 1, seq_len_kv, d]
            .reshape([batch, n_kv_heads, seq_len_kv, d])
    };
    [
        dq.mul_scalar(plan.scale),
        per_kv_head(dk_blocks, d_head),
        per_kv_head(dv_blocks, d_value),
    ]
}

/// What every block of the backward reads: the inputs with key/value heads repeated for the
/// query heads, and per query row the log-sum-exp, floored, and `D = rowsum(d_context ∘
/// context)`.
struct Rows {
    /// `q · scale`.
    q_scaled: Tensor<4>,
    /// `[batch, n_heads, seq_len_kv, d_head]`.
    k: Tensor<4>,
    /// `[batch, n_heads, seq_len_kv, d_value]`.
    v: Tensor<4>,
    /// `[batch, n_heads, seq_len_q, d_value]`.
    d_context: Tensor<4>,
    /// `[batch, n_heads, seq_len_q, 1]`. A fully masked row has lse = −∞ and scores −∞; a finite
    /// floor keeps its `p` at exp(−∞) = 0.
    lse: Tensor<4>,
    /// `D`, `[batch, n_heads, seq_len_q, 1]`.
    d_sum: Tensor<4>,
}

impl Rows {
    fn new(
        [q, k, v]: [Tensor<4>; 3],
        plan: &PreparedAttention,
        lse: Tensor<3>,
        context: Tensor<4>,
        d_context: Tensor<4>,
    ) -> Self {
        let [batch, n_heads, seq_len_q, _] = plan.scores_shape;
        Self {
            q_scaled: q.mul_scalar(plan.scale),
            k: repeat_kv_heads(k, n_heads),
            v: repeat_kv_heads(v, n_heads),
            lse: lse
                .reshape([batch, n_heads, seq_len_q, 1])
                .clamp_min(f32::MIN),
            d_sum: (d_context.clone() * context).sum_dim(3),
            d_context,
        }
    }

    /// For the block of up to `block` keys from `kv_start`: its keys, their weights `p =
    /// exp(s − lse)`, and the gradient of the loss with respect to their scores, `ds = p ∘
    /// (d_context · vᵀ − D)` (both `[batch, n_heads, seq_len_q, len]`).
    fn block(
        &self,
        plan: &PreparedAttention,
        kv_start: usize,
        block: usize,
    ) -> (Tensor<4>, Tensor<4>, Tensor<4>) {
        let len = block.min(self.k.dims()[2] - kv_start);
        let k_block = self.k.clone().narrow(2, kv_start, len); // [batch, n_heads, len, d_head]
        let v_block = self.v.clone().narrow(2, kv_start, len); // [batch, n_heads, len, d_value]
        let scores = self
            .q_scaled
            .clone()
            .matmul(k_block.clone().swap_dims(2, 3));
        let p = (plan.mask_and_bias(scores, kv_start) - self.lse.clone()).exp();
        let dp = self.d_context.clone().matmul(v_block.swap_dims(2, 3));
        let ds = p.clone() * (dp - self.d_sum.clone());
        (k_block, p, ds)
    }
}

/// The gradient of the loss with respect to the bias, shaped like `plan.bias`: the bias is
/// added to the scores, so it is `ds` itself, summed over the dimensions the bias broadcasts
/// along. Computed block by block of keys, as [`backward`] is, so that beside the gradient
/// (the bias's own size) nothing larger than `[batch, n_heads, seq_len_q, block]` is held.
///
/// # Panics
///
/// When the plan has no bias (the caller asks only for one it has).
#[allow(clippy::too_many_arguments)]
pub(crate) fn bias_backward(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
    block: usize,
    context: Tensor<4>,
    lse: Tensor<3>,
    d_context: Tensor<4>,
) -> Tensor<4> {
    let seq_len_kv = plan.scores_shape[3];
    let bias_dims = plan.bias.as_ref().expect("a plan with a bias").dims();
    let rows = Rows::new([q, k, v], plan, lse, context, d_context);
    // ds summed over every dimension along which the bias broadcasts.
    let fold = |mut ds: Tensor<4>| {
        for (dim, &size) in bias_dims.iter().enumerate() {
            if size == 1 && ds.dims()[dim] != 1 {
                ds = ds.sum_dim(dim);
            }
        }
        ds
    };
    let mut blocks = Vec::new();
    for kv_start in (0..seq_len_kv).step_by(block) {
        let (_, _, ds) = rows.block(plan, kv_start, block);
        blocks.push(fold(ds));
    }
    if bias_dims[3] == 1 {
        // One bias for every key: the blocks' sums add up.
        blocks
            .into_iter()
            .reduce(|a, b| a + b)
            .expect("at least one key")
    } else {
        Tensor::cat(blocks, 3)
    }
}
