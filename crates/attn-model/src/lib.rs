//! Transformer modules on burn: multi-head attention, the feed-forward network, encoder and
//! decoder blocks and stacks, the token classifier the training crate uses, a decoder-only
//! language model and the encoder-decoder, each as
//! `XConfig` → `validate()` → `init(&device)` → `X` → `forward`.
//!
//! Decoding goes through a [`KvCache`]: each step projects only its new tokens and attends
//! over the keys and values already cached ([`TokenDecoderInput::with_cache`]), and
//! [`TokenDecoder::generate`] runs greedy or sampled generation on top of it.
//!
//! Attention itself is `attn-core`'s (any [`Strategy`](attn_core::Strategy)); positions are
//! `attn-pos`'s ([`PositionalScheme`]). This crate never picks a backend: every module lives on
//! the [`Device`](burn::tensor::Device) its `init` is given.
//!
//! The imports read only the files their caller names, through [`files`]: regular files,
//! within a bound, and of a model folder only those inside it (a link may lead into the folder,
//! or into a Hugging Face cache's `blobs`, never elsewhere).
//!
//! Configuration mistakes (heads that do not divide `d_model`, dropout outside `[0, 1)`, ...)
//! are [`ModelError`]s returned by `validate()` and `init` before any tensor is made; inputs
//! that arrive at run time (token ids, lengths, mask shapes, PyTorch files) are checked by the
//! `try_forward` methods, and `forward` panics with the same message.
//!
//! One way into each module: `try_forward(XInput) -> Result<XOutput, ModelError>`, and
//! `forward` beside it for inputs known to fit. What varies between calls (padding, memory,
//! which attention weights to return, a cache to step through) is a builder method of the
//! input, and what comes back (the output, the weights) a field of the output.
//!
//! Deviations from Vaswani et al. (2017), each stated where it happens: pre-norm as an option
//! ([`NormPlacement`]), GELU as an option ([`Activation`]), dropout also on attention weights
//! and feed-forward hidden units (PyTorch's placement), LayerNorm epsilon `1e-5`, and masked
//! scores filled with `−∞` by `attn-core`, whose fully masked rows give zeros rather than NaN.
//!
//! ```
//! use attn_model::{EncoderBlockConfig, EncoderInput, NeedWeights, NormPlacement};
//! use burn::tensor::{Device, Tensor};
//!
//! let device = Device::flex();
//! let block = EncoderBlockConfig::new(12, 3, 24)
//!     .with_norm(NormPlacement::Pre)
//!     .init(&device)
//!     .unwrap();
//! let x = Tensor::<3>::ones([2, 5, 12], &device);
//! let out = block
//!     .try_forward(EncoderInput::new(x).with_weights(NeedWeights::PerHead))
//!     .unwrap();
//! assert_eq!(out.output.dims(), [2, 5, 12]);
//! // Identical tokens: every key gets weight 1/5.
//! let w = out.weights[0].clone().into_data().try_into_vec_as::<f32>().unwrap();
//! assert!(w.iter().all(|w| (w - 0.2).abs() < 1e-6));
//! ```

mod attention;
mod cache;
mod decoder;
mod embedding;
mod encoder;
mod encoder_decoder;
mod error;
mod feed_forward;
pub mod files;
mod generate;
pub mod hf;
mod norm;
pub mod ops;
mod project;
pub mod pytorch;
mod residual;
mod safetensors_file;
mod token_decoder;
mod token_encoder;

pub use attention::{
    MhaInput, MhaOutput, MultiHeadAttention, MultiHeadAttentionConfig, NeedWeights,
};
pub use attn_pos::{AlibiForm, PositionalScheme, RotaryPairing};
pub use cache::{KvCache, MemoryCache};
pub use decoder::{
    Decoder, DecoderBlock, DecoderBlockConfig, DecoderConfig, DecoderInput, DecoderOutput,
    DecoderWeights,
};
pub use embedding::TokenEmbedding;
pub use encoder::{
    Encoder, EncoderBlock, EncoderBlockConfig, EncoderConfig, EncoderInput, EncoderOutput,
};
pub use encoder_decoder::{EncoderDecoder, EncoderDecoderConfig, EncoderDecoderInput, Memory};
pub use error::{ConfigError, ModelError};
pub use feed_forward::{Activation, FeedForward, FeedForwardConfig};
pub use generate::{GenerateConfig, GeneratedStep, Generation, Prompt, Sampling};
pub use norm::{LayerNorm, LayerNormConfig};
pub use pytorch::{
    StateDict, TorchDecoderLayer, TorchEncoderLayer, TorchLayerNorm, TorchLinear,
    TorchMultiheadAttention,
};
pub use residual::NormPlacement;
pub use token_decoder::{TokenDecoder, TokenDecoderConfig, TokenDecoderInput, TokenDecoderOutput};
pub use token_encoder::{TokenEncoder, TokenEncoderConfig, TokenEncoderInput, TokenEncoderOutput};
