//! A model folder's generation defaults: the token ids that end, start and pad a sequence and
//! the sampling settings its authors chose.
//!
//! transformers' `from_pretrained` reads them from `generation_config.json`
//! (`GenerationConfig.from_pretrained`); a folder without that file gets them from the model's
//! `config.json` (`GenerationConfig.from_model_config`), whose token ids are what matters
//! there. [`GenerationDefaults::from_folder`] does the same, for the settings this crate's
//! generation can use. `eos_token_id` may be one id or a list of them (Llama 3 ends a turn on
//! any of several); a key that is missing or `null` is unset, other keys are ignored.

use std::path::Path;

use serde_json::{Map, Value as Json};

use super::chat::{ChatError, read_json_object, wrong_type};

/// The generation settings file that transformers' `save_pretrained` writes.
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";

/// The model configuration, read for the token ids when a folder has no
/// [`GENERATION_CONFIG_FILE`].
const MODEL_CONFIG_FILE: &str = "config.json";

/// The generation defaults of a model folder. Each `None` is a setting the folder leaves
/// unset.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationDefaults {
    /// The ids that end generation (`eos_token_id`, one or a list); empty when unset.
    pub eos_token_ids: Vec<i64>,
    /// The id that starts a sequence (`bos_token_id`).
    pub bos_token_id: Option<i64>,
    /// The id that pads a batch (`pad_token_id`).
    pub pad_token_id: Option<i64>,
    /// The sampling temperature (`temperature`).
    pub temperature: Option<f64>,
    /// Sample among this many most likely tokens (`top_k`).
    pub top_k: Option<usize>,
    /// Sample among the most likely tokens whose probabilities add up to this (`top_p`).
    pub top_p: Option<f64>,
    /// The penalty on tokens already generated (`repetition_penalty`, 1 for none).
    pub repetition_penalty: Option<f64>,
    /// Whether to sample (`do_sample`) rather than decode greedily.
    pub do_sample: Option<bool>,
}

impl GenerationDefaults {
    /// The defaults of a model folder: from `generation_config.json`, else the token ids of
    /// `config.json`, else none at all.
    ///
    /// `pad_token_id` and `bos_token_id` are ids the model is fed, so when `config.json` gives
    /// a `vocab_size` they must lie in `0..vocab_size`: a padding id of `10^9` is refused here,
    /// naming its file, rather than later as a token of some batch.
    ///
    /// # Errors
    /// [`ChatError::File`] for a file that is not a regular file, links out of the folder, is
    /// longer than [`CHAT_MAX_BYTES`](super::chat::CHAT_MAX_BYTES) or cannot be read,
    /// [`ChatError::Read`] for one that is not UTF-8, [`ChatError::Json`] for one that does
    /// not parse, [`ChatError::WrongType`], naming the key, for a value of the wrong type, and
    /// [`ChatError::TokenOutsideVocab`] naming the file, the key, the id and the vocabulary.
    pub fn from_folder(folder: &Path) -> Result<GenerationDefaults, ChatError> {
        let config_path = folder.join(MODEL_CONFIG_FILE);
        let config = read_json_object(folder, MODEL_CONFIG_FILE)?;
        let vocab = config
            .as_ref()
            .and_then(|config| config.get("vocab_size"))
            .and_then(Json::as_u64);
        let generation = folder.join(GENERATION_CONFIG_FILE);
        let (defaults, path) = match read_json_object(folder, GENERATION_CONFIG_FILE)? {
            Some(map) => {
                let settings = Settings {
                    path: &generation,
                    map: &map,
                };
                let defaults = GenerationDefaults {
                    temperature: settings.float("temperature")?,
                    top_k: settings.count("top_k")?,
                    top_p: settings.float("top_p")?,
                    repetition_penalty: settings.float("repetition_penalty")?,
                    do_sample: settings.flag("do_sample")?,
                    ..settings.token_ids()?
                };
                (defaults, &generation)
            }
            None => match &config {
                Some(map) => {
                    let settings = Settings {
                        path: &config_path,
                        map,
                    };
                    (settings.token_ids()?, &config_path)
                }
                None => return Ok(GenerationDefaults::default()),
            },
        };
        if let Some(vocab) = vocab {
            defaults.check_input_ids(path, vocab)?;
        }
        Ok(defaults)
    }

    /// Refuses a `pad_token_id` or `bos_token_id` (read from `path`) outside `0..vocab`.
    fn check_input_ids(&self, path: &Path, vocab: u64) -> Result<(), ChatError> {
        for (key, id) in [
            ("pad_token_id", self.pad_token_id),
            ("bos_token_id", self.bos_token_id),
        ] {
            if let Some(id) = id
                && !u64::try_from(id).is_ok_and(|id| id < vocab)
            {
                return Err(ChatError::TokenOutsideVocab {
                    path: path.display().to_string(),
                    key,
                    id,
                    vocab,
                });
            }
        }
        Ok(())
    }
}

/// The keys of one JSON file, read with their types checked.
struct Settings<'a> {
    path: &'a Path,
    map: &'a Map<String, Json>,
}

impl Settings<'_> {
    /// `key`'s value, `None` when it is missing or `null`.
    fn get(&self, key: &str) -> Option<&Json> {
        self.map.get(key).filter(|value| !value.is_null())
    }

    /// `eos_token_id`, `bos_token_id` and `pad_token_id`, the rest unset.
    fn token_ids(&self) -> Result<GenerationDefaults, ChatError> {
        let eos_token_ids = match self.get("eos_token_id") {
            None => Vec::new(),
            Some(Json::Array(ids)) => ids
                .iter()
                .map(|id| id.as_i64().ok_or_else(|| self.wrong("eos_token_id", IDS)))
                .collect::<Result<_, _>>()?,
            Some(id) => vec![id.as_i64().ok_or_else(|| self.wrong("eos_token_id", IDS))?],
        };
        Ok(GenerationDefaults {
            eos_token_ids,
            bos_token_id: self.integer("bos_token_id")?,
            pad_token_id: self.integer("pad_token_id")?,
            ..GenerationDefaults::default()
        })
    }

    /// An integer setting.
    fn integer(&self, key: &str) -> Result<Option<i64>, ChatError> {
        self.get(key)
            .map(|value| value.as_i64().ok_or_else(|| self.wrong(key, "an integer")))
            .transpose()
    }

    /// A setting that counts something: a non-negative integer.
    fn count(&self, key: &str) -> Result<Option<usize>, ChatError> {
        self.get(key)
            .map(|value| {
                value
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| self.wrong(key, "a non-negative integer"))
            })
            .transpose()
    }

    /// A real-valued setting (an integer such as `1` is one too).
    fn float(&self, key: &str) -> Result<Option<f64>, ChatError> {
        self.get(key)
            .map(|value| value.as_f64().ok_or_else(|| self.wrong(key, "a number")))
            .transpose()
    }

    /// A yes-or-no setting.
    fn flag(&self, key: &str) -> Result<Option<bool>, ChatError> {
        self.get(key)
            .map(|value| {
                value
                    .as_bool()
                    .ok_or_else(|| self.wrong(key, "true or false"))
            })
            .transpose()
    }

    /// [`ChatError::WrongType`] for `key`.
    fn wrong(&self, key: &str, expected: &'static str) -> ChatError {
        wrong_type(
            self.path,
            key,
            expected,
            self.map.get(key).unwrap_or(&Json::Null),
        )
    }
}

/// What `eos_token_id` must be.
const IDS: &str = "an integer or a list of integers";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::FileError;
    use crate::hf::chat::{CHAT_MAX_BYTES, ChatError};
    use std::fs;
    use std::path::PathBuf;

    /// A Llama-architecture folder written by transformers' `save_pretrained`.
    const LLAMA_TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/hf/llama_tiny");

    /// A fresh folder under the system's temporary folder holding `files` (name, text).
    fn folder_with(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let folder = std::env::temp_dir().join(format!(
            "attn-model-generation-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&folder);
        fs::create_dir_all(&folder).expect("a scratch folder");
        for (file, text) in files {
            fs::write(folder.join(file), text).expect("written");
        }
        folder
    }

    #[test]
    fn llama_tiny_defaults() {
        let defaults = GenerationDefaults::from_folder(Path::new(LLAMA_TINY)).expect("reads");
        assert_eq!(
            defaults,
            GenerationDefaults {
                eos_token_ids: vec![100],
                bos_token_id: Some(1),
                pad_token_id: Some(0),
                ..GenerationDefaults::default()
            }
        );
    }

    #[test]
    fn eos_list_and_sampling_settings() {
        let folder = folder_with(
            "sampling",
            &[(
                GENERATION_CONFIG_FILE,
                r#"{
                    "bos_token_id": 128000,
                    "do_sample": true,
                    "eos_token_id": [128001, 128008, 128009],
                    "pad_token_id": null,
                    "temperature": 0.6,
                    "top_k": 50,
                    "top_p": 0.9,
                    "repetition_penalty": 1,
                    "max_new_tokens": 64,
                    "transformers_version": "4.45.0.dev0"
                }"#,
            )],
        );
        let defaults = GenerationDefaults::from_folder(&folder).expect("reads");
        assert_eq!(
            defaults,
            GenerationDefaults {
                eos_token_ids: vec![128001, 128008, 128009],
                bos_token_id: Some(128000),
                pad_token_id: None,
                temperature: Some(0.6),
                top_k: Some(50),
                top_p: Some(0.9),
                repetition_penalty: Some(1.0),
                do_sample: Some(true),
            }
        );
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn without_generation_config_the_ids_come_from_config_json() {
        let folder = folder_with(
            "fallback",
            &[(
                MODEL_CONFIG_FILE,
                r#"{"model_type": "qwen2", "bos_token_id": 151643, "eos_token_id": 151645,
                    "temperature": 0.7, "hidden_size": 896}"#,
            )],
        );
        let defaults = GenerationDefaults::from_folder(&folder).expect("reads");
        assert_eq!(
            defaults,
            GenerationDefaults {
                eos_token_ids: vec![151645],
                bos_token_id: Some(151643),
                ..GenerationDefaults::default()
            }
        );
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn generation_config_comes_before_config_json() {
        let folder = folder_with(
            "precedence",
            &[
                (GENERATION_CONFIG_FILE, r#"{"eos_token_id": 7}"#),
                (
                    MODEL_CONFIG_FILE,
                    r#"{"eos_token_id": 2, "bos_token_id": 1}"#,
                ),
            ],
        );
        let defaults = GenerationDefaults::from_folder(&folder).expect("reads");
        assert_eq!(defaults.eos_token_ids, vec![7]);
        assert_eq!(defaults.bos_token_id, None);
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn neither_file_gives_empty_defaults() {
        let folder = folder_with("empty", &[]);
        assert_eq!(
            GenerationDefaults::from_folder(&folder).expect("reads"),
            GenerationDefaults::default()
        );
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn wrong_type_names_the_key_and_the_file() {
        for (text, key) in [
            (r#"{"eos_token_id": [1, "2"]}"#, "eos_token_id"),
            (r#"{"eos_token_id": 2.5}"#, "eos_token_id"),
            (r#"{"bos_token_id": "1"}"#, "bos_token_id"),
            (r#"{"top_k": -1}"#, "top_k"),
            (r#"{"temperature": "hot"}"#, "temperature"),
            (r#"{"do_sample": 1}"#, "do_sample"),
        ] {
            let folder = folder_with("wrong-type", &[(GENERATION_CONFIG_FILE, text)]);
            match GenerationDefaults::from_folder(&folder) {
                Err(err @ ChatError::WrongType { .. }) => {
                    let message = err.to_string();
                    assert!(message.contains(key), "{text}: {message}");
                    assert!(
                        message.contains(GENERATION_CONFIG_FILE),
                        "{text}: {message}"
                    );
                }
                other => panic!("{text}: expected ChatError::WrongType, got {other:?}"),
            }
            let _ = fs::remove_dir_all(&folder);
        }
    }

    #[test]
    fn an_input_id_outside_the_vocabulary_names_file_key_and_value() {
        let config = r#"{"model_type": "llama", "vocab_size": 101, "pad_token_id": 0}"#;
        for (files, file, key, id) in [
            (
                vec![
                    (GENERATION_CONFIG_FILE, r#"{"pad_token_id": 1000000000}"#),
                    (MODEL_CONFIG_FILE, config),
                ],
                GENERATION_CONFIG_FILE,
                "pad_token_id",
                1_000_000_000,
            ),
            (
                vec![
                    (GENERATION_CONFIG_FILE, r#"{"bos_token_id": 101}"#),
                    (MODEL_CONFIG_FILE, config),
                ],
                GENERATION_CONFIG_FILE,
                "bos_token_id",
                101,
            ),
            (
                vec![(
                    MODEL_CONFIG_FILE,
                    r#"{"vocab_size": 101, "pad_token_id": 1000000000}"#,
                )],
                MODEL_CONFIG_FILE,
                "pad_token_id",
                1_000_000_000,
            ),
            (
                vec![(
                    MODEL_CONFIG_FILE,
                    r#"{"vocab_size": 101, "pad_token_id": -1}"#,
                )],
                MODEL_CONFIG_FILE,
                "pad_token_id",
                -1,
            ),
        ] {
            let folder = folder_with("outside-vocab", &files);
            let err = GenerationDefaults::from_folder(&folder).expect_err(key);
            assert_eq!(
                err.to_string(),
                format!(
                    "{}: `{key}` is {id}, outside the 101 token ids (0..101) of config.json's \
                     vocab_size",
                    folder.join(file).display()
                )
            );
            let _ = fs::remove_dir_all(&folder);
        }
        // The last id of the vocabulary is one, and without a vocab_size nothing is checked.
        let folder = folder_with(
            "inside-vocab",
            &[
                (GENERATION_CONFIG_FILE, r#"{"pad_token_id": 100}"#),
                (MODEL_CONFIG_FILE, config),
            ],
        );
        assert_eq!(
            GenerationDefaults::from_folder(&folder)
                .expect("in the vocabulary")
                .pad_token_id,
            Some(100)
        );
        fs::write(folder.join(MODEL_CONFIG_FILE), r#"{"model_type": "llama"}"#).expect("written");
        fs::write(
            folder.join(GENERATION_CONFIG_FILE),
            r#"{"pad_token_id": 1000000000}"#,
        )
        .expect("written");
        assert_eq!(
            GenerationDefaults::from_folder(&folder)
                .expect("nothing to check against")
                .pad_token_id,
            Some(1_000_000_000)
        );
        let _ = fs::remove_dir_all(&folder);
    }

    #[test]
    fn malformed_and_oversize_files_are_refused() {
        let folder = folder_with(
            "malformed",
            &[(GENERATION_CONFIG_FILE, "{\"eos_token_id\": ")],
        );
        assert!(matches!(
            GenerationDefaults::from_folder(&folder),
            Err(ChatError::Json { .. })
        ));
        fs::File::create(folder.join(GENERATION_CONFIG_FILE))
            .and_then(|file| file.set_len(CHAT_MAX_BYTES + 1))
            .expect("a long file");
        assert!(matches!(
            GenerationDefaults::from_folder(&folder),
            Err(ChatError::File(FileError::TooLarge { .. }))
        ));
        fs::remove_file(folder.join(GENERATION_CONFIG_FILE)).expect("removed");
        fs::create_dir(folder.join(GENERATION_CONFIG_FILE)).expect("a folder");
        assert!(matches!(
            GenerationDefaults::from_folder(&folder),
            Err(ChatError::File(FileError::NotRegular {
                kind: "a folder",
                ..
            }))
        ));
        let _ = fs::remove_dir_all(&folder);
    }
}
