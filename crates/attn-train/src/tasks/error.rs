//! Why a task cannot be generated: [`TaskError`], a size that does not fit the task.

/// Why a task cannot be generated.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TaskError {
    /// Sequences need at least two tokens.
    #[error("seq_len is {seq_len}; tasks need at least 2 tokens per sequence")]
    SeqTooShort {
        /// The requested length.
        seq_len: usize,
    },
    /// The symbol tasks need at least two symbols.
    #[error("vocab is {vocab}; copy, reverse and sort need at least 2 symbols")]
    VocabTooSmall {
        /// The requested vocabulary size.
        vocab: usize,
    },
    /// More symbols than the backends' integer type can number: token ids and classes are
    /// `i32` on the backends this crate builds ([`MAX_VOCAB`](super::MAX_VOCAB)).
    #[error(
        "vocab is {vocab}; token ids must fit the backend's i32, so vocab can be at most {max}"
    )]
    VocabTooLarge {
        /// The requested vocabulary size.
        vocab: usize,
        /// The largest that fits.
        max: usize,
    },
    /// The text task without a text.
    #[error("the text task needs a text to train on: give --data FILE (or a folder)")]
    NoText,
    /// `add` operands need between 1 and 9 digits.
    #[error("digits is {digits}; add needs operands of 1 to 9 digits")]
    DigitsOutOfRange {
        /// The requested operand width.
        digits: usize,
    },
    /// No cue position is far enough from the ambiguous word.
    #[error(
        "min_distance {min_distance} does not fit in seq_len {seq_len}; \
         the cue needs seq_len > min_distance (and min_distance >= 1)"
    )]
    DistanceDoesNotFit {
        /// The requested least distance.
        min_distance: usize,
        /// The sequence length.
        seq_len: usize,
    },
}
