//! Generation: a prompt in, new tokens out one step at a time, decoded through the key/value
//! cache.
//!
//! ```text
//! logits = model(prompt)                      one step over the whole prompt (prefill)
//! repeat: token = choose(logits[last])        greedy argmax, or a sample
//!         logits = model.step(token)          one token through the cache
//! ```
//!
//! Sampling (Holtzman et al. 2020 for top-p): divide the logits by the temperature, keep the
//! `top_k` largest, take their softmax, keep the smallest set of most likely tokens whose
//! probabilities sum to at least `top_p`, renormalise and draw. Draws come from a
//! `ChaCha8Rng` seeded with [`GenerateConfig::seed`], so a seed reproduces a run on every
//! platform. Ties go to the lowest token id, in the argmax and in the sort, so `top_k = 1`
//! is greedy decoding.

use burn::config::Config;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::cache::{KvCache, MemoryCache, check_left_pad};
use crate::encoder_decoder::{EncoderDecoder, EncoderDecoderInput};
use crate::error::ModelError;
use crate::token_decoder::{TokenDecoder, TokenDecoderInput};

/// How the next token is chosen from the logits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub enum Sampling {
    /// The most likely token (the lowest id among ties).
    #[default]
    Greedy,
    /// A draw from the tempered, truncated distribution.
    Sample {
        /// Divides the logits: below 1 sharpens, above 1 flattens. Finite and positive.
        temperature: f64,
        /// Keep only the `k` most likely tokens; at least 1.
        top_k: Option<usize>,
        /// Keep the smallest set of most likely tokens whose probability reaches `p`, in
        /// `(0, 1]`.
        top_p: Option<f64>,
    },
}

/// Configuration of a generation run.
///
/// ```
/// use attn_model::{GenerateConfig, Sampling};
///
/// let config = GenerateConfig::new(8)
///     .with_sampling(Sampling::Sample { temperature: 0.8, top_k: Some(5), top_p: Some(0.9) })
///     .with_seed(7)
///     .with_stop_tokens(vec![0]);
/// assert!(config.validate().is_ok());
/// let hot = GenerateConfig::new(8)
///     .with_sampling(Sampling::Sample { temperature: 0.0, top_k: None, top_p: None });
/// assert_eq!(hot.validate().unwrap_err().to_string(), "temperature must be finite and positive, got 0");
/// ```
#[derive(Config, Debug)]
pub struct GenerateConfig {
    /// New tokens per sequence at most.
    pub max_new_tokens: usize,
    /// Greedy or sampling.
    #[config(default = "Sampling::Greedy")]
    pub sampling: Sampling,
    /// Seed of the sampling generator.
    #[config(default = 0)]
    pub seed: u64,
    /// A sequence stops after producing one of these (it is yielded, then nothing more).
    #[config(default = "Vec::new()")]
    pub stop_tokens: Vec<i64>,
    /// The stop tokens cannot be chosen before this many new tokens (their logits are `−∞`
    /// until then: transformers' `min_new_tokens`).
    #[config(default = 0)]
    pub min_new_tokens: usize,
    /// Divides the positive logits and multiplies the negative ones of every token the
    /// sequence already holds, prompt included (transformers' `repetition_penalty`, Keskar et
    /// al. 2019); above 1 discourages repeats. `None` means none.
    pub repetition_penalty: Option<f64>,
    /// Yield each step's logits, `[batch, vocab]`, with its tokens.
    #[config(default = false)]
    pub keep_logits: bool,
    /// Tokens per sequence the cache holds; `None` means prompt plus `max_new_tokens`.
    pub capacity: Option<usize>,
}

impl GenerateConfig {
    /// Checks the sampling settings.
    ///
    /// # Errors
    /// [`ModelError::InvalidSampling`] naming the setting and its value.
    pub fn validate(&self) -> Result<(), ModelError> {
        if let Some(penalty) = self.repetition_penalty
            && !(penalty.is_finite() && penalty > 0.0)
        {
            return Err(ModelError::InvalidSampling {
                what: "repetition_penalty",
                range: "finite and positive",
                value: penalty,
            });
        }
        let Sampling::Sample {
            temperature,
            top_k,
            top_p,
        } = self.sampling
        else {
            return Ok(());
        };
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(ModelError::InvalidSampling {
                what: "temperature",
                range: "finite and positive",
                value: temperature,
            });
        }
        if top_k == Some(0) {
            return Err(ModelError::InvalidSampling {
                what: "top_k",
                range: "at least 1",
                value: 0.0,
            });
        }
        if let Some(p) = top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return Err(ModelError::InvalidSampling {
                what: "top_p",
                range: "in (0, 1]",
                value: p,
            });
        }
        Ok(())
    }
}

/// A prompt: token ids, left-padded when its sequences differ in length.
#[derive(Clone, Debug)]
pub struct Prompt {
    tokens: Tensor<2, Int>,
    left_pad: Option<Vec<usize>>,
}

impl Prompt {
    /// A batch of prompts of equal length.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq_len]`
    pub fn new(tokens: Tensor<2, Int>) -> Self {
        Self {
            tokens,
            left_pad: None,
        }
    }

    /// A batch whose sequence `b` starts with `left_pad[b]` padding tokens.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq_len]`; `left_pad`: `batch` entries
    pub fn left_padded(tokens: Tensor<2, Int>, left_pad: Vec<usize>) -> Self {
        Self {
            tokens,
            left_pad: Some(left_pad),
        }
    }

    /// Left-pads `sequences` with `pad_token` to the longest one.
    ///
    /// ```
    /// use attn_model::Prompt;
    /// use burn::tensor::Device;
    ///
    /// let prompt = Prompt::from_sequences(&[vec![5, 6, 7], vec![8]], 0, &Device::flex());
    /// assert_eq!(prompt.left_pad(), [0, 2]);
    /// let ids = prompt.tokens().clone().into_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    /// assert_eq!(ids, [5, 6, 7, 0, 0, 8]);
    /// ```
    pub fn from_sequences(sequences: &[Vec<i64>], pad_token: i64, device: &Device) -> Self {
        let seq_len = sequences.iter().map(Vec::len).max().unwrap_or(0);
        let left_pad: Vec<usize> = sequences.iter().map(|s| seq_len - s.len()).collect();
        let ids: Vec<i64> = sequences
            .iter()
            .zip(&left_pad)
            .flat_map(|(s, &pad)| std::iter::repeat_n(pad_token, pad).chain(s.iter().copied()))
            .collect();
        let tokens = Tensor::from_data(TensorData::new(ids, [sequences.len(), seq_len]), device);
        Self::left_padded(tokens, left_pad)
    }

    /// The token ids, `[batch, seq_len]`.
    pub fn tokens(&self) -> &Tensor<2, Int> {
        &self.tokens
    }

    /// Leading padding tokens of each sequence.
    pub fn left_pad(&self) -> Vec<usize> {
        let [batch, _] = self.tokens.dims();
        self.left_pad.clone().unwrap_or_else(|| vec![0; batch])
    }
}

impl From<Tensor<2, Int>> for Prompt {
    fn from(tokens: Tensor<2, Int>) -> Self {
        Self::new(tokens)
    }
}

/// One step of generation: a token for each sequence still running.
#[derive(Clone, Debug)]
pub struct GeneratedStep {
    /// `tokens[b]` is sequence `b`'s new token, `None` once it has stopped.
    pub tokens: Vec<Option<i64>>,
    /// The logits the tokens were chosen from, `[batch, vocab]`, when asked for.
    pub logits: Option<Tensor<2>>,
}

/// The model a generation runs.
#[derive(Debug)]
enum Source<'a> {
    Decoder(&'a TokenDecoder),
    EncoderDecoder(&'a EncoderDecoder, Box<MemoryCache>),
}

impl Source<'_> {
    fn step(&self, tokens: Tensor<2, Int>, cache: &mut KvCache) -> Result<Tensor<3>, ModelError> {
        match self {
            Source::Decoder(model) => model
                .try_forward(TokenDecoderInput::new(tokens).with_cache(cache))
                .map(|out| out.logits),
            Source::EncoderDecoder(model, memory) => model
                .try_forward(EncoderDecoderInput::cached(memory, tokens, cache))
                .map(|out| out.logits),
        }
    }
}

/// Generation as an iterator: each `next()` chooses one token per sequence, then feeds them
/// through the cache for the next step.
///
/// Ends after `max_new_tokens` steps or when every sequence has produced a stop token.
#[derive(Debug)]
pub struct Generation<'a> {
    source: Source<'a>,
    cache: KvCache,
    rng: ChaCha8Rng,
    config: GenerateConfig,
    /// Logits of each sequence's last position, `[batch, vocab]`.
    next_logits: Option<Tensor<2>>,
    stopped: Vec<bool>,
    produced: usize,
    /// Each sequence's tokens so far (padding left out), kept only for the repetition
    /// penalty.
    history: Option<Vec<Vec<i64>>>,
}

impl<'a> Generation<'a> {
    fn start(
        source: Source<'a>,
        cache_for: impl FnOnce(usize, usize, &[usize]) -> Result<KvCache, ModelError>,
        prompt: Prompt,
        config: GenerateConfig,
    ) -> Result<Self, ModelError> {
        config.validate()?;
        let [batch, seq_len] = prompt.tokens.dims();
        let left_pad = check_left_pad(prompt.left_pad.as_deref(), batch, seq_len)?;
        let capacity = match config.capacity {
            Some(capacity) => capacity,
            None => {
                seq_len
                    .checked_add(config.max_new_tokens)
                    .ok_or(ModelError::TooManyTokens {
                        prompt: seq_len,
                        new: config.max_new_tokens,
                    })?
            }
        };
        let mut cache = cache_for(batch, capacity, &left_pad)?;
        let history = config.repetition_penalty.map(|_| {
            let ids = prompt
                .tokens
                .to_data()
                .convert::<i64>()
                .try_to_vec::<i64>()
                .expect("an Int tensor reads back as i64");
            ids.chunks_exact(seq_len)
                .zip(&left_pad)
                .map(|(row, &pad)| row[pad..].to_vec())
                .collect()
        });
        let logits = source.step(prompt.tokens, &mut cache)?; // [batch, seq_len, vocab]
        let [_, _, vocab] = logits.dims();
        let last = logits.narrow(1, seq_len - 1, 1).reshape([batch, vocab]); // [batch, vocab]
        Ok(Self {
            source,
            cache,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            config,
            next_logits: Some(last),
            stopped: vec![false; batch],
            produced: 0,
            history,
        })
    }

    /// Runs to the end and returns each sequence's new tokens (a stop token included).
    ///
    /// # Errors
    /// The first error a step returns.
    pub fn tokens(self) -> Result<Vec<Vec<i64>>, ModelError> {
        let mut out = vec![Vec::new(); self.stopped.len()];
        for step in self {
            for (seq, token) in out.iter_mut().zip(step?.tokens) {
                seq.extend(token);
            }
        }
        Ok(out)
    }

    /// The cache, as far as it has been filled.
    pub fn cache(&self) -> &KvCache {
        &self.cache
    }

    /// The cache, to continue from later ([`TokenDecoder::generate_with_cache`]): it holds
    /// the prompt and every new token but the last, which was chosen and never fed.
    pub fn into_cache(self) -> KvCache {
        self.cache
    }

    fn advance(&mut self, logits: Tensor<2>) -> Result<GeneratedStep, ModelError> {
        let [batch, vocab] = logits.dims();
        let rows = logits
            .to_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .expect("float logits read back as f32");
        let mut tokens = Vec::with_capacity(batch);
        let mut fed = Vec::with_capacity(batch);
        let suppress_stops = self.produced < self.config.min_new_tokens;
        for (b, row) in rows.chunks_exact(vocab).enumerate() {
            let token = if suppress_stops || self.history.is_some() {
                let mut row = row.to_vec();
                if let (Some(history), Some(penalty)) =
                    (&self.history, self.config.repetition_penalty)
                {
                    penalize_repeats(&mut row, &history[b], penalty as f32);
                }
                if suppress_stops {
                    for &stop in &self.config.stop_tokens {
                        if let Some(logit) = usize::try_from(stop).ok().and_then(|i| row.get_mut(i))
                        {
                            *logit = f32::NEG_INFINITY;
                        }
                    }
                }
                choose(&row, &self.config.sampling, &mut self.rng)
            } else {
                choose(row, &self.config.sampling, &mut self.rng)
            };
            if let Some(history) = &mut self.history {
                history[b].push(token);
            }
            // A stopped sequence keeps feeding its stop token so that the batch stays aligned;
            // what it produces is never read.
            fed.push(token);
            if self.stopped[b] {
                tokens.push(None);
            } else {
                self.stopped[b] = self.config.stop_tokens.contains(&token);
                tokens.push(Some(token));
            }
        }
        self.produced += 1;
        if self.produced < self.config.max_new_tokens && !self.stopped.iter().all(|s| *s) {
            let device = logits.device();
            let fed = Tensor::<2, Int>::from_data(TensorData::new(fed, [batch, 1]), &device);
            let next = self.source.step(fed, &mut self.cache)?; // [batch, 1, vocab]
            self.next_logits = Some(next.reshape([batch, vocab]));
        }
        Ok(GeneratedStep {
            tokens,
            logits: self.config.keep_logits.then_some(logits),
        })
    }
}

impl Iterator for Generation<'_> {
    type Item = Result<GeneratedStep, ModelError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.produced >= self.config.max_new_tokens || self.stopped.iter().all(|s| *s) {
            return None;
        }
        let logits = self.next_logits.take()?;
        Some(self.advance(logits))
    }
}

/// transformers' `RepetitionPenaltyLogitsProcessor`: the logit of every token in `seen` is
/// divided by `penalty` when positive and multiplied by it when negative, once however often
/// the token was seen.
fn penalize_repeats(logits: &mut [f32], seen: &[i64], penalty: f32) {
    let mut seen = seen.to_vec();
    seen.sort_unstable();
    seen.dedup();
    for token in seen {
        if let Some(logit) = usize::try_from(token).ok().and_then(|i| logits.get_mut(i)) {
            *logit = if *logit < 0.0 {
                *logit * penalty
            } else {
                *logit / penalty
            };
        }
    }
}

/// The next token from one row of logits.
fn choose(logits: &[f32], sampling: &Sampling, rng: &mut ChaCha8Rng) -> i64 {
    let token = match sampling {
        Sampling::Greedy => argmax(logits),
        Sampling::Sample {
            temperature,
            top_k,
            top_p,
        } => sample(logits, *temperature, *top_k, *top_p, rng),
    };
    i64::try_from(token).expect("a vocabulary index fits in i64")
}

/// The index of the largest value, the first among ties.
fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best
}

/// A draw from `softmax(logits / temperature)` truncated to the top `k` and to the nucleus
/// of probability `p`.
fn sample(
    logits: &[f32],
    temperature: f64,
    top_k: Option<usize>,
    top_p: Option<f64>,
    rng: &mut ChaCha8Rng,
) -> usize {
    // Most likely first; the sort is stable, so ties keep the lowest id first.
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    order.truncate(top_k.unwrap_or(order.len()).max(1));
    let max = f64::from(logits[order[0]]) / temperature;
    let mut probs: Vec<f64> = order
        .iter()
        .map(|&i| (f64::from(logits[i]) / temperature - max).exp())
        .collect();
    let total: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= total);
    if let Some(p) = top_p {
        let mut cumulative = 0.0;
        let keep = probs
            .iter()
            .position(|q| {
                cumulative += q;
                cumulative >= p
            })
            .map_or(probs.len(), |i| i + 1);
        probs.truncate(keep);
    }
    let total: f64 = probs.iter().sum();
    let mut draw = rng.random::<f64>() * total;
    for (i, p) in probs.iter().enumerate() {
        if draw < *p {
            return order[i];
        }
        draw -= p;
    }
    order[probs.len() - 1]
}

impl TokenDecoder {
    /// Generates from `prompt`, one token per sequence per step, through the key/value cache.
    ///
    /// The prompt goes through the cache in one step; each later step feeds one token.
    ///
    /// ```
    /// use attn_model::{GenerateConfig, PositionalScheme, Prompt, TokenDecoderConfig};
    /// use burn::tensor::Device;
    ///
    /// let device = Device::flex();
    /// let model = TokenDecoderConfig::new(11, 12, 3, 2, 24, PositionalScheme::sinusoidal())
    ///     .init(&device)
    ///     .unwrap();
    /// let prompt = Prompt::from_sequences(&[vec![1, 2, 3], vec![4]], 0, &device);
    /// let new = model.generate(prompt, GenerateConfig::new(5)).unwrap().tokens().unwrap();
    /// assert_eq!(new.len(), 2);
    /// assert!(new.iter().all(|seq| seq.len() == 5 && seq.iter().all(|t| (0..11).contains(t))));
    /// ```
    ///
    /// # Shapes
    /// - `prompt`: `[batch, seq_len]` token ids
    ///
    /// # Errors
    /// [`ModelError::InvalidSampling`], the errors of [`TokenDecoder::try_forward`]'s cached step for the
    /// prompt (bad ids, a prompt longer than the capacity); each later step's errors come
    /// from the iterator.
    pub fn generate(
        &self,
        prompt: impl Into<Prompt>,
        config: GenerateConfig,
    ) -> Result<Generation<'_>, ModelError> {
        Generation::start(
            Source::Decoder(self),
            |batch, capacity, left_pad| self.new_cache(batch, capacity, Some(left_pad)),
            prompt.into(),
            config,
        )
    }
}

impl TokenDecoder {
    /// Generates after the tokens `cache` already holds (a conversation's earlier turns):
    /// `tokens` go through the cache after them in one step, then one token per step.
    ///
    /// # Shapes
    /// - `tokens`: `[cache.batch(), seq_len]`, at least one token
    ///
    /// # Errors
    /// As [`generate`](Self::generate); [`ModelError::CacheFull`] when the cache cannot hold
    /// them.
    pub fn generate_with_cache(
        &self,
        cache: KvCache,
        tokens: Tensor<2, Int>,
        config: GenerateConfig,
    ) -> Result<Generation<'_>, ModelError> {
        Generation::start(
            Source::Decoder(self),
            |_, _, _| Ok(cache),
            Prompt::new(tokens),
            config,
        )
    }
}

impl EncoderDecoder {
    /// Generates target tokens for `source` from a target `prompt` (usually one start token
    /// per sequence): the source is encoded once, its cross-attention keys and values are
    /// projected once, and every step reuses them.
    ///
    /// # Shapes
    /// - `source`: `[batch, seq_len_src]`; `source_padding`: `[batch, seq_len_src]`, `true`
    ///   = padding (right padding)
    /// - `prompt`: `[batch, seq_len]`
    ///
    /// # Errors
    /// As [`TokenDecoder::generate`], and [`EncoderDecoder::try_encode`]'s.
    pub fn generate(
        &self,
        source: Tensor<2, Int>,
        source_padding: Option<Tensor<2, Bool>>,
        prompt: impl Into<Prompt>,
        config: GenerateConfig,
    ) -> Result<Generation<'_>, ModelError> {
        let memory = self.try_encode(source, source_padding)?;
        let memory = self.memory_cache(&memory)?;
        Generation::start(
            Source::EncoderDecoder(self, Box::new(memory)),
            |batch, capacity, left_pad| self.new_cache(batch, capacity, Some(left_pad)),
            prompt.into(),
            config,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_one_is_the_argmax_and_ties_go_to_the_lowest_id() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let logits = [0.5, 2.0, -1.0, 2.0, 1.9];
        assert_eq!(argmax(&logits), 1);
        for _ in 0..20 {
            assert_eq!(sample(&logits, 1.3, Some(1), None, &mut rng), 1);
        }
    }

    #[test]
    fn nucleus_keeps_only_the_most_likely_tokens() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        // Probabilities about 0.64, 0.24, 0.09, 0.03: p = 0.8 keeps the first two.
        let logits = [3.0, 2.0, 1.0, 0.0];
        let mut seen = [0usize; 4];
        for _ in 0..400 {
            seen[sample(&logits, 1.0, None, Some(0.8), &mut rng)] += 1;
        }
        assert_eq!(seen[2] + seen[3], 0, "{seen:?}");
        assert!(seen[0] > seen[1] && seen[1] > 50, "{seen:?}");
    }

    #[test]
    fn a_repetition_penalty_weighs_each_seen_token_once_as_transformers_does() {
        // transformers: score = where(score < 0, score * p, score / p) over gathered ids.
        let mut logits = [2.0, -1.0, 0.5, 3.0];
        penalize_repeats(&mut logits, &[0, 1, 0, 0], 2.0);
        assert_eq!(logits, [1.0, -2.0, 0.5, 3.0]);
    }

    #[test]
    fn sampling_settings_outside_their_range_are_errors_naming_them() {
        let sample = |temperature, top_k, top_p| {
            GenerateConfig::new(3)
                .with_sampling(Sampling::Sample {
                    temperature,
                    top_k,
                    top_p,
                })
                .validate()
        };
        assert!(sample(1.0, Some(2), Some(0.5)).is_ok());
        let err = sample(1.0, Some(0), None).expect_err("top_k 0");
        assert_eq!(err.to_string(), "top_k must be at least 1, got 0");
        let err = sample(1.0, None, Some(1.5)).expect_err("top_p 1.5");
        assert_eq!(err.to_string(), "top_p must be in (0, 1], got 1.5");
        assert!(sample(f64::NAN, None, None).is_err());
    }
}
