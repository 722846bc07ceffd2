//! Native CPU attention: a blocked online-softmax kernel on tuned micro-kernels and rayon,
//! behind [`Strategy::Native`](crate::Strategy::Native) and [`native_attention`].
//!
//! # How it reaches the backends
//!
//! On flex and ndarray the kernel and its backward run as [`FlashAttentionOps`]
//! (crate::FlashAttentionOps), burn's backend-extension mechanism: one backend operation, and
//! one autodiff node whose backward is [`backward::attention_backward`]. flex lends the
//! storage of contiguous `f32` tensors, so the kernel reads `q`, `k` and `v` in place; ndarray's
//! tensors are read with `into_data` (an `O(seq_len · d_head)` copy against
//! `O(seq_len² · d_head)` work).
//!
//! The public [`native_attention`] and [`native_attention_backward`] take the same kernels
//! through host copies (`into_data`, `from_data`), so they work on any device (a GPU tensor
//! takes a round trip through host memory); the automatic strategy takes the kernel only where
//! the data already lives in host memory: [`native_serves`].

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod backward;
mod exp;
mod kernel;

use std::borrow::Cow;

use burn::tensor::{Device, Tensor, TensorData};

use crate::{AttentionError, AttentionOptions, PreparedAttention, Strategy};
use kernel::{Broadcast, Problem};

/// What [`native_attention`] returns.
#[derive(Clone, Debug)]
pub struct NativeOutput {
    /// The weighted sum of values, `[batch, n_heads, seq_len_q, d_value]`.
    pub context: Tensor<4>,
    /// `ln Σ_j exp(scores[.., i, j])` of each query's scaled, biased, masked scores,
    /// `[batch, n_heads, seq_len_q]`; `−∞` where every key is masked. A FlashAttention-2
    /// backward recomputes the weights of a block as `exp(scores − lse)` from it.
    pub lse: Tensor<3>,
}

/// Whether `device` keeps its tensors in host memory, where the native kernel runs without
/// moving data between devices: flex and ndarray (with or without autodiff).
///
/// [`Strategy::Auto`] picks [`Strategy::Native`] for inference on these devices.
///
/// ```
/// assert!(attn_core::native_serves(&burn::tensor::Device::flex()));
/// ```
pub fn native_serves(device: &Device) -> bool {
    let backend = backend_name(device);
    backend.starts_with("Flex") || backend.starts_with("NdArray")
}

/// The name of `device`'s backend, as burn's dispatch prints it (`Flex`, `NdArray`, `Cube`,
/// ...). The dispatch enum's variants exist only for the backends burn was compiled with, so
/// a `match` on them would not build in every feature set; their names always print.
pub(crate) fn backend_name(device: &Device) -> String {
    format!("{:?}", device.clone().inner().as_dispatch())
}

/// Attention on the native CPU kernel, returning the context and each row's log-sum-exp.
///
/// Same semantics as [`scaled_dot_product_attention`](crate::scaled_dot_product_attention)
/// (mask, both causal alignments, bias, scale, grouped-query heads); fully masked rows return
/// zeros. Runs on any device (see [`native_serves`] for where it is fast).
///
/// # Shapes
/// - `q`: `[batch, n_heads, seq_len_q, d_head]`
/// - `k`: `[batch, n_kv_heads, seq_len_kv, d_head]`, `n_kv_heads` dividing `n_heads`
/// - `v`: `[batch, n_kv_heads, seq_len_kv, d_value]`
/// - `options.mask`, `options.bias`: broadcast to `[batch, n_heads, seq_len_q, seq_len_kv]`
/// - returns: context `[batch, n_heads, seq_len_q, d_value]`, lse `[batch, n_heads, seq_len_q]`
///
/// # Errors
/// An [`AttentionError`] naming the dimensions when the shapes cannot work, and
/// [`AttentionError::StrategyCannot`] when the options ask for weights or dropout, or when
/// gradients would have to flow through it: burn's autodiff does not record it
/// ([`native_attention_backward`] computes its gradients).
pub fn native_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    options: &AttentionOptions,
) -> Result<NativeOutput, AttentionError> {
    let plan = PreparedAttention::new(&q, &k, &v, options)?;
    check_can_run(&q, &k, &v, options, &plan, false)?;
    let (context, lse) = run(q, k, v, &plan, true);
    Ok(NativeOutput {
        context,
        lse: lse.expect("the log-sum-exp was asked for"),
    })
}

/// The gradients [`native_attention_backward`] returns.
#[derive(Clone, Debug)]
pub struct NativeGradients {
    /// `∂L/∂q`, `[batch, n_heads, seq_len_q, d_head]`.
    pub dq: Tensor<4>,
    /// `∂L/∂k`, `[batch, n_kv_heads, seq_len_kv, d_head]`.
    pub dk: Tensor<4>,
    /// `∂L/∂v`, `[batch, n_kv_heads, seq_len_kv, d_value]`.
    pub dv: Tensor<4>,
}

/// The backward pass of [`native_attention`]: given the forward's context and log-sum-exp
/// and the gradient of a loss `L` with respect to the context, the gradients of `L` with
/// respect to `q`, `k` and `v`.
///
/// FlashAttention-2's backward: each weight is recomputed from `q`, `k` and the log-sum-exp
/// when it is needed and never stored, so the memory beyond the inputs and gradients does not
/// grow with `seq_len_q · seq_len_kv`. Masks, both causal alignments, bias, scale and
/// grouped-query heads act as in the forward; fully masked rows get zero gradients. (The bias
/// is treated as a constant: no gradient is returned for it.)
///
/// # Shapes
/// - `q`, `k`, `v`, `options`: as given to [`native_attention`]
/// - `forward`: what [`native_attention`] returned for them
/// - `d_context`: `[batch, n_heads, seq_len_q, d_value]`
/// - returns: gradients shaped like `q`, `k` and `v`
///
/// # Errors
/// As [`native_attention`], plus [`AttentionError::GradientShape`] when `forward` or
/// `d_context` does not have the forward's shapes.
pub fn native_attention_backward(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    forward: &NativeOutput,
    d_context: Tensor<4>,
    options: &AttentionOptions,
) -> Result<NativeGradients, AttentionError> {
    let plan = PreparedAttention::new(&q, &k, &v, options)?;
    if plan.dropout > 0.0 {
        return Err(AttentionError::StrategyCannot {
            strategy: Strategy::Native.name(),
            what: "apply dropout to the weights",
        });
    }
    let [batch, n_heads, seq_len_q, seq_len_kv] = plan.scores_shape;
    let [_, n_kv_heads, _, d_head] = k.dims();
    let d_value = v.dims()[3];
    let context_shape = vec![batch, n_heads, seq_len_q, d_value];
    for (what, got, expected) in [
        (
            "the forward's context",
            forward.context.dims().to_vec(),
            &context_shape,
        ),
        ("d_context", d_context.dims().to_vec(), &context_shape),
        (
            "the forward's lse",
            forward.lse.dims().to_vec(),
            &vec![batch, n_heads, seq_len_q],
        ),
    ] {
        if &got != expected {
            return Err(AttentionError::GradientShape {
                what,
                got,
                expected: expected.clone(),
            });
        }
    }
    let device = q.device();
    let dtype = q.dtype();
    let host = Host::new(q, k, v, &plan);
    let [dq, dk, dv] = host.backward(
        plan.scale as f32,
        plan.causal_offset,
        slice(&floats(forward.context.clone())),
        slice(&floats(forward.lse.clone())),
        slice(&floats(d_context)),
    );
    let tensor = |data: Vec<f32>, shape: [usize; 4]| {
        Tensor::<4>::from_data(TensorData::new(data, shape), &device).cast(dtype)
    };
    Ok(NativeGradients {
        dq: tensor(dq, [batch, n_heads, seq_len_q, d_head]),
        dk: tensor(dk, [batch, n_kv_heads, seq_len_kv, d_head]),
        dv: tensor(dv, [batch, n_kv_heads, seq_len_kv, d_value]),
    })
}

/// Refuses what the native kernel cannot do: return or drop weights, or be differentiated
/// where it does not run as a backend operation with its own backward (`differentiable`).
pub(crate) fn check_can_run(
    q: &Tensor<4>,
    k: &Tensor<4>,
    v: &Tensor<4>,
    options: &AttentionOptions,
    plan: &PreparedAttention,
    differentiable: bool,
) -> Result<(), AttentionError> {
    let what = if options.need_weights {
        "return the attention weights"
    } else if plan.dropout > 0.0 {
        "apply dropout to the weights"
    } else if !differentiable && (q.is_tracked() || k.is_tracked() || v.is_tracked()) {
        "be recorded by autodiff (native_attention_backward computes its gradients)"
    } else {
        return Ok(());
    };
    Err(AttentionError::StrategyCannot {
        strategy: Strategy::Native.name(),
        what,
    })
}

/// The context, for [`Strategy::Native`] inside `try_scaled_dot_product_attention`.
pub(crate) fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
) -> Tensor<4> {
    run(q, k, v, plan, false).0
}

/// Copies the inputs to the host, runs the kernel, and builds the outputs on `q`'s device.
fn run(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
    want_lse: bool,
) -> (Tensor<4>, Option<Tensor<3>>) {
    let [batch, n_heads, seq_len_q, _] = plan.scores_shape;
    let d_value = v.dims()[3];
    let device = q.device();
    let dtype = q.dtype();
    let host = Host::new(q, k, v, plan);
    let (context, lse) = host.forward(plan.scale as f32, plan.causal_offset, want_lse);
    let context = Tensor::<4>::from_data(
        TensorData::new(context, [batch, n_heads, seq_len_q, d_value]),
        &device,
    )
    .cast(dtype);
    let lse = lse.map(|lse| {
        Tensor::<3>::from_data(TensorData::new(lse, [batch, n_heads, seq_len_q]), &device)
            .cast(dtype)
    });
    (context, lse)
}

/// One problem's inputs in host memory as `f32` (booleans for the mask), with their shapes.
///
/// The values are borrowed where a backend lends its storage (flex, for contiguous `f32`
/// tensors) and owned copies otherwise.
pub(crate) struct Host<'a> {
    /// `q`'s `[batch, n_heads, seq_len_q, d_head]`.
    q_dims: [usize; 4],
    /// `k`'s `[batch, n_kv_heads, seq_len_kv, d_head]`.
    k_dims: [usize; 4],
    d_value: usize,
    q: Cow<'a, [f32]>,
    k: Cow<'a, [f32]>,
    v: Cow<'a, [f32]>,
    mask: Option<([usize; 4], Vec<bool>)>,
    bias: Option<([usize; 4], Cow<'a, [f32]>)>,
}

impl<'a> Host<'a> {
    fn new(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, plan: &PreparedAttention) -> Self {
        Self::from_data(
            q.into_data(),
            k.into_data(),
            v.into_data(),
            plan.mask.clone().map(|m| m.into_data()),
            plan.bias.clone().map(|b| b.into_data()),
        )
    }

    /// The inputs read from any backend: floats of any precision become `f32`; the mask and
    /// the bias keep their own (broadcasting) shapes.
    pub(crate) fn from_data(
        q: TensorData,
        k: TensorData,
        v: TensorData,
        mask: Option<TensorData>,
        bias: Option<TensorData>,
    ) -> Self {
        let dims = [&q, &k, &v].map(data_dims);
        let values = [q, k, v].map(|data| Cow::Owned(f32_vec(data)));
        Self::from_parts(values, dims, mask, bias)
    }

    /// `q`, `k`, `v` as row-major `f32` values with the given shapes (borrowed from a
    /// backend's storage where it allows); the mask and bias as data read from the backend.
    pub(crate) fn from_parts(
        [q, k, v]: [Cow<'a, [f32]>; 3],
        [q_dims, k_dims, v_dims]: [[usize; 4]; 3],
        mask: Option<TensorData>,
        bias: Option<TensorData>,
    ) -> Self {
        Self {
            q_dims,
            k_dims,
            d_value: v_dims[3],
            q,
            k,
            v,
            mask: mask.map(|m| (data_dims(&m), bool_vec(m))),
            bias: bias.map(|b| (data_dims(&b), Cow::Owned(f32_vec(b)))),
        }
    }

    /// The shapes of `q`, `k` and `v`.
    pub(crate) fn input_shapes(&self) -> [[usize; 4]; 3] {
        let [batch, n_kv_heads, seq_len_kv, _] = self.k_dims;
        [
            self.q_dims,
            self.k_dims,
            [batch, n_kv_heads, seq_len_kv, self.d_value],
        ]
    }

    /// `[batch, n_heads, seq_len_q, seq_len_kv]`.
    pub(crate) fn scores_shape(&self) -> [usize; 4] {
        let [batch, n_heads, seq_len_q, _] = self.q_dims;
        [batch, n_heads, seq_len_q, self.k_dims[2]]
    }

    /// The kernel's view of these inputs.
    fn problem(&self, scale: f32, causal_offset: Option<i64>) -> Problem<'_> {
        let [batch, n_heads, seq_len_q, seq_len_kv] = self.scores_shape();
        let [_, n_kv_heads, _, d_head] = self.k_dims;
        Problem {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            batch,
            n_heads,
            n_kv_heads,
            seq_len_q,
            seq_len_kv,
            d_head,
            d_value: self.d_value,
            scale,
            mask: self
                .mask
                .as_ref()
                .map(|(dims, data)| Broadcast::new(data.as_slice(), *dims)),
            bias: self
                .bias
                .as_ref()
                .map(|(dims, data)| Broadcast::new(data, *dims)),
            causal_offset,
        }
    }

    /// The context `[batch, n_heads, seq_len_q, d_value]` and, when asked for, each row's
    /// log-sum-exp `[batch, n_heads, seq_len_q]`, row-major.
    pub(crate) fn forward(
        &self,
        scale: f32,
        causal_offset: Option<i64>,
        want_lse: bool,
    ) -> (Vec<f32>, Option<Vec<f32>>) {
        let [batch, n_heads, seq_len_q, _] = self.scores_shape();
        let mut context = vec![0.0; batch * n_heads * seq_len_q * self.d_value];
        let mut lse = want_lse.then(|| vec![0.0; batch * n_heads * seq_len_q]);
        kernel::attention(
            &self.problem(scale, causal_offset),
            &mut context,
            lse.as_deref_mut(),
        );
        (context, lse)
    }

    /// `[dq, dk, dv]`, row-major and shaped like `q`, `k` and `v`, from the forward's context
    /// and log-sum-exp and the gradient of the context.
    pub(crate) fn backward(
        &self,
        scale: f32,
        causal_offset: Option<i64>,
        context: &[f32],
        lse: &[f32],
        d_context: &[f32],
    ) -> [Vec<f32>; 3] {
        let mut dq = vec![0.0; self.q.len()];
        let mut dk = vec![0.0; self.k.len()];
        let mut dv = vec![0.0; self.v.len()];
        backward::attention_backward(
            &self.problem(scale, causal_offset),
            context,
            lse,
            d_context,
            backward::Gradients {
                dq: &mut dq,
                dk: &mut dk,
                dv: &mut dv,
            },
        );
        [dq, dk, dv]
    }
}

/// The shape of four-dimensional data.
fn data_dims(data: &TensorData) -> [usize; 4] {
    data.shape()
        .as_slice()
        .try_into()
        .expect("attention inputs have four dimensions")
}

/// Float data as `f32`.
pub(crate) fn to_f32(data: TensorData) -> TensorData {
    data.try_cast_as::<f32>()
        .expect("float tensors convert to f32")
}

/// Float data as a vector of `f32`.
pub(crate) fn f32_vec(data: TensorData) -> Vec<f32> {
    to_f32(data)
        .try_into_vec::<f32>()
        .expect("to_f32 made f32 data")
}

/// Bool data as a vector of `bool`.
fn bool_vec(data: TensorData) -> Vec<bool> {
    data.try_cast_as::<bool>()
        .and_then(|d| d.try_into_vec::<bool>())
        .expect("bool tensors convert to bool")
}

/// A float tensor's values as `f32`, row-major.
fn floats<const D: usize>(t: Tensor<D>) -> TensorData {
    to_f32(t.into_data())
}

/// The `f32` values of data made by [`floats`].
pub(crate) fn slice(data: &TensorData) -> &[f32] {
    data.as_slice::<f32>().expect("floats() made f32 data")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        CausalAlignment, padding_mask, padding_mask_from_lengths, repeat_kv_heads, scaled_scores,
        try_scaled_dot_product_attention,
    };
    use attn_testing::{ATOL, RTOL, SeededRng, assert_tensors_close, device_for, for_each_device};

    /// `q`, `k`, `v` with grouped-query heads and lengths that cross the kernel's query block
    /// (96) and key block (256).
    fn inputs(rng: &mut SeededRng, trial: usize, device: &Device) -> [Tensor<4>; 3] {
        let batch = rng.range(1, 2);
        let n_kv_heads = rng.range(1, 2);
        let n_heads = n_kv_heads * rng.range(1, 3);
        let seq_len_q = if trial.is_multiple_of(2) {
            rng.range(1, 9)
        } else {
            rng.range(95, 130)
        };
        let seq_len_kv = if trial.is_multiple_of(3) {
            rng.range(1, 12)
        } else {
            rng.range(250, 300)
        };
        let (d_head, d_value) = (rng.range(1, 20), rng.range(1, 20));
        [
            rng.tensor([batch, n_heads, seq_len_q, d_head], device)
                .mul_scalar(2.0),
            rng.tensor([batch, n_kv_heads, seq_len_kv, d_head], device)
                .mul_scalar(2.0),
            rng.tensor([batch, n_kv_heads, seq_len_kv, d_value], device),
        ]
    }

    /// Options for trial `trial`: a custom scale, then by turns no mask, a random mask or
    /// padding, a bias on odd trials, and causality in either alignment on most.
    fn options_for(
        rng: &mut SeededRng,
        trial: usize,
        q: &Tensor<4>,
        k: &Tensor<4>,
        device: &Device,
    ) -> AttentionOptions {
        let [batch, n_heads, seq_len_q, _] = q.dims();
        let seq_len_kv = k.dims()[2];
        let mut options = AttentionOptions::new().with_scale(0.2 + f64::from(rng.unit().abs()));
        options = match trial % 3 {
            0 => options,
            1 => options.with_mask(rng.bool_tensor(
                [batch, n_heads, seq_len_q, seq_len_kv],
                0.3,
                device,
            )),
            _ => {
                let lengths: Vec<usize> = (0..batch).map(|_| rng.range(1, seq_len_kv)).collect();
                let padding =
                    padding_mask_from_lengths(&lengths, seq_len_kv, device).expect("lengths fit");
                options.with_mask(padding_mask(padding))
            }
        };
        if trial % 2 == 1 {
            options = options.with_bias(rng.tensor([1, n_heads, seq_len_q, seq_len_kv], device));
        }
        if !trial.is_multiple_of(4) {
            let alignment = if trial % 4 == 1 {
                CausalAlignment::TopLeft
            } else {
                CausalAlignment::BottomRight
            };
            options = options.with_causal(alignment);
        }
        options
    }

    #[test]
    fn native_equals_explicit_with_masks_bias_causality_and_grouped_heads() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(77);
            for trial in 0..8 {
                let [q, k, v] = inputs(&mut rng, trial, &d.device);
                let options = options_for(&mut rng, trial, &q, &k, &d.device);
                let run = |strategy| {
                    let options = options.clone().with_strategy(strategy);
                    try_scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &options)
                        .expect("valid problem")
                        .context
                };
                let what = format!(
                    "{} trial {trial}: native vs explicit, q {:?}, k {:?}",
                    d.name,
                    q.dims(),
                    k.dims()
                );
                assert_tensors_close(
                    run(Strategy::Native),
                    run(Strategy::Explicit),
                    ATOL,
                    RTOL,
                    &what,
                );
            }
        });
    }

    #[test]
    fn backward_equals_explicit_autodiff_with_masks_bias_causality_and_grouped_heads() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(31);
            for trial in 0..8 {
                let [q, k, v] = inputs(&mut rng, trial, &d.device);
                let options = options_for(&mut rng, trial, &q, &k, &d.device);
                let forward = native_attention(q.clone(), k.clone(), v.clone(), &options)
                    .expect("valid problem");
                let d_context = rng.tensor(forward.context.dims(), &d.device);
                let ours = native_attention_backward(
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    &forward,
                    d_context.clone(),
                    &options,
                )
                .expect("valid problem");

                // The reference: burn's autodiff through the explicit strategy.
                let autodiff = d.device.clone().autodiff();
                let on =
                    |t: &Tensor<4>| Tensor::<4>::from_data(t.to_data(), &autodiff).require_grad();
                let (qa, ka, va) = (on(&q), on(&k), on(&v));
                let mut explicit = options.clone().with_strategy(Strategy::Explicit);
                explicit.mask = options
                    .mask
                    .as_ref()
                    .map(|m| Tensor::from_data(m.to_data(), &autodiff));
                explicit.bias = options
                    .bias
                    .as_ref()
                    .map(|b| Tensor::from_data(b.to_data(), &autodiff));
                let out =
                    try_scaled_dot_product_attention(qa.clone(), ka.clone(), va.clone(), &explicit)
                        .expect("valid problem")
                        .context;
                let grads = (out * Tensor::<4>::from_data(d_context.to_data(), &autodiff))
                    .sum()
                    .backward();
                for (name, got, input) in [
                    ("dq", ours.dq, &qa),
                    ("dk", ours.dk, &ka),
                    ("dv", ours.dv, &va),
                ] {
                    let expected = input.grad(&grads).expect("the input is in the graph");
                    assert_tensors_close(
                        got,
                        Tensor::<4>::from_data(expected.to_data(), &d.device),
                        ATOL,
                        RTOL,
                        &format!(
                            "{} trial {trial}: {name}, q {:?}, k {:?}",
                            d.name,
                            q.dims(),
                            k.dims()
                        ),
                    );
                }
            }
        });
    }

    #[test]
    fn backward_names_a_gradient_of_the_wrong_shape() {
        let device = Device::flex();
        let mut rng = SeededRng::new(5);
        let q = rng.tensor([1, 2, 3, 4], &device);
        let k = rng.tensor([1, 2, 5, 4], &device);
        let v = rng.tensor([1, 2, 5, 6], &device);
        let options = AttentionOptions::new();
        let forward = native_attention(q.clone(), k.clone(), v.clone(), &options).expect("valid");
        let err = native_attention_backward(
            q,
            k,
            v,
            &forward,
            rng.tensor([1, 2, 3, 5], &device),
            &options,
        )
        .expect_err("d_value is 6");
        assert_eq!(
            err,
            AttentionError::GradientShape {
                what: "d_context",
                got: vec![1, 2, 3, 5],
                expected: vec![1, 2, 3, 6],
            }
        );
    }

    #[test]
    fn lse_is_the_log_sum_exp_of_the_scaled_biased_scores() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(12);
            let [q, k, v] = inputs(&mut rng, 1, &d.device);
            let [batch, n_heads, seq_len_q, _] = q.dims();
            let seq_len_kv = k.dims()[2];
            let bias = rng.tensor([batch, 1, seq_len_q, seq_len_kv], &d.device);
            let options = AttentionOptions::new().with_bias(bias.clone());
            let out = native_attention(q.clone(), k.clone(), v, &options).expect("valid problem");
            assert_eq!(out.lse.dims(), [batch, n_heads, seq_len_q]);

            let scale = 1.0 / (q.dims()[3] as f64).sqrt();
            let scores = scaled_scores(q, repeat_kv_heads(k, n_heads), scale) + bias; // [batch, n_heads, seq_len_q, seq_len_kv]
            let max = scores.clone().max_dim(3); // [batch, n_heads, seq_len_q, 1]
            let lse = ((scores - max.clone()).exp().sum_dim(3).log() + max)
                .reshape([batch, n_heads, seq_len_q]);
            assert_tensors_close(out.lse, lse, ATOL, RTOL, &format!("{}: lse", d.name));
        });
    }

    #[test]
    fn serves_the_host_memory_backends_only() {
        for name in ["flex", "ndarray"] {
            let device = device_for(name).expect("a backend name");
            assert!(native_serves(&device), "{name}");
            assert!(native_serves(&device.autodiff()), "{name} with autodiff");
        }
        let wgpu = device_for("wgpu").expect("a backend name");
        assert!(!native_serves(&wgpu));
    }

    #[test]
    fn refuses_weights_dropout_and_gradients() {
        let device = Device::flex();
        let t = |shape: [usize; 4], device: &Device| Tensor::<4>::ones(shape, device);
        let cannot = |result: Result<NativeOutput, AttentionError>| match result {
            Err(AttentionError::StrategyCannot {
                strategy: "native",
                what,
            }) => what,
            other => panic!("expected StrategyCannot from native, got {other:?}"),
        };
        let weights = AttentionOptions::new().with_need_weights(true);
        let what = cannot(native_attention(
            t([1, 2, 3, 4], &device),
            t([1, 2, 5, 4], &device),
            t([1, 2, 5, 4], &device),
            &weights,
        ));
        assert!(what.contains("weights"), "{what}");

        let autodiff = device.autodiff();
        let q = t([1, 2, 3, 4], &autodiff).require_grad();
        let (k, v) = (t([1, 2, 5, 4], &autodiff), t([1, 2, 5, 4], &autodiff));
        let dropout = AttentionOptions::new().with_dropout(0.5);
        let what = cannot(native_attention(q.clone(), k.clone(), v.clone(), &dropout));
        assert!(what.contains("dropout"), "{what}");
        let what = cannot(native_attention(
            q.clone(),
            k.clone(),
            v.clone(),
            &AttentionOptions::new(),
        ));
        assert!(what.contains("gradients"), "{what}");
        // Through the strategy, the kernel runs as a backend operation with its own backward
        // (`FlashAttentionOps`), so autodiff records it; a dropout it cannot apply is refused.
        let forced = AttentionOptions::new().with_strategy(Strategy::Native);
        let out = try_scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &forced)
            .expect("native is differentiable through its backend operation");
        assert!(out.context.is_tracked());
        assert!(matches!(
            try_scaled_dot_product_attention(
                q.clone(),
                k.clone(),
                v.clone(),
                &forced.clone().with_dropout(0.5)
            ),
            Err(AttentionError::StrategyCannot {
                strategy: "native",
                ..
            })
        ));
        // The automatic choice stays differentiable.
        let out = try_scaled_dot_product_attention(q, k, v, &AttentionOptions::new())
            .expect("auto falls back");
        assert!(out.context.is_tracked());
    }

    #[test]
    fn auto_trains_through_the_native_backward_from_the_threshold_on() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(8);
            let autodiff = d.device.clone().autodiff();
            for seq_len_kv in [
                crate::NATIVE_TRAINING_MIN_KEYS - 1,
                crate::NATIVE_TRAINING_MIN_KEYS,
            ] {
                let q = rng.tensor([1, 2, 5, 8], &d.device);
                let k = rng.tensor([1, 2, seq_len_kv, 8], &d.device);
                let v = rng.tensor([1, 2, seq_len_kv, 4], &d.device);
                let grads = |strategy| {
                    let on = |t: &Tensor<4>| {
                        Tensor::<4>::from_data(t.to_data(), &autodiff).require_grad()
                    };
                    let (qa, ka, va) = (on(&q), on(&k), on(&v));
                    let options = AttentionOptions::new()
                        .with_causal(CausalAlignment::BottomRight)
                        .with_strategy(strategy);
                    let out = try_scaled_dot_product_attention(
                        qa.clone(),
                        ka.clone(),
                        va.clone(),
                        &options,
                    )
                    .expect("valid problem")
                    .context;
                    let grads = out.sum().backward();
                    [&qa, &ka, &va].map(|t| {
                        Tensor::<4>::from_data(
                            t.grad(&grads).expect("in the graph").to_data(),
                            &d.device,
                        )
                    })
                };
                let what = format!("{} with {seq_len_kv} keys", d.name);
                for (auto, explicit) in grads(Strategy::Auto)
                    .into_iter()
                    .zip(grads(Strategy::Explicit))
                {
                    assert_tensors_close(auto, explicit, ATOL, RTOL, &what);
                }
            }
        });
    }
}
