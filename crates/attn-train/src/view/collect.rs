//! The weights an explorer page shows: a run folder's model, or a Hugging Face folder's, on
//! the user's text.
//!
//! ```text
//! text run            the run's tokenizer             self-attention
//! add, translate      the task's prompt               self-attention (and encoder, cross)
//! copy … context      the task's token names, spaced  self-attention
//! GPT-2 folder        its tokenizer.json              self-attention (causal)
//! BERT folder         its tokenizer.json, [CLS] [SEP] self-attention
//! ```
//!
//! A translate run's page shows the decoder writing its own greedy answer: its queries are the
//! start token and the answer but its last token (what the decoder reads while writing), its
//! cross-attention keys the source words.

use std::path::Path;

use attn_model::hf::{Architecture, Bert, CausalLm, Gpt2, read_config};
use attn_model::{
    DecoderWeights, EncoderDecoderInput, GenerateConfig, NeedWeights, Prompt, TokenDecoder,
    TokenDecoderInput,
};
use burn::tensor::{Device, Int, Tensor, TensorData};
use serde::Deserialize;

use super::AttentionView;
use crate::checkpoint;
use crate::error::TrainError;
use crate::inspect::attention_maps;
use crate::model::Model;
use crate::run_dir;
use crate::tasks::TaskKind;
use crate::text::{self, TextTokenizer};

/// The views of the model of the run in `dir` (its newest checkpoint) on `text`, and a title.
///
/// # Errors
///
/// [`TrainError::NoCheckpoint`] for a run without a checkpoint, [`TrainError::Config`] for a
/// text the task cannot read, and the errors of loading and running the model.
pub fn from_run(
    dir: &Path,
    text: &str,
    device: &Device,
) -> Result<(String, Vec<AttentionView>), TrainError> {
    let config = run_dir::read_config(dir)?;
    let task = &config.task;
    let path = checkpoint::weights_to_use(dir)?;
    let model = checkpoint::load_model(&path, Model::init(&config, device)?)?;
    let title = format!(
        "{} run {}, checkpoint {}: {text:?}",
        task.kind,
        dir.display(),
        path.file_name().unwrap_or_default().to_string_lossy()
    );
    let views = match &model {
        Model::Decoder(decoder) if task.kind == TaskKind::Text => {
            let tokenizer = text::read_run_tokenizer(dir)?;
            let (ids, names) = tokens(&tokenizer, text, false)?;
            vec![decoder_view(decoder, &ids, names, device)?]
        }
        Model::Decoder(decoder) => {
            let prompt = task.generation_prompt(text).map_err(TrainError::Config)?;
            let names = prompt.tokens.iter().map(|&t| task.token_name(t)).collect();
            vec![decoder_view(decoder, &prompt.tokens, names, device)?]
        }
        Model::Encoder(encoder) => {
            let ids = read_names(text, |id| task.token_name(id), task.model_vocab())?;
            let names = ids.iter().map(|&t| task.token_name(t)).collect();
            let layers: Vec<Vec<f32>> = attention_maps(encoder, &ids, device)?
                .into_iter()
                .map(|layer| layer.weights)
                .collect();
            let heads = config.model.n_heads;
            vec![view("self", "Self-attention", names, None, heads, &layers)?]
        }
        Model::EncoderDecoder(model) => {
            let prompt = task.generation_prompt(text).map_err(TrainError::Config)?;
            let source = prompt.source.unwrap_or_default();
            let answer = model
                .generate(
                    one(&source, device),
                    None,
                    Prompt::new(one(&prompt.tokens, device)),
                    GenerateConfig::new(task.answer_len()),
                )?
                .tokens()?
                .remove(0);
            // What the decoder reads while writing its answer: the start token and every
            // answer token but the last, as in training.
            let written = answer.len().saturating_sub(1);
            let target: Vec<i64> = prompt
                .tokens
                .iter()
                .chain(&answer[..written])
                .copied()
                .collect();
            let out = model.try_forward(
                EncoderDecoderInput::new(one(&source, device), one(&target, device))
                    .with_weights(NeedWeights::PerHead),
            )?;
            let source_names: Vec<String> =
                source.iter().map(|&t| task.source_token_name(t)).collect();
            let target_names: Vec<String> = target.iter().map(|&t| task.token_name(t)).collect();
            let (mut own, mut cross) = (Vec::new(), Vec::new());
            for DecoderWeights {
                self_attention,
                cross_attention,
            } in out.weights
            {
                own.push(flat(self_attention)?);
                if let Some(cross_attention) = cross_attention {
                    cross.push(flat(cross_attention)?);
                }
            }
            let heads = config.model.n_heads;
            vec![
                view(
                    "decoder",
                    "Decoder self-attention",
                    target_names.clone(),
                    None,
                    heads,
                    &own,
                )?,
                view(
                    "cross",
                    "Cross-attention",
                    target_names,
                    Some(source_names),
                    heads,
                    &cross,
                )?,
            ]
        }
    };
    Ok((title, views))
}

/// The views of the Hugging Face model in `folder` (GPT-2, BERT, or a Llama-family causal
/// model: `llama`, `qwen2`, `qwen3`, `mistral`; read by [`attn_model::hf`]) on `text`,
/// tokenized by the folder's `tokenizer.json` as transformers' tokenizer encodes it by default
/// (BERT's and the Llama family's special tokens added by the tokenizer's post-processor), and a
/// title.
///
/// # Errors
///
/// [`TrainError::Config`] for another model type, the errors of reading the folder and its
/// tokenizer, and of running the model.
pub fn from_model_folder(
    folder: &Path,
    text: &str,
    device: &Device,
) -> Result<(String, Vec<AttentionView>), TrainError> {
    #[derive(Deserialize)]
    struct ModelType {
        #[serde(default)]
        model_type: String,
    }
    let ModelType { model_type } = read_config(folder)?;
    let tokenizer = TextTokenizer::read(&folder.join(text::TOKENIZER_FILE))?;
    let title = format!("{model_type} {}: {text:?}", folder.display());
    // GPT-2's tokenizer adds nothing; BERT's and the Llama family's add their special tokens.
    let views = match model_type.as_str() {
        "gpt2" => {
            let model = Gpt2::from_pretrained(folder, device)?;
            let (ids, names) = tokens(&tokenizer, text, false)?;
            vec![decoder_view(model.decoder(), &ids, names, device)?]
        }
        "bert" => {
            let model = Bert::from_pretrained(folder, device)?;
            let (ids, names) = tokens(&tokenizer, text, true)?;
            let layers = model
                .attentions(one(&ids, device))?
                .into_iter()
                .map(flat)
                .collect::<Result<Vec<_>, _>>()?;
            let heads = model_heads(&layers, names.len());
            vec![view("self", "Self-attention", names, None, heads, &layers)?]
        }
        other if Architecture::from_model_type(other).is_ok() => {
            let model = CausalLm::from_pretrained(folder, device)?;
            let (ids, names) = tokens(&tokenizer, text, true)?;
            vec![decoder_view(model.model(), &ids, names, device)?]
        }
        other => {
            return Err(TrainError::Config(format!(
                "{}: model_type {other:?} has no explorer; gpt2, bert, llama, qwen2, qwen3 and \
                 mistral do",
                folder.join(attn_model::hf::CONFIG_FILE).display()
            )));
        }
    };
    Ok((title, views))
}

/// A decoder's self-attention on `ids`.
fn decoder_view(
    decoder: &TokenDecoder,
    ids: &[i64],
    names: Vec<String>,
    device: &Device,
) -> Result<AttentionView, TrainError> {
    let out = decoder
        .try_forward(TokenDecoderInput::new(one(ids, device)).with_weights(NeedWeights::PerHead))?;
    let layers = out
        .weights
        .into_iter()
        .map(|w| flat(w.self_attention))
        .collect::<Result<Vec<_>, _>>()?;
    let heads = model_heads(&layers, names.len());
    view("self", "Self-attention", names, None, heads, &layers)
}

/// Heads per layer of weights over `tokens` queries and keys.
fn model_heads(layers: &[Vec<f32>], tokens: usize) -> usize {
    layers
        .first()
        .map_or(0, |layer| layer.len() / (tokens * tokens).max(1))
}

fn view(
    name: &str,
    label: &str,
    queries: Vec<String>,
    keys: Option<Vec<String>>,
    heads: usize,
    layers: &[Vec<f32>],
) -> Result<AttentionView, TrainError> {
    let keys = keys.unwrap_or_else(|| queries.clone());
    AttentionView::new(name, label, queries, keys, heads, layers)
        .map_err(|e| TrainError::Config(e.to_string()))
}

/// The ids of `text` (at least one) and their tokens' names.
fn tokens(
    tokenizer: &TextTokenizer,
    text: &str,
    special_tokens: bool,
) -> Result<(Vec<i64>, Vec<String>), TrainError> {
    let ids = encode(tokenizer, text, special_tokens)?;
    let names = ids
        .iter()
        .map(|&id| tokenizer.token_name(id as usize))
        .collect();
    Ok((ids, names))
}

/// The ids of `text`; at least one.
fn encode(
    tokenizer: &TextTokenizer,
    text: &str,
    special_tokens: bool,
) -> Result<Vec<i64>, TrainError> {
    let ids = if special_tokens {
        tokenizer.encode_with_special_tokens(text)?
    } else {
        tokenizer.encode(text)?
    };
    if ids.is_empty() {
        return Err(TrainError::Config(format!(
            "the text {text:?} encodes to no token; give at least one character"
        )));
    }
    Ok(ids.into_iter().map(i64::from).collect())
}

/// The ids of whitespace-separated token names, for the tasks whose tokens are named.
fn read_names(
    text: &str,
    name: impl Fn(i64) -> String,
    vocab: usize,
) -> Result<Vec<i64>, TrainError> {
    let names: Vec<String> = (0..vocab as i64).map(&name).collect();
    let ids = text
        .split_whitespace()
        .map(|word| {
            names
                .iter()
                .position(|n| n == word)
                .map(|id| id as i64)
                .ok_or_else(|| {
                    TrainError::Config(format!(
                        "{word:?} is not a token of this task; its tokens are {}",
                        names.join(" ")
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ids.is_empty() {
        return Err(TrainError::Config(
            "the text has no token; give the task's tokens separated by spaces".into(),
        ));
    }
    Ok(ids)
}

/// One sequence as a batch of one, `[1, len]`.
fn one(ids: &[i64], device: &Device) -> Tensor<2, Int> {
    Tensor::from_data(TensorData::new(ids.to_vec(), [1, ids.len()]), device)
}

/// A batch of one's weights, `[1, heads, queries, keys]`, as one row-major vector.
fn flat(weights: Tensor<4>) -> Result<Vec<f32>, TrainError> {
    weights
        .into_data()
        .try_into_vec_as::<f32>()
        .map_err(|e| TrainError::Config(format!("cannot read attention weights back: {e:?}")))
}
