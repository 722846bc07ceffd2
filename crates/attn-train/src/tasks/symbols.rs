//! What the symbol tasks (`copy`, `reverse`, `sort`) share: sequences of `seq_len` random
//! symbols from `0..vocab`, and the checks on `vocab`.

use rand::{Rng as _, RngCore};

use super::{Architecture, Example, MAX_VOCAB, Size, Task, TaskConfig, TaskError};

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
/// A symbol task: an encoder maps `seq_len` random symbols to `target(x)`, one output per
/// position. `copy`, `reverse` and `sort` are each one of these, differing only in `target`.
#[derive(Clone, Copy, Debug)]
pub struct SymbolTask {
    /// The task's name, as configs and the command line spell it.
    pub name: &'static str,
    /// The target sequence of an input sequence.
    pub target: fn(&[i64]) -> Vec<i64>,
}

impl Task for SymbolTask {
    fn name(&self) -> &'static str {
        self.name
    }

    fn architecture(&self) -> Architecture {
        Architecture::Encoder
    }

    fn sizes(&self) -> &'static [Size] {
        SIZES
    }

    fn validate(&self, config: &TaskConfig) -> Result<(), TaskError> {
        validate_vocab(config)
    }

    fn model_vocab(&self, config: &TaskConfig) -> usize {
        config.vocab
    }

    fn example(&self, config: &TaskConfig, rng: &mut dyn RngCore) -> Example {
        let x = random_symbols(config, rng);
        let y = (self.target)(&x);
        Example::encoded(x, y)
    }
}
