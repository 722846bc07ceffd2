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

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::{Rng, RngCore};

pub mod corpus;
mod sample;
pub mod tokenizer;
mod tokens;

pub use corpus::{Chunk, Side, Sources};
pub use sample::{Continuation, continue_text};
pub use tokenizer::{TextTokenizer, TokenizerChoice, read_tokenizer};
pub use tokens::Tokens;

use crate::run_dir::RunDir;
use crate::tasks::Example;
use tokens::TokenWriter;

/// The run folder's tokenizer.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// The run folder's training ids.
pub const TRAIN_TOKENS: &str = "tokens/train.u32";
/// The run folder's validation ids.
pub const VALIDATION_TOKENS: &str = "tokens/validation.u32";
/// The samples written at each evaluation.
pub const SAMPLES_FILE: &str = "samples.txt";

/// Why a text cannot be trained on.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// No file to read.
    #[error("no text to train on: {reason}")]
    NoData {
        /// Why.
        reason: String,
    },
    /// A file of no bytes.
    #[error("{} is empty", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// A path that is not a regular file or folder: a FIFO, a device, a socket.
    #[error("{} is not a regular file", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// A file larger than its kind is allowed to be.
    #[error("{} is {bytes} bytes, more than the {limit} allowed for it", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// A NUL byte: not text.
    #[error(
        "{} looks binary, not text: it has a NUL byte at byte offset {offset}",
        path.display()
    )]
    Binary {
        /// The file.
        path: PathBuf,
        /// Where, from the start of the file.
        offset: u64,
    },
    /// Bytes that are not UTF-8.
    #[error(
        "{} is not valid UTF-8 at byte offset {offset} (give --lossy to read such bytes as \
         U+FFFD)",
        path.display()
    )]
    InvalidUtf8 {
        /// The file.
        path: PathBuf,
        /// Where, from the start of the file.
        offset: u64,
    },
    /// A split shorter than one window.
    #[error(
        "the {side} split has {tokens} tokens, fewer than one window of seq_len + 1 = {needed}; \
         give more text or a smaller --seq-len"
    )]
    TooShort {
        /// `training` or `validation`.
        side: &'static str,
        /// Its tokens.
        tokens: usize,
        /// One window.
        needed: usize,
    },
    /// A `tokenizer.json` that does not parse.
    #[error("{} is not a tokenizer `tokenizers` can read: {reason}", path.display())]
    BadTokenizer {
        /// The file.
        path: PathBuf,
        /// What `tokenizers` said.
        reason: String,
    },
    /// The tokenizer failed on the text.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A token file of the run folder that cannot be the run's.
    #[error("{} is corrupt: {reason}", path.display())]
    CorruptTokens {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A file or folder could not be read or written.
    #[error("{action} {}: {error}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
}

impl TextError {
    pub(crate) fn io(action: &'static str, path: &Path, error: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.to_path_buf(),
            error,
        }
    }

    pub(crate) fn tokenizer(error: impl std::fmt::Display) -> Self {
        Self::Tokenizer(error.to_string())
    }
}

/// Reads the regular file `path`, refusing anything else and anything over `limit` bytes
/// before reading it.
///
/// # Errors
///
/// [`TextError::NotAFile`], [`TextError::TooLarge`], or [`TextError::Io`].
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, TextError> {
    let meta = std::fs::metadata(path).map_err(|e| TextError::io("reading", path, e))?;
    if !meta.is_file() {
        return Err(TextError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    if meta.len() > limit {
        return Err(TextError::TooLarge {
            path: path.to_path_buf(),
            bytes: meta.len(),
            limit,
        });
    }
    let file = std::fs::File::open(path).map_err(|e| TextError::io("opening", path, e))?;
    let mut bytes = Vec::new();
    // A file that grows after the check is read up to the limit and one byte more.
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| TextError::io("reading", path, e))?;
    if bytes.len() as u64 > limit {
        return Err(TextError::TooLarge {
            path: path.to_path_buf(),
            bytes: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

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
    /// Reads `files`, builds the tokenizer `choice` names from the training split (or reads
    /// it), and encodes both splits, in chunks; with a run folder, the tokenizer and the ids
    /// are written there and the ids mapped back.
    ///
    /// # Errors
    ///
    /// [`TrainError::Text`](crate::error::TrainError::Text) naming the file and what is wrong
    /// with it, or a split shorter than one window of `seq_len + 1` tokens; the run folder's
    /// errors.
    pub fn prepare(
        files: &[PathBuf],
        lossy: bool,
        choice: &TokenizerChoice,
        seq_len: usize,
        run_dir: Option<&RunDir>,
    ) -> Result<Self, crate::error::TrainError> {
        let sources = Sources::open(files, lossy)?;
        let tokenizer = build_tokenizer(&sources, choice)?;
        let (train, validation) = match run_dir {
            Some(dir) => {
                let claim = |relative: &str| dir.claim(relative);
                let json = tokenizer.to_json()?;
                let path = claim(TOKENIZER_FILE)?;
                write_atomically(&path, json.as_bytes())?;
                let mut train = TokenWriter::create(&claim(TRAIN_TOKENS)?)?;
                let mut validation = TokenWriter::create(&claim(VALIDATION_TOKENS)?)?;
                encode(&sources, &tokenizer, |side, ids| match side {
                    Side::Train => train.write(ids),
                    Side::Validation => validation.write(ids),
                })?;
                check_length("training", train.written(), seq_len)?;
                check_length("validation", validation.written(), seq_len)?;
                let vocab = tokenizer.vocab_size();
                (
                    Tokens::map(&train.finish()?, vocab)?,
                    Tokens::map(&validation.finish()?, vocab)?,
                )
            }
            None => {
                let (mut train, mut validation) = (Vec::new(), Vec::new());
                encode(&sources, &tokenizer, |side, ids| {
                    match side {
                        Side::Train => train.extend_from_slice(ids),
                        Side::Validation => validation.extend_from_slice(ids),
                    }
                    Ok(())
                })?;
                (Tokens::Memory(train), Tokens::Memory(validation))
            }
        };
        check_length("training", train.len(), seq_len)?;
        check_length("validation", validation.len(), seq_len)?;
        Ok(Self {
            tokenizer,
            train,
            validation,
        })
    }

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

/// The tokenizer `choice` names: built from the training split's text, or read.
fn build_tokenizer(
    sources: &Sources,
    choice: &TokenizerChoice,
) -> Result<TextTokenizer, TextError> {
    match choice {
        TokenizerChoice::File(path) => TextTokenizer::read(path),
        TokenizerChoice::Char => {
            let mut characters = BTreeSet::new();
            for chunk in sources.chunks() {
                let chunk = chunk?;
                if chunk.side == Side::Validation {
                    break;
                }
                characters.extend(chunk.text.chars());
            }
            TextTokenizer::characters(&characters)
        }
        TokenizerChoice::Bpe(size) => {
            let mut failure = None;
            let train = sources
                .chunks()
                .map_while(|chunk| chunk.map_err(|e| failure = Some(e)).ok())
                .take_while(|chunk| chunk.side == Side::Train)
                .map(|chunk| chunk.text);
            let tokenizer = TextTokenizer::train_bpe(*size, train);
            if let Some(e) = failure {
                return Err(e);
            }
            tokenizer
        }
    }
}

/// Encodes every chunk of `sources`, passing each one's ids to `sink` with its side.
fn encode(
    sources: &Sources,
    tokenizer: &TextTokenizer,
    mut sink: impl FnMut(Side, &[u32]) -> Result<(), TextError>,
) -> Result<(), TextError> {
    for chunk in sources.chunks() {
        let chunk = chunk?;
        let ids = tokenizer.encode(&chunk.text)?;
        sink(chunk.side, &ids)?;
    }
    Ok(())
}

/// Replaces `path` with `bytes` through a temporary file in the same folder and a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), TextError> {
    crate::files::write_atomically(path, bytes).map_err(|(p, e)| TextError::io("writing", &p, e))
}
