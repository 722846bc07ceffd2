//! Attention as one backend operation with its own backward pass (FlashAttention-2), through
//! burn's backend-extension mechanism.
//!
//! [`FlashAttentionOps`] has two operations:
//!
//! - [`flash_attention`](FlashAttentionOps::flash_attention): the context and each query
//!   row's log-sum-exp `lse = ln Σ_j exp(s_j)` of its scaled, masked, biased scores `s`;
//! - [`flash_attention_backward`](FlashAttentionOps::flash_attention_backward): `dq`, `dk`,
//!   `dv` from `q`, `k`, `v`, the context, `lse` and `d_context`, recomputing each block of
//!   weights as `p = exp(s − lse)` instead of reading a stored `[seq_len_q, seq_len_kv]`
//!   matrix:
//!
//! ```text
//! D   = rowsum(d_context ∘ context)
//! dv += pᵀ · d_context              dp = d_context · vᵀ
//! ds  = p ∘ (dp − D)                dq += ds · k · scale,   dk += dsᵀ · q · scale
//! ```
//!
//! Implementations:
//! - flex and ndarray: the native CPU kernels (those of [`crate::native_attention`] and
//!   [`crate::native_attention_backward`]); flex lends its storage, so contiguous `f32`
//!   tensors are read in place, and ndarray's are read with `into_data`;
//! - the CubeCL backends (wgpu, Vulkan, Metal, CUDA): the same recurrences as block-by-block
//!   tensor operations (`chunked.rs`), whose memory also grows linearly with the length;
//! - `Autodiff<B>`: runs `B`'s forward and records one graph node whose backward calls `B`'s
//!   backward, so that training keeps only `q`, `k`, `v`, the context and `lse`.
//!
//! The backends are chosen by this crate's features (`flex`, `ndarray`, `wgpu`, ...);
//! [`flash_serves`] says whether a device's backend is among them, and the strategies fall back
//! to plain tensor operations where it is not.

mod autodiff;
#[cfg(any(
    feature = "wgpu",
    feature = "vulkan",
    feature = "metal",
    feature = "cuda"
))]
mod cube;

use std::borrow::Cow;

use burn::backend::{
    Backend, ExtensionType, TensorMetadata, backend_extension,
    tensor::{BoolTensor, FloatTensor},
    try_read_sync,
};
use burn::tensor::{DType, Device, FloatDType, Tensor, TensorData};

use crate::PreparedAttention;
use crate::native::{Host, backend_name, f32_vec};

/// The non-tensor arguments of [`FlashAttentionOps`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlashParams {
    /// The factor on `q·kᵀ`.
    pub scale: f64,
    /// Key `j` is masked for query `i` when `j > i + offset`.
    pub causal_offset: Option<i64>,
    /// Keys per block where the implementation takes a block size (the tensor-operation
    /// implementation on the CubeCL backends; the CPU kernels use their own tiling).
    pub block: usize,
}

/// The mask argument of [`FlashAttentionOps`] (`true` = the key is not attended).
#[derive(ExtensionType, Clone, Debug)]
pub enum Masking<B: Backend> {
    /// Every key is attended (apart from causality).
    Unmasked,
    /// A mask broadcasting to `[batch, n_heads, seq_len_q, seq_len_kv]`.
    Masked(BoolTensor<B>),
}

/// The bias argument of [`FlashAttentionOps`]: added to the scaled scores, no gradient.
#[derive(ExtensionType, Clone, Debug)]
pub enum Biasing<B: Backend> {
    /// No bias.
    Unbiased,
    /// A bias broadcasting to `[batch, n_heads, seq_len_q, seq_len_kv]`.
    Biased(FloatTensor<B>),
}

impl<B: Backend> Masking<B> {
    pub(crate) fn into_option(self) -> Option<BoolTensor<B>> {
        match self {
            Self::Unmasked => None,
            Self::Masked(mask) => Some(mask),
        }
    }
}

impl<B: Backend> Biasing<B> {
    pub(crate) fn into_option(self) -> Option<FloatTensor<B>> {
        match self {
            Self::Unbiased => None,
            Self::Biased(bias) => Some(bias),
        }
    }
}

/// Attention forward and backward as backend operations: FlashAttention-2, with the
/// weights recomputed in the backward pass from the log-sum-exp the forward returns.
///
/// Shapes: `q` `[batch, n_heads, seq_len_q, d_head]`; `k` `[batch, n_kv_heads, seq_len_kv,
/// d_head]` and `v` `[batch, n_kv_heads, seq_len_kv, d_value]` with `n_kv_heads` dividing
/// `n_heads`; `mask` (`true` = not attended) and `bias` broadcasting to `[batch, n_heads,
/// seq_len_q, seq_len_kv]`. The bias is a constant here: no gradient flows to it.
///
/// The default bodies run the native CPU kernels on the tensors' data read back to the host,
/// which is right for the CPU backends and correct (but slow) anywhere.
#[backend_extension(
    Flex: cfg(feature = "flex"),
    NdArray: cfg(feature = "ndarray"),
    Cube: cfg(any(feature = "wgpu", feature = "vulkan", feature = "metal", feature = "cuda")),
    Autodiff,
)]
pub trait FlashAttentionOps: Backend {
    /// The context `[batch, n_heads, seq_len_q, d_value]` and the log-sum-exp of each query
    /// row's scores `[batch, n_heads, seq_len_q]` (`−∞` for a row whose keys are all masked).
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        #[extension_type] mask: Masking<Self>,
        #[extension_type] bias: Biasing<Self>,
        params: FlashParams,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let host = host::<Self>(q.clone(), k, v, mask.into_option(), bias.into_option());
        host_forward::<Self>(&host, &q, params)
    }

    /// `(dq, dk, dv)`, shaped like `q`, `k` and `v`, given what
    /// [`flash_attention`](Self::flash_attention) returned for the same inputs and the
    /// gradient `d_context` of a loss with respect to the context.
    #[allow(clippy::too_many_arguments)]
    fn flash_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        #[extension_type] mask: Masking<Self>,
        #[extension_type] bias: Biasing<Self>,
        context: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_context: FloatTensor<Self>,
        params: FlashParams,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let host = host::<Self>(q.clone(), k, v, mask.into_option(), bias.into_option());
        let read = |t| f32_vec(read_float::<Self>(t));
        let [context, lse, d_context] = [context, lse, d_context].map(read);
        host_backward::<Self>(&host, &q, params, [&context, &lse, &d_context])
    }
}

/// flex lends its storage: contiguous `f32` tensors are read in place, without a copy.
#[cfg(feature = "flex")]
impl FlashAttentionOps for burn::backend::Flex {
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: Masking<Self>,
        bias: Biasing<Self>,
        params: FlashParams,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let host = flex_host(&q, &k, &v, mask, bias);
        host_forward::<Self>(&host, &q, params)
    }

    fn flash_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: Masking<Self>,
        bias: Biasing<Self>,
        context: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_context: FloatTensor<Self>,
        params: FlashParams,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        let host = flex_host(&q, &k, &v, mask, bias);
        let [context, lse, d_context] = [&context, &lse, &d_context].map(flex_floats);
        host_backward::<Self>(&host, &q, params, [&context, &lse, &d_context])
    }
}

/// A flex tensor's values as `f32`: its own storage when that is contiguous `f32`.
#[cfg(feature = "flex")]
fn flex_floats(t: &burn::backend::flex::FlexTensor) -> Cow<'_, [f32]> {
    match t.as_slice::<f32>() {
        Some(values) => Cow::Borrowed(values),
        None => Cow::Owned(f32_vec(t.clone().into_data())),
    }
}

#[cfg(feature = "flex")]
fn flex_host<'a>(
    q: &'a burn::backend::flex::FlexTensor,
    k: &'a burn::backend::flex::FlexTensor,
    v: &'a burn::backend::flex::FlexTensor,
    mask: Masking<burn::backend::Flex>,
    bias: Biasing<burn::backend::Flex>,
) -> Host<'a> {
    type F = burn::backend::Flex;
    Host::from_parts(
        [q, k, v].map(flex_floats),
        [q, k, v].map(dims4),
        mask.into_option().map(read_bool::<F>),
        bias.into_option().map(read_float::<F>),
    )
}

#[cfg(feature = "ndarray")]
impl FlashAttentionOps for burn::backend::NdArray {}

/// Whether [`FlashAttentionOps`] is implemented for `device`'s backend in this build: flex,
/// ndarray and the CubeCL backends, each when this crate's feature of that name is on (and
/// with or without autodiff).
pub fn flash_serves(device: &Device) -> bool {
    let backend = backend_name(device);
    (cfg!(feature = "flex") && backend.starts_with("Flex"))
        || (cfg!(feature = "ndarray") && backend.starts_with("NdArray"))
        || (cfg!(any(
            feature = "wgpu",
            feature = "vulkan",
            feature = "metal",
            feature = "cuda"
        )) && backend.starts_with("Cube"))
}

/// Attention through [`FlashAttentionOps`]: the context and the log-sum-exp
/// `[batch, n_heads, seq_len_q]`. On an autodiff device, gradients flow to `q`, `k` and `v`
/// through the operation's own backward; the bias must not require gradients (callers check).
pub(crate) fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
    block: usize,
) -> (Tensor<4>, Tensor<3>) {
    let params = FlashParams {
        scale: plan.scale,
        causal_offset: plan.causal_offset,
        block,
    };
    let (context, lse) = <burn::backend::Dispatch as FlashAttentionOps>::flash_attention(
        q.into_dispatch(),
        k.into_dispatch(),
        v.into_dispatch(),
        match &plan.mask {
            Some(mask) => Masking::Masked(mask.clone().into_dispatch()),
            None => Masking::Unmasked,
        },
        match &plan.bias {
            Some(bias) => Biasing::Biased(bias.clone().into_dispatch()),
            None => Biasing::Unbiased,
        },
        params,
    );
    (Tensor::from_dispatch(context), Tensor::from_dispatch(lse))
}

/// Reads the inputs of one operation into host memory.
fn host<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    mask: Option<BoolTensor<B>>,
    bias: Option<FloatTensor<B>>,
) -> Host<'static> {
    Host::from_data(
        read_float::<B>(q),
        read_float::<B>(k),
        read_float::<B>(v),
        mask.map(read_bool::<B>),
        bias.map(read_float::<B>),
    )
}

/// The forward on the host: the context and the log-sum-exp as tensors of `B`, on `like`'s
/// device and in its float type.
fn host_forward<B: Backend>(
    host: &Host<'_>,
    like: &FloatTensor<B>,
    params: FlashParams,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let (device, dtype) = (like.device(), like.dtype());
    let [batch, n_heads, seq_len_q, _] = host.scores_shape();
    let (context, lse) = host.forward(params.scale as f32, params.causal_offset, true);
    let d_value = context.len() / (batch * n_heads * seq_len_q).max(1);
    (
        from_host::<B>(
            context,
            vec![batch, n_heads, seq_len_q, d_value],
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

/// The backward on the host: `(dq, dk, dv)` as tensors of `B`, shaped like `q`, `k`, `v`.
fn host_backward<B: Backend>(
    host: &Host<'_>,
    like: &FloatTensor<B>,
    params: FlashParams,
    [context, lse, d_context]: [&[f32]; 3],
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let (device, dtype) = (like.device(), like.dtype());
    let [q_shape, k_shape, v_shape] = host.input_shapes().map(|s| s.to_vec());
    let [dq, dk, dv] = host.backward(
        params.scale as f32,
        params.causal_offset,
        context,
        lse,
        d_context,
    );
    (
        from_host::<B>(dq, q_shape, dtype, &device),
        from_host::<B>(dk, k_shape, dtype, &device),
        from_host::<B>(dv, v_shape, dtype, &device),
    )
}

fn dims4<T: TensorMetadata>(t: &T) -> [usize; 4] {
    t.shape()
        .as_slice()
        .try_into()
        .expect("attention inputs have four dimensions")
}

fn read_float<B: Backend>(t: FloatTensor<B>) -> TensorData {
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

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::device_for;

    #[test]
    fn serves_every_backend_the_tests_build_with_and_without_autodiff() {
        // attn-testing turns on this crate's flex, ndarray and wgpu features.
        for name in ["flex", "ndarray", "wgpu"] {
            let device = device_for(name).expect("a backend name");
            assert!(flash_serves(&device), "{name}");
            assert!(flash_serves(&device.autodiff()), "{name} with autodiff");
        }
    }
}
