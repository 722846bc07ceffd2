//! `y = x · W + b`, the projections around attention, with both cores busy when `x` is one
//! row.
//!
//! A decoding step projects one token: `x` is `[1, d_input]` and every weight is read once
//! from memory for two floating-point operations per value, so the step is bound by memory
//! bandwidth, and one core does not reach it. flex's matrix products (the `gemm` crate) take a
//! matrix-vector path for one row, and that path runs on one thread whatever parallelism it is
//! given. [`linear`] splits the output columns across rayon's threads instead, each running
//! the same `gemm` path over its strip of `W`: the result is the same sum in the same order,
//! on every core.
//!
//! Everything else (several rows, autodiff, other backends, other float types) runs burn's own
//! [`burn::tensor::module::linear`].

use burn::tensor::Tensor;

/// `x · weight + bias` over the last dimension of `x`: the same result as burn's
/// [`Linear::forward`](burn::nn::Linear::forward) with these parameters.
///
/// On flex, for inference, in `f32`, when `x` holds one row (`[1, d_input]`, `[1, 1,
/// d_input]`, ...), the output columns are split across rayon's threads (see the module's
/// documentation). `weight` may be a strided view, such as the transpose of a tied embedding
/// table, and is never copied.
///
/// # Shapes
/// - `x`: `[..., d_input]`
/// - `weight`: `[d_input, d_output]`
/// - `bias`: `[d_output]`
/// - returns: `[..., d_output]`
///
/// # Panics
/// When `weight`'s first dimension is not `x`'s last, or `bias` is not `[d_output]`, as
/// burn's `linear` does.
pub fn linear<const D: usize>(
    x: Tensor<D>,
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
) -> Tensor<D> {
    #[cfg(feature = "flex")]
    if let Some(y) = flex::one_row(&x, &weight, bias.as_ref()) {
        return y;
    }
    burn::tensor::module::linear(x, weight, bias)
}

#[cfg(feature = "flex")]
mod flex {
    use burn::tensor::{DType, Tensor};
    use rayon::prelude::*;

    /// Output columns per strip at the least: a strip of `W` as wide as a few cache lines, so
    /// that each of its rows is read in whole lines.
    const MIN_COLUMNS: usize = 64;

    /// Values of `W` below which one thread is quicker than waking the others.
    const MIN_VALUES: usize = 1 << 16;

    /// Whether [`one_row`] splits this call across threads.
    pub(super) fn serves<const D: usize>(
        x: &Tensor<D>,
        weight: &Tensor<2>,
        bias: Option<&Tensor<1>>,
    ) -> bool {
        let dims = x.dims();
        let [d_input, d_output] = weight.dims();
        let rows: usize = dims[..D - 1].iter().product();
        rows == 1
            && dims[D - 1] == d_input
            && d_input * d_output >= MIN_VALUES
            && d_output >= 2 * MIN_COLUMNS
            && rayon::current_num_threads() > 1
            && bias.is_none_or(|b| b.dims() == [d_output])
            && [x.dtype(), weight.dtype()]
                .into_iter()
                .chain(bias.map(Tensor::dtype))
                .all(|t| t == DType::F32)
            && crate::native::is_flex_inference(x)
    }

    /// `x · weight + bias` with the output columns split into one strip per thread, or `None`
    /// when the call is not one this path serves.
    ///
    /// Each strip is a two-dimensional product of `x` by a `narrow`ed view of `W`: flex
    /// multiplies strided views in place (a batch dimension would make it copy the view first),
    /// and `gemm` takes its matrix-vector path for the strip. The strips are joined with one
    /// `cat` of `d_output` floats.
    pub(super) fn one_row<const D: usize>(
        x: &Tensor<D>,
        weight: &Tensor<2>,
        bias: Option<&Tensor<1>>,
    ) -> Option<Tensor<D>> {
        if !serves(x, weight, bias) {
            return None;
        }
        let mut dims = x.dims();
        let [d_input, d_output] = weight.dims();
        let row = x.clone().reshape([1, d_input]); // [1, d_input]
        let columns = d_output
            .div_ceil(rayon::current_num_threads())
            .next_multiple_of(MIN_COLUMNS);
        let strips: Vec<(usize, usize)> = (0..d_output)
            .step_by(columns)
            .map(|first| (first, columns.min(d_output - first)))
            .collect();
        let parts: Vec<Tensor<2>> = strips
            .into_par_iter()
            .map(|(first, n)| {
                let product = row.clone().matmul(weight.clone().narrow(1, first, n)); // [1, n]
                match bias {
                    Some(b) => product + b.clone().narrow(0, first, n).unsqueeze(), // [1, n]
                    None => product,
                }
            })
            .collect();
        dims[D - 1] = d_output;
        Some(Tensor::cat(parts, 1).reshape(dims))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{SeededRng, assert_close_slices, for_each_device, to_vec};
    use burn::tensor::Device;

    /// `x · W + b` in `f64`, one output at a time: the definition, independent of both paths.
    fn reference(x: &[f32], w: &[f32], b: &[f32], d_input: usize, d_output: usize) -> Vec<f32> {
        (0..d_output)
            .map(|j| {
                let dot: f64 = (0..d_input)
                    .map(|i| f64::from(x[i]) * f64::from(w[i * d_output + j]))
                    .sum();
                (dot + f64::from(b[j])) as f32
            })
            .collect()
    }

    /// Wide enough to split across threads (with a last strip of another width), and too
    /// small to.
    const SHAPES: [(usize, usize); 3] = [(96, 1000), (300, 777), (8, 40)];

    #[test]
    fn one_row_equals_the_definition_for_plain_and_transposed_weights() {
        for_each_device(|test| {
            let device = &test.device;
            let mut rng = SeededRng::new(11);
            for (d_input, d_output) in SHAPES {
                let x = rng.tensor::<3>([1, 1, d_input], device);
                let w = rng.tensor::<2>([d_input, d_output], device);
                let b = rng.tensor::<1>([d_output], device);
                let expected = reference(
                    &to_vec(x.clone()),
                    &to_vec(w.clone()),
                    &to_vec(b.clone()),
                    d_input,
                    d_output,
                );
                let what = format!("{} {d_input}x{d_output}", test.name);
                let plain = linear(x.clone(), w.clone(), Some(b.clone()));
                assert_eq!(plain.dims(), [1, 1, d_output]);
                assert_close_slices(&to_vec(plain), &expected, 1e-4, 1e-5, &what);
                // The same weights stored as `[d_output, d_input]` and seen through a transpose.
                let stored = Tensor::<2>::from_data(w.clone().transpose().into_data(), device);
                let transposed = linear(x.clone(), stored.transpose(), Some(b.clone()));
                assert_close_slices(&to_vec(transposed), &expected, 1e-4, 1e-5, &what);
                let no_bias = linear(x.clone().reshape([1, d_input]), w.clone(), None)
                    + b.clone().unsqueeze();
                assert_close_slices(&to_vec(no_bias), &expected, 1e-4, 1e-5, &what);
                // Several rows take burn's path; each row agrees with the definition.
                let rows = Tensor::cat(vec![x.clone() * 2.0, x.clone()], 1); // [1, 2, d_input]
                let both = linear(rows, w.clone(), Some(b.clone())).narrow(1, 1, 1);
                assert_close_slices(&to_vec(both), &expected, 1e-4, 1e-5, &what);
            }
        });
    }

    #[test]
    fn gradients_flow_through_burns_path_under_autodiff() {
        let device = Device::flex().autodiff();
        let mut rng = SeededRng::new(12);
        let (d_input, d_output) = SHAPES[0];
        let x = rng.tensor::<2>([1, d_input], &device).require_grad();
        let w = rng.tensor::<2>([d_input, d_output], &device).require_grad();
        let y = linear(x.clone(), w.clone(), None);
        let grads = y.sum().backward();
        // d(sum y)/dx_i = Σ_j W[i, j]; d(sum y)/dW[i, j] = x_i.
        let w_values = to_vec(w.clone().inner());
        let row_sums: Vec<f32> = (0..d_input)
            .map(|i| w_values[i * d_output..][..d_output].iter().sum())
            .collect();
        let dx = x.grad(&grads).expect("x has a gradient");
        assert_close_slices(&to_vec(dx), &row_sums, 1e-4, 1e-5, "dx");
        let dw = to_vec(w.grad(&grads).expect("W has a gradient"));
        let x_values = to_vec(x.inner());
        assert_close_slices(
            &dw[..d_output],
            &vec![x_values[0]; d_output],
            1e-6,
            0.0,
            "dW row 0",
        );
    }

    #[cfg(feature = "flex")]
    #[test]
    fn one_row_on_flex_takes_the_threaded_path_and_nothing_else_does() {
        let flex = Device::flex();
        let mut rng = SeededRng::new(13);
        let (d_input, d_output) = SHAPES[0];
        let w = rng.tensor::<2>([d_input, d_output], &flex);
        let one = rng.tensor::<3>([1, 1, d_input], &flex);
        let threads = rayon::current_num_threads() > 1;
        assert_eq!(flex::one_row(&one, &w, None).is_some(), threads);
        let two = rng.tensor::<3>([1, 2, d_input], &flex);
        assert!(flex::one_row(&two, &w, None).is_none(), "two rows");
        let small = rng.tensor::<2>([8, 40], &flex);
        assert!(
            flex::one_row(&rng.tensor::<2>([1, 8], &flex), &small, None).is_none(),
            "small"
        );
        let autodiff = flex.autodiff();
        let x = rng.tensor::<3>([1, 1, d_input], &autodiff);
        let w = rng.tensor::<2>([d_input, d_output], &autodiff);
        assert!(flex::one_row(&x, &w, None).is_none(), "autodiff");
    }
}
