//! What a run measures and writes down: loss, token accuracy and sequence accuracy on the
//! held-out set, one row per evaluation in `metrics.csv`.
//!
//! `metrics.csv` holds only numbers that the seed decides, so two runs of one configuration on
//! one backend and machine write the same bytes. The clock's readings go to `timings.csv`
//! beside it (step and seconds), which no two runs share.
//!
//! Token accuracy counts scored positions predicted right; sequence accuracy counts sequences
//! whose every scored position is right. Positions of the ignored class (the `context` task's
//! filler words) count in neither.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::TrainError;
use crate::tasks::Batch;

/// Running totals over evaluation batches.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counts {
    /// Sum over scored positions of the cross-entropy loss.
    pub loss_sum: f64,
    /// Scored positions seen.
    pub tokens: usize,
    /// Scored positions predicted right.
    pub correct_tokens: usize,
    /// Sequences seen.
    pub sequences: usize,
    /// Sequences with every scored position right.
    pub correct_sequences: usize,
}

/// Loss and accuracies of one evaluation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalMetrics {
    /// Mean cross-entropy per scored position.
    pub loss: f64,
    /// Fraction of scored positions right.
    pub token_accuracy: f64,
    /// Fraction of sequences entirely right.
    pub sequence_accuracy: f64,
}

impl Counts {
    /// Compares `predictions` (`[batch, seq_len]` row-major class ids) with `batch`'s targets.
    /// `mean_loss` is the batch's mean loss per scored position.
    pub fn score(
        predictions: &[i64],
        batch: &Batch,
        mean_loss: f64,
        ignored: Option<usize>,
    ) -> Self {
        let scored = |target: i64| ignored.is_none_or(|i| target != i as i64);
        let mut counts = Counts {
            sequences: batch.batch,
            ..Counts::default()
        };
        for (pred_row, target_row) in predictions
            .chunks(batch.seq_len)
            .zip(batch.targets.chunks(batch.seq_len))
        {
            let mut all_right = true;
            for (&p, &t) in pred_row.iter().zip(target_row).filter(|&(_, &t)| scored(t)) {
                counts.tokens += 1;
                if p == t {
                    counts.correct_tokens += 1;
                } else {
                    all_right = false;
                }
            }
            counts.correct_sequences += usize::from(all_right);
        }
        counts.loss_sum = mean_loss * counts.tokens as f64;
        counts
    }

    /// Adds another batch's totals.
    pub fn add(&mut self, other: Counts) {
        self.loss_sum += other.loss_sum;
        self.tokens += other.tokens;
        self.correct_tokens += other.correct_tokens;
        self.sequences += other.sequences;
        self.correct_sequences += other.correct_sequences;
    }

    /// The means.
    pub fn metrics(&self) -> EvalMetrics {
        let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        EvalMetrics {
            loss: if self.tokens == 0 {
                0.0
            } else {
                self.loss_sum / self.tokens as f64
            },
            token_accuracy: ratio(self.correct_tokens, self.tokens),
            sequence_accuracy: ratio(self.correct_sequences, self.sequences),
        }
    }
}

/// One line of `metrics.csv`: the state of the run at an evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricsRow {
    /// Updates done.
    pub step: usize,
    /// Learning rate of the last update.
    pub lr: f64,
    /// Mean training loss since the previous row.
    pub train_loss: f64,
    /// Held-out loss.
    pub eval_loss: f64,
    /// Held-out token accuracy.
    pub eval_token_accuracy: f64,
    /// Held-out sequence accuracy.
    pub eval_sequence_accuracy: f64,
    /// Seconds of training so far (excluding evaluation and writing files).
    pub wall_seconds: f64,
}

impl MetricsRow {
    /// The held-out metrics of this row.
    pub fn eval(&self) -> EvalMetrics {
        EvalMetrics {
            loss: self.eval_loss,
            token_accuracy: self.eval_token_accuracy,
            sequence_accuracy: self.eval_sequence_accuracy,
        }
    }
}

/// Every row of a run, in step order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsLog {
    /// The rows.
    pub rows: Vec<MetricsRow>,
}

/// A row of `metrics.csv`: a [`MetricsRow`] without the clock.
#[derive(Serialize, Deserialize)]
struct SeededRow {
    step: usize,
    lr: f64,
    train_loss: f64,
    eval_loss: f64,
    eval_token_accuracy: f64,
    eval_sequence_accuracy: f64,
}

/// A row of `timings.csv`.
#[derive(Serialize, Deserialize)]
struct TimingRow {
    step: usize,
    wall_seconds: f64,
}

/// The wall times of the metrics rows, beside `metrics.csv`.
pub const TIMINGS_FILE: &str = "timings.csv";

/// The file of timings beside `metrics`: `timings.csv` in the same folder.
pub fn timings_path(metrics: &Path) -> std::path::PathBuf {
    metrics.with_file_name(TIMINGS_FILE)
}

impl MetricsLog {
    /// Reads `metrics.csv`, and the wall times from `timings.csv` beside it where that is there
    /// (0 where it is not).
    ///
    /// # Errors
    ///
    /// [`TrainError::Io`] when the file cannot be read, [`TrainError::BadMetrics`] when a row
    /// does not parse.
    pub fn read_csv(path: &Path) -> Result<Self, TrainError> {
        let seeded: Vec<SeededRow> = read_rows(path)?;
        let timings_path = timings_path(path);
        let timings: Vec<TimingRow> = if timings_path.exists() {
            read_rows(&timings_path)?
        } else {
            Vec::new()
        };
        let rows = seeded
            .into_iter()
            .map(|r| MetricsRow {
                step: r.step,
                lr: r.lr,
                train_loss: r.train_loss,
                eval_loss: r.eval_loss,
                eval_token_accuracy: r.eval_token_accuracy,
                eval_sequence_accuracy: r.eval_sequence_accuracy,
                wall_seconds: timings
                    .iter()
                    .find(|t| t.step == r.step)
                    .map_or(0.0, |t| t.wall_seconds),
            })
            .collect();
        Ok(Self { rows })
    }

    /// Writes every row to `path` (`metrics.csv`) and the wall times to `timings.csv` beside
    /// it, replacing both (through temporary files, so a crash never leaves half a file).
    ///
    /// # Errors
    ///
    /// [`TrainError::Io`] when a file cannot be written.
    pub fn write_csv(&self, path: &Path) -> Result<(), TrainError> {
        write_rows(
            path,
            self.rows.iter().map(|r| SeededRow {
                step: r.step,
                lr: r.lr,
                train_loss: r.train_loss,
                eval_loss: r.eval_loss,
                eval_token_accuracy: r.eval_token_accuracy,
                eval_sequence_accuracy: r.eval_sequence_accuracy,
            }),
        )?;
        write_rows(
            &timings_path(path),
            self.rows.iter().map(|r| TimingRow {
                step: r.step,
                wall_seconds: r.wall_seconds,
            }),
        )
    }

    /// Drops rows after `step`: a resumed run rewrites them.
    pub fn truncate_after(&mut self, step: usize) {
        self.rows.retain(|r| r.step <= step);
    }

    /// The last row, if any.
    pub fn last(&self) -> Option<&MetricsRow> {
        self.rows.last()
    }
}

/// The most bytes `metrics.csv` or `timings.csv` may hold (a million rows and more).
const METRICS_LIMIT: u64 = 256 << 20;

fn read_rows<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Vec<T>, TrainError> {
    // A regular file of a sensible size only: a FIFO would block, /dev/zero never end.
    let bytes = crate::files::read_bounded(path, METRICS_LIMIT)?;
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    reader
        .deserialize()
        .collect::<Result<Vec<T>, _>>()
        .map_err(|e| csv_error(path, e))
}

fn write_rows<T: Serialize>(path: &Path, rows: impl Iterator<Item = T>) -> Result<(), TrainError> {
    crate::files::replace_with(
        path,
        |tmp| {
            let mut writer = csv::Writer::from_path(tmp).map_err(|e| csv_error(tmp, e))?;
            for row in rows {
                writer.serialize(row).map_err(|e| csv_error(tmp, e))?;
            }
            writer
                .flush()
                .map_err(|e| TrainError::io("writing", tmp, e))
        },
        |p, e| TrainError::io("writing", p, e),
    )
}

fn csv_error(path: &Path, e: csv::Error) -> TrainError {
    let reason = e.to_string();
    match e.into_kind() {
        csv::ErrorKind::Io(error) => TrainError::io("accessing", path, error),
        _ => TrainError::BadMetrics {
            path: path.to_path_buf(),
            reason,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(targets: Vec<i64>) -> Batch {
        Batch {
            batch: 2,
            seq_len: 3,
            tokens: vec![0; 6],
            targets,
            source_len: 0,
            source: Vec::new(),
        }
    }

    #[test]
    fn token_and_sequence_accuracy_count_scored_positions() {
        let b = batch(vec![1, 2, 3, 4, 5, 6]);
        let c = Counts::score(&[1, 2, 3, 4, 0, 6], &b, 0.5, None);
        assert_eq!((c.tokens, c.correct_tokens), (6, 5));
        assert_eq!((c.sequences, c.correct_sequences), (2, 1));
        let m = c.metrics();
        assert!((m.token_accuracy - 5.0 / 6.0).abs() < 1e-12);
        assert_eq!(m.sequence_accuracy, 0.5);
        assert_eq!(m.loss, 0.5);
    }

    #[test]
    fn ignored_positions_count_in_neither_accuracy() {
        // Class 0 is ignored: only the 2 and the 1 are scored.
        let b = batch(vec![0, 2, 0, 1, 0, 0]);
        let c = Counts::score(&[5, 2, 5, 2, 5, 5], &b, 1.0, Some(0));
        assert_eq!((c.tokens, c.correct_tokens), (2, 1));
        assert_eq!(c.correct_sequences, 1);
        assert_eq!(c.loss_sum, 2.0);
    }

    #[test]
    fn csv_round_trips_and_truncates() {
        let dir = std::env::temp_dir().join(format!("attn-train-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("metrics.csv");
        let row = |step| MetricsRow {
            step,
            lr: 0.001,
            train_loss: 1.5,
            eval_loss: 1.25,
            eval_token_accuracy: 0.5,
            eval_sequence_accuracy: 0.125,
            wall_seconds: 3.0,
        };
        let mut log = MetricsLog {
            rows: vec![row(10), row(20), row(30)],
        };
        log.write_csv(&path).expect("writes");
        let back = MetricsLog::read_csv(&path).expect("reads");
        assert_eq!(back, log);
        let text = std::fs::read_to_string(&path).expect("metrics.csv");
        assert!(
            !text.contains("wall"),
            "the clock stays out of metrics.csv: {text}"
        );
        let timings = std::fs::read_to_string(timings_path(&path)).expect("timings.csv");
        assert!(timings.starts_with("step,wall_seconds"), "{timings}");
        log.truncate_after(20);
        assert_eq!(log.rows.len(), 2);

        std::fs::write(&path, "step,lr\nten,0.1\n").expect("spoilt");
        let err = MetricsLog::read_csv(&path).expect_err("bad row");
        assert!(matches!(err, TrainError::BadMetrics { .. }), "{err}");
        let message = err.to_string();
        assert!(message.contains("metrics.csv does not parse"), "{message}");
        assert!(
            !message.contains("Deserialize {"),
            "no Debug dump: {message}"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
