//! Chat templates rendered in a child process, bounded in memory and in time.
//!
//! minijinja bounds what a rendering runs (its fuel), how deep it nests and, here, how much it
//! writes ([`attn_model::hf::ChatTemplate`]), but not the values it builds on the way:
//! `{% set ns.s = ns.s ~ ns.s %}` in a loop doubles a string at each turn, and
//! `"%999999999999d"|format` asks for a terabyte at once. A template comes with a downloaded
//! folder, so the `attn` program does not render it in its own process: it starts itself
//! again with the hidden subcommand `render-chat-template`, which caps its own writable memory
//! at [`RENDER_MEMORY`] bytes (`RLIMIT_DATA`) before it reads the template, and it stops that
//! child after [`RENDER_TIME`]. A hostile template then ends the child, with a message that says
//! which bound it crossed, and the chat goes on.
//!
//! The parent sends one JSON [`Request`] on the child's standard input and reads one JSON
//! [`Reply`] from its standard output.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use attn_model::hf::{CHAT_PROMPT_MAX_BYTES, ChatMessage, ChatTemplate, SpecialTokens};
use serde::{Deserialize, Serialize};

/// The subcommand of `attn` that renders one request (hidden from its help).
pub const SUBCOMMAND: &str = "render-chat-template";

/// The most writable memory the rendering child may map (`RLIMIT_DATA`), in bytes: the template,
/// the conversation, every value the template builds, and the program's own heap.
pub const RENDER_MEMORY: u64 = 1 << 30;

/// The longest one rendering may take before its child is stopped.
pub const RENDER_TIME: Duration = Duration::from_secs(10);

/// The longest request the child reads (the template, the conversation and the special tokens,
/// as JSON): above any template or conversation the programs accept.
const REQUEST_MAX_BYTES: u64 = 256 << 20;

/// The longest reply the parent reads: the rendering, escaped as a JSON string (at most six
/// bytes for each byte written), and its envelope.
const REPLY_MAX_BYTES: u64 = 6 * CHAT_PROMPT_MAX_BYTES + 4096;

/// The most of the child's standard error the parent keeps, for its messages.
const STDERR_MAX_BYTES: u64 = 64 << 10;

/// What the parent asks the child to render.
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    /// The template's source.
    pub source: String,
    /// `bos_token`, `eos_token`, `unk_token` and `pad_token`.
    pub special: [Option<String>; 4],
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Whether the rendering ends with the assistant's turn opened.
    pub add_generation_prompt: bool,
}

/// The child's answer.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    /// The rendered conversation.
    Prompt(String),
    /// Why the template could not be compiled or rendered, as [`attn_model::hf::ChatError`]
    /// words it.
    Error(String),
}

/// `template` rendered over `messages` by a child process of `program` (the `attn`
/// program: it knows [`SUBCOMMAND`]), within [`RENDER_MEMORY`] and [`RENDER_TIME`].
///
/// # Errors
/// The template's own error (as [`ChatTemplate::render`] gives it), or a message naming the
/// bound the child crossed or how it ended.
pub fn render_in_child(
    program: &Path,
    template: &ChatTemplate,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Result<String> {
    let special = template.special_tokens();
    let request = serde_json::to_vec(&Request {
        source: template.source().to_owned(),
        special: [
            special.bos.clone(),
            special.eos.clone(),
            special.unk.clone(),
            special.pad.clone(),
        ],
        messages: messages.to_vec(),
        add_generation_prompt,
    })?;
    let mut child = Command::new(program)
        .arg(SUBCOMMAND)
        // One line on running out of memory, not a backtrace.
        .env("RUST_BACKTRACE", "0")
        // mimalloc (the program's allocator) commits its arenas as it uses them, so that the cap
        // counts memory in use rather than address space set aside.
        .env("MIMALLOC_ARENA_EAGER_COMMIT", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!(
                "cannot start {} to render the chat template",
                program.display()
            )
        })?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        bail!("the chat template's rendering process has no pipes");
    };
    // A child that stops reading (it crossed a bound) closes the pipe: the write fails, and the
    // child's status says why.
    let writer = thread::spawn(move || stdin.write_all(&request));
    let reply = thread::spawn(move || read_at_most(stdout, REPLY_MAX_BYTES));
    let errors = thread::spawn(move || read_at_most(stderr, STDERR_MAX_BYTES));

    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > RENDER_TIME {
            // Stopped, then reaped; the reader threads end with the child's pipes.
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the chat template took longer than {} s to render, and was stopped",
                RENDER_TIME.as_secs()
            );
        }
        thread::sleep(Duration::from_millis(2));
    };
    let _ = writer.join();
    let reply = reply
        .join()
        .map_err(|_| anyhow!("reading the chat template's rendering failed"))??;
    let errors = errors
        .join()
        .map_err(|_| anyhow!("reading the chat template's rendering failed"))??;
    if !status.success() {
        bail!(ended(status, &String::from_utf8_lossy(&errors)));
    }
    if reply.len() as u64 > REPLY_MAX_BYTES {
        bail!("the chat template's rendering is longer than {REPLY_MAX_BYTES} bytes");
    }
    match serde_json::from_slice(&reply).context(
        "the chat template's rendering process answered with something that is not a reply",
    )? {
        Reply::Prompt(prompt) => Ok(prompt),
        Reply::Error(message) => Err(anyhow!(message)),
    }
}

/// Why a rendering child that did not succeed ended, from its status and its standard error.
fn ended(status: ExitStatus, errors: &str) -> String {
    if let Some(line) = errors.lines().find(|l| l.contains("memory allocation of")) {
        return format!(
            "rendering the chat template needed more than the {} MiB of memory it may use, and \
             was stopped ({})",
            RENDER_MEMORY >> 20,
            line.trim()
        );
    }
    let last = errors.lines().rev().find(|l| !l.trim().is_empty());
    match last {
        Some(line) => format!(
            "the chat template's rendering process ended ({status}): {}",
            line.trim()
        ),
        None => format!("the chat template's rendering process ended ({status})"),
    }
}

/// Up to `max + 1` bytes of `from` (one more than allowed tells the caller it was longer); the
/// rest is read and dropped, so the writer never blocks on a full pipe.
fn read_at_most(mut from: impl Read, max: u64) -> std::io::Result<Vec<u8>> {
    let mut kept = Vec::new();
    (&mut from).take(max + 1).read_to_end(&mut kept)?;
    std::io::copy(&mut from, &mut std::io::sink())?;
    Ok(kept)
}

/// The child's side: caps its own writable memory, reads one [`Request`] from standard input,
/// and writes one [`Reply`] to standard output.
///
/// # Errors
/// When the memory cap cannot be set, or the request cannot be read or the reply written; a
/// template that cannot be rendered is a [`Reply::Error`], not an error here.
pub fn serve() -> Result<()> {
    cap_memory()?;
    let mut request = Vec::new();
    std::io::stdin()
        .take(REQUEST_MAX_BYTES + 1)
        .read_to_end(&mut request)
        .context("cannot read the rendering request")?;
    if request.len() as u64 > REQUEST_MAX_BYTES {
        bail!("the rendering request is longer than {REQUEST_MAX_BYTES} bytes");
    }
    let request: Request =
        serde_json::from_slice(&request).context("the rendering request is not valid")?;
    let [bos, eos, unk, pad] = request.special;
    let special = SpecialTokens { bos, eos, unk, pad };
    let reply = match ChatTemplate::new(request.source, special)
        .and_then(|t| t.render(&request.messages, request.add_generation_prompt))
    {
        Ok(prompt) => Reply::Prompt(prompt),
        Err(err) => Reply::Error(err.to_string()),
    };
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer(&mut stdout, &reply)?;
    stdout.flush()?;
    Ok(())
}

/// Caps this process's writable memory at [`RENDER_MEMORY`] (`RLIMIT_DATA`: the heap and every
/// private writable mapping), past which an allocation fails and the process ends.
#[cfg(unix)]
fn cap_memory() -> Result<()> {
    rlimit::Resource::DATA
        .set(RENDER_MEMORY, RENDER_MEMORY)
        .context("cannot limit the memory of the chat template's rendering")
}

/// Without `setrlimit`, only the time limit bounds the rendering.
#[cfg(not(unix))]
fn cap_memory() -> Result<()> {
    Ok(())
}
