//! Chat templates of Hugging Face model folders, rendered as transformers renders them.
//!
//! A chat model's tokenizer carries a Jinja2 program, its chat template, that turns a list of
//! messages into the one prompt string the model was trained on. transformers'
//! `apply_chat_template(messages, tokenize=False)` compiles it in an
//! `ImmutableSandboxedEnvironment` with `trim_blocks=True`, `lstrip_blocks=True` and the
//! `loopcontrols` extension (`{% break %}`, `{% continue %}`); adds the globals
//! `raise_exception(message)`, which fails the rendering with `message`, and
//! `strftime_now(format)`, the local time through `datetime.now().strftime`; replaces the
//! `tojson` filter with `json.dumps` (non-ASCII kept, optional `indent`, `separators`,
//! `sort_keys`); and renders with the variables `messages`, `tools=None`, `documents=None`,
//! `add_generation_prompt` and the tokenizer's special tokens (`bos_token`, `eos_token`, ...).
//!
//! [`ChatTemplate`] does the same with minijinja, with those settings and functions, and
//! minijinja-contrib's pycompat for the Python string, dict and list methods that templates
//! call (`.strip()`, `.split()`, `.startswith()`, `.items()`), as text-generation-inference
//! does. Where Python and minijinja print a value differently, the Python way is followed:
//! `None`, `True` and `False` print as Python prints them, and `tojson` writes what `json.dumps`
//! writes (`", "` and `": "` between items, floats as Python's `repr`). transformers'
//! `{% generation %}` blocks, which only mark the assistant's text for training masks, render
//! their body as they do there.
//!
//! [`ChatTemplate::from_folder`] reads the template as transformers' `from_pretrained` does:
//! `chat_template.jinja` when the folder has one, else `tokenizer_config.json`'s
//! `chat_template` (a string, or a list of named templates of which the one named `"default"`
//! is taken). Only regular files of at most [`CHAT_MAX_BYTES`] are read.
//!
//! A template is a program from the model folder, so a rendering is bounded: it runs at most
//! [`CHAT_RENDER_FUEL`] instructions (minijinja's fuel) and [`CHAT_RECURSION_LIMIT`] levels of
//! nested calls and blocks, and writes at most [`CHAT_PROMPT_MAX_BYTES`]; past any of these it
//! ends in [`ChatError::RenderLimit`] instead of looping, recursing or growing without end.
//! What it does not bound is the values a template builds on the way: minijinja has no limit on
//! them, and `{% set ns.s = ns.s ~ ns.s %}` in a loop doubles a string at every turn. A program
//! that renders templates it does not trust renders them in a process of their own under a
//! memory cap, as the `attn-train` program does (`attn_train::render`).

use std::fmt;
use std::fs;
use std::io::Read;
use std::path::Path;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Output, State, Value};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

/// The chat template file that transformers' `save_pretrained` writes.
pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";

/// The tokenizer settings file, with the special tokens and, in older folders, the template.
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";

/// The most bytes read from one file of a model folder by this module and by
/// [`GenerationDefaults`](super::generation_config::GenerationDefaults): 4 MiB.
pub const CHAT_MAX_BYTES: u64 = 4 << 20;

/// The most instructions one rendering runs (minijinja's fuel, one unit per instruction):
/// Qwen3's and Llama 3's templates spend a few hundred per message, so this allows
/// conversations of tens of thousands of messages while a loop of `range(100000)` nested in
/// another ends within a second or so.
pub const CHAT_RENDER_FUEL: u64 = 20_000_000;

/// The deepest nesting of calls, blocks and loops one rendering reaches (minijinja's recursion
/// counter; a macro call counts several levels): a macro that calls itself without end stops
/// here, well before the thread's stack would.
pub const CHAT_RECURSION_LIMIT: usize = 200;

/// The most operators (`+`, `~`, `|`, calls, `and`, `if`...`else`, ...) one tag may chain, and
/// the most `elif` branches one template may hold. minijinja builds each into a tree as deep as
/// it is long, and compiles and drops that tree by recursion: ten thousand overflow a thread's
/// 2 MiB stack, three thousand do not. Hugging Face's templates use a few dozen.
pub const CHAT_MAX_CHAIN: usize = 500;

/// The most bytes one rendering writes, and the most `tojson` writes for one value: 16 MiB,
/// a thousand times a long conversation's prompt.
pub const CHAT_PROMPT_MAX_BYTES: u64 = 16 << 20;

/// The name the template is compiled under; minijinja's errors name it.
const TEMPLATE_NAME: &str = "chat_template";

/// One message of a conversation, as transformers takes it: `{"role": ..., "content": ...}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who speaks: `"system"`, `"user"`, `"assistant"` (templates may know others).
    pub role: String,
    /// What is said.
    pub content: String,
}

impl ChatMessage {
    /// A message from `role` saying `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }
}

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

/// Why a chat template or a generation setting cannot be read or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// A file that cannot be read: missing where it is needed, not a regular file, not UTF-8.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// A file longer than the bound on what is read of it.
    #[error("{path} holds {size} bytes, more than the {max} bytes read of such a file")]
    TooLarge {
        /// The file.
        path: String,
        /// Its length in bytes (at least this many, when it grew while it was read).
        size: u64,
        /// The most bytes read.
        max: u64,
    },
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
    /// [`CHAT_RECURSION_LIMIT`] levels, or [`CHAT_PROMPT_MAX_BYTES`] of output.
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

/// A compiled chat template with the special tokens it renders with.
#[derive(Clone)]
pub struct ChatTemplate {
    source: String,
    special: SpecialTokens,
    env: Environment<'static>,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source", &self.source)
            .field("special", &self.special)
            .finish_non_exhaustive()
    }
}

/// The variables transformers renders a template with.
#[derive(Serialize)]
struct Inputs<'a> {
    messages: &'a [ChatMessage],
    /// `None`: no tools are offered.
    tools: (),
    /// `None`: no documents are given.
    documents: (),
    add_generation_prompt: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    bos_token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    eos_token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unk_token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pad_token: Option<&'a str>,
}

impl ChatTemplate {
    /// The chat template of a model folder, with the special tokens of its
    /// `tokenizer_config.json`; `None` when the folder has no template.
    ///
    /// The template is `chat_template.jinja` when the folder has one, else
    /// `tokenizer_config.json`'s `chat_template`: a string, or a list of
    /// `{"name": ..., "template": ...}` of which the one named `"default"` is taken. Each
    /// special token there is a string or an object with a `"content"` string (transformers'
    /// `AddedToken`).
    ///
    /// # Errors
    /// [`ChatError::Read`] when `folder` is not a folder or a file is not a regular file (a
    /// FIFO, a device, a folder) or cannot be read, [`ChatError::TooLarge`] for a file longer
    /// than [`CHAT_MAX_BYTES`], [`ChatError::Json`] and [`ChatError::WrongType`] for a
    /// `tokenizer_config.json` that does not parse or holds a value of the wrong type,
    /// [`ChatError::NoDefaultTemplate`] for a list with no `"default"`, and
    /// [`ChatError::Template`] for a template that does not compile.
    pub fn from_folder(folder: &Path) -> Result<Option<ChatTemplate>, ChatError> {
        if !folder.is_dir() {
            return Err(ChatError::Read {
                path: folder.display().to_string(),
                reason: "not a folder".into(),
            });
        }
        let config_path = folder.join(TOKENIZER_CONFIG_FILE);
        let config = read_json_object(&config_path)?;
        let special = match &config {
            Some(config) => special_tokens(&config_path, config)?,
            None => SpecialTokens::default(),
        };
        let source = match read_optional(&folder.join(CHAT_TEMPLATE_FILE))? {
            Some(source) => source,
            None => match config
                .as_ref()
                .and_then(|config| config.get("chat_template"))
            {
                None | Some(Json::Null) => return Ok(None),
                Some(template) => default_template(&config_path, template)?,
            },
        };
        ChatTemplate::new(source, special).map(Some)
    }

    /// Compiles `source` with transformers' settings.
    ///
    /// # Errors
    /// [`ChatError::Template`], with the line, when `source` does not compile or chains more
    /// than [`CHAT_MAX_CHAIN`] operators in one tag or `elif` branches in all.
    pub fn new(source: String, special: SpecialTokens) -> Result<ChatTemplate, ChatError> {
        check_chains(&source)?;
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(CHAT_RENDER_FUEL));
        env.set_recursion_limit(CHAT_RECURSION_LIMIT);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_formatter(python_formatter);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, open_generation_blocks(&source))
            .map_err(|err| template_error(&err))?;
        Ok(ChatTemplate {
            source,
            special,
            env,
        })
    }

    /// The prompt for `messages`, as transformers'
    /// `apply_chat_template(messages, tokenize=False, add_generation_prompt=...)` renders it;
    /// `add_generation_prompt` asks the template to open the assistant's turn.
    ///
    /// # Errors
    /// [`ChatError::Raised`] when the template calls `raise_exception`,
    /// [`ChatError::RenderLimit`] when it runs past [`CHAT_RENDER_FUEL`] instructions, nests
    /// deeper than [`CHAT_RECURSION_LIMIT`] or writes more than [`CHAT_PROMPT_MAX_BYTES`],
    /// [`ChatError::Template`] for any other failure (an undefined attribute, a type error).
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let inputs = Inputs {
            messages,
            tools: (),
            documents: (),
            add_generation_prompt,
            bos_token: self.special.bos.as_deref(),
            eos_token: self.special.eos.as_deref(),
            unk_token: self.special.unk.as_deref(),
            pad_token: self.special.pad.as_deref(),
        };
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|err| template_error(&err))?;
        let mut prompt = BoundedOutput::default();
        match template.render_captured_to(inputs, &mut prompt) {
            Ok(_) => String::from_utf8(prompt.bytes).map_err(|e| ChatError::Template {
                line: None,
                reason: format!("the rendering is not UTF-8 ({e})"),
            }),
            Err(_) if prompt.overflowed => Err(ChatError::RenderLimit {
                line: None,
                what: "wrote more bytes than",
                limit: CHAT_PROMPT_MAX_BYTES,
            }),
            Err(err) => Err(render_error(&err)),
        }
    }

    /// The template's text, as it was given or read.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The special tokens the template renders with.
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special
    }
}

/// The rendering's output, refusing to grow past [`CHAT_PROMPT_MAX_BYTES`].
#[derive(Default)]
struct BoundedOutput {
    bytes: Vec<u8>,
    overflowed: bool,
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() as u64 + buf.len() as u64 > CHAT_PROMPT_MAX_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other(format!(
                "the prompt would pass {CHAT_PROMPT_MAX_BYTES} bytes"
            )));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

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
fn special_tokens(path: &Path, config: &Map<String, Json>) -> Result<SpecialTokens, ChatError> {
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
fn default_template(path: &Path, template: &Json) -> Result<String, ChatError> {
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

/// Refuses a template with a tag that chains more than [`CHAT_MAX_CHAIN`] operators, or with
/// more than [`CHAT_MAX_CHAIN`] `elif` branches, before minijinja parses it into a tree too
/// deep for the stack. Tags are `{{ ... }}` and `{% ... %}`; comments and the insides of string
/// literals are skipped.
fn check_chains(source: &str) -> Result<(), ChatError> {
    let bytes = source.as_bytes();
    let too_deep = |at: usize, reason: String| ChatError::Template {
        line: Some(1 + bytes[..at].iter().filter(|&&b| b == b'\n').count()),
        reason,
    };
    let mut elifs = 0;
    let mut at = 0;
    while let Some(open) = memchr(b'{', bytes, at) {
        let close: &[u8] = match bytes.get(open + 1) {
            Some(b'{') => b"}}",
            Some(b'%') => b"%}",
            Some(b'#') => {
                at = find(bytes, open + 2, b"#}").map_or(bytes.len(), |end| end + 2);
                continue;
            }
            _ => {
                at = open + 1;
                continue;
            }
        };
        let mut operators = 0;
        let mut first_word = None;
        let mut i = open + 2;
        while i < bytes.len() && !bytes[i..].starts_with(close) {
            match bytes[i] {
                quote @ (b'\'' | b'"') => {
                    i += 1;
                    while i < bytes.len() && bytes[i] != quote {
                        i += if bytes[i] == b'\\' { 2 } else { 1 };
                    }
                }
                b'+' | b'-' | b'*' | b'/' | b'%' | b'~' | b'|' | b'(' | b'[' | b'.' | b'<'
                | b'>' | b'=' | b'!' => operators += 1,
                b if b.is_ascii_alphabetic() || b == b'_' => {
                    let start = i;
                    while i + 1 < bytes.len()
                        && (bytes[i + 1].is_ascii_alphanumeric() || bytes[i + 1] == b'_')
                    {
                        i += 1;
                    }
                    let word = &bytes[start..=i];
                    first_word.get_or_insert(word);
                    if matches!(
                        word,
                        b"and" | b"or" | b"not" | b"in" | b"is" | b"if" | b"else"
                    ) {
                        operators += 1;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        if operators > CHAT_MAX_CHAIN {
            return Err(too_deep(
                open,
                format!(
                    "a tag chains {operators} operators, more than the {CHAT_MAX_CHAIN} this \
                     crate compiles in one tag"
                ),
            ));
        }
        if close == b"%}" && first_word == Some(b"elif") {
            elifs += 1;
            if elifs > CHAT_MAX_CHAIN {
                return Err(too_deep(
                    open,
                    format!(
                        "more than {CHAT_MAX_CHAIN} elif branches, the most this crate \
                         compiles in one template"
                    ),
                ));
            }
        }
        at = i + 2;
    }
    Ok(())
}

/// The first `byte` of `bytes` at or after `from`.
fn memchr(byte: u8, bytes: &[u8], from: usize) -> Option<usize> {
    bytes
        .get(from..)?
        .iter()
        .position(|&b| b == byte)
        .map(|i| from + i)
}

/// The first `needle` in `bytes` at or after `from`.
fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| from + i)
}

/// Rewrites transformers' `{% generation %}` ... `{% endgeneration %}` tags, which mark the
/// assistant's text for training masks and otherwise render their body, as `{% if true %}`
/// ... `{% endif %}`: the same output, whitespace control included, and the same lines.
fn open_generation_blocks(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        // The tag runs from `{%` to the first `%}` after it, both included.
        let Some(length) = rest[start + 2..].find("%}").map(|end| end + 4) else {
            break;
        };
        let tag = &rest[start..start + length];
        let inner = tag[2..length - 2]
            .trim_start_matches(['-', '+'])
            .trim_end_matches(['-', '+'])
            .trim();
        out.push_str(&rest[..start]);
        match inner {
            "generation" => out.push_str(&tag.replacen(inner, "if true", 1)),
            "endgeneration" => out.push_str(&tag.replacen(inner, "endif", 1)),
            _ => out.push_str(tag),
        }
        rest = &rest[start + length..];
    }
    out.push_str(rest);
    out
}

/// The error `raise_exception` fails a rendering with, found again in
/// [`render_error`] to tell it from the engine's own errors.
#[derive(Debug)]
struct RaisedByTemplate(String);

impl fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByTemplate {}

/// transformers' `raise_exception(message)`: fails the rendering with `message`.
fn raise_exception(message: Value) -> Result<Value, Error> {
    let message = message.to_string();
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(RaisedByTemplate(message)))
}

/// transformers' `strftime_now(format)`: the local time through Python's `strftime`
/// (chrono's specifiers are Python's on Linux, `%-d` included).
fn strftime_now(format: &str) -> Result<String, Error> {
    use std::fmt::Write;
    let mut text = String::new();
    write!(text, "{}", chrono::Local::now().format(format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: {format:?} is not a valid time format"),
        )
    })?;
    Ok(text)
}

/// Prints values as Jinja2 prints Python's: `None`, `True` and `False` (minijinja's own
/// formatter writes `none`, `true`, `false`); everything else as minijinja does.
fn python_formatter(out: &mut Output, state: &State, value: &Value) -> Result<(), Error> {
    let text = match value.kind() {
        ValueKind::None => "None",
        ValueKind::Bool if value.is_true() => "True",
        ValueKind::Bool => "False",
        _ => return minijinja::escape_formatter(out, state, value),
    };
    fmt::Write::write_str(out, text).map_err(Error::from)
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`: Python's `json.dumps` with those arguments.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let indent: Option<Value> = kwargs.get("indent")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(indent) if indent.is_none() => None,
        Some(indent) => Some(match indent.as_str() {
            Some(text) => text.to_string(),
            None => {
                let width = i64::try_from(indent)?;
                if width > TOJSON_MAX_INDENT {
                    return Err(invalid(&format!(
                        "tojson: indent {width} is wider than the {TOJSON_MAX_INDENT} spaces \
                         this filter writes"
                    )));
                }
                " ".repeat(usize::try_from(width.max(0)).unwrap_or(0))
            }
        }),
    };
    let (item_separator, key_separator) = match separators {
        Some(pair) if !pair.is_none() => {
            let parts: Vec<String> = pair
                .try_iter()?
                .map(|part| part.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| invalid("tojson: separators must be two strings"))?;
            match <[String; 2]>::try_from(parts) {
                Ok([item, key]) => (item, key),
                Err(_) => return Err(invalid("tojson: separators must be two strings")),
            }
        }
        _ if indent.is_some() => (",".to_string(), ": ".to_string()),
        _ => (", ".to_string(), ": ".to_string()),
    };
    let style = JsonStyle {
        ensure_ascii: ensure_ascii.unwrap_or(false),
        indent,
        item_separator,
        key_separator,
        sort_keys: sort_keys.unwrap_or(false),
    };
    let mut out = String::new();
    style.write(value, 0, &mut out)?;
    Ok(Value::from(out))
}

/// The widest `indent` `tojson` takes as a number of spaces.
const TOJSON_MAX_INDENT: i64 = 1024;

/// Refuses a `tojson` output that has grown past [`CHAT_PROMPT_MAX_BYTES`] (a long indent or
/// separator repeated for every item and level).
fn check_tojson_length(out: &str) -> Result<(), Error> {
    if out.len() as u64 > CHAT_PROMPT_MAX_BYTES {
        return Err(invalid(&format!(
            "tojson: the JSON text passed {CHAT_PROMPT_MAX_BYTES} bytes"
        )));
    }
    Ok(())
}

fn invalid(message: &str) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.to_string())
}

/// The arguments of Python's `json.dumps` that transformers' `tojson` passes on.
struct JsonStyle {
    ensure_ascii: bool,
    indent: Option<String>,
    item_separator: String,
    key_separator: String,
    sort_keys: bool,
}

impl JsonStyle {
    /// Writes `value`, `level` containers deep, as `json.dumps` writes it.
    fn write(&self, value: &Value, level: usize, out: &mut String) -> Result<(), Error> {
        match value.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => out.push_str(&python_number(value)?),
            ValueKind::String => self.write_string(value.as_str().unwrap_or_default(), out),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.write_container(('[', ']'), items.len(), level, out, |i, out| {
                    self.write(&items[i], level + 1, out)
                })?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = value.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort();
                }
                self.write_container(('{', '}'), keys.len(), level, out, |i, out| {
                    self.write_string(&python_key(&keys[i])?, out);
                    out.push_str(&self.key_separator);
                    self.write(&value.get_item(&keys[i])?, level + 1, out)
                })?;
            }
            kind => {
                return Err(invalid(&format!(
                    "tojson: Object of type {kind} is not JSON serializable"
                )));
            }
        }
        Ok(())
    }

    /// `open`, the `count` items `write_item` writes with separators and indentation,
    /// `close`.
    fn write_container(
        &self,
        (open, close): (char, char),
        count: usize,
        level: usize,
        out: &mut String,
        mut write_item: impl FnMut(usize, &mut String) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        if count > 0 {
            for i in 0..count {
                if i > 0 {
                    out.push_str(&self.item_separator);
                }
                self.newline(level + 1, out)?;
                write_item(i, out)?;
                check_tojson_length(out)?;
            }
            self.newline(level, out)?;
        }
        out.push(close);
        Ok(())
    }

    /// With an indent, a new line indented `level` times.
    fn newline(&self, level: usize, out: &mut String) -> Result<(), Error> {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(indent);
                check_tojson_length(out)?;
            }
        }
        Ok(())
    }

    /// A JSON string as Python escapes it: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, other
    /// control characters as `\u00xx`, and with `ensure_ascii` everything outside ASCII's
    /// printable range as `\uxxxx` (UTF-16 surrogate pairs above U+FFFF).
    fn write_string(&self, text: &str, out: &mut String) {
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if c < ' ' || (self.ensure_ascii && !(' '..='~').contains(&c)) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A map key as `json.dumps` turns it into a string: strings as they are, numbers as
/// Python prints them, `true`, `false`, `null`.
fn python_key(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_string()),
        ValueKind::Number => python_number(key),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.into()),
        ValueKind::None => Ok("null".into()),
        kind => Err(invalid(&format!(
            "tojson: keys must be str, int, float, bool or None, not {kind}"
        ))),
    }
}

/// A number as `json.dumps` writes it: integers in full, floats as Python's `repr`.
fn python_number(value: &Value) -> Result<String, Error> {
    if value.is_integer() {
        return Ok(value.to_string());
    }
    Ok(python_float(f64::try_from(value.clone())?))
}

/// Python's `repr` of a float (as `json.dumps` writes it): the shortest digits that read
/// back to `x`, in positional notation from `1e-4` to below `1e16` (`0.0001`, `2.0`), else
/// in scientific notation with a signed exponent of at least two digits (`1e-05`, `1e+16`);
/// `NaN`, `Infinity` and `-Infinity` as `json.dumps` writes them.
fn python_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the same shortest digits: `-1.2345e-7`.
    let scientific = format!("{:e}", x.abs());
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` always writes an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` writes an integer exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if x < 0.0 { "-" } else { "" };
    if !(-4..16).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{sign}{first}{fraction}e{exponent_sign}{:02}",
            exponent.abs()
        );
    }
    // The decimal point falls after `point` digits (before them all when it is <= 0).
    let point = exponent + 1;
    let positional = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else {
        let point = point as usize;
        if point >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point - digits.len()))
        } else {
            format!("{}.{}", &digits[..point], &digits[point..])
        }
    };
    format!("{sign}{positional}")
}

/// [`ChatError::Template`] for a minijinja error, with its line and its causes.
fn template_error(err: &Error) -> ChatError {
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
fn render_error(err: &Error) -> ChatError {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// transformers' own rendering of a Llama-architecture folder's template
    /// (`reference.json`'s `chat`), next to the folder's `chat_template.jinja`,
    /// `tokenizer_config.json` and `generation_config.json`.
    const LLAMA_TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/hf/llama_tiny");

    fn chat(pairs: &[(&str, &str)]) -> Vec<ChatMessage> {
        pairs
            .iter()
            .map(|(role, content)| ChatMessage::new(*role, *content))
            .collect()
    }

    fn tokens(bos: &str, eos: &str) -> SpecialTokens {
        SpecialTokens {
            bos: Some(bos.into()),
            eos: Some(eos.into()),
            ..SpecialTokens::default()
        }
    }

    /// A fresh, empty folder under the system's temporary folder.
    fn scratch_folder(name: &str) -> PathBuf {
        let folder =
            std::env::temp_dir().join(format!("attn-model-chat-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&folder);
        fs::create_dir_all(&folder).expect("a scratch folder");
        folder
    }

    /// `ChatTemplate::from_folder` on another thread, failing the test if it does not return
    /// within 20 s (a FIFO read would block forever).
    fn from_folder_within_time(folder: PathBuf) -> Result<Option<ChatTemplate>, ChatError> {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(ChatTemplate::from_folder(&folder));
        });
        receiver
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("from_folder blocked")
    }

    #[test]
    fn llama_tiny_renders_as_transformers_does() {
        let reference: Json = serde_json::from_str(
            &fs::read_to_string(Path::new(LLAMA_TINY).join("reference.json"))
                .expect("reference.json"),
        )
        .expect("reference.json parses");
        let case = &reference["chat"];
        let messages: Vec<ChatMessage> =
            serde_json::from_value(case["messages"].clone()).expect("the reference messages");
        let add_generation_prompt = case["add_generation_prompt"].as_bool().expect("a bool");
        let expected = case["rendered"].as_str().expect("the reference rendering");

        let template = ChatTemplate::from_folder(Path::new(LLAMA_TINY))
            .expect("the folder reads")
            .expect("the folder has a chat template");
        let rendered = template
            .render(&messages, add_generation_prompt)
            .expect("the template renders");
        assert_eq!(rendered, expected);
        assert_eq!(
            template.source(),
            fs::read_to_string(Path::new(LLAMA_TINY).join(CHAT_TEMPLATE_FILE))
                .expect("chat_template.jinja")
        );
        let special = template.special_tokens();
        assert_eq!(special.bos.as_deref(), Some("<s>"));
        assert_eq!(special.eos.as_deref(), Some("<|im_end|>"));
        assert_eq!(special.unk.as_deref(), Some("<unk>"));
        assert_eq!(special.pad.as_deref(), Some("<unk>"));
    }

    // Cases ported from text-generation-inference (Apache-2.0),
    // `router/src/infer/chat_template.rs`, commit db931fcf42da018a3657580c64bf2720f167f9ab:
    // templates, messages, tokens and expected strings as its authors wrote them. Its tests
    // strip each line of a template and join the lines before compiling
    // (`.lines().map(|line| line.trim()).collect::<Vec<&str>>().join("")`); the cases marked
    // `trimmed` do the same here.

    fn tgi_trim(source: &str) -> String {
        source.lines().map(str::trim).collect()
    }

    fn tgi_render(
        source: &str,
        trimmed: bool,
        bos: &str,
        eos: &str,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let source = if trimmed {
            tgi_trim(source)
        } else {
            source.to_string()
        };
        ChatTemplate::new(source, tokens(bos, eos))?.render(messages, add_generation_prompt)
    }

    fn tgi_four_turns() -> Vec<ChatMessage> {
        chat(&[
            ("user", "Hi!"),
            ("assistant", "Hello how can I help?"),
            ("user", "What is Deep Learning?"),
            ("assistant", "magic!"),
        ])
    }

    #[test]
    fn tgi_chat_template() {
        let source = r#"
        {% for message in messages %}
            {% if message['role'] == 'system' %}
                {% if message['content']%}
                    {{'### System:\n' + message['content']+'\n\n'}}
                {% endif %}
            {% elif message['role'] == 'user' %}
                {{'### User:\n' + message['content']+'\n\n'}}
            {% elif message['role'] == 'assistant' %}
                {{'### Assistant:\n'  + message['content']}}
            {% endif %}
            {% if loop.last and add_generation_prompt %}
                {{ '### Assistant:\n' }}
            {% endif %}
        {% endfor %}"#;
        let result = tgi_render(source, true, "[BOS]", "[EOS]", &tgi_four_turns(), true);
        assert_eq!(
            result.expect("renders"),
            "### User:\nHi!\n\n### Assistant:\nHello how can I help?### User:\nWhat is Deep Learning?\n\n### Assistant:\nmagic!### Assistant:\n"
        );
    }

    /// TGI's template, but not its expected string: TGI expects the loop to stop at the second
    /// user message, which relied on an old minijinja letting `{% set %}` inside a loop leak out
    /// of the iteration. Jinja2 scopes it to the iteration, so `user_count` is 1 each time and
    /// the loop never breaks; the expected string is jinja2's rendering in transformers'
    /// environment (see the cases below), which minijinja 2.24 agrees with.
    /// [`loop_controls_break_and_continue`] is a case that does break.
    #[test]
    fn tgi_chat_template_loop_controls() {
        let source = r#"
        {% set user_count = 0 %}
        {% for message in messages %}
            {% if message['role'] == 'user' %}
                {{'### User:\n' + message['content']+'\n\n'}}
                {% set user_count = user_count + 1 %}
                {% if user_count >= 2 %}
                    {% break %}
                {% endif %}
            {% elif message['role'] == 'assistant' %}
                {{'### Assistant:\n'  + message['content']}}
            {% endif %}
        {% endfor %}
        {% if add_generation_prompt %}
            {{ '### Assistant:\n' }}
        {% endif %}"#;
        let result = tgi_render(source, true, "[BOS]", "[EOS]", &tgi_four_turns(), true);
        assert_eq!(
            result.expect("renders"),
            "### User:\nHi!\n\n### Assistant:\nHello how can I help?### User:\nWhat is Deep Learning?\n\n### Assistant:\nmagic!### Assistant:\n"
        );
    }

    const TGI_RAISE_TEMPLATE: &str = r#"
        {{ bos_token }}
        {% for message in messages %}
        {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
        {% endif %}
        {% if message['role'] == 'user' %}
        {{ '[INST] ' + message['content'] + ' [/INST]' }}
        {% elif message['role'] == 'assistant' %}
        {{ message['content'] + eos_token}}
        {% else %}
        {{ raise_exception('Only user and assistant roles are supported!') }}
        {% endif %}
        {% endfor %}"#;

    #[test]
    fn tgi_chat_template_invalid_with_raise() {
        let messages = chat(&[
            ("user", "Hi!"),
            ("user", "Hi again!"),
            ("assistant", "Hello how can I help?"),
            ("user", "What is Deep Learning?"),
            ("assistant", "magic!"),
        ]);
        let result = tgi_render(TGI_RAISE_TEMPLATE, true, "[BOS]", "[EOS]", &messages, true);
        match result {
            Err(ChatError::Raised { message }) => assert_eq!(
                message,
                "Conversation roles must alternate user/assistant/user/assistant/..."
            ),
            other => panic!("expected ChatError::Raised, got {other:?}"),
        }
    }

    #[test]
    fn tgi_chat_template_valid_with_raise() {
        let result = tgi_render(
            TGI_RAISE_TEMPLATE,
            true,
            "[BOS]",
            "[EOS]",
            &tgi_four_turns(),
            true,
        );
        assert_eq!(
            result.expect("renders"),
            "[BOS][INST] Hi! [/INST]Hello how can I help?[EOS][INST] What is Deep Learning? [/INST]magic![EOS]"
        );
    }

    #[test]
    fn tgi_chat_template_valid_with_strftime_now() {
        let source = r#"
        {% set today = strftime_now("%Y-%m-%d") %}
        {% set default_system_message = "The current date is " + today + "." %}
        {{ bos_token }}
        {% if messages[0]['role'] == 'system' %}
            { set system_message = messages[0]['content'] %}
            {%- set loop_messages = messages[1:] %}
        {% else %}
            {%- set system_message = default_system_message %}
            {%- set loop_messages = messages %}
        {% endif %}
        {{ '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}
        {% for message in loop_messages %}
            {% if message['role'] == 'user' %}
                {{ '[INST]' + message['content'] + '[/INST]' }}
            {% elif message['role'] == 'assistant' %}
                {{ message['content'] + eos_token }}
            {% else %}
                {{ raise_exception('Only user and assistant roles are supported!') }}
            {% endif %}
        {% endfor %}
        "#;
        let expected = |date: String| {
            format!(
                "[BOS][SYSTEM_PROMPT]The current date is {}.[/SYSTEM_PROMPT][INST]Hi![/INST]Hello how can I help?[EOS][INST]What is Deep Learning?[/INST]magic![EOS]",
                date
            )
        };
        // The date is read before and after rendering, in case midnight passes between.
        let before = chrono::Local::now().format("%Y-%m-%d").to_string();
        let result =
            tgi_render(source, true, "[BOS]", "[EOS]", &tgi_four_turns(), true).expect("renders");
        let after = chrono::Local::now().format("%Y-%m-%d").to_string();
        assert!(
            result == expected(before) || result == expected(after),
            "{result}"
        );
    }

    #[test]
    fn tgi_chat_template_valid_with_add_generation_prompt() {
        let source = r#"
        {% for message in messages %}
        {{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}
        {% endfor %}
        {% if add_generation_prompt %}
            {{ '<|im_start|>assistant\n' }}
        {% endif %}"#;
        let result = tgi_render(source, true, "[BOS]", "[EOS]", &tgi_four_turns(), true);
        assert_eq!(
            result.expect("renders"),
            "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello how can I help?<|im_end|>\n<|im_start|>user\nWhat is Deep Learning?<|im_end|>\n<|im_start|>assistant\nmagic!<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    struct TgiCase {
        name: &'static str,
        chat_template: &'static str,
        messages: Vec<ChatMessage>,
        add_generation_prompt: bool,
        bos_token: &'static str,
        eos_token: &'static str,
        target: &'static str,
        /// TGI strips and joins the lines of its "custom" templates, not of its "default" ones.
        trimmed: bool,
    }

    fn example_chat() -> Vec<ChatMessage> {
        chat(&[
            ("user", "Hello, how are you?"),
            ("assistant", "I'm doing great. How can I help you today?"),
            ("user", "I'd like to show off how chat templating works!"),
        ])
    }

    fn example_chat_with_system() -> Vec<ChatMessage> {
        let mut messages = chat(&[(
            "system",
            "You are a friendly chatbot who always responds in the style of a pirate",
        )]);
        messages.extend(example_chat());
        messages
    }

    fn zephyr_question() -> Vec<ChatMessage> {
        chat(&[
            (
                "system",
                "You are a friendly chatbot who always responds in the style of a pirate",
            ),
            (
                "user",
                "How many helicopters can a human eat in one sitting?",
            ),
        ])
    }

    /// TGI's `test_many_chat_templates`: its default and custom templates of many models.
    #[test]
    fn tgi_many_chat_templates() {
        let cases = vec![
            TgiCase {
                name: "_base",
                chat_template: "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "",
                eos_token: "",
                target: "<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user\nI'd like to show off how chat templating works!<|im_end|>\n",
                trimmed: false,
            },
            TgiCase {
                name: "blenderbot",
                chat_template: "{% for message in messages %}{% if message['role'] == 'user' %}{{ ' ' }}{% endif %}{{ message['content'] }}{% if not loop.last %}{{ '  ' }}{% endif %}{% endfor %}{{ eos_token }}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "",
                eos_token: "</s>",
                target: " Hello, how are you?  I'm doing great. How can I help you today?   I'd like to show off how chat templating works!</s>",
                trimmed: false,
            },
            TgiCase {
                name: "blenderbot_small",
                chat_template: "{% for message in messages %}{% if message['role'] == 'user' %}{{ ' ' }}{% endif %}{{ message['content'] }}{% if not loop.last %}{{ '  ' }}{% endif %}{% endfor %}{{ eos_token }}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "",
                eos_token: "</s>",
                target: " Hello, how are you?  I'm doing great. How can I help you today?   I'd like to show off how chat templating works!</s>",
                trimmed: false,
            },
            TgiCase {
                name: "bloom",
                chat_template: "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "",
                eos_token: "</s>",
                target: "Hello, how are you?</s>I'm doing great. How can I help you today?</s>I'd like to show off how chat templating works!</s>",
                trimmed: false,
            },
            TgiCase {
                name: "gpt_neox",
                chat_template: "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "",
                eos_token: "<|endoftext|>",
                target: "Hello, how are you?<|endoftext|>I'm doing great. How can I help you today?<|endoftext|>I'd like to show off how chat templating works!<|endoftext|>",
                trimmed: false,
            },
            TgiCase {
                name: "gpt2",
                chat_template: "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "",
                eos_token: "<|endoftext|>",
                target: "Hello, how are you?<|endoftext|>I'm doing great. How can I help you today?<|endoftext|>I'd like to show off how chat templating works!<|endoftext|>",
                trimmed: false,
            },
            TgiCase {
                name: "llama",
                chat_template: "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% elif USE_DEFAULT_PROMPT == true and not '<<SYS>>' in messages[0]['content'] %}{% set loop_messages = messages %}{% set system_message = 'DEFAULT_SYSTEM_MESSAGE' %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token +'[INST] ' + content | trim + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\\n' + content | trim + '\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ ' ' + content | trim + ' ' + eos_token }}{% endif %}{% endfor %}",
                messages: example_chat_with_system(),
                add_generation_prompt: true,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "<s>[INST] <<SYS>>\nYou are a friendly chatbot who always responds in the style of a pirate\n<</SYS>>\n\nHello, how are you? [/INST] I'm doing great. How can I help you today? </s><s>[INST] I'd like to show off how chat templating works! [/INST]",
                trimmed: false,
            },
            TgiCase {
                name: "whisper",
                chat_template: "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}",
                messages: example_chat(),
                add_generation_prompt: true,
                bos_token: "",
                eos_token: "<|endoftext|>",
                target: "Hello, how are you?<|endoftext|>I'm doing great. How can I help you today?<|endoftext|>I'd like to show off how chat templating works!<|endoftext|>",
                trimmed: false,
            },
            TgiCase {
                name: "HuggingFaceH4/zephyr-7b-beta (add_generation_prompt=false)",
                chat_template: "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
                messages: example_chat_with_system(),
                add_generation_prompt: false,
                bos_token: "",
                eos_token: "</s>",
                target: "<|system|>\nYou are a friendly chatbot who always responds in the style of a pirate</s><|user|>\nHello, how are you?</s><|assistant|>\nI'm doing great. How can I help you today?</s><|user|>\nI'd like to show off how chat templating works!</s>",
                trimmed: true,
            },
            TgiCase {
                name: "HuggingFaceH4/zephyr-7b-beta (add_generation_prompt=true)",
                chat_template: "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}",
                messages: zephyr_question(),
                add_generation_prompt: true,
                bos_token: "",
                eos_token: "</s>",
                target: "<|system|>\nYou are a friendly chatbot who always responds in the style of a pirate</s><|user|>\nHow many helicopters can a human eat in one sitting?</s><|assistant|>",
                trimmed: true,
            },
            TgiCase {
                name: "HuggingFaceH4/zephyr-7b-gemma-v0.1",
                chat_template: "{% if messages[0]['role'] == 'user' or messages[0]['role'] == 'system' %}{{ bos_token }}{% endif %}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% elif messages[-1]['role'] == 'assistant' %}{{ eos_token }}{% endif %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<bos>",
                eos_token: "<eos>",
                target: "<bos><|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user\nI'd like to show off how chat templating works!<|im_end|>\n",
                trimmed: true,
            },
            TgiCase {
                name: "mistralai/Mistral-7B-Instruct-v0.1",
                chat_template: "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "<s>[INST] Hello, how are you? [/INST]I'm doing great. How can I help you today?</s> [INST] I'd like to show off how chat templating works! [/INST]",
                trimmed: true,
            },
            TgiCase {
                name: "mistralai/Mixtral-8x7B-Instruct-v0.1",
                chat_template: "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "<s>[INST] Hello, how are you? [/INST]I'm doing great. How can I help you today?</s>[INST] I'd like to show off how chat templating works! [/INST]",
                trimmed: true,
            },
            TgiCase {
                name: "cognitivecomputations/dolphin-2.5-mixtral-8x7b",
                chat_template: "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user\nI'd like to show off how chat templating works!<|im_end|>\n",
                trimmed: true,
            },
            TgiCase {
                name: "openchat/openchat-3.5-0106",
                chat_template: "{{ bos_token }}{% for message in messages %}{{ 'GPT4 Correct ' + (message['role'] | title) + ': ' + message['content'] + '<|end_of_turn|>'}}{% endfor %}{% if add_generation_prompt %}{{ 'GPT4 Correct Assistant:' }}{% endif %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "<s>GPT4 Correct User: Hello, how are you?<|end_of_turn|>GPT4 Correct Assistant: I'm doing great. How can I help you today?<|end_of_turn|>GPT4 Correct User: I'd like to show off how chat templating works!<|end_of_turn|>",
                trimmed: true,
            },
            TgiCase {
                name: "upstage/SOLAR-10.7B-Instruct-v1.0",
                chat_template: "{% for message in messages %}{{ message.content }}{{ eos_token }}{% endfor %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "Hello, how are you?</s>I'm doing great. How can I help you today?</s>I'd like to show off how chat templating works!</s>",
                trimmed: true,
            },
            TgiCase {
                name: "codellama/CodeLlama-70b-Instruct-hf",
                chat_template: "{% if messages[0]['role'] == 'system' %}{% set user_index = 1 %}{% else %}{% set user_index = 0 %}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != ((loop.index0 + user_index) % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 %}{{ '<s>' }}{% endif %}{% set content = 'Source: ' + message['role'] + '\\n\\n ' + message['content'] | trim %}{{ content + ' <step> ' }}{% endfor %}{{'Source: assistant\\nDestination: user\\n\\n '}}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "<s>Source: user\n\n Hello, how are you? <step> Source: assistant\n\n I'm doing great. How can I help you today? <step> Source: user\n\n I'd like to show off how chat templating works! <step> Source: assistant\nDestination: user\n\n ",
                trimmed: true,
            },
            TgiCase {
                name: "Deci/DeciLM-7B-instruct",
                chat_template: "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '### User:\\n' + message['content'] }}\n{% elif message['role'] == 'system' %}\n{{ '### System:\\n' + message['content'] }}\n{% elif message['role'] == 'assistant' %}\n{{ '### Assistant:\\n'  + message['content'] }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '### Assistant:' }}\n{% endif %}\n{% endfor %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "### User:\nHello, how are you?### Assistant:\nI'm doing great. How can I help you today?### User:\nI'd like to show off how chat templating works!",
                trimmed: true,
            },
            TgiCase {
                name: "Qwen/Qwen1.5-72B-Chat",
                chat_template: "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']}}{% if (loop.last and add_generation_prompt) or not loop.last %}{{ '<|im_end|>' + '\\n'}}{% endif %}{% endfor %}{% if add_generation_prompt and messages[-1]['role'] != 'assistant' %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user\nI'd like to show off how chat templating works!",
                trimmed: true,
            },
            TgiCase {
                name: "deepseek-ai/deepseek-llm-7b-chat",
                chat_template: "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}{{ message['content'] + '\\n\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<｜begin▁of▁sentence｜>",
                eos_token: "<｜end▁of▁sentence｜>",
                target: "<｜begin▁of▁sentence｜>User: Hello, how are you?\n\nAssistant: I'm doing great. How can I help you today?<｜end▁of▁sentence｜>User: I'd like to show off how chat templating works!\n\n",
                trimmed: true,
            },
            TgiCase {
                name: "h2oai/h2o-danube-1.8b-chat",
                chat_template: "{% for message in messages %}{% if message['role'] == 'user' %}{{ '<|prompt|>' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}{{ '<|system|>' + message['content'] + eos_token }}{% elif message['role'] == 'assistant' %}{{ '<|answer|>'  + message['content'] + eos_token }}{% endif %}{% if loop.last and add_generation_prompt %}{{ '<|answer|>' }}{% endif %}{% endfor %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "<|prompt|>Hello, how are you?</s><|answer|>I'm doing great. How can I help you today?</s><|prompt|>I'd like to show off how chat templating works!</s>",
                trimmed: true,
            },
            TgiCase {
                name: "internlm/internlm2-chat-7b",
                chat_template: "{% if messages[0]['role'] == 'user' or messages[0]['role'] == 'system' %}{{ bos_token }}{% endif %}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% elif messages[-1]['role'] == 'assistant' %}{{ eos_token }}{% endif %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "<s><|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user\nI'd like to show off how chat templating works!<|im_end|>\n",
                trimmed: true,
            },
            TgiCase {
                name: "TheBloke/deepseek-coder-33B-instruct-AWQ",
                chat_template: "{%- set found_item = false -%}\n{%- for message in messages -%}\n    {%- if message['role'] == 'system' -%}\n        {%- set found_item = true -%}\n    {%- endif -%}\n{%- endfor -%}\n{%- if not found_item -%}\n{{'You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer.\\n'}}\n{%- endif %}\n{%- for message in messages %}\n    {%- if message['role'] == 'system' %}\n{{ message['content'] }}\n    {%- else %}\n        {%- if message['role'] == 'user' %}\n{{'### Instruction:\\n' + message['content'] + '\\n'}}\n        {%- else %}\n{{'### Response:\\n' + message['content'] + '\\n<|EOT|>\\n'}}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{{'### Response:\\n'}}\n",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<｜begin▁of▁sentence｜>",
                eos_token: "<|EOT|>",
                target: "You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer.\n### Instruction:\nHello, how are you?\n### Response:\nI'm doing great. How can I help you today?\n<|EOT|>\n### Instruction:\nI'd like to show off how chat templating works!\n### Response:\n",
                trimmed: true,
            },
            TgiCase {
                name: "ericzzz/falcon-rw-1b-chat",
                chat_template: "{% for message in messages %}{% if loop.index > 1 and loop.previtem['role'] != 'assistant' %}{{ ' ' }}{% endif %}{% if message['role'] == 'system' %}{{ '[SYS] ' + message['content'] | trim }}{% elif message['role'] == 'user' %}{{ '[INST] ' + message['content'] | trim }}{% elif message['role'] == 'assistant' %}{{ '[RESP] '  + message['content'] + eos_token }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ ' [RESP] ' }}{% endif %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<|endoftext|>",
                eos_token: "<|endoftext|>",
                target: "[INST] Hello, how are you? [RESP] I'm doing great. How can I help you today?<|endoftext|>[INST] I'd like to show off how chat templating works!",
                trimmed: true,
            },
            TgiCase {
                name: "abacusai/Smaug-34B-v0.1",
                chat_template: "{%- for idx in range(0, messages|length) -%}\n{%- if messages[idx]['role'] == 'user' -%}\n{%- if idx > 1 -%}\n{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}\n{%- else -%}\n{{- messages[idx]['content'] + ' [/INST]' -}}\n{%- endif -%}\n{% elif messages[idx]['role'] == 'system' %}\n{{- '[INST] <<SYS>>\\n' + messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}\n{%- elif messages[idx]['role'] == 'assistant' -%}\n{{- ' '  + messages[idx]['content'] + ' ' + eos_token -}}\n{% endif %}\n{% endfor %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "Hello, how are you? [/INST] I'm doing great. How can I help you today? </s><s>[INST] I'd like to show off how chat templating works! [/INST]",
                trimmed: true,
            },
            TgiCase {
                name: "maywell/Synatra-Mixtral-8x7B",
                chat_template: "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n{% for message in messages %}{% if message['role'] == 'user' %}### Instruction:\n{{ message['content']|trim -}}{% if not loop.last %}{% endif %}\n{% elif message['role'] == 'assistant' %}### Response:\n{{ message['content']|trim -}}{% if not loop.last %}{% endif %}\n{% elif message['role'] == 'system' %}{{ message['content']|trim -}}{% if not loop.last %}{% endif %}\n{% endif %}\n{% endfor %}\n{% if add_generation_prompt and messages[-1]['role'] != 'assistant' %}\n### Response:\n{% endif %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "Below is an instruction that describes a task. Write a response that appropriately completes the request.### Instruction:Hello, how are you?### Response:I'm doing great. How can I help you today?### Instruction:I'd like to show off how chat templating works!",
                trimmed: true,
            },
            TgiCase {
                name: "deepseek-ai/deepseek-coder-33b-instruct",
                chat_template: "{% if not add_generation_prompt is defined %}\n{% set add_generation_prompt = false %}\n{% endif %}\n{%- set ns = namespace(found=false) -%}\n{%- for message in messages -%}\n    {%- if message['role'] == 'system' -%}\n        {%- set ns.found = true -%}\n    {%- endif -%}\n{%- endfor -%}\n{{bos_token}}{%- if not ns.found -%}\n{{'You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer\\n'}}\n{%- endif %}\n{%- for message in messages %}\n    {%- if message['role'] == 'system' %}\n{{ message['content'] }}\n    {%- else %}\n        {%- if message['role'] == 'user' %}\n{{'### Instruction:\\n' + message['content'] + '\\n'}}\n        {%- else %}\n{{'### Response:\\n' + message['content'] + '\\n<|EOT|>\\n'}}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{% if add_generation_prompt %}\n{{'### Response:'}}\n{% endif %}",
                messages: example_chat(),
                add_generation_prompt: false,
                bos_token: "<｜begin▁of▁sentence｜>",
                eos_token: "</EOT>",
                target: "<｜begin▁of▁sentence｜>You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, and you only answer questions related to computer science. For politically sensitive questions, security and privacy issues, and other non-computer science questions, you will refuse to answer\n### Instruction:\nHello, how are you?\n### Response:\nI'm doing great. How can I help you today?\n<|EOT|>\n### Instruction:\nI'd like to show off how chat templating works!\n",
                trimmed: true,
            },
            TgiCase {
                name: "maywell/PiVoT-MoE",
                chat_template: "{{ (messages|selectattr('role', 'equalto', 'system')|list|last).content|trim if (messages|selectattr('role', 'equalto', 'system')|list) else '' }}{% for message in messages %}{% if message['role'] == 'system' %}{{ message['content']|trim }}{% elif message['role'] == 'user' %}### Instruction: {{ message['content']|trim }}{% elif message['role'] == 'assistant' %}### Response: {{ message['content']|trim }}{% elif message['role'] == 'user_context' %}### Input: {{ message['content']|trim }}{% endif %}{% if not loop.last %}\n{% endif %}{% endfor %}{% if add_generation_prompt and messages[-1]['role'] != 'assistant' %}### Response:{% endif %}",
                messages: example_chat_with_system(),
                add_generation_prompt: false,
                bos_token: "<s>",
                eos_token: "</s>",
                target: "You are a friendly chatbot who always responds in the style of a pirateYou are a friendly chatbot who always responds in the style of a pirate### Instruction: Hello, how are you?### Response: I'm doing great. How can I help you today?### Instruction: I'd like to show off how chat templating works!",
                trimmed: true,
            },
        ];
        for case in cases {
            let result = tgi_render(
                case.chat_template,
                case.trimmed,
                case.bos_token,
                case.eos_token,
                &case.messages,
                case.add_generation_prompt,
            );
            match result {
                Ok(rendered) => assert_eq!(rendered, case.target, "{}", case.name),
                Err(err) => panic!("{}: {err}", case.name),
            }
        }
    }

    // Cases whose expected strings were rendered by Python's jinja2 3.1.6 in the environment
    // transformers builds (`ImmutableSandboxedEnvironment(trim_blocks=True,
    // lstrip_blocks=True)`, `loopcontrols`, its `tojson`, `raise_exception`, `strftime_now`
    // and `{% generation %}` tag), with `tools=None` and `documents=None`.

    #[test]
    fn python_string_methods_and_whitespace_as_jinja2() {
        let source = r#"{%- set ns = namespace(last_user=-1) %}
{%- for message in messages[::-1] %}
    {%- if ns.last_user == -1 and message.role == 'user' %}
        {%- set ns.last_user = (messages|length - 1) - loop.index0 %}
    {%- endif %}
{%- endfor %}
{% for message in messages %}
    {% if message.role == 'system' %}
<|system|>{{ message.content.strip() }}
    {% elif message.role == 'assistant' %}
        {% set content = message.content %}
        {% if '</think>' in content %}
            {% set content = content.split('</think>')[-1].lstrip('\n') %}
        {% endif %}
        {% if loop.index0 > ns.last_user %}
<|assistant|>{{ content.replace('\n\n', '\n') }}
        {% else %}
<|assistant|>{{ content }}
        {% endif %}
    {% elif message.content.startswith('/') %}
<|{{ message.role }}|>command {{ message.content[1:].split() | join(',') | upper }}
    {% else %}
<|{{ message.role }}|>{{ message.content.rstrip('?') }}{% if message.content.endswith('?') %} (a question){% endif %}

    {% endif %}
    {% if loop.index0 >= 10 %}
        {% break %}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|assistant|>
{% endif %}"#;
        let messages = chat(&[
            ("system", "  Be brief.  "),
            ("user", "/search rust  jinja"),
            ("assistant", "<think>\nhmm\n</think>\n\nHere."),
            ("user", "Why?"),
            ("assistant", "A\n\nB"),
        ]);
        let rendered = ChatTemplate::new(source.into(), SpecialTokens::default())
            .expect("compiles")
            .render(&messages, true)
            .expect("renders");
        assert_eq!(
            rendered,
            "<|system|>Be brief.\n<|user|>command SEARCH,RUST,JINJA\n<|assistant|>Here.\n<|user|>Why (a question)\n<|assistant|>A\nB\n<|assistant|>\n"
        );
    }

    #[test]
    fn loop_controls_break_and_continue() {
        let source = r#"{% set ns = namespace(users=0) %}
{% for message in messages %}
    {% if message.role == 'system' %}
        {% continue %}
    {% endif %}
    {% if message.role == 'user' %}
        {% set ns.users = ns.users + 1 %}
    {% endif %}
{{ message.role }}: {{ message.content }}
    {% if ns.users >= 2 %}
        {% break %}
    {% endif %}
{% endfor %}
end"#;
        let messages = chat(&[
            ("system", "S"),
            ("user", "one"),
            ("assistant", "two"),
            ("user", "three"),
            ("assistant", "four"),
        ]);
        let rendered = ChatTemplate::new(source.into(), SpecialTokens::default())
            .expect("compiles")
            .render(&messages, false)
            .expect("renders");
        assert_eq!(rendered, "user: one\nassistant: two\nuser: three\nend");
    }

    #[test]
    fn tojson_writes_what_python_json_dumps_writes() {
        let source = r#"{{ messages | tojson }}
{{ messages[0] | tojson(indent=2) }}
{{ {"z": [1, 2.5, none, true, false, [], {}], "a": 1e-05, "m": 1e16, "s": 0.1 + 0.2, "k": 1e15, "q": 0.0001, "h": 123456.789} | tojson(sort_keys=true) }}
{{ {"z": 1, "a": 2} | tojson }}
{{ messages[1] | tojson(ensure_ascii=true, separators=(",", ":")) }}
{{ [1, [2, {"x": [], "y": "t"}]] | tojson(indent=4) }}
{{ [1, {"x": 2}] | tojson(indent="\t") }}"#;
        let messages = chat(&[
            ("system", "plain"),
            (
                "user",
                "Café \"quoted\" \\ back\tslash\nnew 😀 \u{1}\u{7f} </tag>",
            ),
        ]);
        let rendered = ChatTemplate::new(source.into(), SpecialTokens::default())
            .expect("compiles")
            .render(&messages, false)
            .expect("renders");
        assert_eq!(
            rendered,
            "[{\"role\": \"system\", \"content\": \"plain\"}, {\"role\": \"user\", \"content\": \"Café \\\"quoted\\\" \\\\ back\\tslash\\nnew 😀 \\u0001\u{7f} </tag>\"}]\n{\n  \"role\": \"system\",\n  \"content\": \"plain\"\n}\n{\"a\": 1e-05, \"h\": 123456.789, \"k\": 1000000000000000.0, \"m\": 1e+16, \"q\": 0.0001, \"s\": 0.30000000000000004, \"z\": [1, 2.5, null, true, false, [], {}]}\n{\"z\": 1, \"a\": 2}\n{\"role\":\"user\",\"content\":\"Caf\\u00e9 \\\"quoted\\\" \\\\ back\\tslash\\nnew \\ud83d\\ude00 \\u0001\\u007f </tag>\"}\n[\n    1,\n    [\n        2,\n        {\n            \"x\": [],\n            \"y\": \"t\"\n        }\n    ]\n]\n[\n\t1,\n\t{\n\t\t\"x\": 2\n\t}\n]"
        );
    }

    #[test]
    fn values_print_as_python_prints_them() {
        let source = r#"{{ none }} {{ true }} {{ false }} {{ tools }} {{ documents }} {{ 1.0 }} {{ 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ bos_token }} [{{ unk_token }}] [{{ pad_token }}] {{ messages[0].content is string }}"#;
        let special = SpecialTokens {
            bos: Some("<s>".into()),
            unk: Some("<unk>".into()),
            ..SpecialTokens::default()
        };
        let rendered = ChatTemplate::new(source.into(), special)
            .expect("compiles")
            .render(&chat(&[("user", "x")]), false)
            .expect("renders");
        assert_eq!(
            rendered,
            "None True False None None 1.0 2 3.5 3 <s> [<unk>] [] True"
        );
    }

    #[test]
    fn generation_blocks_render_their_body() {
        let source = r#"{% for message in messages %}
{% if message.role == 'assistant' %}
<|assistant|>
{% generation %}
{{ message.content }}<|end|>
{% endgeneration %}
{% else %}
<|{{ message.role }}|>
  {%- generation -%}
 {{ message.content }}
  {%- endgeneration -%}
<|end|>
{% endif %}
{% endfor %}"#;
        let template =
            ChatTemplate::new(source.into(), SpecialTokens::default()).expect("compiles");
        let rendered = template
            .render(&chat(&[("user", "Hi"), ("assistant", "Hello")]), false)
            .expect("renders");
        assert_eq!(rendered, "<|user|>Hi<|end|>\n<|assistant|>\nHello<|end|>\n");
        assert_eq!(template.source(), source);
    }

    #[test]
    fn generation_rewrite_leaves_other_tags_alone() {
        for source in [
            "{%}",
            "{%%}",
            "{% if x %}{%- generation -%}",
            "a {% generation",
            "{{ '{%' }}",
        ] {
            let rewritten = open_generation_blocks(source);
            assert_eq!(rewritten.replace("if true", "generation"), source);
        }
        assert_eq!(
            open_generation_blocks("{%+ generation %}x{%- endgeneration +%}"),
            "{%+ if true %}x{%- endif +%}"
        );
    }

    #[test]
    fn raise_exception_gives_its_message() {
        let template = ChatTemplate::new(
            "{% if messages|length > 1 %}{{ raise_exception('x') }}{% endif %}ok".into(),
            SpecialTokens::default(),
        )
        .expect("compiles");
        let one = chat(&[("user", "a")]);
        assert_eq!(template.render(&one, false).expect("renders"), "ok");
        let two = chat(&[("user", "a"), ("user", "b")]);
        match template.render(&two, false) {
            Err(ChatError::Raised { message }) => assert_eq!(message, "x"),
            other => panic!("expected ChatError::Raised, got {other:?}"),
        }
    }

    #[test]
    fn malformed_template_names_the_line() {
        let source = "{% for message in messages %}\n{{ message.content }}\n{% if %}\n{% endfor %}";
        match ChatTemplate::new(source.into(), SpecialTokens::default()) {
            Err(err @ ChatError::Template { line, .. }) => {
                assert_eq!(line, Some(3), "{err}");
                assert!(err.to_string().contains("line 3"), "{err}");
            }
            other => panic!("expected ChatError::Template, got {other:?}"),
        }
        let unclosed = "{% for message in messages %}\n{{ message.content }}\n";
        let err = ChatTemplate::new(unclosed.into(), SpecialTokens::default())
            .expect_err("an unclosed for");
        assert!(matches!(err, ChatError::Template { .. }), "{err}");
        assert!(err.to_string().contains("syntax error"), "{err}");
    }

    #[test]
    fn render_failure_names_the_error() {
        let template = ChatTemplate::new(
            "{{ messages[0].content }}\n{{ 'a' + messages[0].missing.deeper }}".into(),
            SpecialTokens::default(),
        )
        .expect("compiles");
        match template.render(&chat(&[("user", "hi")]), false) {
            Err(err @ ChatError::Template { line, .. }) => {
                assert_eq!(line, Some(2), "{err}");
                assert!(err.to_string().contains("undefined"), "{err}");
            }
            other => panic!("expected ChatError::Template, got {other:?}"),
        }
    }

    #[test]
    fn tokenizer_config_template_list_takes_the_default() {
        let folder = scratch_folder("list-default");
        let config = serde_json::json!({
            "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
            "eos_token": "</s>",
            "pad_token": null,
            "chat_template": [
                {"name": "tool_use", "template": "tools"},
                {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"}
            ]
        });
        fs::write(folder.join(TOKENIZER_CONFIG_FILE), config.to_string()).expect("written");
        let template = ChatTemplate::from_folder(&folder)
            .expect("reads")
            .expect("has a template");
        let rendered = template
            .render(&chat(&[("user", "a"), ("assistant", "b")]), false)
            .expect("renders");
        assert_eq!(rendered, "<s>a</s>b</s>");
        assert_eq!(template.special_tokens().pad, None);
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn chat_template_jinja_comes_before_tokenizer_config() {
        let folder = scratch_folder("jinja-first");
        fs::write(
            folder.join(TOKENIZER_CONFIG_FILE),
            r#"{"chat_template": "from the config", "eos_token": "E"}"#,
        )
        .expect("written");
        fs::write(
            folder.join(CHAT_TEMPLATE_FILE),
            "from the file {{ eos_token }}\n",
        )
        .expect("written");
        let template = ChatTemplate::from_folder(&folder)
            .expect("reads")
            .expect("has a template");
        // Jinja2 drops the template's one trailing newline (`keep_trailing_newline=False`).
        assert_eq!(
            template.render(&[], false).expect("renders"),
            "from the file E"
        );
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn folder_without_template_gives_none() {
        let folder = scratch_folder("none");
        assert!(ChatTemplate::from_folder(&folder).expect("reads").is_none());
        fs::write(
            folder.join(TOKENIZER_CONFIG_FILE),
            r#"{"eos_token": "</s>"}"#,
        )
        .expect("written");
        assert!(ChatTemplate::from_folder(&folder).expect("reads").is_none());
        let _ = fs::remove_dir_all(&folder);
        assert!(matches!(
            ChatTemplate::from_folder(&folder),
            Err(ChatError::Read { .. })
        ));
    }

    #[test]
    fn template_list_without_default_lists_the_names() {
        let folder = scratch_folder("list-no-default");
        let config = serde_json::json!({"chat_template": [
            {"name": "tool_use", "template": "a"},
            {"name": "rag", "template": "b"}
        ]});
        fs::write(folder.join(TOKENIZER_CONFIG_FILE), config.to_string()).expect("written");
        match ChatTemplate::from_folder(&folder) {
            Err(err @ ChatError::NoDefaultTemplate { .. }) => {
                let ChatError::NoDefaultTemplate { names, .. } = &err else {
                    unreachable!()
                };
                assert_eq!(names, &["tool_use", "rag"]);
                let text = err.to_string();
                assert!(text.contains("tool_use") && text.contains("rag"), "{text}");
                assert!(text.contains(TOKENIZER_CONFIG_FILE), "{text}");
            }
            other => panic!("expected ChatError::NoDefaultTemplate, got {other:?}"),
        }
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn special_token_of_the_wrong_type_names_key_and_file() {
        let folder = scratch_folder("wrong-type");
        fs::write(folder.join(TOKENIZER_CONFIG_FILE), r#"{"eos_token": 2}"#).expect("written");
        match ChatTemplate::from_folder(&folder) {
            Err(err @ ChatError::WrongType { .. }) => {
                let text = err.to_string();
                assert!(text.contains("eos_token"), "{text}");
                assert!(text.contains(TOKENIZER_CONFIG_FILE), "{text}");
            }
            other => panic!("expected ChatError::WrongType, got {other:?}"),
        }
        let _ = fs::remove_dir_all(&folder);
    }

    #[cfg(unix)]
    #[test]
    fn fifo_tokenizer_config_is_refused_without_blocking() {
        let folder = scratch_folder("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(folder.join(TOKENIZER_CONFIG_FILE))
            .status()
            .expect("mkfifo runs");
        assert!(status.success(), "mkfifo failed");
        match from_folder_within_time(folder.clone()) {
            Err(err @ ChatError::Read { .. }) => {
                let text = err.to_string();
                assert!(text.contains("FIFO"), "{text}");
                assert!(text.contains(TOKENIZER_CONFIG_FILE), "{text}");
            }
            other => panic!("expected ChatError::Read, got {other:?}"),
        }
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn folder_in_place_of_a_file_is_refused() {
        let folder = scratch_folder("dir-file");
        fs::create_dir(folder.join(CHAT_TEMPLATE_FILE)).expect("a folder");
        match ChatTemplate::from_folder(&folder) {
            Err(err @ ChatError::Read { .. }) => {
                assert!(err.to_string().contains("a folder"), "{err}");
            }
            other => panic!("expected ChatError::Read, got {other:?}"),
        }
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn oversize_tokenizer_config_is_refused() {
        let folder = scratch_folder("oversize");
        // A sparse file: its length is all that is looked at.
        fs::File::create(folder.join(TOKENIZER_CONFIG_FILE))
            .and_then(|file| file.set_len(CHAT_MAX_BYTES + 1))
            .expect("a long file");
        match from_folder_within_time(folder.clone()) {
            Err(err @ ChatError::TooLarge { size, max, .. }) => {
                assert_eq!((size, max), (CHAT_MAX_BYTES + 1, CHAT_MAX_BYTES));
                let text = err.to_string();
                assert!(text.contains(TOKENIZER_CONFIG_FILE), "{text}");
                assert!(text.contains(&(CHAT_MAX_BYTES + 1).to_string()), "{text}");
                assert!(text.contains(&CHAT_MAX_BYTES.to_string()), "{text}");
            }
            other => panic!("expected ChatError::TooLarge, got {other:?}"),
        }
        let _ = fs::remove_dir_all(&folder);
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

    #[test]
    fn python_float_repr_matches_python() {
        // `repr(x)` in CPython 3.11.
        for (x, python) in [
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456789.0, "123456789.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345e20, "1.2345e+20"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (-0.0, "-0.0"),
            (f64::INFINITY, "Infinity"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(python_float(x), python, "{x:e}");
        }
    }
}
