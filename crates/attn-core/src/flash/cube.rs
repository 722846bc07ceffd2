//! [`FlashKernel::Cube`](super::FlashKernel::Cube) on the CubeCL backends: the GPU kernels of
//! `attn_kernels::cube`, forward and FlashAttention-2 backward, as one backend operation.
//!
//! burn's CubeCL backend is `Fusion<CubeBackend>`: tensor operations are recorded and run
//! later, fused where they can be. The kernels are launched on `CubeBackend`'s own tensors
//! (their buffers, shapes and strides) through a second backend extension, [`CubeFlashOps`],
//! whose `Fusion` implementation burn's macro generates: fusion records each call as one opaque
//! operation and launches it in order with the rest.
//!
//! The kernels read the mask and the bias as one additive tensor, the offsets (`f32::MIN` where a
//! key is masked, the bias elsewhere), built here with tensor operations in the shape the two
//! broadcast to together: no larger than the larger of them when one broadcasts to the other
//! (a padding mask with no bias, ALiBi's bias with no mask, a causal window as a mask).

use burn::backend::fusion::custom::TensorSpec;
use burn::backend::{Backend, backend_extension, tensor::FloatTensor};
use burn::tensor::{Bool, DType, Shape, Tensor, TensorData};
use burn_cubecl::{CubeBackend, kernel::untile, ops::numeric::empty_device_contiguous_dtype};

use attn_kernels::cube::{self as kernels, Settings};

use super::blocks::Primitives;
use super::params::{Biasing, FlashParams, Masking};

type Cube = burn::backend::Cube;

/// The GPU kernels on one backend's primitives. `offsets` is read only when
/// `settings.offsets` is set.
#[backend_extension(Cube, Fusion)]
pub trait CubeFlashOps: Backend {
    /// The context `[batch, n_heads, seq_len_q, d_value]` and the log-sum-exp `[batch, n_heads,
    /// seq_len_q]`.
    #[fusion(meta = forward_specs)]
    fn cube_flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        offsets: FloatTensor<Self>,
        settings: Settings,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// `dq` and `dk` and `dv` side by side (`[batch, n_kv_heads, seq_len_kv, d_head +
    /// d_value]`).
    #[allow(clippy::too_many_arguments)]
    #[fusion(meta = backward_specs)]
    fn cube_flash_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        offsets: FloatTensor<Self>,
        context: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_context: FloatTensor<Self>,
        settings: Settings,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
}

/// The four sizes of an attention tensor's shape.
fn dims(shape: &Shape) -> [usize; 4] {
    shape
        .as_slice()
        .try_into()
        .expect("attention tensors have four dimensions")
}

/// What [`CubeFlashOps::cube_flash_attention`] returns, described before it runs.
fn forward_specs(
    q: &TensorSpec,
    _k: &TensorSpec,
    v: &TensorSpec,
    _offsets: &TensorSpec,
    _settings: &Settings,
) -> (TensorSpec, TensorSpec) {
    let [batch, n_heads, seq_len_q, _] = dims(&q.shape);
    let d_value = dims(&v.shape)[3];
    (
        TensorSpec::new([batch, n_heads, seq_len_q, d_value].into(), q.dtype),
        TensorSpec::new([batch, n_heads, seq_len_q].into(), q.dtype),
    )
}

/// What [`CubeFlashOps::cube_flash_attention_backward`] returns, described before it runs.
#[allow(clippy::too_many_arguments)]
fn backward_specs(
    q: &TensorSpec,
    k: &TensorSpec,
    v: &TensorSpec,
    _offsets: &TensorSpec,
    _context: &TensorSpec,
    _lse: &TensorSpec,
    _d_context: &TensorSpec,
    _settings: &Settings,
) -> (TensorSpec, TensorSpec) {
    let [batch, n_kv_heads, seq_len_kv, d_head] = dims(&k.shape);
    let d_value = dims(&v.shape)[3];
    let width = d_head + d_value;
    (
        q.clone(),
        TensorSpec::new([batch, n_kv_heads, seq_len_kv, width].into(), q.dtype),
    )
}

/// The element type a kernel is compiled for.
fn elem_type(dtype: DType) -> burn_cubecl::cubecl::ir::ElemType {
    burn::backend::cubecl::dtype_to_storage_type(dtype)
}

/// A fresh contiguous tensor beside `like`, its values to be written by a kernel.
fn empty_like(like: &burn_cubecl::tensor::CubeTensor, shape: [usize; 4]) -> CubeTensorOf {
    empty_device_contiguous_dtype(
        like.client.clone(),
        like.device.clone(),
        shape.into(),
        like.dtype,
    )
}

type CubeTensorOf = burn_cubecl::tensor::CubeTensor;

impl CubeFlashOps for CubeBackend {
    fn cube_flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        offsets: FloatTensor<Self>,
        settings: Settings,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let [q, k, v, offsets] = [q, k, v, offsets].map(untile);
        let [batch, n_heads, seq_len_q, _] = dims(q.meta.shape());
        let d_value = dims(v.meta.shape())[3];
        let context = empty_like(&q, [batch, n_heads, seq_len_q, d_value]);
        let lse = empty_device_contiguous_dtype(
            q.client.clone(),
            q.device.clone(),
            [batch, n_heads, seq_len_q].into(),
            q.dtype,
        );
        let (client, dtype) = (q.client.clone(), elem_type(q.dtype));
        let inputs = kernels::Inputs {
            q: q.binding(),
            k: k.binding(),
            v: v.binding(),
            offsets: offsets.binding(),
        };
        let [out, log] = [&context, &lse].map(|t| t.clone().binding());
        kernels::forward(&client, inputs, out, log, settings, dtype);
        (context, lse)
    }

    fn cube_flash_attention_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        offsets: FloatTensor<Self>,
        context: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_context: FloatTensor<Self>,
        settings: Settings,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let [q, k, v, offsets, context, lse, d_context] =
            [q, k, v, offsets, context, lse, d_context].map(untile);
        let [batch, n_heads, seq_len_q, d_head] = dims(q.meta.shape());
        let [_, n_kv_heads, seq_len_kv, _] = dims(k.meta.shape());
        let d_value = dims(v.meta.shape())[3];
        let stats = empty_like(&q, [batch, n_heads, seq_len_q, 2]);
        let dq = empty_like(&q, [batch, n_heads, seq_len_q, d_head]);
        let dkdv = empty_like(&q, [batch, n_kv_heads, seq_len_kv, d_head + d_value]);
        let (client, dtype) = (q.client.clone(), elem_type(q.dtype));
        let inputs = kernels::Inputs {
            q: q.binding(),
            k: k.binding(),
            v: v.binding(),
            offsets: offsets.binding(),
        };
        let outputs = kernels::Outputs {
            context: context.binding(),
            lse: lse.binding(),
            d_context: d_context.binding(),
        };
        let gradients = kernels::Gradients {
            stats: stats.binding(),
            dq: dq.clone().binding(),
            dkdv: dkdv.clone().binding(),
        };
        kernels::backward(&client, inputs, outputs, gradients, settings, dtype);
        (dq, dkdv)
    }
}

/// Whether the kernels take this problem: `float32` tensors whose head dimensions are at most
/// `attn_kernels::cube::MAX_HEAD_DIM` (256).
pub(crate) fn serves(q: &Tensor<4>, v: &Tensor<4>) -> bool {
    let [.., d_head] = q.dims();
    let [.., d_value] = v.dims();
    q.dtype() == DType::F32 && kernels::serves(d_head, d_value)
}

/// The offsets tensor and the kernels' settings for the operation's arguments.
fn prepare(
    q: &Tensor<4>,
    mask: Masking<Cube>,
    bias: Biasing<Cube>,
    params: FlashParams,
) -> (Tensor<4>, Settings) {
    let device = q.device();
    let mask = mask.into_option().map(Cube::boolean);
    let bias = bias.into_option().map(Cube::float::<4>);
    let offsets = offsets(mask, bias);
    let settings = Settings {
        scale: params.scale as f32,
        causal_offset: params.causal_offset,
        offsets: offsets.is_some(),
    };
    // A one-element tensor stands in where there is nothing to add; the kernels do not read it.
    let offsets = offsets
        .unwrap_or_else(|| Tensor::from_data(TensorData::new(vec![0.0f32], [1, 1, 1, 1]), &device));
    (offsets, settings)
}

/// The mask and the bias as one additive tensor: the bias, [`kernels::MASKED_OFFSET`] where the
/// mask is set.
fn offsets(mask: Option<Tensor<4, Bool>>, bias: Option<Tensor<4>>) -> Option<Tensor<4>> {
    match (mask, bias) {
        (None, None) => None,
        (None, Some(bias)) => Some(bias),
        (Some(mask), None) => {
            let zeros = Tensor::<4>::zeros(mask.dims(), &mask.device());
            Some(zeros.mask_fill(mask, kernels::MASKED_OFFSET))
        }
        (Some(mask), Some(bias)) => {
            let [m, b] = [mask.dims(), bias.dims()];
            let shape: [usize; 4] = std::array::from_fn(|d| m[d].max(b[d]));
            Some(
                bias.expand(shape)
                    .mask_fill(mask.expand(shape), kernels::MASKED_OFFSET),
            )
        }
    }
}

/// The forward pass: the context and the log-sum-exp.
pub(super) fn forward(
    q: FloatTensor<Cube>,
    k: FloatTensor<Cube>,
    v: FloatTensor<Cube>,
    mask: Masking<Cube>,
    bias: Biasing<Cube>,
    params: FlashParams,
) -> (FloatTensor<Cube>, FloatTensor<Cube>) {
    let (offsets, settings) = prepare(&Cube::float(q.clone()), mask, bias, params);
    <Cube as CubeFlashOps>::cube_flash_attention(q, k, v, Cube::primitive(offsets), settings)
}

/// The backward pass: `(dq, dk, dv)`.
pub(super) fn backward(
    q: FloatTensor<Cube>,
    k: FloatTensor<Cube>,
    v: FloatTensor<Cube>,
    mask: Masking<Cube>,
    bias: Biasing<Cube>,
    [context, lse, d_context]: [FloatTensor<Cube>; 3],
    params: FlashParams,
) -> (FloatTensor<Cube>, FloatTensor<Cube>, FloatTensor<Cube>) {
    let [.., d_head] = Cube::float::<4>(q.clone()).dims();
    let (offsets, settings) = prepare(&Cube::float(q.clone()), mask, bias, params);
    let (dq, dkdv) = <Cube as CubeFlashOps>::cube_flash_attention_backward(
        q,
        k,
        v,
        Cube::primitive(offsets),
        context,
        lse,
        d_context,
        settings,
    );
    let dkdv = Cube::float::<4>(dkdv);
    let width = dkdv.dims()[3];
    let dk = dkdv.clone().narrow(3, 0, d_head);
    let dv = dkdv.narrow(3, d_head, width - d_head);
    (dq, Cube::primitive(dk), Cube::primitive(dv))
}
