//! `y = x · W + b`, the projections around attention: on flex, one matrix product that writes
//! its output once, forward and backward, and both cores busy when `x` is one row.
//!
//! burn's `linear` on flex is a matrix product followed by a separate bias pass, and flex
//! allocates each product's output zeroed and then copies it once more into an aligned buffer
//! before the product writes it (`FlexTensor::empty` in burn-flex 0.22.1). On flex,
//! [`LinearOps`] calls the `gemm` crate (the one behind flex's own products) directly:
//! the output is written by the product alone, with the bias rows laid down first and
//! accumulated into (`dst := dst + x · W`), and the two backward products (`dx = dy · Wᵀ`,
//! `dW = xᵀ · dy`) write their outputs the same way. Strided views (a transposed weight, a
//! tied embedding table seen as `[d_model, vocab]`) are read in place, except the second
//! operand of a product too large for L1 whose columns are strided (`Wᵀ` in `dx = dy · Wᵀ`):
//! that one is first copied tile by tile into a buffer the calling thread keeps (at most 32
//! MiB; a larger operand is left to `gemm`), because `gemm` packs such an operand one element
//! at a time, from rows a power of two apart that share two sets of L1. Under autodiff it is
//! one graph node, as burn's own `linear` is.
//!
//! A decoding step projects one token: `x` is `[1, d_input]` and every weight is read once
//! from memory for two floating-point operations per value, so the step is bound by memory
//! bandwidth, and one core does not reach it. `gemm` takes a matrix-vector path for one row,
//! and that path runs on one thread whatever parallelism it is given. [`linear`] splits the
//! output columns across rayon's threads instead, each running the same `gemm` path over its
//! strip of `W`: the result is the same sum in the same order, on every core.
//!
//! Every other backend, and flex's other float types, run burn's own
//! [`burn::tensor::module::linear`].
//!
//! This file holds the functions the layers call and the [`LinearOps`] trait with each
//! backend's implementation; `autodiff.rs` the operation's graph node and backward,
//! `products.rs` flex's `gemm` calls, `flex.rs` the one-row products split across threads.

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

mod autodiff;
#[cfg(feature = "flex")]
mod flex;
#[cfg(feature = "flex")]
mod products;

use burn::backend::{Backend, backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Device, Tensor};

/// `x · weight + bias` over the last dimension of `x`: the same result as burn's
/// [`Linear::forward`](burn::nn::Linear::forward) with these parameters.
///
/// On flex, in `f32`, one [`LinearOps`] operation (see the module's documentation), with
/// gradients under autodiff; for inference, when `x` holds one row (`[1, d_input]`, `[1, 1,
/// d_input]`, ...), the output columns are split across rayon's threads. `weight` may be a
/// strided view, such as the transpose of a tied embedding table: it is read in place, or
/// copied into row-major order for large products (see the module's documentation).
/// Elsewhere, burn's `linear`.
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
    // A half-precision weight with `f32` inputs: flex reads it in place (`products`); other
    // backends widen it for the product.
    let weight = if weight.dtype() != x.dtype()
        && !(linear_serves(&x.device()) && weight.dtype() == DType::BF16)
    {
        weight.cast(x.dtype())
    } else {
        weight
    };
    if !linear_serves(&x.device()) {
        return burn::tensor::module::linear(x, weight, bias);
    }
    type Ops = burn::backend::Dispatch;
    let (x, weight) = (x.into_dispatch(), weight.into_dispatch());
    Tensor::from_dispatch(match bias {
        Some(bias) => <Ops as LinearOps>::fused_linear(x, weight, bias.into_dispatch()),
        None => <Ops as LinearOps>::fused_linear_unbiased(x, weight),
    })
}

/// [`linear`] of one `x` by several weights, in order: a layer's queries, keys and values, or
/// SwiGLU's gate and expansion. On flex, for inference, when `x` holds at most a few rows (a
/// decoding step) and every weight is stored as rows (a loaded checkpoint's `Linear`), all `f32`
/// or all `bfloat16`, the outputs of all the products are split among the threads at once
/// (`attn_kernels::half::linear_rows_many`), so that the threads meet once for all of them and
/// the small products ride on the large ones' tasks. Elsewhere, one [`linear`] each.
///
/// # Shapes
/// - `x`: `[..., d_input]`
/// - each weight: `[d_input, d_output_i]`, its bias `[d_output_i]`
/// - returns: one `[..., d_output_i]` for each
///
/// # Panics
/// As [`linear`], for any of the products.
pub fn linears<const D: usize>(
    x: Tensor<D>,
    products: &[(Tensor<2>, Option<Tensor<1>>)],
) -> Vec<Tensor<D>> {
    #[cfg(feature = "flex")]
    if let Some(ys) = flex::few_rows_many(&x, products) {
        return ys;
    }
    products
        .iter()
        .map(|(weight, bias)| linear(x.clone(), weight.clone(), bias.clone()))
        .collect()
}

/// Whether [`linear`] runs [`LinearOps`] on `device`: flex, with or without autodiff, when
/// compiled in. (The operation is implemented for ndarray and the CubeCL backends too, as
/// burn's own `linear` ops, so that the dispatch covers every backend; [`linear`] sends those
/// to burn's `linear` directly.)
pub fn linear_serves(device: &Device) -> bool {
    super::is_flex(device)
}

/// How [`linear`] multiplies `rows` rows of `f32` inputs by a `bfloat16` weight stored as a
/// checkpoint's rows (`[d_output, d_input]`) on `device`, by name: `amx-bf16` (AMX's tiles),
/// `avx512bf16` (`vdpbf16ps`), `bf16 widened in registers` (a few rows, as in decoding),
/// `f32 gemm` (the weight widened for `gemm`), or `burn` (another backend's own product).
pub fn bf16_products(device: &Device, rows: usize) -> &'static str {
    #[cfg(feature = "flex")]
    if linear_serves(device) {
        return products::bf16_instructions(rows);
    }
    let _ = (device, rows);
    "burn"
}

/// `x · W + b` and its two backward products as backend operations. The provided bodies are
/// burn's own `linear` operations (`ModuleOps::linear`, `linear_x_backward`,
/// `linear_weight_backward`); flex overrides them with direct `gemm` calls whose outputs are
/// written once.
///
/// Shapes: `x` `[.., d_input]`, `weight` `[d_input, d_output]`, `bias` `[d_output]`, `dy` `[..,
/// d_output]`.
#[backend_extension(
    Flex: cfg(feature = "flex"),
    NdArray: cfg(feature = "ndarray"),
    Cube: cfg(any(feature = "wgpu", feature = "vulkan", feature = "metal", feature = "cuda")),
    Autodiff,
)]
pub trait LinearOps: Backend {
    /// `x · weight + bias`, `[.., d_output]`.
    fn fused_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        <Self as burn::backend::ops::ModuleOps<Self>>::linear(x, weight, Some(bias))
    }

    /// `x · weight`, `[.., d_output]`. (A method of its own rather than an optional bias: the
    /// extension macro of burn 0.22.1 does not unwrap optional tensors for every backend.)
    fn fused_linear_unbiased(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        <Self as burn::backend::ops::ModuleOps<Self>>::linear(x, weight, None)
    }

    /// `dx = dy · weightᵀ`, `[.., d_input]`.
    fn fused_linear_x_backward(
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        <Self as burn::backend::ops::ModuleOps<Self>>::linear_x_backward(weight, dy)
    }

    /// `dW = xᵀ · dy` summed over every row, `[d_input, d_output]`.
    fn fused_linear_weight_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        <Self as burn::backend::ops::ModuleOps<Self>>::linear_weight_backward(x, dy)
    }
}

/// flex: `f32` products through `gemm`, each output written once; other float types take
/// burn's operations.
#[cfg(feature = "flex")]
impl LinearOps for burn::backend::Flex {
    fn fused_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        match products::forward(&x, &weight, Some(&bias)) {
            Some(y) => y,
            None => <Self as burn::backend::ops::ModuleOps<Self>>::linear(x, weight, Some(bias)),
        }
    }

    fn fused_linear_unbiased(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        match products::forward(&x, &weight, None) {
            Some(y) => y,
            None => <Self as burn::backend::ops::ModuleOps<Self>>::linear(x, weight, None),
        }
    }

    fn fused_linear_x_backward(
        weight: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        match products::x_backward(&weight, &dy) {
            Some(dx) => dx,
            None => <Self as burn::backend::ops::ModuleOps<Self>>::linear_x_backward(weight, dy),
        }
    }

    fn fused_linear_weight_backward(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        match products::weight_backward(&x, &dy) {
            Some(dw) => dw,
            None => <Self as burn::backend::ops::ModuleOps<Self>>::linear_weight_backward(x, dy),
        }
    }
}

/// ndarray: burn's own `linear` operations (the trait's bodies).
#[cfg(feature = "ndarray")]
impl LinearOps for burn::backend::NdArray {}

/// The CubeCL backends: burn's own `linear` operations (the trait's bodies).
#[cfg(any(
    feature = "wgpu",
    feature = "vulkan",
    feature = "metal",
    feature = "cuda"
))]
impl LinearOps for burn::backend::Cube {}

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

    /// Several weights at once ([`linears`]), stored as `[d_output, d_input]` as a checkpoint's
    /// are, in `f32` and in `bfloat16`, one row and three, with and without biases, with and
    /// without autodiff: each output against its definition in `f64` (over the weights as
    /// stored, rounded to `bfloat16` where they are).
    #[test]
    fn several_weights_at_once_equal_their_definitions() {
        for_each_device(|test| {
            let mut rng = SeededRng::new(21);
            let d_input = 72;
            let widths = [200, 24, 24];
            for device in [test.device.clone(), test.device.clone().autodiff()] {
                for dtype in [DType::F32, DType::BF16] {
                    if !device.supports_dtype(dtype) {
                        continue;
                    }
                    for rows in [1, 3] {
                        let x = rng.tensor::<3>([1, rows, d_input], &device);
                        let mut products = Vec::new();
                        let mut expected = Vec::new();
                        for (i, &d_output) in widths.iter().enumerate() {
                            let stored = rng.tensor::<2>([d_output, d_input], &device).cast(dtype);
                            let b = rng.tensor::<1>([d_output], &device);
                            let w = stored.clone().cast(DType::F32).transpose(); // [d_input, d_output]
                            let (wv, bv) = (to_vec(w), to_vec(b.clone()));
                            let xv = to_vec(x.clone());
                            let with_bias = i != 1;
                            let zeros = vec![0.0; d_output];
                            let bias_values = if with_bias { &bv } else { &zeros };
                            let want: Vec<f32> = xv
                                .chunks(d_input)
                                .flat_map(|row| reference(row, &wv, bias_values, d_input, d_output))
                                .collect();
                            expected.push(want);
                            products.push((stored.transpose(), with_bias.then_some(b)));
                        }
                        let ys = linears(x.clone(), &products);
                        assert_eq!(ys.len(), widths.len());
                        for ((y, want), &d_output) in ys.into_iter().zip(&expected).zip(&widths) {
                            assert_eq!(y.dims(), [1, rows, d_output]);
                            let what = format!(
                                "{}: {dtype:?}, {rows} rows, d_output {d_output}, autodiff {}",
                                test.name,
                                device.is_autodiff()
                            );
                            assert_close_slices(&to_vec(y), want, 1e-4, 1e-5, &what);
                        }
                    }
                }
            }
        });
    }

    /// Under autodiff one row does not take the threaded path; its gradients are `LinearOps`'s.
    #[test]
    fn one_row_gradients_under_autodiff() {
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

    /// `Σ_r a[r, i] · b[r, j]` in `f64`: `aᵀ · b` for row-major `a` `[rows, p]`, `b` `[rows,
    /// q]`.
    fn transposed_product(a: &[f32], b: &[f32], rows: usize, p: usize, q: usize) -> Vec<f32> {
        (0..p * q)
            .map(|ij| {
                let (i, j) = (ij / q, ij % q);
                (0..rows)
                    .map(|r| f64::from(a[r * p + i]) * f64::from(b[r * q + j]))
                    .sum::<f64>() as f32
            })
            .collect()
    }

    /// Forward and the three gradients of `Σ g ∘ (x · W + b)` against the definitions in `f64`
    /// (`dx = g · Wᵀ`, `dW = xᵀ · g`, `db = Σ_rows g`), at shapes small enough for one thread
    /// and large enough for `gemm` to split, with `W` stored plainly and as the transpose of a
    /// `[d_output, d_input]` table, with and without a bias, on every device.
    #[test]
    fn forward_and_gradients_equal_the_definitions() {
        for_each_device(|test| {
            let device = test.device.clone().autodiff();
            let mut rng = SeededRng::new(14);
            for (batch, seq, d_input, d_output) in [(2, 3, 5, 7), (3, 100, 96, 160), (1, 40, 1, 3)]
            {
                let rows = batch * seq;
                let x = rng
                    .tensor::<3>([batch, seq, d_input], &device)
                    .require_grad();
                let w_plain = rng.tensor::<2>([d_input, d_output], &device);
                let b = rng.tensor::<1>([d_output], &device).require_grad();
                let g = rng.tensor::<3>([batch, seq, d_output], &device);
                let (xv, wv, bv, gv) = (
                    to_vec(x.clone()),
                    to_vec(w_plain.clone()),
                    to_vec(b.clone()),
                    to_vec(g.clone()),
                );
                let stored =
                    Tensor::<2>::from_data(w_plain.clone().transpose().into_data(), &device);
                for (layout, w) in [
                    ("plain", w_plain.clone()),
                    ("transposed", stored.transpose()),
                ] {
                    for with_bias in [true, false] {
                        let what = |part: &str| {
                            format!(
                                "{} {batch}x{seq}x{d_input}->{d_output} {layout} bias {with_bias}: {part}",
                                test.name
                            )
                        };
                        let w = w.clone().require_grad();
                        let y = linear(x.clone(), w.clone(), with_bias.then(|| b.clone()));
                        assert_eq!(y.dims(), [batch, seq, d_output]);
                        let zero = vec![0.0; d_output];
                        let want = (0..rows)
                            .flat_map(|r| {
                                let bias = if with_bias { &bv } else { &zero };
                                reference(
                                    &xv[r * d_input..][..d_input],
                                    &wv,
                                    bias,
                                    d_input,
                                    d_output,
                                )
                            })
                            .collect::<Vec<_>>();
                        assert_close_slices(&to_vec(y.clone()), &want, 1e-4, 1e-5, &what("y"));

                        let grads = (y * g.clone()).sum().backward();
                        // dx[r, i] = Σ_j g[r, j] · W[i, j]: gᵀ-free, as (Wᵀ)ᵀ-products row by row.
                        let dx_want: Vec<f32> = (0..rows * d_input)
                            .map(|ri| {
                                let (r, i) = (ri / d_input, ri % d_input);
                                (0..d_output)
                                    .map(|j| {
                                        f64::from(gv[r * d_output + j])
                                            * f64::from(wv[i * d_output + j])
                                    })
                                    .sum::<f64>() as f32
                            })
                            .collect();
                        let dx = to_vec(x.grad(&grads).expect("x has a gradient"));
                        assert_close_slices(&dx, &dx_want, 1e-4, 1e-5, &what("dx"));
                        let dw = to_vec(w.grad(&grads).expect("W has a gradient"));
                        let dw_want = transposed_product(&xv, &gv, rows, d_input, d_output);
                        assert_close_slices(&dw, &dw_want, 1e-4, 1e-4, &what("dW"));
                        if with_bias {
                            let db = to_vec(b.grad(&grads).expect("b has a gradient"));
                            let ones = vec![1.0; rows];
                            let db_want = transposed_product(&ones, &gv, rows, 1, d_output);
                            assert_close_slices(&db, &db_want, 1e-4, 1e-4, &what("db"));
                        }
                        // Without autodiff, the same values.
                        let inference = linear(
                            x.clone().inner(),
                            w.clone().inner(),
                            with_bias.then(|| b.clone().inner()),
                        );
                        assert_close_slices(
                            &to_vec(inference),
                            &want,
                            1e-4,
                            1e-5,
                            &what("inference"),
                        );
                    }
                }
            }
        });
    }

    /// Only the tracked inputs get gradients: a frozen weight still passes one to `x`, a frozen
    /// `x` still passes one to the weight.
    #[test]
    fn gradients_reach_only_the_inputs_that_require_them() {
        for_each_device(|test| {
            let device = test.device.clone().autodiff();
            let mut rng = SeededRng::new(15);
            let x = rng.tensor::<2>([4, 6], &device);
            let w = rng.tensor::<2>([6, 3], &device);
            let b = rng.tensor::<1>([3], &device);
            let grads = linear(x.clone().require_grad(), w.clone(), Some(b.clone()))
                .sum()
                .backward();
            assert!(
                w.grad(&grads).is_none() && b.grad(&grads).is_none(),
                "{}",
                test.name
            );
            let (x2, w2) = (x.clone(), w.clone().require_grad());
            let grads = linear(x2.clone(), w2.clone(), None).sum().backward();
            assert!(x2.grad(&grads).is_none(), "{}", test.name);
            // d(Σ y)/dW[i, j] = Σ_r x[r, i].
            let xv = to_vec(x);
            let want: Vec<f32> = (0..18)
                .map(|ij| (0..4).map(|r| xv[r * 6 + ij / 3]).sum())
                .collect();
            let dw = to_vec(w2.grad(&grads).expect("W has a gradient"));
            assert_close_slices(&dw, &want, 1e-5, 1e-5, test.name);
        });
    }

    #[test]
    fn served_on_flex_alone() {
        for_each_device(|test| {
            let flex = test.name.starts_with("flex");
            assert_eq!(linear_serves(&test.device), flex, "{}", test.name);
            assert_eq!(
                linear_serves(&test.device.clone().autodiff()),
                flex,
                "{}",
                test.name
            );
        });
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
