//! SwiGLU's hidden values, `silu(gate) ∘ up` with `silu(x) = x / (1 + e^(−x))`, as one pass
//! where it can be.
//!
//! As burn operations this is five passes over a `[tokens, d_ff]` tensor (burn's `silu` is
//! `x · sigmoid(x)`, then the product), each on one thread on flex, with the C library's `expf`
//! one value at a time; [`silu_gate`] runs it there as one pass of the native kernels' vector
//! code on every core, and as burn operations everywhere else (autodiff included).

use burn::tensor::Tensor;
use burn::tensor::activation::silu;

/// `silu(gate) ∘ up`, element by element.
///
/// On flex, for inference, in `f32`, one threaded pass of vector code (within `2e-6` relative of
/// the definition); elsewhere burn's `silu` and a product.
///
/// # Panics
/// When the shapes differ.
pub fn silu_gate<const D: usize>(gate: Tensor<D>, up: Tensor<D>) -> Tensor<D> {
    assert_eq!(
        gate.dims(),
        up.dims(),
        "the gate and the expansion have one shape"
    );
    #[cfg(feature = "flex")]
    if let Some(y) = flex::silu_gate(&gate, &up) {
        return y;
    }
    silu(gate) * up
}

#[cfg(feature = "flex")]
mod flex {
    use burn::backend::Flex;
    use burn::tensor::{DType, Tensor, TensorData};

    use attn_core::backend::flex_floats;

    use super::super::is_flex_inference;

    /// Whether [`silu_gate`](super::silu_gate) runs the native pass on these operands.
    pub(super) fn serves<const D: usize>(gate: &Tensor<D>, up: &Tensor<D>) -> bool {
        gate.dtype() == DType::F32
            && up.dtype() == DType::F32
            && is_flex_inference(gate)
            && is_flex_inference(up)
    }

    /// The native pass over both operands' values (read in place when contiguous), or `None`
    /// when [`serves`] says no.
    pub(super) fn silu_gate<const D: usize>(gate: &Tensor<D>, up: &Tensor<D>) -> Option<Tensor<D>> {
        if !serves(gate, up) {
            return None;
        }
        let device = gate.device();
        let dims = gate.dims();
        let g = gate.clone().try_into_primitive::<Flex>().ok()?;
        let u = up.clone().try_into_primitive::<Flex>().ok()?;
        let (g, u) = (flex_floats(&g), flex_floats(&u));
        let mut out = vec![0.0; g.len()];
        attn_kernels::silu_mul(&g, &u, &mut out);
        Some(Tensor::from_data(TensorData::new(out, dims), &device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_kernels::oracle::silu as definition;
    use attn_testing::{SeededRng, assert_close_slices, for_each_device, to_vec};

    #[test]
    fn is_the_definition_everywhere_with_gradients_under_autodiff() {
        let xs: Vec<f32> = (-100..=100)
            .map(|i| i as f32 / 8.0)
            .chain([-1e4, -90.0, 90.0, 1e4])
            .collect();
        let ups: Vec<f32> = (0..xs.len()).map(|i| (i % 5) as f32 - 2.0).collect();
        let expected: Vec<f32> = xs
            .iter()
            .zip(&ups)
            .map(|(&x, &u)| (definition(f64::from(x)) * f64::from(u)) as f32)
            .collect();
        for_each_device(|d| {
            for device in [d.device.clone(), d.device.clone().autodiff()] {
                let gate = Tensor::<1>::from_floats(xs.as_slice(), &device);
                let up = Tensor::<1>::from_floats(ups.as_slice(), &device);
                let y = to_vec(silu_gate(gate, up));
                assert_close_slices(&y, &expected, 1e-6, 1e-5, d.name);
            }
            // d/dgate by central differences of the f64 definition, times up = 1.5.
            let device = d.device.clone().autodiff();
            let points = [-3.0, -0.5, 0.0, 0.5, 3.0];
            let gate = Tensor::<1>::from_floats(points, &device).require_grad();
            let up = Tensor::<1>::from_floats([1.5; 5], &device);
            let grads = silu_gate(gate.clone(), up).sum().backward();
            let g = to_vec(gate.grad(&grads).expect("the gate has a gradient"));
            let h = 1e-5;
            let want: Vec<f32> = points
                .iter()
                .map(|&x: &f64| (1.5 * (definition(x + h) - definition(x - h)) / (2.0 * h)) as f32)
                .collect();
            assert_close_slices(&g, &want, 1e-5, 1e-4, d.name);
        });
    }

    #[test]
    fn both_paths_agree_on_strided_views() {
        let mut rng = SeededRng::new(11);
        for_each_device(|d| {
            let gate = (rng.tensor([30, 50], &d.device) * 8.0).transpose(); // [50, 30], strided
            let up = rng.tensor([50, 30], &d.device);
            let want = to_vec(silu(gate.clone()) * up.clone());
            let got = silu_gate(gate, up);
            assert_eq!(got.dims(), [50, 30], "{}", d.name);
            assert_close_slices(&to_vec(got), &want, 1e-6, 1e-5, d.name);
        });
    }
}
