//! The token embedding every token model opens with: ids to rows of a table, scaled by
//! `√d_model`, plus additive positions, then dropout (Vaswani et al. 2017, §3.4 and §5.4).
//!
//! ```text
//! x = Dropout(Embedding(tokens) · √d_model + PE)
//! ```
//!
//! The embedding table starts from `N(0, 1/d_model)` when it is scaled (fairseq's choice),
//! `N(0, 1)` otherwise, so that the scaled embedding has unit variance either way.
//! Sinusoidal and learned positions are added here; rotary and ALiBi positions act inside every
//! attention layer instead, so for them this adds nothing.

use attn_pos::{LearnedEncoding, LearnedEncodingConfig, PositionalScheme, SinusoidalEncoding};
use burn::module::{Initializer, Module};
use burn::nn::{Dropout, DropoutConfig, Embedding, EmbeddingConfig};
use burn::tensor::{Device, Int, Tensor};

use crate::error::ModelError;

/// Which of the two random tables [`TokenEmbedding::new`] draws first from the device's
/// generator: each model keeps the order it has always drawn them in, so that a seeded run
/// starts from the same weights as before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DrawOrder {
    /// The token table, then the learned positions ([`TokenEncoder`](crate::TokenEncoder)).
    TableFirst,
    /// The learned positions, then the token table ([`TokenDecoder`](crate::TokenDecoder),
    /// the encoder-decoder's source).
    PositionsFirst,
}

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

/// The standard deviation of a table that is also the output head (GPT-2's
/// `initializer_range`).
pub const TIED_INIT_STD: f64 = 0.02;

/// How a token table is read, and so how it is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Table {
    /// Multiplied by `√d_model` when read (paper §3.4): drawn from `N(0, 1/d_model)`, so the
    /// scaled embedding has unit variance.
    Scaled,
    /// Also the output head: drawn from `N(0, 0.02²)` ([`TIED_INIT_STD`]), so the first logits
    /// are near zero and the first loss near `ln(vocab)`.
    Tied,
    /// Neither: drawn from `N(0, 1)`.
    Plain,
}

impl Table {
    /// The table of a model that scales its embeddings (`scale`) or ties its head (`tied`).
    pub(crate) fn of(scale: bool, tied: bool) -> Self {
        match (scale, tied) {
            (true, _) => Self::Scaled,
            (false, true) => Self::Tied,
            (false, false) => Self::Plain,
        }
    }
}

impl TokenEmbedding {
    /// A table of `vocab` rows of width `d_model`, drawn as `table` says, and the additive
    /// positions of `pos`, drawn in `order`.
    ///
    /// # Errors
    /// [`ModelError::Positional`] when the scheme refuses `d_model`.
    pub(crate) fn new(
        vocab: usize,
        d_model: usize,
        pos: &PositionalScheme,
        dropout: f64,
        table: Table,
        order: DrawOrder,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let scale = table == Table::Scaled;
        let std = match table {
            Table::Scaled => (d_model as f64).powf(-0.5),
            Table::Tied => TIED_INIT_STD,
            Table::Plain => 1.0,
        };
        let table = || {
            EmbeddingConfig::new(vocab, d_model)
                .with_initializer(Initializer::Normal { mean: 0.0, std })
                .init(device)
        };
        let learned = || -> Result<Option<LearnedEncoding>, ModelError> {
            match pos {
                PositionalScheme::Learned { max_len } => Ok(Some(
                    LearnedEncodingConfig::new(*max_len, d_model).try_init(device)?,
                )),
                _ => Ok(None),
            }
        };
        let sinusoidal = match pos {
            PositionalScheme::Sinusoidal { base } => Some(SinusoidalEncoding::new(d_model, *base)?),
            _ => None,
        };
        let (embedding, learned) = match order {
            DrawOrder::TableFirst => {
                let embedding = table();
                (embedding, learned()?)
            }
            DrawOrder::PositionsFirst => {
                let learned = learned()?;
                (table(), learned)
            }
        };
        Ok(Self {
            embedding,
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
        // A half-precision table (a model kept in its file's bfloat16): the rows it gave are
        // widened to the f32 the blocks compute in.
        let x = if x.dtype() == burn::tensor::DType::F32 {
            x
        } else {
            x.cast(burn::tensor::DType::F32)
        };
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

    /// Vocabulary size: ids are `0..vocab`.
    pub fn vocab(&self) -> usize {
        self.vocab
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
