//! Every family through every command of the real program: `generate` on the GPT-2, Llama,
//! Qwen2, Qwen3 and Mistral reference folders against transformers' greedy tokens, `chat` with
//! piped input, `view` on all six families, and BERT refused by `generate` and `chat` with its
//! reason.
//!
//! The reference folders are transformers' own (`crates/attn-model/tests/data/hf`); their
//! `reference.json` holds the prompt's ids and `generate(do_sample=False)`'s ids after it. The
//! Qwen2 and Qwen3 folders carry no tokenizer, so their copies here get a character tokenizer
//! with one character per id: the prompt's text then encodes to exactly the reference's ids.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const PROGRAM: &str = env!("CARGO_BIN_EXE_attn");

fn hf(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../attn-model/tests/data/hf")
        .join(name)
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("attn-families-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

fn run(args: &[&str]) -> Output {
    Command::new(PROGRAM)
        .args(args)
        .output()
        .expect("the program starts")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[derive(serde::Deserialize)]
struct Ids {
    data: Vec<u32>,
}

#[derive(serde::Deserialize)]
struct Reference {
    prompt_ids: Ids,
    greedy_ids: Ids,
}

fn reference(folder: &Path) -> Reference {
    serde_json::from_str(
        &std::fs::read_to_string(folder.join("reference.json")).expect("reference.json"),
    )
    .expect("parses")
}

/// `config.json`'s number at `key`.
fn config_number(folder: &Path, key: &str) -> usize {
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(folder.join("config.json")).expect("config.json"),
    )
    .expect("parses");
    config[key].as_u64().expect("a number") as usize
}

/// A tokenizer of `vocab` ids, each one printable character, the last the end of text.
fn character_tokenizer(vocab: usize) -> String {
    let vocab_map: serde_json::Map<String, serde_json::Value> = (0..vocab - 1)
        .map(|id| (character(id).to_string(), serde_json::json!(id)))
        .collect();
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [{
            "id": vocab - 1, "content": "<eos>", "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true
        }],
        "normalizer": null,
        "pre_tokenizer": null,
        "post_processor": null,
        "decoder": { "type": "Fuse" },
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
            "byte_fallback": false, "vocab": vocab_map, "merges": []
        }
    })
    .to_string()
}

/// The character of `id` in [`character_tokenizer`]: `0`, `1`, … then letters, no space.
fn character(id: usize) -> char {
    const CHARACTERS: &str = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#$%&()*+,-./:;<=>?@[]^_{|}~";
    CHARACTERS
        .chars()
        .nth(id)
        .expect("fewer ids than characters")
}

/// A copy of a folder that has no tokenizer, with [`character_tokenizer`], for the test
/// `test` (tests run at once in one process, each with its own copy).
fn with_character_tokenizer(name: &str, test: &str) -> PathBuf {
    let from = hf(name);
    let dir = temp(&format!("{name}-{test}"));
    for entry in std::fs::read_dir(&from).expect("the folder") {
        let path = entry.expect("an entry").path();
        std::fs::copy(&path, dir.join(path.file_name().expect("a name"))).expect("copied");
    }
    let vocab = config_number(&from, "vocab_size");
    std::fs::write(dir.join("tokenizer.json"), character_tokenizer(vocab)).expect("written");
    dir
}

/// The folder of `name` as the program is given it in the test `test`, with a tokenizer.
fn folder(name: &str, test: &str) -> PathBuf {
    if name.starts_with("qwen") {
        with_character_tokenizer(name, test)
    } else {
        hf(name)
    }
}

/// The prompt's text and transformers' greedy continuation, as the folder's tokenizer writes
/// them; the prompt's text encodes back to exactly the reference's ids.
fn texts(folder: &Path) -> (String, String, usize) {
    let reference = reference(folder);
    let tokenizer =
        tokenizers::Tokenizer::from_file(folder.join("tokenizer.json")).expect("a tokenizer");
    let prompt = tokenizer
        .decode(&reference.prompt_ids.data, false)
        .expect("decodes");
    let encoded = tokenizer.encode(prompt.as_str(), true).expect("encodes");
    assert_eq!(
        encoded.get_ids(),
        reference.prompt_ids.data,
        "{}: the prompt {prompt:?} encodes to other ids",
        folder.display()
    );
    let eos = config_number(folder, "eos_token_id") as u32;
    let new = &reference.greedy_ids.data[reference.prompt_ids.data.len()..];
    let until_eos: Vec<u32> = new.iter().copied().take_while(|&id| id != eos).collect();
    let answer = tokenizer.decode(&until_eos, true).expect("decodes");
    (prompt, answer, new.len())
}

#[test]
fn generate_writes_transformers_greedy_tokens_for_every_decoder_family() {
    for name in [
        "gpt2_tiny",
        "llama_tiny",
        "mistral_tiny",
        "qwen2_tiny",
        "qwen3_tiny",
    ] {
        let folder = folder(name, "generate");
        let (prompt, expected, new) = texts(&folder);
        let new = new.to_string();
        // f32: transformers computed the reference in f32 (llama_tiny's file is bf16).
        let output = run(&[
            "generate",
            folder.to_str().expect("UTF-8"),
            "--prompt",
            &prompt,
            "--max-new-tokens",
            &new,
            "--dtype",
            "f32",
        ]);
        assert!(output.status.success(), "{name}: {}", stderr(&output));
        let written = String::from_utf8(output.stdout).expect("UTF-8");
        assert_eq!(written, format!("{expected}\n"), "{name}");
        if name.starts_with("qwen") {
            std::fs::remove_dir_all(&folder).expect("cleanup");
        }
    }
}

/// `chat MODEL` with `lines` on its standard input.
fn chat(folder: &Path, extra: &[&str], lines: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(PROGRAM)
        .arg("chat")
        .arg(folder)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the program starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(lines.as_bytes())
        .expect("the turns");
    child.wait_with_output().expect("the chat ends")
}

#[test]
fn chat_answers_as_transformers_and_a_folder_without_a_template_says_so() {
    #[derive(serde::Deserialize)]
    struct ChatReference {
        chat: attn_testing::reference::ChatReference,
    }
    let llama = hf("llama_tiny");
    let reference: ChatReference = serde_json::from_str(
        &std::fs::read_to_string(llama.join("reference.json")).expect("reference.json"),
    )
    .expect("parses");
    let chat_reference = reference.chat;
    let (system, user) = (&chat_reference.messages[0], &chat_reference.messages[1]);
    let output = chat(
        &llama,
        &[
            "--system",
            &system.content,
            "--max-new-tokens",
            "12",
            "--dtype",
            "f32",
        ],
        // A line that ends in `\` continues the message: the user's has two lines.
        &format!("{}\n", user.content.replace('\n', "\\\n")),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    // transformers 5.24's greedy answer on this folder (tests/generate.rs says how it was made).
    assert_eq!(
        String::from_utf8(output.stdout).expect("UTF-8"),
        "zfc@Xzgzcw?K\n"
    );
    for name in ["gpt2_tiny", "mistral_tiny"] {
        let output = chat(&hf(name), &[], "Hi\n");
        assert!(!output.status.success(), "{name} chatted");
        let message = stderr(&output);
        assert!(
            message.contains("has no chat template") && message.contains("attn generate"),
            "{name}: {message}"
        );
    }
}

#[test]
fn bert_is_refused_by_generate_and_chat_with_its_reason() {
    let bert = hf("bert_tiny");
    let bert = bert.to_str().expect("UTF-8");
    let generated = run(&["generate", bert, "--prompt", "hello"]);
    let chatted = chat(Path::new(bert), &[], "hello\n");
    for output in [generated, chatted] {
        assert!(!output.status.success());
        let message = stderr(&output);
        assert!(
            message.contains("bert model, an encoder") && message.contains("attn view"),
            "{message}"
        );
    }
}

#[test]
fn view_writes_a_page_for_all_six_families() {
    let out = temp("view");
    for name in [
        "gpt2_tiny",
        "bert_tiny",
        "llama_tiny",
        "mistral_tiny",
        "qwen2_tiny",
        "qwen3_tiny",
    ] {
        let folder = folder(name, "view");
        let page = out.join(format!("{name}.html"));
        let output = run(&[
            "view",
            folder.to_str().expect("UTF-8"),
            "--text",
            "abc12",
            "--out",
            page.to_str().expect("UTF-8"),
        ]);
        assert!(output.status.success(), "{name}: {}", stderr(&output));
        let (layers, heads) = match name {
            "gpt2_tiny" => (
                config_number(&folder, "n_layer"),
                config_number(&folder, "n_head"),
            ),
            _ => (
                config_number(&folder, "num_hidden_layers"),
                config_number(&folder, "num_attention_heads"),
            ),
        };
        assert!(
            stderr(&output).contains(&format!("{layers} layers × {heads} heads")),
            "{name}: {}",
            stderr(&output)
        );
        let html = std::fs::read_to_string(&page).expect("the page");
        // The title names the folder, not where it is kept.
        let parent = folder.parent().expect("a parent").display().to_string();
        assert!(!html.contains(&parent), "{name}: the page names {parent}");
        if name.starts_with("qwen") {
            std::fs::remove_dir_all(&folder).expect("cleanup");
        }
    }
    std::fs::remove_dir_all(&out).expect("cleanup");
}

#[test]
fn the_help_lists_the_commands_and_groups_each_commands_flags() {
    let help = run(&["--help"]);
    assert!(help.status.success());
    let text = String::from_utf8(help.stdout).expect("UTF-8");
    for command in ["train", "resume", "generate", "chat", "view"] {
        assert!(text.contains(&format!("  {command} ")), "{command}: {text}");
    }
    assert!(!text.contains("render-chat-template"), "{text}");
    let train = String::from_utf8(run(&["train", "--help"]).stdout).expect("UTF-8");
    for heading in [
        "Task and data:",
        "Model:",
        "Optimizer:",
        "Loop:",
        "Run folder:",
    ] {
        assert!(train.contains(heading), "{heading}: {train}");
    }
    let generate = String::from_utf8(run(&["generate", "--help"]).stdout).expect("UTF-8");
    for heading in ["Sampling:", "Device:"] {
        assert!(generate.contains(heading), "{heading}: {generate}");
    }
}
