//! When a step is evaluated, logged and checkpointed.
//!
//! Checkpoints by step and at the end add a row to `metrics.csv`; those by the clock or on an
//! interruption do not, so that when they fall does not change the run's numbers. Every
//! checkpoint is evaluated first, so none is written from diverged weights.

use std::time::Instant;

use crate::config::TrainConfig;

/// What is due after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Due {
    /// Evaluate and add a row to the metrics log.
    pub log: bool,
    /// Write a checkpoint (evaluated first, logged or not).
    pub checkpoint: bool,
}

impl Due {
    /// Whether the held-out set is evaluated after this step.
    pub fn evaluate(&self) -> bool {
        self.log || self.checkpoint
    }
}

/// The run's settings for evaluations and checkpoints, and the clock since the last checkpoint.
pub(super) struct CheckpointPolicy {
    /// Log every this many steps.
    eval_every: usize,
    /// Checkpoint every this many steps; 0: only at the end.
    every: usize,
    /// Checkpoint also when this many seconds have passed; 0: never by time.
    seconds: f64,
    /// Whether the run has a folder to write checkpoints into.
    writes: bool,
    /// When the last checkpoint was written (or the loop started).
    since: Instant,
}

impl CheckpointPolicy {
    /// The policy of `config`, its clock starting now; `writes` when the run has a folder.
    pub fn new(config: &TrainConfig, writes: bool) -> Self {
        Self {
            eval_every: config.eval_every,
            every: config.checkpoint_every,
            seconds: config.checkpoint_seconds,
            writes,
            since: Instant::now(),
        }
    }

    /// What is due once `step` steps are done; `done` at the run's last step, `interrupted`
    /// when the run is asked to stop.
    pub fn due(&self, step: usize, done: bool, interrupted: bool) -> Due {
        let on_schedule =
            self.writes && (done || (self.every > 0 && step.is_multiple_of(self.every)));
        let timed = self.seconds > 0.0 && self.since.elapsed().as_secs_f64() >= self.seconds;
        Due {
            log: step.is_multiple_of(self.eval_every) || on_schedule || done,
            checkpoint: self.writes && (on_schedule || timed || interrupted),
        }
    }

    /// Restarts the clock: a checkpoint was just written.
    pub fn saved(&mut self) {
        self.since = Instant::now();
    }
}
