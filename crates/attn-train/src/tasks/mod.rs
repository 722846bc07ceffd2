//! Synthetic tasks, generated on the fly from a seed: the [`Task`] trait, what every task
//! provides, and the registry ([`TaskKind::task`], in `registry.rs`) that names one
//! implementation per file.
//!
//! The encoder tasks map a sequence of `seq_len` tokens to one class per position:
//!
//! - [`copy`]: `y[i] = x[i]`, a sanity check;
//! - [`reverse`]: `y[i] = x[seq_len - 1 - i]`, which needs positional information;
//! - [`sort`]: `y = sort(x)` (ascending), which needs both content and position;
//! - [`context`]: the "apple" problem, an ambiguous word classified by a cue word elsewhere in
//!   the sentence (`min_distance` of 30 or more gives the long-range setting).
//!
//! Two tasks are solved by generating, one token after another ([`Architecture`]):
//!
//! - [`add`] (decoder-only): `123+045=` and the sum's digits least significant first, `8610`;
//! - [`translate`] (encoder-decoder): digit words in, the digits backwards out.
//!
//! The held-out prompts of both never appear in training batches: a hash of the prompt (the
//! source, for `translate`) puts one in [`HELD_OUT_ONE_IN`] on the held-out side ([`Split`]).
//!
//! A new task is one file implementing [`Task`], one [`TaskKind`] variant (its name in
//! configuration files and on the command line) and one line in [`TaskKind::task`]
//! (`registry.rs`, the one file that names every task).

use std::fmt;

use rand::RngCore;
use serde::{Deserialize, Serialize};

pub mod add;
mod batch;
pub mod context;
pub mod copy;
mod error;
mod example;
mod held_out;
mod registry;
pub mod reverse;
pub mod sort;
mod symbols;
pub mod text;
pub mod translate;

pub use crate::text::TextSettings;
pub use batch::Batch;
pub use error::TaskError;
pub use example::{Example, GenerationPrompt};
pub use held_out::{HELD_OUT_ONE_IN, Split};

/// The class of positions that are not scored (loss and accuracy skip them).
pub const IGNORED: usize = 0;

/// The most distinct symbols a task can have: the backends store token ids and classes as
/// `i32`, so ids run up to `i32::MAX`.
pub const MAX_VOCAB: usize = i32::MAX as usize;

/// The model a task trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Architecture {
    /// A [`TokenEncoder`](attn_model::TokenEncoder): one class per input position.
    Encoder,
    /// A [`TokenDecoder`](attn_model::TokenDecoder): a causal language model.
    Decoder,
    /// An [`EncoderDecoder`](attn_model::EncoderDecoder): source in, target generated.
    EncoderDecoder,
}

/// Which task to learn: its name in configuration files and on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TaskKind {
    /// Output each input token unchanged.
    Copy,
    /// Output the sequence reversed.
    Reverse,
    /// Output the sequence sorted ascending.
    Sort,
    /// Classify an ambiguous word by a cue elsewhere in the sequence.
    Context,
    /// Generate the sum of two numbers, digit by digit (decoder-only).
    Add,
    /// Write digit words as digits, backwards (encoder-decoder).
    Translate,
    /// Model the user's own text, one token after another (decoder-only).
    Text,
}

impl TaskKind {
    /// The model this task trains.
    pub fn architecture(self) -> Architecture {
        self.task().architecture()
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.task().name())
    }
}

/// A size of [`TaskConfig`] that a task may read; each has a command-line flag, refused for
/// the tasks that do not read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// `seq_len`, `--seq-len`.
    SeqLen,
    /// `vocab`, `--vocab`.
    Vocab,
    /// `min_distance`, `--min-distance`.
    MinDistance,
    /// `digits`, `--digits`.
    Digits,
}

/// The sizes `--long-range` sets, for a task that has such a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongRange {
    /// The least distance between the ambiguous word and its cue.
    pub min_distance: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
}

/// Where the `context` task's ambiguous word and its cue stand in one sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuePositions {
    /// The ambiguous word (`apple`): the one scored position.
    pub word: usize,
    /// The cue word that decides the ambiguous word's class.
    pub cue: usize,
}

/// What a task provides: its name and model, its sizes and their checks, its examples, the
/// names of its tokens and classes, and, for the generating tasks, how a prompt is read and an
/// answer read back. Every method but the first few has the encoder tasks' answer as default.
///
/// [`TaskConfig`] holds the sizes; its methods of the same names ask the task of its `kind`.
pub trait Task: Sync {
    /// The name in configuration files and on the command line (the [`TaskKind`]'s).
    fn name(&self) -> &'static str;

    /// The model the task trains.
    fn architecture(&self) -> Architecture;

    /// The sizes of [`TaskConfig`] that the task reads; flags setting any other are refused.
    fn sizes(&self) -> &'static [Size];

    /// The task's own checks of its sizes (after the common check that `seq_len >= 2`).
    ///
    /// # Errors
    ///
    /// A [`TaskError`] naming the size that does not fit.
    fn validate(&self, _config: &TaskConfig) -> Result<(), TaskError> {
        Ok(())
    }

    /// The number of distinct input tokens the model must embed (the target side's, for an
    /// encoder-decoder).
    fn model_vocab(&self, config: &TaskConfig) -> usize;

    /// The number of distinct source tokens (encoder-decoder only; 0 for the others).
    fn source_vocab(&self, _config: &TaskConfig) -> usize {
        0
    }

    /// The number of output classes per position: for the generating tasks, the vocabulary.
    fn n_classes(&self, config: &TaskConfig) -> usize {
        self.model_vocab(config)
    }

    /// The class that is never scored, if the task has one.
    fn ignored_class(&self) -> Option<usize> {
        None
    }

    /// Tokens per batch row, the positions the model sees.
    fn model_seq_len(&self, config: &TaskConfig) -> usize {
        config.seq_len
    }

    /// Tokens a generation starts from; 0 for the encoder tasks.
    fn prompt_len(&self, _config: &TaskConfig) -> usize {
        0
    }

    /// Tokens a generation produces; 0 for the encoder tasks.
    fn answer_len(&self, _config: &TaskConfig) -> usize {
        0
    }

    /// A readable name for a (non-negative) input token, for plots.
    fn token_name(&self, _config: &TaskConfig, token: usize) -> String {
        token.to_string()
    }

    /// A readable name for an output class.
    fn class_name(&self, class: usize) -> String {
        class.to_string()
    }

    /// One example, drawn from `rng` whatever the held-out split.
    fn example(&self, config: &TaskConfig, rng: &mut dyn RngCore) -> Example;

    /// One example from one side of the held-out split: by default, examples drawn until one
    /// falls on that side ([`held_out_key`](Self::held_out_key)).
    fn example_from(&self, config: &TaskConfig, split: Split, rng: &mut dyn RngCore) -> Example {
        loop {
            let example = self.example(config, rng);
            match self.held_out_key(config, &example) {
                Some(key) if held_out::split_of(key) != split => continue,
                _ => return example,
            }
        }
    }

    /// The part of `example` whose hash decides its side of the held-out split; `None` for a
    /// task without a held-out split (every example may appear on both sides).
    fn held_out_key<'a>(&self, _config: &TaskConfig, _example: &'a Example) -> Option<&'a [i64]> {
        None
    }

    /// The sizes `--long-range` sets; `None` for a task without a long-range setting.
    fn long_range(&self) -> Option<LongRange> {
        None
    }

    /// Whether the task's sequences hold a cue word that decides a scored word
    /// ([`cue_positions`](Self::cue_positions)); a run then reports its cue attention.
    fn has_cue(&self) -> bool {
        false
    }

    /// Where the ambiguous word and its cue stand in `tokens`, one sequence of the task.
    fn cue_positions(&self, _tokens: &[i64]) -> Option<CuePositions> {
        None
    }

    /// The prompt (and source) a generation starts from, read from `text`.
    ///
    /// # Errors
    ///
    /// A message naming the expected form; for the encoder tasks, which do not generate,
    /// always.
    fn generation_prompt(
        &self,
        _config: &TaskConfig,
        text: &str,
    ) -> Result<GenerationPrompt, String> {
        Err(format!(
            "the {} task does not generate; got the prompt {text:?}",
            self.name()
        ))
    }

    /// A generated answer read back as a number, where the task's answers are numbers.
    fn read_answer(&self, _config: &TaskConfig, _answer: &[i64]) -> Option<u64> {
        None
    }
}

/// A task and its sizes: everything needed to generate examples.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskConfig {
    /// Which task.
    pub kind: TaskKind,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Distinct symbols of `copy`, `reverse` and `sort`. The `context` task has its own fixed
    /// word list and ignores this.
    pub vocab: usize,
    /// `context` only: the least distance between the ambiguous word and its cue.
    pub min_distance: usize,
    /// `add` only: digits of each operand.
    pub digits: usize,
    /// `text` only: the text and its tokenizer.
    #[serde(skip_serializing_if = "TextSettings::is_unused")]
    pub text: TextSettings,
}

impl Default for TaskConfig {
    fn default() -> Self {
        Self {
            kind: TaskKind::Reverse,
            seq_len: 16,
            vocab: 16,
            min_distance: 1,
            digits: 3,
            text: TextSettings::default(),
        }
    }
}

impl TaskConfig {
    /// The task of this configuration's `kind`.
    pub fn task(&self) -> &'static dyn Task {
        self.kind.task()
    }

    /// Checks the sizes fit the task.
    ///
    /// # Errors
    ///
    /// A [`TaskError`] naming the size that does not fit.
    pub fn validate(&self) -> Result<(), TaskError> {
        let seq_len = self.seq_len;
        if seq_len < 2 {
            return Err(TaskError::SeqTooShort { seq_len });
        }
        self.task().validate(self)
    }

    /// The number of distinct input tokens the model must embed (the target side's, for
    /// `translate`).
    pub fn model_vocab(&self) -> usize {
        self.task().model_vocab(self)
    }

    /// The number of distinct source tokens (`translate` only; 0 for the others).
    pub fn source_vocab(&self) -> usize {
        self.task().source_vocab(self)
    }

    /// The number of output classes per position: for the generating tasks, the vocabulary.
    pub fn n_classes(&self) -> usize {
        self.task().n_classes(self)
    }

    /// The class that is never scored, if the task has one.
    pub fn ignored_class(&self) -> Option<usize> {
        self.task().ignored_class()
    }

    /// Tokens per batch row, the positions the model sees: `seq_len`, but `3 · digits + 2`
    /// for `add` (the text but its last token).
    pub fn model_seq_len(&self) -> usize {
        self.task().model_seq_len(self)
    }

    /// Tokens a generation starts from: `add`'s `2 · digits + 2`, `translate`'s start token,
    /// 0 for the encoder tasks.
    pub fn prompt_len(&self) -> usize {
        self.task().prompt_len(self)
    }

    /// Tokens a generation produces: `add`'s `digits + 1`, `translate`'s `seq_len`, 0 for the
    /// encoder tasks.
    pub fn answer_len(&self) -> usize {
        self.task().answer_len(self)
    }

    /// A readable name for an input token, for plots.
    pub fn token_name(&self, token: i64) -> String {
        match usize::try_from(token) {
            Ok(token) => self.task().token_name(self, token),
            Err(_) => format!("#{token}"),
        }
    }

    /// A readable name for an output class.
    pub fn class_name(&self, class: usize) -> String {
        self.task().class_name(class)
    }

    /// One example: `(tokens, targets)`, each `seq_len` long.
    ///
    /// # Panics
    ///
    /// Panics when [`validate`](Self::validate) would fail.
    pub fn example(&self, rng: &mut impl rand::Rng) -> (Vec<i64>, Vec<i64>) {
        let example = self.task().example(self, &mut *rng);
        (example.tokens, example.targets)
    }

    /// A training batch of `batch` independent examples ([`Split::Train`]).
    pub fn batch(&self, batch: usize, rng: &mut impl rand::Rng) -> Batch {
        self.batch_from(Split::Train, batch, rng)
    }

    /// A batch of `batch` independent examples from one side of the held-out split (which
    /// the encoder tasks ignore: they draw every example the same way).
    pub fn batch_from(&self, split: Split, batch: usize, rng: &mut impl rand::Rng) -> Batch {
        let task = self.task();
        let seq_len = self.model_seq_len();
        let source_len = match task.architecture() {
            Architecture::EncoderDecoder => self.seq_len,
            _ => 0,
        };
        let mut out = Batch {
            batch,
            seq_len,
            tokens: Vec::with_capacity(batch * seq_len),
            targets: Vec::with_capacity(batch * seq_len),
            source_len,
            source: Vec::with_capacity(batch * source_len),
        };
        for _ in 0..batch {
            let example = task.example_from(self, split, &mut *rng);
            out.source.extend(example.source);
            out.tokens.extend(example.tokens);
            out.targets.extend(example.targets);
        }
        out
    }

    /// The side of the held-out split a prompt (`add`) or source (`translate`) falls on.
    pub fn split_of(&self, prompt: &[i64]) -> Split {
        held_out::split_of(prompt)
    }

    /// Where the ambiguous word and its cue stand in `tokens`, one sequence of the task
    /// (`context` only). `None` for the other tasks, or for a sequence without either word.
    pub fn cue_positions(&self, tokens: &[i64]) -> Option<CuePositions> {
        self.task().cue_positions(tokens)
    }

    /// The prompt (and source) a generation starts from, read from `text`.
    ///
    /// # Errors
    ///
    /// A message naming the form the task expects.
    pub fn generation_prompt(&self, text: &str) -> Result<GenerationPrompt, String> {
        self.task().generation_prompt(self, text)
    }

    /// A generated answer read back as a number (`add`'s sum); `None` for the other tasks, or
    /// an answer that is not all digits.
    pub fn read_answer(&self, answer: &[i64]) -> Option<u64> {
        self.task().read_answer(self, answer)
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;
    use crate::random::Rng;

    /// A small task of `kind`: 7 tokens of 5 symbols.
    pub(super) fn task(kind: TaskKind) -> TaskConfig {
        TaskConfig {
            kind,
            seq_len: 7,
            vocab: 5,
            min_distance: 1,
            digits: 3,
            ..TaskConfig::default()
        }
    }

    /// The `add` task with operands of `digits` digits.
    pub(super) fn add(digits: usize) -> TaskConfig {
        TaskConfig {
            kind: TaskKind::Add,
            digits,
            ..TaskConfig::default()
        }
    }

    /// The names of `tokens`, run together.
    pub(super) fn names(task: &TaskConfig, tokens: &[i64]) -> String {
        tokens.iter().map(|&t| task.token_name(t)).collect()
    }

    #[test]
    fn each_task_is_named_as_its_kind_is_in_files_and_on_the_command_line() {
        for &kind in TaskKind::value_variants() {
            let name = kind.task().name();
            assert_eq!(kind.to_string(), name);
            assert_eq!(serde_json::to_value(kind).expect("a name"), name);
            let flag = kind.to_possible_value().expect("not skipped");
            assert_eq!(flag.get_name(), name);
        }
    }

    #[test]
    fn same_seed_same_batch() {
        let t = task(TaskKind::Sort);
        assert_eq!(t.batch(3, &mut Rng::new(9)), t.batch(3, &mut Rng::new(9)));
        assert_ne!(t.batch(3, &mut Rng::new(9)), t.batch(3, &mut Rng::new(10)));
    }

    #[test]
    fn validate_names_the_size_that_does_not_fit() {
        let bad = TaskConfig {
            kind: TaskKind::Context,
            seq_len: 20,
            vocab: 0,
            min_distance: 30,
            digits: 3,
            ..TaskConfig::default()
        };
        assert_eq!(
            bad.validate(),
            Err(TaskError::DistanceDoesNotFit {
                min_distance: 30,
                seq_len: 20
            })
        );
        let bad = TaskConfig {
            kind: TaskKind::Reverse,
            seq_len: 20,
            vocab: 1,
            min_distance: 1,
            digits: 3,
            ..TaskConfig::default()
        };
        assert_eq!(bad.validate(), Err(TaskError::VocabTooSmall { vocab: 1 }));
        let bad = TaskConfig {
            vocab: 3_000_000_000,
            ..bad
        };
        assert_eq!(
            bad.validate(),
            Err(TaskError::VocabTooLarge {
                vocab: 3_000_000_000,
                max: MAX_VOCAB
            })
        );
    }
}
