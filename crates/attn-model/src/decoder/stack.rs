//! A stack of decoder blocks with an optional final norm: a full forward through every block,
//! or a cached step through each layer's slice of a [`KvCache`], and the caches it steps
//! through.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Bool, Device, Tensor};

use super::{
    DecoderBlock, DecoderBlockConfig, DecoderInput, DecoderOutput, missing_memory, needless_memory,
};
use crate::attention::{NeedWeights, check_shape};
use crate::cache::{KvCache, MemoryCache};
use crate::error::{ModelError, check_nonzero};
use crate::norm::Norm;

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
    ///   asked for, `n_layers` [`DecoderWeights`](super::DecoderWeights)
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
