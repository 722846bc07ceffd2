//! RMSNorm, `γ ∘ x / √(mean(x²) + ε)` over the last dimension, as one pass where it can be.
//!
//! As burn operations (burn's `RmsNorm`) this is seven passes over the rows: a cast, a square,
//! a mean, an addition, a square root, a division and a scale. In a decoding step each pass is
//! a few hundred values, and the cost is the operations themselves, twice a layer. On flex, for
//! inference, in `f32`, [`rms_norm`] runs it as one pass of `attn_kernels::rms_norm`; everywhere
//! else (autodiff included) as burn's `RmsNorm` computes it.

use burn::tensor::{DType, Tensor};

/// RMSNorm of the rows of `x`, `γ ∘ x / √(mean(x²) + ε)`, computed in `f32` whatever `x`'s type
/// (as burn's `RmsNorm` and transformers' `LlamaRMSNorm` do) and returned in `x`'s type.
///
/// # Shapes
/// - `x`: `[.., d]`
/// - `gamma`: `[d]`
/// - returns: `[.., d]`
///
/// # Panics
/// When the last dimension of `x` is not `gamma`'s length.
pub fn rms_norm<const D: usize>(x: Tensor<D>, gamma: Tensor<1>, epsilon: f64) -> Tensor<D> {
    let [d] = gamma.dims();
    assert_eq!(
        x.dims()[D - 1],
        d,
        "RMSNorm over {d} features got an input whose last dimension is {}",
        x.dims()[D - 1]
    );
    #[cfg(feature = "flex")]
    if let Some(y) = flex::rms_norm(&x, &gamma, epsilon) {
        return y;
    }
    let dtype = x.dtype();
    let rms = (x.clone().cast(DType::F32).square().mean_dim(D - 1) + epsilon).sqrt();
    (x / rms.cast(dtype)) * gamma.unsqueeze()
}

#[cfg(feature = "flex")]
mod flex {
    use burn::backend::Flex;
    use burn::tensor::{DType, Tensor, TensorData};

    use attn_core::backend::flex_floats;

    use super::super::is_flex_inference;

    /// The native pass over the rows (read in place when contiguous), or `None` outside flex
    /// inference or when `x` is not `f32`.
    pub(super) fn rms_norm<const D: usize>(
        x: &Tensor<D>,
        gamma: &Tensor<1>,
        epsilon: f64,
    ) -> Option<Tensor<D>> {
        if x.dtype() != DType::F32 || !is_flex_inference(x) || !is_flex_inference(gamma) {
            return None;
        }
        let device = x.device();
        let dims = x.dims();
        let values = x.clone().try_into_primitive::<Flex>().ok()?;
        let gamma = gamma.clone().try_into_primitive::<Flex>().ok()?;
        let y = attn_kernels::rms_norm(&flex_floats(&values), &flex_floats(&gamma), epsilon as f32);
        Some(Tensor::from_data(TensorData::new(y, dims), &device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{SeededRng, assert_close_slices, for_each_device, to_vec};
    use burn::nn::RmsNormConfig;

    /// Every device, with and without autodiff, on a contiguous input and on a strided view,
    /// against the `f64` definition; the gradient of `γ` under autodiff against its definition
    /// `Σ_rows dy ∘ x · r`.
    #[test]
    fn is_the_definition_everywhere() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(5);
            let (rows, width) = (6, 40);
            let x = rng.tensor([2, rows, width], &d.device); // [2, rows, width]
            let gamma = rng.tensor([width], &d.device);
            let eps = 1e-6;
            let (xs, gs) = (to_vec(x.clone()), to_vec(gamma.clone()));
            let f64s = |v: &[f32]| v.iter().map(|&v| f64::from(v)).collect::<Vec<_>>();
            let want: Vec<f32> = attn_kernels::oracle::rms_norm(&f64s(&xs), &f64s(&gs), eps)
                .into_iter()
                .map(|v| v as f32)
                .collect();
            let y = to_vec(rms_norm(x.clone(), gamma.clone(), eps));
            assert_close_slices(&y, &want, 1e-5, 1e-5, &format!("{}: contiguous", d.name));
            // The same rows as a view that is not contiguous: stored as [2, width, rows].
            let mut stored = vec![0.0f32; xs.len()];
            for (i, &v) in xs.iter().enumerate() {
                let (b, r, w) = (i / (rows * width), i / width % rows, i % width);
                stored[(b * width + w) * rows + r] = v;
            }
            let strided = Tensor::<3>::from_data(
                burn::tensor::TensorData::new(stored, [2, width, rows]),
                &d.device,
            )
            .swap_dims(1, 2); // [2, rows, width]
            let y = to_vec(rms_norm(strided, gamma.clone(), eps));
            assert_close_slices(&y, &want, 1e-5, 1e-5, &format!("{}: view", d.name));

            let ad = d.device.clone().autodiff();
            let x = Tensor::<3>::from_data(
                burn::tensor::TensorData::new(xs.clone(), [2, rows, width]),
                &ad,
            );
            let g = Tensor::<1>::from_data(burn::tensor::TensorData::new(gs.clone(), [width]), &ad)
                .require_grad();
            let y = rms_norm(x, g.clone(), eps);
            assert_close_slices(
                &to_vec(y.clone()),
                &want,
                1e-5,
                1e-5,
                &format!("{}: autodiff", d.name),
            );
            let grads = y.sum().backward();
            let dgamma = to_vec(g.grad(&grads).expect("γ has a gradient"));
            let mut want_dgamma = vec![0.0f64; width];
            for row in xs.chunks(width) {
                let row = f64s(row);
                let r = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / width as f64 + eps).sqrt();
                for (w, v) in want_dgamma.iter_mut().zip(&row) {
                    *w += v * r;
                }
            }
            let want_dgamma: Vec<f32> = want_dgamma.iter().map(|&v| v as f32).collect();
            assert_close_slices(
                &dgamma,
                &want_dgamma,
                1e-4,
                1e-5,
                &format!("{}: dγ", d.name),
            );
        });
    }

    /// The same values as burn's `RmsNorm` module.
    #[test]
    fn equals_burns_rms_norm() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(9);
            let mut norm = RmsNormConfig::new(24).with_epsilon(1e-5).init(&d.device);
            norm.gamma = burn::module::Param::from_tensor(rng.tensor([24], &d.device));
            let x = rng.tensor([3, 24], &d.device);
            assert_close_slices(
                &to_vec(rms_norm(x.clone(), norm.gamma.val(), norm.epsilon)),
                &to_vec(norm.forward(x)),
                1e-6,
                1e-5,
                d.name,
            );
        });
    }

    #[test]
    #[should_panic(expected = "RMSNorm over 8 features got an input whose last dimension is 5")]
    fn a_wrong_width_names_both_numbers() {
        for_each_device(|d| {
            rms_norm(
                Tensor::<2>::zeros([2, 5], &d.device),
                Tensor::<1>::ones([8], &d.device),
                1e-6,
            );
        });
    }
}
