//! cargo run --release --example heatmap -- runs/context --device flex
//!
//! Draws the attention of every head of a trained model, read back from a checkpoint.
//!
//! The folder is one written by `attn train --out DIR` (see `docs/training.md`); the program
//! reads from it:
//!
//! - `DIR/config.json`: the task and the model's sizes, from which the model is rebuilt
//!   ([`read_config`], [`Model::init`], the encoder of an encoder task);
//! - `DIR/checkpoints/latest`, or `--step N`: which checkpoint to load
//!   ([`checkpoint::latest`]);
//! - `DIR/checkpoints/step-NNNNNN/model.bpk`: the weights, loaded with burn's
//!   `Module::try_load_file`.
//!
//! It then draws one sequence of the task (chosen by `--example`) through the model with
//! [`TokenEncoder::try_forward`], asking for the weights with
//! [`TokenEncoderInput::with_weights`], and writes one picture, `DIR/heads.png` unless
//! `--out` says otherwise, holding a grid of heatmaps: one row per layer, one column per head,
//! queries top to bottom and keys left to right, dark for weight 0 and yellow for weight 1.
//!
//! It also prints the sequence, the model's answer, and for every head the key each query
//! attends to most: a reversing head reads `9 8 7 ... 0`, and on the `context` task a head that
//! found the cue points from "apple" to it.
//!
//! # Arguments
//!
//! - `DIR`: the output folder of an `attn-train` run.
//! - `--step N`: the checkpoint of step `N` instead of the latest.
//! - `--example N`: which sequence of the task to draw (0).
//! - `--out FILE`: where to write the picture (`DIR/heads.png`).
//! - `--device NAME`: the backend (`flex` by default).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use attn::model::{NeedWeights, TokenEncoder, TokenEncoderInput, TokenEncoderOutput};
use attn::train::backend;
use attn::train::checkpoint::{self, CHECKPOINTS};
use attn::train::config::TrainConfig;
use attn::train::inspect::marked_positions;
use attn::train::model::Model;
use attn::train::plot::heatmap_grid;
use attn::train::random::Rng;
use attn::train::run_dir::read_config;
use burn::module::Module;
use burn::tensor::{Int, Tensor, TensorData};
use clap::Parser;

/// Command-line arguments.
#[derive(Parser, Debug)]
#[command(about = "Draw every attention head of a trained attn-train checkpoint")]
struct Args {
    /// Output folder of an `attn-train` run.
    dir: PathBuf,
    /// Load the checkpoint of this step instead of the latest.
    #[arg(long)]
    step: Option<usize>,
    /// Which sequence of the task to draw.
    #[arg(long, default_value_t = 0)]
    example: u64,
    /// Where to write the picture (default: DIR/heads.png).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Backend to run on (flex, ndarray, wgpu, vulkan, metal, cuda; as compiled in).
    #[arg(long, default_value_t = backend::default_backend().to_string())]
    device: String,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let device = backend::device(&args.device).context("choosing the backend")?;
    let config = read_config(&args.dir)
        .with_context(|| format!("reading the run in {}", args.dir.display()))?;
    let checkpoint = find_checkpoint(&args.dir, args.step)?;

    // The same model the run built, then the saved weights poured into it.
    let model = Model::init(&config, &device).context("rebuilding the model from config.json")?;
    let weights_file = checkpoint.join("model.bpk");
    let model: TokenEncoder = match model
        .try_load_file(&weights_file)
        .map_err(|e| anyhow!("loading {}: {e}", weights_file.display()))?
    {
        Model::Encoder(encoder) => encoder,
        _ => bail!(
            "{} trained the {} task; this example draws an encoder's heads (a decoder's are in \
             the run's attention/ folder)",
            args.dir.display(),
            config.task.kind
        ),
    };
    println!(
        "{}: task {}, checkpoint {}",
        args.dir.display(),
        config.task.kind,
        checkpoint.display()
    );

    let (tokens, targets) = config.task.example(&mut Rng::new(args.example));
    let seq_len = tokens.len();
    let input = Tensor::<2, Int>::from_data(TensorData::new(tokens.clone(), [1, seq_len]), &device);
    let TokenEncoderOutput {
        logits,          // [1, seq_len, n_classes]
        weights: layers, // n_layers × [1, n_heads, seq_len, seq_len]
    } = model
        .try_forward(TokenEncoderInput::new(input).with_weights(NeedWeights::PerHead))
        .context("running the model with its attention weights")?;
    let answer = values::<i64>(logits.argmax(2).into_data())?; // [1, seq_len, 1]

    let names: Vec<String> = tokens.iter().map(|&t| config.task.token_name(t)).collect();
    print_answer(&config, &names, &targets, &answer);

    let mut maps = Vec::new();
    for (layer, weights) in layers.into_iter().enumerate() {
        let weights = values::<f32>(weights.into_data())?; // [1, n_heads, seq_len, seq_len]
        for (head, map) in weights.chunks(seq_len * seq_len).enumerate() {
            let strongest: Vec<String> = map
                .chunks(seq_len)
                .map(|row| argmax(row).to_string())
                .collect();
            println!(
                "layer {layer} head {head}: strongest key per query {}",
                strongest.join(" ")
            );
            maps.push((layer, head, map.to_vec()));
        }
    }

    let out = args.out.unwrap_or_else(|| args.dir.join("heads.png"));
    let title = format!("{} — {}", config.task.kind, checkpoint_name(&checkpoint));
    let marked = marked_positions(&config.task, &tokens);
    heatmap_grid(&out, &title, &maps, &names, &marked)?;
    println!("wrote {}", out.display());
    Ok(())
}

/// The checkpoint folder of `step`, or the latest one.
fn find_checkpoint(dir: &Path, step: Option<usize>) -> Result<PathBuf> {
    match step {
        Some(step) => {
            let path = dir.join(CHECKPOINTS).join(format!("step-{step:06}"));
            if !path.is_dir() {
                bail!(
                    "no checkpoint for step {step}: {} does not exist",
                    path.display()
                );
            }
            Ok(path)
        }
        None => checkpoint::latest(dir)
            .with_context(|| format!("finding the latest checkpoint in {}", dir.display()))?
            .with_context(|| {
                format!(
                    "{} holds no checkpoint; train with `attn train --out {}` first",
                    dir.display(),
                    dir.display()
                )
            }),
    }
}

fn checkpoint_name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// Prints the input, the expected classes and the model's, marking the scored positions.
fn print_answer(config: &TrainConfig, names: &[String], targets: &[i64], answer: &[i64]) {
    let ignored = config.task.ignored_class().map(|c| c as i64);
    let class = |c: i64| {
        config
            .task
            .class_name(usize::try_from(c).unwrap_or(usize::MAX))
    };
    println!("input:    {}", names.join(" "));
    let mut wanted = Vec::new();
    let mut got = Vec::new();
    for (&t, &a) in targets.iter().zip(answer) {
        if Some(t) == ignored {
            continue;
        }
        wanted.push(class(t));
        got.push(if a == t {
            class(a)
        } else {
            format!("{}*", class(a))
        });
    }
    println!("expected: {}", wanted.join(" "));
    let wrong = got.iter().filter(|g| g.ends_with('*')).count();
    if wrong == 0 {
        println!("model:    {}   (all right)", got.join(" "));
    } else {
        println!("model:    {}   ({wrong} wrong, marked *)", got.join(" "));
    }
}

/// Index of the largest value.
fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold(
            (0, f32::MIN),
            |best, (i, &w)| if w > best.1 { (i, w) } else { best },
        )
        .0
}

/// A tensor's values, converted to `T`, row-major.
fn values<T: burn::tensor::Element>(data: TensorData) -> Result<Vec<T>> {
    data.convert::<T>()
        .try_to_vec::<T>()
        .map_err(|e| anyhow!("reading a tensor back: {e:?}"))
}
