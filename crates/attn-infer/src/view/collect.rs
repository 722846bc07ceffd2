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

use attn_model::hf::{AutoModel, BertConfig, Family, Gpt2Config, LlamaConfig, read_config};
use attn_model::{
    DecoderWeights, EncoderDecoderInput, GenerateConfig, NeedWeights, Prompt, TokenDecoder,
    TokenDecoderInput,
};
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::{AttentionView, MAX_WEIGHTS};
use attn_train::checkpoint;
use attn_train::error::TrainError;
use attn_train::inspect::attention_maps;
use attn_train::model::Model;
use attn_train::run_dir;
use attn_train::tasks::TaskKind;
use attn_train::text::{self, TextTokenizer};

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
        folder_name(dir),
        path.file_name().unwrap_or_default().to_string_lossy()
    );
    let views = match &model {
        Model::Decoder(decoder) if task.kind == TaskKind::Text => {
            let tokenizer = text::read_run_tokenizer(dir)?;
            let (ids, names) = tokens(&tokenizer, text, false)?;
            check_tokens(ids.len(), config.model.n_layers, config.model.n_heads)?;
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

/// The views of the Hugging Face model in `folder` (any family [`AutoModel`] reads: GPT-2,
/// BERT, or a Llama-family causal model) on `text`, tokenized by the folder's `tokenizer.json`
/// as transformers' tokenizer encodes it by default (BERT's and the Llama family's special
/// tokens added by the tokenizer's post-processor), and a title. The title names the folder,
/// not the path it was reached by.
///
/// The text's tokens are counted, and refused past the page's bound ([`check_tokens`]),
/// before the weights are read.
///
/// # Errors
///
/// [`TrainError::Config`] for a model type the library does not read or a text past the
/// bound, the errors of reading the folder and its tokenizer, and of running the model.
pub fn from_model_folder(
    folder: &Path,
    text: &str,
    device: &Device,
) -> Result<(String, Vec<AttentionView>), TrainError> {
    let family = Family::of_folder(folder)?;
    let tokenizer = TextTokenizer::read(&folder.join(text::TOKENIZER_FILE))?;
    // GPT-2's tokenizer adds nothing; BERT's and the Llama family's add their special tokens.
    let (ids, names) = tokens(&tokenizer, text, family != Family::Gpt2)?;
    let (layers, heads) = match family {
        Family::Gpt2 => {
            let config: Gpt2Config = read_config(folder)?;
            (config.n_layer, config.n_head)
        }
        Family::Bert => {
            let config: BertConfig = read_config(folder)?;
            (config.num_hidden_layers, config.num_attention_heads)
        }
        Family::Llama(_) => {
            let config: LlamaConfig = read_config(folder)?;
            (config.num_hidden_layers, config.num_attention_heads)
        }
    };
    check_tokens(ids.len(), layers, heads)?;
    let title = format!("{} {}: {text:?}", family.model_type(), folder_name(folder));
    let views = match AutoModel::from_pretrained(folder, device)? {
        AutoModel::Bert(model) => {
            let layers = model
                .attentions(one(&ids, device))?
                .into_iter()
                .map(flat)
                .collect::<Result<Vec<_>, _>>()?;
            let heads = model_heads(&layers, names.len());
            vec![view("self", "Self-attention", names, None, heads, &layers)?]
        }
        model => {
            let decoder = model
                .decoder()
                .expect("every family but BERT's is a decoder");
            vec![decoder_view(decoder, &ids, names, device)?]
        }
    };
    Ok((title, views))
}

/// The last component of `folder`'s full path: a page names the model, not where the user
/// keeps it.
fn folder_name(folder: &Path) -> String {
    folder
        .canonicalize()
        .ok()
        .and_then(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| folder.display().to_string())
}

/// Refuses a text of `tokens` tokens whose weights, over `layers` layers of `heads` heads,
/// would be more than a page holds ([`MAX_WEIGHTS`]), naming the tokens asked for, the bound
/// and the size it would take; called before the model runs.
///
/// # Errors
/// [`TrainError::Config`] with those numbers.
pub fn check_tokens(tokens: usize, layers: usize, heads: usize) -> Result<(), TrainError> {
    let per_token_pair = layers.max(1).saturating_mul(heads.max(1));
    let weights = per_token_pair.saturating_mul(tokens).saturating_mul(tokens);
    if weights <= MAX_WEIGHTS {
        return Ok(());
    }
    let bound = (MAX_WEIGHTS / per_token_pair).isqrt();
    Err(TrainError::Config(format!(
        "the text is {tokens} tokens; a page holds at most {bound} for {layers} layers ×          {heads} heads ({MAX_WEIGHTS} weights, a byte each before compression), and this text          would take {weights}; give a shorter text"
    )))
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
