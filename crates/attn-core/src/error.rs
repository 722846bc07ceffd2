//! The error every fallible function of this crate returns: shapes and settings that cannot
//! work, each variant naming the numbers involved.

use thiserror::Error;

/// Why attention cannot be computed for the given shapes or options.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AttentionError {
    /// `q`, `k` and `v` disagree on the batch size.
    #[error("batch sizes differ: q has {batch_q}, k has {batch_k}, v has {batch_v}")]
    BatchMismatch {
        /// Batch size of `q`.
        batch_q: usize,
        /// Batch size of `k`.
        batch_k: usize,
        /// Batch size of `v`.
        batch_v: usize,
    },
    /// `q` and `k` have different head widths, so `q·kᵀ` is undefined.
    #[error("d_head of q ({d_head_q}) differs from d_head of k ({d_head_k})")]
    HeadDimMismatch {
        /// Last dimension of `q`.
        d_head_q: usize,
        /// Last dimension of `k`.
        d_head_k: usize,
    },
    /// `k` and `v` do not describe the same keys.
    #[error(
        "k is [.., {n_kv_heads_k}, {seq_len_k}, ..] but v is [.., {n_kv_heads_v}, {seq_len_v}, ..]: \
         keys and values must agree on n_kv_heads and seq_len_kv"
    )]
    KeyValueMismatch {
        /// Heads of `k`.
        n_kv_heads_k: usize,
        /// Heads of `v`.
        n_kv_heads_v: usize,
        /// Sequence length of `k`.
        seq_len_k: usize,
        /// Sequence length of `v`.
        seq_len_v: usize,
    },
    /// Grouped-query attention needs every key/value head to serve the same number of query heads.
    #[error("n_kv_heads ({n_kv_heads}) must be non-zero and divide n_heads ({n_heads})")]
    KvHeadsDoNotDivide {
        /// Query heads.
        n_heads: usize,
        /// Key/value heads.
        n_kv_heads: usize,
    },
    /// A zero-sized dimension where attention needs at least one element.
    #[error("{what} is zero in q {q:?}, k {k:?}")]
    EmptyDimension {
        /// Which dimension.
        what: &'static str,
        /// Shape of `q`.
        q: [usize; 4],
        /// Shape of `k`.
        k: [usize; 4],
    },
    /// A mask or bias whose shape does not broadcast to the scores.
    #[error(
        "{what} of shape {got:?} does not broadcast to the scores [batch, n_heads, seq_len_q, seq_len_kv] = {expected:?} \
         (each dimension must equal the scores' or be 1)"
    )]
    DoesNotBroadcast {
        /// `"mask"` or `"bias"`.
        what: &'static str,
        /// The shape given.
        got: [usize; 4],
        /// The scores' shape.
        expected: [usize; 4],
    },
    /// Dropout probability outside `[0, 1)`.
    #[error("dropout must be in [0, 1), got {dropout}")]
    InvalidDropout {
        /// The probability given.
        dropout: f64,
    },
    /// A scale that is zero, negative or not finite.
    #[error("scale must be finite and positive, got {scale}")]
    InvalidScale {
        /// The scale given.
        scale: f64,
    },
    /// A chunked block of zero keys.
    #[error("chunked attention needs a block of at least one key, got {block}")]
    InvalidBlock {
        /// The block size given.
        block: usize,
    },
    /// A strategy asked for by name that cannot honour the options.
    #[error("the {strategy} strategy cannot {what}; use Strategy::Explicit or Strategy::Auto")]
    StrategyCannot {
        /// The strategy asked for.
        strategy: &'static str,
        /// What it cannot do.
        what: &'static str,
    },
    /// `d_model` cannot be cut into `n_heads` equal heads.
    #[error("d_model ({d_model}) is not divisible by n_heads ({n_heads})")]
    HeadsDoNotDivide {
        /// Model width.
        d_model: usize,
        /// Number of heads.
        n_heads: usize,
    },
    /// Sequence lengths longer than the padded sequence.
    #[error("sequence {index} has length {length}, longer than seq_len {seq_len}")]
    LengthTooLong {
        /// Which sequence in the batch.
        index: usize,
        /// Its length.
        length: usize,
        /// The padded length.
        seq_len: usize,
    },
    /// A tensor handed to a backward pass does not have the shape the forward gave.
    #[error("{what} has shape {got:?}; the forward pass needs {expected:?}")]
    GradientShape {
        /// Which tensor.
        what: &'static str,
        /// Its shape.
        got: Vec<usize>,
        /// The shape it must have.
        expected: Vec<usize>,
    },
}
