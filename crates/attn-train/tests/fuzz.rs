//! Fuzz tests of the files a run reads back: the run's `config.json`, `metrics.csv` and
//! `timings.csv`, the text task's `tokenizer.json` (the run's own and Hugging Face's), its
//! token files and its corpus, and a checkpoint's `manifest.json`, `state.json` and burn
//! records. Real files come from two tiny runs trained through the library ([`train::run`]) (a `text` run and a
//! `reverse` run) and from the Hugging Face test folders; each case mutates one (bytes flipped,
//! truncated, spliced; JSON values made huge, negative, overflowing or of the wrong type; keys
//! duplicated; values nested deep) and reads it back, which must give `Ok` or a typed error
//! naming the file, never a panic, an abort or an allocation without bound.
//!
//! `ATTN_FUZZ_CASES` sets the cases of the fast readers (a checkpoint load runs a tenth of
//! them; corpora, token files, tokenizers and checkpoint manifests a quarter), `ATTN_FUZZ_SEED`
//! the seed:
//! `ATTN_FUZZ_CASES=50000 ATTN_TEST_DEVICES=flex cargo test --workspace --test fuzz`

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use attn_testing::mutate::{self, Mutated};
use attn_train::checkpoint;
use attn_train::config::{Overrides, TrainConfig};
use attn_train::metrics::MetricsLog;
use attn_train::model::Model;
use attn_train::text::{TextData, TextTokenizer, TokenizerChoice};
use attn_train::train::{self, RunOptions};
use clap::Parser;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use sha2::{Digest, Sha256};

/// A checkpoint load costs about ten fast cases.
const LOAD_SHARE: u32 = 10;

/// A corpus is tokenized and split, a checkpoint's files hashed twice, a tokenizer built: each
/// costs about four fast cases.
const TEXT_SHARE: u32 = 4;

/// The sequence length of the text run.
const SEQ_LEN: usize = 8;

/// The training flags, parsed as `attn train` parses them.
#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    overrides: Overrides,
}

/// The two tiny runs every test mutates the files of, made once.
struct Runs {
    /// A `text` run: `config.json`, `metrics.csv`, `tokenizer.json`, `tokens/`.
    text: PathBuf,
    /// Its corpus.
    corpus: PathBuf,
    /// A `reverse` run with one checkpoint, `checkpoints/step-000002`.
    reverse: PathBuf,
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("attn-train-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("a scratch folder");
        let corpus = root.join("corpus.txt");
        std::fs::write(
            &corpus,
            "the cat sat on the mat; the dog ate the log. ".repeat(40),
        )
        .expect("a corpus");
        let device = attn_testing::devices()
            .into_iter()
            .next()
            .expect("a test device")
            .name;
        let text = root.join("text");
        let reverse = root.join("reverse");
        let seq_len = SEQ_LEN.to_string();
        let common = [
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--d-model",
            "8",
            "--n-heads",
            "2",
            "--n-layers",
            "1",
            "--d-ff",
            "12",
            "--eval-every",
            "1",
            "--eval-sequences",
            "4",
            "--warmup-steps",
            "1",
            "--checkpoint-seconds",
            "0",
            "--device",
            device,
        ];
        let corpus_arg = corpus.display().to_string();
        for (args, out) in [
            (
                vec![
                    "--task",
                    "text",
                    "--data",
                    &corpus_arg,
                    "--seq-len",
                    &seq_len,
                ],
                &text,
            ),
            (
                vec!["--task", "reverse", "--seq-len", "5", "--vocab", "3"],
                &reverse,
            ),
        ] {
            let flags = Flags::try_parse_from(std::iter::once("train").chain(args).chain(common))
                .expect("the flags parse");
            let mut config = TrainConfig::default();
            config.apply(&flags.overrides).expect("the flags apply");
            let options = RunOptions {
                out: Some(out.clone()),
                skip_plots: true,
                ..RunOptions::default()
            };
            if let Err(error) = train::run(&config, &options) {
                panic!("{}: {error}", out.display());
            }
        }
        Runs {
            text,
            corpus,
            reverse,
        }
    })
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_text(path: &Path) -> String {
    String::from_utf8(read(path)).expect("UTF-8")
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// A copy of `files` of `from` in a fresh folder `name`, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn copy(name: &str, from: &Path, files: &[&str]) -> Self {
        let dir =
            std::env::temp_dir().join(format!("attn-train-fuzz-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for file in files {
            let to = dir.join(file);
            std::fs::create_dir_all(to.parent().expect("a folder")).expect("a folder");
            std::fs::copy(from.join(file), &to).expect("a copy");
        }
        std::fs::create_dir_all(&dir).expect("a folder");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `test` on the cases of `strategy`, failing with the minimal failing case.
fn fuzz<S: Strategy>(share: u32, strategy: S, test: impl Fn(S::Value))
where
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(mutate::config(share));
    let result = runner.run(&strategy, |value| {
        test(value);
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// An error's message: not empty, and naming `path`.
#[track_caller]
fn assert_names(err: &impl Display, path: &Path, what: &str) {
    let message = err.to_string();
    assert!(
        message.contains(&path.display().to_string()),
        "{what}: `{message}` does not name {}",
        path.display()
    );
}

/// JSON edits of `text`, and now and then byte edits of it.
fn json_or_bytes(text: &str) -> impl Strategy<Value = Mutated<Vec<u8>>> + use<> {
    let json = mutate::json(text).prop_map(|m| Mutated {
        value: m.value.into_bytes(),
        what: m.what,
    });
    prop_oneof![4 => json, 1 => mutate::bytes(text.as_bytes().to_vec())]
}

#[test]
fn run_config_reads_or_is_refused_naming_the_file() {
    let scratch = Scratch::copy("config", &runs().text, &["config.json"]);
    let path = scratch.0.join("config.json");
    let original = read_text(&path);
    fuzz(1, json_or_bytes(&original), |mutated| {
        write(&path, &mutated.value);
        match TrainConfig::from_file(&path) {
            Err(err) => assert_names(&err, &path, &mutated.what),
            Ok(config) => match config.validate() {
                // What validates has the sizes a run needs.
                Ok(()) => assert!(
                    config.steps >= 1
                        && config.batch_size >= 1
                        && config.model.n_layers >= 1
                        && config.task.seq_len >= 2,
                    "{}: {config:?}",
                    mutated.what
                ),
                Err(err) => assert!(!err.to_string().is_empty(), "{}", mutated.what),
            },
        }
    });
}

#[test]
fn metrics_csv_reads_or_is_refused_naming_the_file() {
    let scratch = Scratch::copy("metrics", &runs().text, &["metrics.csv", "timings.csv"]);
    let metrics = scratch.0.join("metrics.csv");
    let timings = scratch.0.join("timings.csv");
    let originals = [read(&metrics), read(&timings)];
    let cases = any::<bool>().prop_flat_map(move |which| {
        mutate::bytes(originals[usize::from(which)].clone()).prop_map(move |m| (which, m))
    });
    let originals = [read(&metrics), read(&timings)];
    fuzz(1, cases, |(which, mutated)| {
        let (path, other) = if which {
            (&timings, &metrics)
        } else {
            (&metrics, &timings)
        };
        write(path, &mutated.value);
        write(other, &originals[usize::from(!which)]);
        match MetricsLog::read_csv(&metrics) {
            Err(err) => assert_names(&err, path, &mutated.what),
            Ok(log) => {
                let lines = read(&metrics).split(|&b| b == b'\n').count();
                assert!(log.rows.len() <= lines, "{}", mutated.what);
            }
        }
    });
}

/// The tokenizers mutated: the text run's own, and Hugging Face's GPT-2 and Llama ones.
fn tokenizer_files() -> Vec<PathBuf> {
    let hf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../attn-model/tests/data/hf");
    vec![
        runs().text.join("tokenizer.json"),
        hf.join("gpt2_tiny/tokenizer.json"),
        hf.join("llama_tiny/tokenizer.json"),
    ]
}

#[test]
fn tokenizer_json_reads_or_is_refused_naming_the_file() {
    let scratch = Scratch::copy("tokenizer", &runs().text, &[]);
    let files = tokenizer_files();
    let strategies: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, file)| {
            json_or_bytes(&read_text(file))
                .prop_map(move |m| (i, m))
                .boxed()
        })
        .collect();
    let path = scratch.0.join("tokenizer.json");
    fuzz(
        TEXT_SHARE,
        proptest::strategy::Union::new(strategies),
        |(i, mutated)| {
            write(&path, &mutated.value);
            let what = format!("{}: {}", files[i].display(), mutated.what);
            match TextTokenizer::read(&path) {
                Err(err) => assert_names(&err, &path, &what),
                Ok(tokenizer) => {
                    // A tokenizer that reads encodes and decodes, or says why not.
                    let vocab = tokenizer.vocab_size();
                    match tokenizer.encode("the cat sat, é 猫 \u{0}") {
                        Ok(ids) => {
                            for &id in &ids {
                                let _ = tokenizer.token_name(id as usize);
                            }
                            if let Err(err) = tokenizer.decode(&ids) {
                                assert!(!err.to_string().is_empty(), "{what}");
                            }
                            let _ = tokenizer.decode(&[u32::MAX, vocab as u32]);
                        }
                        Err(err) => assert!(!err.to_string().is_empty(), "{what}"),
                    }
                }
            }
        },
    );
}

#[test]
fn token_files_read_or_are_refused_naming_the_file() {
    let files = [
        "tokenizer.json",
        "tokens/train.u32",
        "tokens/validation.u32",
    ];
    let scratch = Scratch::copy("tokens", &runs().text, &files);
    let originals: Vec<Vec<u8>> = files[1..]
        .iter()
        .map(|f| read(&scratch.0.join(f)))
        .collect();
    let cases = (0..2usize).prop_flat_map({
        let originals = originals.clone();
        move |i| mutate::bytes(originals[i].clone()).prop_map(move |m| (i, m))
    });
    fuzz(TEXT_SHARE, cases, |(i, mutated)| {
        let path = scratch.0.join(files[1 + i]);
        write(&path, &mutated.value);
        write(&scratch.0.join(files[2 - i]), &originals[1 - i]);
        match TextData::open(&scratch.0, SEQ_LEN) {
            Err(err) => {
                let message = err.to_string();
                assert!(
                    message.contains(&path.display().to_string())
                        || message.contains("fewer than one window"),
                    "{}: {message}",
                    mutated.what
                );
            }
            Ok(data) => {
                let vocab = data.tokenizer.vocab_size();
                for tokens in [&data.train, &data.validation] {
                    assert!(tokens.len() > SEQ_LEN, "{}", mutated.what);
                    assert!(
                        (0..tokens.len()).all(|j| (tokens.get(j) as usize) < vocab),
                        "{}",
                        mutated.what
                    );
                }
            }
        }
    });
}

#[test]
fn corpora_are_read_or_refused_naming_the_file() {
    let scratch = Scratch::copy("corpus", runs().corpus.parent().expect("a folder"), &[]);
    let path = scratch.0.join("corpus.txt");
    let original = read(&runs().corpus);
    fuzz(
        TEXT_SHARE,
        (mutate::bytes(original), any::<bool>()),
        |(mutated, lossy)| {
            write(&path, &mutated.value);
            let prepared = TextData::prepare(
                std::slice::from_ref(&path),
                lossy,
                &TokenizerChoice::Char,
                SEQ_LEN,
                None,
            );
            match prepared {
                Err(err) => {
                    let message = err.to_string();
                    assert!(
                        message.contains(&path.display().to_string())
                            || message.contains("fewer than one window"),
                        "{}: {message}",
                        mutated.what
                    );
                }
                Ok(data) => {
                    assert!(data.train.len() > SEQ_LEN, "{}", mutated.what);
                    assert!(data.validation.len() > SEQ_LEN, "{}", mutated.what);
                }
            }
        },
    );
}

/// The reverse run's checkpoint, copied: its folder and the files in it.
fn checkpoint_copy(name: &str) -> (Scratch, PathBuf) {
    let step = "checkpoints/step-000002";
    let files: Vec<String> = checkpoint::FILES
        .iter()
        .map(|f| format!("{step}/{f}"))
        .chain(["config.json".to_string()])
        .collect();
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    let scratch = Scratch::copy(name, &runs().reverse, &files);
    let dir = scratch.0.join(step);
    (scratch, dir)
}

/// `manifest.json` of `dir` with `file`'s size and SHA-256 recomputed, so that a mutation of
/// `file` passes the checksums and reaches its reader.
fn reseal(dir: &Path, file: &str) {
    let path = dir.join("manifest.json");
    let mut manifest: serde_json::Value = serde_json::from_str(&read_text(&path)).expect("JSON");
    let bytes = read(&dir.join(file));
    let digest: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    for record in manifest["files"].as_array_mut().expect("a list") {
        if record["name"] == file {
            record["size"] = serde_json::Value::from(bytes.len());
            record["sha256"] = serde_json::Value::from(digest.clone());
        }
    }
    write(&path, manifest.to_string());
}

#[test]
fn checkpoint_manifest_and_state_verify_or_are_refused_naming_the_file() {
    let (scratch, dir) = checkpoint_copy("manifest");
    let manifest = dir.join("manifest.json");
    let state = dir.join("state.json");
    let originals = [read(&manifest), read(&state)];
    let cases = prop_oneof![
        json_or_bytes(&read_text(&manifest)).prop_map(|m| (false, m)),
        json_or_bytes(&read_text(&state)).prop_map(|m| (true, m)),
    ];
    fuzz(TEXT_SHARE, cases, |(in_state, mutated)| {
        write(&manifest, &originals[0]);
        write(&state, &originals[1]);
        if in_state {
            write(&state, &mutated.value);
            reseal(&dir, "state.json");
        } else {
            write(&manifest, &mutated.value);
        }
        match checkpoint::verify(&dir) {
            // What verifies is the checkpoint of the step its folder names.
            Ok(step) => assert_eq!(step, 2, "{}", mutated.what),
            Err(err) => assert_names(&err, &dir, &mutated.what),
        }
        match checkpoint::newest_intact(&scratch.0) {
            Ok((path, _)) => assert_eq!(path, dir, "{}", mutated.what),
            Err(err) => assert_names(&err, &dir, &mutated.what),
        }
    });
}

#[test]
fn checkpoint_records_and_state_load_or_are_refused_naming_the_file() {
    let (scratch, dir) = checkpoint_copy("records");
    let config = TrainConfig::from_file(&scratch.0.join("config.json")).expect("the run's config");
    let device = attn_testing::devices()
        .into_iter()
        .next()
        .expect("a test device")
        .device;
    let files = ["model.bpk", "optimizer.bpk", "scheduler.bpk", "state.json"];
    let originals: Vec<Vec<u8>> = files.iter().map(|f| read(&dir.join(f))).collect();
    let strategies: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, file)| {
            let cases = if file.ends_with(".json") {
                json_or_bytes(&read_text(&dir.join(file))).boxed()
            } else {
                mutate::bytes(originals[i].clone()).boxed()
            };
            cases.prop_map(move |m| (i, m)).boxed()
        })
        .collect();
    fuzz(
        LOAD_SHARE,
        proptest::strategy::Union::new(strategies),
        |(i, mutated)| {
            for (file, original) in files.iter().zip(&originals) {
                write(&dir.join(file), original);
            }
            let path = dir.join(files[i]);
            write(&path, &mutated.value);
            let what = format!("{}: {}", files[i], mutated.what);
            let model = Model::init(&config, &device).expect("the run's model");
            let loaded = checkpoint::load(
                &dir,
                model,
                attn_train::train::optimizer(&config.optim),
                &config.schedule(),
                &config.identity(),
            );
            match loaded {
                Ok(loaded) => assert_eq!(loaded.path, dir, "{what}"),
                Err(err) => assert_names(&err, &dir, &what),
            }
        },
    );
}
