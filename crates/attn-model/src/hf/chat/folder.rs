//! A chat template's files in a model folder: `chat_template.jinja` and `tokenizer_config.json`
//! (its special tokens, and in older folders the template itself), each a regular file read
//! within a bound.

use std::fs;
use std::io::Read;
use std::path::Path;

use serde_json::{Map, Value as Json};

use super::{CHAT_MAX_BYTES, ChatError, SpecialTokens};

/// The text of the regular file at `path`, refused when it is anything else (a FIFO, a
/// device, a folder: nothing that could block or never end) or longer than `max_bytes`.
pub(crate) fn read_bounded(path: &Path, max_bytes: u64) -> Result<String, ChatError> {
    let read_error = |reason: String| ChatError::Read {
        path: path.display().to_string(),
        reason,
    };
    let too_large = |size: u64| ChatError::TooLarge {
        path: path.display().to_string(),
        size,
        max: max_bytes,
    };
    let metadata = fs::metadata(path).map_err(|e| read_error(e.to_string()))?;
    if !metadata.is_file() {
        return Err(read_error(format!(
            "it is {}; only a regular file is read",
            describe(metadata.file_type())
        )));
    }
    if metadata.len() > max_bytes {
        return Err(too_large(metadata.len()));
    }
    let mut bytes = Vec::new();
    fs::File::open(path)
        .map_err(|e| read_error(e.to_string()))?
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| read_error(e.to_string()))?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| read_error(format!("not UTF-8 text ({e})")))
}

/// [`read_bounded`] with [`CHAT_MAX_BYTES`], or `None` when nothing is at `path`.
pub(crate) fn read_optional(path: &Path) -> Result<Option<String>, ChatError> {
    match fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => read_bounded(path, CHAT_MAX_BYTES).map(Some),
    }
}

/// The JSON object in the file at `path` (read as [`read_optional`] reads), or `None` when
/// nothing is there.
pub(crate) fn read_json_object(path: &Path) -> Result<Option<Map<String, Json>>, ChatError> {
    let Some(text) = read_optional(path)? else {
        return Ok(None);
    };
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

/// What a file that is not a regular file is, for an error.
pub(crate) fn describe(file_type: fs::FileType) -> &'static str {
    if file_type.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_char_device() || file_type.is_block_device() {
            return "a device";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    "not a regular file"
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh, empty folder under the system's temporary folder.
    fn scratch_folder(name: &str) -> std::path::PathBuf {
        let folder =
            std::env::temp_dir().join(format!("attn-model-chat-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&folder);
        fs::create_dir_all(&folder).expect("a scratch folder");
        folder
    }

    #[test]
    fn read_bounded_reads_up_to_the_bound() {
        let folder = scratch_folder("bounded");
        let path = folder.join("file.txt");
        fs::write(&path, "12345").expect("written");
        assert_eq!(read_bounded(&path, 5).expect("reads"), "12345");
        assert!(matches!(
            read_bounded(&path, 4),
            Err(ChatError::TooLarge {
                size: 5,
                max: 4,
                ..
            })
        ));
        let _ = fs::remove_dir_all(&folder);
    }
}
