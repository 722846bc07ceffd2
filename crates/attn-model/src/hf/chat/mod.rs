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
//! is taken). Only regular files of at most [`CHAT_MAX_BYTES`] are read, and links only to
//! files inside the folder ([`crate::files::folder_file`]). Loading reads the
//! source and checks it without parsing it ([`ChatTemplate::new`]); minijinja parses and
//! compiles it only when it renders ([`ChatTemplate::render`]).
//!
//! A template is a program from the model folder, so a rendering is bounded: it runs at most
//! [`CHAT_RENDER_FUEL`] instructions (minijinja's fuel) and [`CHAT_RECURSION_LIMIT`] levels of
//! nested calls and blocks, and writes at most [`CHAT_PROMPT_MAX_BYTES`]; past any of these it
//! ends in [`ChatError::RenderLimit`] instead of looping, recursing or growing without end.
//! What it does not bound is the values a template builds on the way: minijinja has no limit on
//! them, and `{% set ns.s = ns.s ~ ns.s %}` in a loop doubles a string at every turn. A program
//! that renders templates it does not trust renders them in a process of their own under a
//! memory cap, as the `attn-train` program does (`attn_train::render`).
//!
//! The module's files: `folder.rs` reads the template and its special tokens from a folder,
//! `checks.rs` checks the source before minijinja parses it, `python.rs` holds what
//! transformers adds to Jinja2 (Python's printing, `tojson`, `raise_exception`,
//! `strftime_now`), `error.rs` the errors.

mod checks;
mod error;
mod folder;
mod limits;
mod python;
#[cfg(test)]
mod tests;

use std::path::Path;

use minijinja::{AutoEscape, Environment};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use checks::check_chains;
use error::{render_error, template_error};
use folder::{default_template, read_optional, special_tokens};
use python::{python_formatter, raise_exception, strftime_now, tojson};

pub use error::ChatError;
pub use folder::SpecialTokens;
pub(crate) use folder::{read_json_object, wrong_type};
pub use limits::{
    CHAT_MAX_BYTES, CHAT_MAX_CHAIN, CHAT_PROMPT_MAX_BYTES, CHAT_RECURSION_LIMIT, CHAT_RENDER_FUEL,
    CHAT_TEMPLATE_FILE, TOKENIZER_CONFIG_FILE,
};

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

/// A chat template's source, checked but not compiled, with the special tokens it renders
/// with. Loading a template runs none of it: minijinja parses and compiles it only in
/// [`render`](ChatTemplate::render), so that a program that renders in a child process
/// (as `attn_train::render` does) never parses a hostile template in its own.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    source: String,
    special: SpecialTokens,
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
    /// [`ChatError::Read`] when `folder` is not a folder or a file is not UTF-8 text,
    /// [`ChatError::File`] for a file that is not a regular file (a FIFO, a device, a
    /// folder), is a link out of the folder ([`crate::files::folder_file`]), is longer than
    /// [`CHAT_MAX_BYTES`] or cannot be read, [`ChatError::Json`] and [`ChatError::WrongType`] for a
    /// `tokenizer_config.json` that does not parse or holds a value of the wrong type,
    /// [`ChatError::NoDefaultTemplate`] for a list with no `"default"`, and
    /// [`ChatError::Template`] for a template that [`new`](Self::new) refuses. The template
    /// is not compiled.
    pub fn from_folder(folder: &Path) -> Result<Option<ChatTemplate>, ChatError> {
        if !folder.is_dir() {
            return Err(ChatError::Read {
                path: folder.display().to_string(),
                reason: "not a folder".into(),
            });
        }
        let config_path = folder.join(TOKENIZER_CONFIG_FILE);
        let config = read_json_object(folder, TOKENIZER_CONFIG_FILE)?;
        let special = match &config {
            Some(config) => special_tokens(&config_path, config)?,
            None => SpecialTokens::default(),
        };
        let (source, from) = match read_optional(folder, CHAT_TEMPLATE_FILE)? {
            Some(source) => (source, folder.join(CHAT_TEMPLATE_FILE)),
            None => match config
                .as_ref()
                .and_then(|config| config.get("chat_template"))
            {
                None | Some(Json::Null) => return Ok(None),
                Some(template) => (default_template(&config_path, template)?, config_path),
            },
        };
        // A refusal names the file the template came from.
        ChatTemplate::new(source, special)
            .map(Some)
            .map_err(|error| match error {
                ChatError::Template { line, reason } => ChatError::Template {
                    line,
                    reason: format!("{reason} (in {})", from.display()),
                },
                other => other,
            })
    }

    /// `source` with `special`, checked without being parsed: no tag may chain more than
    /// [`CHAT_MAX_CHAIN`] operators, nor the template hold more `elif` branches, which
    /// minijinja's parser would build into trees too deep for the stack. Whether `source` is
    /// valid Jinja is found when it renders.
    ///
    /// # Errors
    /// [`ChatError::Template`], with the line, when `source` chains more than
    /// [`CHAT_MAX_CHAIN`] operators in one tag or `elif` branches in all.
    pub fn new(source: String, special: SpecialTokens) -> Result<ChatTemplate, ChatError> {
        check_chains(&open_generation_blocks(&source))?;
        Ok(ChatTemplate { source, special })
    }

    /// Compiles the template with transformers' settings, bounded as the module says.
    fn compile(&self) -> Result<Environment<'static>, ChatError> {
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
        env.add_template_owned(TEMPLATE_NAME, open_generation_blocks(&self.source))
            .map_err(|err| template_error(&err))?;
        Ok(env)
    }

    /// The prompt for `messages`, as transformers'
    /// `apply_chat_template(messages, tokenize=False, add_generation_prompt=...)` renders it;
    /// `add_generation_prompt` asks the template to open the assistant's turn. The template
    /// is compiled here, at each call.
    ///
    /// # Errors
    /// [`ChatError::Template`], with the line, when the template does not compile;
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
        let env = self.compile()?;
        let template = env
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
