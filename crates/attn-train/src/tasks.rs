//! Synthetic tasks, generated on the fly from a seed.
//!
//! The encoder tasks map a sequence of `seq_len` tokens to one class per position:
//!
//! - `copy`: `y[i] = x[i]`. Needs no attention at all; a sanity check.
//! - `reverse`: `y[i] = x[seq_len - 1 - i]`. Each position must find its mirror position, which
//!   attention can only do if it knows where tokens are: without positional information the
//!   encoder is permutation-equivariant and this task stays near chance.
//! - `sort`: `y = sort(x)` (ascending). Needs both content and position.
//! - `context`: the "apple" problem. A sentence of filler words holds one ambiguous word
//!   (`apple`) and one cue word, either about fruit (`eat`, `juice`, ...) or about the company
//!   (`shares`, `iphone`, ...), at a random distance from it. The ambiguous word's class (fruit
//!   or company) is decided by the cue alone, so the model must attend from `apple` to the cue.
//!   Only the ambiguous word is scored; every other position carries [`IGNORED`].
//!   `min_distance` of 30 or more gives the long-range setting.
//!
//! Two tasks are solved by generating, one token after another ([`Architecture`]):
//!
//! - `add` (decoder-only): the prompt `123+045=` of two `digits`-digit operands, zero-padded,
//!   and the answer's `digits + 1` digits written least significant first, `8610` for 168.
//!   Written that way, each answer digit depends on two prompt digits and the carry of the
//!   digit generated just before it, which a small model learns in a few hundred steps;
//!   most significant first, the first digit would need every carry at once.
//!   A batch row is the whole text but its last token, the targets the text shifted by one,
//!   and only the answer is scored (causal language-model loss on the answer tokens).
//! - `translate` (encoder-decoder): the source is `seq_len` digit words (`three one four`),
//!   the target the same digits written backwards (`4 1 3`), after a start token `<s>`.
//!   Backwards, target token `i` must read source word `seq_len - 1 - i`, an alignment that
//!   only cross-attention can make: its weights form the anti-diagonal.
//!
//! The held-out prompts of both never appear in training batches: a hash of the prompt (the
//! source, for `translate`) puts one in [`HELD_OUT_ONE_IN`] on the held-out side ([`Split`]).

use std::fmt;

use burn::tensor::{Device, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

/// The class of positions that are not scored (loss and accuracy skip them).
pub const IGNORED: usize = 0;

/// The most distinct symbols a task can have: the backends store token ids and classes as
/// `i32`, so ids run up to `i32::MAX`.
pub const MAX_VOCAB: usize = i32::MAX as usize;

/// The ambiguous word of the `context` task.
const AMBIGUOUS: &str = "apple";
/// Cue words that make `apple` the fruit.
const FRUIT_CUES: [&str; 5] = ["eat", "juice", "pie", "ripe", "orchard"];
/// Cue words that make `apple` the company.
const COMPANY_CUES: [&str; 5] = ["shares", "iphone", "ceo", "stock", "launch"];
/// Words that say nothing about `apple`.
const FILLERS: [&str; 30] = [
    "the", "a", "of", "and", "to", "in", "is", "it", "was", "for", "on", "with", "as", "at", "by",
    "from", "they", "we", "said", "new", "big", "day", "time", "red", "today", "about", "more",
    "very", "some", "all",
];
/// Class names of the `context` task, indexed by class.
const CONTEXT_CLASSES: [&str; 3] = ["-", "fruit", "company"];

/// Tokens of the `add` task: [`IGNORED`] (never in a text), the digits `0..=9` as `1..=10`,
/// then `+` and `=`.
const ADD_TOKENS: [&str; 13] = [
    "_", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "+", "=",
];
/// The `add` task's `+`.
const PLUS: i64 = 11;
/// The `add` task's `=`.
const EQUALS: i64 = 12;
/// Source words of the `translate` task: word `d` is the digit `d`.
const DIGIT_WORDS: [&str; 10] = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
];
/// The `translate` task's start token; the digit `d` is target token `d + 1`.
const START: i64 = 0;

/// One prompt in this many is held out from training (`add` and `translate`).
pub const HELD_OUT_ONE_IN: u64 = 50;

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

/// Which side of the held-out split examples come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// Training batches: never a held-out prompt.
    Train,
    /// The held-out set: only held-out prompts (the encoder tasks draw from all sequences).
    HeldOut,
}

/// Which task to learn.
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
}

impl TaskKind {
    /// The model this task trains.
    pub fn architecture(self) -> Architecture {
        match self {
            Self::Copy | Self::Reverse | Self::Sort | Self::Context => Architecture::Encoder,
            Self::Add => Architecture::Decoder,
            Self::Translate => Architecture::EncoderDecoder,
        }
    }
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Copy => "copy",
            Self::Reverse => "reverse",
            Self::Sort => "sort",
            Self::Context => "context",
            Self::Add => "add",
            Self::Translate => "translate",
        })
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
}

impl Default for TaskConfig {
    fn default() -> Self {
        Self {
            kind: TaskKind::Reverse,
            seq_len: 16,
            vocab: 16,
            min_distance: 1,
            digits: 3,
        }
    }
}

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
    /// `i32` on the backends this crate builds ([`MAX_VOCAB`]).
    #[error(
        "vocab is {vocab}; token ids must fit the backend's i32, so vocab can be at most {max}"
    )]
    VocabTooLarge {
        /// The requested vocabulary size.
        vocab: usize,
        /// The largest that fits.
        max: usize,
    },
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

/// One batch of examples, stored row-major as host vectors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Sequences in the batch.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Input token ids, `[batch, seq_len]` row-major.
    pub tokens: Vec<i64>,
    /// Target class per position, `[batch, seq_len]` row-major; [`IGNORED`] where the task
    /// scores nothing.
    pub targets: Vec<i64>,
    /// Tokens per source sequence: 0 but for the encoder-decoder task.
    pub source_len: usize,
    /// The source the encoder reads, `[batch, source_len]` row-major (encoder-decoder only).
    pub source: Vec<i64>,
}

impl Batch {
    /// The input tokens as a tensor.
    ///
    /// # Shapes
    ///
    /// - output: `[batch, seq_len]`
    pub fn tokens_tensor(&self, device: &Device) -> Tensor<2, Int> {
        Tensor::from_data(
            TensorData::new(self.tokens.clone(), [self.batch, self.seq_len]),
            device,
        )
    }

    /// The targets as a tensor.
    ///
    /// # Shapes
    ///
    /// - output: `[batch, seq_len]`
    pub fn targets_tensor(&self, device: &Device) -> Tensor<2, Int> {
        Tensor::from_data(
            TensorData::new(self.targets.clone(), [self.batch, self.seq_len]),
            device,
        )
    }

    /// The source tokens as a tensor.
    ///
    /// # Shapes
    ///
    /// - output: `[batch, source_len]`
    pub fn source_tensor(&self, device: &Device) -> Tensor<2, Int> {
        Tensor::from_data(
            TensorData::new(self.source.clone(), [self.batch, self.source_len]),
            device,
        )
    }

    /// The `index`-th sequence's source tokens.
    pub fn source_sequence(&self, index: usize) -> &[i64] {
        &self.source[index * self.source_len..(index + 1) * self.source_len]
    }

    /// The `index`-th sequence's tokens.
    pub fn sequence(&self, index: usize) -> &[i64] {
        &self.tokens[index * self.seq_len..(index + 1) * self.seq_len]
    }

    /// Concatenates batches of the same `seq_len`.
    pub fn concat(batches: &[Batch]) -> Option<Batch> {
        let seq_len = batches.first()?.seq_len;
        Some(Batch {
            batch: batches.iter().map(|b| b.batch).sum(),
            seq_len,
            tokens: batches
                .iter()
                .flat_map(|b| b.tokens.iter().copied())
                .collect(),
            targets: batches
                .iter()
                .flat_map(|b| b.targets.iter().copied())
                .collect(),
            source_len: batches[0].source_len,
            source: batches
                .iter()
                .flat_map(|b| b.source.iter().copied())
                .collect(),
        })
    }

    /// The rows in `parts` consecutive batches, the first `batch % parts` one row longer than
    /// the rest (so none is empty when `parts <= batch`); [`concat`](Self::concat) of them is
    /// `self`. Data-parallel training gives one to each replica.
    pub fn split(&self, parts: usize) -> Vec<Batch> {
        let parts = parts.max(1);
        let (each, longer) = (self.batch / parts, self.batch % parts);
        let mut start = 0;
        (0..parts)
            .map(|part| {
                let rows = each + usize::from(part < longer);
                let range = start..start + rows;
                start += rows;
                let take = |data: &[i64], width: usize| {
                    data[range.start * width..range.end * width].to_vec()
                };
                Batch {
                    batch: rows,
                    seq_len: self.seq_len,
                    tokens: take(&self.tokens, self.seq_len),
                    targets: take(&self.targets, self.seq_len),
                    source_len: self.source_len,
                    source: take(&self.source, self.source_len),
                }
            })
            .collect()
    }
}

impl TaskConfig {
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
        match self.kind {
            TaskKind::Copy | TaskKind::Reverse | TaskKind::Sort if self.vocab < 2 => {
                Err(TaskError::VocabTooSmall { vocab: self.vocab })
            }
            TaskKind::Copy | TaskKind::Reverse | TaskKind::Sort if self.vocab > MAX_VOCAB => {
                Err(TaskError::VocabTooLarge {
                    vocab: self.vocab,
                    max: MAX_VOCAB,
                })
            }
            TaskKind::Context if self.min_distance == 0 || self.min_distance >= seq_len => {
                Err(TaskError::DistanceDoesNotFit {
                    min_distance: self.min_distance,
                    seq_len,
                })
            }
            TaskKind::Add if !(1..=9).contains(&self.digits) => Err(TaskError::DigitsOutOfRange {
                digits: self.digits,
            }),
            _ => Ok(()),
        }
    }

    /// The number of distinct input tokens the model must embed (the target side's, for
    /// `translate`).
    pub fn model_vocab(&self) -> usize {
        match self.kind {
            TaskKind::Context => 1 + FRUIT_CUES.len() + COMPANY_CUES.len() + FILLERS.len(),
            TaskKind::Add => ADD_TOKENS.len(),
            TaskKind::Translate => 1 + DIGIT_WORDS.len(),
            _ => self.vocab,
        }
    }

    /// The number of distinct source tokens (`translate` only; 0 for the others).
    pub fn source_vocab(&self) -> usize {
        match self.kind {
            TaskKind::Translate => DIGIT_WORDS.len(),
            _ => 0,
        }
    }

    /// The number of output classes per position: for the generating tasks, the vocabulary.
    pub fn n_classes(&self) -> usize {
        match self.kind {
            TaskKind::Context => CONTEXT_CLASSES.len(),
            _ => self.model_vocab(),
        }
    }

    /// The class that is never scored, if the task has one.
    pub fn ignored_class(&self) -> Option<usize> {
        matches!(self.kind, TaskKind::Context | TaskKind::Add).then_some(IGNORED)
    }

    /// Tokens per batch row, the positions the model sees: `seq_len`, but `3 · digits + 2`
    /// for `add` (the text but its last token).
    pub fn model_seq_len(&self) -> usize {
        match self.kind {
            TaskKind::Add => self.prompt_len() + self.answer_len() - 1,
            _ => self.seq_len,
        }
    }

    /// Tokens a generation starts from: `add`'s `2 · digits + 2`, `translate`'s start token,
    /// 0 for the encoder tasks.
    pub fn prompt_len(&self) -> usize {
        match self.kind {
            TaskKind::Add => 2 * self.digits + 2,
            TaskKind::Translate => 1,
            _ => 0,
        }
    }

    /// Tokens a generation produces: `add`'s `digits + 1`, `translate`'s `seq_len`, 0 for the
    /// encoder tasks.
    pub fn answer_len(&self) -> usize {
        match self.kind {
            TaskKind::Add => self.digits + 1,
            TaskKind::Translate => self.seq_len,
            _ => 0,
        }
    }

    /// A readable name for an input token, for plots.
    pub fn token_name(&self, token: i64) -> String {
        let Ok(token) = usize::try_from(token) else {
            return format!("#{token}");
        };
        match self.kind {
            TaskKind::Context => {
                context_word(token).map_or_else(|| format!("#{token}"), String::from)
            }
            TaskKind::Add => ADD_TOKENS
                .get(token)
                .map_or_else(|| format!("#{token}"), |t| t.to_string()),
            TaskKind::Translate if token == START as usize => "<s>".to_string(),
            TaskKind::Translate if token <= DIGIT_WORDS.len() => (token - 1).to_string(),
            TaskKind::Translate => format!("#{token}"),
            _ => token.to_string(),
        }
    }

    /// A readable name for a source token (`translate`'s digit words).
    pub fn source_token_name(&self, token: i64) -> String {
        usize::try_from(token)
            .ok()
            .and_then(|t| DIGIT_WORDS.get(t))
            .map_or_else(|| format!("#{token}"), |w| w.to_string())
    }

    /// A readable name for an output class.
    pub fn class_name(&self, class: usize) -> String {
        match self.kind {
            TaskKind::Context => CONTEXT_CLASSES
                .get(class)
                .map_or_else(|| format!("#{class}"), |c| c.to_string()),
            _ => class.to_string(),
        }
    }

    /// One example: `(tokens, targets)`, each `seq_len` long.
    ///
    /// # Panics
    ///
    /// Panics when [`validate`](Self::validate) would fail.
    pub fn example(&self, rng: &mut impl rand::Rng) -> (Vec<i64>, Vec<i64>) {
        let vocab = self.vocab as i64;
        let mut symbols = || -> Vec<i64> {
            (0..self.seq_len)
                .map(|_| rng.random_range(0..vocab))
                .collect()
        };
        match self.kind {
            TaskKind::Copy => {
                let x = symbols();
                (x.clone(), x)
            }
            TaskKind::Reverse => {
                let x = symbols();
                let y = x.iter().rev().copied().collect();
                (x, y)
            }
            TaskKind::Sort => {
                let x = symbols();
                let mut y = x.clone();
                y.sort_unstable();
                (x, y)
            }
            TaskKind::Context => self.context_example(rng),
            TaskKind::Add => {
                let max = 10_u64.pow(self.digits as u32);
                let (a, b) = (rng.random_range(0..max), rng.random_range(0..max));
                self.add_row(&self.add_text(a, b))
            }
            TaskKind::Translate => {
                let (_, target, targets) = self.translate_example(rng);
                (target, targets)
            }
        }
    }

    /// A training batch of `batch` independent examples ([`Split::Train`]).
    pub fn batch(&self, batch: usize, rng: &mut impl rand::Rng) -> Batch {
        self.batch_from(Split::Train, batch, rng)
    }

    /// A batch of `batch` independent examples from one side of the held-out split (which
    /// the encoder tasks ignore: they draw every example the same way).
    pub fn batch_from(&self, split: Split, batch: usize, rng: &mut impl rand::Rng) -> Batch {
        let seq_len = self.model_seq_len();
        let source_len = match self.kind.architecture() {
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
            match self.kind {
                TaskKind::Translate => {
                    let (source, x, y) = loop {
                        let example = self.translate_example(rng);
                        if self.split_of(&example.0) == split {
                            break example;
                        }
                    };
                    out.source.extend(source);
                    out.tokens.extend(x);
                    out.targets.extend(y);
                }
                TaskKind::Add => {
                    let (x, y) = loop {
                        let example = self.example(rng);
                        if self.split_of(&example.0[..self.prompt_len()]) == split {
                            break example;
                        }
                    };
                    out.tokens.extend(x);
                    out.targets.extend(y);
                }
                _ => {
                    let (x, y) = self.example(rng);
                    out.tokens.extend(x);
                    out.targets.extend(y);
                }
            }
        }
        out
    }

    /// The side of the held-out split a prompt (`add`) or source (`translate`) falls on.
    pub fn split_of(&self, prompt: &[i64]) -> Split {
        // FNV-1a over the tokens, then a SplitMix64 finaliser so that neighbouring prompts
        // fall on either side independently.
        let mut h = prompt.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &t| {
            (h ^ t as u64).wrapping_mul(0x0000_0100_0000_01b3)
        });
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
        if h.is_multiple_of(HELD_OUT_ONE_IN) {
            Split::HeldOut
        } else {
            Split::Train
        }
    }

    /// The `add` text of `a + b`: the prompt `a+b=` with both operands zero-padded to
    /// `digits`, then the sum's `digits + 1` digits least significant first.
    pub fn add_text(&self, a: u64, b: u64) -> Vec<i64> {
        let digit = |d: u64| d as i64 + 1;
        let number = |n: u64, width: usize| -> Vec<i64> {
            (0..width)
                .rev()
                .map(|i| digit(n / 10_u64.pow(i as u32) % 10))
                .collect()
        };
        let mut text = number(a, self.digits);
        text.push(PLUS);
        text.extend(number(b, self.digits));
        text.push(EQUALS);
        let sum = a + b;
        text.extend((0..=self.digits).map(|i| digit(sum / 10_u64.pow(i as u32) % 10)));
        text
    }

    /// The `add` prompt for the text `a+b` or `a+b=` (operands of at most `digits` digits),
    /// zero-padded as in training.
    ///
    /// # Errors
    ///
    /// A message naming the expected form.
    pub fn add_prompt(&self, text: &str) -> Result<Vec<i64>, String> {
        let bad = || {
            format!(
                "the add prompt is two numbers of at most {} digits, like {}+{}=; got {text:?}",
                self.digits,
                "1".repeat(self.digits),
                "2".repeat(self.digits)
            )
        };
        let text = text.trim();
        let text = text.strip_suffix('=').unwrap_or(text);
        let (a, b) = text.split_once('+').ok_or_else(bad)?;
        let operand = |s: &str| {
            let s = s.trim();
            let fits = !s.is_empty() && s.len() <= self.digits;
            if fits && s.bytes().all(|c| c.is_ascii_digit()) {
                s.parse::<u64>().map_err(|_| bad())
            } else {
                Err(bad())
            }
        };
        let mut prompt = self.add_text(operand(a)?, operand(b)?);
        prompt.truncate(self.prompt_len());
        Ok(prompt)
    }

    /// Reads an `add` answer, least significant digit first, back as a number.
    pub fn read_add_answer(&self, answer: &[i64]) -> Option<u64> {
        answer.iter().rev().try_fold(0_u64, |n, &t| {
            let d = u64::try_from(t - 1).ok().filter(|d| *d < 10)?;
            Some(n * 10 + d)
        })
    }

    /// One `add` text as a batch row: the text but its last token, and the next token at
    /// each position where it is an answer digit ([`IGNORED`] inside the prompt).
    fn add_row(&self, text: &[i64]) -> (Vec<i64>, Vec<i64>) {
        let len = text.len() - 1;
        let x = text[..len].to_vec();
        let y = (0..len)
            .map(|i| {
                if i + 1 >= self.prompt_len() {
                    text[i + 1]
                } else {
                    IGNORED as i64
                }
            })
            .collect();
        (x, y)
    }

    /// The `translate` source for digit words separated by spaces.
    ///
    /// # Errors
    ///
    /// A message naming the first word that is not a digit word.
    pub fn translate_source(&self, text: &str) -> Result<Vec<i64>, String> {
        text.split_whitespace()
            .map(|word| {
                DIGIT_WORDS
                    .iter()
                    .position(|w| w.eq_ignore_ascii_case(word))
                    .map(|d| d as i64)
                    .ok_or_else(|| {
                        format!(
                            "{word:?} is not a digit word; the translate prompt is words from {}",
                            DIGIT_WORDS.join(" ")
                        )
                    })
            })
            .collect()
    }

    /// The `translate` start token, the prompt of every generation.
    pub fn start_token(&self) -> i64 {
        START
    }

    /// One `translate` example: `(source, target input, targets)`, each `seq_len` long. The
    /// targets are the source's digits backwards; the target input is `<s>` and the targets
    /// but the last.
    fn translate_example(&self, rng: &mut impl rand::Rng) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
        let source: Vec<i64> = (0..self.seq_len)
            .map(|_| rng.random_range(0..DIGIT_WORDS.len() as i64))
            .collect();
        let targets: Vec<i64> = source.iter().rev().map(|d| d + 1).collect();
        let mut input = vec![START];
        input.extend(&targets[..self.seq_len - 1]);
        (source, input, targets)
    }

    /// The apple problem: filler words, one `apple`, one cue at distance >= `min_distance`.
    fn context_example(&self, rng: &mut impl rand::Rng) -> (Vec<i64>, Vec<i64>) {
        let seq_len = self.seq_len;
        let far_enough = |p: usize, q: usize| p.abs_diff(q) >= self.min_distance;
        // Rejection sampling keeps (apple, cue) uniform over all pairs that are far enough.
        let (apple, cue) = loop {
            let (p, q) = (rng.random_range(0..seq_len), rng.random_range(0..seq_len));
            if far_enough(p, q) {
                break (p, q);
            }
        };
        let fruit = rng.random_bool(0.5);
        let cues = if fruit { &FRUIT_CUES } else { &COMPANY_CUES };
        let cue_word = cues[rng.random_range(0..cues.len())];

        let filler_base = 1 + FRUIT_CUES.len() + COMPANY_CUES.len();
        let mut tokens: Vec<i64> = (0..seq_len)
            .map(|_| (filler_base + rng.random_range(0..FILLERS.len())) as i64)
            .collect();
        tokens[apple] = context_token(AMBIGUOUS);
        tokens[cue] = context_token(cue_word);

        let mut targets = vec![IGNORED as i64; seq_len];
        targets[apple] = if fruit { 1 } else { 2 };
        (tokens, targets)
    }
}

/// Where the `context` task's ambiguous word and its cue stand in one sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuePositions {
    /// The ambiguous word (`apple`): the one scored position.
    pub word: usize,
    /// The cue word that decides the ambiguous word's class.
    pub cue: usize,
}

impl TaskConfig {
    /// `context` only: where the ambiguous word and its cue stand in `tokens`, one sequence of
    /// the task. `None` for the other tasks, or for a sequence without either word.
    pub fn cue_positions(&self, tokens: &[i64]) -> Option<CuePositions> {
        if self.kind != TaskKind::Context {
            return None;
        }
        let word = tokens.iter().position(|&t| t == context_token(AMBIGUOUS))?;
        let cue = tokens.iter().position(|&t| is_cue(t))?;
        Some(CuePositions { word, cue })
    }
}

/// Whether a `context` token id is one of the cue words.
fn is_cue(token: i64) -> bool {
    usize::try_from(token)
        .ok()
        .and_then(context_word)
        .is_some_and(|w| FRUIT_CUES.contains(&w) || COMPANY_CUES.contains(&w))
}

/// The word of a `context` token id.
fn context_word(token: usize) -> Option<&'static str> {
    std::iter::once(AMBIGUOUS)
        .chain(FRUIT_CUES)
        .chain(COMPANY_CUES)
        .chain(FILLERS)
        .nth(token)
}

/// The token id of a `context` word.
fn context_token(word: &str) -> i64 {
    let id = std::iter::once(AMBIGUOUS)
        .chain(FRUIT_CUES)
        .chain(COMPANY_CUES)
        .chain(FILLERS)
        .position(|w| w == word)
        .expect("only called with words from the word lists");
    id as i64
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::random::Rng;

    fn task(kind: TaskKind) -> TaskConfig {
        TaskConfig {
            kind,
            seq_len: 7,
            vocab: 5,
            min_distance: 1,
            digits: 3,
        }
    }

    #[test]
    fn reverse_targets_are_the_tokens_backwards() {
        let (x, y) = task(TaskKind::Reverse).example(&mut Rng::new(1));
        assert_eq!(x.len(), 7);
        for i in 0..7 {
            assert_eq!(y[i], x[6 - i]);
        }
        assert!(x.iter().all(|&t| (0..5).contains(&t)));
    }

    #[test]
    fn sort_targets_are_sorted_and_a_permutation() {
        let (x, y) = task(TaskKind::Sort).example(&mut Rng::new(2));
        assert!(y.windows(2).all(|w| w[0] <= w[1]));
        let mut xs = x.clone();
        xs.sort_unstable();
        assert_eq!(xs, y);
    }

    #[test]
    fn split_gives_near_equal_row_ranges_that_concatenate_back() {
        let translate = TaskConfig {
            kind: TaskKind::Translate,
            seq_len: 6,
            ..task(TaskKind::Translate)
        };
        for task in [task(TaskKind::Reverse), translate] {
            let batch = task.batch(7, &mut Rng::new(5));
            for parts in 1..=7 {
                let shards = batch.split(parts);
                let rows: Vec<usize> = shards.iter().map(|s| s.batch).collect();
                assert_eq!(rows.iter().sum::<usize>(), 7, "{parts} parts: {rows:?}");
                assert!(rows.iter().all(|&r| r == 7 / parts || r == 7 / parts + 1));
                assert!(rows.windows(2).all(|w| w[0] >= w[1]), "{rows:?}");
                assert_eq!(
                    Batch::concat(&shards).expect("at least one part"),
                    batch,
                    "{:?} in {parts} parts",
                    task.kind
                );
            }
        }
    }

    #[test]
    fn copy_targets_equal_tokens() {
        let (x, y) = task(TaskKind::Copy).example(&mut Rng::new(3));
        assert_eq!(x, y);
    }

    #[test]
    fn context_scores_only_apple_and_its_label_follows_the_cue() {
        let task = TaskConfig {
            kind: TaskKind::Context,
            seq_len: 40,
            vocab: 0,
            min_distance: 30,
            digits: 3,
        };
        task.validate().expect("30 < 40");
        let apple = context_token(AMBIGUOUS);
        let mut rng = Rng::new(4);
        let mut senses = [0usize; 3];
        for _ in 0..200 {
            let (x, y) = task.example(&mut rng);
            let p = x.iter().position(|&t| t == apple).expect("one apple");
            assert_eq!(x.iter().filter(|&&t| t == apple).count(), 1);
            let cue = x.iter().position(|&t| is_cue(t)).expect("one cue");
            assert_eq!(x.iter().filter(|&&t| is_cue(t)).count(), 1);
            assert!(p.abs_diff(cue) >= 30, "apple at {p}, cue at {cue}");
            let cue_word = context_word(x[cue] as usize).expect("a word");
            let expected = if FRUIT_CUES.contains(&cue_word) { 1 } else { 2 };
            assert_eq!(y[p], expected);
            assert_eq!(y.iter().filter(|&&c| c != IGNORED as i64).count(), 1);
            assert_eq!(
                task.cue_positions(&x),
                Some(CuePositions { word: p, cue }),
                "{x:?}"
            );
            senses[y[p] as usize] += 1;
        }
        assert!(senses[1] > 60 && senses[2] > 60, "{senses:?}");
    }

    #[test]
    fn cue_positions_name_the_scored_word_and_its_cue() {
        let task = TaskConfig {
            kind: TaskKind::Context,
            seq_len: 9,
            vocab: 0,
            min_distance: 2,
            digits: 3,
        };
        let words = ["the", "ripe", "a", "of", "apple", "to", "in", "is", "it"];
        let tokens: Vec<i64> = words.iter().map(|w| context_token(w)).collect();
        assert_eq!(
            task.cue_positions(&tokens),
            Some(CuePositions { word: 4, cue: 1 })
        );
        assert_eq!(task.cue_positions(&tokens[2..]), None, "no cue left");
        let reverse = TaskConfig {
            kind: TaskKind::Reverse,
            ..task
        };
        assert_eq!(reverse.cue_positions(&tokens), None);
    }

    fn add(digits: usize) -> TaskConfig {
        TaskConfig {
            kind: TaskKind::Add,
            digits,
            ..TaskConfig::default()
        }
    }

    fn names(task: &TaskConfig, tokens: &[i64]) -> String {
        tokens.iter().map(|&t| task.token_name(t)).collect()
    }

    #[test]
    fn add_text_is_the_padded_prompt_then_the_sum_backwards() {
        let task = add(3);
        assert_eq!(names(&task, &task.add_text(123, 45)), "123+045=8610");
        assert_eq!(names(&task, &task.add_text(999, 999)), "999+999=8991");
        assert_eq!(
            task.add_prompt("123+45="),
            Ok(task.add_text(123, 45)[..8].to_vec())
        );
        assert_eq!(
            task.add_prompt(" 7+8 "),
            Ok(task.add_text(7, 8)[..8].to_vec())
        );
        assert!(task.add_prompt("1234+5=").is_err());
        assert!(task.add_prompt("12-5=").is_err());
        assert_eq!(
            task.read_add_answer(&task.add_text(123, 45)[8..]),
            Some(168)
        );
    }

    #[test]
    fn add_rows_score_only_the_answer_shifted_by_one() {
        let task = add(2);
        assert_eq!(
            (task.prompt_len(), task.answer_len(), task.model_seq_len()),
            (6, 3, 8)
        );
        let mut rng = Rng::new(5);
        let batch = task.batch(40, &mut rng);
        assert_eq!(batch.seq_len, 8);
        for b in 0..batch.batch {
            let x = batch.sequence(b);
            let y = &batch.targets[b * 8..(b + 1) * 8];
            let number = |digits: &[i64]| digits.iter().fold(0, |n, &t| n * 10 + (t - 1) as u64);
            let (a, c) = (number(&x[0..2]), number(&x[3..5]));
            assert_eq!((x[2], x[5]), (PLUS, EQUALS), "{}", names(&task, x));
            let text = task.add_text(a, c);
            assert_eq!(x, &text[..8]);
            assert!(y[..5].iter().all(|&t| t == IGNORED as i64), "{y:?}");
            assert_eq!(&y[5..], &text[6..]);
            assert_eq!(task.read_add_answer(&y[5..]), Some(a + c));
        }
    }

    #[test]
    fn held_out_prompts_never_appear_in_training_batches() {
        for task in [
            add(2),
            TaskConfig {
                kind: TaskKind::Translate,
                seq_len: 3,
                ..TaskConfig::default()
            },
        ] {
            let mut rng = Rng::new(6);
            let held_out = task.batch_from(Split::HeldOut, 300, &mut rng);
            let train = task.batch(3000, &mut rng);
            let prompt = |b: &Batch, i: usize| match task.kind {
                TaskKind::Add => b.sequence(i)[..task.prompt_len()].to_vec(),
                _ => b.source_sequence(i).to_vec(),
            };
            let held: HashSet<Vec<i64>> = (0..300).map(|i| prompt(&held_out, i)).collect();
            let trained: HashSet<Vec<i64>> = (0..3000).map(|i| prompt(&train, i)).collect();
            assert!(held.is_disjoint(&trained), "{}", task.kind);
            // One in 50 of 10⁴ prompts (2-digit addition) or 10³ sources (3 digit words).
            assert!(
                held.len() >= 10 && trained.len() > 900,
                "{} {}",
                held.len(),
                trained.len()
            );
            assert!(held.iter().all(|p| task.split_of(p) == Split::HeldOut));
        }
    }

    #[test]
    fn translate_targets_are_the_source_digits_backwards_after_a_start_token() {
        let task = TaskConfig {
            kind: TaskKind::Translate,
            seq_len: 4,
            ..TaskConfig::default()
        };
        let batch = task.batch(5, &mut Rng::new(7));
        assert_eq!((batch.source_len, batch.seq_len), (4, 4));
        for b in 0..5 {
            let (source, x) = (batch.source_sequence(b), batch.sequence(b));
            let y = &batch.targets[b * 4..(b + 1) * 4];
            for i in 0..4 {
                assert_eq!(y[i], source[3 - i] + 1);
                assert_eq!(task.token_name(y[i]), source[3 - i].to_string());
            }
            assert_eq!(x[0], task.start_token());
            assert_eq!(&x[1..], &y[..3]);
        }
        let words = task
            .translate_source("three one Four")
            .expect("digit words");
        assert_eq!(words, [3, 1, 4]);
        assert_eq!(task.source_token_name(4), "four");
        assert!(task.translate_source("three eleven").is_err());
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

    #[test]
    fn token_names_read_as_words_for_context() {
        let t = TaskConfig {
            kind: TaskKind::Context,
            ..TaskConfig::default()
        };
        assert_eq!(t.token_name(0), "apple");
        assert_eq!(t.token_name(context_token("stock")), "stock");
        assert_eq!(t.model_vocab(), 41);
        assert_eq!(t.class_name(2), "company");
    }
}
