//! The divergence guard: a run stops when a loss is not finite or passes
//! [`DIVERGENCE_FACTOR`] times the first step's loss, and writes no checkpoint from those
//! weights.

use std::path::PathBuf;

use crate::error::{DIVERGENCE_FACTOR, TrainError};

/// The error that stops the run at `step` when `loss` has diverged (relative to the `first`
/// step's loss, once there is one), naming the `last` checkpoint written; `None` when the loss
/// is fine.
pub(super) fn diverged(
    step: usize,
    loss: f64,
    first: Option<f64>,
    last: &Option<PathBuf>,
) -> Option<TrainError> {
    let bound = first.map(|f| DIVERGENCE_FACTOR * f);
    if !loss.is_finite() {
        Some(TrainError::NonFiniteLoss {
            step,
            loss,
            last_checkpoint: last.clone(),
        })
    } else if let Some(bound) = bound
        && loss > bound
    {
        Some(TrainError::LossDiverged {
            step,
            loss,
            bound,
            last_checkpoint: last.clone(),
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use attn_testing::for_each_device;

    use super::super::tests::{TRAINING, quiet, temp_out, tiny};
    use super::super::{RunOptions, run_on};
    use crate::checkpoint;
    use crate::error::TrainError;
    use crate::tasks::TaskKind;

    #[test]
    fn diverging_loss_stops_and_keeps_the_last_good_checkpoint() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            let mut config = tiny(d, TaskKind::Copy, 6);
            config.eval_every = 1;
            config.checkpoint_every = 2;
            let out = temp_out("nan", d.name);
            let first = RunOptions {
                stop_at: Some(2),
                ..quiet(Some(out.clone()))
            };
            run_on(&config, d.device.clone(), &first).expect("two good steps");
            let good = checkpoint::latest(&out)
                .expect("readable")
                .expect("a checkpoint");

            // A learning rate beyond f32's range turns the weights infinite (or NaN) at once.
            config.optim.lr = f64::MAX;
            config.optim.warmup_steps = 0;
            let resume = RunOptions {
                resume: true,
                ..quiet(Some(out.clone()))
            };
            let err = run_on(&config, d.device.clone(), &resume).expect_err("diverges");
            match &err {
                TrainError::NonFiniteLoss {
                    step,
                    last_checkpoint,
                    ..
                } => {
                    assert!(*step <= 4, "diverged only at step {step}");
                    assert_eq!(last_checkpoint.as_deref(), Some(good.as_path()));
                }
                other => panic!("expected NonFiniteLoss, got {other}"),
            }
            assert!(err.to_string().contains("step-000002"), "{err}");
            assert_eq!(checkpoint::latest(&out).expect("readable"), Some(good));
            std::fs::remove_dir_all(out).expect("cleanup");
        });
    }
}
