//! Checkpoints: the model's weights, the optimizer's state, the learning-rate scheduler's state
//! and the loop's own state (step, random-number state, time spent), enough for a resumed run to
//! finish exactly as an unbroken one would.
//!
//! Layout under the output folder:
//!
//! ```text
//! checkpoints/step-000500/model.bpk       burn record of the model (burnpack)
//! checkpoints/step-000500/optimizer.bpk   burn record of the optimizer state (Adam moments)
//! checkpoints/step-000500/scheduler.bpk   burn record of the learning-rate scheduler
//! checkpoints/step-000500/state.json      TrainState
//! checkpoints/latest                      the name of the newest complete checkpoint
//! ```
//!
//! A checkpoint is written into `step-NNNNNN.partial` and renamed into place only when all
//! four files are there, and `latest` is replaced after that: a crash (or a diverging loss)
//! never leaves `latest` pointing at a half-written checkpoint.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::lr_scheduler::LrSchedulerRecord;
use burn::optim::{ModuleOptimizer, OptimizerRecord};
use burn::store::RecordError;
use serde::{Deserialize, Serialize};

use crate::error::TrainError;
use crate::model::Model;
use crate::random::Rng;
use crate::schedule::{LrSchedule, Scheduler};

/// The folder of checkpoints inside the output folder.
pub const CHECKPOINTS: &str = "checkpoints";
const LATEST: &str = "latest";
const MODEL_FILE: &str = "model.bpk";
const OPTIMIZER_FILE: &str = "optimizer.bpk";
const SCHEDULER_FILE: &str = "scheduler.bpk";
const STATE_FILE: &str = "state.json";

/// The loop's state at a checkpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TrainState {
    /// Updates done.
    pub step: usize,
    /// The training-batch generator, positioned after the last batch used.
    pub train_rng: Rng,
    /// The schedule the saved scheduler follows.
    pub schedule: LrSchedule,
    /// Seconds spent training so far.
    pub wall_seconds: f64,
    /// Seconds spent in training steps so far (excluding evaluation and files).
    pub train_seconds: f64,
    /// Training tokens processed so far.
    pub tokens_seen: u64,
    /// Task, model and seed of the run ([`crate::config::TrainConfig::identity`]).
    pub run: serde_json::Value,
}

/// A loaded checkpoint.
pub struct Checkpoint {
    /// The model with the saved weights.
    pub model: Model,
    /// The optimizer with the saved state.
    pub optim: ModuleOptimizer,
    /// The learning-rate scheduler, positioned at the saved step.
    pub scheduler: Scheduler,
    /// The loop state.
    pub state: TrainState,
    /// Where it was loaded from.
    pub path: PathBuf,
}

/// Writes a checkpoint for `state.step` under `out`, and points `latest` at it.
///
/// # Errors
///
/// [`TrainError::Io`] when a file cannot be written.
pub fn save(
    out: &Path,
    model: &Model,
    optim: &ModuleOptimizer,
    scheduler: &Scheduler,
    state: &TrainState,
) -> Result<PathBuf, TrainError> {
    let root = out.join(CHECKPOINTS);
    let name = format!("step-{:06}", state.step);
    let dir = root.join(&name);
    let partial = root.join(format!("{name}.partial"));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(|e| TrainError::io("removing", &partial, e))?;
    }
    std::fs::create_dir_all(&partial).map_err(|e| TrainError::io("creating", &partial, e))?;

    let record_io = |path: &Path, e: RecordError| {
        TrainError::io("writing", path, std::io::Error::other(e.to_string()))
    };
    let model_path = partial.join(MODEL_FILE);
    model
        .clone()
        .save_file(&model_path)
        .map_err(|e| record_io(&model_path, e))?;
    let optim_path = partial.join(OPTIMIZER_FILE);
    optim
        .save(&optim_path)
        .map_err(|e| record_io(&optim_path, e))?;
    let scheduler_path = partial.join(SCHEDULER_FILE);
    scheduler
        .to_record()
        .save(&scheduler_path)
        .map_err(|e| record_io(&scheduler_path, e))?;
    let state_path = partial.join(STATE_FILE);
    let json = serde_json::to_string_pretty(state).expect("TrainState is plain data");
    std::fs::write(&state_path, json).map_err(|e| TrainError::io("writing", &state_path, e))?;

    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| TrainError::io("removing", &dir, e))?;
    }
    std::fs::rename(&partial, &dir).map_err(|e| TrainError::io("renaming", &partial, e))?;
    write_atomically(&root.join(LATEST), name.as_bytes())?;
    Ok(dir)
}

/// The newest complete checkpoint under `out`, if any.
///
/// # Errors
///
/// [`TrainError::CorruptCheckpoint`] when `latest` names a folder that is not there.
pub fn latest(out: &Path) -> Result<Option<PathBuf>, TrainError> {
    let pointer = out.join(CHECKPOINTS).join(LATEST);
    let name = match std::fs::read_to_string(&pointer) {
        Ok(name) => name,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TrainError::io("reading", &pointer, e)),
    };
    let dir = out.join(CHECKPOINTS).join(name.trim());
    if !dir.is_dir() {
        return Err(TrainError::CorruptCheckpoint {
            path: pointer,
            reason: format!("it names {}, which does not exist", dir.display()),
        });
    }
    Ok(Some(dir))
}

/// Loads the checkpoint in `dir` into a freshly built `model` and `optim`, and a scheduler of
/// `schedule`, refusing one that was written for another task, model or seed than `run`.
///
/// # Errors
///
/// [`TrainError::CorruptCheckpoint`] when a file is missing or unreadable,
/// [`TrainError::CheckpointMismatch`] when the run differs or the weights do not fit the model,
/// [`TrainError::Config`] when `schedule` cannot be built.
pub fn load(
    dir: &Path,
    model: Model,
    optim: ModuleOptimizer,
    schedule: &LrSchedule,
    run: &serde_json::Value,
) -> Result<Checkpoint, TrainError> {
    let corrupt = |path: &Path, reason: String| TrainError::CorruptCheckpoint {
        path: path.to_path_buf(),
        reason,
    };

    let state_path = dir.join(STATE_FILE);
    let text = std::fs::read_to_string(&state_path)
        .map_err(|e| corrupt(&state_path, format!("cannot read: {e}")))?;
    let state: TrainState =
        serde_json::from_str(&text).map_err(|e| corrupt(&state_path, format!("bad JSON: {e}")))?;
    if &state.run != run {
        return Err(TrainError::CheckpointMismatch {
            path: dir.to_path_buf(),
            saved: state.run.to_string(),
            current: run.to_string(),
        });
    }

    let model = load_model(dir, model, run)?;

    let optim_path = dir.join(OPTIMIZER_FILE);
    let record =
        OptimizerRecord::load(&optim_path).map_err(|e| corrupt(&optim_path, e.to_string()))?;
    if state.step > 0 && record.is_empty() {
        return Err(corrupt(
            &optim_path,
            "no optimizer state after training steps".into(),
        ));
    }
    let optim = optim.load_record(record);

    let scheduler_path = dir.join(SCHEDULER_FILE);
    let record = LrSchedulerRecord::load(&scheduler_path)
        .map_err(|e| corrupt(&scheduler_path, e.to_string()))?;
    let mut scheduler = schedule.scheduler()?;
    if state.schedule == *schedule {
        scheduler = scheduler.load_record(record);
    } else {
        // Another schedule (a resumed run given more or fewer steps stretches its decay): the
        // record's counters belong to the saved schedule, so the new one starts afresh and
        // moves on by the steps done, giving the learning rate it would have at this step.
        scheduler.skip(state.step);
    }

    Ok(Checkpoint {
        model,
        optim,
        scheduler,
        state,
        path: dir.to_path_buf(),
    })
}

/// Loads the weights of the checkpoint in `dir` into a freshly built `model` of the run `run`
/// (for generating from a trained run, or as part of [`load`]).
///
/// # Errors
///
/// [`TrainError::CorruptCheckpoint`] when the file is missing or unreadable,
/// [`TrainError::CheckpointMismatch`] when the weights do not fit the model.
pub fn load_model(dir: &Path, model: Model, run: &serde_json::Value) -> Result<Model, TrainError> {
    let model_path = dir.join(MODEL_FILE);
    model.try_load_file(&model_path).map_err(|e| match e {
        RecordError::Validation(reason) => TrainError::CheckpointMismatch {
            path: model_path.clone(),
            saved: format!("weights that do not fit this model ({reason})"),
            current: run.to_string(),
        },
        RecordError::Io(reason) => TrainError::CorruptCheckpoint {
            path: model_path.clone(),
            reason,
        },
    })
}

/// Replaces `path` with `bytes` through a temporary file and a rename.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), TrainError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| TrainError::io("writing", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| TrainError::io("renaming", &tmp, e))
}
