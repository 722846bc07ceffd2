//! A decoder-only language model (GPT's shape): token ids in, next-token logits out.
//!
//! ```text
//! x = Embedding(tokens) · √d_model  (+ positional encoding)
//! x = Dropout(x)
//! x = Decoder(x)                  causal blocks, final LayerNorm
//! logits = x · W_head             or x · Eᵀ with the head tied to the embedding table
//! ```
//!
//! A batch of sequences of different lengths is left-padded (see `crate::cache`): sequence `b`
//! starts with `left_pad[b]` padding tokens, which no query attends to, and its positions
//! count from its first real token, so a sequence's logits do not depend on the padding it
//! was given. The same convention holds with and without the key/value cache.

use attn_core::Strategy;
use attn_pos::PositionalScheme;
use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Bool, Device, Int, Tensor};

use crate::attention::NeedWeights;
use crate::cache::{KvCache, MemoryCache, check_left_pad, left_padding_mask};
use crate::decoder::{Decoder, DecoderBlockConfig, DecoderConfig, DecoderInput, DecoderWeights};
use crate::embedding::{DrawOrder, Table, TokenEmbedding};
use crate::error::{ModelError, check_dropout, check_nonzero};
use crate::feed_forward::Activation;
use crate::norm::NormKind;
use crate::project::project;
use crate::residual::NormPlacement;

/// Configuration of a [`TokenDecoder`].
///
/// ```
/// use attn_model::{PositionalScheme, TokenDecoderConfig, TokenDecoderInput};
/// use burn::tensor::{Device, Int, Tensor};
///
/// let device = Device::flex();
/// let model = TokenDecoderConfig::new(11, 12, 3, 2, 24, PositionalScheme::rotary())
///     .with_tie_embeddings(true)
///     .init(&device)
///     .unwrap();
/// let tokens = Tensor::<2, Int>::from_ints([[1, 2, 3], [4, 5, 10]], &device);
/// assert_eq!(model.forward(TokenDecoderInput::new(tokens)).logits.dims(), [2, 3, 11]);
/// ```
#[derive(Config, Debug)]
pub struct TokenDecoderConfig {
    /// Vocabulary size: token ids are `0..vocab`, and each position gets `vocab` logits.
    pub vocab: usize,
    /// Model width.
    pub d_model: usize,
    /// Attention heads per layer.
    pub n_heads: usize,
    /// Number of decoder blocks.
    pub n_layers: usize,
    /// Hidden width of the feed-forward networks.
    pub d_ff: usize,
    /// How positions enter the model: added to the embeddings (sinusoidal, learned) or
    /// applied in every self-attention layer (rotary, ALiBi).
    pub pos: PositionalScheme,
    /// Dropout on the embedded input, sub-layer outputs, attention weights and feed-forward
    /// hidden units while training.
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Pre-norm (GPT-2's choice, the default here) or post-norm blocks.
    #[config(default = "NormPlacement::Pre")]
    pub norm: NormPlacement,
    /// ReLU (paper) or GELU in the feed-forward networks.
    #[config(default = "Activation::Relu")]
    pub activation: Activation,
    /// Multiply the embeddings by `√d_model` (paper §3.4).
    #[config(default = true)]
    pub scale_embedding: bool,
    /// A LayerNorm after the last block (what pre-norm needs).
    #[config(default = true)]
    pub final_norm: bool,
    /// Use the embedding table as the output projection, `logits = x · Eᵀ` (Press & Wolf
    /// 2017, GPT-2), instead of a head of its own.
    #[config(default = false)]
    pub tie_embeddings: bool,
    /// Key/value heads for grouped-query attention; `None` means `n_heads`.
    pub n_kv_heads: Option<usize>,
    /// Width of each head when it is not `d_model / n_heads` (see
    /// [`DecoderBlockConfig::head_dim`]).
    pub head_dim: Option<usize>,
    /// RMSNorm on each head's queries and keys (see [`DecoderBlockConfig::qk_norm`]).
    pub qk_norm: Option<f64>,
    /// Whether the query, key and value projections have biases.
    #[config(default = true)]
    pub bias_qkv: bool,
    /// Whether the attention output and feed-forward projections have biases.
    #[config(default = true)]
    pub bias_out: bool,
    /// Whether the feed-forward networks are gated (SwiGLU).
    #[config(default = false)]
    pub gated: bool,
    /// LayerNorm or RMSNorm, in the blocks and after the last.
    #[config(default = "NormKind::Layer")]
    pub norm_kind: NormKind,
    /// Sliding window of self-attention (see [`DecoderBlockConfig::window`]).
    pub window: Option<usize>,
    /// Whether the blocks attend to an encoder's output (set by
    /// [`EncoderDecoderConfig`](crate::EncoderDecoderConfig)).
    #[config(default = false)]
    pub cross_attention: bool,
    /// LayerNorm epsilon.
    #[config(default = 1e-5)]
    pub layer_norm_eps: f64,
    /// How attention is computed.
    #[config(default = "Strategy::Auto")]
    pub strategy: Strategy,
}

impl TokenDecoderConfig {
    /// The decoder stack's configuration: rotary and ALiBi go to every self-attention layer,
    /// additive schemes stay with the embeddings.
    pub fn decoder(&self) -> DecoderConfig {
        let attention_pos = match &self.pos {
            scheme @ (PositionalScheme::Rotary { .. } | PositionalScheme::Alibi { .. }) => {
                scheme.clone()
            }
            _ => PositionalScheme::None,
        };
        let block = DecoderBlockConfig::new(self.d_model, self.n_heads, self.d_ff)
            .with_n_kv_heads(self.n_kv_heads)
            .with_head_dim(self.head_dim)
            .with_qk_norm(self.qk_norm)
            .with_bias_qkv(self.bias_qkv)
            .with_bias_out(self.bias_out)
            .with_gated(self.gated)
            .with_norm_kind(self.norm_kind)
            .with_cross_attention(self.cross_attention)
            .with_dropout(self.dropout)
            .with_norm(self.norm)
            .with_activation(self.activation)
            .with_layer_norm_eps(self.layer_norm_eps)
            .with_pos(attention_pos)
            .with_window(self.window)
            .with_strategy(self.strategy);
        DecoderConfig::new(self.n_layers, block).with_final_norm(self.final_norm)
    }

    /// Checks every setting without making a tensor.
    ///
    /// # Errors
    /// [`ModelError::ZeroSize`] for a zero `vocab`, [`ModelError::InvalidDropout`], the errors
    /// of [`DecoderConfig::validate`], and [`ModelError::Positional`] when the positional
    /// scheme refuses `d_model`.
    pub fn validate(&self) -> Result<(), ModelError> {
        check_nonzero("vocab", self.vocab)?;
        check_dropout(self.dropout)?;
        self.decoder().validate()?;
        // Rotary positions rotate heads of width head_dim, whatever d_model is.
        let width = match self.head_dim {
            Some(head_dim) => head_dim.saturating_mul(self.n_heads),
            None => self.d_model,
        };
        Ok(self.pos.validate(width, self.n_heads)?)
    }

    /// Builds the model after [`validate`](Self::validate).
    ///
    /// # Errors
    /// Any error of [`validate`](Self::validate).
    pub fn init(&self, device: &Device) -> Result<TokenDecoder, ModelError> {
        self.validate()?;
        Ok(TokenDecoder {
            embedding: TokenEmbedding::new(
                self.vocab,
                self.d_model,
                &self.pos,
                self.dropout,
                Table::of(self.scale_embedding, self.tie_embeddings),
                DrawOrder::PositionsFirst,
                device,
            )?,
            decoder: self.decoder().init(device)?,
            head: (!self.tie_embeddings).then(|| {
                LinearConfig::new(self.d_model, self.vocab)
                    .with_bias(false)
                    .init(device)
            }),
            vocab: self.vocab,
        })
    }
}

/// Token embedding, positions, decoder blocks, final norm and LM head: next-token logits for
/// every position.
#[derive(Module, Debug)]
pub struct TokenDecoder {
    /// Token embedding and additive positions.
    pub(crate) embedding: TokenEmbedding,
    /// The stack of decoder blocks (with the final LayerNorm).
    pub(crate) decoder: Decoder,
    /// `d_model → vocab`, or `None` when tied to the embedding table.
    pub(crate) head: Option<Linear>,
    vocab: usize,
}

/// What a [`TokenDecoder`] reads: token ids, how many padding tokens open each sequence, and
/// which attention weights to return beside the logits; or, for a cached step, the tokens that
/// follow what a [`KvCache`] holds.
#[derive(Debug)]
pub struct TokenDecoderInput<'a> {
    tokens: Tensor<2, Int>,
    left_pad: Option<&'a [usize]>,
    need_weights: NeedWeights,
    cache: Option<&'a mut KvCache>,
}

impl<'a> TokenDecoderInput<'a> {
    /// Token ids, without padding or weights.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq_len]`, ids in `0..vocab`
    pub fn new(tokens: Tensor<2, Int>) -> Self {
        Self {
            tokens,
            left_pad: None,
            need_weights: NeedWeights::No,
            cache: None,
        }
    }

    /// Sequence `b` starts with `left_pad[b]` padding tokens (any ids): no query attends to
    /// them, and the sequence's positions count from its first real token.
    pub fn with_left_pad(mut self, left_pad: &'a [usize]) -> Self {
        self.left_pad = Some(left_pad);
        self
    }

    /// Asks for every block's attention weights too (the fused, chunked and native strategies
    /// cannot return them).
    pub fn with_weights(mut self, need_weights: NeedWeights) -> Self {
        self.need_weights = need_weights;
        self
    }

    /// A cached step: the tokens sit at slots `cache.filled()..`; only they are projected,
    /// their keys and values are written into `cache`, and attention reads what it holds.
    /// Each sequence's left padding is the cache's (see [`TokenDecoder::new_cache`]).
    pub fn with_cache(mut self, cache: &'a mut KvCache) -> Self {
        self.cache = Some(cache);
        self
    }
}

/// What a [`TokenDecoder`] or [`EncoderDecoder`](crate::EncoderDecoder) returns.
#[derive(Clone, Debug)]
pub struct TokenDecoderOutput {
    /// `[batch, seq_len, vocab]`.
    pub logits: Tensor<3>,
    /// Each block's attention weights, first to last, when the input asked for them; empty
    /// otherwise.
    pub weights: Vec<DecoderWeights>,
}

/// What the blocks of a [`TokenDecoder`] with cross-attention read: nothing (decoder-only),
/// the encoder's states with their padding (a full forward), or their cached keys and values
/// (a cached step).
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one value per call, moved into the forward pass and never stored"
)]
pub(crate) enum TargetMemory<'m> {
    None,
    States(Tensor<3>, Option<Tensor<2, Bool>>),
    Cached(&'m MemoryCache),
}

impl TokenDecoder {
    /// Logits for every position: recomputed from scratch (the reference for the cache), or,
    /// for a cached step ([`TokenDecoderInput::with_cache`]), of the new tokens only.
    ///
    /// Reads the token ids back to the host to check them.
    ///
    /// # Shapes
    /// - `input.tokens`: `[batch, seq_len]`, ids in `0..vocab`, sequence `b` starting with
    ///   `left_pad[b]` padding tokens (any ids); for a cached step, the tokens at slots
    ///   `cache.filled()..`
    /// - returns: logits `[batch, seq_len, vocab]`; when asked for, each block's self-attention
    ///   weights `[batch, n_heads, seq_len, seq_len]`
    ///
    /// # Errors
    /// [`ModelError::TokenOutOfRange`] naming the first bad id and where it is,
    /// [`ModelError::PerSequenceMismatch`] or [`ModelError::PaddingTooLong`] for a `left_pad`
    /// that does not fit, [`ModelError::Positional`] for a sequence longer than a learned
    /// table, [`ModelError::MemoryMismatch`] for a model with cross-attention (use
    /// [`EncoderDecoder`](crate::EncoderDecoder)), [`ModelError::Attention`] when the
    /// configured strategy cannot return the weights asked for. A cached step: those of
    /// [`Decoder::try_forward`]'s cached step ([`ModelError::CacheFull`], [`ModelError::CacheBatchMismatch`],
    /// ...), each naming the numbers, and [`ModelError::CachedInput`] for left padding or
    /// weights; nothing is written into the cache when a check fails.
    pub fn try_forward(
        &self,
        input: TokenDecoderInput<'_>,
    ) -> Result<TokenDecoderOutput, ModelError> {
        self.run(input, TargetMemory::None)
    }

    /// [`try_forward`](Self::try_forward) for inputs known to fit.
    ///
    /// # Shapes
    /// As [`try_forward`](Self::try_forward).
    ///
    /// # Panics
    /// On any [`ModelError`], with its message.
    pub fn forward(&self, input: TokenDecoderInput<'_>) -> TokenDecoderOutput {
        self.try_forward(input)
            .unwrap_or_else(|e| panic!("token decoder: {e}"))
    }

    /// An empty key/value cache for `batch` sequences of up to `capacity` tokens each,
    /// padding included (see [`Decoder::new_cache`]).
    ///
    /// # Errors
    /// As [`Decoder::new_cache`].
    pub fn new_cache(
        &self,
        batch: usize,
        capacity: usize,
        left_pad: Option<&[usize]>,
    ) -> Result<KvCache, ModelError> {
        self.decoder.new_cache(batch, capacity, left_pad)
    }

    /// Vocabulary size.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// The decoder stack, e.g. to load PyTorch weights into it.
    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    /// Whether the LM head is the embedding table.
    pub fn ties_embeddings(&self) -> bool {
        self.head.is_none()
    }

    /// Logits (and weights) of `input`, its blocks attending to `memory` when given; on a CPU
    /// device the whole pass runs on rayon's pool ([`attn_core::backend::on_cpu_pool`]).
    pub(crate) fn run(
        &self,
        input: TokenDecoderInput<'_>,
        memory: TargetMemory<'_>,
    ) -> Result<TokenDecoderOutput, ModelError> {
        let device = input.tokens.device();
        attn_core::backend::on_cpu_pool(&device, || self.run_here(input, memory))
    }

    /// [`run`](Self::run) on the calling thread.
    fn run_here(
        &self,
        input: TokenDecoderInput<'_>,
        memory: TargetMemory<'_>,
    ) -> Result<TokenDecoderOutput, ModelError> {
        let TokenDecoderInput {
            tokens,
            left_pad,
            need_weights,
            cache,
        } = input;
        if let Some(cache) = cache {
            if left_pad.is_some() {
                return Err(ModelError::CachedInput(
                    "a cached step takes each sequence's left padding from its cache",
                ));
            }
            if need_weights != NeedWeights::No {
                return Err(ModelError::CachedInput(
                    "a cached step returns no attention weights",
                ));
            }
            let memory = match memory {
                TargetMemory::None => None,
                TargetMemory::Cached(memory) => Some(memory),
                TargetMemory::States(..) => {
                    return Err(ModelError::CachedInput(
                        "a cached step reads the memory's keys and values from a MemoryCache",
                    ));
                }
            };
            return Ok(TokenDecoderOutput {
                logits: self.run_step(tokens, cache, memory)?,
                weights: Vec::new(),
            });
        }
        let memory = match memory {
            TargetMemory::None => None,
            TargetMemory::States(states, padding) => Some((states, padding)),
            TargetMemory::Cached(_) => {
                return Err(ModelError::CachedInput(
                    "a memory cache serves cached steps only",
                ));
            }
        };
        let blocks = self
            .input(tokens, left_pad, memory)?
            .with_weights(need_weights);
        let decoded = self.decoder.try_forward(blocks)?;
        Ok(TokenDecoderOutput {
            logits: self.logits(decoded.output),
            weights: decoded.weights,
        })
    }

    /// The embedded target stream with its padding and memory, what the blocks read.
    fn input(
        &self,
        tokens: Tensor<2, Int>,
        left_pad: Option<&[usize]>,
        memory: Option<(Tensor<3>, Option<Tensor<2, Bool>>)>,
    ) -> Result<DecoderInput<'static>, ModelError> {
        let [batch, seq_len] = tokens.dims();
        let left_pad = check_left_pad(left_pad, batch, seq_len)?;
        let x = self.embedding.forward(tokens.clone(), 0, &left_pad)?; // [batch, seq_len, d_model]
        let mut input = DecoderInput::new(x);
        if left_pad.iter().any(|&pad| pad > 0) {
            input = input.with_padding(left_padding_mask(&left_pad, seq_len, &tokens.device()));
        }
        if let Some((memory, padding)) = memory {
            input = input.with_memory(memory, padding);
        }
        Ok(input)
    }

    fn run_step(
        &self,
        tokens: Tensor<2, Int>,
        cache: &mut KvCache,
        memory: Option<&MemoryCache>,
    ) -> Result<Tensor<3>, ModelError> {
        let [batch, _seq_len] = tokens.dims();
        if batch != cache.batch() {
            return Err(ModelError::CacheBatchMismatch {
                expected: cache.batch(),
                got: batch,
            });
        }
        let x = self
            .embedding
            .forward(tokens, cache.filled(), cache.left_pad())?; // [batch, seq_len, d_model]
        let decoded = self
            .decoder
            .try_forward(DecoderInput::new(x).with_cache(cache, memory))?;
        Ok(self.logits(decoded.output))
    }

    /// `x · W_head`, or `x · Eᵀ` when tied.
    pub(crate) fn logits(&self, x: Tensor<3>) -> Tensor<3> {
        match &self.head {
            Some(head) => project(head, x), // [batch, seq_len, vocab]
            None => {
                let [batch, seq_len, d_model] = x.dims();
                let table = self.embedding.embedding.weight.val(); // [vocab, d_model]
                // A two-dimensional product, so that `Eᵀ` stays a strided view of the table:
                // adding a batch dimension to the transposed view makes flex copy all of it
                // (`vocab · d_model` floats) on every call.
                let rows = x.reshape([batch * seq_len, d_model]); // [batch · seq_len, d_model]
                crate::ops::linear(rows, table.transpose(), None) // [batch · seq_len, vocab]
                    .reshape([batch, seq_len, self.vocab]) // [batch, seq_len, vocab]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{ATOL, RTOL, SeededRng, assert_tensors_close, for_each_device};
    use burn::module::Param;
    use burn::tensor::TensorData;

    const VOCAB: usize = 11;
    const D_MODEL: usize = 12;

    fn config(tie_embeddings: bool) -> TokenDecoderConfig {
        TokenDecoderConfig::new(VOCAB, D_MODEL, 3, 2, 7, PositionalScheme::sinusoidal())
            .with_dropout(0.0)
            .with_tie_embeddings(tie_embeddings)
    }

    #[test]
    fn a_tied_head_is_the_transposed_embedding_table() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(81);
            let mut untied = config(false).init(&d.device).expect("valid");
            let mut tied = config(true).init(&d.device).expect("valid");
            assert!(tied.ties_embeddings() && !untied.ties_embeddings());
            assert_eq!(untied.num_params() - tied.num_params(), VOCAB * D_MODEL);
            // The same model with W_head set to Eᵀ by hand.
            let table = untied.embedding.embedding.weight.val(); // [vocab, d_model]
            untied.head.as_mut().expect("untied").weight = Param::from_tensor(table.transpose());
            tied.embedding = untied.embedding.clone();
            tied.decoder = untied.decoder.clone();
            let ids: Vec<i64> = (0..3 * 5).map(|_| rng.range(0, VOCAB - 1) as i64).collect();
            let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [3, 5]), &d.device);
            assert_tensors_close(
                tied.forward(TokenDecoderInput::new(tokens.clone())).logits,
                untied.forward(TokenDecoderInput::new(tokens)).logits,
                ATOL,
                RTOL,
                "x · Eᵀ",
            );
        });
    }

    #[test]
    fn config_errors_come_before_any_tensor() {
        let err = TokenDecoderConfig::new(0, D_MODEL, 3, 2, 7, PositionalScheme::None)
            .validate()
            .expect_err("vocab 0");
        assert!(matches!(err, ModelError::ZeroSize { what: "vocab" }));
        let err = config(false)
            .with_window(Some(0))
            .validate()
            .expect_err("window 0");
        assert!(matches!(err, ModelError::ZeroSize { what: "window" }));
        let err = TokenDecoderConfig::new(VOCAB, D_MODEL, 3, 0, 7, PositionalScheme::None)
            .validate()
            .expect_err("no layers");
        assert!(matches!(err, ModelError::ZeroSize { what: "n_layers" }));
        let err = TokenDecoderConfig::new(VOCAB, D_MODEL, 5, 2, 7, PositionalScheme::None)
            .validate()
            .expect_err("12 / 5");
        assert!(matches!(
            err,
            ModelError::HeadsDoNotDivide {
                d_model: 12,
                n_heads: 5
            }
        ));
    }
}
