//! [`FlashAttentionOps`] on the CubeCL backends: the block-by-block tensor operations of
//! `chunked.rs`, forward and backward, run as the backend's own kernels.

use burn::backend::{Cube, tensor::FloatTensor};
use burn::tensor::{Bool, Tensor};

use super::{Biasing, FlashAttentionOps, FlashParams, Masking};
use crate::{PreparedAttention, chunked};

impl FlashAttentionOps for Cube {
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: Masking<Self>,
        bias: Biasing<Self>,
        params: FlashParams,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (q, k, v) = (float(q), float(k), float(v));
        let plan = plan(&q, &k, mask, bias, params);
        let (context, lse) = chunked::forward(q, k, v, &plan, params.block);
        (primitive(context), primitive(lse))
    }

    fn flash_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: Masking<Self>,
        bias: Biasing<Self>,
        context: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_context: FloatTensor<Self>,
        params: FlashParams,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let (q, k, v) = (float(q), float(k), float(v));
        let plan = plan(&q, &k, mask, bias, params);
        let [dq, dk, dv] = chunked::backward(
            q,
            k,
            v,
            &plan,
            params.block,
            float(context),
            Tensor::<3>::from_primitive::<Cube>(lse),
            float(d_context),
        );
        (primitive(dq), primitive(dk), primitive(dv))
    }
}

fn float(t: FloatTensor<Cube>) -> Tensor<4> {
    Tensor::from_primitive::<Cube>(t)
}

fn primitive<const D: usize>(t: Tensor<D>) -> FloatTensor<Cube> {
    t.try_into_primitive::<Cube>()
        .expect("the tensor was made on this backend")
}

/// The plan the tensor-operation code reads, from the operation's arguments (already checked
/// when the caller prepared its own plan).
fn plan(
    q: &Tensor<4>,
    k: &Tensor<4>,
    mask: Masking<Cube>,
    bias: Biasing<Cube>,
    params: FlashParams,
) -> PreparedAttention {
    let [batch, n_heads, seq_len_q, _] = q.dims();
    let [_, n_kv_heads, seq_len_kv, _] = k.dims();
    PreparedAttention {
        scores_shape: [batch, n_heads, seq_len_q, seq_len_kv],
        n_kv_heads,
        scale: params.scale,
        dropout: 0.0,
        mask: mask
            .into_option()
            .map(Tensor::<4, Bool>::from_primitive::<Cube>),
        bias: bias.into_option().map(float),
        causal_offset: params.causal_offset,
    }
}
