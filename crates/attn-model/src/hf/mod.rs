//! Models written by Hugging Face's `save_pretrained`: a folder with `config.json` and
//! `model.safetensors` (or `pytorch_model.bin`), loaded into this crate's own modules.
//!
//! - [`Bert`]: `BertModel`, on [`Encoder`](crate::Encoder) (post-norm blocks, LayerNorm
//!   epsilon `1e-12`, exact GELU) with word, position and token-type embeddings and the pooler.
//! - [`Gpt2`]: `GPT2LMHeadModel`, on [`TokenDecoder`](crate::TokenDecoder) (pre-norm causal
//!   blocks, learned positions, tanh GELU, final LayerNorm `ln_f`, head tied to the token
//!   embedding), which decodes through its [`KvCache`](crate::KvCache).
//! - [`CausalLm`]: `LlamaForCausalLM`, `Qwen2ForCausalLM`, `Qwen3ForCausalLM` and
//!   `MistralForCausalLM` (SmolLM2, TinyLlama, Llama 3.x, Qwen2.5, Qwen3, Mistral), on the
//!   same [`TokenDecoder`](crate::TokenDecoder) with RMSNorm, SwiGLU, half-split rotary
//!   positions, grouped-query heads and, for Mistral, a sliding window.
//!
//! Files are read through burn-store ([`StateDict`]); F16, BF16 and F64 tensors become f32.
//! Tensors are looked up by their Hugging Face names, with or without the task model's
//! prefix (`bert.`, `transformer.`); a missing tensor, a tensor of the wrong shape and a
//! setting this crate does not implement are each a [`ModelError`] naming the tensor or key
//! and the numbers. Tensors the loaders do not use (a task head, a causal-mask buffer) are
//! ignored.
//!
//! ```no_run
//! use attn_model::hf::Gpt2;
//! use attn_model::{GenerateConfig, Prompt};
//! use burn::tensor::{Device, Int, Tensor};
//!
//! let device = Device::flex();
//! let gpt2 = Gpt2::from_pretrained("gpt2_tiny", &device).expect("a GPT-2 folder");
//! let prompt = Tensor::<2, Int>::from_ints([[19, 51, 78]], &device);
//! let new = gpt2.model().generate(Prompt::new(prompt), GenerateConfig::new(8)).unwrap();
//! println!("{:?}", new.tokens().unwrap());
//! ```

mod auto;
mod bert;
mod chat;
mod config;
mod generation_config;
mod gpt2;
mod llama;

use std::path::Path;

pub use auto::{AutoModel, Family, MODEL_TYPES};
pub use bert::{Bert, BertOutput};
pub use chat::{
    CHAT_MAX_BYTES, CHAT_MAX_CHAIN, CHAT_PROMPT_MAX_BYTES, CHAT_RECURSION_LIMIT, CHAT_RENDER_FUEL,
    CHAT_TEMPLATE_FILE, ChatError, ChatMessage, ChatTemplate, SpecialTokens, TOKENIZER_CONFIG_FILE,
};
pub use config::{BertConfig, CONFIG_FILE, CONFIG_MAX_BYTES, Gpt2Config, read_config};
pub use generation_config::{GENERATION_CONFIG_FILE, GenerationDefaults};
pub use gpt2::Gpt2;
pub use llama::{
    Architecture, CausalLm, LlamaConfig, LlamaForCausalLM, LlamaSettings, MistralForCausalLM,
    Qwen2ForCausalLM, Qwen3ForCausalLM, SHARD_INDEX_FILE, read_llama_weights,
};

use crate::error::{ConfigError, ModelError};
use crate::files::folder_file;
use crate::pytorch::{StateDict, TorchLayerNorm, TorchLinear};
use burn::tensor::Device;

/// The weight files a folder may hold, in the order they are looked for.
pub const WEIGHT_FILES: [&str; 3] = ["model.safetensors", "pytorch_model.bin", "model.pt"];

/// Reads a model folder's weights: `model.safetensors`, else the pickled `pytorch_model.bin`
/// or `model.pt` (through burn-store's PyTorch reader). The first of them the folder holds is
/// read; it must be a regular file, or a link to one inside the folder ([`folder_file`]).
///
/// # Errors
/// [`ConfigError::NoWeights`] when the folder holds none of them, [`ModelError::File`] naming
/// the first it holds when that is not a regular file (a FIFO, a device) or links out of the
/// folder, [`ModelError::Load`] when the file cannot be parsed.
pub fn read_weights(folder: &Path) -> Result<StateDict, ModelError> {
    let [safetensors, bin, pt] = WEIGHT_FILES;
    if let Some(path) = folder_file(folder, safetensors)? {
        return StateDict::from_safetensors_file(&path);
    }
    for pickled in [bin, pt] {
        if let Some(path) = folder_file(folder, pickled)? {
            return StateDict::from_pytorch_file(&path);
        }
    }
    Err(ConfigError::NoWeights {
        folder: folder.display().to_string(),
        files: "model.safetensors, pytorch_model.bin, model.pt",
    }
    .into())
}

/// Refuses a configuration that does not fit `dict`, before any tensor is made: the token
/// table `table` must have the shape `[vocab, d_model]` the configuration gives (the mismatch
/// most edits of `config.json` make), and the parameters the configuration describes must not
/// outnumber twice the values stored. The sizes in `config.json` are so bounded by the weight
/// file's own; a configuration within the bound that still disagrees with the weights is named
/// tensor by tensor as they are read (a missing tensor, a shape).
fn check_fits(
    dict: &StateDict,
    table: &str,
    [vocab, d_model]: [usize; 2],
    described: Option<u64>,
) -> Result<(), ModelError> {
    dict.expect_shape(table, &[vocab, d_model])?;
    let stored = dict.values();
    match described {
        Some(n) if n <= stored.saturating_mul(2) => Ok(()),
        described => Err(ConfigError::LargerThanWeights {
            described: described.map_or_else(|| "more than 2^64".into(), |n| n.to_string()),
            stored,
        }
        .into()),
    }
}

/// The prefix a task model puts before the base model's names (`bert.`, `transformer.`):
/// `prefixed` when `{prefixed}{probe}` is in the dict, else none.
fn prefix(dict: &StateDict, prefixed: &str, probe: &str) -> String {
    if dict.contains(&format!("{prefixed}{probe}")) {
        prefixed.to_string()
    } else {
        String::new()
    }
}

/// `{name}.weight` `[d_output, d_input]` and `{name}.bias` `[d_output]` of an `nn.Linear`,
/// both required.
fn linear(
    dict: &StateDict,
    name: &str,
    d_output: usize,
    d_input: usize,
    device: &Device,
) -> Result<TorchLinear, ModelError> {
    Ok(TorchLinear {
        weight: dict.tensor(&format!("{name}.weight"), [d_output, d_input], device)?,
        bias: Some(dict.tensor(&format!("{name}.bias"), [d_output], device)?),
    })
}

/// `{name}.weight` and `{name}.bias` of an `nn.LayerNorm`, both `[d_model]` and required.
fn layer_norm(
    dict: &StateDict,
    name: &str,
    d_model: usize,
    device: &Device,
) -> Result<TorchLayerNorm, ModelError> {
    Ok(TorchLayerNorm {
        weight: dict.tensor(&format!("{name}.weight"), [d_model], device)?,
        bias: Some(dict.tensor(&format!("{name}.bias"), [d_model], device)?),
    })
}
