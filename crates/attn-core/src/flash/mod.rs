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
//! [`FlashParams::kernel`] picks one of two implementations of the same recurrences, and every
//! backend honours it:
//! - [`FlashKernel::Native`]: the native CPU kernels (those of [`crate::native_attention`] and
//!   [`crate::native_attention_backward`]); flex lends its storage, so contiguous `f32`
//!   tensors are read in place, and the other backends' are read back with `into_data`;
//! - [`FlashKernel::Blocks`]: the block-by-block tensor operations of `chunked.rs`
//!   (`blocks.rs`), on the backend's own tensor kernels, whose memory grows linearly with the
//!   length.
//!
//! Implemented for flex, ndarray and the CubeCL backends (wgpu, Vulkan, Metal, CUDA), and for
//! `Autodiff<B>`: it runs `B`'s forward and records one graph node whose backward calls `B`'s
//! backward with the same kernel, so that training keeps only `q`, `k`, `v`, the context and
//! `lse`. A tracked bias is the node's fourth parent; its gradient comes from
//! [`flash_attention_bias_backward`](FlashAttentionOps::flash_attention_bias_backward), block
//! by block of keys in tensor operations.
//!
//! The backends are chosen by this crate's features (`flex`, `ndarray`, `wgpu`, ...);
//! [`flash_serves`] says whether a device's backend is among them, and the strategies fall back
//! to plain tensor operations where it is not.

// Without a backend feature, no backend implements the operation.
#![cfg_attr(
    not(any(feature = "flex", feature = "ndarray", feature = "cube")),
    allow(dead_code, unused_imports)
)]

mod autodiff;
#[cfg(any(feature = "flex", feature = "ndarray", feature = "cube"))]
mod blocks;
#[cfg(feature = "cube")]
mod cube;
mod params;
#[cfg(feature = "cube")]
pub(crate) use cube::serves as cube_serves;

use burn::backend::{Backend, backend_extension, tensor::FloatTensor};
use burn::tensor::{Device, Tensor};

pub use params::{Biasing, FlashKernel, FlashParams, Masking};

use crate::PreparedAttention;
use crate::backend::BackendKind;
use crate::native::host::HostInputs;

/// Attention forward and backward as backend operations: FlashAttention-2, with the
/// weights recomputed in the backward pass from the log-sum-exp the forward returns.
///
/// Shapes: `q` `[batch, n_heads, seq_len_q, d_head]`; `k` `[batch, n_kv_heads, seq_len_kv,
/// d_head]` and `v` `[batch, n_kv_heads, seq_len_kv, d_value]` with `n_kv_heads` dividing
/// `n_heads`; `mask` (`true` = not attended) and `bias` broadcasting to `[batch, n_heads,
/// seq_len_q, seq_len_kv]`. [`flash_attention_backward`](Self::flash_attention_backward)
/// treats the bias as a constant; [`flash_attention_bias_backward`](Self::flash_attention_bias_backward)
/// gives its gradient, which `Autodiff<B>` asks for when the bias is tracked.
///
/// Every implementation honours [`FlashParams::kernel`].
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
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

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
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);

    /// The gradient of a bias, shaped like `bias`: `ds = p ∘ (d_context · vᵀ − D)` summed over
    /// the dimensions the bias broadcasts along, with `p` recomputed from `lse` block by block
    /// of keys in the backend's tensor operations, whichever [`FlashParams::kernel`] computed
    /// the rest. Beside the gradient (the bias's own size), nothing larger than `[batch,
    /// n_heads, seq_len_q, block]` is held.
    #[allow(clippy::too_many_arguments)]
    fn flash_attention_bias_backward(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        #[extension_type] mask: Masking<Self>,
        bias: FloatTensor<Self>,
        context: FloatTensor<Self>,
        lse: FloatTensor<Self>,
        d_context: FloatTensor<Self>,
        params: FlashParams,
    ) -> FloatTensor<Self>;
}

/// [`FlashAttentionOps::flash_attention_bias_backward`] as every backend implements it: block by
/// block of keys in the backend's tensor operations (`blocks::bias_backward`).
#[cfg(any(feature = "flex", feature = "ndarray", feature = "cube"))]
macro_rules! bias_backward_in_blocks {
    () => {
        fn flash_attention_bias_backward(
            q: FloatTensor<Self>,
            k: FloatTensor<Self>,
            v: FloatTensor<Self>,
            mask: Masking<Self>,
            bias: FloatTensor<Self>,
            context: FloatTensor<Self>,
            lse: FloatTensor<Self>,
            d_context: FloatTensor<Self>,
            params: FlashParams,
        ) -> FloatTensor<Self> {
            let outputs = [context, lse, d_context];
            blocks::bias_backward::<Self>(q, k, v, mask, bias, outputs, params)
        }
    };
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
        match params.kernel {
            FlashKernel::Native | FlashKernel::Cube => {
                let (mask, bias) = (mask.into_option(), bias.into_option());
                HostInputs::from_flex([&q, &k, &v], mask, bias).forward_primitives::<Self>(
                    &q,
                    params.scale,
                    params.causal_offset,
                )
            }
            FlashKernel::Blocks => blocks::forward::<Self>(q, k, v, mask, bias, params),
        }
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
        use crate::native::host::{flex_floats, flex_rows};
        match params.kernel {
            FlashKernel::Native | FlashKernel::Cube => {
                let (mask, bias) = (mask.into_option(), bias.into_option());
                let host = HostInputs::from_flex([&q, &k, &v], mask, bias);
                // `d_context` arrives as the heads were merged: strided, read in place.
                let [context, d_context] = [&context, &d_context].map(flex_rows);
                let lse = flex_floats(&lse);
                host.backward_primitives::<Self>(
                    &q,
                    params.scale,
                    params.causal_offset,
                    [context.rows(), d_context.rows()],
                    &lse,
                )
            }
            FlashKernel::Blocks => {
                blocks::backward::<Self>(q, k, v, mask, bias, [context, lse, d_context], params)
            }
        }
    }

    bias_backward_in_blocks!();
}

/// ndarray: the native kernel reads its tensors back with `into_data`.
#[cfg(feature = "ndarray")]
impl FlashAttentionOps for burn::backend::NdArray {
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: Masking<Self>,
        bias: Biasing<Self>,
        params: FlashParams,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        match params.kernel {
            FlashKernel::Native | FlashKernel::Cube => {
                native_forward::<Self>(q, k, v, mask, bias, params)
            }
            FlashKernel::Blocks => blocks::forward::<Self>(q, k, v, mask, bias, params),
        }
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
        let outputs = [context, lse, d_context];
        match params.kernel {
            FlashKernel::Native | FlashKernel::Cube => {
                native_backward::<Self>(q, k, v, mask, bias, outputs, params)
            }
            FlashKernel::Blocks => blocks::backward::<Self>(q, k, v, mask, bias, outputs, params),
        }
    }

    bias_backward_in_blocks!();
}

/// The CubeCL backends: [`FlashKernel::Cube`] launches this workspace's GPU kernels,
/// [`FlashKernel::Blocks`] runs as the backend's own tensor kernels, and
/// [`FlashKernel::Native`] reads the inputs back to the host.
#[cfg(any(
    feature = "wgpu",
    feature = "vulkan",
    feature = "metal",
    feature = "cuda"
))]
impl FlashAttentionOps for burn::backend::Cube {
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        mask: Masking<Self>,
        bias: Biasing<Self>,
        params: FlashParams,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        match params.kernel {
            FlashKernel::Native => native_forward::<Self>(q, k, v, mask, bias, params),
            FlashKernel::Cube if cube_serves_primitives(&q, &v) => {
                cube::forward(q, k, v, mask, bias, params)
            }
            FlashKernel::Blocks | FlashKernel::Cube => {
                blocks::forward::<Self>(q, k, v, mask, bias, params)
            }
        }
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
        let outputs = [context, lse, d_context];
        match params.kernel {
            FlashKernel::Native => native_backward::<Self>(q, k, v, mask, bias, outputs, params),
            FlashKernel::Cube if cube_serves_primitives(&q, &v) => {
                cube::backward(q, k, v, mask, bias, outputs, params)
            }
            FlashKernel::Blocks | FlashKernel::Cube => {
                blocks::backward::<Self>(q, k, v, mask, bias, outputs, params)
            }
        }
    }

    bias_backward_in_blocks!();
}

/// Whether [`FlashKernel::Cube`]'s kernels take a problem, from its primitives.
#[cfg(feature = "cube")]
fn cube_serves_primitives(
    q: &FloatTensor<burn::backend::Cube>,
    v: &FloatTensor<burn::backend::Cube>,
) -> bool {
    use burn::backend::TensorMetadata;
    let d = |t: &FloatTensor<burn::backend::Cube>| t.shape().as_slice().last().copied();
    q.dtype() == burn::tensor::DType::F32
        && matches!((d(q), d(v)), (Some(d_head), Some(d_value))
            if attn_kernels::cube::serves(d_head, d_value))
}

/// [`FlashKernel::Native`] on a backend whose tensors are read back to the host.
#[cfg(any(feature = "ndarray", feature = "cube"))]
fn native_forward<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    mask: Masking<B>,
    bias: Biasing<B>,
    params: FlashParams,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let (mask, bias) = (mask.into_option(), bias.into_option());
    HostInputs::from_primitives::<B>(q.clone(), k, v, mask, bias).forward_primitives::<B>(
        &q,
        params.scale,
        params.causal_offset,
    )
}

/// The backward of [`native_forward`].
#[cfg(any(feature = "ndarray", feature = "cube"))]
fn native_backward<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    mask: Masking<B>,
    bias: Biasing<B>,
    outputs: [FloatTensor<B>; 3],
    params: FlashParams,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    use crate::native::host::{HostRows, f32_vec, read_float};
    use burn::backend::TensorMetadata;
    let (mask, bias) = (mask.into_option(), bias.into_option());
    let host = HostInputs::from_primitives::<B>(q.clone(), k, v, mask, bias);
    let [context, lse, d_context] = outputs;
    let lse = f32_vec(read_float::<B>(lse));
    let [context, d_context] = [context, d_context].map(|t| {
        let dims = t.shape().as_slice().try_into().expect("four dimensions");
        HostRows::row_major(f32_vec(read_float::<B>(t)).into(), dims)
    });
    host.backward_primitives::<B>(
        &q,
        params.scale,
        params.causal_offset,
        [context.rows(), d_context.rows()],
        &lse,
    )
}

/// Whether [`FlashAttentionOps`] is implemented for `device`'s backend in this build: flex,
/// ndarray and the CubeCL backends, each when this crate's feature of that name is on (and
/// with or without autodiff).
pub fn flash_serves(device: &Device) -> bool {
    BackendKind::of(device) != BackendKind::Other
}

/// Attention through [`FlashAttentionOps`] with `kernel`: the context and the log-sum-exp
/// `[batch, n_heads, seq_len_q]`. On an autodiff device, gradients flow to `q`, `k` and `v`
/// through the operation's own backward, and to a tracked bias through its bias backward.
pub(crate) fn attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    plan: &PreparedAttention,
    kernel: FlashKernel,
    block: usize,
) -> (Tensor<4>, Tensor<3>) {
    let params = FlashParams {
        scale: plan.scale,
        causal_offset: plan.causal_offset,
        block,
        kernel,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AttentionOptions, CausalAlignment, native_serves};
    use attn_testing::{ATOL, RTOL, SeededRng, assert_tensors_close, for_each_device};
    use burn::backend::Dispatch;

    #[test]
    fn both_kernels_give_the_same_context_lse_and_gradients() {
        for_each_device(|d| {
            if !native_serves(&d.device) {
                // The native kernel reads its inputs in host memory: the CPU backends only.
                return;
            }
            let mut rng = SeededRng::new(29);
            let q = rng.tensor([2, 4, 9, 6], &d.device);
            let k = rng.tensor([2, 2, 70, 6], &d.device);
            let v = rng.tensor([2, 2, 70, 5], &d.device);
            let options = AttentionOptions::new()
                .with_mask(rng.bool_tensor([2, 1, 9, 70], 0.2, &d.device))
                .with_bias(rng.tensor([1, 4, 9, 70], &d.device))
                .with_causal(CausalAlignment::BottomRight);
            let plan = PreparedAttention::new(&q, &k, &v, &options).expect("valid problem");
            let forward = |kernel| attention(q.clone(), k.clone(), v.clone(), &plan, kernel, 32);
            let (context, lse) = forward(FlashKernel::Native);
            let (blocks_context, blocks_lse) = forward(FlashKernel::Blocks);
            let what = |x: &str| format!("{}: {x}, blocks vs native", d.name);
            assert_tensors_close(
                blocks_context,
                context.clone(),
                ATOL,
                RTOL,
                &what("context"),
            );
            assert_tensors_close(blocks_lse, lse.clone(), ATOL, RTOL, &what("lse"));

            let d_context = rng.tensor(context.dims(), &d.device);
            let backward = |kernel| {
                let params = FlashParams {
                    scale: plan.scale,
                    causal_offset: plan.causal_offset,
                    block: 32,
                    kernel,
                };
                let mask = plan.mask.clone().expect("a mask").into_dispatch();
                let bias = plan.bias.clone().expect("a bias").into_dispatch();
                let (dq, dk, dv) = <Dispatch as FlashAttentionOps>::flash_attention_backward(
                    q.clone().into_dispatch(),
                    k.clone().into_dispatch(),
                    v.clone().into_dispatch(),
                    Masking::Masked(mask),
                    Biasing::Biased(bias),
                    context.clone().into_dispatch(),
                    lse.clone().into_dispatch(),
                    d_context.clone().into_dispatch(),
                    params,
                );
                [dq, dk, dv].map(Tensor::<4>::from_dispatch)
            };
            let native = backward(FlashKernel::Native);
            let blocks = backward(FlashKernel::Blocks);
            for ((got, want), name) in blocks.into_iter().zip(native).zip(["dq", "dk", "dv"]) {
                assert_tensors_close(got, want, ATOL, RTOL, &what(name));
            }
        });
    }
}
