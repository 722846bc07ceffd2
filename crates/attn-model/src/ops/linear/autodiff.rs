//! [`LinearOps`] under autodiff: one graph node per product, whose backward runs the inner
//! backend's two backward products where their parents are tracked.

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

use super::LinearOps;

/// What the backward pass keeps: `x` when the weight needs a gradient, the weight when `x`
/// does (as burn's own `linear` node keeps them).
#[derive(Clone, Debug)]
struct Saved<B: Backend> {
    x: Option<FloatTensor<B>>,
    weight: Option<FloatTensor<B>>,
}

impl<B: LinearOps> Saved<B> {
    /// `x` when the weight is tracked, the weight when `x` is (burn's own `linear` node keeps
    /// the same).
    fn of<C: CheckpointStrategy>(
        x: &FloatTensor<Autodiff<B, C>>,
        weight: &FloatTensor<Autodiff<B, C>>,
    ) -> Self {
        Self {
            x: weight.is_tracked().then(|| x.clone().into_primitive()),
            weight: x.is_tracked().then(|| weight.clone().into_primitive()),
        }
    }

    /// The gradients of `x` and of the weight, each where its parent is tracked.
    fn register(
        self,
        [node_x, node_weight]: [Option<NodeId>; 2],
        dy: &FloatTensor<B>,
        grads: &mut Gradients,
    ) {
        if let (Some(id), Some(weight)) = (node_x, self.weight) {
            grads.register::<B>(id, B::fused_linear_x_backward(weight, dy.clone()));
        }
        if let (Some(id), Some(x)) = (node_weight, self.x) {
            grads.register::<B>(id, B::fused_linear_weight_backward(x, dy.clone()));
        }
    }
}

#[derive(Debug)]
struct LinearWithBias;

impl<B: LinearOps> Backward<B, 3> for LinearWithBias {
    type State = Saved<B>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        let [node_x, node_weight, node_bias] = ops.parents;
        let ids = [node_x, node_weight].map(|n| n.map(|n| n.id));
        ops.state.register(ids, &dy, grads);
        if let Some(node) = node_bias {
            let db = <B as burn::backend::ops::ModuleOps<B>>::linear_bias_backward(dy);
            grads.register::<B>(node.id, db);
        }
    }
}

#[derive(Debug)]
struct LinearNoBias;

impl<B: LinearOps> Backward<B, 2> for LinearNoBias {
    type State = Saved<B>;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<B>(&ops.node);
        let ids = ops.parents.map(|n| n.map(|n| n.id));
        ops.state.register(ids, &dy, grads);
    }
}

impl<B: LinearOps, C: CheckpointStrategy> LinearOps for Autodiff<B, C> {
    fn fused_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let state = Saved::of::<C>(&x, &weight);
        let nodes = [x.node(), weight.node(), bias.node()];
        let (x, weight, bias) = (
            x.into_primitive(),
            weight.into_primitive(),
            bias.into_primitive(),
        );
        match LinearWithBias
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(state, B::fused_linear(x, weight, bias)),
            OpsKind::UnTracked(prep) => prep.finish(B::fused_linear(x, weight, bias)),
        }
    }

    fn fused_linear_unbiased(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        let state = Saved::of::<C>(&x, &weight);
        let nodes = [x.node(), weight.node()];
        let (x, weight) = (x.into_primitive(), weight.into_primitive());
        match LinearNoBias.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(state, B::fused_linear_unbiased(x, weight)),
            OpsKind::UnTracked(prep) => prep.finish(B::fused_linear_unbiased(x, weight)),
        }
    }

    /// Runs `B`'s product on the inner tensors; the gradient it returns is not itself
    /// differentiable.
    fn fused_linear_x_backward(
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        Self::from_inner(B::fused_linear_x_backward(
            weight.into_primitive(),
            dy.into_primitive(),
        ))
    }

    /// As [`fused_linear_x_backward`](Self::fused_linear_x_backward).
    fn fused_linear_weight_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        Self::from_inner(B::fused_linear_weight_backward(
            x.into_primitive(),
            dy.into_primitive(),
        ))
    }
}
