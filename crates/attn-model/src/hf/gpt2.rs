//! `GPT2LMHeadModel` (Radford et al. 2019) on this crate's [`TokenDecoder`]:
//!
//! ```text
//! x = E_tok[ids] + E_pos[0..seq_len]                  no √d_model scale
//! x = Decoder(x)                  pre-norm causal blocks, tanh GELU, final LayerNorm ln_f
//! logits = x · E_tokᵀ                                 the head tied to the token table
//! ```
//!
//! Hugging Face's names, under `transformer.` (or none for a bare `GPT2Model`): `wte.weight`,
//! `wpe.weight`, `ln_f.*`, and for block `i` under `h.{i}.`: `ln_1.*` (`norm_self`),
//! `attn.c_attn.*`, `attn.c_proj.*` (`W_O`), `ln_2.*` (`norm_ff`), `mlp.c_fc.*` (`W_1`),
//! `mlp.c_proj.*` (`W_2`). GPT-2's `Conv1D` stores its weight `[d_input, d_output]`, burn's
//! layout already; `c_attn` holds `W_Q`, `W_K` and `W_V` side by side, `[d_model, 3 · d_model]`
//! (columns `0..d_model` are `W_Q`), and its bias `[3 · d_model]` the same way: both are split
//! here.

use std::path::Path;

use attn_pos::PositionalScheme;
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor};

use super::config::{Gpt2Config, read_config};
use super::{layer_norm, prefix, read_weights};
use crate::decoder::{DecoderBlock, DecoderInput};
use crate::error::ModelError;
use crate::generate::{GenerateConfig, Generation, Prompt};
use crate::pytorch::{
    StateDict, TorchLinear, TorchMultiheadAttention, load_attention, load_block_norm, load_linear,
    replace,
};
use crate::residual::NormPlacement;
use crate::token_decoder::{TokenDecoder, TokenDecoderConfig};

/// A Hugging Face `GPT2LMHeadModel` as a [`TokenDecoder`], with Hugging Face's padding
/// convention for whole batches ([`try_forward`](Self::try_forward)).
#[derive(Module, Debug)]
pub struct Gpt2 {
    model: TokenDecoder,
}

impl Gpt2 {
    /// Loads a folder written by `GPT2LMHeadModel.save_pretrained` (`config.json`,
    /// `model.safetensors` or `pytorch_model.bin`).
    ///
    /// # Errors
    /// As [`read_config`], [`read_weights`](super::read_weights) and
    /// [`from_state_dict`](Self::from_state_dict).
    pub fn from_pretrained(folder: impl AsRef<Path>, device: &Device) -> Result<Self, ModelError> {
        let folder = folder.as_ref();
        let config: Gpt2Config = read_config(folder)?;
        Self::from_state_dict(&config, &read_weights(folder)?, device)
    }

    /// The decoder this model is: its blocks, its cache and its attention weights
    /// ([`TokenDecoder::try_forward`] with [`NeedWeights::PerHead`](crate::NeedWeights)).
    pub fn decoder(&self) -> &TokenDecoder {
        &self.model
    }

    /// The [`TokenDecoderConfig`] of a GPT-2 configuration.
    ///
    /// # Errors
    /// [`ConfigError::Unsupported`](crate::ConfigError::Unsupported) for a setting this crate
    /// does not implement.
    pub fn decoder_config(config: &Gpt2Config) -> Result<TokenDecoderConfig, ModelError> {
        let activation = config.check()?;
        Ok(TokenDecoderConfig::new(
            config.vocab_size,
            config.n_embd,
            config.n_head,
            config.n_layer,
            config.d_ff(),
            PositionalScheme::Learned {
                max_len: config.n_positions,
            },
        )
        .with_dropout(0.0)
        .with_norm(NormPlacement::Pre)
        .with_activation(activation)
        .with_scale_embedding(false)
        .with_final_norm(true)
        .with_tie_embeddings(true)
        .with_layer_norm_eps(config.layer_norm_epsilon))
    }

    /// Builds the model `config` describes and sets every parameter from `dict`.
    ///
    /// # Errors
    /// As [`decoder_config`](Self::decoder_config), the errors of
    /// [`TokenDecoderConfig::validate`], and [`ModelError::MissingTensor`] or
    /// [`ModelError::TensorShape`] naming the tensor and both shapes.
    pub fn from_state_dict(
        config: &Gpt2Config,
        dict: &StateDict,
        device: &Device,
    ) -> Result<Self, ModelError> {
        let decoder = Self::decoder_config(config)?;
        let d_model = config.n_embd;
        let p = prefix(dict, "transformer.", "wte.weight");
        let table = format!("{p}wte.weight");
        super::check_fits(
            dict,
            &table,
            [config.vocab_size, d_model],
            config.parameters(),
        )?;
        let mut model = decoder.init(device)?;
        let embedding = &mut model.embedding;
        let wte = dict.tensor(
            &format!("{p}wte.weight"),
            [config.vocab_size, d_model],
            device,
        )?;
        embedding.embedding.weight = replace(embedding.embedding.weight.clone(), wte);
        let wpe = dict.tensor(
            &format!("{p}wpe.weight"),
            [config.n_positions, d_model],
            device,
        )?;
        let learned = embedding
            .learned
            .as_mut()
            .expect("GPT-2's configuration has a learned position table");
        learned.weight = replace(learned.weight.clone(), wpe);
        let decoder = &mut model.decoder;
        decoder.layers = std::mem::take(&mut decoder.layers)
            .into_iter()
            .enumerate()
            .map(|(i, block)| load_block(block, dict, &format!("{p}h.{i}."), device))
            .collect::<Result<_, _>>()?;
        let ln_f = format!("{p}ln_f");
        let norm = decoder
            .norm_final
            .take()
            .expect("GPT-2's configuration has a final LayerNorm");
        decoder.norm_final = Some(load_block_norm(
            norm,
            layer_norm(dict, &ln_f, d_model, device)?,
            &ln_f,
        )?);
        Ok(Self { model })
    }

    /// Logits of every position of a batch, with Hugging Face's `attention_mask`.
    ///
    /// Position ids run `0, 1, 2, …` whatever the mask, as Hugging Face's GPT-2 does when it
    /// is given no `position_ids`: right-pad a batch. Padded keys are masked for every query,
    /// on top of causality, so every position (padding included) is defined.
    ///
    /// # Shapes
    /// - `input_ids`: `[batch, seq_len]`, ids in `0..vocab`
    /// - `attention_mask`: `[batch, seq_len]`, `1` = attend, `0` = padding; `None` means none
    /// - returns: `[batch, seq_len, vocab]`
    ///
    /// # Errors
    /// [`ModelError::TokenOutOfRange`], [`ModelError::ShapeMismatch`] for a mask of another
    /// shape, [`ModelError::Positional`] for a sequence longer than `n_positions`.
    pub fn try_forward(
        &self,
        input_ids: Tensor<2, Int>,
        attention_mask: Option<Tensor<2, Int>>,
    ) -> Result<Tensor<3>, ModelError> {
        let [batch, seq_len] = input_ids.dims();
        let x = self
            .model
            .embedding
            .forward(input_ids, 0, &vec![0; batch])?; // [batch, seq_len, d_model]
        let mut input = DecoderInput::new(x);
        if let Some(mask) = attention_mask {
            if mask.dims() != [batch, seq_len] {
                return Err(ModelError::ShapeMismatch {
                    what: "attention_mask",
                    expected: vec![batch, seq_len],
                    got: mask.dims().to_vec(),
                });
            }
            input = input.with_padding(mask.equal_elem(0)); // [batch, seq_len], true = padding
        }
        let x = self.model.decoder.try_forward(input)?.output; // [batch, seq_len, d_model]
        Ok(self.model.logits(x)) // [batch, seq_len, vocab]
    }

    /// Generates through the key/value cache ([`TokenDecoder::generate`]); prompts of
    /// different lengths are left-padded ([`Prompt::from_sequences`]), and their positions
    /// count from each one's first real token.
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

/// A `Conv1D`'s `{name}.weight` `[d_input, d_output]` and `{name}.bias` `[d_output]`, as an
/// `nn.Linear` in PyTorch's layout (`[d_output, d_input]`) for the shared import.
fn conv1d(
    dict: &StateDict,
    name: &str,
    d_input: usize,
    d_output: usize,
    device: &Device,
) -> Result<TorchLinear, ModelError> {
    let weight = dict.tensor(&format!("{name}.weight"), [d_input, d_output], device)?;
    Ok(TorchLinear {
        weight: weight.transpose(), // [d_output, d_input]
        bias: Some(dict.tensor(&format!("{name}.bias"), [d_output], device)?),
    })
}

/// One GPT-2 block into a [`DecoderBlock`] without cross-attention.
fn load_block(
    mut block: DecoderBlock,
    dict: &StateDict,
    prefix: &str,
    device: &Device,
) -> Result<DecoderBlock, ModelError> {
    let d_model = block.d_model();
    let d_ff = block.feed_forward.d_ff();
    let name = |suffix: &str| format!("{prefix}{suffix}");
    // W_Q, W_K, W_V side by side: rows of the transposed c_attn.
    let c_attn = conv1d(dict, &name("attn.c_attn"), d_model, 3 * d_model, device)?;
    let part = |i: usize| TorchLinear {
        weight: c_attn.weight.clone().narrow(0, i * d_model, d_model), // [d_model, d_model]
        bias: c_attn
            .bias
            .clone()
            .map(|b| b.narrow(0, i * d_model, d_model)),
    };
    let attention = TorchMultiheadAttention {
        q: part(0),
        k: part(1),
        v: part(2),
        out_proj: conv1d(dict, &name("attn.c_proj"), d_model, d_model, device)?,
    };
    block.self_attention = load_attention(block.self_attention, attention, &name("attn."))?;
    let ln_1 = name("ln_1");
    block.norm_self = load_block_norm(
        block.norm_self,
        layer_norm(dict, &ln_1, d_model, device)?,
        &ln_1,
    )?;
    let c_fc = name("mlp.c_fc");
    block.feed_forward.expand = load_linear(
        block.feed_forward.expand,
        conv1d(dict, &c_fc, d_model, d_ff, device)?,
        &c_fc,
    )?;
    let c_proj = name("mlp.c_proj");
    block.feed_forward.contract = load_linear(
        block.feed_forward.contract,
        conv1d(dict, &c_proj, d_ff, d_model, device)?,
        &c_proj,
    )?;
    let ln_2 = name("ln_2");
    block.norm_ff = load_block_norm(
        block.norm_ff,
        layer_norm(dict, &ln_2, d_model, device)?,
        &ln_2,
    )?;
    Ok(block)
}
