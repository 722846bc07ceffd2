//! Pictures of a run, drawn with plotters into PNG files: the loss and accuracy curves, and
//! attention heatmaps with the tokens on the axes.
//!
//! Text is drawn with DejaVu Sans, compiled into the binary and registered with plotters'
//! `ab_glyph` backend, so the plots look the same on a machine with no fonts installed.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{SegmentValue, ValueFormatter};
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;
use plotters::style::{FontStyle, register_font};

use crate::error::TrainError;
use crate::metrics::MetricsLog;

/// DejaVu Sans (see `assets/fonts/LICENSE-DejaVu.txt` in this crate).
const FONT: &[u8] = include_bytes!("../assets/fonts/DejaVuSans.ttf");
/// The family name plots ask for, once [`ensure_font`] has registered it.
pub const FAMILY: &str = "sans-serif";

/// Registers the bundled font with plotters under the family `"sans-serif"`, once per process.
/// Every plot of the workspace (the training plots, the facade's examples, the bench program)
/// draws its text through this call.
///
/// # Errors
/// A message if the bundled font does not parse (it always does; the error is plotters').
pub fn ensure_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            register_font(FAMILY, FontStyle::Normal, FONT)
                .map_err(|_| "the bundled DejaVu Sans font does not parse".to_string())
        })
        .clone()
}

/// Turns any plotters error into [`TrainError::Plot`] for `path`.
fn plot_error(path: &Path) -> impl Fn(String) -> TrainError + '_ {
    move |reason| TrainError::Plot {
        path: path.to_path_buf(),
        reason,
    }
}

/// One named line of a curve plot.
pub struct Series<'a> {
    /// Legend text.
    pub name: &'a str,
    /// `(step, value)` points.
    pub points: Vec<(f64, f64)>,
    /// Line colour.
    pub color: RGBColor,
}

/// Draws `series` against the step into `path`, on a log scale when `log_y`.
///
/// # Errors
///
/// [`TrainError::Plot`] when the file cannot be drawn or written.
pub fn curves(
    path: &Path,
    title: &str,
    y_label: &str,
    series: &[Series<'_>],
    log_y: bool,
) -> Result<(), TrainError> {
    let fail = plot_error(path);
    ensure_font().map_err(&fail)?;
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    let x_max = points().map(|(x, _)| x).fold(1.0, f64::max);
    let values: Vec<f64> = points()
        .map(|(_, y)| y)
        .filter(|y| y.is_finite() && (!log_y || *y > 0.0))
        .collect();
    let y_max = values.iter().copied().fold(f64::MIN, f64::max).max(1e-6);
    let y_min = values.iter().copied().fold(f64::MAX, f64::min).min(y_max);

    let root = BitMapBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    if log_y {
        let range = (y_min * 0.8).max(1e-9)..y_max * 1.25;
        let mut chart = builder
            .build_cartesian_2d(0.0..x_max, range.log_scale())
            .map_err(|e| fail(e.to_string()))?;
        draw_series(&mut chart, series, y_label, &fail)?;
    } else {
        let range = y_min.min(0.0)..(y_max * 1.05).max(1.0);
        let mut chart = builder
            .build_cartesian_2d(0.0..x_max, range)
            .map_err(|e| fail(e.to_string()))?;
        draw_series(&mut chart, series, y_label, &fail)?;
    }
    root.present().map_err(|e| fail(e.to_string()))
}

/// Draws the mesh, the lines and the legend of a curve plot.
fn draw_series<'a, Y>(
    chart: &mut ChartContext<
        'a,
        BitMapBackend<'a>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, Y>,
    >,
    series: &[Series<'_>],
    y_label: &str,
    fail: &impl Fn(String) -> TrainError,
) -> Result<(), TrainError>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(y_label)
        .label_style((FAMILY, 14))
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    for s in series {
        let color = s.color;
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied().filter(|(_, y)| y.is_finite()),
                color.stroke_width(2),
            ))
            .map_err(|e| fail(e.to_string()))?
            .label(s.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .draw()
        .map_err(|e| fail(e.to_string()))
}

/// `loss.png`: training and held-out loss against the step (log scale).
///
/// # Errors
///
/// [`TrainError::Plot`] when the file cannot be drawn or written.
pub fn loss_curve(path: &Path, log: &MetricsLog) -> Result<(), TrainError> {
    let at = |f: fn(&crate::metrics::MetricsRow) -> f64| {
        log.rows.iter().map(|r| (r.step as f64, f(r))).collect()
    };
    curves(
        path,
        "Cross-entropy loss",
        "loss (log scale)",
        &[
            Series {
                name: "train",
                points: at(|r| r.train_loss),
                color: BLUE,
            },
            Series {
                name: "held-out",
                points: at(|r| r.eval_loss),
                color: RED,
            },
        ],
        true,
    )
}

/// `accuracy.png`: held-out token and sequence accuracy against the step.
///
/// # Errors
///
/// [`TrainError::Plot`] when the file cannot be drawn or written.
pub fn accuracy_curve(path: &Path, log: &MetricsLog) -> Result<(), TrainError> {
    let at = |f: fn(&crate::metrics::MetricsRow) -> f64| {
        log.rows.iter().map(|r| (r.step as f64, f(r))).collect()
    };
    curves(
        path,
        "Held-out accuracy",
        "accuracy",
        &[
            Series {
                name: "token",
                points: at(|r| r.eval_token_accuracy),
                color: BLUE,
            },
            Series {
                name: "sequence",
                points: at(|r| r.eval_sequence_accuracy),
                color: RED,
            },
        ],
        false,
    )
}

/// Colour of an attention weight in `[0, 1]` on plotters' viridis scale: dark for 0, yellow
/// for 1. A weight that is not a number is drawn as 0 (plotters' scale cannot place it).
fn weight_color(w: f32) -> RGBColor {
    let w = if w.is_finite() {
        w.clamp(0.0, 1.0)
    } else {
        0.0
    };
    ViridisRGB::get_color(w)
}

/// Draws one head's attention weights as a heatmap: row `i` (query, top to bottom) against
/// column `j` (key, left to right), with `tokens` naming both axes.
///
/// # Shapes
///
/// - weights: `[seq_len, seq_len]` row-major, rows summing to 1
/// - tokens: `[seq_len]`
///
/// # Errors
///
/// [`TrainError::Plot`] when the sizes disagree or the file cannot be drawn or written.
pub fn heatmap(
    path: &Path,
    title: &str,
    weights: &[f32],
    tokens: &[String],
) -> Result<(), TrainError> {
    let fail = plot_error(path);
    ensure_font().map_err(&fail)?;
    let seq_len = tokens.len();
    if weights.len() != seq_len * seq_len {
        return Err(fail(format!(
            "{} weights for {seq_len} tokens; expected {}",
            weights.len(),
            seq_len * seq_len
        )));
    }
    let cell = (640 / seq_len.max(1)).clamp(10, 40) as u32;
    let side = cell * seq_len as u32;
    let root = BitMapBackend::new(path, (side + 150, side + 150)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    draw_heatmap(&root, title, weights, tokens, tokens, Labels::Large).map_err(&fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}

/// Draws one head's cross-attention weights as a heatmap: row `i` (a query, from the target,
/// top to bottom) against column `j` (a key, from the source, left to right).
///
/// # Shapes
///
/// - weights: `[seq_len_q, seq_len_kv]` row-major, rows summing to 1
/// - queries: `[seq_len_q]`; keys: `[seq_len_kv]`
///
/// # Errors
///
/// [`TrainError::Plot`] when the sizes disagree or the file cannot be drawn or written.
pub fn cross_heatmap(
    path: &Path,
    title: &str,
    weights: &[f32],
    queries: &[String],
    keys: &[String],
) -> Result<(), TrainError> {
    let fail = plot_error(path);
    ensure_font().map_err(&fail)?;
    let (seq_len_q, seq_len_kv) = (queries.len(), keys.len());
    if weights.len() != seq_len_q * seq_len_kv {
        return Err(fail(format!(
            "{} weights for {seq_len_q} queries and {seq_len_kv} keys; expected {}",
            weights.len(),
            seq_len_q * seq_len_kv
        )));
    }
    let cell = (640 / seq_len_q.max(seq_len_kv).max(1)).clamp(10, 40) as u32;
    let size = (
        cell * seq_len_kv as u32 + 150,
        cell * seq_len_q as u32 + 150,
    );
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    draw_heatmap(&root, title, weights, queries, keys, Labels::Large).map_err(&fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}

/// One head's attention weights for every layer and head of a model, in one picture: a row
/// per layer, a column per head, each panel drawn as [`heatmap`] draws one.
///
/// # Shapes
///
/// - maps: `(layer, head, weights)` with weights `[seq_len, seq_len]` row-major
/// - tokens: `[seq_len]`
///
/// # Errors
///
/// [`TrainError::Plot`] when a map's size disagrees with the tokens, or the file cannot be
/// drawn or written.
pub fn heatmap_grid(
    path: &Path,
    title: &str,
    maps: &[(usize, usize, Vec<f32>)],
    tokens: &[String],
) -> Result<(), TrainError> {
    const PANEL: u32 = 330;
    let fail = plot_error(path);
    ensure_font().map_err(&fail)?;
    let seq_len = tokens.len();
    if let Some((layer, head, w)) = maps.iter().find(|(_, _, w)| w.len() != seq_len * seq_len) {
        return Err(fail(format!(
            "layer {layer}, head {head}: {} weights for {seq_len} tokens; expected {}",
            w.len(),
            seq_len * seq_len
        )));
    }
    let n_layers = maps.iter().map(|(l, _, _)| l + 1).max().unwrap_or(0);
    let n_heads = maps.iter().map(|(_, h, _)| h + 1).max().unwrap_or(0);
    let size = (PANEL * n_heads as u32, PANEL * n_layers as u32 + 40);
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let root = root
        .titled(title, (FAMILY, 22))
        .map_err(|e| fail(e.to_string()))?;
    let panels = root.split_evenly((n_layers.max(1), n_heads.max(1)));
    for ((layer, head, w), panel) in maps.iter().zip(&panels) {
        let panel_title = format!("layer {layer}, head {head}");
        draw_heatmap(panel, &panel_title, w, tokens, tokens, Labels::Small).map_err(&fail)?;
    }
    root.present().map_err(|e| fail(e.to_string()))
}

/// Label sizes: one large heatmap per picture, or many small panels.
#[derive(Clone, Copy)]
enum Labels {
    Large,
    Small,
}

fn draw_heatmap(
    root: &DrawingArea<BitMapBackend<'_>, Shift>,
    title: &str,
    weights: &[f32],
    queries: &[String],
    keys: &[String],
    labels: Labels,
) -> Result<(), String> {
    let (seq_len_q, seq_len_kv) = (queries.len(), keys.len());
    let longer = seq_len_q.max(seq_len_kv);
    // Long sequences get position numbers, and only every few of them, instead of overlapping
    // words.
    let most = match labels {
        Labels::Large => 32,
        Labels::Small => 20,
    };
    let every = longer.div_ceil(most).max(1);
    let label = |tokens: &[String], i: usize| {
        if tokens.len() <= most {
            tokens[i].clone()
        } else {
            i.to_string()
        }
    };
    // Rows are drawn top-down, so the y axis counts from the bottom row upwards.
    let name = |v: &SegmentValue<usize>, tokens: &[String], flip: bool| match v {
        SegmentValue::CenterOf(i) if *i < tokens.len() && i % every == 0 => {
            label(tokens, if flip { tokens.len() - 1 - i } else { *i })
        }
        _ => String::new(),
    };
    // Room for the longest label, written sideways under the x axis.
    let longest = (0..seq_len_q)
        .map(|i| label(queries, i).chars().count())
        .chain((0..seq_len_kv).map(|j| label(keys, j).chars().count()))
        .max()
        .unwrap_or(1) as u32;
    let (caption, font, desc) = match labels {
        Labels::Large => (18, if longer > 32 { 10 } else { 13 }, 14),
        Labels::Small => (15, 10, 11),
    };
    let label_area = longest * font * 3 / 5 + 12;
    let last_q = seq_len_q.saturating_sub(1).max(1);
    let last_kv = seq_len_kv.saturating_sub(1).max(1);
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FAMILY, caption))
        .margin(8)
        .x_label_area_size(label_area + desc)
        .y_label_area_size(label_area + desc)
        // A segmented range `0..=last` has one segment per value: one per token.
        .build_cartesian_2d((0..last_kv).into_segmented(), (0..last_q).into_segmented())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(seq_len_kv)
        .y_labels(seq_len_q)
        .x_desc("key")
        .y_desc("query")
        .x_label_formatter(&|v| name(v, keys, false))
        .y_label_formatter(&|v| name(v, queries, true))
        .x_label_style(
            TextStyle::from((FAMILY, font).into_font()).transform(FontTransform::Rotate90),
        )
        .y_label_style((FAMILY, font))
        .axis_desc_style((FAMILY, desc))
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series((0..seq_len_q).flat_map(|i| {
            (0..seq_len_kv).map(move |j| {
                let y = seq_len_q - 1 - i;
                Rectangle::new(
                    [
                        (SegmentValue::Exact(j), SegmentValue::Exact(y)),
                        (SegmentValue::Exact(j + 1), SegmentValue::Exact(y + 1)),
                    ],
                    weight_color(weights[i * seq_len_kv + j]).filled(),
                )
            })
        }))
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MetricsRow;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("attn-train-plot-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    fn is_png(path: &Path) -> bool {
        std::fs::read(path).is_ok_and(|b| b.starts_with(b"\x89PNG"))
    }

    #[test]
    fn curves_and_heatmap_write_png_files() {
        let dir = temp_dir("all");
        let rows = (1..=4)
            .map(|s| MetricsRow {
                step: s * 10,
                lr: 1e-3,
                train_loss: 2.0 / s as f64,
                eval_loss: 2.5 / s as f64,
                eval_token_accuracy: 0.2 * s as f64,
                eval_sequence_accuracy: 0.1 * s as f64,
                wall_seconds: s as f64,
            })
            .collect();
        let log = MetricsLog { rows };
        loss_curve(&dir.join("loss.png"), &log).expect("loss plot");
        accuracy_curve(&dir.join("accuracy.png"), &log).expect("accuracy plot");
        let tokens: Vec<String> = ["the", "apple", "pie", "was"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let weights = [0.25_f32; 16];
        heatmap(&dir.join("head.png"), "layer 0, head 0", &weights, &tokens).expect("heatmap");
        let maps: Vec<_> = (0..2)
            .flat_map(|l| (0..3).map(move |h| (l, h, vec![0.25_f32; 16])))
            .collect();
        heatmap_grid(&dir.join("heads.png"), "every head", &maps, &tokens).expect("grid");
        for f in ["loss.png", "accuracy.png", "head.png", "heads.png"] {
            assert!(is_png(&dir.join(f)), "{f} is not a PNG");
        }
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn heatmap_refuses_weights_of_the_wrong_size() {
        let dir = temp_dir("bad");
        let tokens = vec!["a".to_string(), "b".to_string()];
        let err = heatmap(&dir.join("bad.png"), "t", &[1.0; 3], &tokens).expect_err("3 != 4");
        assert!(err.to_string().contains("expected 4"), "{err}");
        let maps = vec![(0, 0, vec![0.5; 4]), (0, 1, vec![0.5; 5])];
        let err = heatmap_grid(&dir.join("bad.png"), "t", &maps, &tokens).expect_err("5 != 4");
        assert!(
            err.to_string().contains("layer 0, head 1: 5 weights"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn colour_ramp_runs_from_dark_to_yellow() {
        assert_eq!(weight_color(0.0), RGBColor(68, 1, 84));
        assert_eq!(weight_color(1.0), RGBColor(254, 232, 37));
        assert_eq!(weight_color(f32::NAN), RGBColor(68, 1, 84));
        assert_eq!(weight_color(2.0), weight_color(1.0));
        let mid = weight_color(0.5);
        assert!(
            mid != weight_color(0.0) && mid != weight_color(1.0),
            "{mid:?}"
        );
    }
}
