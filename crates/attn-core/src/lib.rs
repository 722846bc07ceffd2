//! Scaled dot-product attention as pure functions over burn tensors.
//!
//! # The formula
//!
//! ```text
//! Attention(Q, K, V) = softmax(Q·Kᵀ · scale + mask) · V,    scale = 1/√d_head by default
//! ```
//!
//! [`formula::attention`] is that line and nothing else, one named tensor per step: start
//! there. Everything below computes the same function with more options or faster, and every
//! strategy is tested against it.
//!
//! # The entry point
//!
//! The entry point is [`scaled_dot_product_attention`] (and its `Result`-returning twin
//! [`try_scaled_dot_product_attention`]). It takes `q`, `k`, `v` shaped
//! `[batch, n_heads, seq_len, d_head]` and an [`AttentionOptions`] that says which keys are
//! masked, whether the attention is causal, which scale to use, whether to return the weights,
//! and which [`Strategy`] computes it:
//!
//! - [`Strategy::Explicit`]: the readable reference, line by line the equation; materialises
//!   the `[batch, n_heads, seq_len_q, seq_len_kv]` weights.
//! - [`Strategy::Chunked`]: online softmax over blocks of keys in tensor operations, on every
//!   backend; memory `O(seq_len_q × block)`, in training too.
//! - [`Strategy::Fused`]: burn's [`burn::tensor::module::attention`].
//! - [`Strategy::Native`]: this crate's blocked CPU kernel (online softmax on register-blocked
//!   micro-kernels, rayon over heads and query blocks), for flex and ndarray.
//! - [`Strategy::Auto`]: picks one of them (see [`Strategy`]).
//!
//! [`AttentionOutput::route`] says which code ran ([`Route`]).
//!
//! The CPU kernels themselves are the `attn-kernels` crate's, on plain slices; [`native_attention`]
//! and [`FlashAttentionOps`] bring them to burn tensors. The layers around attention (projections,
//! LayerNorm, GELU) are `attn-model`'s.
//!
//! Everything here is a pure function: no parameters, no randomness except dropout's
//! (drawn from the device's generator), no I/O.
//!
//! ```
//! use attn_core::{scaled_dot_product_attention, AttentionOptions};
//! use burn::tensor::{Device, Tensor};
//!
//! let device = Device::flex();
//! // One query that matches the second of two keys much better than the first.
//! let q = Tensor::<4>::from_floats([[[[0.0, 4.0]]]], &device); // [1, 1, 1, 2]
//! let k = Tensor::<4>::from_floats([[[[1.0, 0.0], [0.0, 1.0]]]], &device); // [1, 1, 2, 2]
//! let v = Tensor::<4>::from_floats([[[[10.0], [20.0]]]], &device); // [1, 1, 2, 1]
//! let out = scaled_dot_product_attention(q, k, v, &AttentionOptions::new().with_need_weights(true));
//! // scores = [0, 4] / √2, weights = softmax = [0.0558, 0.9442], context = 10·0.0558 + 20·0.9442
//! let weights = out.weights.unwrap().into_data().try_to_vec::<f32>().unwrap();
//! assert!((weights[1] - 0.944_193).abs() < 1e-5);
//! let context = out.context.into_scalar::<f32>();
//! assert!((context - 19.441_93).abs() < 1e-4);
//! ```

pub mod backend;
mod chunked;
mod error;
mod explicit;
pub mod formula;
// burn-ndarray is deprecated in burn 0.22 and still one of the backends served here.
#[allow(deprecated)]
mod flash;
mod fused;
mod heads;
mod mask;
mod native;
mod options;
mod plan;
mod route;
mod sdpa;
mod softmax;

pub use chunked::DEFAULT_BLOCK;
pub use error::AttentionError;
pub use explicit::scaled_scores;
pub use flash::{Biasing, FlashAttentionOps, FlashKernel, FlashParams, Masking, flash_serves};
pub use heads::{merge_heads, repeat_kv_heads, split_heads, try_split_heads};
pub use mask::{
    causal_mask, keep_to_mask, mask_to_keep, padding_mask, padding_mask_from_lengths, window_mask,
};
pub use native::{
    CpuCaches, NativeGradients, NativeOutput, native_attention, native_attention_backward,
    native_serves,
};
pub use options::{AttentionOptions, CausalAlignment, Strategy};
pub use plan::PreparedAttention;
pub use route::{
    AttentionOutput, DECODE_MAX_QUERIES, DECODE_MIN_KEYS, NATIVE_TRAINING_MIN_KEYS, Route,
};
pub use sdpa::{scaled_dot_product_attention, try_scaled_dot_product_attention};
pub use softmax::safe_softmax;
