//! Native CPU attention: a blocked online-softmax kernel on tuned micro-kernels and rayon,
//! behind [`Strategy::Native`](crate::Strategy::Native) and [`native_attention`].
//!
//! # How it reaches the backends
//!
//! On flex and ndarray the kernel and its backward run as [`FlashAttentionOps`]
//! (crate::FlashAttentionOps), burn's backend-extension mechanism: one backend operation, and
//! one autodiff node whose backward is the backward pass. flex lends the storage of contiguous
//! `f32` tensors, so the kernel reads `q`, `k` and `v` in place; ndarray's tensors are read with
//! `into_data` (an `O(seq_len · d_head)` copy against `O(seq_len² · d_head)` work).
//!
//! The public [`native_attention`] and [`native_attention_backward`] take the same kernels
//! through host copies (`into_data`, `from_data`), so they work on any device (a GPU tensor
//! takes a round trip through host memory); the automatic strategy takes the kernel only where
//! the data already lives in host memory: [`native_serves`].
//!
//! # Layout
//!
//! The kernels themselves live in the `attn-kernels` crate, on plain slices, with no burn in
//! sight; this module is the burn side:
//!
//! ```text
//! mod.rs     the public API (native_attention, native_attention_backward, native_serves)
//! host.rs    burn tensors ⇄ host buffers (HostInputs), and the calls into attn-kernels
//! ```

pub(crate) mod host;

pub use attn_kernels::CpuCaches;

use burn::tensor::{Device, Tensor};

use crate::backend::BackendKind;
use crate::{AttentionError, AttentionOptions, PreparedAttention, Strategy};

/// What [`native_attention`] returns.
#[derive(Clone, Debug)]
pub struct NativeOutput {
    /// The weighted sum of values, `[batch, n_heads, seq_len_q, d_value]`.
    pub context: Tensor<4>,
    /// `ln Σ_j exp(scores[.., i, j])` of each query's scaled, biased, masked scores,
    /// `[batch, n_heads, seq_len_q]`; `−∞` where every key is masked. A FlashAttention-2
    /// backward recomputes the weights of a block as `exp(scores − lse)` from it.
    pub lse: Tensor<3>,
}

/// Whether `device` keeps its tensors in host memory, where the native kernel runs without
/// moving data between devices: flex and ndarray (with or without autodiff).
///
/// [`Strategy::Auto`] picks [`Strategy::Native`] for inference on these devices.
///
/// ```
/// assert!(attn_core::native_serves(&burn::tensor::Device::flex()));
/// ```
pub fn native_serves(device: &Device) -> bool {
    BackendKind::of(device).is_host()
}

/// Attention on the native CPU kernel, returning the context and each row's log-sum-exp.
///
/// Same semantics as [`scaled_dot_product_attention`](crate::scaled_dot_product_attention)
/// (mask, both causal alignments, bias, scale, grouped-query heads); fully masked rows return
/// zeros. Runs on any device (see [`native_serves`] for where it is fast).
///
/// # Shapes
/// - `q`: `[batch, n_heads, seq_len_q, d_head]`
/// - `k`: `[batch, n_kv_heads, seq_len_kv, d_head]`, `n_kv_heads` dividing `n_heads`
/// - `v`: `[batch, n_kv_heads, seq_len_kv, d_value]`
/// - `options.mask`, `options.bias`: broadcast to `[batch, n_heads, seq_len_q, seq_len_kv]`
/// - returns: context `[batch, n_heads, seq_len_q, d_value]`, lse `[batch, n_heads, seq_len_q]`
///
/// # Errors
/// An [`AttentionError`] naming the dimensions when the shapes cannot work, and
/// [`AttentionError::StrategyCannot`] when the options ask for weights or dropout, or when
/// gradients would have to flow through it: burn's autodiff does not record it
/// ([`native_attention_backward`] computes its gradients).
pub fn native_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    options: &AttentionOptions,
) -> Result<NativeOutput, AttentionError> {
    let plan = PreparedAttention::new(&q, &k, &v, options)?;
    check_can_run(&q, &k, &v, options, &plan, false)?;
    let (context, lse) = host::forward_tensors(q, k, v, &plan, true);
    Ok(NativeOutput {
        context,
        lse: lse.expect("the log-sum-exp was asked for"),
    })
}

/// The gradients [`native_attention_backward`] returns.
#[derive(Clone, Debug)]
pub struct NativeGradients {
    /// `∂L/∂q`, `[batch, n_heads, seq_len_q, d_head]`.
    pub dq: Tensor<4>,
    /// `∂L/∂k`, `[batch, n_kv_heads, seq_len_kv, d_head]`.
    pub dk: Tensor<4>,
    /// `∂L/∂v`, `[batch, n_kv_heads, seq_len_kv, d_value]`.
    pub dv: Tensor<4>,
}

/// The backward pass of [`native_attention`]: given the forward's context and log-sum-exp
/// and the gradient of a loss `L` with respect to the context, the gradients of `L` with
/// respect to `q`, `k` and `v`.
///
/// FlashAttention-2's backward: each weight is recomputed from `q`, `k` and the log-sum-exp
/// when it is needed and never stored, so the memory beyond the inputs and gradients does not
/// grow with `seq_len_q · seq_len_kv`. Masks, both causal alignments, bias, scale and
/// grouped-query heads act as in the forward; fully masked rows get zero gradients. (The bias
/// is treated as a constant: no gradient is returned for it.)
///
/// # Shapes
/// - `q`, `k`, `v`, `options`: as given to [`native_attention`]
/// - `forward`: what [`native_attention`] returned for them
/// - `d_context`: `[batch, n_heads, seq_len_q, d_value]`
/// - returns: gradients shaped like `q`, `k` and `v`
///
/// # Errors
/// As [`native_attention`], plus [`AttentionError::GradientShape`] when `forward` or
/// `d_context` does not have the forward's shapes.
pub fn native_attention_backward(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    forward: &NativeOutput,
    d_context: Tensor<4>,
    options: &AttentionOptions,
) -> Result<NativeGradients, AttentionError> {
    let plan = PreparedAttention::new(&q, &k, &v, options)?;
    if plan.dropout > 0.0 {
        return Err(AttentionError::StrategyCannot {
            strategy: Strategy::Native.name(),
            what: "apply dropout to the weights",
        });
    }
    let [batch, n_heads, seq_len_q, _] = plan.scores_shape;
    let d_value = v.dims()[3];
    let context_shape = vec![batch, n_heads, seq_len_q, d_value];
    for (what, got, expected) in [
        (
            "the forward's context",
            forward.context.dims().to_vec(),
            &context_shape,
        ),
        ("d_context", d_context.dims().to_vec(), &context_shape),
        (
            "the forward's lse",
            forward.lse.dims().to_vec(),
            &vec![batch, n_heads, seq_len_q],
        ),
    ] {
        if &got != expected {
            return Err(AttentionError::GradientShape {
                what,
                got,
                expected: expected.clone(),
            });
        }
    }
    let [dq, dk, dv] = host::backward_tensors(
        [q, k, v],
        &plan,
        forward.context.clone(),
        forward.lse.clone(),
        d_context,
    );
    Ok(NativeGradients { dq, dk, dv })
}

/// Refuses what the native kernel cannot do: return or drop weights, or be differentiated
/// where it does not run as a backend operation with its own backward (`differentiable`).
pub(crate) fn check_can_run(
    q: &Tensor<4>,
    k: &Tensor<4>,
    v: &Tensor<4>,
    options: &AttentionOptions,
    plan: &PreparedAttention,
    differentiable: bool,
) -> Result<(), AttentionError> {
    let bias = plan.bias.as_ref().is_some_and(Tensor::is_tracked);
    let what = if options.need_weights {
        "return the attention weights"
    } else if plan.dropout > 0.0 {
        "apply dropout to the weights"
    } else if !differentiable && (q.is_tracked() || k.is_tracked() || v.is_tracked() || bias) {
        "be recorded by autodiff (native_attention_backward computes its gradients)"
    } else {
        return Ok(());
    };
    Err(AttentionError::StrategyCannot {
        strategy: Strategy::Native.name(),
        what,
    })
}

/// The context, for [`Strategy::Native`] inside `try_scaled_dot_product_attention`.
pub(crate) fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
) -> Tensor<4> {
    host::forward_tensors(q, k, v, plan, false).0
}

/// The context from the decode pass (a few queries against many keys, split along the keys),
/// for [`Route::NativeDecode`](crate::Route::NativeDecode). Inference only: the caller checks
/// that nothing is recorded.
pub(crate) fn decode_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
) -> Tensor<4> {
    host::decode_tensors(q, k, v, plan)
}
