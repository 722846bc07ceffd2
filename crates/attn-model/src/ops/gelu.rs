//! GPT-2's tanh-approximated GELU (Hugging Face's `gelu_new`), as one pass where it can be.
//!
//! ```text
//! gelu(x) = x/2 · (1 + tanh(u)) = x · σ(2u) = x / (1 + e^(−2u)),   u = √(2/π) · (x + 0.044715 x³)
//! ```
//!
//! burn's `gelu_approximate` computes the first form with `powf` and the C library's `tanhf`,
//! one value at a time on the CPU backends (a fifth of a GPT-2 prompt's time). The last form
//! needs products, one exponential and one division. As burn operations that is still eight
//! passes over the tensor, each on one thread on flex; [`gelu_tanh`] runs it there as one pass
//! of the native kernels' vector code on every core, and as burn operations everywhere else
//! (autodiff included, so gradients flow as usual).

use burn::tensor::Tensor;

/// `x / (1 + e^(−2u))` with `u = √(2/π) · (x + 0.044715 x³)`, element by element: GPT-2's GELU.
///
/// On flex, for inference, in `f32`, one threaded pass of vector code (values within `2e-6`
/// relative of the `tanh` definition); elsewhere the same formula as burn operations.
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    #[cfg(feature = "flex")]
    if let Some(y) = flex::gelu_tanh(&x) {
        return y;
    }
    as_operations(x)
}

/// [`gelu_tanh`] as burn operations, on any backend, under autodiff too.
fn as_operations<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    /// `−2 · √(2/π)`.
    const MINUS_TWO_SQRT_2_OVER_PI: f64 =
        -2.0 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2;
    let cubic = (x.clone() * x.clone() * 0.044715 + 1.0) * x.clone(); // x + 0.044715 x³
    let e = (cubic * MINUS_TWO_SQRT_2_OVER_PI).exp(); // e^(−2u)
    x / (e + 1.0)
}

#[cfg(feature = "flex")]
mod flex {
    use burn::backend::Flex;
    use burn::tensor::{DType, Tensor, TensorData};

    use attn_core::backend::flex_floats;

    use super::super::is_flex_inference;

    /// Whether [`gelu_tanh`] runs the native pass on `x`.
    pub(super) fn serves<const D: usize>(x: &Tensor<D>) -> bool {
        x.dtype() == DType::F32 && is_flex_inference(x)
    }

    /// The native pass over `x`'s values (read in place when contiguous), or `None` when
    /// [`serves`] says no.
    pub(super) fn gelu_tanh<const D: usize>(x: &Tensor<D>) -> Option<Tensor<D>> {
        if !serves(x) {
            return None;
        }
        let device = x.device();
        let dims = x.dims();
        let t = x.clone().try_into_primitive::<Flex>().ok()?;
        let values = flex_floats(&t);
        let mut out = vec![0.0; values.len()];
        attn_kernels::gelu_tanh(&values, &mut out);
        Some(Tensor::from_data(TensorData::new(out, dims), &device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_kernels::oracle::gelu_tanh as definition_f64;
    use attn_testing::{SeededRng, assert_close_slices, for_each_device, to_vec};
    use burn::tensor::Device;

    fn definition(x: f32) -> f64 {
        definition_f64(f64::from(x))
    }

    #[test]
    fn is_the_tanh_formula_everywhere() {
        let xs: Vec<f32> = (-100..=100)
            .map(|i| i as f32 / 10.0)
            .chain([-1e4, -50.0, -20.0, 20.0, 50.0, 1e4])
            .collect();
        let expected: Vec<f32> = xs.iter().map(|&x| definition(x) as f32).collect();
        for_each_device(|d| {
            for device in [d.device.clone(), d.device.clone().autodiff()] {
                let x = Tensor::<1>::from_floats(xs.as_slice(), &device);
                let y = to_vec(gelu_tanh(x));
                assert!(y.iter().all(|v| v.is_finite()), "{y:?}");
                assert_close_slices(&y, &expected, 1e-6, 1e-5, d.name);
            }
        });
    }

    #[test]
    fn both_paths_agree_on_strided_views() {
        let mut rng = SeededRng::new(7);
        for_each_device(|d| {
            let x = (rng.tensor([40, 70], &d.device) * 6.0).transpose(); // [70, 40], strided
            let want = to_vec(as_operations(x.clone()));
            let got = gelu_tanh(x.clone());
            assert_eq!(got.dims(), [70, 40], "{}", d.name);
            assert_close_slices(&to_vec(got), &want, 1e-6, 1e-5, d.name);
        });
    }

    #[test]
    fn gradients_flow_under_autodiff() {
        for_each_device(|d| {
            let device = d.device.clone().autodiff();
            let x = Tensor::<1>::from_floats([-2.0, -0.5, 0.0, 0.5, 2.0], &device).require_grad();
            let grads = gelu_tanh(x.clone()).sum().backward();
            let g = to_vec(x.grad(&grads).expect("x has a gradient"));
            // d/dx of x·σ(2u), by central differences of the f64 definition.
            let f = |x: f64| definition_f64(x);
            let h = 1e-5;
            let want: Vec<f32> = [-2.0, -0.5, 0.0, 0.5, 2.0]
                .iter()
                .map(|&x: &f64| ((f(x + h) - f(x - h)) / (2.0 * h)) as f32)
                .collect();
            assert_close_slices(&g, &want, 1e-5, 1e-4, d.name);
        });
    }

    #[cfg(feature = "flex")]
    #[test]
    fn the_native_pass_serves_flex_inference_only() {
        let x = Tensor::<1>::from_floats([1.0, 2.0], &Device::flex());
        assert!(flex::serves(&x));
        let x = Tensor::<1>::from_floats([1.0, 2.0], &Device::flex().autodiff());
        assert!(!flex::serves(&x));
    }
}
