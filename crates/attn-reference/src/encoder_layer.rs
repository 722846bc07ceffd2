//! `encoder_layer.json`: `torch.nn.TransformerEncoderLayer(batch_first=True, dropout=0)` with
//! ReLU and GELU, post-norm and pre-norm, a key padding mask, and every parameter it was run
//! with.

use serde::Deserialize;

use crate::{AttentionWeights, RefTensor, ReferenceFile};

/// The whole file.
#[derive(Clone, Debug, Deserialize)]
pub struct EncoderLayerFile {
    /// Every case, in file order.
    pub cases: Vec<EncoderLayerCase>,
}

impl ReferenceFile for EncoderLayerFile {
    const PATH: &'static str = "encoder_layer.json";
}

/// One encoder layer, its input and its output; weights in PyTorch's `Linear` layout
/// `[out, in]`.
#[derive(Clone, Debug, Deserialize)]
pub struct EncoderLayerCase {
    /// `relu_post_norm`, `gelu_pre_norm`, ...; also names the layer's
    /// `encoder_layer_<name>.safetensors` state dict.
    pub name: String,
    /// Width of a token.
    pub d_model: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Hidden width of the feed-forward layer.
    pub d_ff: usize,
    /// The feed-forward activation.
    pub activation: Activation,
    /// Pre-norm (`true`) or post-norm.
    pub norm_first: bool,
    /// LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// Self-attention's projections.
    #[serde(flatten)]
    pub self_attn: AttentionWeights,
    /// First feed-forward weight `[d_ff, d_model]`.
    pub w_ff1: RefTensor,
    /// First feed-forward bias `[d_ff]`.
    pub b_ff1: RefTensor,
    /// Second feed-forward weight `[d_model, d_ff]`.
    pub w_ff2: RefTensor,
    /// Second feed-forward bias `[d_model]`.
    pub b_ff2: RefTensor,
    /// Scale of the LayerNorm around self-attention `[d_model]`.
    pub norm1_gamma: RefTensor,
    /// Shift of the LayerNorm around self-attention `[d_model]`.
    pub norm1_beta: RefTensor,
    /// Scale of the LayerNorm around the feed-forward `[d_model]`.
    pub norm2_gamma: RefTensor,
    /// Shift of the LayerNorm around the feed-forward `[d_model]`.
    pub norm2_beta: RefTensor,
    /// Input `[batch, seq_len, d_model]`.
    pub input: RefTensor,
    /// `true` where a token is padding, `[batch, seq_len]`.
    pub key_padding_masked: RefTensor,
    /// Output `[batch, seq_len, d_model]`.
    pub out: RefTensor,
}

impl EncoderLayerCase {
    /// The file PyTorch saved this layer's `state_dict()` to, next to this file.
    pub fn safetensors_file(&self) -> String {
        format!("encoder_layer_{}.safetensors", self.name)
    }
}

/// The feed-forward activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// `max(0, x)`.
    Relu,
    /// Exact GELU, `x·Φ(x)`.
    Gelu,
}
