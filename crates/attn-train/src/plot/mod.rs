//! Pictures of a run, drawn with plotters into PNG files: the loss and accuracy curves
//! ([`curves()`]), and attention heatmaps with the tokens on the axes ([`heatmap()`], laid out by
//! the heatmap module's layout engine), their axes' ticks chosen by the ticks module.
//!
//! Text is drawn with DejaVu Sans, compiled into the binary and registered with plotters'
//! `ab_glyph` backend, so the plots look the same on a machine with no fonts installed.

use std::path::Path;
use std::sync::OnceLock;

use plotters::style::{FontStyle, register_font};

use crate::error::TrainError;

mod curves;
mod heatmap;
mod ticks;

pub use curves::{Series, accuracy_curve, curves, loss_curve};
pub use heatmap::{cross_heatmap, heatmap, heatmap_grid};
pub use ticks::{Ticks, linear_ticks, log_ticks, step_ticks};

/// DejaVu Sans (see `assets/fonts/LICENSE-DejaVu.txt` in this crate).
const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{MetricsLog, MetricsRow};

    pub(super) fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("attn-train-plot-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    pub(super) fn is_png(path: &Path) -> bool {
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
}
