//! Why a chat template or a generation setting cannot be read or rendered ([`ChatError`]), and
//! minijinja's errors turned into it.

use minijinja::{Error, ErrorKind};

use crate::files::FileError;

use super::limits::{CHAT_RECURSION_LIMIT, CHAT_RENDER_FUEL};
use super::python::RaisedByTemplate;

/// Why a chat template or a generation setting cannot be read or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// A folder that is not one, or a file that is not UTF-8 text.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// A file that is missing where it is needed, is not a regular file, is a link out of
    /// the model folder, is longer than the bound on what is read of it, or cannot be read.
    #[error(transparent)]
    File(#[from] FileError),
    /// A JSON file that does not parse.
    #[error("{path} is not valid JSON: {reason}")]
    Json {
        /// The file.
        path: String,
        /// The parser's message, with line and column.
        reason: String,
    },
    /// A value of the wrong type in a JSON file.
    #[error("{path}: `{key}` must be {expected}, found {found}")]
    WrongType {
        /// The file.
        path: String,
        /// The key (for the whole file, `"(top level)"`).
        key: String,
        /// What it must be.
        expected: &'static str,
        /// What it is.
        found: String,
    },
    /// A token id the model is fed (`pad_token_id`, `bos_token_id`) outside the vocabulary
    /// that `config.json`'s `vocab_size` gives.
    #[error(
        "{path}: `{key}` is {id}, outside the {vocab} token ids (0..{vocab}) of config.json's \
         vocab_size"
    )]
    TokenOutsideVocab {
        /// The file that gives the id.
        path: String,
        /// The key.
        key: &'static str,
        /// The id.
        id: i64,
        /// `config.json`'s `vocab_size`.
        vocab: u64,
    },
    /// `chat_template` is a list of named templates, none of them named `"default"`.
    #[error(
        "{path} lists chat templates named {names:?} but none named \"default\"; \
         this crate only renders the default one"
    )]
    NoDefaultTemplate {
        /// The file.
        path: String,
        /// The names the list holds.
        names: Vec<String>,
    },
    /// A template that does not compile, or that fails while it renders.
    #[error("chat template{}: {reason}", line.map(|n| format!(" line {n}")).unwrap_or_default())]
    Template {
        /// The template's line where minijinja found the error, when it knows it.
        line: Option<usize>,
        /// What went wrong.
        reason: String,
    },
    /// A rendering that ran past one of its bounds: [`CHAT_RENDER_FUEL`] instructions,
    /// [`CHAT_RECURSION_LIMIT`] levels, or
    /// [`CHAT_PROMPT_MAX_BYTES`](super::limits::CHAT_PROMPT_MAX_BYTES) of output.
    #[error("chat template{}: {what} {limit}, so the rendering stopped", line.map(|n| format!(" line {n}")).unwrap_or_default())]
    RenderLimit {
        /// The template's line where it stopped, when minijinja knows it.
        line: Option<usize>,
        /// Which bound (`"ran more instructions than"`, ...).
        what: &'static str,
        /// The bound.
        limit: u64,
    },
    /// The template called `raise_exception(message)`: it refuses the conversation (roles
    /// that do not alternate, a role it does not know).
    #[error("the chat template refused the conversation: {message}")]
    Raised {
        /// The message the template gave.
        message: String,
    },
}

/// [`ChatError::Template`] for a minijinja error, with its line and its causes.
pub(super) fn template_error(err: &Error) -> ChatError {
    let mut reason = match err.detail() {
        Some(detail) => format!("{}: {detail}", err.kind()),
        None => err.kind().to_string(),
    };
    let mut cause = std::error::Error::source(err);
    while let Some(inner) = cause {
        reason.push_str(&format!(" (caused by: {inner})"));
        cause = inner.source();
    }
    ChatError::Template {
        line: err.line(),
        reason,
    }
}

/// [`ChatError::Raised`] when `raise_exception` failed the rendering,
/// [`ChatError::RenderLimit`] when the fuel or the recursion limit ran out, else
/// [`template_error`].
pub(super) fn render_error(err: &Error) -> ChatError {
    let limit = match err.kind() {
        ErrorKind::OutOfFuel => Some(("ran more instructions than", CHAT_RENDER_FUEL)),
        ErrorKind::InvalidOperation
            if err
                .detail()
                .is_some_and(|detail| detail.contains("recursion limit exceeded")) =>
        {
            Some(("nested deeper than", CHAT_RECURSION_LIMIT as u64))
        }
        _ => None,
    };
    if let Some((what, limit)) = limit {
        return ChatError::RenderLimit {
            line: err.line(),
            what,
            limit,
        };
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(inner) = cause {
        if let Some(RaisedByTemplate(message)) = inner.downcast_ref::<RaisedByTemplate>() {
            return ChatError::Raised {
                message: message.clone(),
            };
        }
        cause = inner.source();
    }
    template_error(err)
}
