//! `cargo run --example bert -- crates/attn-model/tests/data/hf/bert_tiny 69 93 95 74 102`
//!
//! Loads a folder written by Hugging Face's `BertModel.save_pretrained` (`config.json`,
//! `model.safetensors` or `pytorch_model.bin`), runs it on the token ids given (one
//! sequence, token type 0, no padding) and prints the pooled output, `tanh(W_pool · h_0 + b)`,
//! as a JSON array.

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use attn::model::hf::Bert;
use attn::train::backend;
use burn::tensor::{Int, Tensor, TensorData};
use clap::Parser;

/// Run a BERT checkpoint on token ids.
#[derive(Parser)]
struct Args {
    /// The model folder.
    folder: PathBuf,
    /// Token ids of one sequence.
    #[arg(required = true)]
    ids: Vec<i64>,
    /// Backend to run on.
    #[arg(long, default_value = "flex")]
    device: String,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let device =
        backend::device(&args.device).with_context(|| format!("backend {}", args.device))?;
    let bert = Bert::from_pretrained(&args.folder, &device)
        .with_context(|| format!("loading {}", args.folder.display()))?;
    let seq_len = args.ids.len();
    let ids = Tensor::<2, Int>::from_data(TensorData::new(args.ids, [1, seq_len]), &device);
    let out = bert.try_forward(ids, None, None).context("running BERT")?;
    let pooled = out
        .pooler_output
        .ok_or_else(|| anyhow!("{} has no pooler", args.folder.display()))?;
    let values = pooled
        .into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .map_err(|e| anyhow!("reading the pooled output: {e:?}"))?;
    println!("{}", serde_json::to_string(&values)?);
    Ok(())
}
