//! cargo run --release --example positional -- runs/positional --device flex
//!
//! Pictures of two positional schemes, written as PNG files into an output folder.
//!
//! - `sinusoidal.png`: on the left, the table of Vaswani et al. (2017) that is added to the
//!   embeddings, one row per position and one column per feature, from
//!   [`SinusoidalEncoding::table`]: fast sines and cosines in the first columns, slow ones in
//!   the last. On the right, the dot product `PE(p)·PE(p + k)` against the offset `k` for two
//!   starting positions `p`: the curves coincide, because the similarity of two rows depends on
//!   their distance, not on where they are.
//! - `rotary.png`: on the left, where rotary embedding ([`RotaryEncoding::apply`]) sends the
//!   vector `(1, 0)` of four of the pairs of a head, for positions 0 to 15: the first pair turns
//!   by one radian per position, later pairs ever more slowly. On the right, the score
//!   `rope(q, m) · rope(k, n)` of one query and one key against the distance `m − n`, for two
//!   key positions `n`: again the curves coincide, which is the point of rotary embedding.
//!
//! The program prints the largest gap between the two curves of each picture, which should be
//! rounding error.
//!
//! Self-attention without any of this is blind to order: shuffling the tokens shuffles its
//! output rows and changes nothing else (the "Order" section of `examples/walkthrough.rs`).
//!
//! # Arguments
//!
//! - `OUT`: the folder for the pictures (`runs/positional`), created if missing.
//! - `--device NAME`: the backend (`flex` by default).
//! - `--d-model N`: width of the sinusoidal table (64).
//! - `--seq-len N`: positions in the sinusoidal table (128).
//! - `--d-head N`: width of the rotated head (64).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use attn::pos::{RotaryEncoding, RotaryPairing, SinusoidalEncoding};
use attn::train::backend;
use attn::train::plot::{self, FAMILY};
use burn::tensor::{Device, Distribution, Tensor};
use clap::Parser;
use plotters::coord::Shift;
use plotters::prelude::*;

/// Command-line arguments.
#[derive(Parser, Debug)]
#[command(about = "Pictures of the sinusoidal table and of the rotary rotation")]
struct Args {
    /// Folder the pictures are written into.
    #[arg(default_value = "runs/positional")]
    out: PathBuf,
    /// Backend to run on (flex, ndarray, wgpu, vulkan, metal, cuda; as compiled in).
    #[arg(long, default_value_t = backend::default_backend().to_string())]
    device: String,
    /// Width of the sinusoidal table.
    #[arg(long, default_value_t = 64)]
    d_model: usize,
    /// Positions in the sinusoidal table.
    #[arg(long, default_value_t = 128)]
    seq_len: usize,
    /// Width of the head that rotary embedding rotates.
    #[arg(long, default_value_t = 64)]
    d_head: usize,
}

/// The paper's base for both schemes.
const BASE: f64 = 10_000.0;

fn main() -> Result<()> {
    let args = Args::parse();
    let device = backend::device(&args.device).context("choosing the backend")?;
    plot::ensure_font().map_err(|reason| anyhow!(reason))?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;

    let path = args.out.join("sinusoidal.png");
    let gap = sinusoidal(&path, args.d_model, args.seq_len, &device)?;
    println!(
        "wrote {} (largest gap between its two curves: {gap:.1e})",
        path.display()
    );

    let path = args.out.join("rotary.png");
    let gap = rotary(&path, args.d_head, &device)?;
    println!(
        "wrote {} (largest gap between its two curves: {gap:.1e})",
        path.display()
    );
    Ok(())
}

/// Draws the sinusoidal table and `PE(p)·PE(p + k)`; returns the largest gap between the curves
/// of the two starting positions.
fn sinusoidal(path: &Path, d_model: usize, seq_len: usize, device: &Device) -> Result<f64> {
    let pe = SinusoidalEncoding::new(d_model, BASE).context("building the sinusoidal table")?;
    let table = read(pe.table(seq_len, 0, device))?; // [seq_len, d_model] row-major
    let row = |p: usize| &table[p * d_model..(p + 1) * d_model];
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();

    // Both curves start at a different position and run over the same offsets.
    let starts = [0, seq_len / 4];
    let offsets = seq_len - starts[1];
    let curves: Vec<(String, Vec<(f64, f64)>)> = starts
        .iter()
        .map(|&p| {
            let points = (0..offsets)
                .map(|k| (k as f64, dot(row(p), row(p + k))))
                .collect();
            (format!("p = {p}"), points)
        })
        .collect();
    let gap = largest_gap(&curves[0].1, &curves[1].1);

    let root = BitMapBackend::new(path, (1300, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let (left, right) = root.split_horizontally(620);
    let title = format!("Sinusoidal table, d_model = {d_model}: PE(pos, feature)");
    heatmap(
        &left,
        &title,
        &table,
        seq_len,
        d_model,
        ("feature", "position"),
    )?;
    let title = "PE(p)·PE(p + k): depends on k only";
    line_plot(&right, title, ("offset k", "dot product"), &curves)?;
    root.present().map_err(plot_error)?;
    Ok(gap)
}

/// Draws the rotation of four pairs and `rope(q, m)·rope(k, n)` against `m − n`; returns the
/// largest gap between the curves of the two key positions.
fn rotary(path: &Path, d_head: usize, device: &Device) -> Result<f64> {
    let rope = RotaryEncoding::new(d_head, BASE, RotaryPairing::Interleaved)
        .context("building the rotary encoding")?;

    // Every pair starts at (1, 0); a sequence of 16 copies shows where each position sends it.
    let steps = 16;
    let ones = Tensor::<4>::from_floats([[[[1.0, 0.0]]]], device) // [1, 1, 1, 2]
        .repeat_dim(3, d_head / 2) // [1, 1, 1, d_head]
        .repeat_dim(2, steps); // [1, 1, steps, d_head]
    let turned = read(rope.apply(ones, 0))?; // [1, 1, steps, d_head] row-major
    let pairs = [0, 1, 2, 4].map(|j| j.min(d_head / 2 - 1));
    let circles: Vec<(String, Vec<(f64, f64)>)> = pairs
        .iter()
        .map(|&j| {
            let points = (0..steps)
                .map(|p| (turned[p * d_head + 2 * j], turned[p * d_head + 2 * j + 1]))
                .collect();
            (format!("pair {j}"), points)
        })
        .collect();

    // One query and one key, rotated to every position of a 64-token window.
    let window = 64;
    let normal = Distribution::Normal(0.0, 1.0);
    device.seed(0);
    let q = Tensor::<4>::random([1, 1, 1, d_head], normal, device); // [1, 1, 1, d_head]
    let k = Tensor::<4>::random([1, 1, 1, d_head], normal, device); // [1, 1, 1, d_head]
    let at_every = |x: Tensor<4>, offset| rope.apply(x.repeat_dim(2, window), offset); // [1, 1, window, d_head]
    let key_positions = [0, 100];
    let curves: Vec<(String, Vec<(f64, f64)>)> = key_positions
        .iter()
        .map(|&n| -> Result<(String, Vec<(f64, f64)>)> {
            let queries = at_every(q.clone(), n); // positions n..n + window
            let key = rope.apply(k.clone(), n); // [1, 1, 1, d_head], position n
            let scores = read(queries.matmul(key.swap_dims(2, 3)))?; // [1, 1, window, 1]
            let points = scores
                .iter()
                .enumerate()
                .map(|(m, &s)| (m as f64, s))
                .collect();
            Ok((format!("key at n = {n}"), points))
        })
        .collect::<Result<_>>()?;
    let gap = largest_gap(&curves[0].1, &curves[1].1);

    let root = BitMapBackend::new(path, (1300, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let (left, right) = root.split_horizontally(560);
    circle_plot(
        &left,
        &format!("Rotary, d_head = {d_head}: (1, 0) at positions 0..{steps}"),
        &circles,
    )?;
    let title = "rope(q, m)·rope(k, n): depends on m − n only";
    line_plot(&right, title, ("distance m − n", "score"), &curves)?;
    root.present().map_err(plot_error)?;
    Ok(gap)
}

/// A `[rows, columns]` table as coloured cells: blue for −1, white for 0, red for +1.
fn heatmap(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    title: &str,
    values: &[f64],
    rows: usize,
    columns: usize,
    (x_desc, y_desc): (&str, &str),
) -> Result<()> {
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FAMILY, 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..columns as f64, 0.0..rows as f64)
        .map_err(plot_error)?;
    // Row 0 goes at the top, as in a printed table, so the y axis counts down from there.
    let top_down = |y: &f64| format!("{}", rows as f64 - y);
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .y_label_formatter(&top_down)
        .label_style((FAMILY, 13))
        .draw()
        .map_err(plot_error)?;
    let cells = (0..rows).flat_map(|r| {
        (0..columns).map(move |c| {
            let corner = (c as f64, (rows - r - 1) as f64);
            let color = diverging(values[r * columns + c]);
            Rectangle::new([corner, (corner.0 + 1.0, corner.1 + 1.0)], color.filled())
        })
    });
    chart.draw_series(cells).map_err(plot_error)?;
    Ok(())
}

/// Lines against an x axis, one per named series.
fn line_plot(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    title: &str,
    (x_desc, y_desc): (&str, &str),
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    let all = || series.iter().flat_map(|(_, p)| p.iter().copied());
    let x_max = all().map(|(x, _)| x).fold(1.0, f64::max);
    let y_max = all().map(|(_, y)| y).fold(f64::MIN, f64::max);
    let y_min = all().map(|(_, y)| y).fold(f64::MAX, f64::min);
    let pad = 0.05 * (y_max - y_min).max(1e-6);
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FAMILY, 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, y_min - pad..y_max + pad)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .label_style((FAMILY, 13))
        .draw()
        .map_err(plot_error)?;
    // The second curve is drawn thin over a thick first one, so that both stay visible when
    // they coincide.
    let styles = [BLUE.stroke_width(4), RED.stroke_width(1)];
    for ((name, points), style) in series.iter().zip(styles) {
        chart
            .draw_series(LineSeries::new(points.iter().copied(), style))
            .map_err(plot_error)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .draw()
        .map_err(plot_error)?;
    Ok(())
}

/// Points on the unit circle, one colour per series, joined in order.
fn circle_plot(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    title: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FAMILY, 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(-1.2..1.2, -1.2..1.2)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("first feature of the pair")
        .y_desc("second feature")
        .label_style((FAMILY, 13))
        .draw()
        .map_err(plot_error)?;
    let circle = (0..=100).map(|i| {
        let t = i as f64 / 100.0 * std::f64::consts::TAU;
        (t.cos(), t.sin())
    });
    chart
        .draw_series(LineSeries::new(circle, BLACK.mix(0.2)))
        .map_err(plot_error)?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(1),
            ))
            .map_err(plot_error)?;
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(plot_error)?
            .label(name.as_str())
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .draw()
        .map_err(plot_error)?;
    Ok(())
}

/// Blue (−1) through white (0) to red (+1).
fn diverging(x: f64) -> RGBColor {
    let t = x.clamp(-1.0, 1.0);
    let fade = |full: u8, t: f64| (255.0 - t * (255.0 - f64::from(full))).round() as u8;
    if t >= 0.0 {
        RGBColor(fade(178, t), fade(24, t), fade(43, t))
    } else {
        RGBColor(fade(33, -t), fade(102, -t), fade(172, -t))
    }
}

/// The largest difference between the y values of two curves over their common x values.
fn largest_gap(a: &[(f64, f64)], b: &[(f64, f64)]) -> f64 {
    a.iter()
        .zip(b)
        .map(|((_, y), (_, z))| (y - z).abs())
        .fold(0.0, f64::max)
}

fn read<const D: usize>(t: Tensor<D>) -> Result<Vec<f64>> {
    let values = t
        .into_data()
        .try_to_vec::<f32>()
        .map_err(|e| anyhow!("reading a tensor back: {e:?}"))?;
    Ok(values.into_iter().map(f64::from).collect())
}

fn plot_error(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing: {e}")
}
