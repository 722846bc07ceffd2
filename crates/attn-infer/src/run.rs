//! Generation from a trained run: the run folder's configuration and newest checkpoint give
//! the model back, a text prompt becomes token ids, and the new tokens come one at a time,
//! greedy or sampled, through the key/value cache (`attn_model`'s `generate`).
//!
//! ```text
//! add        prompt "123+45="   → the sum's digits, least significant first: 8610 (168)
//! translate  prompt "three one" → <s>, then the digits backwards: 1 3
//!
//! text       prompt "ROMEO:"    → 200 tokens of text, sampled (temperature 0.8, top-k 200)
//! ```
//!
//! A `text` run writes past its window ([`attn_train::text::continue_text`]), and its text is
//! streamed in whole characters, however its tokenizer cuts them.
//!
//! An encoder-only run (`copy`, `reverse`, `sort`, `context`) classifies each position and has
//! nothing to generate; it is refused with [`TrainError::Config`].

use std::path::PathBuf;

use attn_model::{GenerateConfig, Prompt, Sampling, TokenDecoder};
use burn::tensor::{Device, Int, Tensor, TensorData};

use attn_train::checkpoint;
use attn_train::config::TrainConfig;
use attn_train::error::TrainError;
use attn_train::model::Model;
use attn_train::run_dir;
use attn_train::tasks::{Architecture, TaskConfig, TaskKind};
use attn_train::text::{self, Continuation, continue_text};

/// What to generate, and how.
#[derive(Clone, Debug)]
pub struct Request {
    /// The run folder: `config.json` and `checkpoints/`.
    pub run: PathBuf,
    /// `add`: `a+b=`; `translate`: as many digit words as the run's `seq_len`, separated by
    /// spaces; `text`: any text.
    pub prompt: String,
    /// New tokens at most; `None`: the length of the task's answer ([`TEXT_NEW_TOKENS`] for
    /// `text`).
    pub max_new_tokens: Option<usize>,
    /// Greedy or sampled; `None`: the task's way ([`text_sampling`] for `text`, greedy for
    /// the others).
    pub sampling: Option<Sampling>,
    /// Seed of the sampling generator.
    pub seed: u64,
    /// Backend name; `None`: the run's own (a data-parallel run's first).
    pub device: Option<String>,
}

impl Request {
    /// Checks the request's own settings, before any file is read.
    ///
    /// # Errors
    /// [`TrainError::Config`] for no new token asked for, or a sampling setting out of its
    /// range, named with its value.
    pub fn validate(&self) -> Result<(), TrainError> {
        if self.max_new_tokens == Some(0) {
            return Err(TrainError::Config(
                "--max-new-tokens is 0: there is nothing to generate".into(),
            ));
        }
        if let Some(sampling) = &self.sampling {
            GenerateConfig::new(1)
                .with_sampling(sampling.clone())
                .validate()?;
        }
        Ok(())
    }
}

/// What was generated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    /// The task of the run.
    pub task: TaskKind,
    /// The new token ids.
    pub tokens: Vec<i64>,
    /// Their names, as the task writes them.
    pub names: Vec<String>,
    /// `add`: the generated digits read back as a number (most significant first), when they
    /// are all digits.
    pub sum: Option<u64>,
}

/// New tokens of a `text` generation unless the request says otherwise.
pub const TEXT_NEW_TOKENS: usize = 200;

/// How a `text` generation samples unless the request says otherwise: nanoGPT's `sample.py`
/// (temperature 0.8, the 200 most likely tokens).
pub fn text_sampling() -> Sampling {
    Sampling::Sample {
        temperature: 0.8,
        top_k: Some(200),
        top_p: None,
    }
}

/// Generates for `request`, calling `on_token` with the text of each new token as soon as it
/// is chosen, separated as it reads: digits together, words apart, a text's pieces as they
/// are (and only in whole characters).
///
/// # Errors
///
/// [`TrainError::Config`] for an encoder-only run or a prompt the task cannot read,
/// [`TrainError::NoCheckpoint`] for a run without a checkpoint, the errors of loading the
/// checkpoint, and [`TrainError::Model`] when generation fails.
pub fn generate(
    request: &Request,
    mut on_token: impl FnMut(&str),
) -> Result<Generated, TrainError> {
    let dir = &request.run;
    let config = run_dir::read_config(dir)?;
    let task = &config.task;
    if task.kind.architecture() == Architecture::Encoder {
        return Err(TrainError::Config(format!(
            "{} holds an encoder-only run (task {}): it classifies every position of its input \
             and has nothing to generate; generate needs a decoder, a run of the add or \
             translate task",
            dir.display(),
            task.kind
        )));
    }
    // A data-parallel run names several devices; its model lived on the first.
    let run_device = config.device.split(',').next().unwrap_or_default().trim();
    let device = attn_train::backend::device(request.device.as_deref().unwrap_or(run_device))?;
    request.validate()?;
    let path = checkpoint::weights_to_use(dir)?;
    let model = checkpoint::load_model(&path, Model::init(&config, &device)?)?;
    if let (TaskKind::Text, Model::Decoder(decoder)) = (task.kind, &model) {
        return generate_text(request, task, decoder, &device, on_token);
    }

    let ids = |ids: Vec<i64>| {
        let len = ids.len();
        Tensor::<2, Int>::from_data(TensorData::new(ids, [1, len]), &device)
    };
    let prompt = task
        .generation_prompt(&request.prompt)
        .map_err(TrainError::Config)?;
    let new_tokens = request.max_new_tokens.unwrap_or(task.answer_len());
    check_cache(&config, prompt.tokens.len(), new_tokens)?;
    let settings = GenerateConfig::new(new_tokens)
        .with_sampling(request.sampling.clone().unwrap_or_default())
        .with_seed(request.seed);
    let generation = match (&model, prompt.source) {
        (Model::Decoder(decoder), None) => {
            decoder.generate(Prompt::new(ids(prompt.tokens)), settings)?
        }
        (Model::EncoderDecoder(model), Some(source)) => {
            model.generate(ids(source), None, Prompt::new(ids(prompt.tokens)), settings)?
        }
        _ => unreachable!(
            "the model is the task's: an encoder is refused above, a decoder reads no source \
             and an encoder-decoder one"
        ),
    };
    let mut tokens = Vec::new();
    let mut names = Vec::new();
    for step in generation {
        let Some(token) = step?.tokens[0] else {
            break;
        };
        let name = task.token_name(token);
        // One-character tokens (digits) read as one word; longer ones are spaced.
        let gap = if tokens.is_empty() || name.chars().count() == 1 {
            ""
        } else {
            " "
        };
        on_token(&format!("{gap}{name}"));
        tokens.push(token);
        names.push(name);
    }
    let sum = task.read_answer(&tokens);
    Ok(Generated {
        task: task.kind,
        tokens,
        names,
        sum,
    })
}

/// Refuses a generation whose key/value cache, allocated for the prompt and every new token
/// before the first is produced, would be past the model's learned positions or the memory
/// available.
fn check_cache(config: &TrainConfig, prompt: usize, new: usize) -> Result<(), TrainError> {
    let tokens = prompt as u128 + new as u128;
    // The last new token is not fed back: the model sees the prompt and all new tokens but
    // that one.
    let positions = tokens.saturating_sub(1);
    if let attn_pos::PositionalScheme::Learned { max_len } = config.model.pos
        && positions > max_len as u128
    {
        return Err(TrainError::Config(format!(
            "a prompt of {prompt} tokens and --max-new-tokens {new} need {positions} positions, \
             but the model learned {max_len}; ask for at most {} new tokens",
            (max_len + 1).saturating_sub(prompt)
        )));
    }
    // Keys and values of every layer (self- and cross-attention), f32.
    let per_token = 2 * 2 * config.model.n_layers as u128 * config.model.d_model as u128 * 4;
    let bytes = tokens.saturating_mul(per_token);
    if let Some(available) = attn_train::budget::available()
        && bytes > available as u128
    {
        return Err(TrainError::Config(format!(
            "a prompt of {prompt} tokens and --max-new-tokens {new} need a key/value cache of \
             about {}, but {} is available; ask for fewer new tokens",
            attn_train::budget::human(bytes),
            attn_train::budget::human(available as u128)
        )));
    }
    Ok(())
}

/// A `text` run's continuation of the prompt, streamed in whole characters.
fn generate_text(
    request: &Request,
    task: &TaskConfig,
    decoder: &TokenDecoder,
    device: &Device,
    mut on_token: impl FnMut(&str),
) -> Result<Generated, TrainError> {
    let tokenizer = text::read_run_tokenizer(&request.run)?;
    let prompt = tokenizer.encode(&request.prompt)?;
    if prompt.is_empty() {
        return Err(TrainError::Config(format!(
            "the prompt {:?} encodes to no token; give at least one character",
            request.prompt
        )));
    }
    let how = Continuation {
        new_tokens: request.max_new_tokens.unwrap_or(TEXT_NEW_TOKENS),
        window: task.seq_len,
        sampling: request.sampling.clone().unwrap_or_else(text_sampling),
        seed: request.seed,
    };
    let mut stream = tokenizer.stream();
    let ids = continue_text(decoder, &prompt, &how, device, |id| {
        let piece = stream.push(id)?;
        if !piece.is_empty() {
            on_token(&piece);
        }
        Ok(())
    })?;
    Ok(Generated {
        task: TaskKind::Text,
        names: ids
            .iter()
            .map(|&id| tokenizer.token_name(id as usize))
            .collect(),
        tokens: ids.into_iter().map(i64::from).collect(),
        sum: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_pos::PositionalScheme;

    #[test]
    fn a_cache_past_the_learned_positions_or_the_memory_is_refused_with_the_numbers() {
        let mut config = TrainConfig::default();
        config.model.pos = PositionalScheme::Learned { max_len: 16 };
        check_cache(&config, 8, 9).expect("fits the table: the ninth token is not fed back");
        check_cache(&config, 8, 10).expect_err("one past the table");
        let err = check_cache(&config, 8, usize::MAX).expect_err("past the table");
        let message = err.to_string();
        assert!(
            message.contains("need 18446744073709551622 positions")
                && message.contains("at most 9 new tokens"),
            "{message}"
        );

        config.model.pos = PositionalScheme::Sinusoidal { base: 10_000.0 };
        check_cache(&config, 8, 1000).expect("a small cache");
        let err = check_cache(&config, 8, usize::MAX).expect_err("no machine holds it");
        assert!(
            err.to_string().contains("key/value cache of about"),
            "{err}"
        );
    }
}
