//! LayerNorm as one backend operation with its own backward pass, through burn's
//! backend-extension mechanism.
//!
//! Over the last dimension of `x`, for each row of `d` values:
//!
//! ```text
//! μ = mean(x)      r = 1 / √(mean((x − μ)²) + ε)      x̂ = (x − μ) · r
//! y = γ ∘ x̂ + β
//!
//! dβ = Σ_rows dy               dγ = Σ_rows dy ∘ x̂
//! g  = dy ∘ γ                  dx = r · (g − mean(g) − x̂ · mean(g ∘ x̂))
//! ```
//!
//! burn's `layer_norm` is fused in flex's forward, but its autodiff backend records the
//! decomposition (two means, a subtraction, a square, a square root, a division, a scale and a
//! shift, each with its own backward node and output). [`LayerNormOps`] records one node that
//! keeps `x`, `γ`, `μ` and `r`, and computes the three gradients in one pass over the rows.
//!
//! On flex, contiguous `f32` tensors are read in place and the rows are split among the
//! threads; every other backend (and flex's other float types) runs the same formulas in the
//! backend's own tensor operations.

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
use burn::tensor::{Device, Shape, Tensor};

/// LayerNorm forward and backward as backend operations. The provided bodies run the formulas
/// in the backend's own tensor operations; flex overrides them with row loops.
///
/// Shapes: `x` `[.., d]`, `gamma` and `beta` `[d]`; `mean` and `rstd` are `x`'s shape with the
/// last dimension `1`.
#[backend_extension(
    Flex: cfg(feature = "flex"),
    NdArray: cfg(feature = "ndarray"),
    Cube: cfg(any(feature = "wgpu", feature = "vulkan", feature = "metal", feature = "cuda")),
    Autodiff,
)]
pub trait LayerNormOps: Backend {
    /// `(y, mean, rstd)`: the normalised, scaled and shifted rows, each row's mean and the
    /// reciprocal of its standard deviation (with `epsilon` added to the variance).
    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        tensor_forward::<Self>(x, gamma, beta, epsilon)
    }

    /// `(dx, dgamma, dbeta)` from the inputs, the `mean` and `rstd` that
    /// [`fused_layer_norm`](Self::fused_layer_norm) returned, and the gradient `dy` of a loss
    /// with respect to `y`.
    fn fused_layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        tensor_backward::<Self>(x, gamma, mean, rstd, dy)
    }
}

/// flex: contiguous `f32` rows are read in place and normalised on every core.
#[cfg(feature = "flex")]
impl LayerNormOps for burn::backend::Flex {
    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        use attn_core::backend::flex_floats;
        if x.dtype() != burn::tensor::DType::F32 {
            return tensor_forward::<Self>(x, gamma, beta, epsilon);
        }
        let shape = x.shape();
        let device = x.device();
        let (values, gamma, beta) = (flex_floats(&x), flex_floats(&gamma), flex_floats(&beta));
        let (y, mean, rstd) = attn_kernels::layer_norm(&values, &gamma, &beta, epsilon as f32);
        (
            host::<Self>(y, shape.clone(), &device),
            host::<Self>(mean, stat_shape(&shape), &device),
            host::<Self>(rstd, stat_shape(&shape), &device),
        )
    }

    fn fused_layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        use attn_core::backend::flex_floats;
        if x.dtype() != burn::tensor::DType::F32 {
            return tensor_backward::<Self>(x, gamma, mean, rstd, dy);
        }
        let shape = x.shape();
        let d_shape = gamma.shape();
        let device = x.device();
        let [x, gamma, mean, rstd, dy] = [&x, &gamma, &mean, &rstd, &dy].map(flex_floats);
        let (dx, dgamma, dbeta) = attn_kernels::layer_norm_backward(&x, &gamma, &mean, &rstd, &dy);
        (
            host::<Self>(dx, shape, &device),
            host::<Self>(dgamma, d_shape.clone(), &device),
            host::<Self>(dbeta, d_shape, &device),
        )
    }
}

/// ndarray: the formulas in its tensor operations (the trait's own bodies).
#[cfg(feature = "ndarray")]
impl LayerNormOps for burn::backend::NdArray {}

/// The CubeCL backends: the formulas as the backend's own kernels (the trait's own bodies).
#[cfg(any(
    feature = "wgpu",
    feature = "vulkan",
    feature = "metal",
    feature = "cuda"
))]
impl LayerNormOps for burn::backend::Cube {}

/// What the backward pass keeps: the inner backend's tensors.
#[derive(Clone, Debug)]
struct Saved<B: Backend> {
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    mean: FloatTensor<B>,
    rstd: FloatTensor<B>,
}

#[derive(Debug)]
struct LayerNormBackward;

impl<B: LayerNormOps> Backward<B, 3> for LayerNormBackward {
    type State = Saved<B>;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        _checkpointer: &mut Checkpointer,
    ) {
        let dy = grads.consume::<B>(&ops.node);
        let s = ops.state;
        let (dx, dgamma, dbeta) = B::fused_layer_norm_backward(s.x, s.gamma, s.mean, s.rstd, dy);
        for (parent, grad) in ops.parents.into_iter().zip([dx, dgamma, dbeta]) {
            if let Some(node) = parent {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

impl<B: LayerNormOps, C: CheckpointStrategy> LayerNormOps for Autodiff<B, C> {
    fn fused_layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let nodes = [x.node(), gamma.node(), beta.node()];
        let (x, gamma, beta) = (
            x.into_primitive(),
            gamma.into_primitive(),
            beta.into_primitive(),
        );
        let (y, mean, rstd) = B::fused_layer_norm(x.clone(), gamma.clone(), beta, epsilon);
        let stats = (
            Self::from_inner(mean.clone()),
            Self::from_inner(rstd.clone()),
        );
        let y = match LayerNormBackward
            .prepare::<C>(nodes)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(
                Saved {
                    x,
                    gamma,
                    mean,
                    rstd,
                },
                y,
            ),
            OpsKind::UnTracked(prep) => prep.finish(y),
        };
        (y, stats.0, stats.1)
    }

    /// Runs `B`'s backward on the inner tensors; the gradients it returns are not themselves
    /// differentiable.
    fn fused_layer_norm_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let (dx, dgamma, dbeta) = B::fused_layer_norm_backward(
            x.into_primitive(),
            gamma.into_primitive(),
            mean.into_primitive(),
            rstd.into_primitive(),
            dy.into_primitive(),
        );
        (
            Self::from_inner(dx),
            Self::from_inner(dgamma),
            Self::from_inner(dbeta),
        )
    }
}

/// `x`'s shape with the last dimension `1`.
fn stat_shape(shape: &Shape) -> Shape {
    let mut dims = shape.as_slice().to_vec();
    if let Some(last) = dims.last_mut() {
        *last = 1;
    }
    Shape::from(dims)
}

/// Host `f32` values as a tensor of `B`.
#[cfg(feature = "flex")]
fn host<B: Backend>(values: Vec<f32>, shape: Shape, device: &B::Device) -> FloatTensor<B> {
    B::float_from_data(burn::tensor::TensorData::new(values, shape), device)
}

/// `[d]` as `[1, .., 1, d]` of `rank` dimensions, to broadcast against the rows.
fn row_vector<B: Backend>(v: FloatTensor<B>, rank: usize) -> FloatTensor<B> {
    let d = v.shape().num_elements();
    let mut dims = vec![1; rank];
    dims[rank - 1] = d;
    B::float_reshape(v, Shape::from(dims))
}

/// The forward in `B`'s tensor operations.
fn tensor_forward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    epsilon: f64,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let rank = x.shape().num_dims();
    let last = rank - 1;
    let mean = B::float_mean_dim(x.clone(), last);
    let centered = B::float_sub(x, mean.clone());
    let var = B::float_mean_dim(B::float_mul(centered.clone(), centered.clone()), last);
    let rstd = B::float_recip(B::float_sqrt(B::float_add_scalar(var, epsilon.into())));
    let normalized = B::float_mul(centered, rstd.clone());
    let y = B::float_add(
        B::float_mul(normalized, row_vector::<B>(gamma, rank)),
        row_vector::<B>(beta, rank),
    );
    (y, mean, rstd)
}

/// The backward in `B`'s tensor operations.
fn tensor_backward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    mean: FloatTensor<B>,
    rstd: FloatTensor<B>,
    dy: FloatTensor<B>,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let shape = x.shape();
    let rank = shape.num_dims();
    let last = rank - 1;
    let d = shape[last];
    let rows = shape.num_elements() / d;
    let d_shape = gamma.shape();
    let x_hat = B::float_mul(B::float_sub(x, mean), rstd.clone());
    let sum_rows = |t: FloatTensor<B>| {
        let flat = B::float_reshape(t, Shape::from(vec![rows, d]));
        B::float_reshape(B::float_sum_dim(flat, 0), d_shape.clone())
    };
    let dbeta = sum_rows(dy.clone());
    let dgamma = sum_rows(B::float_mul(dy.clone(), x_hat.clone()));
    let g = B::float_mul(dy, row_vector::<B>(gamma, rank));
    let mean_g = B::float_mean_dim(g.clone(), last);
    let mean_g_x_hat = B::float_mean_dim(B::float_mul(g.clone(), x_hat.clone()), last);
    let dx = B::float_mul(
        B::float_sub(B::float_sub(g, mean_g), B::float_mul(x_hat, mean_g_x_hat)),
        rstd,
    );
    (dx, dgamma, dbeta)
}

/// LayerNorm over the last dimension of `x`, as [`burn::nn::LayerNorm`] computes it:
/// `γ ∘ (x − μ) / √(σ² + ε) + β`, with the biased variance `σ²`.
///
/// Under autodiff, where [`LayerNormOps`] serves the device's backend (see
/// [`layer_norm_serves`]: flex, ndarray and the CubeCL backends when compiled in), one operation with its own
/// backward; without autodiff, and elsewhere, burn's `layer_norm`.
///
/// # Shapes
///
/// - x: `[.., d]`
/// - gamma, beta: `[d]`
/// - output: `[.., d]`
pub fn layer_norm<const D: usize>(
    x: Tensor<D>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    epsilon: f64,
) -> Tensor<D> {
    // Without autodiff there is no backward to save: burn's own operation (flex fuses it).
    let training = x.is_autodiff() || x.device().is_autodiff();
    if !training || !super::implemented_for(&x.device()) {
        return burn::tensor::module::layer_norm(x, gamma, Some(beta), epsilon);
    }
    let (y, _, _) = <burn::backend::Dispatch as LayerNormOps>::fused_layer_norm(
        x.into_dispatch(),
        gamma.into_dispatch(),
        beta.into_dispatch(),
        epsilon,
    );
    Tensor::from_dispatch(y)
}

/// Whether [`layer_norm`] records one operation with its own backward on `device`: an
/// autodiff device of flex, ndarray or a CubeCL backend, when compiled in.
pub fn layer_norm_serves(device: &Device) -> bool {
    device.is_autodiff() && super::implemented_for(device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{SeededRng, assert_close_slices, for_each_device, to_vec};
    use burn::tensor::TensorData;

    const EPS: f64 = 1e-5;

    /// The definition in f64 on the host: the independent reference.
    fn reference(x: &[f64], gamma: &[f64], beta: &[f64]) -> Vec<f64> {
        let d = gamma.len();
        x.chunks(d)
            .flat_map(|row| {
                let mu = row.iter().sum::<f64>() / d as f64;
                let var = row.iter().map(|v| (v - mu).powi(2)).sum::<f64>() / d as f64;
                let r = 1.0 / (var + EPS).sqrt();
                row.iter()
                    .zip(gamma)
                    .zip(beta)
                    .map(move |((v, g), b)| (v - mu) * r * g + b)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// `Σ w ∘ y` of the reference.
    fn loss(x: &[f64], gamma: &[f64], beta: &[f64], w: &[f64]) -> f64 {
        reference(x, gamma, beta)
            .iter()
            .zip(w)
            .map(|(y, w)| y * w)
            .sum()
    }

    /// Central differences of [`loss`] with respect to each value of `which` (0 = x, 1 = γ,
    /// 2 = β).
    fn finite_differences(inputs: &[Vec<f64>; 3], w: &[f64], which: usize) -> Vec<f64> {
        let h = 1e-6;
        (0..inputs[which].len())
            .map(|i| {
                let mut plus = inputs.clone();
                let mut minus = inputs.clone();
                plus[which][i] += h;
                minus[which][i] -= h;
                (loss(&plus[0], &plus[1], &plus[2], w) - loss(&minus[0], &minus[1], &minus[2], w))
                    / (2.0 * h)
            })
            .collect()
    }

    fn f32s(v: &[f64]) -> Vec<f32> {
        v.iter().map(|&v| v as f32).collect()
    }

    #[test]
    fn forward_and_gradients_match_the_definition_and_finite_differences() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(41);
            // 3·5 rows of 7 values, shifted and scaled so that the mean and variance matter.
            let shape = [3, 5, 7];
            let n = 3 * 5 * 7;
            let x: Vec<f64> = rng
                .values(n)
                .iter()
                .map(|&v| 2.0 + 3.0 * v as f64)
                .collect();
            let gamma: Vec<f64> = rng.values(7).iter().map(|&v| 1.0 + v as f64).collect();
            let beta: Vec<f64> = rng.values(7).iter().map(|&v| v as f64).collect();
            let w: Vec<f64> = rng.values(n).iter().map(|&v| v as f64).collect();

            let device = d.device.clone().autodiff();
            let vector =
                |v: &[f64]| Tensor::<1>::from_data(TensorData::new(f32s(v), [v.len()]), &device);
            let xt: Tensor<3> =
                Tensor::from_data(TensorData::new(f32s(&x), shape), &device).require_grad();
            let gt = vector(&gamma).require_grad();
            let bt = vector(&beta).require_grad();
            let y = layer_norm(xt.clone(), gt.clone(), bt.clone(), EPS);
            let what = |x: &str| format!("{}: {x}", d.name);
            assert_close_slices(
                &to_vec(y.clone()),
                &f32s(&reference(&x, &gamma, &beta)),
                1e-5,
                1e-5,
                &what("y"),
            );

            let wt: Tensor<3> = Tensor::from_data(TensorData::new(f32s(&w), shape), &device);
            let grads = (y * wt).sum().backward();
            let inputs = [x, gamma, beta];
            let got = [
                to_vec(xt.grad(&grads).expect("dx")),
                to_vec(gt.grad(&grads).expect("dgamma")),
                to_vec(bt.grad(&grads).expect("dbeta")),
            ];
            for (which, (got, name)) in got.iter().zip(["dx", "dgamma", "dbeta"]).enumerate() {
                let want = f32s(&finite_differences(&inputs, &w, which));
                assert_close_slices(got, &want, 1e-4, 1e-4, &what(name));
            }
        });
    }

    #[test]
    fn equals_burn_layer_norm_on_a_model_sized_input() {
        // 2·300 rows of 64: more rows than one task, so that flex splits them among threads
        // and adds the shares of dgamma and dbeta.
        for_each_device(|d| {
            let mut rng = SeededRng::new(43);
            let device = d.device.clone().autodiff();
            let x = rng.tensor([2, 300, 64], &device).require_grad();
            let gamma = rng.tensor([64], &device).require_grad();
            let beta = rng.tensor([64], &device).require_grad();
            let w = rng.tensor([2, 300, 64], &device);
            let ours = layer_norm(x.clone(), gamma.clone(), beta.clone(), EPS);
            let grads = (ours.clone() * w.clone()).sum().backward();
            let ours_grads = [
                to_vec(x.grad(&grads).expect("dx")),
                to_vec(gamma.grad(&grads).expect("dgamma")),
                to_vec(beta.grad(&grads).expect("dbeta")),
            ];

            let (x2, gamma2, beta2) = (
                x.clone().detach().require_grad(),
                gamma.clone().detach().require_grad(),
                beta.clone().detach().require_grad(),
            );
            let burns = burn::tensor::module::layer_norm(
                x2.clone(),
                gamma2.clone(),
                Some(beta2.clone()),
                EPS,
            );
            let grads = (burns.clone() * w).sum().backward();
            let burn_grads = [
                to_vec(x2.grad(&grads).expect("dx")),
                to_vec(gamma2.grad(&grads).expect("dgamma")),
                to_vec(beta2.grad(&grads).expect("dbeta")),
            ];
            let what = |x: &str| format!("{}: {x}, ours vs burn's", d.name);
            assert_close_slices(&to_vec(ours), &to_vec(burns), 1e-5, 1e-5, &what("y"));
            for ((got, want), name) in ours_grads
                .iter()
                .zip(&burn_grads)
                .zip(["dx", "dgamma", "dbeta"])
            {
                assert_close_slices(got, want, 1e-3, 1e-4, &what(name));
            }
            assert!(layer_norm_serves(&device), "{}", d.name);
            assert!(!layer_norm_serves(&d.device), "{}", d.name);
        });
    }
}
