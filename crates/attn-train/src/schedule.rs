//! The learning-rate schedule: linear warm-up to a peak, then decay to a floor, run by burn's
//! learning-rate schedulers.
//!
//! For update `t` (0-based) with `w` warm-up steps over `T` steps in all:
//!
//! ```text
//! lr(t) = peak * (t + 1) / w                                  t < w
//! lr(t) = floor + (peak - floor) * d((t - w) / (T - w))       t >= w
//! ```
//!
//! with `d(p) = 1 - p` (linear), `(1 + cos(pi p)) / 2` (cosine) or `1` (constant), and
//! `floor = peak * final_fraction`.
//!
//! burn's schedulers compute the fraction `lr(t) / peak`, one after another
//! ([`SequentialLrSchedulerConfig`]):
//!
//! ```text
//! warm-up   LinearLrScheduler(1 / w -> 1 over w - 1 steps)     (w = 1: ConstantLr(1))
//! decay     LinearLrScheduler(1 -> final_fraction over T - w steps),
//!           CosineAnnealingLrScheduler(1 -> final_fraction over T - w steps), or ConstantLr(1)
//! ```
//!
//! The scheduler is stateful: each call of [`Scheduler::step`] gives the next update's
//! learning rate, and a checkpoint saves its record ([`Scheduler::to_record`]).

use burn::optim::lr_scheduler::cosine::CosineAnnealingLrSchedulerConfig;
use burn::optim::lr_scheduler::linear::LinearLrSchedulerConfig;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLrScheduler;
use burn::optim::lr_scheduler::sequential::SequentialLrSchedulerConfig;
use burn::optim::lr_scheduler::{LrSchedulerConfig, LrSchedulerRecord};
use serde::{Deserialize, Serialize};

use crate::error::TrainError;

/// How the learning rate falls after warm-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Decay {
    /// Stay at the peak.
    Constant,
    /// Fall in a straight line to the floor at the last step.
    Linear,
    /// Fall along half a cosine to the floor at the last step.
    Cosine,
}

/// Warm-up then decay: what a [`Scheduler`] follows.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LrSchedule {
    /// The learning rate at the end of warm-up.
    pub peak: f64,
    /// Updates spent rising linearly from `peak / warmup_steps` to `peak`.
    pub warmup_steps: usize,
    /// Updates in the whole run; decay reaches the floor here.
    pub total_steps: usize,
    /// The shape of the decay.
    pub decay: Decay,
    /// The floor as a fraction of the peak.
    pub final_fraction: f64,
}

impl LrSchedule {
    /// burn's scheduler for this schedule, before its first update.
    ///
    /// # Errors
    ///
    /// [`TrainError::Config`] when `final_fraction` is outside `[0, 1]` (burn refuses it).
    pub fn scheduler(&self) -> Result<Scheduler, TrainError> {
        let warmup = self.warmup_steps;
        let fraction = self.final_fraction;
        // burn's linear and cosine schedulers refuse learning rates above 1, while a run may
        // ask for any positive peak: they schedule the fraction of the peak, in (0, 1].
        let warm_up: LrSchedulerConfig = match warmup {
            0 | 1 => LrSchedulerConfig::Constant(1.0),
            w => LinearLrSchedulerConfig::new(1.0 / w as f64, 1.0, w - 1).into(),
        };
        let span = self.total_steps.saturating_sub(warmup).max(1);
        // Decay runs for the steps `w..T`, that is `span` calls at most: burn's cosine, which
        // would climb again after `span` calls, never gets there.
        let decay: LrSchedulerConfig = match self.decay {
            Decay::Constant => LrSchedulerConfig::Constant(1.0),
            Decay::Linear => LinearLrSchedulerConfig::new(1.0, fraction, span).into(),
            Decay::Cosine => CosineAnnealingLrSchedulerConfig::new(1.0, span)
                .with_min_lr(fraction)
                .into(),
        };
        let sequence = match warmup {
            0 => SequentialLrSchedulerConfig::new(vec![decay], vec![]),
            w => SequentialLrSchedulerConfig::new(vec![warm_up, decay], vec![w]),
        };
        let fractions = sequence
            .init()
            .map_err(|reason| TrainError::Config(format!("learning-rate schedule: {reason}")))?;
        Ok(Scheduler {
            peak: self.peak,
            fractions,
        })
    }
}

/// A schedule being followed: burn's scheduler of `lr / peak`, and the peak.
#[derive(Clone)]
pub struct Scheduler {
    peak: f64,
    fractions: ModuleLrScheduler,
}

impl Scheduler {
    /// The learning rate of the next update.
    pub fn step(&mut self) -> f64 {
        self.peak * self.fractions.step().base()
    }

    /// Moves on by `steps` updates, as if they had been taken.
    pub fn skip(&mut self, steps: usize) {
        for _ in 0..steps {
            self.step();
        }
    }

    /// The scheduler's state (burn's record: the counters of each part).
    pub fn to_record(&self) -> LrSchedulerRecord {
        self.fractions.to_record()
    }

    /// The scheduler with the state `record`, saved from a scheduler of the same schedule.
    pub fn load_record(self, record: LrSchedulerRecord) -> Self {
        Self {
            fractions: self.fractions.load_record(record),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(decay: Decay) -> LrSchedule {
        LrSchedule {
            peak: 2.0,
            warmup_steps: 4,
            total_steps: 14,
            decay,
            final_fraction: 0.1,
        }
    }

    /// The learning rates of the first `n` updates.
    fn lrs(schedule: &LrSchedule, n: usize) -> Vec<f64> {
        let mut scheduler = schedule.scheduler().expect("a valid schedule");
        (0..n).map(|_| scheduler.step()).collect()
    }

    fn assert_close(got: f64, want: f64) {
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }

    #[test]
    fn warm_up_rises_linearly_to_the_peak() {
        let lrs = lrs(&schedule(Decay::Linear), 5);
        for (got, want) in lrs.iter().zip([0.5, 1.0, 1.5, 2.0, 2.0]) {
            assert_close(*got, want);
        }
    }

    #[test]
    fn linear_decay_reaches_the_floor_at_the_last_step() {
        let lrs = lrs(&schedule(Decay::Linear), 101);
        assert_close(lrs[9], 0.2 + 1.8 * 0.5);
        assert_close(lrs[14], 0.2);
        assert_close(lrs[100], 0.2);
    }

    #[test]
    fn cosine_decay_is_half_way_at_mid_point() {
        let lrs = lrs(&schedule(Decay::Cosine), 15);
        assert_close(lrs[9], 1.1);
        assert_close(lrs[14], 0.2);
    }

    #[test]
    fn constant_stays_at_the_peak_and_no_warm_up_starts_there() {
        let s = LrSchedule {
            warmup_steps: 0,
            ..schedule(Decay::Constant)
        };
        let lrs = lrs(&s, 14);
        assert_eq!(lrs[0], 2.0);
        assert_eq!(lrs[13], 2.0);
    }

    #[test]
    fn one_warm_up_step_starts_at_the_peak() {
        let s = LrSchedule {
            warmup_steps: 1,
            ..schedule(Decay::Linear)
        };
        let lrs = lrs(&s, 3);
        assert_close(lrs[0], 2.0);
        assert_close(lrs[1], 2.0);
        assert_close(lrs[2], 0.2 + 1.8 * (1.0 - 1.0 / 13.0));
    }

    #[test]
    fn a_peak_above_one_is_scheduled_too() {
        let s = LrSchedule {
            peak: 1e300,
            ..schedule(Decay::Cosine)
        };
        assert!((lrs(&s, 4)[3] / 1e300 - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_restored_record_continues_the_schedule() {
        for decay in [Decay::Constant, Decay::Linear, Decay::Cosine] {
            let s = schedule(decay);
            let mut saved = s.scheduler().expect("valid");
            saved.skip(6);
            let mut restored = s.scheduler().expect("valid").load_record(saved.to_record());
            let rest: Vec<f64> = (0..8).map(|_| restored.step()).collect();
            assert_eq!(rest, lrs(&s, 14)[6..], "{decay:?}");
        }
    }

    #[test]
    fn a_fraction_beyond_one_is_refused() {
        let s = LrSchedule {
            final_fraction: 1.5,
            ..schedule(Decay::Linear)
        };
        assert!(matches!(s.scheduler(), Err(TrainError::Config(_))));
    }
}
