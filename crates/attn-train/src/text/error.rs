//! Why a text cannot be trained on: [`TextError`], from a file that cannot be read to a
//! tokenizer that fails on the text.

use std::path::{Path, PathBuf};

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
