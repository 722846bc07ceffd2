//! One decoder block: causal self-attention, optional cross-attention over a memory and a
//! feed-forward network, each in a residual connection with its norm; run over every position
//! or, as one layer of a cached step, over the new tokens only.

use attn_core::{CausalAlignment, Strategy, window_mask};
use attn_pos::PositionalScheme;
use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Bool, Device, Tensor};

use super::{
    DecoderInput, DecoderOutput, DecoderWeights, Sources, missing_memory, needless_memory,
};
use crate::attention::{MhaInput, MultiHeadAttention, MultiHeadAttentionConfig};
use crate::cache::{LayerKv, LayerMemory, StepPlan};
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
    /// weights asked for), [`ModelError::CachedInput`] for a cache (a [`Decoder`](super::Decoder) steps).
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

    pub(super) fn run(
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

    pub(super) fn device(&self) -> Device {
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
