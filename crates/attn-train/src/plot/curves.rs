//! The curves of a run: loss and accuracy against the step, one line per series.

use std::path::Path;

use plotters::coord::combinators::LogCoord;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::ticks::{Ticked, Ticks, linear_ticks, log_ticks, step_ticks};
use super::{FAMILY, ensure_font, plot_error};
use crate::error::TrainError;
use crate::files;
use crate::metrics::MetricsLog;

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
    files::replace_with(
        path,
        |tmp| curves_into(path, tmp, title, y_label, series, log_y),
        |p, e| TrainError::io("writing", p, e),
    )
}

/// [`curves`], drawn into the file `target` that replaces `path`.
fn curves_into(
    path: &Path,
    target: &Path,
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

    let root = BitMapBackend::new(target, (800, 500)).into_drawing_area();
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
