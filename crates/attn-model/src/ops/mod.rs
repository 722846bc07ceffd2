//! The backend operations the layers around attention run on: the projections (`x · W + b`,
//! [`LinearOps`]), LayerNorm ([`LayerNormOps`]), GELU ([`GeluOps`]: [`gelu`], [`gelu_tanh`]),
//! RMSNorm ([`rms_norm`]), rotary positions ([`rotary`]) and SwiGLU's gate ([`silu_gate`]).
//!
//! Each is written once as a burn operation: on flex the kernels of `attn-kernels` run it on
//! the tensors' own storage (a product that writes its output once, LayerNorm's row loops, one
//! vector pass for GELU each way), and under autodiff LayerNorm, GELU and the projections are one
//! graph node with their own backward. Every other backend runs burn's own operations.
//!
//! They live here, beside the modules that call them (`project.rs`, `norm.rs`,
//! `feed_forward.rs`, the decoder's output head), rather than in `attn-core`: attention is what
//! `attn-core` holds, and these are the layers' business.

// burn-ndarray is deprecated in burn 0.22 and still one of the backends these three serve.
#[allow(deprecated)]
mod gelu;
#[allow(deprecated)]
mod layer_norm;
#[allow(deprecated)]
mod linear;
mod rms_norm;
mod rotary;
mod silu;

pub use gelu::{GeluForm, GeluOps, gelu, gelu_tanh, gelu_with};
pub use layer_norm::{LayerNormOps, layer_norm, layer_norm_serves};
pub use linear::{LinearOps, bf16_products, linear, linear_serves, linears};
pub use rms_norm::rms_norm;
pub use rotary::rotary;
pub use silu::silu_gate;

use attn_core::backend::BackendKind;
use burn::tensor::{Device, Tensor};

/// Whether [`LinearOps`], [`LayerNormOps`] and [`GeluOps`] are implemented for `device`'s backend in this
/// build: flex, ndarray and the CubeCL backends, each when this crate's feature of that name
/// is on (with or without autodiff).
fn implemented_for(device: &Device) -> bool {
    match BackendKind::of(device) {
        BackendKind::Flex => cfg!(feature = "flex"),
        BackendKind::NdArray => cfg!(feature = "ndarray"),
        BackendKind::Cube => cfg!(any(
            feature = "wgpu",
            feature = "vulkan",
            feature = "metal",
            feature = "cuda"
        )),
        BackendKind::Other => false,
    }
}

/// Whether `device` is flex and this crate's flex operations are built.
fn is_flex(device: &Device) -> bool {
    cfg!(feature = "flex") && BackendKind::of(device) == BackendKind::Flex
}

/// Whether `x` is a flex tensor outside autodiff (neither the tensor nor its device tracks
/// gradients): what the inference-only flex paths (`linear`'s one-row split, `silu_gate`) serve.
#[cfg_attr(not(feature = "flex"), allow(dead_code))]
fn is_flex_inference<const D: usize>(x: &Tensor<D>) -> bool {
    let device = x.device();
    !x.is_autodiff() && !device.is_autodiff() && is_flex(&device)
}
