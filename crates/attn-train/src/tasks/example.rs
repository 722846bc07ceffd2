//! What a task draws: one [`Example`] (the source, the input tokens and a target class per
//! position), and the [`GenerationPrompt`] a generation starts from.
//!
//! Both are plain data, beneath everything else of the tasks, so that the text task's data
//! ([`crate::text`]) makes examples without naming the tasks.

/// One example of a task: the encoder's source (empty but for the encoder-decoder), the
/// model's input tokens and the target class of each input position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Example {
    /// The source the encoder reads (encoder-decoder only; empty otherwise).
    pub source: Vec<i64>,
    /// The input token ids.
    pub tokens: Vec<i64>,
    /// The target class per input position, [`IGNORED`](super::IGNORED) where nothing is scored.
    pub targets: Vec<i64>,
}

impl Example {
    /// An example without a source.
    pub fn encoded(tokens: Vec<i64>, targets: Vec<i64>) -> Self {
        Self {
            source: Vec::new(),
            tokens,
            targets,
        }
    }
}

/// What a generation starts from: the prompt tokens, and the source for an encoder-decoder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerationPrompt {
    /// The source the encoder reads (encoder-decoder only).
    pub source: Option<Vec<i64>>,
    /// The tokens the decoder starts from.
    pub tokens: Vec<i64>,
}
