//! Gradient clipping by global norm: when the L2 norm of all gradients taken together exceeds
//! `max_norm`, every gradient is scaled by the same factor so that the norm becomes `max_norm`:
//!
//! ```text
//! n = sqrt(sum_p ||g_p||^2)        g_p <- g_p * min(1, max_norm / (n + 1e-6))
//! ```
//!
//! This is PyTorch's `clip_grad_norm_`. burn's `GradientClippingConfig::Norm` clips each
//! parameter's gradient on its own instead, which changes the direction of the update; the
//! global form keeps it. The factor stays a tensor, so clipping never waits on the device.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;

/// Scales `grads` so their global L2 norm is at most `max_norm`, and returns the norm they had
/// before clipping, as a one-element tensor (read it only when needed: reading waits on the
/// device).
pub fn clip_global_norm<M: Module>(
    module: &M,
    mut grads: GradientsParams,
    max_norm: f32,
) -> (GradientsParams, Option<Tensor<1>>) {
    let mut sum = SquaredNorm {
        grads: &grads,
        total: None,
    };
    module.visit(&mut sum);
    let Some(norm) = sum.total.map(Tensor::sqrt) else {
        return (grads, None);
    };
    let factor = (norm.clone().add_scalar(1e-6).recip() * max_norm).clamp_max(1.0);
    module.visit(&mut Scale {
        grads: &mut grads,
        factor,
    });
    (grads, Some(norm))
}

/// Accumulates `sum_p ||g_p||^2` over the module's float parameters.
struct SquaredNorm<'a> {
    grads: &'a GradientsParams,
    total: Option<Tensor<1>>,
}

impl ModuleVisitor for SquaredNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.get::<D>(param.id) {
            let squares = grad.square().sum(); // [1]
            self.total = Some(match self.total.take() {
                Some(total) => total + squares,
                None => squares,
            });
        }
    }
}

/// Multiplies every gradient by the clipping factor.
struct Scale<'a> {
    grads: &'a mut GradientsParams,
    factor: Tensor<1>,
}

impl ModuleVisitor for Scale<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.grads.remove::<D>(param.id) {
            let factor = self.factor.clone().unsqueeze::<D>(); // [1, ..., 1]
            self.grads.register(param.id, grad * factor);
        }
    }
}

#[cfg(test)]
mod tests {
    use attn_testing::for_each_device;
    use burn::module::Param;
    use burn::tensor::{Device, Tensor};

    use super::*;

    #[derive(burn::module::Module, Debug)]
    struct TwoParams {
        a: Param<Tensor<1>>,
        b: Param<Tensor<2>>,
    }

    /// Gradients of `sum(a * ca) + sum(b * cb)`, i.e. `ca` and `cb` themselves.
    fn grads_of(ca: [f32; 2], cb: [[f32; 1]; 2], device: &Device) -> (TwoParams, GradientsParams) {
        let device = device.clone().autodiff();
        let m = TwoParams {
            a: Param::from_tensor(Tensor::<1>::zeros([2], &device).require_grad()),
            b: Param::from_tensor(Tensor::<2>::zeros([2, 1], &device).require_grad()),
        };
        let loss = (m.a.val() * Tensor::<1>::from_floats(ca, &device)).sum()
            + (m.b.val() * Tensor::<2>::from_floats(cb, &device)).sum();
        let grads = GradientsParams::from_grads(loss.backward(), &m);
        (m, grads)
    }

    fn values<const D: usize>(grads: &GradientsParams, id: burn::module::ParamId) -> Vec<f32> {
        attn_testing::to_vec(grads.get::<D>(id).expect("gradient present"))
    }

    #[test]
    fn large_gradients_are_scaled_to_max_norm_together() {
        for_each_device(|d| {
            // Global norm of (3, 0, 0, 4) is 5: clipping to 1 divides everything by 5.
            let (m, grads) = grads_of([3.0, 0.0], [[0.0], [4.0]], &d.device);
            let (grads, norm) = clip_global_norm(&m, grads, 1.0);
            let norm = norm.expect("two gradients").into_scalar::<f32>();
            assert!((norm - 5.0).abs() < 1e-5, "norm {norm}");
            attn_testing::assert_close_slices(
                &values::<1>(&grads, m.a.id),
                &[0.6, 0.0],
                1e-5,
                1e-5,
                "a",
            );
            attn_testing::assert_close_slices(
                &values::<2>(&grads, m.b.id),
                &[0.0, 0.8],
                1e-5,
                1e-5,
                "b",
            );
        });
    }

    #[test]
    fn small_gradients_are_left_alone() {
        for_each_device(|d| {
            let (m, grads) = grads_of([0.3, 0.0], [[0.0], [0.4]], &d.device);
            let (grads, _) = clip_global_norm(&m, grads, 1.0);
            attn_testing::assert_close_slices(
                &values::<1>(&grads, m.a.id),
                &[0.3, 0.0],
                1e-6,
                1e-5,
                "a",
            );
            attn_testing::assert_close_slices(
                &values::<2>(&grads, m.b.id),
                &[0.0, 0.4],
                1e-6,
                1e-5,
                "b",
            );
        });
    }
}
