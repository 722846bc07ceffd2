//! What a caller can ask of attention: mask, bias, causality, scale, dropout, weights, strategy.

use burn::tensor::{Bool, Tensor};
use serde::{Deserialize, Serialize};

/// Where the causal diagonal sits when `seq_len_q != seq_len_kv`.
///
/// For a square score matrix both alignments are the usual lower triangle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CausalAlignment {
    /// Query `i` sees keys `0..=i` (PyTorch's `is_causal=True`, `torch.tril`).
    TopLeft,
    /// Query `i` sees keys `0..=i + seq_len_kv - seq_len_q`: the last query sees every key
    /// (burn's `is_causal`, FlashAttention-2, decoding with a key/value cache).
    BottomRight,
}

/// How attention is computed. All strategies return the same numbers within float rounding.
///
/// Each strategy is one algorithm on every backend; [`Route`](crate::Route) (returned in
/// [`AttentionOutput::route`](crate::AttentionOutput::route)) says how a call reached it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Strategy {
    /// Chooses for you:
    /// - [`Strategy::Explicit`] when the weights are asked for or dropout is active
    ///   (both need the weight matrix);
    /// - when gradients flow (`q`, `k`, `v` or the bias is tracked by an autodiff graph):
    ///   [`Strategy::Native`] from [`NATIVE_TRAINING_MIN_KEYS`](crate::NATIVE_TRAINING_MIN_KEYS)
    ///   keys on, on flex and ndarray (the native CPU kernels and their own backward) and on
    ///   the CubeCL backends for `float32` heads of up to
    ///   `attn_kernels::cube::MAX_HEAD_DIM` (256) values (the GPU kernels and theirs), memory
    ///   linear in the length either way (a bias that needs a gradient gets it block by block,
    ///   beside the gradient's own size); and
    ///   [`Strategy::Explicit`] otherwise, the fastest differentiable path for short sequences
    ///   (and the training path on other backends);
    /// - [`Strategy::Native`] otherwise (inference) on devices whose tensors live in host
    ///   memory (flex, ndarray: see [`native_serves`](crate::native_serves)), as its decode
    ///   pass ([`Route::NativeDecode`](crate::Route::NativeDecode)) for at most
    ///   [`DECODE_MAX_QUERIES`](crate::DECODE_MAX_QUERIES) queries against at least
    ///   [`DECODE_MIN_KEYS`](crate::DECODE_MIN_KEYS) keys;
    /// - [`Strategy::Fused`] otherwise (inference elsewhere: the CubeCL flash kernel on wgpu,
    ///   Vulkan, Metal and CUDA), burn's backend kernel.
    ///
    /// It never picks [`Strategy::Chunked`].
    #[default]
    Auto,
    /// Materialise scores and weights, following the equation step by step.
    Explicit,
    /// Online softmax over blocks of `block` keys in burn tensor operations (`chunked.rs`), on
    /// every backend: memory `O(seq_len_q × block)` per head. Under autodiff its backward is the
    /// block-by-block FlashAttention-2 backward of the same file (each block of weights
    /// recomputed from the forward's log-sum-exp), recorded as one graph node through
    /// [`FlashAttentionOps`](crate::FlashAttentionOps), so training memory stays linear in the
    /// length too ([`Route::ChunkedBlocks`](crate::Route::ChunkedBlocks)), a bias that needs a
    /// gradient included. On a backend the operation is not built for (see
    /// [`flash_serves`](crate::flash_serves)) the same forward runs as tensor operations that
    /// burn's autodiff records block by block
    /// ([`Route::ChunkedRecorded`](crate::Route::ChunkedRecorded), training memory
    /// `O(seq_len_q × seq_len_kv)`). No weights, no dropout.
    Chunked {
        /// Keys per block.
        block: usize,
    },
    /// burn's `module::attention` (flex's tiled kernel, the CubeCL flash kernel, or burn's
    /// decomposed fallback). No weights, no dropout.
    Fused,
    /// This workspace's own FlashAttention-2 kernels, forward and backward. On flex and ndarray
    /// the blocked CPU kernel (see [`native_attention`](crate::native_attention)): online
    /// softmax over key blocks on register-blocked micro-kernels, rayon over batch, heads and
    /// query blocks. On the CubeCL backends (wgpu, Vulkan, Metal, CUDA) the GPU kernels of
    /// `attn_kernels::cube` ([`Route::CubeOperation`](crate::Route::CubeOperation)),
    /// `float32` with heads of up to `attn_kernels::cube::MAX_HEAD_DIM` (256) values. Either runs
    /// as [`FlashAttentionOps`](crate::FlashAttentionOps), so it is differentiable through its
    /// own backward (a bias that needs a gradient gets it block by block in tensor operations);
    /// on other devices or problems the CPU kernel's inputs take a round trip through host
    /// memory and it cannot be differentiated. In
    /// inference on flex and ndarray with at most
    /// [`DECODE_MAX_QUERIES`](crate::DECODE_MAX_QUERIES) queries against at least
    /// [`DECODE_MIN_KEYS`](crate::DECODE_MIN_KEYS) keys (a decoding step against its cache)
    /// it runs its decode pass instead ([`Route::NativeDecode`](crate::Route::NativeDecode)):
    /// the keys of each head split into chunks across threads, the chunks' partial softmaxes
    /// merged exactly. No weights, no dropout.
    Native,
}

impl Strategy {
    /// The name used in errors, logs and benchmark output.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Auto => "auto",
            Strategy::Explicit => "explicit",
            Strategy::Chunked { .. } => "chunked",
            Strategy::Fused => "fused",
            Strategy::Native => "native",
        }
    }
}

/// Options for [`scaled_dot_product_attention`](crate::scaled_dot_product_attention).
///
/// Built with `AttentionOptions::new()` and the `with_*` methods; the default is plain
/// attention with scale `1/√d_head` and the automatic strategy.
#[derive(Clone, Debug, Default)]
pub struct AttentionOptions {
    /// Boolean mask, `true` = the key is **not** attended (burn's convention).
    /// Any shape that broadcasts to `[batch, n_heads, seq_len_q, seq_len_kv]`.
    pub mask: Option<Tensor<4, Bool>>,
    /// Additive bias on the scaled scores (ALiBi, relative positions), broadcasting to
    /// `[batch, n_heads, seq_len_q, seq_len_kv]`.
    pub bias: Option<Tensor<4>>,
    /// Causal masking and its alignment.
    pub causal: Option<CausalAlignment>,
    /// Scale on `q·kᵀ`; `None` means `1/√d_head`.
    pub scale: Option<f64>,
    /// Dropout probability on the weights after softmax. Applied only on an autodiff device
    /// (training); in inference it is ignored.
    pub dropout: f64,
    /// Return the weights `[batch, n_heads, seq_len_q, seq_len_kv]` too.
    pub need_weights: bool,
    /// Which computation to use.
    pub strategy: Strategy,
}

impl AttentionOptions {
    /// Plain attention: no mask, no bias, scale `1/√d_head`, automatic strategy.
    pub fn new() -> Self {
        Self::default()
    }

    /// Masks the keys where `mask` is `true`.
    pub fn with_mask(mut self, mask: Tensor<4, Bool>) -> Self {
        self.mask = Some(mask);
        self
    }

    /// Masks the keys where `keep` is `false` (PyTorch's boolean `attn_mask` convention; as
    /// [`keep_to_mask`](crate::keep_to_mask), whose module builds on this one's options).
    pub fn with_keep_mask(self, keep: Tensor<4, Bool>) -> Self {
        self.with_mask(keep.bool_not())
    }

    /// Adds `bias` to the scaled scores before softmax.
    pub fn with_bias(mut self, bias: Tensor<4>) -> Self {
        self.bias = Some(bias);
        self
    }

    /// Makes the attention causal with the given alignment.
    pub fn with_causal(mut self, alignment: CausalAlignment) -> Self {
        self.causal = Some(alignment);
        self
    }

    /// Replaces `1/√d_head` with `scale`.
    pub fn with_scale(mut self, scale: f64) -> Self {
        self.scale = Some(scale);
        self
    }

    /// Drops weights with probability `dropout` while training.
    pub fn with_dropout(mut self, dropout: f64) -> Self {
        self.dropout = dropout;
        self
    }

    /// Also returns the attention weights.
    pub fn with_need_weights(mut self, need_weights: bool) -> Self {
        self.need_weights = need_weights;
        self
    }

    /// Forces a strategy.
    pub fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }
}
