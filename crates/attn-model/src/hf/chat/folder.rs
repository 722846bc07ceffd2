//! A chat template's files in a model folder: `chat_template.jinja` and `tokenizer_config.json`
//! (its special tokens, and in older folders the template itself), each a regular file (or a
//! link to one inside the folder, [`crate::files::folder_file`]) read within a bound.

use std::path::Path;

use serde_json::{Map, Value as Json};

use super::error::ChatError;
use super::limits::CHAT_MAX_BYTES;
use crate::files::{folder_file, read_bounded};

/// The special tokens a template can name: `bos_token`, `eos_token`, `unk_token` and
/// `pad_token`. A token that is `None` is left undefined in the template, as transformers
/// leaves it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpecialTokens {
    /// Beginning of sequence, `bos_token`.
    pub bos: Option<String>,
    /// End of sequence (or of turn), `eos_token`.
    pub eos: Option<String>,
    /// Unknown token, `unk_token`.
    pub unk: Option<String>,
    /// Padding token, `pad_token`.
    pub pad: Option<String>,
}

/// The text of the file `name` of `folder`, within [`CHAT_MAX_BYTES`], or `None` when nothing
/// is there. Only a regular file is read, or a link to one inside the folder
/// ([`folder_file`]).
pub(crate) fn read_optional(folder: &Path, name: &str) -> Result<Option<String>, ChatError> {
    let Some(path) = folder_file(folder, name)? else {
        return Ok(None);
    };
    let bytes = read_bounded(&path, CHAT_MAX_BYTES)?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|e| ChatError::Read {
            path: path.display().to_string(),
            reason: format!("not UTF-8 text ({e})"),
        })
}

/// The JSON object in the file `name` of `folder` (read as [`read_optional`] reads), or `None`
/// when nothing is there.
pub(crate) fn read_json_object(
    folder: &Path,
    name: &str,
) -> Result<Option<Map<String, Json>>, ChatError> {
    let Some(text) = read_optional(folder, name)? else {
        return Ok(None);
    };
    let path = folder.join(name);
    let path = path.as_path();
    let json: Json = serde_json::from_str(&text).map_err(|e| ChatError::Json {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    match json {
        Json::Object(map) => Ok(Some(map)),
        other => Err(wrong_type(path, "(top level)", "an object", &other)),
    }
}

/// [`ChatError::WrongType`] for `key` of the file at `path`, holding `found`.
pub(crate) fn wrong_type(
    path: &Path,
    key: &str,
    expected: &'static str,
    found: &Json,
) -> ChatError {
    let kind = match found {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "an object",
    };
    let mut shown = found.to_string();
    if shown.len() > 60 {
        let cut = (0..=60)
            .rev()
            .find(|&i| shown.is_char_boundary(i))
            .unwrap_or(0);
        shown.truncate(cut);
        shown.push_str("...");
    }
    ChatError::WrongType {
        path: path.display().to_string(),
        key: key.to_string(),
        expected,
        found: format!("{kind} ({shown})"),
    }
}

/// `bos_token`, `eos_token`, `unk_token` and `pad_token` of a `tokenizer_config.json`.
pub(super) fn special_tokens(
    path: &Path,
    config: &Map<String, Json>,
) -> Result<SpecialTokens, ChatError> {
    let token = |key: &str| -> Result<Option<String>, ChatError> {
        match config.get(key) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::String(text)) => Ok(Some(text.clone())),
            Some(added @ Json::Object(fields)) => match fields.get("content") {
                Some(Json::String(text)) => Ok(Some(text.clone())),
                _ => Err(wrong_type(path, key, TOKEN_TYPE, added)),
            },
            Some(other) => Err(wrong_type(path, key, TOKEN_TYPE, other)),
        }
    };
    Ok(SpecialTokens {
        bos: token("bos_token")?,
        eos: token("eos_token")?,
        unk: token("unk_token")?,
        pad: token("pad_token")?,
    })
}

/// What a special token in `tokenizer_config.json` must be.
const TOKEN_TYPE: &str = "a string or an object with a \"content\" string";

/// The template `chat_template` of a `tokenizer_config.json` gives: itself when it is a
/// string, the entry named `"default"` when it is a list of `{"name", "template"}`.
pub(super) fn default_template(path: &Path, template: &Json) -> Result<String, ChatError> {
    const LIST_TYPE: &str = "a string or a list of {\"name\": string, \"template\": string}";
    let entries = match template {
        Json::String(text) => return Ok(text.clone()),
        Json::Array(entries) => entries,
        other => return Err(wrong_type(path, "chat_template", LIST_TYPE, other)),
    };
    let mut names = Vec::with_capacity(entries.len());
    for entry in entries {
        match (entry.get("name"), entry.get("template")) {
            (Some(Json::String(name)), Some(Json::String(text))) => {
                if name == "default" {
                    return Ok(text.clone());
                }
                names.push(name.clone());
            }
            _ => return Err(wrong_type(path, "chat_template", LIST_TYPE, entry)),
        }
    }
    Err(ChatError::NoDefaultTemplate {
        path: path.display().to_string(),
        names,
    })
}
