//! The Transformer decoder (Vaswani et al. 2017, §3.1): a stack of blocks, each a causal
//! self-attention sub-layer, an optional cross-attention sub-layer over the encoder's output
//! (the *memory*), and a feed-forward sub-layer, each wrapped in a residual connection and a
//! LayerNorm.
//!
//! ```text
//! post-norm (paper, PyTorch's default):  x = LayerNorm(x + Dropout(Sublayer(x)))
//! pre-norm  (GPT-2, PyTorch norm_first): x = x + Dropout(Sublayer(LayerNorm(x)))
//!
//! block(x, memory):  x ← residual(x, MultiHead(x, x, x), causal)     self-attention
//!                    x ← residual(x, MultiHead(x, memory, memory))    cross-attention
//!                    x ← residual(x, FFN(x))
//! ```
//!
//! Deviations, as in the encoder and PyTorch's `TransformerDecoderLayer`: LayerNorm epsilon
//! `1e-5`, dropout also on attention weights and feed-forward hidden units, pre-norm as an
//! option, and (not in the paper) a sliding window on self-attention and no cross-attention
//! for decoder-only models. Pre-norm normalises the decoder's stream before cross-attention,
//! never the memory, as PyTorch does.
//!
//! Two ways to run the same function, both through [`Decoder::try_forward`]: a full forward
//! recomputes every position (training, the reference), and a cached step
//! ([`DecoderInput::with_cache`]) feeds new tokens through a [`KvCache`] (decoding; see
//! `crate::cache`). Tests check that they agree.

use attn_core::{CausalAlignment, Strategy, window_mask};
use attn_pos::PositionalScheme;
use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Bool, Device, Tensor};

use crate::attention::{
    MhaInput, MultiHeadAttention, MultiHeadAttentionConfig, NeedWeights, check_shape,
};
use crate::cache::{KvCache, LayerKv, LayerMemory, MemoryCache, StepPlan};
use crate::error::{ModelError, check_epsilon, check_nonzero};
use crate::feed_forward::{Activation, FeedForward, FeedForwardConfig};
use crate::norm::{Norm, NormKind};
use crate::residual::{NormPlacement, Residual};

/// Configuration of one [`DecoderBlock`].
///
/// ```
/// use attn_model::DecoderBlockConfig;
///
/// let config = DecoderBlockConfig::new(12, 3, 20).with_d_memory(Some(8));
/// assert!(config.validate().is_ok());
/// assert!(config.with_window(Some(0)).validate().is_err());
/// ```
#[derive(Config, Debug)]
pub struct DecoderBlockConfig {
    /// Model width.
    pub d_model: usize,
    /// Number of attention heads (self- and cross-attention).
    pub n_heads: usize,
    /// Hidden width of the feed-forward network.
    pub d_ff: usize,
    /// Key/value heads for grouped-query attention; `None` means `n_heads`.
    pub n_kv_heads: Option<usize>,
    /// Width of each head when it is not `d_model / n_heads` (see
    /// [`MultiHeadAttentionConfig::head_dim`]).
    pub head_dim: Option<usize>,
    /// RMSNorm with this epsilon on each head's queries and keys (Qwen3); `None` means none.
    pub qk_norm: Option<f64>,
    /// Whether the query, key and value projections have biases (Qwen2: yes; Llama: no).
    #[config(default = true)]
    pub bias_qkv: bool,
    /// Whether the attention output projection and the feed-forward layers have biases.
    #[config(default = true)]
    pub bias_out: bool,
    /// Whether the feed-forward network is gated (SwiGLU with [`Activation::Silu`]).
    #[config(default = false)]
    pub gated: bool,
    /// LayerNorm, or RMSNorm (Llama, Qwen, Mistral).
    #[config(default = "NormKind::Layer")]
    pub norm_kind: NormKind,
    /// Whether the block attends to an encoder's output (PyTorch's `multihead_attn`);
    /// decoder-only language models have no cross-attention.
    #[config(default = true)]
    pub cross_attention: bool,
    /// Width of the memory cross-attention reads; `None` means `d_model`.
    pub d_memory: Option<usize>,
    /// Dropout on sub-layer outputs, attention weights and feed-forward hidden units while
    /// training.
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Post-norm (paper) or pre-norm.
    #[config(default = "NormPlacement::Post")]
    pub norm: NormPlacement,
    /// ReLU (paper) or GELU.
    #[config(default = "Activation::Relu")]
    pub activation: Activation,
    /// The norms' epsilon; `1e-5` as PyTorch.
    #[config(default = 1e-5)]
    pub layer_norm_eps: f64,
    /// Rotary or ALiBi positions inside self-attention (cross-attention has none: decoder and
    /// encoder positions are unrelated).
    #[config(default = "PositionalScheme::None")]
    pub pos: PositionalScheme,
    /// Sliding window of self-attention: each query sees itself and the `window − 1` tokens
    /// before it; `None` means every earlier token.
    pub window: Option<usize>,
    /// How attention is computed.
    #[config(default = "Strategy::Auto")]
    pub strategy: Strategy,
}

impl DecoderBlockConfig {
    /// The self-attention sub-layer's configuration.
    pub fn self_attention(&self) -> MultiHeadAttentionConfig {
        MultiHeadAttentionConfig::new(self.d_model, self.n_heads)
            .with_n_kv_heads(self.n_kv_heads)
            .with_head_dim(self.head_dim)
            .with_qk_norm(self.qk_norm)
            .with_bias_q(self.bias_qkv)
            .with_bias_k(self.bias_qkv)
            .with_bias_v(self.bias_qkv)
            .with_bias_o(self.bias_out)
            .with_dropout(self.dropout)
            .with_pos(self.pos.clone())
            .with_strategy(self.strategy)
    }

    /// The cross-attention sub-layer's configuration, if the block has one.
    pub fn cross_attention(&self) -> Option<MultiHeadAttentionConfig> {
        self.cross_attention.then(|| {
            MultiHeadAttentionConfig::new(self.d_model, self.n_heads)
                .with_n_kv_heads(self.n_kv_heads)
                .with_d_context(self.d_memory)
                .with_dropout(self.dropout)
                .with_strategy(self.strategy)
        })
    }

    /// The feed-forward sub-layer's configuration.
    pub fn feed_forward(&self) -> FeedForwardConfig {
        FeedForwardConfig::new(self.d_model, self.d_ff)
            .with_activation(self.activation)
            .with_dropout(self.dropout)
            .with_gated(self.gated)
            .with_bias(self.bias_out)
    }

    /// Checks every setting without making a tensor.
    ///
    /// # Errors
    /// Those of [`MultiHeadAttentionConfig::validate`] and [`FeedForwardConfig::validate`],
    /// [`ModelError::InvalidEpsilon`], and [`ModelError::ZeroSize`] for a zero window.
    pub fn validate(&self) -> Result<(), ModelError> {
        self.self_attention().validate()?;
        if let Some(cross) = self.cross_attention() {
            cross.validate()?;
        }
        self.feed_forward().validate()?;
        if let Some(window) = self.window {
            check_nonzero("window", window)?;
        }
        check_epsilon(self.layer_norm_eps)
    }

    /// Builds the block after [`validate`](Self::validate).
    ///
    /// # Errors
    /// Any error of [`validate`](Self::validate).
    pub fn init(&self, device: &Device) -> Result<DecoderBlock, ModelError> {
        self.validate()?;
        let norm = || {
            self.norm_kind
                .init(self.d_model, self.layer_norm_eps, device)
        };
        let cross_attention = self
            .cross_attention()
            .map(|cross| cross.init(device))
            .transpose()?;
        Ok(DecoderBlock {
            self_attention: self.self_attention().init(device)?,
            norm_self: norm(),
            norm_cross: cross_attention.as_ref().map(|_| norm()),
            cross_attention,
            feed_forward: self.feed_forward().init(device)?,
            norm_ff: norm(),
            residual: Residual::new(self.norm, self.dropout),
            window: self.window,
        })
    }
}

/// What a [`DecoderBlock`] or [`Decoder`] reads: the target stream, its key padding, and the
/// memory with its padding.
///
/// Masks use burn's convention: `true` = this key is **not** attended.
#[derive(Debug)]
pub struct DecoderInput<'a> {
    x: Tensor<3>,
    sources: Sources,
    cache: Option<(&'a mut KvCache, Option<&'a MemoryCache>)>,
}

/// What a full forward's blocks read besides the stream; every block reads the same.
#[derive(Clone, Debug)]
struct Sources {
    padding: Option<Tensor<2, Bool>>,
    memory: Option<Tensor<3>>,
    memory_padding: Option<Tensor<2, Bool>>,
    need_weights: NeedWeights,
}

impl<'a> DecoderInput<'a> {
    /// The target stream, attended causally.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq_len, d_model]`
    pub fn new(x: Tensor<3>) -> Self {
        Self {
            x,
            sources: Sources {
                padding: None,
                memory: None,
                memory_padding: None,
                need_weights: NeedWeights::No,
            },
            cache: None,
        }
    }

    /// Masks padded target keys (`true` = padding), e.g. a left-padded batch's leading slots.
    ///
    /// # Shapes
    /// - `padding`: `[batch, seq_len]`
    pub fn with_padding(mut self, padding: Tensor<2, Bool>) -> Self {
        self.sources.padding = Some(padding);
        self
    }

    /// The encoder's output that cross-attention reads, and its padding (`true` = padded,
    /// PyTorch's `memory_key_padding_mask`).
    ///
    /// # Shapes
    /// - `memory`: `[batch, seq_len_kv, d_memory]`; `padding`: `[batch, seq_len_kv]`
    pub fn with_memory(mut self, memory: Tensor<3>, padding: Option<Tensor<2, Bool>>) -> Self {
        self.sources.memory = Some(memory);
        self.sources.memory_padding = padding;
        self
    }

    /// Asks for every block's self- and cross-attention weights too (the fused, chunked and
    /// native strategies cannot return them).
    pub fn with_weights(mut self, need_weights: NeedWeights) -> Self {
        self.sources.need_weights = need_weights;
        self
    }

    /// A cached step of a [`Decoder`]: `x` holds the tokens after `cache.filled()`; each layer
    /// projects only them, writes their keys and values into `cache`, and attends over what it
    /// holds, and cross-attention reads the keys and values `memory` holds (see
    /// [`Decoder::memory_cache`]). The cache's left padding masks its keys; padding, a memory
    /// tensor and weights are for a full forward only.
    pub fn with_cache(mut self, cache: &'a mut KvCache, memory: Option<&'a MemoryCache>) -> Self {
        self.cache = Some((cache, memory));
        self
    }
}

/// What a [`DecoderBlock`] or [`Decoder`] returns.
#[derive(Clone, Debug)]
pub struct DecoderOutput {
    /// `[batch, seq_len, d_model]`.
    pub output: Tensor<3>,
    /// Each block's attention weights, first to last (a block gives one), when the input asked
    /// for them; empty otherwise.
    pub weights: Vec<DecoderWeights>,
}

/// Attention weights of one decoder block, per head (`[batch, n_heads, ..]`) or averaged over
/// the heads (`[batch, 1, ..]`) as [`NeedWeights`] asked.
#[derive(Clone, Debug)]
pub struct DecoderWeights {
    /// Self-attention, `[batch, n_heads, seq_len, seq_len]`.
    pub self_attention: Tensor<4>,
    /// Cross-attention, `[batch, n_heads, seq_len, seq_len_kv]`, for a block that has it.
    pub cross_attention: Option<Tensor<4>>,
}

/// One decoder block: causal self-attention, optional cross-attention over a memory, and a
/// feed-forward network, each with a residual and a LayerNorm.
#[derive(Module, Debug)]
pub struct DecoderBlock {
    /// Causal self-attention (PyTorch's `self_attn`).
    pub(crate) self_attention: MultiHeadAttention,
    /// The norm around self-attention (PyTorch's `norm1`).
    pub(crate) norm_self: Norm,
    /// Cross-attention over the memory (PyTorch's `multihead_attn`).
    pub(crate) cross_attention: Option<MultiHeadAttention>,
    /// The norm around cross-attention (PyTorch's `norm2`).
    pub(crate) norm_cross: Option<Norm>,
    /// The feed-forward network (PyTorch's `linear1`, `linear2`).
    pub(crate) feed_forward: FeedForward,
    /// The norm around the feed-forward network (PyTorch's `norm3`).
    pub(crate) norm_ff: Norm,
    /// Residual dropout and the norms' placement.
    residual: Residual,
    #[module(skip)]
    window: Option<usize>,
}

impl DecoderBlock {
    /// Runs the block over every position, checking shapes.
    ///
    /// # Shapes
    /// - `input.x`: `[batch, seq_len, d_model]`; `input.padding`: `[batch, seq_len]`
    /// - `input.memory`: `[batch, seq_len_kv, d_memory]`; its padding `[batch, seq_len_kv]`
    /// - returns: output `[batch, seq_len, d_model]`; when asked for, weights
    ///   `[batch, n_heads, seq_len, seq_len]` and `[batch, n_heads, seq_len, seq_len_kv]`
    ///
    /// # Errors
    /// [`ModelError::WidthMismatch`] or [`ModelError::ShapeMismatch`] naming the input that
    /// does not fit, [`ModelError::MemoryMismatch`] for a memory missing or given in vain,
    /// [`ModelError::Attention`] when the configured strategy cannot run (or cannot return the
    /// weights asked for), [`ModelError::CachedInput`] for a cache (a [`Decoder`] steps).
    pub fn try_forward(&self, input: DecoderInput<'_>) -> Result<DecoderOutput, ModelError> {
        if input.cache.is_some() {
            return Err(ModelError::CachedInput(
                "a cached step runs through a Decoder, whose cache holds every layer",
            ));
        }
        let (output, weights) = self.run(input.x, input.sources)?;
        Ok(DecoderOutput {
            output,
            weights: weights.into_iter().collect(),
        })
    }

    /// [`try_forward`](Self::try_forward) for inputs known to fit.
    ///
    /// # Shapes
    /// As [`try_forward`](Self::try_forward).
    ///
    /// # Panics
    /// On any [`ModelError`], with its message.
    pub fn forward(&self, input: DecoderInput<'_>) -> DecoderOutput {
        self.try_forward(input)
            .unwrap_or_else(|e| panic!("decoder block: {e}"))
    }

    /// Model width.
    pub fn d_model(&self) -> usize {
        self.self_attention.d_model()
    }

    /// Whether the block attends to a memory.
    pub fn has_cross_attention(&self) -> bool {
        self.cross_attention.is_some()
    }

    /// The sliding window of self-attention, if any.
    pub fn window(&self) -> Option<usize> {
        self.window
    }

    fn run(
        &self,
        x: Tensor<3>,
        input: Sources,
    ) -> Result<(Tensor<3>, Option<DecoderWeights>), ModelError> {
        let need_weights = input.need_weights;
        let [batch, seq_len, _] = x.dims();
        self.check_input(&x)?;
        let memory = self.memory_input(input.memory, input.memory_padding)?;
        let (x, self_weights) = self.residual.apply(x, &self.norm_self, |x| {
            let mut attend = MhaInput::self_attention(x)
                .with_causal(CausalAlignment::TopLeft)
                .with_weights(need_weights);
            if let Some(padding) = input.padding {
                attend = attend.with_padding(padding);
            }
            if let Some(window) = self.window {
                let mask = window_mask(seq_len, window, &self.device())
                    .unsqueeze_dim::<3>(0)
                    .expand([batch, seq_len, seq_len]); // [batch, seq_len, seq_len]
                attend = attend.with_mask(mask);
            }
            let out = self.self_attention.try_forward(attend)?;
            Ok((out.output, out.weights))
        })?;
        let (x, cross_weights) = match (&self.cross_attention, &self.norm_cross, memory) {
            (Some(cross), Some(norm), Some((memory, padding))) => {
                self.residual.apply(x, norm, |x| {
                    let mut attend =
                        MhaInput::cross_attention(x, memory).with_weights(need_weights);
                    if let Some(padding) = padding {
                        attend = attend.with_padding(padding);
                    }
                    let out = cross.try_forward(attend)?;
                    Ok((out.output, out.weights))
                })?
            }
            _ => (x, None),
        };
        let (x, ()) = self
            .residual
            .apply(x, &self.norm_ff, |x| Ok((self.feed_forward.forward(x), ())))?;
        let weights = self_weights.map(|self_attention| DecoderWeights {
            self_attention,
            cross_attention: cross_weights,
        });
        Ok((x, weights))
    }

    /// One cached step: the new tokens' self-attention over the cache, cross-attention over
    /// the memory's cached keys and values, feed-forward.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq_len, d_model]`, the new tokens only
    /// - `memory`: this layer's cross-attention keys and values (see [`LayerMemory`])
    /// - returns: `[batch, seq_len, d_model]`
    pub(crate) fn step(
        &self,
        x: Tensor<3>,
        kv: &mut LayerKv,
        plan: &StepPlan,
        memory: Option<LayerMemory<'_>>,
    ) -> Result<Tensor<3>, ModelError> {
        let attention = &self.self_attention;
        let (x, ()) = self.residual.apply(x, &self.norm_self, |x| {
            // q: [batch, n_heads, seq_len, d_head]; k, v: [batch, n_kv_heads, seq_len, d_head]
            let (q, k, v) = attention.queries_keys_values(x, plan.offset);
            let (k, v) = kv.append(k, v, plan); // [batch, n_kv_heads, seq_len_kv, d_head]
            let out =
                attention.try_attend(q, k, v, plan.mask.clone(), plan.causal, plan.bias.clone())?;
            Ok((out, ()))
        })?;
        let (x, ()) = match (&self.cross_attention, &self.norm_cross, memory) {
            (Some(cross), Some(norm), Some(memory)) => self.residual.apply(x, norm, |x| {
                let q = cross.queries(x, 0); // [batch, n_heads, seq_len, d_head]
                let (k, v) = (memory.k.clone(), memory.v.clone());
                let out = cross.try_attend(q, k, v, memory.mask.cloned(), None, None)?;
                Ok((out, ()))
            })?,
            (Some(_), _, None) => return Err(missing_memory()),
            (None, _, Some(_)) => return Err(needless_memory()),
            _ => (x, ()),
        };
        let (x, ()) = self
            .residual
            .apply(x, &self.norm_ff, |x| Ok((self.feed_forward.forward(x), ())))?;
        Ok(x)
    }

    /// Cross-attention keys and values of `memory`, for [`MemoryCache`].
    ///
    /// # Shapes
    /// - `memory`: `[batch, seq_len_kv, d_memory]`
    /// - returns: two `[batch, n_kv_heads, seq_len_kv, d_head]`
    pub(crate) fn memory_keys_values(&self, memory: Tensor<3>) -> Option<(Tensor<4>, Tensor<4>)> {
        self.cross_attention
            .as_ref()
            .map(|cross| cross.keys_values(memory, 0))
    }

    fn device(&self) -> Device {
        self.norm_self.gamma().lazy_device()
    }

    fn check_input(&self, x: &Tensor<3>) -> Result<(), ModelError> {
        let [_batch, _seq_len, d_model] = x.dims();
        if d_model != self.d_model() {
            // Checked here because a pre-norm block would hit LayerNorm's panic first.
            return Err(ModelError::WidthMismatch {
                what: "decoder block input",
                expected: self.d_model(),
                got: d_model,
            });
        }
        Ok(())
    }

    /// The memory and its padding when the block has cross-attention, or the error when the
    /// two disagree.
    #[allow(clippy::type_complexity)]
    fn memory_input(
        &self,
        memory: Option<Tensor<3>>,
        padding: Option<Tensor<2, Bool>>,
    ) -> Result<Option<(Tensor<3>, Option<Tensor<2, Bool>>)>, ModelError> {
        match (&self.cross_attention, memory) {
            (Some(_), Some(memory)) => Ok(Some((memory, padding))),
            (Some(_), None) => Err(missing_memory()),
            (None, Some(_)) => Err(needless_memory()),
            (None, None) => Ok(None),
        }
    }
}

fn missing_memory() -> ModelError {
    ModelError::MemoryMismatch(
        "this decoder has cross-attention and needs a memory (the encoder's output)",
    )
}

fn needless_memory() -> ModelError {
    ModelError::MemoryMismatch("this decoder has no cross-attention, but a memory was given")
}

/// Configuration of a [`Decoder`]: `n_layers` identical blocks.
#[derive(Config, Debug)]
pub struct DecoderConfig {
    /// Number of blocks (6 in the paper).
    pub n_layers: usize,
    /// Every block's configuration.
    pub block: DecoderBlockConfig,
    /// A LayerNorm after the last block (PyTorch's `TransformerDecoder(norm=...)`), what
    /// pre-norm stacks need.
    #[config(default = false)]
    pub final_norm: bool,
}

impl DecoderConfig {
    /// Checks every setting without making a tensor.
    ///
    /// # Errors
    /// [`ModelError::ZeroSize`] for no layers, and those of [`DecoderBlockConfig::validate`].
    pub fn validate(&self) -> Result<(), ModelError> {
        check_nonzero("n_layers", self.n_layers)?;
        self.block.validate()
    }

    /// Builds the decoder after [`validate`](Self::validate).
    ///
    /// # Errors
    /// Any error of [`validate`](Self::validate).
    pub fn init(&self, device: &Device) -> Result<Decoder, ModelError> {
        self.validate()?;
        let layers = (0..self.n_layers)
            .map(|_| self.block.init(device))
            .collect::<Result<Vec<_>, _>>()?;
        let block = &self.block;
        let norm_final = self.final_norm.then(|| {
            block
                .norm_kind
                .init(block.d_model, block.layer_norm_eps, device)
        });
        Ok(Decoder { layers, norm_final })
    }
}

/// A stack of [`DecoderBlock`]s with an optional final LayerNorm.
#[derive(Module, Debug)]
pub struct Decoder {
    /// The blocks, first to last (PyTorch's `layers`).
    pub(crate) layers: Vec<DecoderBlock>,
    /// The norm after the last block (PyTorch's `norm`).
    pub(crate) norm_final: Option<Norm>,
}

impl Decoder {
    /// Runs every block over every position, checking shapes; or, for a cached step
    /// ([`DecoderInput::with_cache`]), over the new positions only.
    ///
    /// # Shapes
    /// - as [`DecoderBlock::try_forward`]; returns output `[batch, seq_len, d_model]` and, when
    ///   asked for, `n_layers` [`DecoderWeights`]
    /// - a cached step: `input.x` `[batch, seq_len, d_model]`, the tokens after
    ///   `cache.filled()`
    ///
    /// # Errors
    /// As [`DecoderBlock::try_forward`]. A cached step: [`ModelError::CacheFull`] for a step
    /// past the capacity, [`ModelError::CacheBatchMismatch`] for a batch the cache was not
    /// made for, [`ModelError::CacheShape`] for a cache of another model,
    /// [`ModelError::MemoryMismatch`] or [`ModelError::CacheBatchMismatch`] for a memory
    /// missing, needless or of another batch, [`ModelError::WidthMismatch`], and
    /// [`ModelError::CachedInput`] for padding, a memory tensor or weights. Nothing is written
    /// when a check fails.
    pub fn try_forward(&self, input: DecoderInput<'_>) -> Result<DecoderOutput, ModelError> {
        let DecoderInput {
            mut x,
            sources,
            cache,
        } = input;
        if let Some((cache, memory)) = cache {
            if sources.padding.is_some() || sources.memory.is_some() {
                return Err(ModelError::CachedInput(
                    "a cached step takes its padding from the cache and its memory from a \
                     MemoryCache",
                ));
            }
            if sources.need_weights != NeedWeights::No {
                return Err(ModelError::CachedInput(
                    "a cached step returns no attention weights",
                ));
            }
            return Ok(DecoderOutput {
                output: self.step(x, cache, memory)?,
                weights: Vec::new(),
            });
        }
        let mut weights = Vec::new();
        for layer in &self.layers {
            let (y, w) = layer.run(x, sources.clone())?;
            x = y;
            weights.extend(w);
        }
        Ok(DecoderOutput {
            output: self.final_norm(x),
            weights,
        })
    }

    /// [`try_forward`](Self::try_forward) for inputs known to fit.
    ///
    /// # Shapes
    /// As [`try_forward`](Self::try_forward).
    ///
    /// # Panics
    /// On any [`ModelError`], with its message.
    pub fn forward(&self, input: DecoderInput<'_>) -> DecoderOutput {
        self.try_forward(input)
            .unwrap_or_else(|e| panic!("decoder: {e}"))
    }

    /// An empty key/value cache for `batch` sequences of up to `capacity` tokens each
    /// (padding included), `left_pad[b]` of them leading padding; with a sliding window it
    /// holds `min(capacity, window)` slots and rolls.
    ///
    /// # Errors
    /// [`ModelError::ZeroSize`], [`ModelError::PerSequenceMismatch`],
    /// [`ModelError::PaddingTooLong`], each naming the numbers.
    pub fn new_cache(
        &self,
        batch: usize,
        capacity: usize,
        left_pad: Option<&[usize]>,
    ) -> Result<KvCache, ModelError> {
        KvCache::new(
            self.layers.len(),
            batch,
            capacity,
            self.head_shape(),
            self.window(),
            left_pad,
            &self.device(),
        )
    }

    /// Projects a memory's cross-attention keys and values for every layer, once.
    ///
    /// # Shapes
    /// - `memory`: `[batch, seq_len_kv, d_memory]`; `padding`: `[batch, seq_len_kv]`
    ///
    /// # Errors
    /// [`ModelError::MemoryMismatch`] for a decoder without cross-attention,
    /// [`ModelError::WidthMismatch`] or [`ModelError::ShapeMismatch`] for a memory or padding
    /// of the wrong shape.
    pub fn memory_cache(
        &self,
        memory: Tensor<3>,
        padding: Option<Tensor<2, Bool>>,
    ) -> Result<MemoryCache, ModelError> {
        let [batch, seq_len_kv, d_memory] = memory.dims();
        let Some(cross) = self.first().cross_attention.as_ref() else {
            return Err(needless_memory());
        };
        if d_memory != cross.d_context() {
            return Err(ModelError::WidthMismatch {
                what: "memory",
                expected: cross.d_context(),
                got: d_memory,
            });
        }
        if let Some(padding) = &padding {
            check_shape("memory padding", &[batch, seq_len_kv], &padding.dims())?;
        }
        let layers = self
            .layers
            .iter()
            .map(|layer| {
                layer
                    .memory_keys_values(memory.clone())
                    .expect("every block of a stack has cross-attention when the first has")
            })
            .collect();
        Ok(MemoryCache {
            layers,
            mask: padding.map(attn_core::padding_mask), // [batch, 1, 1, seq_len_kv]
            batch,
            seq_len_kv,
        })
    }

    /// New tokens through every block with the cache: each layer projects only these
    /// tokens, writes their keys and values into the cache, and attends over what it holds.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq_len, d_model]`, the tokens after `cache.filled()`
    /// - returns: `[batch, seq_len, d_model]`
    fn step(
        &self,
        x: Tensor<3>,
        cache: &mut KvCache,
        memory: Option<&MemoryCache>,
    ) -> Result<Tensor<3>, ModelError> {
        let [batch, seq_len, d_model] = x.dims();
        self.check_cache(cache, memory, batch, d_model)?;
        let first = &self.first().self_attention;
        let alibi = first.alibi_form().map(|form| (first.n_heads(), form));
        let plan = cache.plan(batch, seq_len, alibi, &x.device())?;
        let mut x = x;
        for (i, (layer, kv)) in self.layers.iter().zip(cache.layers_mut()).enumerate() {
            let memory = memory.map(|m| m.layer(i));
            x = layer.step(x, kv, &plan, memory)?;
        }
        cache.advance(&plan);
        Ok(self.final_norm(x))
    }

    /// Number of blocks.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Model width.
    pub fn d_model(&self) -> usize {
        self.first().d_model()
    }

    /// The sliding window of self-attention, if any.
    pub fn window(&self) -> Option<usize> {
        self.first().window()
    }

    /// Whether the blocks attend to a memory.
    pub fn has_cross_attention(&self) -> bool {
        self.first().has_cross_attention()
    }

    fn final_norm(&self, x: Tensor<3>) -> Tensor<3> {
        match &self.norm_final {
            Some(norm) => norm.forward(x),
            None => x,
        }
    }

    fn first(&self) -> &DecoderBlock {
        self.layers
            .first()
            .expect("DecoderConfig::validate refuses a decoder without blocks")
    }

    fn head_shape(&self) -> [usize; 2] {
        let attention = &self.first().self_attention;
        [attention.n_kv_heads(), attention.d_head()]
    }

    pub(crate) fn device(&self) -> Device {
        self.first().device()
    }

    fn check_cache(
        &self,
        cache: &KvCache,
        memory: Option<&MemoryCache>,
        batch: usize,
        d_model: usize,
    ) -> Result<(), ModelError> {
        if d_model != self.d_model() {
            return Err(ModelError::WidthMismatch {
                what: "decoder step input",
                expected: self.d_model(),
                got: d_model,
            });
        }
        let [n_kv_heads, d_head] = self.head_shape();
        let [got_n_kv_heads, got_d_head] = cache.head_shape();
        if cache.n_layers() != self.layers.len() || [n_kv_heads, d_head] != cache.head_shape() {
            return Err(ModelError::CacheShape {
                expected_layers: self.layers.len(),
                expected_n_kv_heads: n_kv_heads,
                expected_d_head: d_head,
                got_layers: cache.n_layers(),
                got_n_kv_heads,
                got_d_head,
            });
        }
        match (self.has_cross_attention(), memory) {
            (true, None) => Err(missing_memory()),
            (false, Some(_)) => Err(needless_memory()),
            (true, Some(m)) if m.batch != batch || m.layers.len() != self.layers.len() => {
                Err(ModelError::CacheBatchMismatch {
                    expected: m.batch,
                    got: batch,
                })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_pos::AlibiForm;
    use attn_testing::{
        ATOL, RTOL, SeededRng, assert_close_slices, assert_tensors_close, for_each_device, to_vec,
    };

    const BATCH: usize = 3;
    const SEQ_LEN: usize = 5;
    const D_MODEL: usize = 12;
    const N_HEADS: usize = 3;
    const D_FF: usize = 7;
    const MEMORY_LEN: usize = 4;
    const D_MEMORY: usize = 8;

    fn block_config(norm: NormPlacement) -> DecoderBlockConfig {
        DecoderBlockConfig::new(D_MODEL, N_HEADS, D_FF)
            .with_d_memory(Some(D_MEMORY))
            .with_dropout(0.0)
            .with_norm(norm)
    }

    #[test]
    fn weights_have_the_documented_shapes_and_masked_keys_get_none() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(61);
            let block = block_config(NormPlacement::Pre)
                .init(&d.device)
                .expect("valid");
            let x = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
            let memory = rng.tensor([BATCH, MEMORY_LEN, D_MEMORY], &d.device);
            let padding = attn_core::padding_mask_from_lengths(&[4, 2, 3], MEMORY_LEN, &d.device)
                .expect("fit");
            let input =
                || DecoderInput::new(x.clone()).with_memory(memory.clone(), Some(padding.clone()));
            let out = block
                .try_forward(input().with_weights(NeedWeights::PerHead))
                .expect("explicit weights");
            assert_tensors_close(
                out.output,
                block.forward(input()).output,
                ATOL,
                RTOL,
                "same output",
            );
            let [weights]: [DecoderWeights; 1] = out.weights.try_into().expect("one block");
            let self_w = weights.self_attention;
            assert_eq!(self_w.dims(), [BATCH, N_HEADS, SEQ_LEN, SEQ_LEN]);
            let cross = weights.cross_attention.expect("cross-attention");
            assert_eq!(cross.dims(), [BATCH, N_HEADS, SEQ_LEN, MEMORY_LEN]);
            // Causal: query 1 gives keys 2.. nothing; sequence 1 pads memory keys 2 and 3.
            let future = to_vec(self_w.slice([0..BATCH, 0..N_HEADS, 1..2, 2..SEQ_LEN]));
            assert!(future.iter().all(|w| *w == 0.0), "{future:?}");
            let padded = to_vec(cross.clone().slice([1..2, 0..N_HEADS, 0..SEQ_LEN, 2..4]));
            assert!(padded.iter().all(|w| *w == 0.0), "{padded:?}");
            let sums = to_vec(cross.sum_dim(3));
            assert_close_slices(&sums, &vec![1.0; sums.len()], 1e-5, 0.0, "rows sum to 1");
        });
    }

    #[test]
    fn a_memory_missing_or_given_in_vain_is_an_error() {
        let device = Device::flex();
        let mut rng = SeededRng::new(62);
        let x = rng.tensor([1, 2, D_MODEL], &device);
        let with_cross = block_config(NormPlacement::Post)
            .init(&device)
            .expect("valid");
        let err = with_cross
            .try_forward(DecoderInput::new(x.clone()))
            .expect_err("no memory");
        assert!(matches!(err, ModelError::MemoryMismatch(_)), "{err}");
        let without = block_config(NormPlacement::Post)
            .with_cross_attention(false)
            .init(&device)
            .expect("valid");
        let memory = rng.tensor([1, 3, D_MEMORY], &device);
        let err = without
            .try_forward(DecoderInput::new(x).with_memory(memory, None))
            .expect_err("memory in vain");
        assert!(err.to_string().contains("no cross-attention"), "{err}");
    }

    #[test]
    fn cached_steps_equal_the_full_stack_with_memory_for_every_attention_scheme() {
        for_each_device(|d| {
            for pos in [
                PositionalScheme::None,
                PositionalScheme::rotary_half_split(),
                PositionalScheme::Alibi {
                    form: AlibiForm::Causal,
                },
            ] {
                let mut rng = SeededRng::new(63);
                let decoder =
                    DecoderConfig::new(2, block_config(NormPlacement::Post).with_pos(pos.clone()))
                        .with_final_norm(true)
                        .init(&d.device)
                        .expect("valid");
                let x = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
                let memory = rng.tensor([BATCH, MEMORY_LEN, D_MEMORY], &d.device);
                let padding =
                    attn_core::padding_mask_from_lengths(&[4, 2, 3], MEMORY_LEN, &d.device)
                        .expect("fit");
                let full = decoder
                    .forward(
                        DecoderInput::new(x.clone())
                            .with_memory(memory.clone(), Some(padding.clone())),
                    )
                    .output;
                let memory = decoder.memory_cache(memory, Some(padding)).expect("fits");
                let mut cache = decoder.new_cache(BATCH, SEQ_LEN, None).expect("valid");
                // A prompt of two tokens, then one token at a time.
                let mut steps = vec![
                    decoder
                        .try_forward(
                            DecoderInput::new(x.clone().narrow(1, 0, 2))
                                .with_cache(&mut cache, Some(&memory)),
                        )
                        .expect("fits")
                        .output,
                ];
                for t in 2..SEQ_LEN {
                    steps.push(
                        decoder
                            .try_forward(
                                DecoderInput::new(x.clone().narrow(1, t, 1))
                                    .with_cache(&mut cache, Some(&memory)),
                            )
                            .expect("fits")
                            .output,
                    );
                }
                assert_tensors_close(Tensor::cat(steps, 1), full, 1e-5, 0.0, &format!("{pos:?}"));
            }
        });
    }
}
