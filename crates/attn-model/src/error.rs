//! The error every fallible function of this crate returns: configurations that cannot work,
//! inputs that arrive at run time with the wrong shape or ids, and PyTorch weights that do not
//! fit. Each variant names the numbers involved.

use crate::files::FileError;
use attn_core::AttentionError;
use attn_pos::PosError;
use thiserror::Error;

/// Why a module cannot be built, run, or loaded.
#[derive(Debug, Error)]
pub enum ModelError {
    /// Attention was configured with no heads.
    #[error("n_heads is 0: attention needs at least one head")]
    ZeroHeads,
    /// `d_model` cannot be cut into `n_heads` equal heads.
    #[error("d_model ({d_model}) is not divisible by n_heads ({n_heads})")]
    HeadsDoNotDivide {
        /// Model width.
        d_model: usize,
        /// Number of query heads.
        n_heads: usize,
    },
    /// Grouped-query attention needs every key/value head to serve the same number of query heads.
    #[error("n_kv_heads ({n_kv_heads}) must be non-zero and divide n_heads ({n_heads})")]
    KvHeadsDoNotDivide {
        /// Number of query heads.
        n_heads: usize,
        /// Number of key/value heads.
        n_kv_heads: usize,
    },
    /// A dropout probability outside `[0, 1)` (or NaN).
    #[error("dropout must be in [0, 1), got {dropout}")]
    InvalidDropout {
        /// The probability given.
        dropout: f64,
    },
    /// A size that must be at least one is zero.
    #[error("{what} is 0; it must be at least 1")]
    ZeroSize {
        /// Which size (`"d_model"`, `"d_ff"`, `"vocab"`, ...).
        what: &'static str,
    },
    /// A LayerNorm epsilon that is zero, negative or not finite.
    #[error("LayerNorm epsilon must be finite and positive, got {epsilon}")]
    InvalidEpsilon {
        /// The epsilon given.
        epsilon: f64,
    },
    /// A positional scheme that adds to the embeddings was given to a module that can only
    /// apply schemes inside attention (rotary, ALiBi).
    #[error(
        "the {scheme} positional scheme is added to the token embeddings, not applied inside \
         attention; configure it on TokenEncoderConfig, or use Rotary or Alibi here"
    )]
    SchemeNotInAttention {
        /// `"sinusoidal"` or `"learned"`.
        scheme: &'static str,
    },
    /// An input whose last dimension is not the width the module was built for.
    #[error("{what} has width {got}, but the module expects {expected}")]
    WidthMismatch {
        /// Which input.
        what: &'static str,
        /// The width the module was built for.
        expected: usize,
        /// The width given.
        got: usize,
    },
    /// An attention mask that is not left padding (zeros, then ones) in some row.
    #[error(
        "attention_mask row {row} has a padded slot at position {position} after a real \
         token; batches are left-padded (zeros, then ones)"
    )]
    NotLeftPadded {
        /// The row.
        row: usize,
        /// The first padded slot after a real token.
        position: usize,
    },
    /// A mask or input whose shape does not match the others.
    #[error("{what} has shape {got:?}, expected {expected:?}")]
    ShapeMismatch {
        /// Which input.
        what: &'static str,
        /// The shape implied by the other inputs.
        expected: Vec<usize>,
        /// The shape given.
        got: Vec<usize>,
    },
    /// A token id outside `0..vocab`.
    #[error(
        "token {token} at batch index {batch_index}, position {position} is outside the \
         vocabulary 0..{vocab}"
    )]
    TokenOutOfRange {
        /// The id given.
        token: i64,
        /// Vocabulary size.
        vocab: usize,
        /// Which sequence of the batch.
        batch_index: usize,
        /// Which position of that sequence.
        position: usize,
    },
    /// A sequence longer than the model accepts.
    #[error("sequence of length {seq_len} is longer than max_len {max_len}")]
    SequenceTooLong {
        /// The length given.
        seq_len: usize,
        /// The longest length accepted.
        max_len: usize,
    },
    /// Weights asked for in a type the device cannot hold.
    #[error("the device {device} cannot hold {dtype} weights; load them as F32")]
    UnsupportedDtype {
        /// The type asked for.
        dtype: String,
        /// The device.
        device: String,
    },
    /// A prompt and a number of new tokens whose sum does not fit in a `usize`.
    #[error("a prompt of {prompt} tokens and {new} new tokens are more than any cache can hold")]
    TooManyTokens {
        /// Tokens in the prompt.
        prompt: usize,
        /// New tokens asked for.
        new: usize,
    },
    /// A decoding step that would write past the end of the key/value cache.
    #[error(
        "the key/value cache holds {capacity} tokens per sequence; {filled} are written and \
         this step adds {new}"
    )]
    CacheFull {
        /// Tokens per sequence the cache was made for.
        capacity: usize,
        /// Tokens per sequence already written.
        filled: usize,
        /// Tokens per sequence this step brings.
        new: usize,
    },
    /// A truncation of the key/value cache that cannot be done: longer than what is written,
    /// shorter than a sequence's padding, or into keys that a rolling window has overwritten.
    #[error(
        "cannot truncate the key/value cache to {len} tokens per sequence: {filled} are \
         written, {slots} slots are kept, the longest left padding is {left_pad}"
    )]
    CacheTruncate {
        /// Tokens per sequence asked to keep.
        len: usize,
        /// Tokens per sequence written.
        filled: usize,
        /// Slots each layer holds (fewer than the capacity for a rolling window).
        slots: usize,
        /// The longest left padding of the batch.
        left_pad: usize,
    },
    /// A decoding step whose batch is not the one the cache was made for.
    #[error("the key/value cache was made for a batch of {expected}, the step has {got}")]
    CacheBatchMismatch {
        /// Sequences the cache holds.
        expected: usize,
        /// Sequences the step brings.
        got: usize,
    },
    /// A cache that belongs to another model: its layer count or key/value shape differs.
    #[error(
        "the key/value cache has {got_layers} layers of [{got_n_kv_heads} kv heads, d_head \
         {got_d_head}], the decoder has {expected_layers} of [{expected_n_kv_heads}, \
         {expected_d_head}]"
    )]
    CacheShape {
        /// The decoder's layer count.
        expected_layers: usize,
        /// The decoder's key/value heads.
        expected_n_kv_heads: usize,
        /// The decoder's head width.
        expected_d_head: usize,
        /// The cache's layer count.
        got_layers: usize,
        /// The cache's key/value heads.
        got_n_kv_heads: usize,
        /// The cache's head width.
        got_d_head: usize,
    },
    /// A left padding longer than the sequence it pads.
    #[error("sequence {batch_index} has {left_pad} padding tokens but only {seq_len} slots")]
    PaddingTooLong {
        /// Which sequence of the batch.
        batch_index: usize,
        /// Its leading padding tokens.
        left_pad: usize,
        /// Slots available.
        seq_len: usize,
    },
    /// A list with one entry per sequence whose length is not the batch size.
    #[error("{what} has {got} entries for a batch of {batch}")]
    PerSequenceMismatch {
        /// Which list.
        what: &'static str,
        /// The batch size.
        batch: usize,
        /// Its length.
        got: usize,
    },
    /// A decoder that attends to memory was run without one, or one without was given one.
    #[error("{0}")]
    MemoryMismatch(&'static str),
    /// A cached step given what only a full forward takes (left padding, which the cache
    /// holds; attention weights, which a step does not return; a source padding, which the
    /// memory cache holds).
    #[error("{0}")]
    CachedInput(&'static str),
    /// A sampling setting outside its range.
    #[error("{what} must be {range}, got {value}")]
    InvalidSampling {
        /// `"temperature"`, `"top_k"` or `"top_p"`.
        what: &'static str,
        /// The range it must lie in.
        range: &'static str,
        /// The value given.
        value: f64,
    },
    /// A model folder's `config.json` cannot be used.
    #[error("model config: {0}")]
    Config(#[from] ConfigError),
    /// A file that is missing, is not a regular file (a FIFO, a device, a folder), is a link
    /// out of its model folder, is longer than its bound or cannot be read; it names the file.
    #[error(transparent)]
    File(#[from] FileError),
    /// Attention itself refused the shapes or options.
    #[error("attention: {0}")]
    Attention(#[from] AttentionError),
    /// A positional scheme refused its settings or input.
    #[error("positional encoding: {0}")]
    Positional(#[from] PosError),
    /// A weight file (safetensors, a pickled PyTorch file, a shard) that is missing or cannot
    /// be parsed (truncated, corrupt, of another format).
    #[error("cannot read the weights: {reason}")]
    Load {
        /// What the parser said.
        reason: String,
    },
    /// A tensor of a sharded checkpoint found in a shard its index does not assign it to: a
    /// second copy of a tensor another shard holds, or a tensor the index does not list.
    #[error(
        "tensor `{tensor}` is stored in {found}, but {index} {}",
        match assigned {
            Some(shard) => format!("assigns it to {shard}"),
            None => "does not list it".to_string(),
        }
    )]
    MisplacedTensor {
        /// The tensor's name.
        tensor: String,
        /// The shard it was found in.
        found: String,
        /// The index.
        index: String,
        /// The shard the index assigns it to, if any.
        assigned: Option<String>,
    },
    /// A tensor the module needs is not in the state dict.
    #[error("tensor `{name}` is missing from the state dict")]
    MissingTensor {
        /// PyTorch's name for it, prefix included.
        name: String,
    },
    /// A tensor in the state dict has no place in the module (e.g. a bias that is switched off).
    #[error("tensor `{name}` has no place in the module (is its bias switched off?)")]
    UnexpectedTensor {
        /// PyTorch's name for it.
        name: String,
    },
    /// A tensor whose shape is not the one the module needs.
    #[error(
        "tensor `{name}` has shape {got:?}, but the module needs {expected:?} (PyTorch layout)"
    )]
    TensorShape {
        /// PyTorch's name for it.
        name: String,
        /// The shape the module needs, in PyTorch's layout.
        expected: Vec<usize>,
        /// The shape found.
        got: Vec<usize>,
    },
    /// A tensor stored in a dtype this loader does not read.
    #[error(
        "tensor `{name}` is stored as {dtype}; only floating-point tensors (F64, F32, F16, \
         BF16) are read"
    )]
    TensorDtype {
        /// PyTorch's name for it.
        name: String,
        /// The dtype found.
        dtype: String,
    },
}

/// A model folder's configuration that cannot be read or does not fit the checkpoint.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// `config.json` (or a shard index) cannot be parsed.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// What the reader or parser said.
        reason: String,
    },
    /// A setting this crate does not implement (another model type, another activation).
    #[error("config `{key}` is {value}, but this loader supports {supported}")]
    Unsupported {
        /// The key in `config.json`.
        key: &'static str,
        /// Its value.
        value: String,
        /// What is supported.
        supported: &'static str,
    },
    /// A setting whose value no model can have (a negative length, a fraction of a position).
    #[error("config `{key}` is {value}; it must be {expected}")]
    Invalid {
        /// The key in `config.json`.
        key: &'static str,
        /// Its value, as the file gives it.
        value: String,
        /// What it must be.
        expected: &'static str,
    },
    /// The folder holds none of the weight files a loader reads.
    #[error("{folder} holds none of {files}")]
    NoWeights {
        /// The model folder.
        folder: String,
        /// The file names looked for.
        files: &'static str,
    },
    /// `config.json` describes more than twice the parameters the weights hold (or more than
    /// a `u64` counts): refused before anything is allocated.
    #[error(
        "config.json describes {described} parameters, but the weights hold {stored} values; \
         the configuration does not match the weights"
    )]
    LargerThanWeights {
        /// What the configuration's sizes add up to (`"more than 2^64"` on overflow).
        described: String,
        /// Values in the weight file, every tensor counted.
        stored: u64,
    },
}

/// Checks that a dropout probability lies in `[0, 1)`.
pub(crate) fn check_dropout(dropout: f64) -> Result<(), ModelError> {
    if (0.0..1.0).contains(&dropout) {
        Ok(())
    } else {
        Err(ModelError::InvalidDropout { dropout })
    }
}

/// Checks that `size` is not zero.
pub(crate) fn check_nonzero(what: &'static str, size: usize) -> Result<(), ModelError> {
    if size == 0 {
        Err(ModelError::ZeroSize { what })
    } else {
        Ok(())
    }
}

/// Checks that `d_model` splits into `n_heads` heads of equal, non-zero width.
pub(crate) fn check_heads(d_model: usize, n_heads: usize) -> Result<(), ModelError> {
    check_nonzero("d_model", d_model)?;
    if n_heads == 0 {
        return Err(ModelError::ZeroHeads);
    }
    if !d_model.is_multiple_of(n_heads) {
        return Err(ModelError::HeadsDoNotDivide { d_model, n_heads });
    }
    Ok(())
}

/// Checks that a LayerNorm epsilon is finite and positive.
pub(crate) fn check_epsilon(epsilon: f64) -> Result<(), ModelError> {
    if epsilon.is_finite() && epsilon > 0.0 {
        Ok(())
    } else {
        Err(ModelError::InvalidEpsilon { epsilon })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropout_outside_the_unit_interval_is_rejected_with_its_value() {
        for bad in [-0.1, 1.0, 1.5, f64::NAN] {
            let err = check_dropout(bad).expect_err("invalid dropout");
            assert!(
                matches!(err, ModelError::InvalidDropout { .. }),
                "{bad}: {err}"
            );
        }
        for good in [0.0, 0.1, 0.999] {
            check_dropout(good).expect("valid dropout");
        }
        assert_eq!(
            check_dropout(1.5).expect_err("1.5").to_string(),
            "dropout must be in [0, 1), got 1.5"
        );
    }

    #[test]
    fn heads_must_be_nonzero_and_divide_the_width() {
        assert!(matches!(check_heads(12, 0), Err(ModelError::ZeroHeads)));
        assert!(matches!(
            check_heads(0, 3),
            Err(ModelError::ZeroSize { what: "d_model" })
        ));
        let err = check_heads(10, 3).expect_err("10 / 3");
        assert!(matches!(
            err,
            ModelError::HeadsDoNotDivide {
                d_model: 10,
                n_heads: 3
            }
        ));
        assert_eq!(
            err.to_string(),
            "d_model (10) is not divisible by n_heads (3)"
        );
        check_heads(12, 3).expect("12 / 3");
    }

    #[test]
    fn epsilon_must_be_positive_and_finite() {
        for bad in [0.0, -1e-5, f64::INFINITY, f64::NAN] {
            assert!(
                matches!(check_epsilon(bad), Err(ModelError::InvalidEpsilon { .. })),
                "{bad}"
            );
        }
        check_epsilon(1e-5).expect("1e-5");
    }
}
