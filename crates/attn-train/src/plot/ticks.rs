//! The ticks of the plots' axes: round values, labelled as they read, on linear and log
//! scales, and the wrapper that makes plotters draw exactly them.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;

/// Tick values for an axis: where the ticks stand, and what each one reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Ticks(pub Vec<(f64, String)>);

impl Ticks {
    /// The tick values alone.
    pub fn values(&self) -> Vec<f64> {
        self.0.iter().map(|(v, _)| *v).collect()
    }

    /// The label of the tick at `value` (plotters hands the formatter the tick's value back).
    pub(super) fn label(&self, value: f64) -> String {
        self.0
            .iter()
            .find(|(v, _)| (v - value).abs() <= 1e-9 * v.abs().max(1e-300))
            .map_or_else(|| format!("{value}"), |(_, l)| l.clone())
    }
}

/// A plotters axis over `inner` whose ticks stand exactly at chosen values.
pub(super) struct Ticked<R> {
    inner: R,
    ticks: Vec<f64>,
}

impl<R> Ticked<R> {
    pub(super) fn new(inner: R, ticks: &Ticks) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
