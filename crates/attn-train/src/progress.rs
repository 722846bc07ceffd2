//! Progress reporting on stderr: a bar on a terminal, plain lines at each evaluation otherwise
//! (a log file, a pipe), nothing when turned off.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

use crate::metrics::MetricsRow;

/// The progress bar, or plain lines at each evaluation when stderr is not a terminal.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
    total: usize,
}

impl Progress {
    /// Starts at `start` of `total` steps; `enabled` false reports nothing.
    pub(crate) fn new(enabled: bool, start: usize, total: usize) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = (enabled && terminal).then(|| {
            let bar = ProgressBar::new(total as u64);
            let style = ProgressStyle::with_template(
                "{bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}] {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_position(start as u64);
            bar
        });
        Self {
            bar,
            lines: enabled && !terminal,
            total,
        }
    }

    /// One update done, with its training loss.
    pub(crate) fn step(&self, step: usize, loss: f64) {
        if let Some(bar) = &self.bar {
            bar.set_position(step as u64);
            if step.is_multiple_of(10) {
                let msg = bar.message();
                let acc = msg.split_once(" | ").map_or("", |(_, acc)| acc).to_string();
                bar.set_message(format!("loss {loss:.4} | {acc}"));
            }
        }
    }

    /// One evaluation done.
    pub(crate) fn eval(&self, row: &MetricsRow) {
        let acc = format!(
            "held-out loss {:.4} token acc {:.1}% seq acc {:.1}%",
            row.eval_loss,
            100.0 * row.eval_token_accuracy,
            100.0 * row.eval_sequence_accuracy
        );
        if let Some(bar) = &self.bar {
            bar.set_message(format!("loss {:.4} | {acc}", row.train_loss));
        } else if self.lines {
            eprintln!(
                "step {}/{} train loss {:.4} {acc} lr {:.2e} ({:.0}s)",
                row.step, self.total, row.train_loss, row.lr, row.wall_seconds
            );
        }
    }

    /// Text the model wrote at an evaluation (the `text` task).
    pub(crate) fn sample(&self, step: usize, text: &str) {
        let message = format!("sample at step {step}:\n{text}\n");
        if let Some(bar) = &self.bar {
            bar.println(message);
        } else if self.lines {
            eprintln!("{message}");
        }
    }

    /// The run ended (or stopped).
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}
