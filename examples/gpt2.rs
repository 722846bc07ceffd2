//! `cargo run --example gpt2 -- crates/attn-model/tests/data/hf/gpt2_tiny 19 51 78 72 --new 16`
//! `cargo run --example gpt2 -- crates/attn-model/tests/data/hf/gpt2_tiny --text "Attention is"`
//!
//! Loads a folder written by Hugging Face's `GPT2LMHeadModel.save_pretrained` (`config.json`,
//! `model.safetensors` or `pytorch_model.bin`) and continues the prompt through the key/value
//! cache, printing each new token as it is chosen: greedy by default, sampled with
//! `--temperature` (and `--top-k`, `--top-p`, `--seed`). Generation stops at the config's
//! `eos_token_id`.
//!
//! The prompt is token ids, or with `--text` a text that the folder's `tokenizer.json` encodes
//! (through Hugging Face's `tokenizers` crate); with a tokenizer the new tokens print as text.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use attn::model::hf::{Gpt2, Gpt2Config, read_config};
use attn::model::{GenerateConfig, Prompt, Sampling};
use attn::train::backend;
use burn::tensor::{Int, Tensor, TensorData};
use clap::Parser;

/// Generate with a GPT-2 checkpoint.
#[derive(Parser)]
struct Args {
    /// The model folder.
    folder: PathBuf,
    /// Token ids of the prompt.
    #[arg(required_unless_present = "text", conflicts_with = "text")]
    ids: Vec<i64>,
    /// The prompt as text, encoded by the folder's tokenizer.json.
    #[arg(long)]
    text: Option<String>,
    /// New tokens at most.
    #[arg(long, default_value_t = 32)]
    new: usize,
    /// Sample at this temperature instead of choosing greedily.
    #[arg(long)]
    temperature: Option<f64>,
    /// Sample among the k most likely tokens only.
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample among the most likely tokens whose probability reaches p.
    #[arg(long)]
    top_p: Option<f64>,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Backend to run on.
    #[arg(long, default_value = "flex")]
    device: String,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let device =
        backend::device(&args.device).with_context(|| format!("backend {}", args.device))?;
    let config: Gpt2Config = read_config(&args.folder).context("reading config.json")?;
    let gpt2 = Gpt2::from_pretrained(&args.folder, &device)
        .with_context(|| format!("loading {}", args.folder.display()))?;
    let sampling = match args.temperature {
        Some(temperature) => Sampling::Sample {
            temperature,
            top_k: args.top_k,
            top_p: args.top_p,
        },
        None => Sampling::Greedy,
    };
    let generate = GenerateConfig::new(args.new)
        .with_sampling(sampling)
        .with_seed(args.seed)
        .with_stop_tokens(config.eos_token_id.into_iter().collect());
    let tokenizer_path = args.folder.join("tokenizer.json");
    let tokenizer = if tokenizer_path.exists() {
        Some(
            tokenizers::Tokenizer::from_file(&tokenizer_path)
                .map_err(|e| anyhow!("reading {}: {e}", tokenizer_path.display()))?,
        )
    } else {
        None
    };
    let ids: Vec<i64> = match (&args.text, &tokenizer) {
        (Some(text), Some(tokenizer)) => tokenizer
            .encode(text.as_str(), false)
            .map_err(|e| anyhow!("encoding the prompt: {e}"))?
            .get_ids()
            .iter()
            .map(|&id| i64::from(id))
            .collect(),
        (Some(_), None) => {
            return Err(anyhow!(
                "--text needs {}; give token ids instead",
                tokenizer_path.display()
            ));
        }
        (None, _) => args.ids,
    };
    let seq_len = ids.len();
    let prompt = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, seq_len]), &device);
    let mut out = std::io::stdout().lock();
    for step in gpt2
        .generate(Prompt::new(prompt), generate)
        .context("prompt")?
    {
        let Some(token) = step.context("generation step")?.tokens[0] else {
            continue;
        };
        match &tokenizer {
            Some(tokenizer) => {
                let id = u32::try_from(token).context("a token id past u32")?;
                let text = tokenizer
                    .decode(&[id], false)
                    .map_err(|e| anyhow!("decoding token {token}: {e}"))?;
                write!(out, "{text}")?;
            }
            None => write!(out, "{token} ")?,
        }
        out.flush()?;
    }
    writeln!(out)?;
    Ok(())
}
