//! The host bridge between burn tensors and the `attn-kernels` passes.
//!
//! It reads burn tensors (or a backend's primitives) into [`HostInputs`], `f32` buffers in
//! host memory with their shapes, hands the passes a [`Problem`] over those buffers, and makes
//! burn tensors of the buffers the passes write. flex lends its storage, so `f32` flex tensors
//! whose rows are contiguous are read in place, whatever their strides: a row-major tensor, the
//! heads split off a projection (its middle axes swapped), the filled rows of a key/value
//! cache. Every other tensor is read with `into_data`, an `O(seq_len · d_head)` copy against
//! `O(seq_len² · d_head)` work.

// Without a backend feature, the bridge from backend primitives has no caller.
#![cfg_attr(
    not(any(feature = "flex", feature = "ndarray", feature = "cube")),
    allow(dead_code, unused_imports)
)]

use std::borrow::Cow;

use burn::backend::{
    Backend, TensorMetadata,
    tensor::{BoolTensor, FloatTensor},
    try_read_sync,
};
use burn::tensor::{DType, FloatDType, Tensor, TensorData};

use crate::PreparedAttention;
use attn_kernels::{Broadcast, Gradients, Problem, Rows};

/// Copies the inputs to the host, runs the forward pass, and builds the context and (when
/// asked for) the log-sum-exp on `q`'s device, in `q`'s float type.
pub(super) fn forward_tensors(
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
    let (context, lse) = with_host_inputs(q, k, v, plan, |host| {
        host.forward(plan.scale as f32, plan.causal_offset, want_lse)
    });
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

/// Copies the inputs to the host, runs the decode pass, and builds the context on `q`'s
/// device, in `q`'s float type.
pub(super) fn decode_tensors(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
) -> Tensor<4> {
    let [batch, n_heads, seq_len_q, _] = plan.scores_shape;
    let d_value = v.dims()[3];
    let device = q.device();
    let dtype = q.dtype();
    let mut context = vec![0.0; batch * n_heads * seq_len_q * d_value];
    with_host_inputs(q, k, v, plan, |host| {
        let problem = host.problem(plan.scale as f32, plan.causal_offset);
        attn_kernels::decode_attention(&problem, &mut context, None);
    });
    Tensor::<4>::from_data(
        TensorData::new(context, [batch, n_heads, seq_len_q, d_value]),
        &device,
    )
    .cast(dtype)
}

/// Runs `run` on the inputs in host memory: flex's storage where it can be read in place
/// (whatever the strides of rows that are contiguous), a copy otherwise.
fn with_host_inputs<R>(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
    run: impl FnOnce(&HostInputs<'_>) -> R,
) -> R {
    #[cfg(feature = "flex")]
    {
        let flex = [&q, &k, &v].map(|t| t.clone().try_into_primitive::<burn::backend::Flex>().ok());
        if let [Some(q), Some(k), Some(v)] = &flex {
            return run(&HostInputs::from_flex_data(
                [q, k, v],
                plan.mask.clone().map(|m| m.into_data()),
                plan.bias.clone().map(|b| b.into_data()),
            ));
        }
    }
    run(&HostInputs::from_tensors(q, k, v, plan))
}

/// Copies the inputs, the forward's outputs and `d_context` to the host, runs the backward
/// pass, and builds `[dq, dk, dv]` on `q`'s device, in `q`'s float type, shaped like `q`, `k`
/// and `v`.
pub(super) fn backward_tensors(
    [q, k, v]: [Tensor<4>; 3],
    plan: &PreparedAttention,
    context: Tensor<4>,
    lse: Tensor<3>,
    d_context: Tensor<4>,
) -> [Tensor<4>; 3] {
    let device = q.device();
    let dtype = q.dtype();
    let host = HostInputs::from_tensors(q, k, v, plan);
    let [(context_dims, context), (d_context_dims, d_context)] =
        [context, d_context].map(|t| (t.dims(), floats(t)));
    let gradients = host.backward(
        plan.scale as f32,
        plan.causal_offset,
        Rows::row_major(slice(&context), context_dims),
        slice(&floats(lse)),
        Rows::row_major(slice(&d_context), d_context_dims),
    );
    let shapes = host.input_shapes();
    let mut tensors = gradients.into_iter().zip(shapes).map(|(data, shape)| {
        Tensor::<4>::from_data(TensorData::new(data, shape), &device).cast(dtype)
    });
    std::array::from_fn(|_| tensors.next().expect("three gradients"))
}

/// One problem's inputs in host memory as `f32` (booleans for the mask), with their shapes.
///
/// The values are borrowed where a backend lends its storage (flex, for contiguous `f32`
/// tensors) and owned copies otherwise.
pub(crate) struct HostInputs<'a> {
    /// `[batch, n_heads, seq_len_q, d_head]`.
    q: HostRows<'a>,
    /// `[batch, n_kv_heads, seq_len_kv, d_head]`.
    k: HostRows<'a>,
    /// `[batch, n_kv_heads, seq_len_kv, d_value]`.
    v: HostRows<'a>,
    mask: Option<([usize; 4], Vec<bool>)>,
    bias: Option<([usize; 4], Cow<'a, [f32]>)>,
}

/// A four-dimensional `f32` tensor in host memory: its values (a backend's own storage, or a
/// row-major copy), its shape, and the strides of its batch, head and row axes (its rows are
/// contiguous).
pub(crate) struct HostRows<'a> {
    values: Cow<'a, [f32]>,
    dims: [usize; 4],
    strides: [usize; 3],
}

impl<'a> HostRows<'a> {
    /// Row-major values of shape `dims`.
    pub(crate) fn row_major(values: Cow<'a, [f32]>, dims: [usize; 4]) -> Self {
        let [_, heads, rows, width] = dims;
        Self {
            values,
            dims,
            strides: [heads * rows * width, rows * width, width],
        }
    }

    /// The kernels' view.
    pub(crate) fn rows(&self) -> Rows<'_> {
        Rows {
            data: &self.values,
            heads: self.dims[1],
            width: self.dims[3],
            strides: self.strides,
        }
    }

    /// Elements of the tensor (not of the buffer it lies in).
    fn len(&self) -> usize {
        self.dims.iter().product()
    }
}

impl<'a> HostInputs<'a> {
    /// Reads burn tensors into host memory.
    fn from_tensors(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, plan: &PreparedAttention) -> Self {
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
    fn from_data(
        q: TensorData,
        k: TensorData,
        v: TensorData,
        mask: Option<TensorData>,
        bias: Option<TensorData>,
    ) -> Self {
        let [q, k, v] = [q, k, v].map(|data| {
            let dims = data_dims(&data);
            HostRows::row_major(Cow::Owned(f32_vec(data)), dims)
        });
        Self::from_parts([q, k, v], mask, bias)
    }

    /// `q`, `k`, `v` in host memory (borrowed from a backend's storage where it allows); the
    /// mask and bias as data read from the backend.
    fn from_parts(
        [q, k, v]: [HostRows<'a>; 3],
        mask: Option<TensorData>,
        bias: Option<TensorData>,
    ) -> Self {
        Self {
            q,
            k,
            v,
            mask: mask.map(|m| (data_dims(&m), bool_vec(m))),
            bias: bias.map(|b| (data_dims(&b), Cow::Owned(f32_vec(b)))),
        }
    }

    /// The shapes of `q`, `k` and `v`.
    fn input_shapes(&self) -> [[usize; 4]; 3] {
        [self.q.dims, self.k.dims, self.v.dims]
    }

    /// `[batch, n_heads, seq_len_q, seq_len_kv]`.
    fn scores_shape(&self) -> [usize; 4] {
        let [batch, n_heads, seq_len_q, _] = self.q.dims;
        [batch, n_heads, seq_len_q, self.k.dims[2]]
    }

    /// The kernel's view of these inputs.
    fn problem(&self, scale: f32, causal_offset: Option<i64>) -> Problem<'_> {
        let [batch, n_heads, seq_len_q, seq_len_kv] = self.scores_shape();
        let [_, n_kv_heads, _, d_head] = self.k.dims;
        Problem {
            q: self.q.rows(),
            k: self.k.rows(),
            v: self.v.rows(),
            batch,
            n_heads,
            n_kv_heads,
            seq_len_q,
            seq_len_kv,
            d_head,
            d_value: self.v.dims[3],
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
    fn forward(
        &self,
        scale: f32,
        causal_offset: Option<i64>,
        want_lse: bool,
    ) -> (Vec<f32>, Option<Vec<f32>>) {
        let [batch, n_heads, seq_len_q, _] = self.scores_shape();
        let mut context = vec![0.0; batch * n_heads * seq_len_q * self.v.dims[3]];
        let mut lse = want_lse.then(|| vec![0.0; batch * n_heads * seq_len_q]);
        attn_kernels::attention(
            &self.problem(scale, causal_offset),
            &mut context,
            lse.as_deref_mut(),
        );
        (context, lse)
    }

    /// `[dq, dk, dv]`, row-major and shaped like `q`, `k` and `v`, from the forward's context
    /// and log-sum-exp and the gradient of the context.
    fn backward(
        &self,
        scale: f32,
        causal_offset: Option<i64>,
        context: Rows<'_>,
        lse: &[f32],
        d_context: Rows<'_>,
    ) -> [Vec<f32>; 3] {
        let mut dq = vec![0.0; self.q.len()];
        let mut dk = vec![0.0; self.k.len()];
        let mut dv = vec![0.0; self.v.len()];
        attn_kernels::attention_backward(
            &self.problem(scale, causal_offset),
            context,
            lse,
            d_context,
            Gradients {
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
fn to_f32(data: TensorData) -> TensorData {
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
fn slice(data: &TensorData) -> &[f32] {
    data.as_slice::<f32>().expect("floats() made f32 data")
}

#[cfg(any(feature = "ndarray", feature = "cube"))]
impl HostInputs<'static> {
    /// The inputs of one backend operation, read back from backend `B` (synchronously: the
    /// CPU backends' reads complete at once).
    pub(crate) fn from_primitives<B: Backend>(
        q: FloatTensor<B>,
        k: FloatTensor<B>,
        v: FloatTensor<B>,
        mask: Option<BoolTensor<B>>,
        bias: Option<FloatTensor<B>>,
    ) -> Self {
        Self::from_data(
            read_float::<B>(q),
            read_float::<B>(k),
            read_float::<B>(v),
            mask.map(read_bool::<B>),
            bias.map(read_float::<B>),
        )
    }
}

#[cfg(feature = "flex")]
impl<'a> HostInputs<'a> {
    /// flex's inputs, borrowing the storage of `f32` tensors whose rows are contiguous.
    pub(crate) fn from_flex(
        [q, k, v]: [&'a burn::backend::flex::FlexTensor; 3],
        mask: Option<BoolTensor<burn::backend::Flex>>,
        bias: Option<FloatTensor<burn::backend::Flex>>,
    ) -> Self {
        type F = burn::backend::Flex;
        Self::from_parts(
            [q, k, v].map(flex_rows),
            mask.map(read_bool::<F>),
            bias.map(read_float::<F>),
        )
    }

    /// The same, with the mask and bias already read as data.
    pub(crate) fn from_flex_data(
        [q, k, v]: [&'a burn::backend::flex::FlexTensor; 3],
        mask: Option<TensorData>,
        bias: Option<TensorData>,
    ) -> Self {
        Self::from_parts([q, k, v].map(flex_rows), mask, bias)
    }
}

impl HostInputs<'_> {
    /// The forward pass: the context and the log-sum-exp as tensors of `B`, on `like`'s
    /// device and in its float type.
    pub(crate) fn forward_primitives<B: Backend>(
        &self,
        like: &FloatTensor<B>,
        scale: f64,
        causal_offset: Option<i64>,
    ) -> (FloatTensor<B>, FloatTensor<B>) {
        let (device, dtype) = (like.device(), like.dtype());
        let [batch, n_heads, seq_len_q, _] = self.scores_shape();
        let (context, lse) = self.forward(scale as f32, causal_offset, true);
        (
            from_host::<B>(
                context,
                vec![batch, n_heads, seq_len_q, self.v.dims[3]],
                dtype,
                &device,
            ),
            from_host::<B>(
                lse.expect("the log-sum-exp was asked for"),
                vec![batch, n_heads, seq_len_q],
                dtype,
                &device,
            ),
        )
    }

    /// The backward pass: `(dq, dk, dv)` as tensors of `B`, shaped like `q`, `k`, `v`.
    pub(crate) fn backward_primitives<B: Backend>(
        &self,
        like: &FloatTensor<B>,
        scale: f64,
        causal_offset: Option<i64>,
        [context, d_context]: [Rows<'_>; 2],
        lse: &[f32],
    ) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
        let (device, dtype) = (like.device(), like.dtype());
        let [q_shape, k_shape, v_shape] = self.input_shapes().map(|s| s.to_vec());
        let [dq, dk, dv] = self.backward(scale as f32, causal_offset, context, lse, d_context);
        (
            from_host::<B>(dq, q_shape, dtype, &device),
            from_host::<B>(dk, k_shape, dtype, &device),
            from_host::<B>(dv, v_shape, dtype, &device),
        )
    }
}

/// A flex tensor in host memory: its own storage when it is `f32` with contiguous rows and
/// non-negative strides (whatever the order of its other axes), a row-major copy otherwise.
#[cfg(feature = "flex")]
pub(crate) fn flex_rows(t: &burn::backend::flex::FlexTensor) -> HostRows<'_> {
    let dims = dims4(t);
    in_place_rows(t, dims)
        .unwrap_or_else(|| HostRows::row_major(Cow::Owned(f32_vec(t.clone().into_data())), dims))
}

/// [`flex_rows`] without the copy: `None` where the storage cannot be read as it is.
#[cfg(feature = "flex")]
fn in_place_rows(t: &burn::backend::flex::FlexTensor, dims: [usize; 4]) -> Option<HostRows<'_>> {
    if t.dtype() != DType::F32 || dims.contains(&0) {
        return None;
    }
    let layout = t.layout();
    let strides: [isize; 4] = layout.strides().try_into().ok()?;
    // An axis of one element is never stepped along, whatever its stride says.
    let stride = |axis: usize| {
        if dims[axis] == 1 {
            Some(0)
        } else {
            usize::try_from(strides[axis]).ok()
        }
    };
    let [s_batch, s_head, s_row, s_col] = [0, 1, 2, 3].map(stride);
    if s_col != Some(0) && s_col != Some(1) {
        return None;
    }
    let strides = [s_batch?, s_head?, s_row?];
    let last = (0..3)
        .map(|axis| (dims[axis] - 1) * strides[axis])
        .sum::<usize>()
        + dims[3];
    let storage = t.storage::<f32>().get(layout.start_offset()..)?;
    (storage.len() >= last).then_some(HostRows {
        values: Cow::Borrowed(storage),
        dims,
        strides,
    })
}

/// A flex tensor's values as `f32`: its own storage when that is contiguous `f32`.
#[cfg(feature = "flex")]
pub fn flex_floats(t: &burn::backend::flex::FlexTensor) -> Cow<'_, [f32]> {
    match t.as_slice::<f32>() {
        Some(values) => Cow::Borrowed(values),
        None => Cow::Owned(f32_vec(t.clone().into_data())),
    }
}

#[cfg(feature = "flex")]
fn dims4<T: TensorMetadata>(t: &T) -> [usize; 4] {
    t.shape()
        .as_slice()
        .try_into()
        .expect("attention inputs have four dimensions")
}

/// A float primitive's data, read synchronously.
pub(crate) fn read_float<B: Backend>(t: FloatTensor<B>) -> TensorData {
    try_read_sync(B::float_into_data(t))
        .expect("the CPU backends read synchronously")
        .expect("reading a float tensor")
}

fn read_bool<B: Backend>(t: BoolTensor<B>) -> TensorData {
    try_read_sync(B::bool_into_data(t))
        .expect("the CPU backends read synchronously")
        .expect("reading a mask")
}

/// Host `f32` values as a tensor of `B` in `dtype`.
fn from_host<B: Backend>(
    values: Vec<f32>,
    shape: Vec<usize>,
    dtype: DType,
    device: &B::Device,
) -> FloatTensor<B> {
    let t = B::float_from_data(TensorData::new(values, shape), device);
    if dtype == DType::F32 {
        t
    } else {
        B::float_cast(t, FloatDType::from(dtype))
    }
}
