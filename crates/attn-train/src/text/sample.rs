//! Text written by a trained model, longer than its window.
//!
//! The model reads at most `window` tokens (its `seq_len`: learned positions have no row past
//! it). Generation runs through the key/value cache until the window is full, then starts again
//! from the last half of the window as a new prompt, and so on: every token is chosen with at
//! least half a window of context, and the prompt is read again once per half window rather
//! than once per token (nanoGPT crops its context and reads the whole window at every token).

use attn_model::{GenerateConfig, Prompt, Sampling, TokenDecoder};
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::TrainError;

/// What to write after a prompt.
#[derive(Clone, Debug)]
pub struct Continuation {
    /// New tokens.
    pub new_tokens: usize,
    /// The most tokens the model reads at once.
    pub window: usize,
    /// Greedy or sampled.
    pub sampling: Sampling,
    /// Seed of the sampling generator (the `n`-th restart draws from `seed + n`).
    pub seed: u64,
}

/// Writes `how.new_tokens` tokens after `prompt` with `model`, calling `on_token` with each as
/// soon as it is chosen; returns them.
///
/// # Errors
///
/// [`TrainError::Config`] for an empty prompt or a window under 2 tokens, [`TrainError::Model`]
/// when generation fails (a token outside the vocabulary).
pub fn continue_text(
    model: &TokenDecoder,
    prompt: &[u32],
    how: &Continuation,
    device: &Device,
    mut on_token: impl FnMut(u32) -> Result<(), TrainError>,
) -> Result<Vec<u32>, TrainError> {
    if prompt.is_empty() {
        return Err(TrainError::Config(
            "the prompt is empty: generation needs at least one token to start from".into(),
        ));
    }
    if how.window < 2 {
        return Err(TrainError::Config(format!(
            "a window of {} tokens leaves no room to generate",
            how.window
        )));
    }
    let keep = how.window / 2;
    let mut context: Vec<u32> = prompt[prompt.len().saturating_sub(how.window - 1)..].to_vec();
    // Grown as tokens come: a request for more tokens than memory holds fails when memory
    // runs out, not before the first token.
    let mut out = Vec::with_capacity(how.new_tokens.min(1 << 16));
    let mut restart = 0;
    while out.len() < how.new_tokens {
        if context.len() >= how.window {
            context.drain(..context.len() - keep);
        }
        let room = (how.window - context.len()).min(how.new_tokens - out.len());
        let ids: Vec<i64> = context.iter().map(|&id| i64::from(id)).collect();
        let len = ids.len();
        let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, len]), device);
        let config = GenerateConfig::new(room)
            .with_sampling(how.sampling.clone())
            .with_seed(how.seed.wrapping_add(restart));
        for step in model.generate(Prompt::new(tokens), config)? {
            let Some(token) = step?.tokens[0] else {
                break;
            };
            let token = u32::try_from(token).map_err(|_| {
                TrainError::Config(format!("the model produced the token id {token}"))
            })?;
            on_token(token)?;
            out.push(token);
            context.push(token);
        }
        restart += 1;
    }
    Ok(out)
}
