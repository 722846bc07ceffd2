//! The `text` task end to end, through the program: a run on a text file, its folder, its
//! samples, generation from it, a resumed run without the original file, and the refusal of
//! every kind of bad text with what is wrong and where.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PROGRAM: &str = env!("CARGO_BIN_EXE_attn");

/// A fresh folder for one test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("attn-text-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creates the test folder");
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

/// Words of an animal grammar, written `count` times in a fixed pseudo-random order.
fn animals(count: usize) -> String {
    const WORDS: [&str; 4] = ["cat ", "dog ", "emu ", "pig "];
    let mut state = 0x2545_f491_u64;
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            WORDS[(state >> 33) as usize % 4]
        })
        .collect()
}

/// A tiny text run's flags, into `out`, on `data`.
fn tiny_run<'a>(data: &'a str, out: &'a str, steps: &'a str) -> Vec<&'a str> {
    vec![
        "train",
        "--task",
        "text",
        "--data",
        data,
        "--seq-len",
        "8",
        "--steps",
        steps,
        "--batch-size",
        "4",
        "--d-model",
        "16",
        "--n-heads",
        "2",
        "--n-layers",
        "1",
        "--d-ff",
        "32",
        "--eval-every",
        "3",
        "--eval-sequences",
        "8",
        "--warmup-steps",
        "1",
        "--quiet",
        "--no-plots",
        "--out",
        out,
    ]
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temp path")
}

#[test]
fn a_text_run_writes_its_tokenizer_and_samples_generates_and_resumes_without_its_file() {
    let dir = temp_dir("run");
    let data = dir.join("animals.txt");
    std::fs::write(&data, animals(400)).expect("writes");
    let out = dir.join("run");
    let output = run(&tiny_run(path(&data), path(&out), "6"));
    assert!(output.status.success(), "{}", stderr(&output));
    let summary: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("a JSON summary");
    assert_eq!(summary["task"], "text");
    let loss = summary["final"]["loss"].as_f64().expect("a loss");
    // An untrained model over 13 tokens scores about ln 13 = 2.56 nats; a few steps lower it.
    assert!(loss > 0.0 && loss < 3.5, "{loss}");

    for file in [
        "tokenizer.json",
        "tokens/train.u32",
        "tokens/validation.u32",
    ] {
        assert!(out.join(file).is_file(), "{file}");
    }
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("config.json")).expect("config.json"),
    )
    .expect("JSON");
    // <unk>, the space and the 11 letters of the four words.
    assert_eq!(config["task"]["vocab"], 13);
    let manifest = std::fs::read_to_string(out.join("manifest.json")).expect("manifest");
    assert!(manifest.contains("tokenizer.json") && manifest.contains("samples.txt"));
    // One sample per evaluation (steps 3 and 6), 200 characters of the run's alphabet.
    let samples = std::fs::read_to_string(out.join("samples.txt")).expect("samples.txt");
    assert_eq!(samples.matches("--- step ").count(), 2, "{samples}");
    let last = samples.split("--- step 6 ---\n").nth(1).expect("step 6");
    assert!(
        last.trim_end_matches('\n').chars().count() >= 190,
        "{last:?}"
    );

    // Generation streams text past the 8-token window; the same seed writes the same text.
    let generate = |seed: &str| {
        run(&[
            "generate",
            path(&out),
            "--prompt",
            "cat dog ",
            "--max-new-tokens",
            "40",
            "--seed",
            seed,
        ])
    };
    let first = generate("1");
    assert!(first.status.success(), "{}", stderr(&first));
    let text = String::from_utf8_lossy(&first.stdout).into_owned();
    let line = text
        .strip_suffix('\n')
        .expect("ends its text with a newline");
    // 40 tokens: characters, or <unk> for the id of none.
    let tokens = line.replace("<unk>", "?");
    assert_eq!(tokens.chars().count(), 40, "{text:?}");
    assert!(
        tokens.chars().all(|c| "catdogemupig ?".contains(c)),
        "{text:?}"
    );
    assert_eq!(generate("1").stdout, first.stdout);

    // The run keeps its tokenizer and ids: it resumes after its text file has gone away.
    std::fs::rename(&data, dir.join("moved.txt")).expect("moves");
    let resumed = run(&[
        "resume",
        path(&out),
        "--steps",
        "9",
        "--quiet",
        "--no-plots",
    ]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let summary: serde_json::Value =
        serde_json::from_slice(&resumed.stdout).expect("a JSON summary");
    assert_eq!(summary["steps"], 9);
    assert_eq!(summary["resumed_from"], 6);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_trained_bpe_tokenizer_and_a_tokenizer_file_both_train() {
    let dir = temp_dir("bpe");
    let data = dir.join("animals.txt");
    std::fs::write(&data, animals(2000)).expect("writes");
    let out = dir.join("bpe");
    let mut args = tiny_run(path(&data), path(&out), "3");
    args.extend(["--tokenizer", "bpe:300"]);
    let output = run(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    // The 256 bytes and the merges the four words allow (fewer than 300).
    let config = std::fs::read_to_string(out.join("config.json")).expect("config.json");
    let config: serde_json::Value = serde_json::from_str(&config).expect("JSON");
    let vocab = config["task"]["vocab"].as_u64().expect("vocab");
    assert!((257..=300).contains(&vocab), "{vocab}");

    // That run's tokenizer.json, given as a file to another run.
    let tokenizer = out.join("tokenizer.json");
    let again = dir.join("again");
    let mut args = tiny_run(path(&data), path(&again), "3");
    args.extend(["--tokenizer", path(&tokenizer)]);
    let output = run(&args);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        std::fs::read(again.join("tokens/train.u32")).expect("ids"),
        std::fs::read(out.join("tokens/train.u32")).expect("ids"),
        "the same tokenizer encodes the same text to the same ids"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bad_texts_are_refused_naming_the_file_and_what_is_wrong() {
    let dir = temp_dir("bad");
    let cases: [(&str, &[u8], &str); 4] = [
        ("empty.txt", b"", "is empty"),
        ("binary.dat", b"GIF89a\x01\x00\x00\x00", "looks binary"),
        (
            "latin1.txt",
            b"caf\xe9 au lait, caf\xe9 au lait\n",
            "not valid UTF-8 at byte offset 3",
        ),
        ("short.txt", b"a few words\n", "fewer than one window"),
    ];
    for (name, bytes, expected) in cases {
        let data = dir.join(name);
        std::fs::write(&data, bytes).expect("writes");
        let out = dir.join(format!("out-{name}"));
        let output = run(&tiny_run(path(&data), path(&out), "3"));
        assert!(!output.status.success(), "{name} was accepted");
        let message = stderr(&output);
        assert!(message.contains(expected), "{name}: {message}");
        assert!(
            message.contains(name) || name == "short.txt",
            "{name}: {message}"
        );
    }

    // --lossy reads the Latin-1 bytes as U+FFFD and trains.
    let latin1 = dir.join("latin1-long.txt");
    std::fs::write(&latin1, b"caf\xe9 au lait, ".repeat(40)).expect("writes");
    let out = dir.join("lossy");
    let mut args = tiny_run(path(&latin1), path(&out), "3");
    args.push("--lossy");
    let output = run(&args);
    assert!(output.status.success(), "{}", stderr(&output));

    // A FIFO is not read (it would block), and text flags need the text task.
    let output = run(&tiny_run("/dev/null", path(&dir.join("null")), "3"));
    assert!(
        stderr(&output).contains("/dev/null is not a regular file"),
        "{}",
        stderr(&output)
    );
    // A run that failed before its first step leaves no folder behind, so the same --out
    // works next time without --overwrite.
    assert!(!dir.join("null").exists(), "the failed run left its folder");
    // Into a folder the user made, it leaves the folder as it was, empty.
    let made = dir.join("made");
    std::fs::create_dir_all(&made).expect("a folder");
    let output = run(&tiny_run("/dev/null", path(&made), "3"));
    assert!(!output.status.success());
    assert_eq!(
        std::fs::read_dir(&made).expect("kept").count(),
        0,
        "the failed run left files in {}",
        made.display()
    );
    let output = run(&[
        "train",
        "--task",
        "copy",
        "--data",
        path(&latin1),
        "--quiet",
    ]);
    assert!(
        stderr(&output).contains("--data is for the text task, not copy"),
        "{}",
        stderr(&output)
    );
    let output = run(&[
        "train",
        "--task",
        "text",
        "--quiet",
        "--out",
        path(&dir.join("none")),
    ]);
    assert!(
        stderr(&output).contains("give --data FILE"),
        "{}",
        stderr(&output)
    );
    std::fs::remove_dir_all(dir).ok();
}
