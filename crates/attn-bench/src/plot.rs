//! The plot of the report: forward and forward plus backward time against `seq_len`, log-log,
//! one row of two panels per machine, each panel titled with its machine.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use attn_train::plot::{FAMILY, ensure_font};
use plotters::prelude::*;

use crate::report::{Table, lookup, sizes_in};

/// The attention series drawn: `(impl, case, label)`.
const SERIES: [(&str, &str, &str); 7] = [
    ("attn", "auto", "attn auto"),
    ("attn", "explicit", "attn explicit"),
    ("attn", "chunked", "attn chunked"),
    ("attn", "fused", "attn fused"),
    ("attn", "native", "attn native"),
    ("burn", "module_attention", "burn module::attention"),
    ("torch", "sdpa", "PyTorch SDPA"),
];

/// Draws each machine's attention times on `device` into the PNG at `path`.
///
/// # Errors
/// When the font cannot be registered or the file cannot be drawn or written.
pub fn draw(machines: &[(&str, Table)], path: &Path, device: &str) -> Result<()> {
    ensure_font().map_err(|reason| anyhow!(reason))?;
    let rows = machines.len().max(1);
    let root = BitMapBackend::new(path, (1400, 600 * rows as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((rows, 2));
    let cells = machines
        .iter()
        .flat_map(|(cpu, table)| ["forward", "forward_backward"].map(|pass| (*cpu, table, pass)));
    for (area, (cpu, table, pass)) in panels.iter().zip(cells) {
        panel(area, table, pass, &format!("{device}, {cpu}"))?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// One pass of one machine: a line per series that has points.
fn panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    table: &Table,
    pass: &str,
    machine: &str,
) -> Result<()> {
    let lines: Vec<(&str, Vec<(f64, f64)>)> = SERIES
        .iter()
        .map(|&(implementation, case, label)| {
            let points = sizes_in(table, pass)
                .into_iter()
                .filter_map(|s| {
                    lookup(table, implementation, case, pass, s).map(|ms| (s as f64, ms))
                })
                .collect();
            (label, points)
        })
        .collect();
    let all: Vec<(f64, f64)> = lines.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    if all.is_empty() {
        return Ok(());
    }
    let (x_min, x_max) = all.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.0), hi.max(p.0))
    });
    let (y_min, y_max) = all.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.1), hi.max(p.1))
    });
    let title = format!("{} on {machine}, [1, 8, s, 64]", pass.replace('_', " + "));
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FAMILY, 22))
        .margin(20)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x_min * 0.8..x_max * 1.25).log_scale(),
            (y_min * 0.7..y_max * 1.5).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("seq_len s")
        .y_desc("median ms (log scale)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y}"))
        .label_style((FAMILY, 15))
        .draw()?;
    for (i, (label, points)) in lines.iter().enumerate() {
        if points.is_empty() {
            continue;
        }
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(*label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 16))
        .draw()?;
    Ok(())
}
