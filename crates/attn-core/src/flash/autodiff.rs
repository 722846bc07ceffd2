//! [`FlashAttentionOps`] on `Autodiff<B>`: one graph node whose backward is `B`'s
//! `flash_attention_backward`.

use burn::backend::{
    AutodiffBackend, Backend,
    autodiff::{
        Autodiff,
        checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
        grads::Gradients,
        ops::{Backward, Ops, OpsKind},
    },
    tensor::FloatTensor,
};

use super::{Biasing, FlashAttentionOps, FlashParams, Masking};

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

#[derive(Debug)]
struct FlashBackward;

impl<B: FlashAttentionOps> Backward<B, 3> for FlashBackward {
    type State = Saved<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let d_context = grads.consume::<B>(&ops.node);
        let s = ops.state;
        let (dq, dk, dv) = B::flash_attention_backward(
            s.q, s.k, s.v, s.mask, s.bias, s.context, s.lse, d_context, s.params,
        );
        for (parent, grad) in ops.parents.into_iter().zip([dq, dk, dv]) {
            if let Some(node) = parent {
                grads.register::<B>(node.id, grad);
            }
        }
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
        let (q, k, v) = (q.into_primitive(), k.into_primitive(), v.into_primitive());
        // The bias enters as a constant (the caller routes a bias that needs gradients to
        // the tensor-operation path).
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
        let context = match FlashBackward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
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
                prep.finish(saved, context)
            }
            OpsKind::UnTracked(prep) => prep.finish(context),
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
}

/// The mask on the inner backend (bool tensors are the same type under autodiff).
fn inner_mask<B: Backend, C: CheckpointStrategy>(mask: Masking<Autodiff<B, C>>) -> Masking<B> {
    match mask {
        Masking::Unmasked => Masking::Unmasked,
        Masking::Masked(mask) => Masking::Masked(mask),
    }
}

/// The bias on the inner backend, detached from the graph.
fn inner_bias<B: Backend, C: CheckpointStrategy>(bias: Biasing<Autodiff<B, C>>) -> Biasing<B> {
    match bias {
        Biasing::Unbiased => Biasing::Unbiased,
        Biasing::Biased(bias) => Biasing::Biased(bias.into_primitive()),
    }
}
