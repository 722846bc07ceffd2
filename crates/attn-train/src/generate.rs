//! Generation from a trained run: the run folder's configuration and newest checkpoint give
//! the model back, a text prompt becomes token ids, and the new tokens come one at a time,
//! greedy or sampled, through the key/value cache (`attn_model`'s `generate`).
//!
//! ```text
//! add        prompt "123+45="   → the sum's digits, least significant first: 8610 (168)
//! translate  prompt "three one" → <s>, then the digits backwards: 1 3
//! ```
//!
//! An encoder-only run (`copy`, `reverse`, `sort`, `context`) classifies each position and has
//! nothing to generate; it is refused with [`TrainError::Config`].

use std::path::PathBuf;

use attn_model::{GenerateConfig, Prompt, Sampling};
use burn::tensor::{Int, Tensor, TensorData};

use crate::checkpoint;
use crate::error::TrainError;
use crate::model::Model;
use crate::run_dir;
use crate::tasks::{Architecture, TaskKind};

/// What to generate, and how.
#[derive(Clone, Debug)]
pub struct Request {
    /// The run folder: `config.json` and `checkpoints/`.
    pub run: PathBuf,
    /// `add`: `a+b=`; `translate`: as many digit words as the run's `seq_len`, separated by
    /// spaces.
    pub prompt: String,
    /// New tokens at most; `None`: the length of the task's answer.
    pub max_new_tokens: Option<usize>,
    /// Greedy or sampled.
    pub sampling: Sampling,
    /// Seed of the sampling generator.
    pub seed: u64,
    /// Backend name; `None`: the run's own (a data-parallel run's first).
    pub device: Option<String>,
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

/// Generates for `request`, calling `on_token` with each new token's name as soon as it is
/// chosen.
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
    let device = crate::backend::device(request.device.as_deref().unwrap_or(run_device))?;
    let path =
        checkpoint::latest(dir)?.ok_or_else(|| TrainError::NoCheckpoint { path: dir.clone() })?;
    let model = checkpoint::load_model(&path, Model::init(&config, &device)?)?;

    let ids = |ids: Vec<i64>| {
        let len = ids.len();
        Tensor::<2, Int>::from_data(TensorData::new(ids, [1, len]), &device)
    };
    let prompt = task
        .generation_prompt(&request.prompt)
        .map_err(TrainError::Config)?;
    let settings = sampling(request, task.answer_len());
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
        on_token(&name);
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

/// The generation settings of `request`, `answer_len` new tokens unless it says otherwise.
fn sampling(request: &Request, answer_len: usize) -> GenerateConfig {
    GenerateConfig::new(request.max_new_tokens.unwrap_or(answer_len))
        .with_sampling(request.sampling.clone())
        .with_seed(request.seed)
}
