//! cargo run --release --example heatmap -- runs/context --device flex
//!
//! Draws the attention of every head of a trained model, read back from a checkpoint.
//!
//! The folder is one written by `attn-train --out DIR` (see `docs/training.md`); the program
//! reads from it:
//!
//! - `DIR/config.json`: the task and the model's sizes, from which the model is rebuilt
//!   ([`read_config`], [`TrainConfig::encoder_config`]);
//! - `DIR/checkpoints/latest`, or `--step N`: which checkpoint to load
//!   ([`checkpoint::latest`]);
//! - `DIR/checkpoints/step-NNNNNN/model.bpk`: the weights, loaded with burn's
//!   `Module::try_load_file`.
//!
//! It then draws one sequence of the task (chosen by `--example`) through the model with
//! [`TokenEncoder::forward_with_weights`], and writes one picture, `DIR/heads.png` unless
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
use attn::model::TokenEncoder;
use attn::train::backend;
use attn::train::checkpoint::{self, CHECKPOINTS};
use attn::train::config::TrainConfig;
use attn::train::random::Rng;
use attn::train::train::read_config;
use burn::module::Module;
use burn::tensor::{Int, Tensor, TensorData};
use clap::Parser;
use plotters::coord::Shift;
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

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

/// DejaVu Sans, bundled so that the picture has text on a machine without fonts.
const FONT: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");
/// The family name the picture asks plotters for.
const FAMILY: &str = "sans-serif";
/// Side of one heatmap in pixels.
const PANEL: u32 = 330;

fn main() -> Result<()> {
    let args = Args::parse();
    let device = backend::device(&args.device).context("choosing the backend")?;
    let config = read_config(&args.dir)
        .with_context(|| format!("reading the run in {}", args.dir.display()))?;
    let checkpoint = find_checkpoint(&args.dir, args.step)?;

    // The same model the run built, then the saved weights poured into it.
    let model = config
        .encoder_config()
        .init(&device)
        .context("rebuilding the model from config.json")?;
    let weights_file = checkpoint.join("model.bpk");
    let model: TokenEncoder = model
        .try_load_file(&weights_file)
        .map_err(|e| anyhow!("loading {}: {e}", weights_file.display()))?;
    println!(
        "{}: task {}, checkpoint {}",
        args.dir.display(),
        config.task.kind,
        checkpoint.display()
    );

    let (tokens, targets) = config.task.example(&mut Rng::new(args.example));
    let seq_len = tokens.len();
    let input = Tensor::<2, Int>::from_data(TensorData::new(tokens.clone(), [1, seq_len]), &device);
    let (logits, layers) = model
        .forward_with_weights(input) // [1, seq_len, n_classes], n_layers × [1, n_heads, seq_len, seq_len]
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
    draw(&out, &title, &maps, &names)?;
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
                    "{} holds no checkpoint; train with `attn-train --out {}` first",
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
    println!("model:    {}   (* = wrong)", got.join(" "));
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

/// One picture: a grid of heatmaps, a row per layer and a column per head.
fn draw(
    path: &Path,
    title: &str,
    maps: &[(usize, usize, Vec<f32>)],
    tokens: &[String],
) -> Result<()> {
    register_font(FAMILY, FontStyle::Normal, FONT)
        .map_err(|_| anyhow!("the bundled DejaVu Sans font does not parse"))?;
    let n_layers = maps.iter().map(|(l, _, _)| l + 1).max().unwrap_or(0);
    let n_heads = maps.iter().map(|(_, h, _)| h + 1).max().unwrap_or(0);
    let size = (PANEL * n_heads as u32, PANEL * n_layers as u32 + 40);
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let root = root.titled(title, (FAMILY, 22)).map_err(plot_error)?;
    let panels = root.split_evenly((n_layers, n_heads));
    for ((layer, head, map), panel) in maps.iter().zip(&panels) {
        panel_heatmap(panel, &format!("layer {layer}, head {head}"), map, tokens)?;
    }
    root.present().map_err(plot_error)?;
    Ok(())
}

/// One head's weights, query `i` as row `i` from the top, key `j` as column `j`.
fn panel_heatmap(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    title: &str,
    weights: &[f32],
    tokens: &[String],
) -> Result<()> {
    let seq_len = tokens.len();
    // Long sequences get position numbers instead of words, which would overlap.
    let label = |i: usize| {
        if seq_len <= 20 {
            tokens[i].clone()
        } else {
            i.to_string()
        }
    };
    let every = seq_len.div_ceil(20);
    let name = |v: &SegmentValue<usize>, flip: bool| match v {
        SegmentValue::CenterOf(i) if *i < seq_len && i % every == 0 => {
            label(if flip { seq_len - 1 - i } else { *i })
        }
        _ => String::new(),
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FAMILY, 15))
        .margin(6)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((0..seq_len).into_segmented(), (0..seq_len).into_segmented())
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(seq_len)
        .y_labels(seq_len)
        .x_label_formatter(&|v| name(v, false))
        .y_label_formatter(&|v| name(v, true))
        .x_label_style(TextStyle::from((FAMILY, 10).into_font()).transform(FontTransform::Rotate90))
        .y_label_style((FAMILY, 10))
        .draw()
        .map_err(plot_error)?;
    let cells = (0..seq_len).flat_map(|i| {
        (0..seq_len).map(move |j| {
            // Rows are drawn from the top, so query i sits at height seq_len - 1 - i.
            let y = seq_len - 1 - i;
            let corners = [
                (SegmentValue::Exact(j), SegmentValue::Exact(y)),
                (SegmentValue::Exact(j + 1), SegmentValue::Exact(y + 1)),
            ];
            Rectangle::new(corners, viridis(weights[i * seq_len + j]).filled())
        })
    });
    chart.draw_series(cells).map_err(plot_error)?;
    Ok(())
}

/// A weight in `[0, 1]` as a colour: a five-stop viridis ramp, dark purple to yellow.
fn viridis(w: f32) -> RGBColor {
    const STOPS: [[f32; 3]; 5] = [
        [68.0, 1.0, 84.0],
        [59.0, 82.0, 139.0],
        [33.0, 145.0, 140.0],
        [94.0, 201.0, 98.0],
        [253.0, 231.0, 37.0],
    ];
    let x = if w.is_finite() {
        w.clamp(0.0, 1.0)
    } else {
        0.0
    } * 4.0;
    let i = (x.floor() as usize).min(3);
    let t = x - i as f32;
    let mix = |k: usize| (STOPS[i][k] + t * (STOPS[i + 1][k] - STOPS[i][k])).round() as u8;
    RGBColor(mix(0), mix(1), mix(2))
}

/// A tensor's values, converted to `T`, row-major.
fn values<T: burn::tensor::Element>(data: TensorData) -> Result<Vec<T>> {
    data.convert::<T>()
        .try_to_vec::<T>()
        .map_err(|e| anyhow!("reading a tensor back: {e:?}"))
}

fn plot_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing: {e}")
}
