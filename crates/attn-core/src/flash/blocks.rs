//! [`FlashKernel::Blocks`](super::FlashKernel::Blocks) on every backend that implements
//! [`FlashAttentionOps`](super::FlashAttentionOps): the block-by-block tensor operations of
//! `chunked.rs`, forward and backward, run on the backend's own tensor kernels.
//!
//! The operation's arguments are the backend's primitives; [`Primitives`] turns them into this
//! crate's `Tensor`s (on the same backend, outside any autodiff graph) and back, so that
//! `chunked::forward` and `chunked::backward` are the one implementation everywhere.

use burn::backend::{
    Backend,
    tensor::{BoolTensor, FloatTensor},
};
use burn::tensor::{Bool, Tensor};

use super::params::{Biasing, FlashKernel, FlashParams, Masking};
use crate::{PreparedAttention, chunked};

/// A backend whose primitives convert to and from [`Tensor`]s.
pub(super) trait Primitives: Backend {
    /// A float primitive as a tensor.
    fn float<const D: usize>(t: FloatTensor<Self>) -> Tensor<D>;
    /// A bool primitive as a tensor.
    fn boolean(t: BoolTensor<Self>) -> Tensor<4, Bool>;
    /// A tensor made on this backend as its primitive.
    fn primitive<const D: usize>(t: Tensor<D>) -> FloatTensor<Self>;
}

/// Implements [`Primitives`] for one concrete backend.
macro_rules! primitives {
    ($backend:ty) => {
        impl Primitives for $backend {
            fn float<const D: usize>(t: FloatTensor<Self>) -> Tensor<D> {
                Tensor::from_primitive::<$backend>(t)
            }

            fn boolean(t: BoolTensor<Self>) -> Tensor<4, Bool> {
                Tensor::from_primitive::<$backend>(t)
            }

            fn primitive<const D: usize>(t: Tensor<D>) -> FloatTensor<Self> {
                t.try_into_primitive::<$backend>()
                    .expect("the tensor was made on this backend")
            }
        }
    };
}

#[cfg(feature = "flex")]
primitives!(burn::backend::Flex);
#[cfg(feature = "ndarray")]
primitives!(burn::backend::NdArray);
#[cfg(feature = "cube")]
primitives!(burn::backend::Cube);

/// `chunked::forward` on `B`: the context and the log-sum-exp.
pub(super) fn forward<B: Primitives>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    mask: Masking<B>,
    bias: Biasing<B>,
    params: FlashParams,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let (q, k, v) = (B::float(q), B::float(k), B::float(v));
    let plan = plan::<B>(&q, &k, mask, bias, params);
    let (context, lse) = chunked::forward(q, k, v, &plan, params.block);
    (B::primitive(context), B::primitive(lse))
}

/// `chunked::backward` on `B`: `(dq, dk, dv)` from the forward's context and log-sum-exp and
/// the gradient of the context.
pub(super) fn backward<B: Primitives>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    mask: Masking<B>,
    bias: Biasing<B>,
    [context, lse, d_context]: [FloatTensor<B>; 3],
    params: FlashParams,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let (q, k, v) = (B::float(q), B::float(k), B::float(v));
    let plan = plan::<B>(&q, &k, mask, bias, params);
    let [dq, dk, dv] = chunked::backward(
        q,
        k,
        v,
        &plan,
        params.block,
        B::float(context),
        B::float::<3>(lse),
        B::float(d_context),
    );
    (B::primitive(dq), B::primitive(dk), B::primitive(dv))
}

/// `chunked::bias_backward` on `B`: the gradient of the bias, shaped like the bias, block by
/// block of keys in tensor operations, whichever kernel computed the rest.
pub(super) fn bias_backward<B: Primitives>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    mask: Masking<B>,
    bias: FloatTensor<B>,
    [context, lse, d_context]: [FloatTensor<B>; 3],
    params: FlashParams,
) -> FloatTensor<B> {
    let (q, k, v) = (B::float(q), B::float(k), B::float(v));
    let plan = plan::<B>(&q, &k, mask, Biasing::Biased(bias), params);
    // The tensor operations' own block, whichever kernel the parameters name.
    let block = if params.kernel == FlashKernel::Blocks {
        params.block
    } else {
        crate::chunked::DEFAULT_BLOCK
    };
    B::primitive(chunked::bias_backward(
        q,
        k,
        v,
        &plan,
        block,
        B::float(context),
        B::float::<3>(lse),
        B::float(d_context),
    ))
}

/// The plan the tensor-operation code reads, from the operation's arguments (already checked
/// when the caller prepared its own plan).
fn plan<B: Primitives>(
    q: &Tensor<4>,
    k: &Tensor<4>,
    mask: Masking<B>,
    bias: Biasing<B>,
    params: FlashParams,
) -> PreparedAttention {
    let [batch, n_heads, seq_len_q, _] = q.dims();
    let [_, n_kv_heads, seq_len_kv, _] = k.dims();
    PreparedAttention {
        scores_shape: [batch, n_heads, seq_len_q, seq_len_kv],
        n_kv_heads,
        scale: params.scale,
        dropout: 0.0,
        mask: mask.into_option().map(B::boolean),
        bias: bias.into_option().map(B::float),
        causal_offset: params.causal_offset,
    }
}
