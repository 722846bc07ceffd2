//! PyTorch's layers as the model's loader takes them: the block settings of a layer's
//! `activation` and `norm_first`, and the projections of its attention.

use anyhow::Result;
use attn_reference::{AttentionWeights, RefTensor};
use burn::tensor::Device;

/// The block settings of a PyTorch layer's `activation` and `norm_first`.
pub(super) fn block_settings(
    activation: attn_reference::encoder_layer::Activation,
    norm_first: bool,
) -> (attn_model::Activation, attn_model::NormPlacement) {
    use attn_reference::encoder_layer::Activation as Torch;
    let activation = match activation {
        Torch::Relu => attn_model::Activation::Relu,
        Torch::Gelu => attn_model::Activation::Gelu,
    };
    let norm = if norm_first {
        attn_model::NormPlacement::Pre
    } else {
        attn_model::NormPlacement::Post
    };
    (activation, norm)
}

/// The projections as the model's PyTorch loader takes them, on `device`.
pub(super) fn torch_attention(
    weights: &AttentionWeights,
    device: &Device,
) -> Result<attn_model::TorchMultiheadAttention> {
    Ok(attn_model::TorchMultiheadAttention {
        q: torch_linear(&weights.w_q, &weights.b_q, device)?,
        k: torch_linear(&weights.w_k, &weights.b_k, device)?,
        v: torch_linear(&weights.w_v, &weights.b_v, device)?,
        out_proj: torch_linear(&weights.w_o, &weights.b_o, device)?,
    })
}

/// PyTorch's `Linear` weight `[out, in]` and bias `[out]` as the model's loader takes them.
pub(super) fn torch_linear(
    weight: &RefTensor,
    bias: &RefTensor,
    device: &Device,
) -> Result<attn_model::TorchLinear> {
    Ok(attn_model::TorchLinear {
        weight: weight.try_tensor(device)?,
        bias: Some(bias.try_tensor(device)?),
    })
}
