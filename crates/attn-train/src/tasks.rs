//! Synthetic per-token classification tasks, generated on the fly from a seed.
//!
//! Every task maps a sequence of `seq_len` tokens to one class per position:
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
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Copy => "copy",
            Self::Reverse => "reverse",
            Self::Sort => "sort",
            Self::Context => "context",
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
}

impl Default for TaskConfig {
    fn default() -> Self {
        Self {
            kind: TaskKind::Reverse,
            seq_len: 16,
            vocab: 16,
            min_distance: 1,
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
        })
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
            _ => Ok(()),
        }
    }

    /// The number of distinct input tokens the model must embed.
    pub fn model_vocab(&self) -> usize {
        match self.kind {
            TaskKind::Context => 1 + FRUIT_CUES.len() + COMPANY_CUES.len() + FILLERS.len(),
            _ => self.vocab,
        }
    }

    /// The number of output classes per position.
    pub fn n_classes(&self) -> usize {
        match self.kind {
            TaskKind::Context => CONTEXT_CLASSES.len(),
            _ => self.vocab,
        }
    }

    /// The class that is never scored, if the task has one.
    pub fn ignored_class(&self) -> Option<usize> {
        (self.kind == TaskKind::Context).then_some(IGNORED)
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
            _ => token.to_string(),
        }
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
        }
    }

    /// A batch of `batch` independent examples.
    pub fn batch(&self, batch: usize, rng: &mut impl rand::Rng) -> Batch {
        let mut tokens = Vec::with_capacity(batch * self.seq_len);
        let mut targets = Vec::with_capacity(batch * self.seq_len);
        for _ in 0..batch {
            let (x, y) = self.example(rng);
            tokens.extend(x);
            targets.extend(y);
        }
        Batch {
            batch,
            seq_len: self.seq_len,
            tokens,
            targets,
        }
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
    use super::*;
    use crate::random::Rng;

    fn task(kind: TaskKind) -> TaskConfig {
        TaskConfig {
            kind,
            seq_len: 7,
            vocab: 5,
            min_distance: 1,
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
