//! `config.json` as Hugging Face's `save_pretrained` writes it, read with serde: the keys the
//! loaders use, each checked against what this crate implements.

use std::path::Path;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::error::{ConfigError, ModelError};
use crate::feed_forward::Activation;
use crate::files::{FileError, folder_file, read_bounded};

/// The name of the configuration file in a model folder.
pub const CONFIG_FILE: &str = "config.json";

/// The most bytes a `config.json` may hold. Hugging Face's are a few kilobytes; the bound keeps
/// a wrong file (a symlink to `/dev/zero`, a weight file renamed) from being read whole.
pub const CONFIG_MAX_BYTES: u64 = 1 << 20;

/// Reads and parses `config.json` from a model folder.
///
/// Only a regular file of at most [`CONFIG_MAX_BYTES`] is read, or a link to one inside the
/// folder ([`folder_file`]): a FIFO, a device or a folder is refused before it is opened, so
/// that nothing blocks or streams without end.
///
/// # Errors
/// [`ModelError::File`] naming the file when it is missing, is not a regular file, links out of
/// the folder or is too large; [`ConfigError::Read`] naming it when it cannot be parsed (a
/// missing key, a value of the wrong type).
pub fn read_config<T: DeserializeOwned>(folder: &Path) -> Result<T, ModelError> {
    let path = folder_file(folder, CONFIG_FILE)?.ok_or_else(|| FileError::NotFound {
        path: folder.join(CONFIG_FILE),
    })?;
    let bytes = read_bounded(&path, CONFIG_MAX_BYTES)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        }
        .into()
    })
}

/// A `BertModel`'s `config.json` (`BertConfig`).
#[derive(Clone, Debug, Deserialize)]
pub struct BertConfig {
    /// `"bert"`.
    pub model_type: String,
    /// `d_model`.
    pub hidden_size: usize,
    /// Encoder blocks.
    pub num_hidden_layers: usize,
    /// `n_heads`.
    pub num_attention_heads: usize,
    /// `d_ff`.
    pub intermediate_size: usize,
    /// `vocab`.
    pub vocab_size: usize,
    /// Rows of the learned position table: the longest sequence.
    pub max_position_embeddings: usize,
    /// Rows of the token-type (segment) table.
    #[serde(default = "two")]
    pub type_vocab_size: usize,
    /// Epsilon of every LayerNorm (`1e-12` for BERT).
    #[serde(default = "bert_eps")]
    pub layer_norm_eps: f64,
    /// The feed-forward activation (`"gelu"`: exact, erf).
    #[serde(default = "gelu")]
    pub hidden_act: String,
    /// Only `"absolute"` (a learned table added to the embeddings) is implemented.
    #[serde(default = "absolute")]
    pub position_embedding_type: String,
}

/// A `GPT2LMHeadModel`'s `config.json` (`GPT2Config`).
#[derive(Clone, Debug, Deserialize)]
pub struct Gpt2Config {
    /// `"gpt2"`.
    pub model_type: String,
    /// `d_model`.
    pub n_embd: usize,
    /// Decoder blocks.
    pub n_layer: usize,
    /// `n_heads`.
    pub n_head: usize,
    /// `d_ff`; `None` means `4 · n_embd`.
    #[serde(default)]
    pub n_inner: Option<usize>,
    /// `vocab`.
    pub vocab_size: usize,
    /// Rows of the learned position table: the longest sequence, cache included.
    pub n_positions: usize,
    /// Epsilon of every LayerNorm (`1e-5`).
    #[serde(default = "gpt2_eps")]
    pub layer_norm_epsilon: f64,
    /// The feed-forward activation (`"gelu_new"`: the tanh approximation).
    #[serde(default = "gelu_new")]
    pub activation_function: String,
    /// Scores divided by `√d_head`; only `true` is implemented.
    #[serde(default = "yes")]
    pub scale_attn_weights: bool,
    /// Scores further divided by the layer's index; only `false` is implemented.
    #[serde(default)]
    pub scale_attn_by_inverse_layer_idx: bool,
    /// The LM head is the token embedding table; only `true` is implemented.
    #[serde(default = "yes")]
    pub tie_word_embeddings: bool,
    /// The token that ends a text, if any.
    #[serde(default)]
    pub eos_token_id: Option<i64>,
}

impl BertConfig {
    /// A lower bound on the parameters the loader reads, `None` past `u64`: the word, position
    /// and token-type tables, and per block the four projections and the feed-forward's two
    /// matrices.
    pub fn parameters(&self) -> Option<u64> {
        let [d, d_ff, vocab, positions, types, layers] = [
            self.hidden_size,
            self.intermediate_size,
            self.vocab_size,
            self.max_position_embeddings,
            self.type_vocab_size,
            self.num_hidden_layers,
        ]
        .map(|n| n as u64);
        let block = d
            .checked_mul(d)?
            .checked_mul(4)?
            .checked_add(d.checked_mul(d_ff)?.checked_mul(2)?)?;
        let tables = vocab
            .checked_add(positions)?
            .checked_add(types)?
            .checked_mul(d)?;
        layers.checked_mul(block)?.checked_add(tables)
    }

    /// Checks the settings this crate does not implement, naming the key.
    ///
    /// # Errors
    /// [`ConfigError::Unsupported`].
    pub fn check(&self) -> Result<Activation, ModelError> {
        expect_model_type(&self.model_type, "bert")?;
        if self.position_embedding_type != "absolute" {
            return Err(ConfigError::Unsupported {
                key: "position_embedding_type",
                value: self.position_embedding_type.clone(),
                supported: "\"absolute\"",
            }
            .into());
        }
        activation("hidden_act", &self.hidden_act)
    }
}

impl Gpt2Config {
    /// `d_ff`: `n_inner`, or `4 · n_embd` (saturating, so that an absurd `n_embd` is refused by
    /// [`parameters`](Self::parameters) rather than wrapped).
    pub fn d_ff(&self) -> usize {
        self.n_inner.unwrap_or(self.n_embd.saturating_mul(4))
    }

    /// The parameters the loader reads, `None` past `u64`: the token and position tables, and
    /// per block the four projections with their biases, both LayerNorms and the
    /// feed-forward's two layers; the final LayerNorm.
    pub fn parameters(&self) -> Option<u64> {
        let [d, d_ff, vocab, positions, layers] = [
            self.n_embd,
            self.d_ff(),
            self.vocab_size,
            self.n_positions,
            self.n_layer,
        ]
        .map(|n| n as u64);
        let attention = d
            .checked_mul(d)?
            .checked_mul(4)?
            .checked_add(d.checked_mul(4)?)?;
        let feed_forward = d
            .checked_mul(d_ff)?
            .checked_mul(2)?
            .checked_add(d_ff.checked_add(d)?)?;
        let block = attention
            .checked_add(feed_forward)?
            .checked_add(d.checked_mul(4)?)?;
        let tables = vocab.checked_add(positions)?.checked_mul(d)?;
        layers
            .checked_mul(block)?
            .checked_add(tables)?
            .checked_add(d.checked_mul(2)?)
    }

    /// Checks the settings this crate does not implement, naming the key.
    ///
    /// # Errors
    /// [`ConfigError::Unsupported`].
    pub fn check(&self) -> Result<Activation, ModelError> {
        expect_model_type(&self.model_type, "gpt2")?;
        let flags = [
            ("scale_attn_weights", self.scale_attn_weights, true),
            (
                "scale_attn_by_inverse_layer_idx",
                self.scale_attn_by_inverse_layer_idx,
                false,
            ),
            ("tie_word_embeddings", self.tie_word_embeddings, true),
        ];
        for (key, value, supported) in flags {
            if value != supported {
                return Err(ConfigError::Unsupported {
                    key,
                    value: value.to_string(),
                    supported: if supported { "true" } else { "false" },
                }
                .into());
            }
        }
        activation("activation_function", &self.activation_function)
    }
}

fn expect_model_type(found: &str, supported: &'static str) -> Result<(), ModelError> {
    if found == supported {
        Ok(())
    } else {
        Err(ConfigError::Unsupported {
            key: "model_type",
            value: format!("\"{found}\""),
            supported,
        }
        .into())
    }
}

/// Hugging Face's activation names (`ACT2FN`) this crate implements.
fn activation(key: &'static str, name: &str) -> Result<Activation, ModelError> {
    match name {
        "gelu" => Ok(Activation::Gelu),
        "gelu_new" | "gelu_pytorch_tanh" => Ok(Activation::GeluTanh),
        "relu" => Ok(Activation::Relu),
        other => Err(ConfigError::Unsupported {
            key,
            value: format!("\"{other}\""),
            supported: "\"gelu\", \"gelu_new\", \"gelu_pytorch_tanh\" or \"relu\"",
        }
        .into()),
    }
}

fn two() -> usize {
    2
}
fn bert_eps() -> f64 {
    1e-12
}
fn gpt2_eps() -> f64 {
    1e-5
}
fn gelu() -> String {
    "gelu".into()
}
fn gelu_new() -> String {
    "gelu_new".into()
}
fn absolute() -> String {
    "absolute".into()
}
fn yes() -> bool {
    true
}
