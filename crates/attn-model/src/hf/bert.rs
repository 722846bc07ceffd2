//! `BertModel` (Devlin et al. 2019) on this crate's [`Encoder`]:
//!
//! ```text
//! x = LayerNorm(E_word[ids] + E_pos[0..seq_len] + E_type[token_types])   epsilon 1e-12
//! h = Encoder(x, padding)                  post-norm blocks, exact GELU, epsilon 1e-12
//! pooled = tanh(h[:, 0] · W_pool + b_pool)
//! ```
//!
//! Hugging Face's names: `embeddings.{word,position,token_type}_embeddings.weight`,
//! `embeddings.LayerNorm.*`, and for block `i` under `encoder.layer.{i}.`:
//! `attention.self.{query,key,value}.*` (three separate `Linear`s, `[out, in]`),
//! `attention.output.dense.*` (`W_O`), `attention.output.LayerNorm.*` (`norm_attn`),
//! `intermediate.dense.*` (`W_1`), `output.dense.*` (`W_2`), `output.LayerNorm.*` (`norm_ff`);
//! `pooler.dense.*`. A padded key gets Hugging Face's `finfo.min` added to its score there
//! and `−∞` here: both give it weight 0.

use std::path::Path;

use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Device, Int, Tensor};

use super::config::{BertConfig, read_config};
use super::{layer_norm, linear, prefix, read_weights};
use crate::attention::NeedWeights;
use crate::embedding::check_tokens;
use crate::encoder::{Encoder, EncoderBlock, EncoderBlockConfig, EncoderConfig, EncoderInput};
use crate::error::ModelError;
use crate::norm::{LayerNorm, LayerNormConfig};
use crate::pytorch::{
    StateDict, TorchEncoderLayer, TorchMultiheadAttention, load_linear, load_norm, replace,
};
use crate::residual::NormPlacement;

/// What [`Bert::try_forward`] returns.
#[derive(Clone, Debug)]
pub struct BertOutput {
    /// The last block's output, `[batch, seq_len, d_model]`.
    pub last_hidden_state: Tensor<3>,
    /// `tanh(h[:, 0] · W_pool + b_pool)`, `[batch, d_model]`; `None` for a checkpoint saved
    /// without the pooler.
    pub pooler_output: Option<Tensor<2>>,
    /// Each layer's attention weights, `[batch, n_heads, seq_len, seq_len]`, from
    /// [`Bert::attentions`]; empty from [`Bert::try_forward`].
    pub attentions: Vec<Tensor<4>>,
}

/// A Hugging Face `BertModel`: embeddings, [`Encoder`], pooler.
#[derive(Module, Debug)]
pub struct Bert {
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    token_type_embeddings: Embedding,
    norm_embeddings: LayerNorm,
    encoder: Encoder,
    pooler: Option<Linear>,
    vocab: usize,
    type_vocab: usize,
}

impl Bert {
    /// Loads a folder written by `BertModel.save_pretrained` (`config.json`,
    /// `model.safetensors` or `pytorch_model.bin`).
    ///
    /// # Errors
    /// As [`read_config`], [`read_weights`](super::read_weights) and
    /// [`from_state_dict`](Self::from_state_dict).
    pub fn from_pretrained(folder: impl AsRef<Path>, device: &Device) -> Result<Self, ModelError> {
        let folder = folder.as_ref();
        let config: BertConfig = read_config(folder)?;
        Self::from_state_dict(&config, &read_weights(folder)?, device)
    }

    /// Builds the model `config` describes and sets every parameter from `dict`.
    ///
    /// # Errors
    /// [`ConfigError::Unsupported`](crate::ConfigError::Unsupported) for a setting this crate
    /// does not implement, the errors of [`EncoderConfig::validate`] (heads that do not divide
    /// the width, ...), and [`ModelError::MissingTensor`] or [`ModelError::TensorShape`]
    /// naming the tensor and both shapes.
    pub fn from_state_dict(
        config: &BertConfig,
        dict: &StateDict,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let activation = config.check()?;
        let d_model = config.hidden_size;
        let block = EncoderBlockConfig::new(
            d_model,
            config.num_attention_heads,
            config.intermediate_size,
        )
        .with_dropout(0.0)
        .with_norm(NormPlacement::Post)
        .with_activation(activation)
        .with_layer_norm_eps(config.layer_norm_eps);
        let p = prefix(dict, "bert.", "embeddings.word_embeddings.weight");
        let words = format!("{p}embeddings.word_embeddings.weight");
        super::check_fits(
            dict,
            &words,
            [config.vocab_size, d_model],
            config.parameters(),
        )?;
        let encoder = EncoderConfig::new(config.num_hidden_layers, block).init(device)?;
        let table = |name: &str, rows: usize| -> Result<Embedding, ModelError> {
            let mut embedding = EmbeddingConfig::new(rows, d_model).init(device);
            let name = format!("{p}embeddings.{name}.weight");
            embedding.weight = replace(
                embedding.weight,
                dict.tensor(&name, [rows, d_model], device)?,
            );
            Ok(embedding)
        };
        let word_embeddings = table("word_embeddings", config.vocab_size)?;
        let position_embeddings = table("position_embeddings", config.max_position_embeddings)?;
        let token_type_embeddings = table("token_type_embeddings", config.type_vocab_size)?;
        let norm_name = format!("{p}embeddings.LayerNorm");
        let norm_embeddings = load_norm(
            LayerNormConfig::new(d_model)
                .with_epsilon(config.layer_norm_eps)
                .init(device),
            layer_norm(dict, &norm_name, d_model, device)?,
            &norm_name,
        )?;
        let mut encoder = encoder;
        encoder.layers = std::mem::take(&mut encoder.layers)
            .into_iter()
            .enumerate()
            .map(|(i, block)| load_block(block, dict, &format!("{p}encoder.layer.{i}."), device))
            .collect::<Result<_, _>>()?;
        let pooler_name = format!("{p}pooler.dense");
        let pooler = if dict.contains(&format!("{pooler_name}.weight")) {
            let torch = linear(dict, &pooler_name, d_model, d_model, device)?;
            Some(load_linear(
                LinearConfig::new(d_model, d_model).init(device),
                torch,
                &pooler_name,
            )?)
        } else {
            None
        };
        Ok(Self {
            word_embeddings,
            position_embeddings,
            token_type_embeddings,
            norm_embeddings,
            encoder,
            pooler,
            vocab: config.vocab_size,
            type_vocab: config.type_vocab_size,
        })
    }

    /// Runs the model on token ids.
    ///
    /// # Shapes
    /// - `input_ids`: `[batch, seq_len]`, ids in `0..vocab`, `seq_len` at most
    ///   `max_position_embeddings`
    /// - `token_type_ids`: `[batch, seq_len]` in `0..type_vocab_size`; `None` means all 0
    /// - `attention_mask`: `[batch, seq_len]`, Hugging Face's convention: `1` = attend,
    ///   `0` = padding (never attended as a key); `None` means no padding
    /// - returns: `last_hidden_state` `[batch, seq_len, d_model]`, `pooler_output`
    ///   `[batch, d_model]`
    ///
    /// # Errors
    /// [`ModelError::TokenOutOfRange`] (token ids and token types),
    /// [`ModelError::SequenceTooLong`], [`ModelError::ShapeMismatch`] naming the input.
    pub fn try_forward(
        &self,
        input_ids: Tensor<2, Int>,
        token_type_ids: Option<Tensor<2, Int>>,
        attention_mask: Option<Tensor<2, Int>>,
    ) -> Result<BertOutput, ModelError> {
        self.run(input_ids, token_type_ids, attention_mask, NeedWeights::No)
    }

    /// Every layer's attention weights on `input_ids` (token type 0, no padding), first layer
    /// first: what transformers returns as `attentions` with `output_attentions=True`.
    ///
    /// # Shapes
    /// - `input_ids`: `[batch, seq_len]`
    /// - output: one `[batch, n_heads, seq_len, seq_len]` per layer
    ///
    /// # Errors
    /// As [`try_forward`](Self::try_forward).
    pub fn attentions(&self, input_ids: Tensor<2, Int>) -> Result<Vec<Tensor<4>>, ModelError> {
        Ok(self
            .run(input_ids, None, None, NeedWeights::PerHead)?
            .attentions)
    }

    fn run(
        &self,
        input_ids: Tensor<2, Int>,
        token_type_ids: Option<Tensor<2, Int>>,
        attention_mask: Option<Tensor<2, Int>>,
        need_weights: NeedWeights,
    ) -> Result<BertOutput, ModelError> {
        let [batch, seq_len] = input_ids.dims();
        check_tokens(&input_ids, self.vocab)?;
        let max_len = self.position_embeddings.weight.shape().dims::<2>()[0];
        if seq_len > max_len {
            return Err(ModelError::SequenceTooLong { seq_len, max_len });
        }
        let device = input_ids.device();
        let token_types = match token_type_ids {
            Some(types) => {
                check_shape("token_type_ids", &types, [batch, seq_len])?;
                check_tokens(&types, self.type_vocab)?;
                types
            }
            None => Tensor::zeros([batch, seq_len], &device),
        };
        let padding = match attention_mask {
            Some(mask) => {
                check_shape("attention_mask", &mask, [batch, seq_len])?;
                Some(mask.equal_elem(0)) // [batch, seq_len], true = padding
            }
            None => None,
        };
        let positions = self
            .position_embeddings
            .weight
            .val()
            .narrow(0, 0, seq_len) // [seq_len, d_model]
            .unsqueeze::<3>(); // [1, seq_len, d_model]
        let x = self.word_embeddings.forward(input_ids) // [batch, seq_len, d_model]
            + positions
            + self.token_type_embeddings.forward(token_types); // [batch, seq_len, d_model]
        let x = self.norm_embeddings.forward(x);
        let encoded = self.encoder.try_forward(EncoderInput {
            x,
            padding,
            need_weights,
        })?;
        let hidden = encoded.output; // [batch, seq_len, d_model]
        let pooler_output = self.pooler.as_ref().map(|pooler| {
            let [_, _, d_model] = hidden.dims();
            let first = hidden.clone().narrow(1, 0, 1).reshape([batch, d_model]); // [batch, d_model]
            pooler.forward(first).tanh() // [batch, d_model]
        });
        Ok(BertOutput {
            last_hidden_state: hidden,
            pooler_output,
            attentions: encoded.weights,
        })
    }

    /// Model width.
    pub fn d_model(&self) -> usize {
        self.norm_embeddings.gamma.shape().dims::<1>()[0]
    }

    /// Vocabulary size.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// The encoder stack.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }
}

/// One `BertLayer` into an [`EncoderBlock`], through the `nn.TransformerEncoderLayer` import.
fn load_block(
    block: EncoderBlock,
    dict: &StateDict,
    prefix: &str,
    device: &Device,
) -> Result<EncoderBlock, ModelError> {
    let d_model = block.d_model();
    let d_ff = block.feed_forward.d_ff();
    let name = |suffix: &str| format!("{prefix}{suffix}");
    let projection = |suffix: &str| linear(dict, &name(suffix), d_model, d_model, device);
    let weights = TorchEncoderLayer {
        self_attn: TorchMultiheadAttention {
            q: projection("attention.self.query")?,
            k: projection("attention.self.key")?,
            v: projection("attention.self.value")?,
            out_proj: projection("attention.output.dense")?,
        },
        linear1: linear(dict, &name("intermediate.dense"), d_ff, d_model, device)?,
        linear2: linear(dict, &name("output.dense"), d_model, d_ff, device)?,
        norm1: layer_norm(dict, &name("attention.output.LayerNorm"), d_model, device)?,
        norm2: layer_norm(dict, &name("output.LayerNorm"), d_model, device)?,
    };
    // Shapes and presence were checked above under Hugging Face's names.
    block.load_pytorch(weights)
}

fn check_shape(
    what: &'static str,
    t: &Tensor<2, Int>,
    expected: [usize; 2],
) -> Result<(), ModelError> {
    if t.dims() == expected {
        Ok(())
    } else {
        Err(ModelError::ShapeMismatch {
            what,
            expected: expected.to_vec(),
            got: t.dims().to_vec(),
        })
    }
}
