//! Generation and chat with a Hugging Face model folder (`attn generate MODEL`, `attn chat
//! MODEL`): any family that writes text ([`AutoModel`]: GPT-2, Llama, Qwen2, Qwen3, Mistral),
//! its `tokenizer.json`, its chat template and its `generation_config.json`.
//!
//! Text streams out in whole characters: the new tokens are decoded together after each step,
//! and only the text that has stopped changing (no trailing U+FFFD of a character cut between
//! byte-level tokens) is handed on. Generation stops at the folder's end-of-text ids, at the
//! user's stop strings, or after `max_new_tokens`.
//!
//! Every size is bounded before it is allocated for: a prompt longer in bytes than the
//! context could hold at the vocabulary's longest token is refused before it is tokenized, a
//! tokenized prompt before the cache is made, and a file of prompts is answered in batches
//! whose logits and cache fit [`BATCH_LOGITS_BYTES`] and [`BATCH_TOKENS`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use attn_model::hf::{AutoModel, ChatMessage, ChatTemplate, Family, GenerationDefaults};
use attn_model::hf::{Gpt2Config, LlamaConfig, read_config};
use attn_model::{GenerateConfig, KvCache, Prompt, Sampling, TokenDecoder};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use tokenizers::Tokenizer;

use crate::render;

/// The tokenizer file of a model folder.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// Tokens a conversation's cache holds at least (more when the model was trained on longer
/// contexts, up to four times this), for models whose positions have no table to run out of.
pub const CHAT_CONTEXT: usize = 4096;

/// The most prompts a `--prompts` file may hold.
pub const MAX_PROMPTS: usize = 10_000;

/// The most bytes of logits one batch of prompts holds (`batch × vocab × 4`): 256 MiB.
pub const BATCH_LOGITS_BYTES: usize = 256 << 20;

/// The most tokens one batch's cache holds over all its sequences (prompt and new tokens).
pub const BATCH_TOKENS: usize = 32_768;

/// How to choose and when to stop.
#[derive(Clone, Debug)]
pub struct Options {
    /// New tokens per answer at most.
    pub max_new_tokens: usize,
    /// Greedy, or a draw at a temperature with top-k and top-p.
    pub sampling: Sampling,
    /// `repetition_penalty`, above 1 discourages repeats.
    pub repetition_penalty: Option<f64>,
    /// Seed of the sampling generator.
    pub seed: u64,
    /// Texts that end an answer (they are not printed).
    pub stop: Vec<String>,
}

impl Options {
    /// Checks the settings before any model is loaded.
    ///
    /// # Errors
    /// No new token asked for, an empty stop text (it would end every answer before it
    /// starts), or a sampling setting out of its range, each named with its value.
    pub fn validate(&self) -> Result<()> {
        if self.max_new_tokens == 0 {
            bail!("--max-new-tokens must be at least 1");
        }
        if let Some(at) = self.stop.iter().position(String::is_empty) {
            bail!(
                "--stop number {} is empty: an empty text would end every answer before its \
                 first token",
                at + 1
            );
        }
        GenerateConfig::new(self.max_new_tokens)
            .with_sampling(self.sampling.clone())
            .with_repetition_penalty(self.repetition_penalty)
            .validate()?;
        Ok(())
    }
}

/// Tokens and seconds of one generation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timing {
    /// Prompt tokens fed at once.
    pub prompt_tokens: usize,
    /// Seconds to feed them (and choose the first token).
    pub prefill_s: f64,
    /// New tokens after the first.
    pub decode_tokens: usize,
    /// Seconds for those.
    pub decode_s: f64,
}

impl Timing {
    /// `prefill: N tokens in S s (T tok/s), decode: ...`.
    pub fn summary(&self) -> String {
        let rate = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
        format!(
            "prefill: {} tokens in {:.3} s ({:.1} tokens/s); decode: {} tokens in {:.3} s ({:.1} tokens/s)",
            self.prompt_tokens,
            self.prefill_s,
            rate(self.prompt_tokens, self.prefill_s),
            self.decode_tokens,
            self.decode_s,
            rate(self.decode_tokens, self.decode_s),
        )
    }

    fn add(&mut self, other: Timing) {
        self.prompt_tokens += other.prompt_tokens;
        self.prefill_s += other.prefill_s;
        self.decode_tokens += other.decode_tokens;
        self.decode_s += other.decode_s;
    }
}

/// A loaded folder: the model, its tokenizer, its defaults and its chat template.
pub struct FolderModel {
    family: Family,
    decoder: TokenDecoder,
    tokenizer: Tokenizer,
    /// Bytes of the vocabulary's longest token: a prompt of `n` bytes has at least
    /// `n / longest_token` tokens.
    longest_token: usize,
    defaults: GenerationDefaults,
    template: Option<ChatTemplate>,
    context: usize,
    device: Device,
}

/// The type a folder's matrices are held in (`--dtype`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightType {
    /// The type of the folder's weights (`dtype` in `config.json`), where the family and the
    /// device can hold it, else f32.
    #[default]
    Auto,
    /// Every weight widened to f32.
    F32,
    /// bfloat16, products accumulating in f32.
    Bf16,
    /// float16, widened for each product.
    F16,
}

impl WeightType {
    /// The type to load `folder`, of `family`, in on `device`.
    ///
    /// # Errors
    /// When `config.json` cannot be read.
    pub fn resolve(self, folder: &Path, family: Family, device: &Device) -> Result<DType> {
        Ok(match self {
            WeightType::F32 => DType::F32,
            WeightType::Bf16 => DType::BF16,
            WeightType::F16 => DType::F16,
            WeightType::Auto if !family.holds_half_precision() => DType::F32,
            WeightType::Auto => {
                let config: LlamaConfig = read_config(folder)?;
                let stored = match config.stored_dtype() {
                    Some("bfloat16") => DType::BF16,
                    Some("float16") => DType::F16,
                    _ => DType::F32,
                };
                if device.supports_dtype(stored) {
                    stored
                } else {
                    DType::F32
                }
            }
        })
    }
}

/// Why BERT, or another encoder, cannot generate.
fn not_a_decoder(folder: &Path, family: Family) -> anyhow::Error {
    anyhow::anyhow!(
        "{} holds a {} model, an encoder: it reads a whole text at once and has no head that \
         writes the next token, so it cannot generate or chat; `attn view {}` shows its \
         attention",
        folder.display(),
        family.model_type(),
        folder.display()
    )
}

/// The family of the model in `folder`, refused unless it writes text.
///
/// # Errors
/// When `config.json` cannot be read, its `model_type` is not one this library reads, or the
/// model is an encoder.
pub fn decoder_family(folder: &Path) -> Result<Family> {
    let family = Family::of_folder(folder)?;
    if !family.is_decoder() {
        return Err(not_a_decoder(folder, family));
    }
    Ok(family)
}

impl FolderModel {
    /// Loads `folder` onto `device`, its matrices held as `dtype` says.
    ///
    /// # Errors
    /// An encoder (BERT) is refused with that reason; else when the model, `tokenizer.json`,
    /// the chat template or `generation_config.json` cannot be read, each naming the file, or
    /// the device cannot hold the type asked for.
    pub fn load(folder: &Path, device: &Device, dtype: WeightType) -> Result<Self> {
        let family = decoder_family(folder)?;
        // The files that are cheap to check come before the weights.
        let tokenizer_path = folder.join(TOKENIZER_FILE);
        let tokenizer = attn_train::text::read_tokenizer(&tokenizer_path)?;
        let defaults = GenerationDefaults::from_folder(folder)?;
        let template = ChatTemplate::from_folder(folder)?;
        let context = match family {
            // Learned positions: the table's length is a hard limit.
            Family::Gpt2 => {
                let config: Gpt2Config = read_config(folder)?;
                config.n_positions.min(4 * CHAT_CONTEXT)
            }
            // Rotary positions have no table to run out of: a chat may outgrow
            // max_position_embeddings (quality fades past it), up to the cache's size.
            _ => {
                let config: LlamaConfig = read_config(folder)?;
                config
                    .max_position_embeddings
                    .unwrap_or(0)
                    .clamp(CHAT_CONTEXT, 4 * CHAT_CONTEXT)
            }
        };
        let held = dtype.resolve(folder, family, device)?;
        let decoder = AutoModel::from_pretrained_as(folder, device, held)?
            .into_decoder()
            .map_err(|model| not_a_decoder(folder, model.family()))?;
        let longest_token = tokenizer
            .get_vocab(true)
            .keys()
            .map(String::len)
            .max()
            .unwrap_or(1)
            .max(1);
        Ok(Self {
            family,
            decoder,
            tokenizer,
            longest_token,
            defaults,
            template,
            context,
            device: device.clone(),
        })
    }

    /// The family of the folder's model.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Tokens one sequence's cache may hold: prompt and new tokens together.
    pub fn context(&self) -> usize {
        self.context
    }

    /// The folder's chat template, if it has one.
    pub fn template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref()
    }

    /// The token ids of `text`, with the tokenizer's special tokens when `special`.
    ///
    /// # Errors
    /// A text longer in bytes than the context could hold at the vocabulary's longest token
    /// (refused before it is tokenized, so a huge text never reaches the tokenizer), a text
    /// of more tokens than the context, a tokenizer failure, or a text with no token.
    pub fn encode(&self, text: &str, special: bool) -> Result<Vec<i64>> {
        let most_bytes = self.context.saturating_mul(self.longest_token);
        if text.len() > most_bytes {
            bail!(
                "the prompt is {} bytes: more than the context of {} tokens can hold, at {} \
                 bytes for the vocabulary's longest token ({most_bytes} bytes)",
                text.len(),
                self.context,
                self.longest_token
            );
        }
        let encoding = self
            .tokenizer
            .encode(text, special)
            .map_err(|e| anyhow::anyhow!("cannot tokenize the prompt: {e}"))?;
        let ids: Vec<i64> = encoding.get_ids().iter().map(|&id| i64::from(id)).collect();
        if ids.is_empty() {
            bail!("the prompt {text:?} has no token");
        }
        if ids.len() >= self.context {
            bail!(
                "the prompt is {} tokens, and the model's context {}: give a shorter prompt",
                ids.len(),
                self.context
            );
        }
        Ok(ids)
    }

    /// The text of `ids`, special tokens left out.
    pub fn decode(&self, ids: &[i64]) -> String {
        let ids: Vec<u32> = ids
            .iter()
            .filter_map(|&id| u32::try_from(id).ok())
            .collect();
        self.tokenizer.decode(&ids, true).unwrap_or_default()
    }

    fn generate_config(&self, options: &Options, max_new_tokens: usize) -> GenerateConfig {
        GenerateConfig::new(max_new_tokens)
            .with_sampling(options.sampling.clone())
            .with_seed(options.seed)
            .with_stop_tokens(self.defaults.eos_token_ids.clone())
            .with_repetition_penalty(options.repetition_penalty)
    }

    /// How many prompts of at most `longest` tokens one batch takes, with `new` tokens each:
    /// its logits within [`BATCH_LOGITS_BYTES`], its cache within [`BATCH_TOKENS`].
    fn batch_size(&self, longest: usize, new: usize) -> usize {
        let by_logits = BATCH_LOGITS_BYTES / (self.decoder.vocab().max(1) * 4);
        let by_tokens = BATCH_TOKENS / longest.saturating_add(new).max(1);
        by_logits.min(by_tokens).max(1)
    }

    /// Answers each prompt, in batches whose logits and caches fit [`BATCH_LOGITS_BYTES`] and
    /// [`BATCH_TOKENS`], handing each answer to `on_answer(index, answer)` in order; returns the
    /// timing.
    ///
    /// # Errors
    /// More than [`MAX_PROMPTS`] prompts, and as [`generate`](Self::generate).
    pub fn generate_all(
        &self,
        prompts: &[String],
        options: &Options,
        mut on_answer: impl FnMut(usize, &str),
    ) -> Result<Timing> {
        if prompts.len() > MAX_PROMPTS {
            bail!(
                "{} prompts are more than the {MAX_PROMPTS} one run answers",
                prompts.len()
            );
        }
        let mut timing = Timing::default();
        let mut done = 0;
        while done < prompts.len() {
            // The batch's size follows its longest prompt, so each is tokenized first (each
            // within the byte bound of `encode`).
            let mut take = 0;
            let mut longest = 0;
            while done + take < prompts.len() {
                let tokens = self.encode(&prompts[done + take], true)?.len();
                let with = longest.max(tokens);
                if take > 0 && take + 1 > self.batch_size(with, options.max_new_tokens) {
                    break;
                }
                longest = with;
                take += 1;
            }
            let (answers, batch) =
                self.generate(&prompts[done..done + take], options, |_, _| {})?;
            for (i, answer) in answers.iter().enumerate() {
                on_answer(done + i, answer);
            }
            timing.add(batch);
            done += take;
        }
        Ok(timing)
    }

    /// Generates after each prompt (left-padded into one batch), handing each sequence's new
    /// text to `on_text(sequence, piece)` as it settles; returns the answers and the timing.
    ///
    /// # Errors
    /// A prompt that cannot be tokenized or is too long, a batch larger than the bounds of
    /// [`generate_all`](Self::generate_all) allows, or an error of the model.
    pub fn generate(
        &self,
        prompts: &[String],
        options: &Options,
        mut on_text: impl FnMut(usize, &str),
    ) -> Result<(Vec<String>, Timing)> {
        let sequences: Vec<Vec<i64>> = prompts
            .iter()
            .map(|p| self.encode(p, true))
            .collect::<Result<_>>()?;
        let longest = sequences.iter().map(Vec::len).max().unwrap_or(0);
        // The cache is allocated for the whole run up front: bound it before it is made.
        if longest.saturating_add(options.max_new_tokens) > self.context {
            bail!(
                "a prompt of {longest} tokens and {} new ones need a cache of more than the {} \
                 tokens of the model's context; ask for at most {} new tokens",
                options.max_new_tokens,
                self.context,
                self.context - longest
            );
        }
        let most = self.batch_size(longest, options.max_new_tokens);
        if sequences.len() > most {
            bail!(
                "{} prompts of up to {longest} tokens are more than one batch of {most} holds \
                 (its logits and cache bounded); answer them in batches (generate_all)",
                sequences.len()
            );
        }
        let pad = self.defaults.pad_token_id.unwrap_or(0);
        let prompt = Prompt::from_sequences(&sequences, pad, &self.device);
        let prompt_tokens = longest;
        let started = Instant::now();
        let generation = self.decoder.generate(
            prompt,
            self.generate_config(options, options.max_new_tokens),
        )?;
        let mut streams: Vec<Stream> = prompts.iter().map(|_| Stream::default()).collect();
        let mut timing = Timing {
            prompt_tokens,
            ..Timing::default()
        };
        let mut first = None;
        for step in generation {
            let step = step?;
            if first.is_none() {
                first = Some(Instant::now());
                timing.prefill_s = started.elapsed().as_secs_f64();
            } else {
                timing.decode_tokens += 1;
            }
            for (b, token) in step.tokens.iter().enumerate() {
                if let Some(token) = token
                    && !streams[b].done
                {
                    let piece =
                        streams[b].push(self, *token, &self.defaults.eos_token_ids, &options.stop);
                    if !piece.is_empty() {
                        on_text(b, &piece);
                    }
                }
            }
            if streams.iter().all(|s| s.done) {
                break;
            }
        }
        if let Some(first) = first {
            timing.decode_s = first.elapsed().as_secs_f64();
        }
        let answers = streams
            .into_iter()
            .enumerate()
            .map(|(b, mut s)| {
                let rest = s.finish(self, &options.stop);
                if !rest.is_empty() {
                    on_text(b, &rest);
                }
                s.printed
            })
            .collect();
        Ok((answers, timing))
    }
}

/// One sequence's new tokens and the text handed on so far.
#[derive(Default)]
struct Stream {
    ids: Vec<i64>,
    printed: String,
    done: bool,
}

impl Stream {
    /// Takes one new token; returns the text that settled with it.
    fn push(&mut self, model: &FolderModel, token: i64, eos: &[i64], stop: &[String]) -> String {
        if eos.contains(&token) {
            self.done = true;
            return self.finish(model, stop);
        }
        self.ids.push(token);
        let text = model.decode(&self.ids);
        if let Some(at) = stop.iter().filter_map(|s| text.find(s.as_str())).min() {
            self.done = true;
            return self.settle(&text[..at]);
        }
        // Hold back a cut character and anything a stop string may still grow from.
        let mut settled = text.trim_end_matches('\u{FFFD}').len();
        for s in stop {
            for k in (1..s.len()).rev() {
                if s.is_char_boundary(k) && text.ends_with(&s[..k]) {
                    settled = settled.min(text.len() - k);
                    break;
                }
            }
        }
        let settled = floor_char_boundary(&text, settled);
        self.settle(&text[..settled])
    }

    /// The rest of the text, at the end.
    fn finish(&mut self, model: &FolderModel, stop: &[String]) -> String {
        let text = model.decode(&self.ids);
        let end = stop
            .iter()
            .filter_map(|s| text.find(s.as_str()))
            .min()
            .unwrap_or(text.len());
        self.settle(&text[..end])
    }

    /// Hands on what `text` adds to what was printed (the decoded text only grows at its end,
    /// except where a cut character completes).
    fn settle(&mut self, text: &str) -> String {
        if text.starts_with(self.printed.as_str()) {
            let new = text[self.printed.len()..].to_string();
            self.printed = text.to_string();
            new
        } else {
            String::new()
        }
    }
}

fn floor_char_boundary(text: &str, mut at: usize) -> usize {
    while at > 0 && !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// A conversation whose history stays in the model's key/value cache from turn to turn.
pub struct Chat<'a> {
    model: &'a FolderModel,
    template: &'a ChatTemplate,
    /// The program whose child renders the template, or `None` to render in this process.
    renderer: Option<PathBuf>,
    messages: Vec<ChatMessage>,
    cache: Option<KvCache>,
    /// The ids the cache holds, in order.
    cached: Vec<i64>,
}

impl<'a> Chat<'a> {
    /// A new conversation, with an optional system message.
    ///
    /// # Errors
    /// When the folder has no chat template.
    pub fn new(model: &'a FolderModel, system: Option<String>) -> Result<Self> {
        let template = model.template.as_ref().with_context(|| {
            format!(
                "this {} folder has no chat template (chat_template.jinja or \
                     tokenizer_config.json's chat_template): `attn generate` writes after a \
                     plain prompt",
                model.family.model_type()
            )
        })?;
        Ok(Self {
            model,
            template,
            renderer: None,
            messages: system
                .map(|s| vec![ChatMessage::new("system", s)])
                .into_iter()
                .flatten()
                .collect(),
            cache: None,
            cached: Vec::new(),
        })
    }

    /// Renders the template in a child process of `program` (the `attn` program), bounded
    /// in memory and time ([`render`]), instead of in this one.
    #[must_use]
    pub fn rendered_by(mut self, program: PathBuf) -> Self {
        self.renderer = Some(program);
        self
    }

    /// Forgets every turn but the system message.
    pub fn reset(&mut self) {
        self.messages.retain(|m| m.role == "system");
        self.cache = None;
        self.cached.clear();
    }

    /// The assistant's answer to `user`, streamed to `on_text`; `stop` ends it early
    /// (Ctrl-C), keeping what was said.
    ///
    /// # Errors
    /// A template or model error; the conversation is then as it was before this turn.
    pub fn say(
        &mut self,
        user: &str,
        options: &Options,
        stop: &Arc<AtomicBool>,
        on_text: impl FnMut(&str),
    ) -> Result<Timing> {
        self.messages.push(ChatMessage::new("user", user));
        let answer = self.answer(options, stop, on_text);
        if answer.is_err() {
            // The turn never happened; the cache may hold part of it, so it starts again.
            self.messages.pop();
            self.cache = None;
            self.cached.clear();
        }
        answer
    }

    /// The answer to the conversation so far, which ends with the user's message.
    fn answer(
        &mut self,
        options: &Options,
        stop: &Arc<AtomicBool>,
        mut on_text: impl FnMut(&str),
    ) -> Result<Timing> {
        let rendered = match &self.renderer {
            Some(program) => render::render_in_child(program, self.template, &self.messages, true)?,
            None => self.template.render(&self.messages, true)?,
        };
        let ids = self.model.encode(&rendered, false)?;
        // Feed only what the cache does not hold yet; start again if the history was
        // tokenized differently this time.
        let common = self
            .cached
            .iter()
            .zip(&ids)
            .take_while(|(a, b)| a == b)
            .count();
        if common < self.cached.len() || common == ids.len() {
            self.cache = None;
            self.cached.clear();
        }
        let cache = match self.cache.take() {
            Some(cache) => cache,
            None => self.model.decoder.new_cache(1, self.model.context, None)?,
        };
        let new = &ids[self.cached.len()..];
        let room = self.model.context.saturating_sub(ids.len());
        if room == 0 {
            bail!(
                "the conversation is {} tokens, the model's context {}: /reset to start again",
                ids.len(),
                self.model.context
            );
        }
        let max_new = options.max_new_tokens.min(room);
        let tokens = Tensor::<2, Int>::from_data(
            TensorData::new(new.to_vec(), [1, new.len()]),
            &self.model.device,
        );
        let started = Instant::now();
        let mut generation = self.model.decoder.generate_with_cache(
            cache,
            tokens,
            self.model.generate_config(options, max_new),
        )?;
        let mut timing = Timing {
            prompt_tokens: new.len(),
            ..Timing::default()
        };
        let mut stream = Stream::default();
        let mut chosen = Vec::new();
        let mut first = None;
        for step in generation.by_ref() {
            let step = step?;
            if first.is_none() {
                first = Some(Instant::now());
                timing.prefill_s = started.elapsed().as_secs_f64();
            } else {
                timing.decode_tokens += 1;
            }
            let Some(token) = step.tokens[0] else { break };
            chosen.push(token);
            let piece = stream.push(
                self.model,
                token,
                &self.model.defaults.eos_token_ids,
                &options.stop,
            );
            if !piece.is_empty() {
                on_text(&piece);
            }
            if stream.done || stop.swap(false, Ordering::SeqCst) {
                break;
            }
        }
        let rest = stream.finish(self.model, &options.stop);
        if !rest.is_empty() {
            on_text(&rest);
        }
        if let Some(first) = first {
            timing.decode_s = first.elapsed().as_secs_f64();
        }
        let cache = generation.into_cache();
        // The cache holds the prompt and every chosen token but the last.
        self.cached.extend_from_slice(new);
        self.cached
            .extend_from_slice(&chosen[..chosen.len().saturating_sub(1)]);
        debug_assert_eq!(self.cached.len(), cache.filled());
        self.cache = Some(cache);
        self.messages
            .push(ChatMessage::new("assistant", stream.printed.trim()));
        Ok(timing)
    }
}

/// The prompts of a `--prompts` file: one per line, empty lines skipped.
///
/// # Errors
/// When the file cannot be read, holds no prompt, or more than [`MAX_PROMPTS`].
pub fn read_prompts(path: &Path) -> Result<Vec<String>> {
    // A regular file of a sensible size only: a FIFO would block, /dev/zero never end.
    let bytes = attn_train::text::read_bounded(path, 64 << 20)
        .with_context(|| format!("cannot read the prompts in {}", path.display()))?;
    let text = String::from_utf8(bytes)
        .with_context(|| format!("the prompts in {} are not UTF-8", path.display()))?;
    let prompts: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    if prompts.is_empty() {
        bail!("{} holds no prompt (one per line)", path.display());
    }
    if prompts.len() > MAX_PROMPTS {
        bail!(
            "{} holds {} prompts, more than the {MAX_PROMPTS} one run answers; split it",
            path.display(),
            prompts.len()
        );
    }
    Ok(prompts)
}
