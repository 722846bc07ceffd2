//! What the symbol tasks (`copy`, `reverse`, `sort`) share: sequences of `seq_len` random
//! symbols from `0..vocab`, and the checks on `vocab`.

use rand::{Rng as _, RngCore};

use super::{MAX_VOCAB, Size, TaskConfig, TaskError};

/// The sizes the symbol tasks read.
pub(super) const SIZES: &[Size] = &[Size::SeqLen, Size::Vocab];

/// `seq_len` symbols drawn uniformly from `0..vocab`.
pub(super) fn random_symbols(config: &TaskConfig, rng: &mut dyn RngCore) -> Vec<i64> {
    let vocab = config.vocab as i64;
    (0..config.seq_len)
        .map(|_| rng.random_range(0..vocab))
        .collect()
}

/// Checks that `vocab` has at least two symbols and fits the backends' `i32` ids.
pub(super) fn validate_vocab(config: &TaskConfig) -> Result<(), TaskError> {
    if config.vocab < 2 {
        Err(TaskError::VocabTooSmall {
            vocab: config.vocab,
        })
    } else if config.vocab > MAX_VOCAB {
        Err(TaskError::VocabTooLarge {
            vocab: config.vocab,
            max: MAX_VOCAB,
        })
    } else {
        Ok(())
    }
}
