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
//!
//! `block.rs` holds one block ([`DecoderBlock`]), `stack.rs` the stack of them
//! ([`Decoder`]); this file the input both read and the output both return.

mod block;
mod stack;

use burn::tensor::{Bool, Tensor};

use crate::attention::NeedWeights;
use crate::cache::{KvCache, MemoryCache};
use crate::error::ModelError;

pub use block::{DecoderBlock, DecoderBlockConfig};
pub use stack::{Decoder, DecoderConfig};

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

pub(crate) fn missing_memory() -> ModelError {
    ModelError::MemoryMismatch(
        "this decoder has cross-attention and needs a memory (the encoder's output)",
    )
}

pub(crate) fn needless_memory() -> ModelError {
    ModelError::MemoryMismatch("this decoder has no cross-attention, but a memory was given")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::residual::NormPlacement;
    use attn_pos::AlibiForm;
    use attn_pos::PositionalScheme;
    use attn_testing::{
        ATOL, RTOL, SeededRng, assert_close_slices, assert_tensors_close, for_each_device, to_vec,
    };
    use burn::tensor::Device;

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
