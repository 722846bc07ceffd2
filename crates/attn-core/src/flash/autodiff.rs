//! [`FlashAttentionOps`] on `Autodiff<B>`: one graph node whose backward is `B`'s
//! `flash_attention_backward`, and, where the bias is tracked, `B`'s
//! `flash_attention_bias_backward` for the bias's gradient.

use burn::backend::{
    AutodiffBackend, Backend,
    autodiff::{
        Autodiff, NodeId,
        checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
        grads::Gradients,
        ops::{Backward, Ops, OpsKind},
    },
    tensor::FloatTensor,
};

use super::FlashAttentionOps;
use super::params::{Biasing, FlashParams, Masking};

/// What the backward pass needs: the inner backend's tensors, never the weights.
#[derive(Clone, Debug)]
struct Saved<B: Backend> {
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    mask: Masking<B>,
    bias: Biasing<B>,
    context: FloatTensor<B>,
    lse: FloatTensor<B>,
    params: FlashParams,
}

/// The node of an operation whose bias is a constant: parents `q`, `k`, `v`.
#[derive(Debug)]
struct FlashBackward;

/// The node of an operation whose bias is tracked: parents `q`, `k`, `v` and the bias.
#[derive(Debug)]
struct FlashBiasBackward;

impl<B: FlashAttentionOps> Saved<B> {
    /// Registers the gradients of `q`, `k` and `v` for the parents that are tracked.
    fn register_qkv(
        self,
        d_context: FloatTensor<B>,
        parents: [Option<NodeId>; 3],
        grads: &mut Gradients,
    ) {
        let (dq, dk, dv) = B::flash_attention_backward(
            self.q,
            self.k,
            self.v,
            self.mask,
            self.bias,
            self.context,
            self.lse,
            d_context,
            self.params,
        );
        for (parent, grad) in parents.into_iter().zip([dq, dk, dv]) {
            if let Some(id) = parent {
                grads.register::<B>(id, grad);
            }
        }
    }
}

impl<B: FlashAttentionOps> Backward<B, 3> for FlashBackward {
    type State = Saved<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let d_context = grads.consume::<B>(&ops.node);
        let parents = ops.parents.map(|p| p.map(|node| node.id));
        ops.state.register_qkv(d_context, parents, grads);
    }
}

impl<B: FlashAttentionOps> Backward<B, 4> for FlashBiasBackward {
    type State = Saved<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 4>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let d_context = grads.consume::<B>(&ops.node);
        let [q, k, v, bias] = ops.parents.map(|p| p.map(|node| node.id));
        let s = ops.state;
        if let (Some(id), Biasing::Biased(b)) = (bias, &s.bias) {
            let d_bias = B::flash_attention_bias_backward(
                s.q.clone(),
                s.k.clone(),
                s.v.clone(),
                s.mask.clone(),
                b.clone(),
                s.context.clone(),
                s.lse.clone(),
                d_context.clone(),
                s.params,
            );
            grads.register::<B>(id, d_bias);
        }
        s.register_qkv(d_context, [q, k, v], grads);
    }
}

impl<B: FlashAttentionOps, C: CheckpointStrategy> FlashAttentionOps for Autodiff<B, C> {
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: Masking<Self>,
        bias: Biasing<Self>,
        params: FlashParams,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let nodes = [q.node(), k.node(), v.node()];
        let bias_node = match &bias {
            Biasing::Biased(b) if b.is_tracked() => Some(b.node()),
            _ => None,
        };
        let (q, k, v) = (q.into_primitive(), k.into_primitive(), v.into_primitive());
        let (mask, bias) = (inner_mask(mask), inner_bias(bias));
        let (context, lse) = B::flash_attention(
            q.clone(),
            k.clone(),
            v.clone(),
            mask.clone(),
            bias.clone(),
            params,
        );
        let lse_out = Self::from_inner(lse.clone());
        let saved = Saved {
            q,
            k,
            v,
            mask,
            bias,
            context: context.clone(),
            lse,
            params,
        };
        let context = match bias_node {
            None => match FlashBackward.prepare::<C>(nodes).compute_bound().stateful() {
                OpsKind::Tracked(prep) => prep.finish(saved, context),
                OpsKind::UnTracked(prep) => prep.finish(context),
            },
            Some(bias_node) => {
                let [q, k, v] = nodes;
                let nodes = [q, k, v, bias_node];
                match FlashBiasBackward
                    .prepare::<C>(nodes)
                    .compute_bound()
                    .stateful()
                {
                    OpsKind::Tracked(prep) => prep.finish(saved, context),
                    OpsKind::UnTracked(prep) => prep.finish(context),
                }
            }
        };
        (context, lse_out)
    }

    /// Runs `B`'s backward on the inner tensors; the returned gradients are not themselves
    /// differentiable (no second derivatives through this operation).
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
        let (dq, dk, dv) = B::flash_attention_backward(
            q.into_primitive(),
            k.into_primitive(),
            v.into_primitive(),
            inner_mask(mask),
            inner_bias(bias),
            context.into_primitive(),
            lse.into_primitive(),
            d_context.into_primitive(),
            params,
        );
        (
            Self::from_inner(dq),
            Self::from_inner(dk),
            Self::from_inner(dv),
        )
    }

    /// Runs `B`'s bias backward on the inner tensors (not itself differentiable).
    fn flash_attention_bias_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: Masking<Self>,
        bias: FloatTensor<Self>,
        context: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_context: FloatTensor<Self>,
        params: FlashParams,
    ) -> FloatTensor<Self> {
        Self::from_inner(B::flash_attention_bias_backward(
            q.into_primitive(),
            k.into_primitive(),
            v.into_primitive(),
            inner_mask(mask),
            bias.into_primitive(),
            context.into_primitive(),
            lse.into_primitive(),
            d_context.into_primitive(),
            params,
        ))
    }
}

/// The mask on the inner backend (bool tensors are the same type under autodiff).
fn inner_mask<B: Backend, C: CheckpointStrategy>(mask: Masking<Autodiff<B, C>>) -> Masking<B> {
    match mask {
        Masking::Unmasked => Masking::Unmasked,
        Masking::Masked(mask) => Masking::Masked(mask),
    }
}

/// The bias on the inner backend (its gradient, where it is tracked, is the node's fourth).
fn inner_bias<B: Backend, C: CheckpointStrategy>(bias: Biasing<Autodiff<B, C>>) -> Biasing<B> {
    match bias {
        Biasing::Unbiased => Biasing::Unbiased,
        Biasing::Biased(bias) => Biasing::Biased(bias.into_primitive()),
    }
}
