//! `hf/<model>/reference.json`: Hugging Face models written by `save_pretrained` next to
//! their outputs, one folder per model (`config.json`, `model.safetensors`, `reference.json`).
//!
//! - [`BertReference`]: a `BertModel`'s `last_hidden_state` and `pooler_output` for a padded
//!   batch with token types.
//! - [`Gpt2Reference`]: a `GPT2LMHeadModel`'s logits for a right-padded batch, and its greedy
//!   generation through the key/value cache with the logits of every step.
//! - [`CausalLmReference`]: a `LlamaForCausalLM`, `Qwen2ForCausalLM`, `Qwen3ForCausalLM` or
//!   `MistralForCausalLM`'s logits for a left-padded batch with its position ids, greedy
//!   generation with every step's logits, batched greedy generation, and (where the folder has
//!   a chat template) a rendered conversation with its ids and greedy answer.
//!
//! Token ids and masks are tensors of whole numbers; masks use Hugging Face's convention
//! (`1` = attend, `0` = padding).

use std::path::Path;

use serde::Deserialize;

use crate::{RefTensor, ReferenceError, ReferenceFile, Tolerance, read};

/// The file's name inside a model folder.
pub const FILE: &str = "reference.json";

/// How close a whole model's float32 outputs must be to transformers': `1e-4` absolute (the
/// differences of another order of operations, compounded over every layer).
pub const TOLERANCE: Tolerance = Tolerance::absolute(1e-4);

/// `hf/bert_tiny/reference.json`, and any folder of the same layout.
#[derive(Clone, Debug, Deserialize)]
pub struct BertReference {
    /// Token ids `[batch, seq_len]`.
    pub input_ids: RefTensor,
    /// `1` = attend, `0` = padding, `[batch, seq_len]`.
    pub attention_mask: RefTensor,
    /// Segment ids `[batch, seq_len]`.
    pub token_type_ids: RefTensor,
    /// The encoder's output `[batch, seq_len, d_model]`.
    pub last_hidden_state: RefTensor,
    /// `tanh(dense(first token))`, `[batch, d_model]`.
    pub pooler_output: RefTensor,
}

impl ReferenceFile for BertReference {
    const PATH: &'static str = "hf/bert_tiny/reference.json";
}

/// `hf/gpt2_tiny/reference.json`, and any folder of the same layout.
#[derive(Clone, Debug, Deserialize)]
pub struct Gpt2Reference {
    /// Token ids `[batch, seq_len]`, right-padded.
    pub batch_ids: RefTensor,
    /// `1` = attend, `0` = padding, `[batch, seq_len]`.
    pub batch_attention_mask: RefTensor,
    /// Logits of every position `[batch, seq_len, vocab]`: padded keys masked for every query,
    /// positions `0, 1, 2, …` whatever the mask.
    pub batch_logits: RefTensor,
    /// The prompt of the greedy run `[1, seq_len]`.
    pub prompt_ids: RefTensor,
    /// The prompt followed by the generated tokens `[1, seq_len + new]`.
    pub greedy_ids: RefTensor,
    /// The logits each generated token was chosen from, one `[vocab]` row per step.
    pub greedy_step_logits: Vec<RefTensor>,
}

impl ReferenceFile for Gpt2Reference {
    const PATH: &'static str = "hf/gpt2_tiny/reference.json";
}

impl BertReference {
    /// Reads `reference.json` from a model folder.
    ///
    /// # Errors
    ///
    /// As [`read`].
    pub fn from_folder(folder: &Path) -> Result<Self, ReferenceError> {
        read(&folder.join(FILE))
    }
}

impl Gpt2Reference {
    /// Reads `reference.json` from a model folder.
    ///
    /// # Errors
    ///
    /// As [`read`].
    pub fn from_folder(folder: &Path) -> Result<Self, ReferenceError> {
        read(&folder.join(FILE))
    }

    /// The greedy run's new tokens: `greedy_ids` after the prompt (none when a malformed file
    /// has no more `greedy_ids` than prompt ids).
    pub fn new_tokens(&self) -> Vec<i64> {
        new_tokens(&self.prompt_ids, &self.greedy_ids)
    }
}

/// `hf/{llama,qwen2,qwen3,mistral}_tiny/reference.json`, and any folder of the same layout.
#[derive(Clone, Debug, Deserialize)]
pub struct CausalLmReference {
    /// The transformers class, e.g. `"LlamaForCausalLM"`.
    pub architecture: String,
    /// The stored weights' type: `"f32"`, `"bf16"` or `"f16"`.
    pub file_dtype: String,
    /// Whether the weights are sharded over several files.
    pub sharded: bool,
    /// Token ids `[batch, seq_len]`, left-padded.
    pub batch_ids: RefTensor,
    /// `1` = attend, `0` = padding, `[batch, seq_len]`.
    pub batch_attention_mask: RefTensor,
    /// Position ids as `generate` derives them: the cumulative sum of the mask minus one,
    /// clamped at 0, `[batch, seq_len]`.
    pub batch_position_ids: RefTensor,
    /// Logits of every position `[batch, seq_len, vocab]`.
    pub batch_logits: RefTensor,
    /// The prompt of the greedy run `[1, seq_len]`.
    pub prompt_ids: RefTensor,
    /// The prompt followed by the generated tokens `[1, seq_len + new]`.
    pub greedy_ids: RefTensor,
    /// The logits each generated token was chosen from, one `[vocab]` row per step.
    pub greedy_step_logits: Vec<RefTensor>,
    /// The left-padded batch followed by its greedy tokens `[batch, seq_len + new]`.
    pub batch_greedy_ids: RefTensor,
    /// A conversation rendered by the folder's chat template, where it has one.
    #[serde(default)]
    pub chat: Option<ChatReference>,
}

/// One message of a conversation.
#[derive(Clone, Debug, Deserialize)]
pub struct ChatMessageReference {
    /// `"system"`, `"user"` or `"assistant"`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// A conversation through transformers' `apply_chat_template` and `generate`.
#[derive(Clone, Debug, Deserialize)]
pub struct ChatReference {
    /// The conversation.
    pub messages: Vec<ChatMessageReference>,
    /// Whether the assistant's opening was appended.
    pub add_generation_prompt: bool,
    /// The template's rendering.
    pub rendered: String,
    /// The rendering's token ids.
    pub ids: Vec<i64>,
    /// Greedy tokens generated after the rendering.
    pub greedy_new_ids: Vec<i64>,
    /// Their text.
    pub greedy_new_text: String,
    /// A plain text ...
    pub text: String,
    /// ... and its token ids.
    pub text_ids: Vec<i64>,
}

impl ReferenceFile for CausalLmReference {
    const PATH: &'static str = "hf/llama_tiny/reference.json";
}

impl CausalLmReference {
    /// Reads `reference.json` from a model folder.
    ///
    /// # Errors
    ///
    /// As [`read`].
    pub fn from_folder(folder: &Path) -> Result<Self, ReferenceError> {
        read(&folder.join(FILE))
    }

    /// The greedy run's new tokens: `greedy_ids` after the prompt (none when a malformed file
    /// has no more `greedy_ids` than prompt ids).
    pub fn new_tokens(&self) -> Vec<i64> {
        new_tokens(&self.prompt_ids, &self.greedy_ids)
    }
}

/// `greedy` after the `prompt`'s length, as ids.
fn new_tokens(prompt: &RefTensor, greedy: &RefTensor) -> Vec<i64> {
    let new = greedy.data.get(prompt.data.len()..).unwrap_or_default();
    new.iter().map(|&id| id as i64).collect()
}
