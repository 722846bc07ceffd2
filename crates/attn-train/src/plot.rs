//! Pictures of a run, drawn with plotters into PNG files: the loss and accuracy curves, and
//! attention heatmaps with the tokens on the axes.
//!
//! Text is drawn with DejaVu Sans, compiled into the binary and registered with plotters'
//! `ab_glyph` backend, so the plots look the same on a machine with no fonts installed.

use plotters::coord::Shift;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::drawing::DrawingAreaErrorKind;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;
use plotters::style::text_anchor::{HPos, Pos, VPos};
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

/// Tick values for an axis: where the ticks stand, and what each one reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Ticks(pub Vec<(f64, String)>);

impl Ticks {
    /// The tick values alone.
    pub fn values(&self) -> Vec<f64> {
        self.0.iter().map(|(v, _)| *v).collect()
    }

    /// The label of the tick at `value` (plotters hands the formatter the tick's value back).
    fn label(&self, value: f64) -> String {
        self.0
            .iter()
            .find(|(v, _)| (v - value).abs() <= 1e-9 * v.abs().max(1e-300))
            .map_or_else(|| format!("{value}"), |(_, l)| l.clone())
    }
}

/// A plotters axis over `inner` whose ticks stand exactly at chosen values.
struct Ticked<R> {
    inner: R,
    ticks: Vec<f64>,
}

impl<R> Ticked<R> {
    fn new(inner: R, ticks: &Ticks) -> Self {
        Self {
            inner,
            ticks: ticks.values(),
        }
    }
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticked<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Bold points carry the labels; there are no light ones.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }

    fn axis_pixel_range(&self, limit: (i32, i32)) -> Range<i32> {
        self.inner.axis_pixel_range(limit)
    }
}

/// `m · 10^k` printed with just the decimals it needs: `0.05`, `2`, `300`, `1e-6`.
fn format_tick(mantissa: i64, exponent: i32) -> String {
    let value = mantissa as f64 * 10f64.powi(exponent);
    if (-4..=5).contains(&exponent) {
        format!("{value:.*}", usize::try_from(-exponent).unwrap_or(0))
    } else {
        format!("{mantissa}e{exponent}")
    }
}

/// The step `m · 10^k` (`m` in 1, 2, 5) that fits at most about `most` ticks in `span`.
fn nice_step(span: f64, most: usize) -> (i64, i32) {
    let raw = (span / most.max(1) as f64).max(f64::MIN_POSITIVE);
    let exponent = raw.log10().floor() as i32;
    for m in [1, 2, 5] {
        if m as f64 * 10f64.powi(exponent) >= raw * (1.0 - 1e-12) {
            return (m, exponent);
        }
    }
    (1, exponent + 1)
}

/// Ticks on a linear axis over `lo..=hi`: multiples of one step `1`, `2` or `5 · 10^k`, at most
/// about `most` of them, each labelled with the decimals the step needs.
pub fn linear_ticks(lo: f64, hi: f64, most: usize) -> Ticks {
    let (m, exponent) = nice_step(hi - lo, most);
    let step = m as f64 * 10f64.powi(exponent);
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    Ticks(
        (first..=last)
            .map(|i| (i as f64 * step, format_tick(i * m, exponent)))
            .collect(),
    )
}

/// Ticks for the step axis: whole numbers from 0 to `x_max`, one step `1`, `2` or `5 · 10^k`
/// apart, about eight of them.
pub fn step_ticks(x_max: f64) -> Ticks {
    let (m, exponent) = nice_step(x_max.max(1.0), 8);
    // Steps are whole numbers: below one, every step is labelled.
    let step = if exponent < 0 {
        1
    } else {
        (m as f64 * 10f64.powi(exponent)) as i64
    };
    let last = (x_max + 1e-9).floor() as i64;
    Ticks(
        (0..=last / step)
            .map(|i| ((i * step) as f64, (i * step).to_string()))
            .collect(),
    )
}

/// Ticks on a log axis over `lo..=hi` (both positive): powers of ten, then `1, 2, 5` and then
/// every `1..9` of each decade, whichever first gives three ticks; for a range narrower than
/// that, linear ticks inside it. Always at least two labelled ticks.
pub fn log_ticks(lo: f64, hi: f64) -> Ticks {
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    for mantissas in [&[1][..], &[1, 2, 5], &[1, 2, 3, 4, 5, 6, 7, 8, 9]] {
        let ticks: Vec<(f64, String)> = (first..=last)
            .flat_map(|k| mantissas.iter().map(move |&m| (m, k)))
            .map(|(m, k)| (m as f64 * 10f64.powi(k), format_tick(m, k)))
            .filter(|(v, _)| *v >= lo * (1.0 - 1e-9) && *v <= hi * (1.0 + 1e-9))
            .collect();
        if ticks.len() >= 3 && ticks.len() <= 12 {
            return Ticks(ticks);
        }
    }
    let linear = linear_ticks(lo, hi, 4);
    if linear.0.len() >= 2 {
        linear
    } else {
        linear_ticks(lo, hi, 8)
    }
}

/// Draws `series` against the step into `path`, on a log scale when `log_y`.
///
/// Whatever the range, both axes carry labelled ticks: whole numbers for the step, and on a log
/// axis that spans less than a decade, ticks inside the decade.
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
    let x_ticks = step_ticks(x_max);

    let root = BitMapBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, (FAMILY, 22))
        .margin(12)
        // Room for half of the last step label, which is centred on the right edge.
        .margin_right(36)
        .x_label_area_size(44)
        .y_label_area_size(76);
    let x_range = Ticked::new(RangedCoordf64::from(0.0..x_max), &x_ticks);
    if log_y {
        let range = (y_min * 0.8).max(1e-9)..y_max * 1.25;
        let y_ticks = log_ticks(range.start, range.end);
        let mut chart = builder
            .build_cartesian_2d(
                x_range,
                Ticked::new(LogCoord::from(range.log_scale()), &y_ticks),
            )
            .map_err(|e| fail(e.to_string()))?;
        draw_series(&mut chart, series, y_label, (&x_ticks, &y_ticks), &fail)?;
    } else {
        let range = y_min.min(0.0)..(y_max * 1.05).max(1.0);
        let y_ticks = linear_ticks(range.start, range.end, 6);
        let mut chart = builder
            .build_cartesian_2d(x_range, Ticked::new(RangedCoordf64::from(range), &y_ticks))
            .map_err(|e| fail(e.to_string()))?;
        draw_series(&mut chart, series, y_label, (&x_ticks, &y_ticks), &fail)?;
    }
    root.present().map_err(|e| fail(e.to_string()))
}

/// Draws the mesh, the lines and the legend of a curve plot.
fn draw_series<'a, X, Y>(
    chart: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
    series: &[Series<'_>],
    y_label: &str,
    (x_ticks, y_ticks): (&Ticks, &Ticks),
    fail: &impl Fn(String) -> TrainError,
) -> Result<(), TrainError>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(y_label)
        .x_label_formatter(&|v| x_ticks.label(*v))
        .y_label_formatter(&|v| y_ticks.label(*v))
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .light_line_style(WHITE)
        .bold_line_style(BLACK.mix(0.12))
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

/// Which tokens of a heatmap's axes carry a label: every `every`-th, and every marked one
/// (the task's positions that matter, such as the ambiguous word and its cue), except regular
/// ones that would crowd a marked one.
fn labelled(seq_len: usize, every: usize, marked: &[usize]) -> Vec<(usize, bool)> {
    (0..seq_len)
        .filter_map(|i| {
            if marked.contains(&i) {
                Some((i, true))
            } else if i % every == 0 && marked.iter().all(|&m| m.abs_diff(i) * 2 > every) {
                Some((i, false))
            } else {
                None
            }
        })
        .collect()
}

/// Where everything of one heatmap stands, in pixels from the top left of its area.
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// Side of one token's cell.
    cell: u32,
    /// Label font size.
    font: u32,
    /// Caption font size.
    caption: u32,
    /// Axis description font size.
    desc: u32,
    /// Width of the widest label.
    label: u32,
    /// Queries, one row each.
    rows: usize,
    /// Keys, one column each.
    cols: usize,
}

/// Tick mark length, and the gap between a tick's end and its label.
const TICK: u32 = 4;
const GAP: u32 = 3;
/// Width of the colour bar, and the gap between the map and the bar.
const BAR: u32 = 14;
const BAR_GAP: u32 = 14;

impl Layout {
    /// Width of the map.
    fn map_width(&self) -> u32 {
        self.cell * self.cols as u32
    }
    /// Height of the map.
    fn map_height(&self) -> u32 {
        self.cell * self.rows as u32
    }
    /// Left edge of the map: the axis description, the labels, the ticks.
    fn x0(&self) -> u32 {
        8 + self.desc + 6 + self.label + GAP + TICK
    }
    /// Top edge of the map, under the caption.
    fn y0(&self) -> u32 {
        8 + self.caption + 10
    }
    fn bar_x(&self) -> u32 {
        self.x0() + self.map_width() + BAR_GAP
    }
    fn width(&self) -> u32 {
        // The bar's labels: "0.75" in the label font.
        self.bar_x() + BAR + GAP + TICK + 4 * self.font * 3 / 5 + 10
    }
    fn height(&self) -> u32 {
        self.y0() + self.map_height() + TICK + GAP + self.label + 6 + self.desc + 8
    }
    /// The centre of token `i`'s cell along either axis, relative to the map's edge.
    fn centre(&self, i: usize) -> i32 {
        (i as u32 * self.cell + self.cell / 2) as i32
    }
}

/// Label sizes: one large heatmap per picture, or many small panels.
#[derive(Clone, Copy)]
enum Labels {
    Large,
    Small,
}

impl Labels {
    /// The layout for `axes`, the longer axis setting the cell size.
    fn layout(self, axes: &Axes) -> Layout {
        let longer = axes.longer().max(1);
        let (area, caption, desc, largest) = match self {
            Labels::Large => (640, 18, 14, 14),
            Labels::Small => (300, 14, 12, 12),
        };
        let cell = (area / longer as u32).clamp(6, 40);
        // A label fits in the space between two labelled cells.
        let font = (cell * axes.every as u32)
            .saturating_sub(2)
            .clamp(9, largest);
        let widest = |tokens: &[String], shown: &[(usize, bool)]| {
            shown
                .iter()
                .map(|&(i, _)| text_width(&tokens[i], font))
                .max()
                .unwrap_or(font)
        };
        Layout {
            cell,
            font,
            caption,
            desc,
            label: widest(&axes.queries, &axes.shown_queries)
                .max(widest(&axes.keys, &axes.shown_keys)),
            rows: axes.queries.len(),
            cols: axes.keys.len(),
        }
    }

    /// Label every this many tokens, so labels of this style are at least a line apart.
    fn every(self, seq_len: usize) -> usize {
        let (area, least): (u32, u32) = match self {
            Labels::Large => (640, 13),
            Labels::Small => (300, 11),
        };
        let cell = (area / seq_len.max(1) as u32).clamp(6, 40);
        least.div_ceil(cell) as usize
    }
}

/// The tokens along a heatmap's two axes, and which of them carry a label.
struct Axes {
    /// One word per query (row).
    queries: Vec<String>,
    /// One word per key (column).
    keys: Vec<String>,
    /// Labels every this many cells on both axes.
    every: usize,
    /// The labelled queries, each with whether it is marked.
    shown_queries: Vec<(usize, bool)>,
    /// The labelled keys, each with whether it is marked.
    shown_keys: Vec<(usize, bool)>,
}

impl Axes {
    /// Self-attention: the same tokens as queries and keys, `marked` on both.
    fn same(labels: Labels, tokens: &[String], marked: &[usize]) -> Self {
        Self::new(labels, tokens, tokens, marked, marked)
    }

    /// Cross-attention: queries from one sequence, keys from another, nothing marked.
    fn cross(labels: Labels, queries: &[String], keys: &[String]) -> Self {
        Self::new(labels, queries, keys, &[], &[])
    }

    fn new(
        labels: Labels,
        queries: &[String],
        keys: &[String],
        marked_queries: &[usize],
        marked_keys: &[usize],
    ) -> Self {
        let every = labels.every(queries.len().max(keys.len()));
        Self {
            queries: queries.to_vec(),
            keys: keys.to_vec(),
            every,
            shown_queries: labelled(queries.len(), every, marked_queries),
            shown_keys: labelled(keys.len(), every, marked_keys),
        }
    }

    fn longer(&self) -> usize {
        self.queries.len().max(self.keys.len())
    }
}

/// The width of `text` in the bundled font at `size`, in pixels.
fn text_width(text: &str, size: u32) -> u32 {
    (FAMILY, size)
        .into_font()
        .box_size(text)
        .map_or(text.chars().count() as u32 * size * 3 / 5, |(w, _)| w)
}

/// Draws one head's attention weights as a heatmap: row `i` (query, top to bottom) against
/// column `j` (key, left to right), with the tokens' words on both axes and a colour bar.
///
/// Short sequences name every token; long ones name every few, and always the positions in
/// `marked` (drawn in red), such as the `context` task's ambiguous word and its cue.
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
    marked: &[usize],
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
    draw_one(
        path,
        title,
        weights,
        &Axes::same(Labels::Large, tokens, marked),
    )
}

/// Draws one head's cross-attention weights as a heatmap: row `i` (a query, from the target,
/// top to bottom) against column `j` (a key, from the source, left to right), each axis with
/// its own sequence's words.
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
    draw_one(
        path,
        title,
        weights,
        &Axes::cross(Labels::Large, queries, keys),
    )
}

/// One large heatmap in a picture of its own.
fn draw_one(path: &Path, title: &str, weights: &[f32], axes: &Axes) -> Result<(), TrainError> {
    let fail = plot_error(path);
    let layout = Labels::Large.layout(axes);
    let root = BitMapBackend::new(path, (layout.width(), layout.height())).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    draw_heatmap(&root, &layout, title, weights, axes).map_err(&fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}

/// One head's attention weights for every layer and head of a model, in one picture: a row
/// per layer, a column per head, each panel drawn as [`heatmap`] draws one, with the same
/// `marked` positions.
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
    marked: &[usize],
) -> Result<(), TrainError> {
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
    let axes = Axes::same(Labels::Small, tokens, marked);
    let layout = Labels::Small.layout(&axes);
    let n_layers = maps.iter().map(|(l, _, _)| l + 1).max().unwrap_or(0);
    let n_heads = maps.iter().map(|(_, h, _)| h + 1).max().unwrap_or(0);
    let size = (
        layout.width() * n_heads.max(1) as u32,
        layout.height() * n_layers.max(1) as u32 + 40,
    );
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let root = root
        .titled(title, (FAMILY, 22))
        .map_err(|e| fail(e.to_string()))?;
    let panels = root.split_evenly((n_layers.max(1), n_heads.max(1)));
    for (layer, head, w) in maps {
        let panel = &panels[layer * n_heads + head];
        let panel_title = format!("layer {layer}, head {head}");
        draw_heatmap(panel, &layout, &panel_title, w, &axes).map_err(&fail)?;
    }
    root.present().map_err(|e| fail(e.to_string()))
}

/// Draws one heatmap into `area` at `layout`: caption, cells, ticks and labels outside the
/// map (labels a gap beyond the ticks' ends), axis descriptions, and the colour bar.
fn draw_heatmap(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    layout: &Layout,
    title: &str,
    weights: &[f32],
    axes: &Axes,
) -> Result<(), String> {
    let (rows, cols) = (layout.rows, layout.cols);
    let err = |e: DrawingAreaErrorKind<_>| e.to_string();
    let (x0, y0) = (layout.x0() as i32, layout.y0() as i32);
    let (width, height) = (layout.map_width() as i32, layout.map_height() as i32);
    let cell = layout.cell as i32;
    let (tick, gap) = (TICK as i32, GAP as i32);
    let centre_x = x0 + width / 2;

    let caption = TextStyle::from((FAMILY, layout.caption).into_font())
        .pos(Pos::new(HPos::Center, VPos::Top));
    area.draw(&Text::new(title.to_string(), (centre_x, 8), caption))
        .map_err(err)?;

    for i in 0..rows {
        for j in 0..cols {
            let (x, y) = (x0 + j as i32 * cell, y0 + i as i32 * cell);
            let color = weight_color(weights[i * cols + j]);
            area.draw(&Rectangle::new(
                [(x, y), (x + cell, y + cell)],
                color.filled(),
            ))
            .map_err(err)?;
        }
    }
    let frame = [(x0 - 1, y0 - 1), (x0 + width, y0 + height)];
    area.draw(&Rectangle::new(frame, BLACK.stroke_width(1)))
        .map_err(err)?;

    let font = (FAMILY, layout.font).into_font();
    let color = |marked: bool| if marked { &RED } else { &BLACK };
    for &(j, marked) in &axes.shown_keys {
        let c = layout.centre(j);
        // Key labels under the map, reading downwards, starting a gap below the tick.
        let bottom = y0 + height;
        area.draw(&PathElement::new(
            vec![(x0 + c, bottom), (x0 + c, bottom + tick)],
            BLACK,
        ))
        .map_err(err)?;
        let key = TextStyle::from(font.clone())
            .color(color(marked))
            .transform(FontTransform::Rotate90)
            .pos(Pos::new(HPos::Left, VPos::Center));
        let text = axes.keys[j].clone();
        area.draw(&Text::new(text, (x0 + c, bottom + tick + gap), key))
            .map_err(err)?;
    }
    for &(i, marked) in &axes.shown_queries {
        let c = layout.centre(i);
        let text = axes.queries[i].clone();
        // Query labels left of the map, right-aligned a gap before the tick.
        area.draw(&PathElement::new(
            vec![(x0 - tick - 1, y0 + c), (x0 - 1, y0 + c)],
            BLACK,
        ))
        .map_err(err)?;
        let query = TextStyle::from(font.clone())
            .color(color(marked))
            .pos(Pos::new(HPos::Right, VPos::Center));
        area.draw(&Text::new(text, (x0 - tick - gap - 1, y0 + c), query))
            .map_err(err)?;
    }

    let desc = (FAMILY, layout.desc).into_font();
    let key_y = y0 + height + tick + gap + layout.label as i32 + 6;
    let key = TextStyle::from(desc.clone()).pos(Pos::new(HPos::Center, VPos::Top));
    area.draw(&Text::new("key", (centre_x, key_y), key))
        .map_err(err)?;
    let query = TextStyle::from(desc)
        .transform(FontTransform::Rotate270)
        .pos(Pos::new(HPos::Center, VPos::Top));
    area.draw(&Text::new("query", (8, y0 + height / 2), query))
        .map_err(err)?;

    // The colour bar: weight 1 at the top, 0 at the bottom, one pixel row per shade.
    let bar_x = layout.bar_x() as i32;
    let bar = BAR as i32;
    for p in 0..height {
        let w = 1.0 - p as f32 / (height - 1).max(1) as f32;
        let color = weight_color(w);
        area.draw(&Rectangle::new(
            [(bar_x, y0 + p), (bar_x + bar, y0 + p + 1)],
            color.filled(),
        ))
        .map_err(err)?;
    }
    area.draw(&Rectangle::new(
        [(bar_x - 1, y0 - 1), (bar_x + bar, y0 + height)],
        BLACK.stroke_width(1),
    ))
    .map_err(err)?;
    let bar_label = TextStyle::from(font).pos(Pos::new(HPos::Left, VPos::Center));
    for (w, text) in [
        (0.0, "0"),
        (0.25, "0.25"),
        (0.5, "0.5"),
        (0.75, "0.75"),
        (1.0, "1"),
    ] {
        let y = y0 + ((1.0 - w) * (height - 1) as f64).round() as i32;
        area.draw(&PathElement::new(
            vec![(bar_x + bar, y), (bar_x + bar + tick, y)],
            BLACK,
        ))
        .map_err(err)?;
        area.draw(&Text::new(
            text,
            (bar_x + bar + tick + gap, y),
            bar_label.clone(),
        ))
        .map_err(err)?;
    }
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
        heatmap(
            &dir.join("head.png"),
            "layer 0, head 0",
            &weights,
            &tokens,
            &[1],
        )
        .expect("heatmap");
        let maps: Vec<_> = (0..2)
            .flat_map(|l| (0..3).map(move |h| (l, h, vec![0.25_f32; 16])))
            .collect();
        heatmap_grid(
            &dir.join("heads.png"),
            "every head",
            &maps,
            &tokens,
            &[1, 2],
        )
        .expect("grid");
        for f in ["loss.png", "accuracy.png", "head.png", "heads.png"] {
            assert!(is_png(&dir.join(f)), "{f} is not a PNG");
        }
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn heatmap_refuses_weights_of_the_wrong_size() {
        let dir = temp_dir("bad");
        let tokens = vec!["a".to_string(), "b".to_string()];
        let err = heatmap(&dir.join("bad.png"), "t", &[1.0; 3], &tokens, &[]).expect_err("3 != 4");
        assert!(err.to_string().contains("expected 4"), "{err}");
        let maps = vec![(0, 0, vec![0.5; 4]), (0, 1, vec![0.5; 5])];
        let err = heatmap_grid(&dir.join("bad.png"), "t", &maps, &tokens, &[]).expect_err("5 != 4");
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

    #[test]
    fn every_axis_gets_labelled_ticks_whatever_the_range() {
        // A loss that stays inside one decade still gets labels inside it.
        for (lo, hi) in [(0.4, 0.9), (0.31, 0.36), (1.2e-3, 1.9e-3), (0.02, 3.0)] {
            let ticks = log_ticks(lo, hi);
            assert!(ticks.0.len() >= 2, "{lo}..{hi}: {ticks:?}");
            for (v, label) in &ticks.0 {
                assert!((lo..=hi).contains(v), "{lo}..{hi}: {v} outside");
                let read: f64 = label.parse().expect("a number");
                assert!(
                    (read - v).abs() <= 1e-9 * v.abs(),
                    "{label} reads {read}, is {v}"
                );
            }
        }
        let decades = log_ticks(0.02, 3.0);
        let labels: Vec<&str> = decades.0.iter().map(|(_, l)| l.as_str()).collect();
        assert!(
            labels.contains(&"0.1") && labels.contains(&"1"),
            "{labels:?}"
        );

        let steps = step_ticks(600.0);
        let labels: Vec<&str> = steps.0.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(labels, ["0", "100", "200", "300", "400", "500", "600"]);
        for x_max in [3.0, 16.0, 250.0, 2000.0, 7919.0] {
            let ticks = step_ticks(x_max);
            assert!(
                ticks.0.len() >= 2 && ticks.0.len() <= 9,
                "{x_max}: {ticks:?}"
            );
            assert!(ticks.0.iter().all(|(v, l)| *v <= x_max && !l.contains('.')));
        }
        let accuracy = linear_ticks(0.0, 1.0, 6);
        assert_eq!(accuracy.0.first().map(|t| t.0), Some(0.0));
        assert_eq!(accuracy.0.last().map(|t| t.1.as_str()), Some("1.0"));
    }

    #[test]
    fn heatmap_pixels_follow_the_weights() {
        let dir = temp_dir("pixels");
        let path = dir.join("head.png");
        let tokens: Vec<String> = ["we", "eat", "a", "ripe", "apple"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let seq_len = tokens.len();
        let mut weights = vec![0.2_f32; seq_len * seq_len];
        // Row 0 one-hot on key 3; row 1 all zeros (a fully masked row).
        weights[..seq_len].copy_from_slice(&[0.0, 0.0, 0.0, 1.0, 0.0]);
        weights[seq_len..2 * seq_len].fill(0.0);
        heatmap(&path, "pixels", &weights, &tokens, &[3, 4]).expect("heatmap");

        let image = image::open(&path).expect("a PNG").to_rgb8();
        let layout = Labels::Large.layout(&Axes::same(Labels::Large, &tokens, &[3, 4]));
        assert_eq!(image.dimensions(), (layout.width(), layout.height()));
        let (x0, y0) = (layout.x0(), layout.y0());
        let at = |x: u32, y: u32| {
            let p = image.get_pixel(x, y).0;
            RGBColor(p[0], p[1], p[2])
        };
        let cell = |query: usize, key: usize| {
            at(
                x0 + layout.centre(key) as u32,
                y0 + layout.centre(query) as u32,
            )
        };
        let (top, bottom) = (weight_color(1.0), weight_color(0.0));
        assert_eq!(cell(0, 3), top, "the one-hot weight");
        for key in [0, 1, 2, 4] {
            assert_eq!(cell(0, key), bottom, "row 0, key {key}");
        }
        for key in 0..seq_len {
            assert_eq!(cell(1, key), bottom, "the zero row, key {key}");
            assert_eq!(cell(2, key), weight_color(0.2), "row 2, key {key}");
        }
        // The colour bar runs from the top colour down to the bottom one.
        let bar = layout.bar_x() + BAR / 2;
        assert_eq!(at(bar, y0), top);
        assert_eq!(at(bar, y0 + layout.map_height() - 1), bottom);

        // Every token is named: dark pixels in each row's label band, left of the ticks.
        let ink = |p: RGBColor| u32::from(p.0) + u32::from(p.1) + u32::from(p.2) < 3 * 160;
        for query in 0..seq_len {
            let y = y0 + layout.centre(query) as u32;
            let band = (x0 - TICK - GAP - layout.label)..(x0 - TICK - GAP);
            let dark = band.flat_map(|x| (y - 3..=y + 3).map(move |y| (x, y)));
            assert!(
                dark.filter(|&(x, y)| ink(at(x, y))).count() > 3,
                "query {query}"
            );
        }
        // The key labels start below the ticks' ends: the row just past the ticks is blank.
        let below = y0 + layout.map_height() + TICK + 1;
        let blank = (x0..x0 + layout.map_width()).all(|x| at(x, below) == WHITE);
        assert!(blank, "a key label touches its tick");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn cross_heatmap_has_a_row_per_query_and_a_column_per_key() {
        let dir = temp_dir("cross");
        let path = dir.join("cross.png");
        let queries: Vec<String> = ["3", "1"].iter().map(|s| s.to_string()).collect();
        let keys: Vec<String> = ["one", "three", "four"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // Query 0 ("3") on key 1 ("three"), query 1 ("1") on key 0 ("one").
        let weights = [0.0, 1.0, 0.0, 1.0, 0.0, 0.0];
        let err = cross_heatmap(&path, "t", &weights[..5], &queries, &keys).expect_err("5 != 6");
        assert!(err.to_string().contains("expected 6"), "{err}");
        cross_heatmap(&path, "cross", &weights, &queries, &keys).expect("cross heatmap");

        let image = image::open(&path).expect("a PNG").to_rgb8();
        let layout = Labels::Large.layout(&Axes::cross(Labels::Large, &queries, &keys));
        assert_eq!((layout.rows, layout.cols), (2, 3));
        assert_eq!(image.dimensions(), (layout.width(), layout.height()));
        assert!(layout.map_width() > layout.map_height());
        let at = |query: usize, key: usize| {
            let p = image
                .get_pixel(
                    layout.x0() + layout.centre(key) as u32,
                    layout.y0() + layout.centre(query) as u32,
                )
                .0;
            RGBColor(p[0], p[1], p[2])
        };
        for (i, row) in weights.chunks(3).enumerate() {
            for (j, &w) in row.iter().enumerate() {
                assert_eq!(at(i, j), weight_color(w), "query {i}, key {j}");
            }
        }
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
