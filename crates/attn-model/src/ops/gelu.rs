//! GELU, exact or GPT-2's tanh form, as one backend operation with its own backward, through
//! burn's backend-extension mechanism.
//!
//! ```text
//! exact   gelu(x) = x · Φ(x) = x/2 · (1 + erf(x/√2))          gelu'(x) = Φ(x) + x · φ(x)
//! tanh    gelu(x) = x/2 · (1 + tanh(u)) = x / (1 + e^(−2u))     gelu'(x) = σ + 2x · σ(1 − σ) · u'
//!         u = √(2/π) · (x + 0.044715 x³),  u' = √(2/π) · (1 + 3 · 0.044715 x²),  σ = σ(2u)
//! ```
//!
//! burn's `gelu` is the exact form as five tensor operations (flex computes `erf` with the C
//! library's `erff`, one value at a time on one thread), and its autodiff backward is the
//! derivative of the *tanh* approximation, a dozen operations more. burn's
//! `gelu_approximate` computes the tanh form with `powf` and `tanhf`. [`GeluOps`] is one
//! operation in either form; under autodiff it records one node that keeps `x` and computes
//! the exact derivative of the form it ran. On flex, `f32` values go through one threaded
//! vector pass of `attn-kernels` each way; every other backend runs the formulas above in its
//! own tensor operations.

// Without a backend feature, no backend implements the operation.
#![cfg_attr(
    not(any(
        feature = "flex",
        feature = "ndarray",
        feature = "wgpu",
        feature = "vulkan",
        feature = "metal",
        feature = "cuda"
    )),
    allow(dead_code, unused_imports)
)]

pub use attn_kernels::GeluForm;
use burn::backend::{
    AutodiffBackend, Backend, TensorMetadata,
    autodiff::{
        Autodiff,
        checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
        grads::Gradients,
        ops::{Backward, Ops, OpsKind},
    },
    backend_extension,
    tensor::FloatTensor,
};
use burn::tensor::Tensor;

/// GELU forward and backward as backend operations. The provided bodies run the formulas in
/// the backend's own tensor operations; flex overrides them with one vector pass each.
#[backend_extension(
    Flex: cfg(feature = "flex"),
    NdArray: cfg(feature = "ndarray"),
    Cube: cfg(any(feature = "wgpu", feature = "vulkan", feature = "metal", feature = "cuda")),
    Autodiff,
)]
pub trait GeluOps: Backend {
    /// `gelu(x)` in `form`, element by element.
    fn fused_gelu(x: FloatTensor<Self>, form: GeluForm) -> FloatTensor<Self> {
        tensor_forward::<Self>(x, form)
    }

    /// `dy ∘ gelu'(x)` in `form`: the gradient of a loss with respect to `x`, given its
    /// gradient `dy` with respect to [`fused_gelu`](Self::fused_gelu)'s output.
    fn fused_gelu_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        form: GeluForm,
    ) -> FloatTensor<Self> {
        tensor_backward::<Self>(x, dy, form)
    }
}

/// flex: `f32` values (read in place when contiguous) in one pass on every core.
#[cfg(feature = "flex")]
impl GeluOps for burn::backend::Flex {
    fn fused_gelu(x: FloatTensor<Self>, form: GeluForm) -> FloatTensor<Self> {
        use attn_core::backend::flex_floats;
        if x.dtype() != burn::tensor::DType::F32 {
            return tensor_forward::<Self>(x, form);
        }
        let (shape, device) = (x.shape(), x.device());
        let values = flex_floats(&x);
        let mut out = vec![0.0; values.len()];
        attn_kernels::gelu(form, &values, &mut out);
        host::<Self>(out, shape, &device)
    }

    fn fused_gelu_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        form: GeluForm,
    ) -> FloatTensor<Self> {
        use attn_core::backend::flex_floats;
        let f32s = [&x, &dy]
            .iter()
            .all(|t| t.dtype() == burn::tensor::DType::F32);
        if !f32s || x.shape() != dy.shape() {
            return tensor_backward::<Self>(x, dy, form);
        }
        let (shape, device) = (x.shape(), x.device());
        let (x, dy) = (flex_floats(&x), flex_floats(&dy));
        let mut dx = vec![0.0; x.len()];
        attn_kernels::gelu_backward(form, &x, &dy, &mut dx);
        host::<Self>(dx, shape, &device)
    }
}

/// ndarray: the formulas in its tensor operations (the trait's own bodies).
#[cfg(feature = "ndarray")]
impl GeluOps for burn::backend::NdArray {}

/// The CubeCL backends: the formulas as the backend's own kernels (the trait's own bodies).
#[cfg(any(
    feature = "wgpu",
    feature = "vulkan",
    feature = "metal",
    feature = "cuda"
))]
impl GeluOps for burn::backend::Cube {}

#[derive(Debug)]
struct GeluBackward {
    form: GeluForm,
}

impl<B: GeluOps> Backward<B, 1> for GeluBackward {
    /// The input, from which the backward recomputes what it needs.
    type State = FloatTensor<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 1>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let dy = grads.consume::<B>(&ops.node);
        let [parent] = ops.parents;
        if let Some(node) = parent {
            grads.register::<B>(node.id, B::fused_gelu_backward(ops.state, dy, self.form));
        }
    }
}

impl<B: GeluOps, C: CheckpointStrategy> GeluOps for Autodiff<B, C> {
    fn fused_gelu(x: FloatTensor<Self>, form: GeluForm) -> FloatTensor<Self> {
        let nodes = [x.node()];
        let x = x.into_primitive();
        let y = B::fused_gelu(x.clone(), form);
        let backward = GeluBackward { form };
        match backward.prepare::<C>(nodes).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(x, y),
            OpsKind::UnTracked(prep) => prep.finish(y),
        }
    }

    /// Runs `B`'s backward on the inner tensors; the gradient it returns is not itself
    /// differentiable.
    fn fused_gelu_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        form: GeluForm,
    ) -> FloatTensor<Self> {
        Self::from_inner(B::fused_gelu_backward(
            x.into_primitive(),
            dy.into_primitive(),
            form,
        ))
    }
}

/// Host `f32` values as a tensor of `B`.
#[cfg(feature = "flex")]
fn host<B: Backend>(
    values: Vec<f32>,
    shape: burn::tensor::Shape,
    device: &B::Device,
) -> FloatTensor<B> {
    B::float_from_data(burn::tensor::TensorData::new(values, shape), device)
}

/// `−2 · √(2/π)`.
const MINUS_TWO_SQRT_2_OVER_PI: f64 =
    -2.0 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2;

/// `e^(−2u)` of the tanh form, `u = √(2/π) · (x + 0.044715 x³)`.
fn tanh_exponential<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    let x2 = B::float_mul(x.clone(), x.clone());
    let cubic = B::float_mul(
        B::float_add_scalar(B::float_mul_scalar(x2, 0.044715.into()), 1.0.into()),
        x,
    ); // x + 0.044715 x³
    B::float_exp(B::float_mul_scalar(cubic, MINUS_TWO_SQRT_2_OVER_PI.into()))
}

/// The forward in `B`'s tensor operations.
fn tensor_forward<B: Backend>(x: FloatTensor<B>, form: GeluForm) -> FloatTensor<B> {
    match form {
        // x · (1 + erf(x/√2)) / 2: burn's own.
        GeluForm::Exact => B::gelu(x),
        // x / (1 + e^(−2u))
        GeluForm::Tanh => {
            let e = tanh_exponential::<B>(x.clone());
            B::float_div(x, B::float_add_scalar(e, 1.0.into()))
        }
    }
}

/// The backward in `B`'s tensor operations.
fn tensor_backward<B: Backend>(
    x: FloatTensor<B>,
    dy: FloatTensor<B>,
    form: GeluForm,
) -> FloatTensor<B> {
    let slope = match form {
        // Φ(x) + x · e^(−x²/2) / √(2π)
        GeluForm::Exact => {
            let erf = B::float_erf(B::float_mul_scalar(
                x.clone(),
                std::f64::consts::FRAC_1_SQRT_2.into(),
            ));
            let phi = B::float_mul_scalar(B::float_add_scalar(erf, 1.0.into()), 0.5.into());
            let x2 = B::float_mul(x.clone(), x.clone());
            let density = B::float_mul_scalar(
                B::float_exp(B::float_mul_scalar(x2, (-0.5).into())),
                (0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2).into(),
            );
            B::float_add(phi, B::float_mul(x, density))
        }
        // σ + 2x · σ(1 − σ) · u',  σ = 1 / (1 + e^(−2u)),  2u' = 2√(2/π) · (1 + 0.134145 x²)
        GeluForm::Tanh => {
            let s = B::float_recip(B::float_add_scalar(
                tanh_exponential::<B>(x.clone()),
                1.0.into(),
            ));
            let one_minus_s = B::float_add_scalar(B::float_neg(s.clone()), 1.0.into());
            let x2 = B::float_mul(x.clone(), x.clone());
            let two_du = B::float_mul_scalar(
                B::float_add_scalar(B::float_mul_scalar(x2, (3.0 * 0.044715).into()), 1.0.into()),
                (-MINUS_TWO_SQRT_2_OVER_PI).into(),
            );
            let spread = B::float_mul(
                B::float_mul(x, two_du),
                B::float_mul(s.clone(), one_minus_s),
            );
            B::float_add(s, spread)
        }
    };
    B::float_mul(dy, slope)
}

/// `gelu(x)` in `form`, element by element.
///
/// Where [`GeluOps`] serves the device's backend (flex, ndarray and the CubeCL backends when
/// compiled in, with or without autodiff), one operation, and under autodiff one graph node
/// with the form's exact derivative; on flex in `f32`, one threaded pass of vector code each
/// way (within `1e-6` absolute and `2e-6` relative of the definitions). Elsewhere, burn's
/// `gelu` (exact) or the tanh formula as burn operations.
pub fn gelu_with<const D: usize>(form: GeluForm, x: Tensor<D>) -> Tensor<D> {
    if !super::implemented_for(&x.device()) {
        return match form {
            GeluForm::Exact => burn::tensor::activation::gelu(x),
            GeluForm::Tanh => tanh_as_operations(x),
        };
    }
    Tensor::from_dispatch(<burn::backend::Dispatch as GeluOps>::fused_gelu(
        x.into_dispatch(),
        form,
    ))
}

/// The exact GELU, `x · Φ(x)`: [`gelu_with`] in [`GeluForm::Exact`].
pub fn gelu<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    gelu_with(GeluForm::Exact, x)
}

/// GPT-2's tanh GELU (Hugging Face's `gelu_new`): [`gelu_with`] in [`GeluForm::Tanh`].
pub fn gelu_tanh<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    gelu_with(GeluForm::Tanh, x)
}

/// The tanh form as burn operations, on any backend, under autodiff too.
fn tanh_as_operations<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let cubic = (x.clone() * x.clone() * 0.044715 + 1.0) * x.clone(); // x + 0.044715 x³
    let e = (cubic * MINUS_TWO_SQRT_2_OVER_PI).exp(); // e^(−2u)
    x / (e + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_kernels::oracle;
    use attn_testing::{SeededRng, assert_close_slices, for_each_device, to_vec};

    type Scalar = fn(f64) -> f64;

    /// Each form with its definition and its derivative in `f64`.
    const FORMS: [(GeluForm, Scalar, Scalar); 2] = [
        (GeluForm::Exact, oracle::gelu, oracle::gelu_derivative),
        (
            GeluForm::Tanh,
            oracle::gelu_tanh,
            oracle::gelu_tanh_derivative,
        ),
    ];

    fn inputs() -> Vec<f32> {
        (-100..=100)
            .map(|i| i as f32 / 10.0)
            .chain([-1e4, -50.0, -20.0, 20.0, 50.0, 1e4])
            .collect()
    }

    #[test]
    fn both_forms_are_their_definitions_everywhere() {
        let xs = inputs();
        for (form, definition, _) in FORMS {
            let expected: Vec<f32> = xs
                .iter()
                .map(|&x| definition(f64::from(x)) as f32)
                .collect();
            for_each_device(|d| {
                for device in [d.device.clone(), d.device.clone().autodiff()] {
                    let x = Tensor::<1>::from_floats(xs.as_slice(), &device);
                    let y = to_vec(gelu_with(form, x));
                    assert!(y.iter().all(|v| v.is_finite()), "{form:?}: {y:?}");
                    assert_close_slices(&y, &expected, 1e-6, 1e-5, &format!("{} {form:?}", d.name));
                }
            });
        }
    }

    #[test]
    fn the_operation_and_the_formulas_agree_on_strided_views() {
        let mut rng = SeededRng::new(7);
        for_each_device(|d| {
            let x = (rng.tensor([40, 70], &d.device) * 6.0).transpose(); // [70, 40], strided
            let forms = [
                (GeluForm::Exact, burn::tensor::activation::gelu(x.clone())),
                (GeluForm::Tanh, tanh_as_operations(x.clone())),
            ];
            for (form, want) in forms {
                let got = gelu_with(form, x.clone());
                assert_eq!(got.dims(), [70, 40], "{}", d.name);
                assert_close_slices(&to_vec(got), &to_vec(want), 1e-6, 1e-5, d.name);
            }
        });
    }

    #[test]
    fn gradients_are_the_derivatives_of_the_definitions() {
        // The derivatives in f64 are checked against central differences of the definitions in
        // attn-kernels' own tests.
        let xs: Vec<f32> = (-60..=60)
            .map(|i| i as f32 / 8.0)
            .chain([-30.0, 30.0])
            .collect();
        let dys: Vec<f32> = (0..xs.len()).map(|i| (i % 5) as f32 / 2.0 - 1.0).collect();
        for (form, _, derivative) in FORMS {
            let want: Vec<f32> = xs
                .iter()
                .zip(&dys)
                .map(|(&x, &dy)| (f64::from(dy) * derivative(f64::from(x))) as f32)
                .collect();
            for_each_device(|d| {
                let device = d.device.clone().autodiff();
                let x = Tensor::<1>::from_floats(xs.as_slice(), &device).require_grad();
                let dy = Tensor::<1>::from_floats(dys.as_slice(), &device);
                let grads = (gelu_with(form, x.clone()) * dy).sum().backward();
                let g = to_vec(x.grad(&grads).expect("x has a gradient"));
                assert_close_slices(&g, &want, 1e-6, 1e-5, &format!("{} {form:?}", d.name));
            });
        }
    }

    #[test]
    fn gradients_reach_a_strided_input_through_later_operations() {
        let mut rng = SeededRng::new(8);
        for_each_device(|d| {
            let device = d.device.clone().autodiff();
            let base: Tensor<2> = rng.tensor([6, 9], &device) * 3.0;
            let x = base.clone().require_grad();
            // A transposed view in, and a product after, so that the node sits inside a graph.
            let w: Tensor<2> = rng.tensor([6, 4], &device);
            let loss = gelu(x.clone().transpose()).matmul(w.clone()).sum();
            let g = to_vec(x.grad(&loss.backward()).expect("x has a gradient"));
            // d/dx[i][j] of Σ_k gelu(x[i][j]) · w[i][k] = gelu'(x[i][j]) · Σ_k w[i][k].
            let (xv, wv) = (to_vec(base), to_vec(w));
            let want: Vec<f32> = (0..6 * 9)
                .map(|n| {
                    let (i, _) = (n / 9, n % 9);
                    let row: f64 = wv[i * 4..i * 4 + 4].iter().map(|&v| f64::from(v)).sum();
                    (oracle::gelu_derivative(f64::from(xv[n])) * row) as f32
                })
                .collect();
            assert_close_slices(&g, &want, 1e-5, 1e-4, d.name);
        });
    }
}
