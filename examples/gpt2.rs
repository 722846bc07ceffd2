//! `cargo run --example gpt2 -- crates/attn-model/tests/data/hf/gpt2_tiny 19 51 78 72 --new 16`
//!
//! Loads a folder written by Hugging Face's `GPT2LMHeadModel.save_pretrained` (`config.json`,
//! `model.safetensors` or `pytorch_model.bin`) and continues the prompt's token ids through
//! the key/value cache, printing each new id as it is chosen: greedy by default, sampled with
//! `--temperature` (and `--top-k`, `--top-p`, `--seed`). Generation stops at the config's
//! `eos_token_id`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
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
    #[arg(required = true)]
    ids: Vec<i64>,
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
    let seq_len = args.ids.len();
    let prompt = Tensor::<2, Int>::from_data(TensorData::new(args.ids, [1, seq_len]), &device);
    let mut out = std::io::stdout().lock();
    for step in gpt2
        .generate(Prompt::new(prompt), generate)
        .context("prompt")?
    {
        if let Some(token) = step.context("generation step")?.tokens[0] {
            write!(out, "{token} ")?;
            out.flush()?;
        }
    }
    writeln!(out)?;
    Ok(())
}
