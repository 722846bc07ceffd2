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
use attn_pos::{LearnedEncoding, LearnedEncodingConfig, PositionalScheme, SinusoidalEncoding};
use burn::config::Config;
use burn::module::{Initializer, Module};
use burn::nn::{Dropout, DropoutConfig, Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Bool, Device, Int, Tensor};

use crate::cache::{KvCache, MemoryCache, check_left_pad, left_padding_mask};
use crate::decoder::{Decoder, DecoderBlockConfig, DecoderConfig, DecoderInput, DecoderWeights};
use crate::encoder::NormPlacement;
use crate::error::{ModelError, check_dropout, check_nonzero};
use crate::feed_forward::Activation;
use crate::project::project;

/// Token embedding and additive positions: `Dropout(Embedding(tokens) · √d_model + PE)`.
///
/// Rotary and ALiBi positions act inside attention, so for them this adds nothing.
#[derive(Module, Debug)]
pub struct TokenEmbedding {
    /// `vocab × d_model` table.
    pub(crate) embedding: Embedding,
    /// A learned position table, when the scheme is `Learned`.
    pub(crate) learned: Option<LearnedEncoding>,
    /// The sinusoidal table's generator, when the scheme is `Sinusoidal` (no parameters).
    #[module(skip)]
    sinusoidal: Option<SinusoidalEncoding>,
    /// Dropout on the embedded sum (paper §5.4).
    dropout: Dropout,
    vocab: usize,
    scale: bool,
}

impl TokenEmbedding {
    /// A table of `vocab` rows of width `d_model`, from `N(0, 1/d_model)` when scaled by
    /// `√d_model` (so the scaled embedding has unit variance), `N(0, 1)` otherwise.
    pub(crate) fn new(
        vocab: usize,
        d_model: usize,
        pos: &PositionalScheme,
        dropout: f64,
        scale: bool,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let std = if scale {
            (d_model as f64).powf(-0.5)
        } else {
            1.0
        };
        let sinusoidal = match pos {
            PositionalScheme::Sinusoidal { base } => Some(SinusoidalEncoding::new(d_model, *base)?),
            _ => None,
        };
        let learned = match pos {
            PositionalScheme::Learned { max_len } => {
                Some(LearnedEncodingConfig::new(*max_len, d_model).try_init(device)?)
            }
            _ => None,
        };
        Ok(Self {
            embedding: EmbeddingConfig::new(vocab, d_model)
                .with_initializer(Initializer::Normal { mean: 0.0, std })
                .init(device),
            learned,
            sinusoidal,
            dropout: DropoutConfig::new(dropout).init(),
            vocab,
            scale,
        })
    }

    /// Embeds tokens that sit at slots `offset..offset + seq_len` of a left-padded batch.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq_len]`; `left_pad`: one entry per sequence
    /// - returns: `[batch, seq_len, d_model]`
    ///
    /// # Errors
    /// [`ModelError::TokenOutOfRange`], and [`ModelError::Positional`] for a position past a
    /// learned table.
    pub(crate) fn forward(
        &self,
        tokens: Tensor<2, Int>,
        offset: usize,
        left_pad: &[usize],
    ) -> Result<Tensor<3>, ModelError> {
        check_tokens(&tokens, self.vocab)?;
        let [_, d_model] = self.embedding.weight.shape().dims();
        let x = self.embedding.forward(tokens); // [batch, seq_len, d_model]
        let x = if self.scale {
            x * (d_model as f64).sqrt()
        } else {
            x
        };
        let x = match self.positions(&x, offset, left_pad)? {
            Some(table) => x + table,
            None => x,
        };
        Ok(self.dropout.forward(x))
    }

    /// Width of the embeddings.
    pub fn d_model(&self) -> usize {
        self.embedding.weight.shape().dims::<2>()[1]
    }

    /// The additive table for each sequence's positions: slot `t` of sequence `b` is position
    /// `t − left_pad[b]`; padding slots get zeros (no query attends to them).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq_len, d_model]`
    /// - returns: `[1 or batch, seq_len, d_model]`
    fn positions(
        &self,
        x: &Tensor<3>,
        offset: usize,
        left_pad: &[usize],
    ) -> Result<Option<Tensor<3>>, ModelError> {
        if self.sinusoidal.is_none() && self.learned.is_none() {
            return Ok(None);
        }
        let [_, seq_len, d_model] = x.dims();
        let device = x.device();
        let rows = |len: usize, start: usize| -> Result<Tensor<2>, ModelError> {
            match (&self.sinusoidal, &self.learned) {
                (Some(sinusoidal), _) => Ok(sinusoidal.table(len, start, &device)),
                (None, Some(learned)) => Ok(learned.table(len, start)?),
                (None, None) => unreachable!("returned above"),
            }
        };
        if left_pad.iter().all(|&pad| pad == 0) {
            return Ok(Some(rows(seq_len, offset)?.unsqueeze::<3>())); // [1, seq_len, d_model]
        }
        let tables = left_pad
            .iter()
            .map(|&pad| {
                let padded = pad.saturating_sub(offset).min(seq_len);
                let real = seq_len - padded;
                let mut parts = Vec::with_capacity(2);
                if padded > 0 {
                    parts.push(Tensor::<2>::zeros([padded, d_model], &device));
                }
                if real > 0 {
                    parts.push(rows(real, offset + padded - pad)?);
                }
                Ok(Tensor::cat(parts, 0).unsqueeze::<3>()) // [1, seq_len, d_model]
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        Ok(Some(Tensor::cat(tables, 0))) // [batch, seq_len, d_model]
    }
}

/// Errors on the first id outside `0..vocab`, naming where it is.
pub(crate) fn check_tokens(tokens: &Tensor<2, Int>, vocab: usize) -> Result<(), ModelError> {
    let [_batch, seq_len] = tokens.dims();
    let ids = tokens.to_data();
    let bad = ids
        .iter::<i64>()
        .enumerate()
        .find(|(_, token)| !usize::try_from(*token).is_ok_and(|t| t < vocab));
    match bad {
        Some((index, token)) => Err(ModelError::TokenOutOfRange {
            token,
            vocab,
            batch_index: index / seq_len,
            position: index % seq_len,
        }),
        None => Ok(()),
    }
}

/// Configuration of a [`TokenDecoder`].
///
/// ```
/// use attn_model::{PositionalScheme, TokenDecoderConfig};
/// use burn::tensor::{Device, Int, Tensor};
///
/// let device = Device::flex();
/// let model = TokenDecoderConfig::new(11, 12, 3, 2, 24, PositionalScheme::rotary())
///     .with_tie_embeddings(true)
///     .init(&device)
///     .unwrap();
/// let tokens = Tensor::<2, Int>::from_ints([[1, 2, 3], [4, 5, 10]], &device);
/// assert_eq!(model.forward(tokens).dims(), [2, 3, 11]);
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
        Ok(self.pos.validate(self.d_model, self.n_heads)?)
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
                self.scale_embedding,
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

impl TokenDecoder {
    /// Logits for every position, recomputed from scratch (the reference for the cache).
    ///
    /// Reads the token ids back to the host to check them.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq_len]`, ids in `0..vocab`, sequence `b` starting with
    ///   `left_pad[b]` padding tokens (any ids)
    /// - returns: `[batch, seq_len, vocab]`
    ///
    /// # Errors
    /// [`ModelError::TokenOutOfRange`] naming the first bad id and where it is,
    /// [`ModelError::PerSequenceMismatch`] or [`ModelError::PaddingTooLong`] for a `left_pad`
    /// that does not fit, [`ModelError::Positional`] for a sequence longer than a learned
    /// table, [`ModelError::MemoryMismatch`] for a model with cross-attention (use
    /// [`EncoderDecoder`](crate::EncoderDecoder)).
    pub fn try_forward(
        &self,
        tokens: Tensor<2, Int>,
        left_pad: Option<&[usize]>,
    ) -> Result<Tensor<3>, ModelError> {
        self.run(tokens, left_pad, None)
    }

    /// [`try_forward`](Self::try_forward) without padding, for inputs known to fit.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq_len]`
    /// - returns: `[batch, seq_len, vocab]`
    ///
    /// # Panics
    /// On any [`ModelError`], with its message.
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        self.try_forward(tokens, None)
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

    /// Logits for the tokens that follow what `cache` holds, projecting only these tokens.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq_len]`, the tokens at slots `cache.filled()..`
    /// - returns: `[batch, seq_len, vocab]`
    ///
    /// # Errors
    /// [`ModelError::TokenOutOfRange`], and those of [`Decoder::try_step`]
    /// ([`ModelError::CacheFull`], [`ModelError::CacheBatchMismatch`], ...), each naming the
    /// numbers. Nothing is written when a check fails.
    pub fn try_step(
        &self,
        tokens: Tensor<2, Int>,
        cache: &mut KvCache,
    ) -> Result<Tensor<3>, ModelError> {
        self.run_step(tokens, cache, None)
    }

    /// [`try_step`](Self::try_step) for inputs known to fit.
    ///
    /// # Shapes
    /// As [`try_step`](Self::try_step).
    ///
    /// # Panics
    /// On any [`ModelError`], with its message.
    pub fn step(&self, tokens: Tensor<2, Int>, cache: &mut KvCache) -> Tensor<3> {
        self.try_step(tokens, cache)
            .unwrap_or_else(|e| panic!("token decoder: {e}"))
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

    /// [`try_forward`](Self::try_forward), also returning every block's attention weights
    /// (computed explicitly, whatever the configured strategy).
    ///
    /// # Shapes
    /// - as [`try_forward`](Self::try_forward); each block's self-attention weights
    ///   `[batch, n_heads, seq_len, seq_len]`
    ///
    /// # Errors
    /// As [`try_forward`](Self::try_forward).
    pub fn try_forward_with_weights(
        &self,
        tokens: Tensor<2, Int>,
        left_pad: Option<&[usize]>,
    ) -> Result<(Tensor<3>, Vec<DecoderWeights>), ModelError> {
        self.run_with_weights(tokens, left_pad, None)
    }

    pub(crate) fn run(
        &self,
        tokens: Tensor<2, Int>,
        left_pad: Option<&[usize]>,
        memory: Option<(Tensor<3>, Option<Tensor<2, Bool>>)>,
    ) -> Result<Tensor<3>, ModelError> {
        let input = self.input(tokens, left_pad, memory)?;
        Ok(self.logits(self.decoder.try_forward(input)?))
    }

    pub(crate) fn run_with_weights(
        &self,
        tokens: Tensor<2, Int>,
        left_pad: Option<&[usize]>,
        memory: Option<(Tensor<3>, Option<Tensor<2, Bool>>)>,
    ) -> Result<(Tensor<3>, Vec<DecoderWeights>), ModelError> {
        let input = self.input(tokens, left_pad, memory)?;
        let (x, weights) = self.decoder.forward_with_weights(input)?;
        Ok((self.logits(x), weights))
    }

    /// The embedded target stream with its padding and memory, what the blocks read.
    fn input(
        &self,
        tokens: Tensor<2, Int>,
        left_pad: Option<&[usize]>,
        memory: Option<(Tensor<3>, Option<Tensor<2, Bool>>)>,
    ) -> Result<DecoderInput, ModelError> {
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

    pub(crate) fn run_step(
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
        Ok(self.logits(self.decoder.try_step(x, cache, memory)?))
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
                tied.forward(tokens.clone()),
                untied.forward(tokens),
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
