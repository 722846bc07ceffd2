//! Setting parameters from PyTorch: tensors in PyTorch's layout, and `state_dict`s saved as
//! safetensors or pickled by `torch.save`, read through burn-store.
//!
//! Layouts differ in two ways:
//! - PyTorch's `nn.Linear` stores its weight `[d_output, d_input]` (`y = x · Wᵀ + b`); burn's
//!   `Linear` stores `[d_input, d_output]` (`y = x · W + b`). Every weight is transposed here.
//! - `nn.MultiheadAttention` packs `W_Q`, `W_K`, `W_V` into one `in_proj_weight`
//!   `[3 · d_model, d_model]` (rows `0..d_model` are `W_Q`, then `W_K`, then `W_V`) and their
//!   biases into `in_proj_bias`; it is split here. When keys and values have their own width
//!   PyTorch stores `q_proj_weight`, `k_proj_weight`, `v_proj_weight` instead; both are read.
//!
//! Names follow `nn.TransformerEncoderLayer`: `self_attn.{in_proj_weight, in_proj_bias,
//! out_proj.weight, out_proj.bias}`, `linear1.*` (`W_1`), `linear2.*` (`W_2`), `norm1.*` (around
//! self-attention, [`EncoderBlock`](crate::EncoderBlock)'s `norm_attn`), `norm2.*` (around the feed-forward,
//! `norm_ff`), for both norm placements. A state dict holds no settings: the block must be
//! configured like the PyTorch layer (`norm_first` → [`NormPlacement`](crate::NormPlacement),
//! `activation`, `layer_norm_eps`, `nhead`).
//!
//! `nn.TransformerDecoderLayer` loads into [`DecoderBlock`](crate::DecoderBlock) the same way, with its own names:
//! `self_attn.*` (causal self-attention), `multihead_attn.*` (cross-attention over the
//! memory), `linear1.*`, `linear2.*`, and `norm1.*` (around self-attention, `norm_self`),
//! `norm2.*` (around cross-attention, `norm_cross`), `norm3.*` (around the feed-forward,
//! `norm_ff`).
//!
//! ```no_run
//! use attn_model::{EncoderBlockConfig, StateDict};
//! use burn::tensor::Device;
//!
//! let device = Device::flex();
//! let dict = StateDict::from_safetensors_file("encoder_layer.safetensors")
//!     .expect("a readable safetensors file");
//! let block = EncoderBlockConfig::new(8, 2, 16)
//!     .with_dropout(0.0)
//!     .init(&device)
//!     .expect("valid config")
//!     .load_pytorch_state_dict(&dict, "")
//!     .expect("every tensor present, with the right shape");
//! ```
//!
//! `state_dict.rs` reads the files ([`StateDict`]: tensors by name, with their shapes and
//! dtypes); `layers.rs` maps PyTorch's names and layouts onto this crate's modules.

mod layers;
mod state_dict;

pub use layers::{
    TorchDecoderLayer, TorchEncoderLayer, TorchLayerNorm, TorchLinear, TorchMultiheadAttention,
};
pub(crate) use layers::{load_attention, load_block_norm, load_linear, load_norm, replace};
pub use state_dict::StateDict;
