//! The paper's whole model (Vaswani et al. 2017, Figure 1): an encoder reads the source, a
//! decoder writes the target while attending to the encoder's output.
//!
//! ```text
//! memory = Encoder(Embed_src(source))                       source tokens → memory
//! logits = TokenDecoder(target, cross-attention → memory)   target tokens → logits
//! ```
//!
//! Source sequences of different lengths are right-padded with a padding mask (the encoder
//! sees both sides, so its positions run from 0 in every sequence); target sequences are
//! left-padded, as everywhere in decoding. Rotary positions act in both stacks; ALiBi acts
//! in the encoder in its symmetric form and in the decoder in the form configured. The two
//! stacks keep separate embedding tables (a shared source-target vocabulary, as in the paper's
//! byte-pair setup, is not modelled).

use attn_core::Strategy;
use attn_pos::PositionalScheme;
use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Bool, Device, Int, Tensor};

use crate::attention::{NeedWeights, check_shape};
use crate::cache::{KvCache, MemoryCache};
use crate::embedding::{DrawOrder, Table, TokenEmbedding};
use crate::encoder::{Encoder, EncoderBlockConfig, EncoderConfig, EncoderInput};
use crate::error::{ModelError, check_nonzero};
use crate::feed_forward::Activation;
use crate::residual::NormPlacement;
use crate::token_decoder::{
    TargetMemory, TokenDecoder, TokenDecoderConfig, TokenDecoderInput, TokenDecoderOutput,
};

/// Configuration of an [`EncoderDecoder`].
///
/// ```
/// use attn_model::{EncoderDecoderConfig, EncoderDecoderInput, PositionalScheme};
/// use burn::tensor::{Device, Int, Tensor};
///
/// let device = Device::flex();
/// let model = EncoderDecoderConfig::new(13, 11, 12, 3, 2, 24, PositionalScheme::sinusoidal())
///     .init(&device)
///     .unwrap();
/// let source = Tensor::<2, Int>::from_ints([[1, 2, 3, 4], [5, 6, 0, 0]], &device);
/// let target = Tensor::<2, Int>::from_ints([[1, 2, 3], [4, 5, 6]], &device);
/// let out = model.try_forward(EncoderDecoderInput::new(source, target)).unwrap();
/// assert_eq!(out.logits.dims(), [2, 3, 11]);
/// ```
#[derive(Config, Debug)]
pub struct EncoderDecoderConfig {
    /// Source vocabulary size.
    pub src_vocab: usize,
    /// Target vocabulary size (the width of the logits).
    pub tgt_vocab: usize,
    /// Model width of both stacks.
    pub d_model: usize,
    /// Attention heads per layer.
    pub n_heads: usize,
    /// Blocks in each stack (6 in the paper).
    pub n_layers: usize,
    /// Hidden width of the feed-forward networks.
    pub d_ff: usize,
    /// Positions of both stacks.
    pub pos: PositionalScheme,
    /// Dropout everywhere while training.
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Post-norm (paper) or pre-norm blocks.
    #[config(default = "NormPlacement::Post")]
    pub norm: NormPlacement,
    /// ReLU (paper) or GELU.
    #[config(default = "Activation::Relu")]
    pub activation: Activation,
    /// Tie the decoder's LM head to its embedding table (paper §3.4 ties all three tables).
    #[config(default = false)]
    pub tie_embeddings: bool,
    /// A LayerNorm after each stack's last block (PyTorch's `nn.Transformer` has both).
    #[config(default = true)]
    pub final_norm: bool,
    /// LayerNorm epsilon.
    #[config(default = 1e-5)]
    pub layer_norm_eps: f64,
    /// How attention is computed.
    #[config(default = "Strategy::Auto")]
    pub strategy: Strategy,
}

impl EncoderDecoderConfig {
    /// The encoder stack's configuration.
    pub fn encoder(&self) -> EncoderConfig {
        let pos = match &self.pos {
            PositionalScheme::Rotary { .. } => self.pos.clone(),
            PositionalScheme::Alibi { .. } => PositionalScheme::alibi(),
            _ => PositionalScheme::None,
        };
        let block = EncoderBlockConfig::new(self.d_model, self.n_heads, self.d_ff)
            .with_dropout(self.dropout)
            .with_norm(self.norm)
            .with_activation(self.activation)
            .with_layer_norm_eps(self.layer_norm_eps)
            .with_pos(pos)
            .with_strategy(self.strategy);
        EncoderConfig::new(self.n_layers, block).with_final_norm(self.final_norm)
    }

    /// The target side's configuration: a [`TokenDecoder`] with cross-attention.
    pub fn decoder(&self) -> TokenDecoderConfig {
        TokenDecoderConfig::new(
            self.tgt_vocab,
            self.d_model,
            self.n_heads,
            self.n_layers,
            self.d_ff,
            self.pos.clone(),
        )
        .with_dropout(self.dropout)
        .with_norm(self.norm)
        .with_activation(self.activation)
        .with_tie_embeddings(self.tie_embeddings)
        .with_final_norm(self.final_norm)
        .with_cross_attention(true)
        .with_layer_norm_eps(self.layer_norm_eps)
        .with_strategy(self.strategy)
    }

    /// Checks every setting without making a tensor.
    ///
    /// # Errors
    /// [`ModelError::ZeroSize`] for a zero `src_vocab` or `n_layers`, and the errors of
    /// [`EncoderConfig::validate`] and [`TokenDecoderConfig::validate`].
    pub fn validate(&self) -> Result<(), ModelError> {
        check_nonzero("src_vocab", self.src_vocab)?;
        self.encoder().validate()?;
        self.decoder().validate()
    }

    /// Builds the model after [`validate`](Self::validate).
    ///
    /// # Errors
    /// Any error of [`validate`](Self::validate).
    pub fn init(&self, device: &Device) -> Result<EncoderDecoder, ModelError> {
        self.validate()?;
        Ok(EncoderDecoder {
            source: TokenEmbedding::new(
                self.src_vocab,
                self.d_model,
                &self.pos,
                self.dropout,
                Table::Scaled,
                DrawOrder::PositionsFirst,
                device,
            )?,
            encoder: self.encoder().init(device)?,
            target: self.decoder().init(device)?,
            src_vocab: self.src_vocab,
        })
    }
}

/// The encoder's output and its padding, what cross-attention reads.
#[derive(Clone, Debug)]
pub struct Memory {
    /// `[batch, seq_len_kv, d_model]`.
    pub states: Tensor<3>,
    /// `[batch, seq_len_kv]`, `true` = padding.
    pub padding: Option<Tensor<2, Bool>>,
}

/// What an [`EncoderDecoder`] reads: the source with its padding, the target with its left
/// padding, and which attention weights to return beside the logits; or, for a cached step,
/// the source's cached keys and values and the target tokens that follow what a [`KvCache`]
/// holds.
#[derive(Debug)]
pub struct EncoderDecoderInput<'a> {
    source: SourceInput<'a>,
    source_padding: Option<Tensor<2, Bool>>,
    target: TokenDecoderInput<'a>,
}

/// The source as the decoder reads it: tokens to encode, or an encoding already projected.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one value per call, moved into the forward pass and never stored"
)]
enum SourceInput<'a> {
    Tokens(Tensor<2, Int>),
    Cached(&'a MemoryCache),
}

impl<'a> EncoderDecoderInput<'a> {
    /// Source and target token ids, without padding or weights.
    ///
    /// # Shapes
    /// - `source`: `[batch, seq_len_kv]`, ids in `0..src_vocab`
    /// - `target`: `[batch, seq_len]`, ids in `0..tgt_vocab`
    pub fn new(source: Tensor<2, Int>, target: Tensor<2, Int>) -> Self {
        Self {
            source: SourceInput::Tokens(source),
            source_padding: None,
            target: TokenDecoderInput::new(target),
        }
    }

    /// A cached step: the target tokens at slots `cache.filled()..`, attending to a source
    /// encoded and projected once ([`EncoderDecoder::try_encode`], then
    /// [`EncoderDecoder::memory_cache`]); see [`TokenDecoderInput::with_cache`].
    ///
    /// # Shapes
    /// - `target`: `[batch, seq_len]`
    pub fn cached(memory: &'a MemoryCache, target: Tensor<2, Int>, cache: &'a mut KvCache) -> Self {
        Self {
            source: SourceInput::Cached(memory),
            source_padding: None,
            target: TokenDecoderInput::new(target).with_cache(cache),
        }
    }

    /// Masks padded source keys (`true` = padding; the source is right-padded).
    ///
    /// # Shapes
    /// - `padding`: `[batch, seq_len_kv]`
    pub fn with_source_padding(mut self, padding: Tensor<2, Bool>) -> Self {
        self.source_padding = Some(padding);
        self
    }

    /// Target sequence `b` starts with `left_pad[b]` padding tokens (see
    /// [`TokenDecoderInput::with_left_pad`]).
    pub fn with_left_pad(mut self, left_pad: &'a [usize]) -> Self {
        self.target = self.target.with_left_pad(left_pad);
        self
    }

    /// Asks for every decoder block's self- and cross-attention weights too.
    pub fn with_weights(mut self, need_weights: NeedWeights) -> Self {
        self.target = self.target.with_weights(need_weights);
        self
    }
}

/// Source embedding and encoder, and a target [`TokenDecoder`] whose blocks attend to the
/// encoder's output.
#[derive(Module, Debug)]
pub struct EncoderDecoder {
    /// Source token embedding and additive positions.
    pub(crate) source: TokenEmbedding,
    /// The encoder stack.
    pub(crate) encoder: Encoder,
    /// The target side: embedding, decoder with cross-attention, LM head.
    pub(crate) target: TokenDecoder,
    src_vocab: usize,
}

impl EncoderDecoder {
    /// Encodes the source once.
    ///
    /// # Shapes
    /// - `source`: `[batch, seq_len_kv]`; `padding`: `[batch, seq_len_kv]`, `true` = padding
    /// - returns: memory `[batch, seq_len_kv, d_model]` with the padding
    ///
    /// # Errors
    /// [`ModelError::TokenOutOfRange`], [`ModelError::ShapeMismatch`] for a padding of the
    /// wrong shape, [`ModelError::Positional`] for a source past a learned table.
    pub fn try_encode(
        &self,
        source: Tensor<2, Int>,
        padding: Option<Tensor<2, Bool>>,
    ) -> Result<Memory, ModelError> {
        let [batch, seq_len_kv] = source.dims();
        if let Some(padding) = &padding {
            check_shape("source padding", &[batch, seq_len_kv], &padding.dims())?;
        }
        let x = self.source.forward(source, 0, &vec![0; batch])?; // [batch, seq_len_kv, d_model]
        let states = self
            .encoder
            .try_forward(EncoderInput {
                x,
                padding: padding.clone(),
                need_weights: NeedWeights::No,
            })?
            .output;
        Ok(Memory { states, padding })
    }

    /// Target logits for every position, recomputed from scratch; or, for a cached step
    /// ([`EncoderDecoderInput::cached`]), of the new target tokens only.
    ///
    /// # Shapes
    /// - `input.source`, `input.source_padding`: `[batch, seq_len_kv]`
    /// - `input.target`: `[batch, seq_len]`, left-padded by `input.left_pad`
    /// - returns: logits `[batch, seq_len, tgt_vocab]`; when asked for, each decoder block's
    ///   self-attention weights and cross-attention weights `[batch, n_heads, seq_len,
    ///   seq_len_kv]` (queries: target, keys: source), which say which source tokens each
    ///   target token reads
    ///
    /// # Errors
    /// Those of [`try_encode`](Self::try_encode) and [`TokenDecoder::try_forward`] (a cached
    /// step's included); [`ModelError::CacheBatchMismatch`] for a memory cache of another
    /// batch.
    pub fn try_forward(
        &self,
        input: EncoderDecoderInput<'_>,
    ) -> Result<TokenDecoderOutput, ModelError> {
        let memory = match input.source {
            SourceInput::Tokens(source) => {
                let memory = self.try_encode(source, input.source_padding)?;
                TargetMemory::States(memory.states, memory.padding)
            }
            SourceInput::Cached(_) if input.source_padding.is_some() => {
                return Err(ModelError::CachedInput(
                    "a cached step takes the source's padding from its memory cache",
                ));
            }
            SourceInput::Cached(memory) => TargetMemory::Cached(memory),
        };
        self.target.run(input.target, memory)
    }

    /// [`try_forward`](Self::try_forward) for inputs known to fit.
    ///
    /// # Shapes
    /// As [`try_forward`](Self::try_forward).
    ///
    /// # Panics
    /// On any [`ModelError`], with its message.
    pub fn forward(&self, input: EncoderDecoderInput<'_>) -> TokenDecoderOutput {
        self.try_forward(input)
            .unwrap_or_else(|e| panic!("encoder-decoder: {e}"))
    }

    /// Cross-attention keys and values of every decoder layer, projected once from `memory`.
    ///
    /// # Errors
    /// As [`Decoder::memory_cache`](crate::Decoder::memory_cache).
    pub fn memory_cache(&self, memory: &Memory) -> Result<MemoryCache, ModelError> {
        self.target
            .decoder
            .memory_cache(memory.states.clone(), memory.padding.clone())
    }

    /// An empty target key/value cache (see [`Decoder::new_cache`](crate::Decoder::new_cache)).
    ///
    /// # Errors
    /// As [`Decoder::new_cache`](crate::Decoder::new_cache).
    pub fn new_cache(
        &self,
        batch: usize,
        capacity: usize,
        left_pad: Option<&[usize]>,
    ) -> Result<KvCache, ModelError> {
        self.target.new_cache(batch, capacity, left_pad)
    }

    /// Source vocabulary size.
    pub fn src_vocab(&self) -> usize {
        self.src_vocab
    }

    /// The target side.
    pub fn target(&self) -> &TokenDecoder {
        &self.target
    }

    /// The encoder stack.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }
}
