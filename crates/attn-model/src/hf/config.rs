//! `config.json` as Hugging Face's `save_pretrained` writes it, read with serde: the keys the
//! loaders use, each checked against what this crate implements.

use std::path::Path;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::error::{ConfigError, ModelError};
use crate::feed_forward::Activation;

/// The name of the configuration file in a model folder.
pub const CONFIG_FILE: &str = "config.json";

/// Reads and parses `config.json` from a model folder.
///
/// # Errors
/// [`ConfigError::Read`] naming the file when it cannot be read or parsed (a missing key, a
/// value of the wrong type).
pub fn read_config<T: DeserializeOwned>(folder: &Path) -> Result<T, ModelError> {
    let path = folder.join(CONFIG_FILE);
    let read_error = |reason: String| ConfigError::Read {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(&path).map_err(|e| read_error(e.to_string()))?;
    Ok(serde_json::from_str(&text).map_err(|e| read_error(e.to_string()))?)
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
    /// `d_ff`: `n_inner`, or `4 · n_embd`.
    pub fn d_ff(&self) -> usize {
        self.n_inner.unwrap_or(4 * self.n_embd)
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
