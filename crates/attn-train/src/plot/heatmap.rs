//! Attention heatmaps: the layout engine that sizes the map, its token labels and its colour
//! bar, and the drawing of one head, a cross-attention head, or a grid of heads.

use std::path::Path;

use plotters::coord::Shift;
use plotters::drawing::DrawingAreaErrorKind;
use plotters::prelude::*;
use plotters::style::colors::colormaps::ViridisRGB;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{FAMILY, ensure_font, plot_error};
use crate::error::TrainError;
use crate::files;

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
    files::replace_with(
        path,
        |tmp| {
            let root =
                BitMapBackend::new(tmp, (layout.width(), layout.height())).into_drawing_area();
            root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
            draw_heatmap(&root, &layout, title, weights, axes).map_err(&fail)?;
            root.present().map_err(|e| fail(e.to_string()))
        },
        |p, e| TrainError::io("writing", p, e),
    )
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
    files::replace_with(
        path,
        |tmp| {
            let root = BitMapBackend::new(tmp, size).into_drawing_area();
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
        },
        |p, e| TrainError::io("writing", p, e),
    )
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
    use crate::plot::tests::temp_dir;

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
