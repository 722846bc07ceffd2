//! Hostile input to the model commands, through the real program under an address-space
//! limit: each case must end with a clear error naming what was wrong (or do the work in
//! bounded memory), never an abort, and leave the user's files as they were.
//!
//! The limit is 6 GB of address space (`ulimit -v`), the machine a user probes on; a program
//! that allocates without bound dies there with a signal instead of answering.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PROGRAM: &str = env!("CARGO_BIN_EXE_attn");

/// The address space each run may reserve, in KiB.
const ADDRESS_SPACE_KIB: u64 = 6_000_000;

fn hf(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../attn-model/tests/data/hf")
        .join(name)
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("attn-hostile-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

/// The program with `args`, under [`ADDRESS_SPACE_KIB`].
fn limited(args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(PROGRAM)
        .args(args)
        .output()
        .expect("the program starts")
}

/// The run ended by itself with a failure (not by a signal), and its error holds every one of
/// `words`.
fn refused(output: &Output, words: &[&str]) -> String {
    let message = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.code(),
        Some(1),
        "ended by {:?}: {message}",
        output.status
    );
    for word in words {
        assert!(message.contains(word), "{word:?} not in: {message}");
    }
    message
}

fn path(p: &Path) -> &str {
    p.to_str().expect("UTF-8")
}

/// A copy of llama_tiny, with its chat template replaced by `template`.
fn llama_with_template(name: &str, template: &str) -> PathBuf {
    let dir = temp(name);
    for file in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "generation_config.json",
    ] {
        std::fs::copy(hf("llama_tiny").join(file), dir.join(file)).expect("copied");
    }
    std::fs::write(dir.join("chat_template.jinja"), template).expect("written");
    dir
}

#[test]
fn a_template_of_a_hundred_thousand_operators_behind_a_dict_does_not_abort_generate_or_chat() {
    let template = format!(
        "{{{{ {{\"a\": {{\"b\": 1}}}}.a.b{} }}}}",
        " ~ \"x\"".repeat(100_000)
    );
    let dir = llama_with_template("operators", &template);
    let generated = limited(&[
        "generate",
        path(&dir),
        "--prompt",
        "Hi",
        "--max-new-tokens",
        "2",
    ]);
    // generate never renders the template: it answers, or refuses the file by name.
    match generated.status.code() {
        Some(0) => {}
        _ => {
            refused(&generated, &["chat_template.jinja"]);
        }
    }
    let chatted = {
        use std::io::Write;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
            ))
            .arg(PROGRAM)
            .args(["chat", path(&dir), "--max-new-tokens", "2"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the program starts");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(b"Hi\n")
            .expect("a turn");
        child.wait_with_output().expect("the chat ends")
    };
    let message = String::from_utf8_lossy(&chatted.stderr);
    assert!(
        chatted.status.code().is_some(),
        "chat ended by {:?}: {message}",
        chatted.status
    );
    assert!(
        message.contains("chat_template.jinja") || message.contains("template"),
        "the template's fault is not named: {message}"
    );
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn view_refuses_a_text_past_the_page_bound_before_the_attention_pass() {
    let dir = temp("view-long");
    let page = dir.join("page.html");
    let text = "abcdefgh".repeat(12_500);
    let output = limited(&[
        "view",
        path(&hf("llama_tiny")),
        "--text",
        &text,
        "--out",
        path(&page),
    ]);
    refused(&output, &["tokens; a page holds at most", "would take"]);
    assert!(!page.exists());
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn a_file_of_fifty_thousand_prompts_is_refused_before_the_model_loads() {
    let dir = temp("prompts-many");
    let file = dir.join("prompts.txt");
    std::fs::write(&file, "Hi\n".repeat(50_000)).expect("written");
    let output = limited(&[
        "generate",
        path(&hf("llama_tiny")),
        "--prompts",
        path(&file),
    ]);
    refused(&output, &["prompts.txt", "50000 prompts", "10000"]);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn a_file_of_prompts_larger_than_one_batch_is_answered_in_batches() {
    let dir = temp("prompts-batches");
    let file = dir.join("prompts.txt");
    // llama_tiny's cache bound: 32768 tokens a batch, so 2000 prompts of 7 tokens and 16 new
    // ones take two batches.
    let prompts: Vec<String> = (0..2000).map(|i| format!("a{}", i % 10)).collect();
    std::fs::write(&file, prompts.join("\n")).expect("written");
    let output = limited(&[
        "generate",
        path(&hf("llama_tiny")),
        "--prompts",
        path(&file),
        "--max-new-tokens",
        "16",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answers = String::from_utf8(output.stdout).expect("UTF-8");
    let lines: Vec<&str> = answers.lines().collect();
    assert_eq!(lines.len(), 2000);
    // Greedy: the same prompt has the same answer in whichever batch it fell.
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(*line, lines[i % 10], "prompt {i}");
    }
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn a_sixty_megabyte_prompt_is_refused_by_its_length_before_it_is_tokenized() {
    let dir = temp("prompt-long");
    let file = dir.join("prompts.txt");
    std::fs::write(&file, "a".repeat(60 << 20)).expect("written");
    let output = limited(&[
        "generate",
        path(&hf("llama_tiny")),
        "--prompts",
        path(&file),
    ]);
    refused(&output, &["62914560 bytes", "context of"]);
    // One prompt alone too long for the context names the prompt, not the new tokens.
    let output = limited(&[
        "generate",
        path(&hf("llama_tiny")),
        "--prompt",
        &"ab".repeat(5000),
        "--max-new-tokens",
        "1",
    ]);
    let message = refused(&output, &["the prompt is", "give a shorter prompt"]);
    assert!(!message.contains("fewer new tokens"), "{message}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn view_out_keeps_a_users_file_that_merely_holds_the_pages_markup() {
    let dir = temp("view-out");
    let notes = dir.join("notes.html");
    let text = "my notes\n<script id=\"attn-data\" type=\"application/json\">{}</script>\n";
    std::fs::write(&notes, text).expect("written");
    let output = limited(&[
        "view",
        path(&hf("gpt2_tiny")),
        "--text",
        "abc",
        "--out",
        path(&notes),
    ]);
    refused(
        &output,
        &["notes.html", "not a page this program wrote", "--out"],
    );
    assert_eq!(std::fs::read_to_string(&notes).expect("kept"), text);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn flags_are_checked_before_the_model_is_read() {
    // A folder whose weights are not a safetensors file: reading them would fail, so each of
    // these errors shows it came first.
    let dir = temp("flags");
    for file in ["config.json", "tokenizer.json", "generation_config.json"] {
        std::fs::copy(hf("llama_tiny").join(file), dir.join(file)).expect("copied");
    }
    std::fs::write(dir.join("model.safetensors"), "not weights").expect("written");
    let folder = path(&dir);
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["generate", folder, "--prompt", "Hi", "--stop", ""],
            &["--stop number 1 is empty"],
        ),
        (
            &["generate", folder, "--prompt", "Hi", "--temperature", "-1"],
            &["temperature", "-1"],
        ),
        (
            &["generate", folder, "--prompt", "Hi", "--top-p", "1.5"],
            &["top_p", "1.5"],
        ),
        (
            &[
                "generate",
                folder,
                "--prompt",
                "Hi",
                "--max-new-tokens",
                "0",
            ],
            &["--max-new-tokens must be at least 1"],
        ),
        (
            &["view", folder, "--text", "Hi", "--out", folder],
            &["exists and is a folder", "--out"],
        ),
    ];
    for (args, words) in cases {
        let output = limited(args);
        let message = refused(&output, words);
        assert!(!message.contains("safetensors"), "{args:?}: {message}");
    }
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
