//! The Llama family as transformers writes it: `LlamaForCausalLM` (SmolLM2, TinyLlama,
//! Llama 3.x), `Qwen2ForCausalLM` (Qwen2.5), `Qwen3ForCausalLM` and `MistralForCausalLM`, on
//! this crate's [`TokenDecoder`]:
//!
//! ```text
//! x = E_tok[ids]                                 no position table, no √d_model scale
//! x = Decoder(x)        pre-norm causal blocks:  x += Attention(RMSNorm(x))
//!                                                x += SwiGLU(RMSNorm(x))
//!                       then a final RMSNorm
//! logits = x · W_headᵀ                           or x · E_tokᵀ when tied
//!
//! Attention(x):  q, k, v = x·W_Q (+b), x·W_K (+b), x·W_V (+b)    biases: Qwen2 only
//!                q, k = RMSNorm_head(q), RMSNorm_head(k)           Qwen3 only
//!                q, k = RoPE(q), RoPE(k)                           half-split pairs
//!                softmax(q·kᵀ/√d_head + causal [+ window]) · v · W_O
//! SwiGLU(x)   =  (SiLU(x · W_gate) ∘ (x · W_up)) · W_down
//! ```
//!
//! The four differ in a handful of settings, each a setting of the shared blocks:
//!
//! | | Llama | Qwen2 | Qwen3 | Mistral |
//! |---|---|---|---|---|
//! | q, k, v biases | `attention_bias` (no) | yes | `attention_bias` (no) | no |
//! | RMSNorm on each head's q and k | no | no | yes | no |
//! | sliding window | no | `use_sliding_window` | `use_sliding_window` | `sliding_window` |
//! | head width | `head_dim` or `hidden_size / heads` | same | same | same |
//!
//! Hugging Face's names: `model.embed_tokens.weight`, `model.norm.weight`, `lm_head.weight`
//! (absent when tied), and under `model.layers.{i}.`: `input_layernorm.weight`
//! (`norm_self`), `self_attn.{q,k,v,o}_proj.{weight,bias}`, `self_attn.{q,k}_norm.weight`,
//! `post_attention_layernorm.weight` (`norm_ff`), `mlp.{gate,up,down}_proj.weight`.
//!
//! `config.json` is read in both of transformers' forms: 4.x (`rope_theta` and `rope_scaling`
//! at the top, `torch_dtype`) and 5.x (`rope_parameters`, `dtype`). Weights come from one
//! `model.safetensors` or from the shards `model.safetensors.index.json` lists.

use std::collections::BTreeMap;
use std::path::Path;

use attn_pos::{PositionalScheme, RotaryPairing, RotaryScaling};
use burn::module::Module;
use burn::tensor::{DType, Device, Int, Tensor};
use serde::Deserialize;
use serde_json::Value;

use super::config::read_config;
use crate::error::{ConfigError, ModelError};
use crate::feed_forward::Activation;
use crate::files::{folder_file, read_bounded};
use crate::generate::{GenerateConfig, Generation, Prompt};
use crate::norm::NormKind;
use crate::pytorch::{
    StateDict, TorchLayerNorm, TorchLinear, load_block_norm, load_linear, replace,
};
use crate::residual::NormPlacement;
use crate::token_decoder::{TokenDecoder, TokenDecoderConfig, TokenDecoderInput};
use crate::{DecoderBlock, NeedWeights, TokenDecoderOutput};

/// The index of a sharded checkpoint: which file holds each tensor.
pub const SHARD_INDEX_FILE: &str = "model.safetensors.index.json";

/// The most bytes a shard index may hold: a 70B model's lists a few thousand names (about
/// 100 KB).
const SHARD_INDEX_MAX_BYTES: u64 = 16 << 20;

/// The architectures this loader reads, by `model_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Architecture {
    /// `"llama"`: `LlamaForCausalLM`.
    Llama,
    /// `"qwen2"`: `Qwen2ForCausalLM`.
    Qwen2,
    /// `"qwen3"`: `Qwen3ForCausalLM`.
    Qwen3,
    /// `"mistral"`: `MistralForCausalLM`.
    Mistral,
}

impl Architecture {
    /// The architecture of a `model_type`.
    ///
    /// # Errors
    /// [`ConfigError::Unsupported`] naming the type.
    pub fn from_model_type(model_type: &str) -> Result<Self, ModelError> {
        match model_type {
            "llama" => Ok(Self::Llama),
            "qwen2" => Ok(Self::Qwen2),
            "qwen3" => Ok(Self::Qwen3),
            "mistral" => Ok(Self::Mistral),
            other => Err(ConfigError::Unsupported {
                key: "model_type",
                value: format!("\"{other}\""),
                supported: "\"llama\", \"qwen2\", \"qwen3\" or \"mistral\"",
            }
            .into()),
        }
    }

    /// transformers' class name, e.g. `"Qwen2ForCausalLM"`.
    pub fn class_name(self) -> &'static str {
        match self {
            Self::Llama => "LlamaForCausalLM",
            Self::Qwen2 => "Qwen2ForCausalLM",
            Self::Qwen3 => "Qwen3ForCausalLM",
            Self::Mistral => "MistralForCausalLM",
        }
    }
}

/// A Llama-family `config.json`, in transformers' 4.x or 5.x form.
#[derive(Clone, Debug, Deserialize)]
pub struct LlamaConfig {
    /// `"llama"`, `"qwen2"`, `"qwen3"` or `"mistral"`.
    pub model_type: String,
    /// `d_model`.
    pub hidden_size: usize,
    /// `d_ff` of the gated feed-forward network.
    pub intermediate_size: usize,
    /// Decoder blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads; absent means as many as query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Width of each head; absent means `hidden_size / num_attention_heads`.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// `vocab`.
    pub vocab_size: usize,
    /// The longest context the model was trained for (generation is not held to it).
    #[serde(default)]
    pub max_position_embeddings: Option<usize>,
    /// Epsilon of every RMSNorm.
    #[serde(default = "rms_eps")]
    pub rms_norm_eps: f64,
    /// The gate's activation; only `"silu"` is implemented.
    #[serde(default = "silu")]
    pub hidden_act: String,
    /// Whether the head is the token table (transformers' default: no).
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Biases on the q, k, v and o projections (Llama, Qwen3); Qwen2 always has q, k, v
    /// biases and no o bias.
    #[serde(default)]
    pub attention_bias: bool,
    /// Biases on the feed-forward projections (Llama).
    #[serde(default)]
    pub mlp_bias: bool,
    /// 4.x: the rotary base.
    #[serde(default)]
    pub rope_theta: Option<f64>,
    /// 4.x: the rotary scaling, `null` for none.
    #[serde(default)]
    pub rope_scaling: Option<Value>,
    /// 5.x: the rotary base, type and scaling together.
    #[serde(default)]
    pub rope_parameters: Option<Value>,
    /// The window of sliding-window attention (Mistral; Qwen when `use_sliding_window`).
    #[serde(default)]
    pub sliding_window: Option<usize>,
    /// Qwen2 and Qwen3: whether `sliding_window` is used at all.
    #[serde(default)]
    pub use_sliding_window: Option<bool>,
    /// Qwen2 and Qwen3 (4.x): layers from this index on slide, when `use_sliding_window`.
    #[serde(default)]
    pub max_window_layers: Option<usize>,
    /// 5.x: `"full_attention"` or `"sliding_attention"` for each layer.
    #[serde(default)]
    pub layer_types: Option<Vec<String>>,
    /// 5.x: the stored weights' type (`"float32"`, `"bfloat16"`, `"float16"`).
    #[serde(default)]
    pub dtype: Option<String>,
    /// 4.x: the stored weights' type.
    #[serde(default)]
    pub torch_dtype: Option<String>,
    /// The token(s) that end a text: an id or a list of ids.
    #[serde(default)]
    pub eos_token_id: Option<Value>,
}

/// The settings of a [`LlamaConfig`] this crate builds from, once checked.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaSettings {
    /// Which of the four.
    pub architecture: Architecture,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Width of each head.
    pub head_dim: usize,
    /// The rotary base.
    pub rope_theta: f64,
    /// The rotary scaling.
    pub rope_scaling: RotaryScaling,
    /// The sliding window every layer uses, if any.
    pub window: Option<usize>,
    /// Biases on q, k and v.
    pub bias_qkv: bool,
    /// Biases on o and the feed-forward projections.
    pub bias_out: bool,
    /// RMSNorm on each head's queries and keys.
    pub qk_norm: bool,
}

impl LlamaConfig {
    /// Checks every setting this crate does not implement, naming the key and its value, and
    /// derives what the blocks need.
    ///
    /// # Errors
    /// [`ConfigError::Unsupported`] for an unknown `model_type`, a `hidden_act` other than
    /// `silu`, a `rope_type` other than `default`, `linear` and `llama3`, a partial rotary
    /// factor, layers that mix sliding and full attention, or different biases on attention
    /// and the feed-forward network; [`ConfigError::Invalid`] for an
    /// `original_max_position_embeddings` that is not a positive integer;
    /// [`ModelError::ZeroSize`] for a zero size.
    pub fn settings(&self) -> Result<LlamaSettings, ModelError> {
        let architecture = Architecture::from_model_type(&self.model_type)?;
        if self.hidden_act != "silu" {
            return Err(unsupported(
                "hidden_act",
                format!("\"{}\"", self.hidden_act),
                "\"silu\"",
            ));
        }
        for (what, size) in [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("vocab_size", self.vocab_size),
        ] {
            crate::error::check_nonzero(what, size)?;
        }
        let head_dim = match self.head_dim {
            Some(head_dim) => head_dim,
            None => {
                crate::error::check_heads(self.hidden_size, self.num_attention_heads)?;
                self.hidden_size / self.num_attention_heads
            }
        };
        let (rope_theta, rope_scaling) = self.rope()?;
        let (bias_qkv, bias_out, qk_norm) = match architecture {
            Architecture::Llama => {
                if self.attention_bias != self.mlp_bias {
                    return Err(unsupported(
                        "mlp_bias",
                        format!(
                            "{} while attention_bias is {}",
                            self.mlp_bias, self.attention_bias
                        ),
                        "the same value as attention_bias",
                    ));
                }
                (self.attention_bias, self.attention_bias, false)
            }
            Architecture::Qwen2 => (true, false, false),
            Architecture::Qwen3 => {
                if self.attention_bias {
                    return Err(unsupported(
                        "attention_bias",
                        "true".into(),
                        "false for qwen3",
                    ));
                }
                (false, false, true)
            }
            Architecture::Mistral => (false, false, false),
        };
        Ok(LlamaSettings {
            architecture,
            n_kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            head_dim,
            rope_theta,
            rope_scaling,
            window: self.window(architecture)?,
            bias_qkv,
            bias_out,
            qk_norm,
        })
    }

    /// The rotary base and scaling, from `rope_parameters` (5.x) or from `rope_theta` and
    /// `rope_scaling` (4.x).
    fn rope(&self) -> Result<(f64, RotaryScaling), ModelError> {
        let parameters = match (&self.rope_parameters, &self.rope_scaling) {
            (Some(p), _) if !p.is_null() => Some(p),
            (_, Some(s)) if !s.is_null() => Some(s),
            _ => None,
        };
        let number = |key: &'static str| -> Result<Option<f64>, ModelError> {
            match parameters.and_then(|p| p.get(key)) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_f64()
                    .map(Some)
                    .ok_or_else(|| unsupported(key, v.to_string(), "a number")),
            }
        };
        let theta = number("rope_theta")?
            .or(self.rope_theta)
            .unwrap_or(attn_pos::DEFAULT_THETA);
        if let Some(factor) = number("partial_rotary_factor")?
            && factor != 1.0
        {
            return Err(unsupported(
                "partial_rotary_factor",
                factor.to_string(),
                "1 (every feature of a head rotated)",
            ));
        }
        let rope_type = parameters
            .and_then(|p| p.get("rope_type").or_else(|| p.get("type")))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let required = |key: &'static str| {
            number(key)?.ok_or_else(|| unsupported(key, "missing".into(), "a number"))
        };
        let scaling = match rope_type {
            "default" => RotaryScaling::None,
            "linear" => RotaryScaling::Linear {
                factor: required("factor")?,
            },
            "llama3" => RotaryScaling::Llama3 {
                factor: required("factor")?,
                low_freq_factor: required("low_freq_factor")?,
                high_freq_factor: required("high_freq_factor")?,
                original_max_position_embeddings: positive_integer(
                    "original_max_position_embeddings",
                    parameters,
                )?,
            },
            other => {
                return Err(unsupported(
                    "rope_type",
                    format!("\"{other}\""),
                    "\"default\", \"linear\" or \"llama3\"",
                ));
            }
        };
        scaling.validate().map_err(ModelError::from)?;
        Ok((theta, scaling))
    }

    /// The one window every layer uses, or none; layers that mix the two are refused.
    ///
    /// The layers are counted, not listed: `num_hidden_layers` comes from the file, and is
    /// checked against the weights only after this.
    fn window(&self, architecture: Architecture) -> Result<Option<usize>, ModelError> {
        let layers = self.num_hidden_layers;
        // How many layers slide, and how many attend to every position.
        let (sliding, full) = match (&self.layer_types, architecture) {
            (Some(types), _) => {
                let mut sliding = 0;
                for t in types {
                    match t.as_str() {
                        "full_attention" => {}
                        "sliding_attention" => sliding += 1,
                        other => {
                            return Err(unsupported(
                                "layer_types",
                                format!("\"{other}\""),
                                "\"full_attention\" or \"sliding_attention\"",
                            ));
                        }
                    }
                }
                (sliding, types.len() - sliding)
            }
            (None, Architecture::Mistral) if self.sliding_window.is_some() => (layers, 0),
            (None, Architecture::Qwen2 | Architecture::Qwen3)
                if self.use_sliding_window == Some(true) =>
            {
                // Layers from max_window_layers on slide.
                let from = self.max_window_layers.unwrap_or(layers).min(layers);
                (layers - from, from)
            }
            (None, _) => (0, layers),
        };
        // Qwen's layer_types name sliding layers even when use_sliding_window is false.
        let sliding_used = match architecture {
            Architecture::Qwen2 | Architecture::Qwen3 => self.use_sliding_window == Some(true),
            _ => true,
        };
        let any = sliding_used && sliding > 0;
        let all = sliding_used && full == 0;
        match (any, all, self.sliding_window) {
            (false, _, _) => Ok(None),
            (true, true, Some(window)) => {
                crate::error::check_nonzero("sliding_window", window)?;
                Ok(Some(window))
            }
            (true, true, None) => Err(unsupported(
                "sliding_window",
                "null while layers slide".into(),
                "a window size",
            )),
            (true, false, _) => Err(unsupported(
                "layer_types",
                format!("{sliding} sliding and {full} full-attention layers"),
                "every layer sliding or none",
            )),
        }
    }

    /// The stored weights' type as the configuration names it (`dtype`, else `torch_dtype`).
    pub fn stored_dtype(&self) -> Option<&str> {
        self.dtype.as_deref().or(self.torch_dtype.as_deref())
    }

    /// The parameters the loader reads, `None` past `u64`: the token table (twice when
    /// untied), and per block the four projections, the gated network and two norms.
    pub fn parameters(&self, settings: &LlamaSettings) -> Option<u64> {
        let [d, d_ff, vocab, layers, heads, kv, head] = [
            self.hidden_size,
            self.intermediate_size,
            self.vocab_size,
            self.num_hidden_layers,
            self.num_attention_heads,
            settings.n_kv_heads,
            settings.head_dim,
        ]
        .map(|n| n as u64);
        let q = heads.checked_mul(head)?;
        let attention = d
            .checked_mul(q)?
            .checked_mul(2)?
            .checked_add(d.checked_mul(kv.checked_mul(head)?)?.checked_mul(2)?)?;
        let block = attention
            .checked_add(d.checked_mul(d_ff)?.checked_mul(3)?)?
            .checked_add(d.checked_mul(2)?)?;
        let tables = vocab
            .checked_mul(d)?
            .checked_mul(if self.tie_word_embeddings { 1 } else { 2 })?;
        layers.checked_mul(block)?.checked_add(tables)
    }
}

/// A `LlamaForCausalLM`, `Qwen2ForCausalLM`, `Qwen3ForCausalLM` or `MistralForCausalLM` as a
/// [`TokenDecoder`], with Hugging Face's left-padding convention for whole batches
/// ([`try_forward`](Self::try_forward)).
#[derive(Module, Debug)]
pub struct CausalLm {
    model: TokenDecoder,
}

/// transformers' name for a Llama checkpoint's model; the four share one loader.
pub type LlamaForCausalLM = CausalLm;
/// transformers' name for a Qwen2 checkpoint's model.
pub type Qwen2ForCausalLM = CausalLm;
/// transformers' name for a Qwen3 checkpoint's model.
pub type Qwen3ForCausalLM = CausalLm;
/// transformers' name for a Mistral checkpoint's model.
pub type MistralForCausalLM = CausalLm;

impl CausalLm {
    /// Loads a folder written by `save_pretrained`: `config.json`, and `model.safetensors` or
    /// the shards of `model.safetensors.index.json`.
    ///
    /// # Errors
    /// As [`read_config`], [`read_llama_weights`] and [`from_state_dict`](Self::from_state_dict).
    pub fn from_pretrained(folder: impl AsRef<Path>, device: &Device) -> Result<Self, ModelError> {
        Self::from_pretrained_as(folder, device, DType::F32)
    }

    /// As [`from_pretrained`](Self::from_pretrained), with the matrices (every projection and
    /// the token table) held as `dtype`: `BF16` keeps a bfloat16 folder in about its file's
    /// size, its products accumulating in `f32` ([`StateDict::keep_matrices`]); `F32` widens
    /// every weight as it is read.
    ///
    /// # Errors
    /// [`ModelError::UnsupportedDtype`] when `device` cannot hold `dtype` (ndarray holds no
    /// half-precision tensors), and as [`from_pretrained`](Self::from_pretrained).
    pub fn from_pretrained_as(
        folder: impl AsRef<Path>,
        device: &Device,
        dtype: DType,
    ) -> Result<Self, ModelError> {
        if dtype != DType::F32 && !device.supports_dtype(dtype) {
            return Err(ModelError::UnsupportedDtype {
                dtype: format!("{dtype:?}"),
                device: format!("{device:?}"),
            });
        }
        let folder = folder.as_ref();
        let config: LlamaConfig = read_config(folder)?;
        config.settings()?;
        let dict = read_llama_weights(folder)?.keep_matrices(dtype);
        Self::from_state_dict(&config, &dict, device)
    }

    /// The [`TokenDecoderConfig`] of a configuration.
    ///
    /// # Errors
    /// As [`LlamaConfig::settings`].
    pub fn decoder_config(config: &LlamaConfig) -> Result<TokenDecoderConfig, ModelError> {
        let s = config.settings()?;
        Ok(TokenDecoderConfig::new(
            config.vocab_size,
            config.hidden_size,
            config.num_attention_heads,
            config.num_hidden_layers,
            config.intermediate_size,
            PositionalScheme::Rotary {
                theta: s.rope_theta,
                pairing: RotaryPairing::HalfSplit,
                scaling: s.rope_scaling,
            },
        )
        .with_dropout(0.0)
        .with_norm(NormPlacement::Pre)
        .with_norm_kind(NormKind::Rms)
        .with_activation(Activation::Silu)
        .with_gated(true)
        .with_scale_embedding(false)
        .with_final_norm(true)
        .with_tie_embeddings(config.tie_word_embeddings)
        .with_layer_norm_eps(config.rms_norm_eps)
        .with_n_kv_heads(Some(s.n_kv_heads))
        .with_head_dim(Some(s.head_dim))
        .with_qk_norm(s.qk_norm.then_some(config.rms_norm_eps))
        .with_bias_qkv(s.bias_qkv)
        .with_bias_out(s.bias_out)
        .with_window(s.window))
    }

    /// Builds the model `config` describes and sets every parameter from `dict`; no
    /// parameter is drawn at random first.
    ///
    /// # Errors
    /// As [`decoder_config`](Self::decoder_config) and [`TokenDecoderConfig::validate`],
    /// [`ConfigError::LargerThanWeights`] for sizes the weights cannot hold, and
    /// [`ModelError::MissingTensor`], [`ModelError::TensorShape`] or
    /// [`ModelError::UnexpectedTensor`] naming the tensor (and both shapes).
    pub fn from_state_dict(
        config: &LlamaConfig,
        dict: &StateDict,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let settings = config.settings()?;
        let decoder = Self::decoder_config(config)?;
        let d_model = config.hidden_size;
        let vocab = config.vocab_size;
        super::check_fits(
            dict,
            "model.embed_tokens.weight",
            [vocab, d_model],
            config.parameters(&settings),
        )?;
        // The sizes come from the configuration, not from the modules: asking a module for
        // its shape would draw its random values first.
        let shape = BlockShape {
            d_model,
            d_ff: config.intermediate_size,
            n_heads: config.num_attention_heads,
            n_kv_heads: settings.n_kv_heads,
            d_head: settings.head_dim,
        };
        let mut model = decoder.init(device)?;
        let table = dict.tensor("model.embed_tokens.weight", [vocab, d_model], device)?;
        let embedding = &mut model.embedding.embedding;
        embedding.weight = replace(embedding.weight.clone(), table);
        model.head = match model.head.take() {
            Some(head) => Some(load_linear(
                head,
                TorchLinear {
                    weight: dict.tensor("lm_head.weight", [vocab, d_model], device)?,
                    bias: None,
                },
                "lm_head",
            )?),
            None => None,
        };
        let decoder = &mut model.decoder;
        decoder.layers = std::mem::take(&mut decoder.layers)
            .into_iter()
            .enumerate()
            .map(|(i, block)| {
                load_block(block, dict, &format!("model.layers.{i}."), &shape, device)
            })
            .collect::<Result<_, _>>()?;
        let norm = decoder
            .norm_final
            .take()
            .expect("the configuration has a final norm");
        decoder.norm_final = Some(load_block_norm(
            norm,
            rms_norm(dict, "model.norm", d_model, device)?,
            "model.norm",
        )?);
        Ok(Self { model })
    }

    /// Logits of every position of a batch, with Hugging Face's `attention_mask`.
    ///
    /// Sequences of different lengths are left-padded, as `generate` pads them: each row of
    /// the mask is zeros, then ones. Positions count from each sequence's first real token
    /// (transformers' `position_ids = cumsum(mask) − 1`), and padded keys are masked for every
    /// query, so a sequence's logits do not depend on the padding it was given. The logits at
    /// padded positions are not meaningful.
    ///
    /// # Shapes
    /// - `input_ids`: `[batch, seq_len]`, ids in `0..vocab`
    /// - `attention_mask`: `[batch, seq_len]`, `1` = attend, `0` = padding; `None` means none
    /// - returns: `[batch, seq_len, vocab]`
    ///
    /// # Errors
    /// [`ModelError::TokenOutOfRange`], [`ModelError::ShapeMismatch`] for a mask of another
    /// shape, [`ModelError::NotLeftPadded`] for a mask with a padded slot after a real one.
    pub fn try_forward(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Option<Tensor<2, Int>>,
    ) -> Result<Tensor<3>, ModelError> {
        Ok(self
            .forward_with(input_ids, attention_mask, NeedWeights::No)?
            .logits)
    }

    /// [`try_forward`](Self::try_forward) returning every block's attention weights too.
    ///
    /// # Errors
    /// As [`try_forward`](Self::try_forward).
    pub fn forward_with(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Option<Tensor<2, Int>>,
        need_weights: NeedWeights,
    ) -> Result<TokenDecoderOutput, ModelError> {
        let [batch, seq_len] = input_ids.dims();
        let left_pad = match attention_mask {
            Some(mask) => left_padding(mask, [batch, seq_len])?,
            None => vec![0; batch],
        };
        self.model.try_forward(
            TokenDecoderInput::new(input_ids)
                .with_left_pad(&left_pad)
                .with_weights(need_weights),
        )
    }

    /// Generates through the key/value cache ([`TokenDecoder::generate`]); prompts of
    /// different lengths are left-padded ([`Prompt::from_sequences`]).
    ///
    /// # Errors
    /// As [`TokenDecoder::generate`].
    pub fn generate(
        &self,
        prompt: impl Into<Prompt>,
        config: GenerateConfig,
    ) -> Result<Generation<'_>, ModelError> {
        self.model.generate(prompt, config)
    }

    /// The decoder-only model the checkpoint was loaded into.
    pub fn model(&self) -> &TokenDecoder {
        &self.model
    }

    /// The model, for callers that keep only it.
    pub fn into_model(self) -> TokenDecoder {
        self.model
    }
}

/// Each row's leading padding, from a mask of zeros then ones.
fn left_padding(
    mask: Tensor<2, Int>,
    [batch, seq_len]: [usize; 2],
) -> Result<Vec<usize>, ModelError> {
    if mask.dims() != [batch, seq_len] {
        return Err(ModelError::ShapeMismatch {
            what: "attention_mask",
            expected: vec![batch, seq_len],
            got: mask.dims().to_vec(),
        });
    }
    let values = mask
        .into_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .expect("an Int tensor reads back as i64");
    values
        .chunks_exact(seq_len.max(1))
        .enumerate()
        .map(|(row, mask)| {
            let pad = mask.iter().take_while(|&&m| m == 0).count();
            match mask[pad..].iter().position(|&m| m == 0) {
                None => Ok(pad),
                Some(at) => Err(ModelError::NotLeftPadded {
                    row,
                    position: pad + at,
                }),
            }
        })
        .collect()
}

/// Reads a Llama-family folder's weights: the shards `model.safetensors.index.json` lists,
/// else one file as [`read_weights`](super::read_weights) finds it.
///
/// The index and its shards must be regular files, or links to files inside the folder
/// ([`folder_file`]).
///
/// Every tensor must be in the shard the index assigns it to: a tensor in a second shard, or in
/// a shard the index does not name for it, is refused rather than read from whichever file
/// came last.
///
/// # Errors
/// [`ModelError::File`] for an index or a shard that is not a regular file, links out of the
/// folder or is too large, [`ConfigError::Read`] for an index that cannot be parsed,
/// [`ModelError::Load`] naming a listed shard that is missing or cannot be parsed,
/// [`ModelError::MisplacedTensor`] naming a tensor, the shard it was found in and the one the
/// index assigns it to, and those of [`read_weights`](super::read_weights).
pub fn read_llama_weights(folder: &Path) -> Result<StateDict, ModelError> {
    let Some(index_path) = folder_file(folder, SHARD_INDEX_FILE)? else {
        return super::read_weights(folder);
    };
    let read_error = |reason: String| ConfigError::Read {
        path: index_path.display().to_string(),
        reason,
    };
    #[derive(Deserialize)]
    struct Index {
        weight_map: BTreeMap<String, String>,
    }
    let bytes = read_bounded(&index_path, SHARD_INDEX_MAX_BYTES)?;
    let index: Index = serde_json::from_slice(&bytes).map_err(|e| read_error(e.to_string()))?;
    let mut shards: Vec<&String> = index.weight_map.values().collect();
    shards.sort();
    shards.dedup();
    let mut dict: Option<StateDict> = None;
    for shard in shards {
        if shard.contains('/') || shard.contains('\\') || shard == ".." {
            return Err(read_error(format!(
                "shard \"{shard}\" is not a file name in the model folder"
            ))
            .into());
        }
        let Some(path) = folder_file(folder, shard)? else {
            return Err(ModelError::Load {
                reason: format!(
                    "{} lists the shard {shard}, which is not in {}",
                    SHARD_INDEX_FILE,
                    folder.display()
                ),
            });
        };
        let part = StateDict::from_safetensors_file(&path)?;
        // Each tensor is read from the one file the index names for it: a copy in another
        // shard would silently replace it, whichever file came last.
        for name in part.names() {
            let assigned = index.weight_map.get(name);
            if assigned != Some(shard) {
                return Err(ModelError::MisplacedTensor {
                    tensor: name.to_string(),
                    found: path.display().to_string(),
                    index: index_path.display().to_string(),
                    assigned: assigned.map(|other| folder.join(other).display().to_string()),
                });
            }
        }
        dict = Some(match dict {
            None => part,
            Some(mut dict) => {
                dict.extend(part);
                dict
            }
        });
    }
    for (name, shard) in &index.weight_map {
        let present = dict.as_ref().is_some_and(|d| d.contains(name));
        if !present {
            return Err(ModelError::Load {
                reason: format!(
                    "{SHARD_INDEX_FILE} places tensor `{name}` in {shard}, which does not hold it"
                ),
            });
        }
    }
    dict.ok_or_else(|| read_error("its weight_map lists no tensor".into()).into())
}

/// The sizes of one block.
#[derive(Clone, Copy)]
struct BlockShape {
    d_model: usize,
    d_ff: usize,
    n_heads: usize,
    n_kv_heads: usize,
    d_head: usize,
}

/// One Llama-family block into a [`DecoderBlock`] without cross-attention.
fn load_block(
    mut block: DecoderBlock,
    dict: &StateDict,
    prefix: &str,
    shape: &BlockShape,
    device: &Device,
) -> Result<DecoderBlock, ModelError> {
    let BlockShape {
        d_model,
        d_ff,
        n_heads,
        n_kv_heads,
        d_head,
    } = *shape;
    let name = |suffix: &str| format!("{prefix}{suffix}");
    let attention = &mut block.self_attention;
    let d_q = n_heads * d_head;
    let d_kv = n_kv_heads * d_head;
    let projections = [
        (&mut attention.w_q, "self_attn.q_proj", d_q, d_model),
        (&mut attention.w_k, "self_attn.k_proj", d_kv, d_model),
        (&mut attention.w_v, "self_attn.v_proj", d_kv, d_model),
        (&mut attention.w_o, "self_attn.o_proj", d_model, d_q),
    ];
    for (linear, suffix, d_output, d_input) in projections {
        let torch = dict.linear(&name(suffix), d_output, d_input, device)?;
        *linear = load_linear(linear.clone(), torch, &name(suffix))?;
    }
    for (norm, suffix) in [
        (&mut attention.q_norm, "self_attn.q_norm"),
        (&mut attention.k_norm, "self_attn.k_norm"),
    ] {
        let stored = dict.contains(&format!("{}.weight", name(suffix)));
        *norm = match (norm.take(), stored) {
            (Some(mut head_norm), _) => {
                let gamma = dict.tensor(&format!("{}.weight", name(suffix)), [d_head], device)?;
                head_norm.gamma = replace(head_norm.gamma, gamma);
                Some(head_norm)
            }
            (None, true) => {
                return Err(ModelError::UnexpectedTensor {
                    name: format!("{}.weight", name(suffix)),
                });
            }
            (None, false) => None,
        };
    }
    let ff = &mut block.feed_forward;
    let gate = ff
        .gate
        .take()
        .expect("the configuration gates the feed-forward network");
    let layers = [
        (gate, "mlp.gate_proj", d_ff, d_model),
        (ff.expand.clone(), "mlp.up_proj", d_ff, d_model),
        (ff.contract.clone(), "mlp.down_proj", d_model, d_ff),
    ];
    let [gate, up, down] = layers.map(|(linear, suffix, d_output, d_input)| {
        let torch = dict.linear(&name(suffix), d_output, d_input, device)?;
        load_linear(linear, torch, &name(suffix))
    });
    ff.gate = Some(gate?);
    ff.expand = up?;
    ff.contract = down?;
    for (norm, suffix) in [
        (&mut block.norm_self, "input_layernorm"),
        (&mut block.norm_ff, "post_attention_layernorm"),
    ] {
        let torch = rms_norm(dict, &name(suffix), d_model, device)?;
        *norm = load_block_norm(norm.clone(), torch, &name(suffix))?;
    }
    Ok(block)
}

/// `{name}.weight` `[d_model]` of an RMSNorm, with a bias only if one is stored (which the
/// RMSNorm then refuses by name).
fn rms_norm(
    dict: &StateDict,
    name: &str,
    d_model: usize,
    device: &Device,
) -> Result<TorchLayerNorm, ModelError> {
    let bias = format!("{name}.bias");
    Ok(TorchLayerNorm {
        weight: dict.tensor(&format!("{name}.weight"), [d_model], device)?,
        bias: if dict.contains(&bias) {
            Some(dict.tensor(&bias, [d_model], device)?)
        } else {
            None
        },
    })
}

/// The setting `key` of the rotary `parameters` as a length: an integer from 1 to `u32::MAX`
/// (a float such as `8192.0` is one), refused by name with its value as the file writes it
/// rather than cast (`-5.0 as usize` is 0).
fn positive_integer(key: &'static str, parameters: Option<&Value>) -> Result<usize, ModelError> {
    let value = parameters
        .and_then(|p| p.get(key))
        .filter(|v| !v.is_null())
        .ok_or_else(|| unsupported(key, "missing".into(), "a number"))?;
    match value.as_f64() {
        Some(n) if n >= 1.0 && n.fract() == 0.0 && n <= f64::from(u32::MAX) => Ok(n as usize),
        _ => Err(ConfigError::Invalid {
            key,
            value: value.to_string(),
            expected: "a positive integer",
        }
        .into()),
    }
}

fn unsupported(key: &'static str, value: String, supported: &'static str) -> ModelError {
    ConfigError::Unsupported {
        key,
        value,
        supported,
    }
    .into()
}

fn rms_eps() -> f64 {
    1e-6
}
fn silu() -> String {
    "silu".into()
}
