//! The learning-rate schedule: linear warm-up to a peak, then decay to a floor.
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
//! The schedule is a pure function of the step rather than one of burn's stateful
//! `LrScheduler`s: a resumed run needs nothing but the step number to continue it exactly.

use serde::{Deserialize, Serialize};

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

/// Warm-up then decay, as a function of the step.
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
    /// The learning rate for update `step` (0-based).
    pub fn at(&self, step: usize) -> f64 {
        if step < self.warmup_steps {
            return self.peak * (step + 1) as f64 / self.warmup_steps as f64;
        }
        let span = self.total_steps.saturating_sub(self.warmup_steps).max(1);
        let progress = ((step - self.warmup_steps) as f64 / span as f64).min(1.0);
        let shape = match self.decay {
            Decay::Constant => 1.0,
            Decay::Linear => 1.0 - progress,
            Decay::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()),
        };
        let floor = self.peak * self.final_fraction;
        floor + (self.peak - floor) * shape
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

    #[test]
    fn warm_up_rises_linearly_to_the_peak() {
        let s = schedule(Decay::Linear);
        let lrs: Vec<f64> = (0..4).map(|t| s.at(t)).collect();
        assert_eq!(lrs, vec![0.5, 1.0, 1.5, 2.0]);
        assert_eq!(s.at(4), 2.0);
    }

    #[test]
    fn linear_decay_reaches_the_floor_at_the_last_step() {
        let s = schedule(Decay::Linear);
        assert!((s.at(9) - (0.2 + 1.8 * 0.5)).abs() < 1e-12);
        assert!((s.at(14) - 0.2).abs() < 1e-12);
        assert!((s.at(100) - 0.2).abs() < 1e-12);
    }

    #[test]
    fn cosine_decay_is_half_way_at_mid_point() {
        let s = schedule(Decay::Cosine);
        assert!((s.at(9) - 1.1).abs() < 1e-12);
        assert!((s.at(14) - 0.2).abs() < 1e-12);
    }

    #[test]
    fn constant_stays_at_the_peak_and_no_warm_up_starts_there() {
        let s = LrSchedule {
            warmup_steps: 0,
            ..schedule(Decay::Constant)
        };
        assert_eq!(s.at(0), 2.0);
        assert_eq!(s.at(13), 2.0);
    }
}
