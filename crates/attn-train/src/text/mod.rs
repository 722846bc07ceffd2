//! A language model on the user's own text: the `text` task's data.
//!
//! ```text
//! files ──► chunks (UTF-8, checked) ──► tokenizer (char, bpe:N or a tokenizer.json)
//!       ──► ids: the first 90% of the text trains, the last 10% validates
//!       ──► batches: random windows of seq_len + 1 ids, the input and its shift by one
//! ```
//!
//! A run with a folder keeps what it needs there, so that it resumes and generates without the
//! original files: `tokenizer.json`, and each split's ids in `tokens/` (read through a memory
//! map, so a corpus larger than memory still trains). `samples.txt` collects the text the model
//! writes at each evaluation.
//!
//! Reading, tokenizing and keeping a fresh run's text in its folder is `prepare.rs`
//! ([`TextData::prepare`], [`TaskConfig::load_text`](crate::tasks::TaskConfig::load_text)),
//! the one file here that knows the run folder.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};

pub mod corpus;
mod error;
mod prepare;
mod sample;
pub mod tokenizer;
mod tokens;

pub use crate::files::read_bounded;
pub use corpus::{Chunk, Side, Sources};
pub use error::TextError;
pub use sample::{Continuation, continue_text};
pub use tokenizer::{TextTokenizer, TokenizerChoice, read_tokenizer};
pub use tokens::Tokens;

use crate::tasks::Example;

/// The run folder's tokenizer.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The run folder's training ids.
pub const TRAIN_TOKENS: &str = "tokens/train.u32";
/// The run folder's validation ids.
pub const VALIDATION_TOKENS: &str = "tokens/validation.u32";
/// The samples written at each evaluation.
pub const SAMPLES_FILE: &str = "samples.txt";

/// A text ready to batch: its tokenizer and the ids of both splits.
#[derive(Debug)]
pub struct TextData {
    /// Text to ids and back.
    pub tokenizer: TextTokenizer,
    /// The first 90% of the text.
    pub train: Tokens,
    /// The last 10%.
    pub validation: Tokens,
}

/// The text task's settings: where its text comes from, and its tokenizer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TextSettings {
    /// The text files, read in this order (a folder stands for its regular files).
    pub data: Vec<PathBuf>,
    /// `char`, `bpe:N`, or the path of a `tokenizer.json`.
    pub tokenizer: TokenizerChoice,
    /// Read bytes that are not UTF-8 as U+FFFD instead of refusing the file.
    pub lossy: bool,
    /// The text, once read (never saved: the fields above name it).
    #[serde(skip)]
    pub loaded: Option<LoadedText>,
}

impl TextSettings {
    /// Whether these are the defaults (a task other than `text`), left out of `config.json`.
    pub fn is_unused(&self) -> bool {
        self.data.is_empty() && self.tokenizer == TokenizerChoice::Char && !self.lossy
    }
}

/// The text of a run as its configuration carries it: shared, and equal to any other (the
/// configuration's fields name the files it came from).
#[derive(Clone, Debug)]
pub struct LoadedText(pub Arc<TextData>);

impl PartialEq for LoadedText {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for LoadedText {}

impl TextData {
    /// The text a run folder kept: its tokenizer and its ids.
    ///
    /// # Errors
    ///
    /// [`TextError`] for a missing, unreadable or corrupt file, or one of the wrong size.
    pub fn open(dir: &Path, seq_len: usize) -> Result<Self, TextError> {
        let tokenizer = read_run_tokenizer(dir)?;
        let vocab = tokenizer.vocab_size();
        let train = Tokens::map(&dir.join(TRAIN_TOKENS), vocab)?;
        let validation = Tokens::map(&dir.join(VALIDATION_TOKENS), vocab)?;
        check_length("training", train.len(), seq_len)?;
        check_length("validation", validation.len(), seq_len)?;
        Ok(Self {
            tokenizer,
            train,
            validation,
        })
    }

    /// A random window of `seq_len + 1` ids of one side: the first `seq_len` are the input,
    /// the last `seq_len` the targets.
    pub fn example(&self, side: Side, seq_len: usize, rng: &mut dyn RngCore) -> Example {
        let tokens = match side {
            Side::Train => &self.train,
            Side::Validation => &self.validation,
        };
        // `prepare` and `open` checked that every split holds a window.
        let start = rng.random_range(0..=tokens.len() - seq_len - 1);
        Example::encoded(
            tokens.window(start, seq_len),
            tokens.window(start + 1, seq_len),
        )
    }
}

/// The tokenizer a run folder kept.
///
/// # Errors
///
/// [`TextError`] for a missing, unreadable or malformed `tokenizer.json`.
pub fn read_run_tokenizer(dir: &Path) -> Result<TextTokenizer, TextError> {
    TextTokenizer::read(&dir.join(TOKENIZER_FILE))
}

fn check_length(side: &'static str, tokens: usize, seq_len: usize) -> Result<(), TextError> {
    let needed = seq_len + 1;
    if tokens < needed {
        return Err(TextError::TooShort {
            side,
            tokens,
            needed,
        });
    }
    Ok(())
}
