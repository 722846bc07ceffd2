//! Fuzz tests of the Hugging Face folder readers: the real tiny folders under `tests/data/hf`,
//! mutated (bytes flipped, truncated, spliced; JSON values made huge, negative, overflowing or
//! of the wrong type; keys duplicated; values nested deep), must load or fail with a typed
//! error, never panic, abort or allocate without bound.
//!
//! Readers: `config.json` of GPT-2, BERT and the Llama family (read, checked and loaded onto
//! the weights), `model.safetensors` (its 8-byte header length, its JSON header, its bytes),
//! a pickled PyTorch file, `model.safetensors.index.json` (and shards holding a tensor the
//! index assigns elsewhere), chat templates with
//! `tokenizer_config.json`, and `generation_config.json`. Templates that loop, recurse or grow
//! without end must stop at the renderer's bounds; chains of operators among brackets and
//! strings that hold `}}` must be refused past their bound and render below it.
//!
//! `ATTN_FUZZ_CASES` sets the cases of the fast readers (the model loads run half of them, the
//! shard indexes a quarter), `ATTN_FUZZ_SEED` the seed:
//! `ATTN_FUZZ_CASES=50000 ATTN_TEST_DEVICES=flex cargo test --workspace --test fuzz`

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use attn_model::hf::{
    Bert, BertConfig, CHAT_MAX_CHAIN, CHAT_PROMPT_MAX_BYTES, CHAT_TEMPLATE_FILE, CONFIG_FILE,
    CausalLm, ChatError, ChatMessage, ChatTemplate, GENERATION_CONFIG_FILE, GenerationDefaults,
    Gpt2, Gpt2Config, LlamaConfig, SHARD_INDEX_FILE, SpecialTokens, TOKENIZER_CONFIG_FILE,
    read_config, read_llama_weights, read_weights,
};
use attn_model::{ModelError, StateDict};
use attn_testing::mutate::{self, Mutated};
use burn::tensor::Device;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestRunner;
use serde_json::Value;

/// A model load costs about two fast cases.
const MODEL_SHARE: u32 = 2;

/// A shard index reads ten weight files: it costs about four fast cases.
const SHARD_SHARE: u32 = 4;

fn data(model: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/hf")
        .join(model)
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

/// A fresh folder under the system's temporary folder, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("attn-model-fuzz-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        Self(dir)
    }

    /// A sub-folder holding copies of `files` of the test folder `model`.
    fn folder(&self, name: &str, model: &str, files: &[&str]) -> PathBuf {
        let dir = self.0.join(name);
        std::fs::create_dir_all(&dir).expect("a scratch folder");
        for file in files {
            std::fs::copy(data(model).join(file), dir.join(file)).expect("a copy");
        }
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The device models load onto: the first test device (loading is the same on every one).
fn device() -> Device {
    attn_testing::devices()
        .into_iter()
        .next()
        .expect("at least one test device")
        .device
}

/// Runs `test` on `config`'s cases of `strategy`, failing with the minimal failing case.
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

/// An error's message: not empty, and naming `path` where the reader promises it.
#[track_caller]
fn assert_message(err: &impl Display, path: Option<&Path>, what: &str) {
    let message = err.to_string();
    assert!(!message.trim().is_empty(), "{what}: an empty message");
    if let Some(path) = path {
        assert!(
            message.contains(&path.display().to_string()),
            "{what}: `{message}` does not name {}",
            path.display()
        );
    }
}

/// Where a [`ModelError`] promises to name a file: a `config.json` or index that cannot be
/// read or parsed, and a weight file that cannot be.
fn named_path(err: &ModelError) -> Option<&str> {
    match err {
        ModelError::Config(attn_model::ConfigError::Read { path, .. }) => Some(path),
        ModelError::File(err) => err.path().to_str(),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// config.json

#[derive(Clone, Copy, Debug)]
enum Family {
    Gpt2,
    Bert,
    Llama,
}

const CONFIG_FOLDERS: [(&str, Family); 6] = [
    ("gpt2_tiny", Family::Gpt2),
    ("bert_tiny", Family::Bert),
    ("llama_tiny", Family::Llama),
    ("qwen2_tiny", Family::Llama),
    ("qwen3_tiny", Family::Llama),
    ("mistral_tiny", Family::Llama),
];

/// A mutated `config.json` of one of [`CONFIG_FOLDERS`].
fn config_cases() -> impl Strategy<Value = (usize, Mutated<String>)> {
    let per_folder: Vec<_> = CONFIG_FOLDERS
        .iter()
        .enumerate()
        .map(|(i, (model, _))| {
            let text = read_text(&data(model).join(CONFIG_FILE));
            mutate::json(&text).prop_map(move |m| (i, m)).boxed()
        })
        .collect();
    proptest::strategy::Union::new(per_folder)
}

/// Reads the folder's `config.json` as `family` and, when it reads, builds the model from
/// `dict`; checks that a model that loads fits the weights as the loaders promise.
fn load_config(family: Family, dir: &Path, dict: &StateDict, device: &Device, what: &str) {
    let config_path = dir.join(CONFIG_FILE);
    let fits = |described: Option<u64>| {
        assert!(
            described.is_some_and(|n| n <= dict.values().saturating_mul(2)),
            "{what}: loaded a configuration of {described:?} parameters onto {} values",
            dict.values()
        );
    };
    let check_err = |err: ModelError| {
        assert_message(&err, None, what);
        if let Some(path) = named_path(&err) {
            assert_eq!(path, config_path.display().to_string(), "{what}");
        }
    };
    match family {
        Family::Gpt2 => match read_config::<Gpt2Config>(dir) {
            Err(err) => check_err(err),
            Ok(config) => match Gpt2::from_state_dict(&config, dict, device) {
                Ok(_) => fits(config.parameters()),
                Err(err) => check_err(err),
            },
        },
        Family::Bert => match read_config::<BertConfig>(dir) {
            Err(err) => check_err(err),
            Ok(config) => match Bert::from_state_dict(&config, dict, device) {
                Ok(bert) => {
                    fits(config.parameters());
                    assert_eq!(bert.d_model(), config.hidden_size, "{what}");
                }
                Err(err) => check_err(err),
            },
        },
        Family::Llama => match read_config::<LlamaConfig>(dir) {
            Err(err) => check_err(err),
            Ok(config) => {
                let settings = match config.settings() {
                    Ok(settings) => settings,
                    Err(err) => return check_err(err),
                };
                assert!(
                    settings.head_dim > 0 || config.head_dim == Some(0),
                    "{what}"
                );
                match CausalLm::from_state_dict(&config, dict, device) {
                    Ok(_) => {
                        fits(config.parameters(&settings));
                        assert!(settings.n_kv_heads > 0 && settings.head_dim > 0, "{what}");
                    }
                    Err(err) => check_err(err),
                }
            }
        },
    }
}

#[test]
fn config_json_of_every_architecture_loads_or_is_refused() {
    let scratch = Scratch::new("config");
    let device = device();
    let folders: Vec<(PathBuf, Family, StateDict)> = CONFIG_FOLDERS
        .iter()
        .map(|(model, family)| {
            let dict = read_llama_weights(&data(model)).expect("the test folder's weights");
            (scratch.folder(model, model, &[]), *family, dict)
        })
        .collect();
    fuzz(MODEL_SHARE, config_cases(), |(i, mutated)| {
        let (dir, family, dict) = &folders[i];
        write(&dir.join(CONFIG_FILE), &mutated.value);
        let what = format!("{}: {}", CONFIG_FOLDERS[i].0, mutated.what);
        load_config(*family, dir, dict, &device, &what);
    });
}

#[test]
fn config_json_of_every_architecture_reads_or_is_refused() {
    // The same mutations through the readers and checks alone, at ten times the cases.
    let scratch = Scratch::new("config-read");
    let dirs: Vec<PathBuf> = CONFIG_FOLDERS
        .iter()
        .map(|(model, _)| scratch.folder(model, model, &[]))
        .collect();
    fuzz(1, config_cases(), |(i, mutated)| {
        let dir = &dirs[i];
        let path = dir.join(CONFIG_FILE);
        write(&path, &mutated.value);
        let what = format!("{}: {}", CONFIG_FOLDERS[i].0, mutated.what);
        let checked = match CONFIG_FOLDERS[i].1 {
            Family::Gpt2 => read_config::<Gpt2Config>(dir).and_then(|c| {
                Gpt2::decoder_config(&c)?.validate()?;
                Ok(c.parameters())
            }),
            Family::Bert => read_config::<BertConfig>(dir).and_then(|c| {
                c.check()?;
                Ok(c.parameters())
            }),
            Family::Llama => read_config::<LlamaConfig>(dir).and_then(|c| {
                let settings = c.settings()?;
                CausalLm::decoder_config(&c)?.validate()?;
                Ok(c.parameters(&settings))
            }),
        };
        if let Err(err) = checked {
            assert_message(&err, None, &what);
            if let Some(named) = named_path(&err) {
                assert_eq!(named, path.display().to_string(), "{what}");
            }
        }
    });
}

// ---------------------------------------------------------------------------------------------
// model.safetensors

/// The header length of a safetensors file, and its JSON header.
fn safetensors_header(bytes: &[u8]) -> (usize, String) {
    let len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header = String::from_utf8(bytes[8..8 + len].to_vec()).expect("a UTF-8 header");
    (len, header)
}

/// `original` with its header replaced by `header` (and the length field with its length).
fn with_header(original: &[u8], header: &str) -> Vec<u8> {
    let (len, _) = safetensors_header(original);
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&original[8 + len..]);
    bytes
}

/// A safetensors file mutated in its length field, its JSON header (shapes, dtypes, offsets),
/// or its bytes.
fn safetensors_cases(original: Vec<u8>) -> impl Strategy<Value = Mutated<Vec<u8>>> {
    let original = Arc::new(original);
    let (len, header) = safetensors_header(&original);
    let lengths = prop_oneof![
        Just(0u64),
        Just(1),
        Just(7),
        Just(len as u64 - 1),
        Just(len as u64 + 1),
        Just(original.len() as u64),
        Just(original.len() as u64 - 8),
        Just(100_000_001),
        Just(1 << 32),
        Just(1 << 63),
        Just(u64::MAX),
        any::<u64>(),
    ];
    let in_length = {
        let original = Arc::clone(&original);
        lengths.prop_map(move |n| {
            let mut bytes = original.as_ref().clone();
            bytes[..8].copy_from_slice(&n.to_le_bytes());
            Mutated {
                value: bytes,
                what: format!("header length set to {n}"),
            }
        })
    };
    let in_header = {
        let original = Arc::clone(&original);
        mutate::json(&header).prop_map(move |m| Mutated {
            value: with_header(&original, &m.value),
            what: format!("header: {}", m.what),
        })
    };
    prop_oneof![
        2 => in_length,
        5 => in_header,
        3 => mutate::bytes(original.as_ref().clone()),
    ]
}

/// Reads every tensor of `dict` of rank 1 to 4 at its stored shape.
fn read_every_tensor(dict: &StateDict, device: &Device, what: &str) {
    let names: Vec<String> = dict.names().map(str::to_string).collect();
    for name in names {
        let shape = dict.shape(&name).expect("a listed tensor").to_vec();
        let read = match shape.len() {
            1 => dict
                .tensor::<1>(&name, [shape[0]], device)
                .map(|t| t.dims().to_vec()),
            2 => dict
                .tensor::<2>(&name, [shape[0], shape[1]], device)
                .map(|t| t.dims().to_vec()),
            3 => dict
                .tensor::<3>(&name, [shape[0], shape[1], shape[2]], device)
                .map(|t| t.dims().to_vec()),
            4 => dict
                .tensor::<4>(&name, [shape[0], shape[1], shape[2], shape[3]], device)
                .map(|t| t.dims().to_vec()),
            _ => continue,
        };
        match read {
            Ok(dims) => assert_eq!(dims, shape, "{what}: `{name}`"),
            Err(err) => assert_message(&err, None, what),
        }
    }
}

#[test]
fn safetensors_files_load_or_are_refused() {
    let scratch = Scratch::new("safetensors");
    let device = device();
    let cases = [("gpt2_tiny", Family::Gpt2), ("llama_tiny", Family::Llama)];
    let folders: Vec<PathBuf> = cases
        .iter()
        .map(|(model, _)| scratch.folder(model, model, &[CONFIG_FILE]))
        .collect();
    let strategies: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(i, (model, _))| {
            let bytes = read(&data(model).join("model.safetensors"));
            safetensors_cases(bytes).prop_map(move |m| (i, m)).boxed()
        })
        .collect();
    fuzz(
        MODEL_SHARE,
        proptest::strategy::Union::new(strategies),
        |(i, mutated)| {
            let dir = &folders[i];
            let path = dir.join("model.safetensors");
            write(&path, &mutated.value);
            let what = format!("{}: {}", cases[i].0, mutated.what);
            match read_weights(dir) {
                Err(err) => {
                    assert!(matches!(err, ModelError::Load { .. }), "{what}: {err}");
                    assert_message(&err, Some(&path), &what);
                }
                Ok(dict) => {
                    read_every_tensor(&dict, &device, &what);
                    let loaded = match cases[i].1 {
                        Family::Gpt2 => Gpt2::from_pretrained(dir, &device).map(|_| ()),
                        _ => CausalLm::from_pretrained(dir, &device).map(|_| ()),
                    };
                    if let Err(err) = loaded {
                        assert_message(&err, None, &what);
                    }
                }
            }
        },
    );
}

#[test]
fn safetensors_bytes_parse_or_are_refused() {
    // The in-memory parser alone, at ten times the cases of the loads above.
    let device = device();
    let original = read(&data("gpt2_tiny").join("model.safetensors"));
    fuzz(1, safetensors_cases(original), |mutated| {
        match StateDict::from_safetensors(&mutated.value) {
            Err(err) => assert_message(&err, None, &mutated.what),
            Ok(dict) => {
                // The header's offsets lie inside the file, so it holds no more values than
                // bytes; and every tensor reads.
                let stored = dict.values();
                assert!(
                    stored <= mutated.value.len() as u64,
                    "{}: {stored} values in {} bytes",
                    mutated.what,
                    mutated.value.len()
                );
                read_every_tensor(&dict, &device, &mutated.what);
            }
        }
    });
}

// ---------------------------------------------------------------------------------------------
// PyTorch pickles

#[test]
fn pytorch_pickles_load_or_are_refused() {
    let scratch = Scratch::new("pickle");
    let device = device();
    let original = read(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/encoder_layer_relu_post_norm.pt"),
    );
    let dir = scratch.0.join("bin");
    std::fs::create_dir_all(&dir).expect("a folder");
    let path = dir.join("pytorch_model.bin");
    fuzz(1, mutate::bytes(original), |mutated| {
        write(&path, &mutated.value);
        match read_weights(&dir) {
            Err(err) => {
                assert!(
                    matches!(err, ModelError::Load { .. }),
                    "{}: {err}",
                    mutated.what
                );
                assert_message(&err, Some(&path), &mutated.what);
            }
            Ok(dict) => read_every_tensor(&dict, &device, &mutated.what),
        }
    });
}

// ---------------------------------------------------------------------------------------------
// model.safetensors.index.json

/// Shard names a hostile index may list.
const HOSTILE_SHARDS: [&str; 12] = [
    "../mistral_tiny/model-00001-of-00010.safetensors",
    "/etc/passwd",
    "..",
    ".",
    "",
    "model.safetensors.index.json",
    "config.json",
    "model-00001-of-00010.safetensors/",
    "a\\b.safetensors",
    "shard\u{0}.safetensors",
    "model-99999-of-00010.safetensors",
    "C:model.safetensors",
];

/// The mistral folder's index, mutated: any JSON edit, one tensor moved to a hostile shard
/// name, or many tensors added that no shard holds.
fn index_cases(original: String) -> impl Strategy<Value = Mutated<String>> {
    let index: Arc<Value> = Arc::new(serde_json::from_str(&original).expect("an index"));
    let names: Arc<Vec<String>> = Arc::new(
        index["weight_map"]
            .as_object()
            .expect("a weight map")
            .keys()
            .cloned()
            .collect(),
    );
    let moved = {
        let (index, names) = (Arc::clone(&index), Arc::clone(&names));
        (any::<Index>(), 0..HOSTILE_SHARDS.len()).prop_map(move |(name, shard)| {
            let name = name.get(&names);
            let mut index = index.as_ref().clone();
            index["weight_map"][name] = Value::from(HOSTILE_SHARDS[shard]);
            Mutated {
                value: index.to_string(),
                what: format!("`{name}` placed in {:?}", HOSTILE_SHARDS[shard]),
            }
        })
    };
    let added = {
        let index = Arc::clone(&index);
        prop_oneof![9 => 1..1000usize, 1 => 50_000..100_000usize].prop_map(move |count| {
            let mut index = index.as_ref().clone();
            let map = index["weight_map"].as_object_mut().expect("a weight map");
            for i in 0..count {
                map.insert(
                    format!("model.layers.{i}.extra.weight"),
                    Value::from("model-00001-of-00010.safetensors"),
                );
            }
            Mutated {
                value: index.to_string(),
                what: format!("{count} tensors added that no shard holds"),
            }
        })
    };
    prop_oneof![6 => mutate::json(&original), 3 => moved, 1 => added]
}

#[test]
fn shard_indexes_load_or_are_refused() {
    let scratch = Scratch::new("shards");
    let model = "mistral_tiny";
    let shards: Vec<String> = (1..=10)
        .map(|i| format!("model-{i:05}-of-00010.safetensors"))
        .collect();
    let mut files: Vec<&str> = shards.iter().map(String::as_str).collect();
    files.push(CONFIG_FILE);
    let dir = scratch.folder(model, model, &files);
    let index_path = dir.join(SHARD_INDEX_FILE);
    let original = read_text(&data(model).join(SHARD_INDEX_FILE));
    fuzz(SHARD_SHARE, index_cases(original), |mutated| {
        write(&index_path, &mutated.value);
        match read_llama_weights(&dir) {
            Err(err) => {
                let message = err.to_string();
                assert_message(&err, None, &mutated.what);
                assert!(
                    message.contains(SHARD_INDEX_FILE)
                        || message.contains(&dir.display().to_string()),
                    "{}: `{message}` names neither the index nor a file of the folder",
                    mutated.what
                );
            }
            Ok(dict) => {
                // What loads holds every tensor the index lists.
                #[derive(serde::Deserialize)]
                struct Index {
                    weight_map: std::collections::BTreeMap<String, String>,
                }
                let index: Index = serde_json::from_str(&mutated.value).expect("it was read");
                for name in index.weight_map.keys() {
                    assert!(dict.contains(name), "{}: `{name}` missing", mutated.what);
                }
            }
        }
    });
}

/// The mistral folder's shards, with one tensor also written into a shard the index does not
/// assign it to (with its own values or others): never loaded, always named.
#[test]
fn a_tensor_in_a_second_shard_is_refused_naming_both_files() {
    let scratch = Scratch::new("shard-copies");
    let model = "mistral_tiny";
    let shards: Vec<String> = (1..=10)
        .map(|i| format!("model-{i:05}-of-00010.safetensors"))
        .collect();
    let mut files: Vec<&str> = shards.iter().map(String::as_str).collect();
    files.push(SHARD_INDEX_FILE);
    let dir = scratch.folder(model, model, &files);
    #[derive(serde::Deserialize)]
    struct ShardIndex {
        weight_map: std::collections::BTreeMap<String, String>,
    }
    let index: ShardIndex =
        serde_json::from_str(&read_text(&dir.join(SHARD_INDEX_FILE))).expect("an index");
    let names: Vec<String> = index.weight_map.keys().cloned().collect();
    let originals: Vec<Vec<u8>> = shards.iter().map(|s| read(&dir.join(s))).collect();
    let cases = (any::<Index>(), any::<Index>(), any::<bool>());
    fuzz(SHARD_SHARE, cases, |(name, shard, changed)| {
        let name = name.get(&names);
        let home = &index.weight_map[name];
        let home_at = shards
            .iter()
            .position(|s| s == home)
            .expect("a listed shard");
        // Any shard but the one the index names.
        let to = (home_at + 1 + shard.index(shards.len() - 1)) % shards.len();
        let home_file =
            safetensors::SafeTensors::deserialize(&originals[home_at]).expect("a shard");
        let copied = home_file.tensor(name).expect("the index is right");
        let mut bytes = copied.data().to_vec();
        if changed {
            bytes.iter_mut().for_each(|b| *b = b.wrapping_add(1));
        }
        let target = safetensors::SafeTensors::deserialize(&originals[to]).expect("a shard");
        let mut views: Vec<(String, safetensors::tensor::TensorView<'_>)> =
            target.tensors().into_iter().collect();
        views.push((
            name.clone(),
            safetensors::tensor::TensorView::new(copied.dtype(), copied.shape().to_vec(), &bytes)
                .expect("a view"),
        ));
        let written = safetensors::tensor::serialize(views, None).expect("the shard serialises");
        write(&dir.join(&shards[to]), &written);
        let what = format!("`{name}` of {home} copied into {}", shards[to]);
        let err = read_llama_weights(&dir).expect_err(&what);
        let message = err.to_string();
        assert!(
            message.contains(&format!("`{name}`"))
                && message.contains(home.as_str())
                && message.contains(shards[to].as_str()),
            "{what}: {message}"
        );
        write(&dir.join(&shards[to]), &originals[to]);
    });
    read_llama_weights(&dir).expect("the folder as it was loads");
}

// ---------------------------------------------------------------------------------------------
// Chat templates, tokenizer_config.json and generation_config.json

/// Pieces of Jinja inserted into a template: loops, recursion, huge numbers, filters and the
/// functions transformers adds.
const JINJA_SNIPPETS: [&str; 20] = [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% for i in range(10**9) %}x{% endfor %}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}",
    "{{ 'a' * 100000000 }}",
    "{{ messages|tojson(indent=1000000000000) }}",
    "{{ messages|tojson(indent='        ') }}",
    "{{ messages|tojson(separators=(',', ':'), sort_keys=true) }}",
    "{{ 18446744073709551616 + 1 }}",
    "{{ 1e308 * 10 }}",
    "{{ -9223372036854775808 // -1 }}",
    "{{ 1 / 0 }}",
    "{{ raise_exception('no') }}",
    "{{ strftime_now('%Y-%m-%d %Q %') }}",
    "{{ messages[0]['content'].split('').strip() }}",
    "{{ messages[10**12] }}",
    "{% if %}",
    "{% generation %}{{ x }}{% endgeneration %}",
    "{%- endfor -%}",
    "{{ bos_token ~ eos_token ~ unk_token ~ pad_token }}",
];

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi, what is 2 + 2?"),
        ChatMessage::new("assistant", "4"),
        ChatMessage::new("user", "And 3 + 3?"),
    ]
}

#[derive(Clone, Debug)]
enum ChatCase {
    /// `chat_template.jinja` mutated.
    Template(Mutated<Vec<u8>>),
    /// `tokenizer_config.json` mutated, beside the template file.
    TokenizerConfig(Mutated<String>),
    /// `tokenizer_config.json` carrying the template itself, mutated, with no template file.
    TemplateInConfig(Mutated<String>),
}

fn chat_cases() -> impl Strategy<Value = (ChatCase, bool)> {
    let folder = data("llama_tiny");
    let template = read(&folder.join(CHAT_TEMPLATE_FILE));
    let config = read_text(&folder.join(TOKENIZER_CONFIG_FILE));
    let mut with_template: Value = serde_json::from_str(&config).expect("JSON");
    with_template["chat_template"] = Value::from(String::from_utf8_lossy(&template).as_ref());
    let snippets = {
        let template = Arc::new(template.clone());
        (any::<Index>(), 0..JINJA_SNIPPETS.len()).prop_map(move |(at, snippet)| {
            let at = at.index(template.len() + 1);
            let mut value = template.as_ref().clone();
            value.splice(at..at, JINJA_SNIPPETS[snippet].bytes());
            Mutated {
                value,
                what: format!("{:?} inserted at byte {at}", JINJA_SNIPPETS[snippet]),
            }
        })
    };
    let case = prop_oneof![
        3 => mutate::bytes(template).prop_map(ChatCase::Template),
        3 => snippets.prop_map(ChatCase::Template),
        2 => mutate::json(&config).prop_map(ChatCase::TokenizerConfig),
        2 => mutate::json(&with_template.to_string()).prop_map(ChatCase::TemplateInConfig),
    ];
    (case, any::<bool>())
}

/// The file a [`ChatError`] promises to name, if any.
fn chat_error_path(err: &ChatError) -> Option<&str> {
    match err {
        ChatError::File(err) => err.path().to_str(),
        ChatError::Read { path, .. }
        | ChatError::Json { path, .. }
        | ChatError::WrongType { path, .. }
        | ChatError::NoDefaultTemplate { path, .. } => Some(path),
        _ => None,
    }
}

#[test]
fn chat_templates_render_or_fail_with_an_error() {
    let scratch = Scratch::new("chat");
    let dir = scratch.folder("llama_tiny", "llama_tiny", &[]);
    let template_path = dir.join(CHAT_TEMPLATE_FILE);
    let config_path = dir.join(TOKENIZER_CONFIG_FILE);
    let original_template = read(&data("llama_tiny").join(CHAT_TEMPLATE_FILE));
    let original_config = read(&data("llama_tiny").join(TOKENIZER_CONFIG_FILE));
    let messages = conversation();
    fuzz(1, chat_cases(), |(case, add_generation_prompt)| {
        let what = match &case {
            ChatCase::Template(m) => {
                write(&template_path, &m.value);
                write(&config_path, &original_config);
                format!("template: {}", m.what)
            }
            ChatCase::TokenizerConfig(m) => {
                write(&template_path, &original_template);
                write(&config_path, &m.value);
                format!("tokenizer_config.json: {}", m.what)
            }
            ChatCase::TemplateInConfig(m) => {
                let _ = std::fs::remove_file(&template_path);
                write(&config_path, &m.value);
                format!("tokenizer_config.json with the template: {}", m.what)
            }
        };
        match ChatTemplate::from_folder(&dir) {
            Err(err) => {
                assert_message(&err, None, &what);
                if let Some(path) = chat_error_path(&err) {
                    assert!(
                        path == template_path.display().to_string()
                            || path == config_path.display().to_string(),
                        "{what}: {err} names another file"
                    );
                }
            }
            Ok(None) => assert!(
                matches!(case, ChatCase::TemplateInConfig(_)),
                "{what}: a folder with chat_template.jinja has no template"
            ),
            Ok(Some(template)) => match template.render(&messages, add_generation_prompt) {
                Ok(prompt) => assert!(
                    prompt.len() as u64 <= CHAT_PROMPT_MAX_BYTES,
                    "{what}: a prompt of {} bytes",
                    prompt.len()
                ),
                Err(err) => assert_message(&err, None, &what),
            },
        }
    });
}

#[test]
fn generation_config_reads_or_is_refused() {
    let scratch = Scratch::new("generation");
    let dir = scratch.folder("llama_tiny", "llama_tiny", &[]);
    let path = dir.join(GENERATION_CONFIG_FILE);
    let original = read_text(&data("llama_tiny").join(GENERATION_CONFIG_FILE));
    fuzz(1, mutate::json(&original), |mutated| {
        write(&path, &mutated.value);
        match GenerationDefaults::from_folder(&dir) {
            Err(err) => {
                assert_message(&err, Some(&path), &mutated.what);
            }
            Ok(defaults) => {
                // What was read is what the file says.
                let file: Value = serde_json::from_str(&mutated.value).expect("it was read");
                let number = |key: &str| file.get(key).and_then(Value::as_f64);
                assert_eq!(
                    defaults.temperature,
                    number("temperature"),
                    "{}",
                    mutated.what
                );
                assert_eq!(defaults.top_p, number("top_p"), "{}", mutated.what);
                assert_eq!(
                    defaults.bos_token_id,
                    file.get("bos_token_id").and_then(Value::as_i64),
                    "{}",
                    mutated.what
                );
                if let Some(top_k) = defaults.top_k {
                    assert_eq!(
                        file.get("top_k").and_then(Value::as_u64),
                        Some(top_k as u64),
                        "{}",
                        mutated.what
                    );
                }
            }
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Templates that do not end by themselves

/// Renders `source` on a thread of the default 2 MiB stack, failing the test if it takes more
/// than 60 s: the renderer's fuel, recursion limit and output bound must stop it first.
fn render_hostile(source: &str) -> Result<String, ChatError> {
    let source = source.to_string();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rendered = ChatTemplate::new(source, SpecialTokens::default())
            .and_then(|template| template.render(&conversation(), true));
        let _ = sender.send(rendered);
    });
    receiver
        .recv_timeout(Duration::from_secs(60))
        .expect("the rendering ended within 60 s")
}

#[test]
fn a_template_that_recurses_without_end_stops_at_the_recursion_limit() {
    for source in [
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% for m in [1] recursive %}{{ loop([m]) }}{% endfor %}",
        "{% macro f(n) %}{% for i in [1, 2] %}{{ f(n + 1) }}{% endfor %}{% endmacro %}{{ f(0) }}",
    ] {
        let err = render_hostile(source).expect_err(source);
        assert!(
            matches!(err, ChatError::RenderLimit { .. }),
            "{source}: {err}"
        );
        assert!(err.to_string().contains("nested deeper than 200"), "{err}");
    }
}

#[test]
fn a_template_that_chains_ten_thousand_operators_is_refused_before_it_overflows_the_stack() {
    // minijinja compiles a chain of operators, and a chain of elif branches, into a tree as
    // deep as it is long, by recursion: this one overflowed the stack before it was refused.
    let sources = [
        (
            format!("{{{{ 1{} }}}}", " + 1".repeat(10_000)),
            "chains 10000 operators",
        ),
        (
            format!("{{{{ messages{} }}}}", "|length(1)".repeat(10_000)),
            "chains 20000 operators",
        ),
        (
            format!("{{% if 0 %}}{}{{% endif %}}", "{% elif 0 %}".repeat(10_000)),
            "more than 500 elif branches",
        ),
    ];
    for (source, expected) in sources {
        let err = render_hostile(&source).expect_err("refused");
        assert!(
            matches!(err, ChatError::Template { line: Some(1), .. }),
            "{err}"
        );
        assert!(err.to_string().contains(expected), "{err}");
    }
    // Strings, comments and a long chain split over many tags do not count.
    let fine = format!(
        "{{{{ '{}' }}}}{{# {} #}}{}",
        "+".repeat(10_000),
        "+".repeat(10_000),
        "{{ 1 + 1 }}".repeat(1000)
    );
    let rendered = render_hostile(&fine).expect("renders");
    assert_eq!(rendered.len(), 10_000 + 1000);
}

#[test]
fn a_template_that_loops_a_billion_times_ends_in_an_error() {
    // minijinja refuses a range of more than 100000 items; loops inside loops run out of fuel.
    let err = render_hostile("{% for i in range(10**9) %}x{% endfor %}").expect_err("range");
    assert!(err.to_string().contains("range"), "{err}");
    for source in [
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}",
    ] {
        let err = render_hostile(source).expect_err(source);
        assert!(
            matches!(err, ChatError::RenderLimit { .. }),
            "{source}: {err}"
        );
        assert!(
            err.to_string()
                .contains("ran more instructions than 20000000"),
            "{err}"
        );
    }
}

#[test]
fn a_template_that_writes_without_end_stops_at_the_prompt_bound() {
    for source in [
        "{{ 'a' * 100000000 }}",
        "{% for i in range(100000) %}{{ 'abc' * 1000 }}{% endfor %}",
    ] {
        let err = render_hostile(source).expect_err(source);
        assert!(
            matches!(err, ChatError::RenderLimit { .. }),
            "{source}: {err}"
        );
        assert!(
            err.to_string()
                .contains(&format!("wrote more bytes than {CHAT_PROMPT_MAX_BYTES}")),
            "{err}"
        );
    }
    let err = render_hostile("{{ messages|tojson(indent=1000000000000) }}").expect_err("indent");
    assert!(err.to_string().contains("indent 1000000000000"), "{err}");
    let err = render_hostile("{{ messages|tojson(indent='x' * 20000000) }}").expect_err("indent");
    assert!(
        err.to_string().contains(&format!(
            "tojson: the JSON text passed {CHAT_PROMPT_MAX_BYTES} bytes"
        )),
        "{err}"
    );
    // A sane indent still renders.
    let rendered = render_hostile("{{ messages[0]|tojson(indent=2) }}").expect("renders");
    assert_eq!(
        rendered,
        "{\n  \"role\": \"system\",\n  \"content\": \"Be brief.\"\n}"
    );
}

// ---------------------------------------------------------------------------------------------
// Chains of operators, with brackets and strings that hold the tags' closing marks

/// One operand of a generated chain: its Jinja text and the string it evaluates to.
#[derive(Clone, Debug)]
struct Operand {
    jinja: String,
    value: String,
}

/// A Jinja string literal of `value` (double quotes; `\` and `"` escaped).
fn string_literal(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Operands whose text holds what could end a tag early or hide an operator from a scan:
/// string literals made of `}}`, `%}`, `{#`, quotes and backslashes; dict literals read back by
/// key (`{"k": v}.k`, a `}}` when nested); lists read back by index; parenthesised pairs.
fn operand() -> impl Strategy<Value = Operand> {
    let piece = proptest::sample::select(vec![
        "}}", "%}", "{{", "{%", "{#", "#}", "}", "{", "]", ")", "'", "\"", "\\", "x", " ", "~",
        "+", "-}}", "endraw",
    ]);
    let leaf = proptest::collection::vec(piece, 0..4).prop_map(|pieces| {
        let value = pieces.concat();
        Operand {
            jinja: string_literal(&value),
            value,
        }
    });
    leaf.prop_recursive(2, 8, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|o| Operand {
                jinja: format!("{{\"k\": {}}}.k", o.jinja),
                value: o.value,
            }),
            inner.clone().prop_map(|o| Operand {
                jinja: format!("[{}][0]", o.jinja),
                value: o.value,
            }),
            (inner.clone(), inner).prop_map(|(a, b)| Operand {
                jinja: format!("({} ~ {})", a.jinja, b.jinja),
                value: a.value + &b.value,
            }),
        ]
    })
}

/// A tag chaining its operands with `~`: short chains, and chains past [`CHAT_MAX_CHAIN`];
/// in a `{{ }}` tag or a `{% set %}` tag printed after it.
fn chain_cases() -> impl Strategy<Value = (Vec<Operand>, bool)> {
    let count = prop_oneof![3 => 1..20usize, 1 => CHAT_MAX_CHAIN + 2..3 * CHAT_MAX_CHAIN];
    (
        count.prop_flat_map(|n| proptest::collection::vec(operand(), n)),
        any::<bool>(),
    )
}

#[test]
fn operator_chains_are_refused_past_the_bound_and_render_below_it() {
    fuzz(8, chain_cases(), |(operands, in_set)| {
        let chain = operands
            .iter()
            .map(|o| o.jinja.as_str())
            .collect::<Vec<_>>()
            .join(" ~ ");
        let source = if in_set {
            format!("{{% set s = {chain} %}}{{{{ s }}}}")
        } else {
            format!("{{{{ {chain} }}}}")
        };
        let what = format!(
            "{} operands: {}",
            operands.len(),
            &source[..source.len().min(200)]
        );
        // The `~` between operands alone: a checker that misses any of them lets a tree this
        // deep reach the parser.
        let links = operands.len() - 1;
        match render_hostile(&source) {
            Ok(rendered) => {
                assert!(
                    links <= CHAT_MAX_CHAIN,
                    "{what}: a chain of {links} rendered"
                );
                let expected: String = operands.iter().map(|o| o.value.as_str()).collect();
                assert_eq!(rendered, expected, "{what}");
            }
            Err(err) => {
                assert!(links > CHAT_MAX_CHAIN, "{what}: refused: {err}");
                assert!(
                    matches!(err, ChatError::Template { line: Some(1), .. })
                        && err.to_string().contains("operators, more than the 500"),
                    "{what}: {err}"
                );
            }
        }
    });
}

#[test]
fn a_chain_after_a_dict_literal_is_refused_on_load() {
    // The first `}}` closes the inner dict, not the tag: 100000 `~` follow it in one tag, a
    // tree that overflowed the stack when minijinja compiled it.
    let source = format!(
        "{{{{ {{\"a\": {{\"b\": 1}}}}.a.b{} }}}}",
        " ~ \"x\"".repeat(100_000)
    );
    let scratch = Scratch::new("dict-chain");
    let dir = scratch.folder("llama_tiny", "llama_tiny", &[TOKENIZER_CONFIG_FILE]);
    write(&dir.join(CHAT_TEMPLATE_FILE), &source);
    let err = ChatTemplate::from_folder(&dir).expect_err("refused on load");
    assert!(
        matches!(err, ChatError::Template { line: Some(1), .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("a tag chains 100002 operators"),
        "{err}"
    );
    let err = render_hostile(&source).expect_err("refused");
    assert!(err.to_string().contains("chains 100002 operators"), "{err}");
}
