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
//! checkpoints/step-000500/manifest.json   the step, and each file's size and SHA-256
//! checkpoints/latest                      the name of the newest checkpoint written
//! ```
//!
//! A checkpoint is written into `step-NNNNNN.partial` and renamed into place only when all
//! five files are there, and `latest` is replaced after that: a crash (or a diverging loss)
//! never leaves `latest` pointing at a half-written checkpoint.
//!
//! Before a checkpoint is loaded, [`verify`] checks each file against the manifest (size and
//! SHA-256) and `state.json`'s step against the manifest's and the folder's name. A resumed run
//! takes the newest checkpoint that passes ([`newest_intact`]), and says which it passed over
//! and why.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::lr_scheduler::LrSchedulerRecord;
use burn::optim::{ModuleOptimizer, OptimizerRecord};
use burn::store::{ModuleRecord, RecordError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::TrainError;
use crate::files;
use crate::model::Model;
use crate::random::Rng;
use crate::schedule::{LrSchedule, Scheduler};

/// The folder of checkpoints inside the output folder.
pub const CHECKPOINTS: &str = "checkpoints";
/// The file in [`CHECKPOINTS`] naming the newest checkpoint written.
pub const LATEST: &str = "latest";
const MODEL_FILE: &str = "model.bpk";
const OPTIMIZER_FILE: &str = "optimizer.bpk";
const SCHEDULER_FILE: &str = "scheduler.bpk";
const STATE_FILE: &str = "state.json";
const MANIFEST_FILE: &str = "manifest.json";
/// The files of one checkpoint folder, its manifest last.
pub const FILES: [&str; 5] = [
    MODEL_FILE,
    OPTIMIZER_FILE,
    SCHEDULER_FILE,
    STATE_FILE,
    MANIFEST_FILE,
];

/// The folder name of the checkpoint of `step`: `step-NNNNNN`.
pub fn folder_name(step: usize) -> String {
    format!("step-{step:06}")
}

/// One file of a checkpoint as its manifest records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileRecord {
    /// The file's name inside the checkpoint folder.
    pub name: String,
    /// Its length in bytes.
    pub size: u64,
    /// Its SHA-256, in lower-case hex.
    pub sha256: String,
}

/// `manifest.json` of a checkpoint: the step, and every other file's size and checksum.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointManifest {
    /// Updates done at this checkpoint.
    pub step: usize,
    /// The four other files.
    pub files: Vec<FileRecord>,
}

/// The size and SHA-256 of `path`.
///
/// The file is streamed through the hash, not held in memory, and only a regular file is
/// opened: a FIFO or a device in its place would block or never end.
fn file_record(path: &Path, name: &str) -> Result<FileRecord, std::io::Error> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "it is not a regular file",
        ));
    }
    let mut hasher = Sha256::new();
    let size = std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    Ok(FileRecord {
        name: name.to_string(),
        size,
        sha256: hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    })
}

/// The most a checkpoint's `manifest.json` or `state.json` may hold.
const SMALL_FILE_LIMIT: u64 = 16 << 20;

/// The text of a checkpoint's small JSON file `path`: a regular file of at most
/// [`SMALL_FILE_LIMIT`] bytes, in UTF-8.
fn read_small(path: &Path) -> Result<String, String> {
    let bytes = crate::files::read_bounded(path, SMALL_FILE_LIMIT).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| format!("it is not UTF-8 ({e})"))
}

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
    /// Sum of the training losses since the last row of `metrics.csv`, so that a run resumed
    /// between two rows writes the next one as an unbroken run would.
    #[serde(default)]
    pub loss_sum: f64,
    /// Steps in `loss_sum`.
    #[serde(default)]
    pub loss_count: usize,
    /// The first step's training loss: the reference of the divergence bound.
    #[serde(default)]
    pub first_loss: Option<f64>,
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
    let name = folder_name(state.step);
    let dir = root.join(&name);
    let partial_name = format!("{name}.partial");
    let partial = root.join(&partial_name);
    // A partial folder left by a run that stopped while writing it, and an older checkpoint of
    // this step (a resumed run's): only their own files are removed, never through a link.
    clear(out, &format!("{CHECKPOINTS}/{partial_name}"))?;
    files::create_folders(out, &format!("{CHECKPOINTS}/{partial_name}"))?;

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
    files::write_atomically(&state_path, json.as_bytes())?;

    let files = FILES[..4]
        .iter()
        .map(|file| {
            let path = partial.join(file);
            file_record(&path, file).map_err(|e| TrainError::io("reading", &path, e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let manifest = CheckpointManifest {
        step: state.step,
        files,
    };
    let manifest_path = partial.join(MANIFEST_FILE);
    let json = serde_json::to_string_pretty(&manifest).expect("a manifest is plain data");
    files::write_atomically(&manifest_path, json.as_bytes())?;

    clear(out, &format!("{CHECKPOINTS}/{name}"))?;
    std::fs::rename(&partial, &dir).map_err(|e| TrainError::io("renaming", &partial, e))?;
    files::write_atomically(&root.join(LATEST), name.as_bytes())?;
    Ok(dir)
}

/// Removes the checkpoint folder `relative` of the run folder `out`: the files of a checkpoint
/// (and no others), then the folder once empty. Nothing happens where it is missing.
///
/// # Errors
///
/// [`TrainError::UnsafePath`] when it is a link or not a folder, [`TrainError::NotOurs`] naming
/// a file in it that is not a checkpoint's.
fn clear(out: &Path, relative: &str) -> Result<(), TrainError> {
    let path = out.join(relative);
    match files::entry(&path).map_err(|e| TrainError::io("examining", &path, e))? {
        files::Entry::Missing => return Ok(()),
        files::Entry::Folder => {}
        files::Entry::Link => return Err(files::Unsafe::Link(path).into()),
        files::Entry::File | files::Entry::Other => {
            return Err(files::Unsafe::NotFile(path).into());
        }
    }
    for file in FILES {
        if let (file, files::Entry::File) = files::inside(out, &format!("{relative}/{file}"))? {
            std::fs::remove_file(&file).map_err(|e| TrainError::io("removing", &file, e))?;
        }
    }
    let left = std::fs::read_dir(&path)
        .and_then(|entries| {
            entries
                .map(|e| e.map(|e| e.path()))
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| TrainError::io("reading", &path, e))?;
    if let Some(theirs) = left.into_iter().next() {
        return Err(TrainError::NotOurs { path: theirs });
    }
    std::fs::remove_dir(&path).map_err(|e| TrainError::io("removing", &path, e))
}

/// The checkpoint folders under `out` (`step-NNNNNN`, not `.partial` ones, not empty ones),
/// newest first.
///
/// # Errors
///
/// [`TrainError::Io`] when the folder of checkpoints cannot be read.
pub fn candidates(out: &Path) -> Result<Vec<(usize, PathBuf)>, TrainError> {
    let root = out.join(CHECKPOINTS);
    let entries = match std::fs::read_dir(&root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(TrainError::io("reading", &root, e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| TrainError::io("reading", &root, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(step) = name
            .strip_prefix("step-")
            .and_then(|digits| digits.parse::<usize>().ok())
        else {
            continue;
        };
        // An empty folder is a checkpoint that was never written (a run stopped, or the disk
        // filled, before its files arrived), not a corrupt one.
        let empty = std::fs::read_dir(entry.path()).is_ok_and(|mut e| e.next().is_none());
        if entry.path().is_dir() && name == folder_name(step) && !empty {
            found.push((step, entry.path()));
        }
    }
    found.sort_by_key(|(step, _)| std::cmp::Reverse(*step));
    Ok(found)
}

/// Checks the checkpoint in `dir` against its manifest: every file there, of the recorded size
/// and SHA-256, and `state.json`'s step equal to the manifest's and to the folder's name.
/// Returns the step.
///
/// # Errors
///
/// [`TrainError::CorruptCheckpoint`] naming the first file that does not match.
pub fn verify(dir: &Path) -> Result<usize, TrainError> {
    verify_files(dir, &FILES[..4])
}

/// As [`verify`], for `files` of the checkpoint only (and `state.json`'s step): what generation
/// needs is the model's weights, not the optimizer's state.
///
/// # Errors
///
/// As [`verify`].
pub fn verify_files(dir: &Path, files: &[&str]) -> Result<usize, TrainError> {
    let corrupt = |path: &Path, reason: String| TrainError::CorruptCheckpoint {
        path: path.to_path_buf(),
        reason,
    };
    let manifest_path = dir.join(MANIFEST_FILE);
    let text = read_small(&manifest_path)
        .map_err(|e| corrupt(&manifest_path, format!("cannot read it: {e}")))?;
    let manifest: CheckpointManifest = serde_json::from_str(&text)
        .map_err(|e| corrupt(&manifest_path, format!("bad JSON: {e}")))?;
    for file in files {
        let path = dir.join(file);
        let Some(expected) = manifest.files.iter().find(|r| r.name == *file) else {
            return Err(corrupt(&manifest_path, format!("it does not list {file}")));
        };
        let found =
            file_record(&path, file).map_err(|e| corrupt(&path, format!("cannot read it: {e}")))?;
        if found.size != expected.size {
            return Err(corrupt(
                &path,
                format!(
                    "it has {} bytes, but {MANIFEST_FILE} says {}",
                    found.size, expected.size
                ),
            ));
        }
        if found.sha256 != expected.sha256 {
            return Err(corrupt(
                &path,
                format!(
                    "its SHA-256 is {}, but {MANIFEST_FILE} says {}",
                    found.sha256, expected.sha256
                ),
            ));
        }
    }
    let state_path = dir.join(STATE_FILE);
    let text = read_small(&state_path)
        .map_err(|e| corrupt(&state_path, format!("cannot read it: {e}")))?;
    let state: TrainState =
        serde_json::from_str(&text).map_err(|e| corrupt(&state_path, format!("bad JSON: {e}")))?;
    if state.step != manifest.step {
        return Err(corrupt(
            &state_path,
            format!(
                "its step is {}, but {MANIFEST_FILE} says {}",
                state.step, manifest.step
            ),
        ));
    }
    let named = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    if named.as_deref() != Some(folder_name(manifest.step).as_str()) {
        return Err(corrupt(
            dir,
            format!("its {MANIFEST_FILE} is for step {}", manifest.step),
        ));
    }
    Ok(manifest.step)
}

/// A checkpoint [`newest_intact`] passed over, and why.
#[derive(Debug)]
pub struct Skipped {
    /// The checkpoint folder.
    pub path: PathBuf,
    /// What [`verify`] found.
    pub error: TrainError,
}

/// The newest checkpoint under `out` that passes [`verify`], with the newer ones that did not.
///
/// # Errors
///
/// [`TrainError::NoCheckpoint`] when there is none at all, [`TrainError::CorruptCheckpoint`]
/// (the newest one's fault, and how many were tried) when none is intact.
pub fn newest_intact(out: &Path) -> Result<(PathBuf, Vec<Skipped>), TrainError> {
    newest_with(out, &FILES[..4])
}

/// The newest checkpoint under `out` whose weights are intact (its optimizer's state may not
/// be), with the newer ones whose weights are not: what generation and the explorer load.
///
/// # Errors
///
/// As [`newest_intact`].
pub fn newest_weights(out: &Path) -> Result<(PathBuf, Vec<Skipped>), TrainError> {
    newest_with(out, &[MODEL_FILE])
}

fn newest_with(out: &Path, files: &[&str]) -> Result<(PathBuf, Vec<Skipped>), TrainError> {
    let mut skipped = Vec::new();
    for (_, path) in candidates(out)? {
        match verify_files(&path, files) {
            Ok(_) => return Ok((path, skipped)),
            Err(error) => skipped.push(Skipped { path, error }),
        }
    }
    let tried = skipped.len();
    match skipped.into_iter().next() {
        None => Err(TrainError::NoCheckpoint {
            path: out.to_path_buf(),
        }),
        Some(Skipped { error, .. }) if tried == 1 => Err(error),
        Some(Skipped {
            error: TrainError::CorruptCheckpoint { path, reason },
            ..
        }) => Err(TrainError::CorruptCheckpoint {
            path,
            reason: format!("{reason} (and the {} older ones fail too)", tried - 1),
        }),
        Some(Skipped { error, .. }) => Err(error),
    }
}

/// The newest intact checkpoint under `out`, if any (as [`newest_intact`]).
///
/// # Errors
///
/// [`TrainError::CorruptCheckpoint`] when there are checkpoints but none is intact,
/// [`TrainError::Io`] when the folder cannot be read.
pub fn latest(out: &Path) -> Result<Option<PathBuf>, TrainError> {
    match newest_intact(out) {
        Ok((path, _)) => Ok(Some(path)),
        Err(TrainError::NoCheckpoint { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Each setting where `saved` and `current` differ, as `path: saved A, this run B`, joined by
/// `; `.
pub fn differences(saved: &serde_json::Value, current: &serde_json::Value) -> String {
    fn walk(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
        use serde_json::Value::Object;
        match (a, b) {
            (Object(a), Object(b)) => {
                let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
                for key in keys {
                    let null = serde_json::Value::Null;
                    let child = if path.is_empty() {
                        key.clone()
                    } else {
                        format!("{path}.{key}")
                    };
                    walk(
                        &child,
                        a.get(key).unwrap_or(&null),
                        b.get(key).unwrap_or(&null),
                        out,
                    );
                }
            }
            _ if a != b => out.push(format!("{path}: saved {a}, this run {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", saved, current, &mut out);
    out.join("; ")
}

/// Loads the checkpoint in `dir` into a freshly built `model` and `optim`, and a scheduler of
/// `schedule`, refusing one that was written for another task, model or seed than `run`.
///
/// # Errors
///
/// [`TrainError::CorruptCheckpoint`] when a file is missing or unreadable (call [`verify`]
/// first to check the files against the manifest),
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
    let text =
        read_small(&state_path).map_err(|e| corrupt(&state_path, format!("cannot read: {e}")))?;
    let state: TrainState =
        serde_json::from_str(&text).map_err(|e| corrupt(&state_path, format!("bad JSON: {e}")))?;
    // Checked before the scheduler moves on by the steps done, one call a step.
    if state.step > schedule.total_steps {
        return Err(TrainError::FewerStepsThanDone {
            what: "--steps",
            asked: schedule.total_steps,
            done: state.step,
            path: dir.to_path_buf(),
        });
    }
    if &state.run != run {
        return Err(TrainError::CheckpointMismatch {
            path: dir.to_path_buf(),
            differences: differences(&state.run, run),
        });
    }

    let model = load_model(dir, model)?;

    let optim_path = dir.join(OPTIMIZER_FILE);
    check_optimizer_fits(&optim_path, &model)?;
    // Read whole, as the model's record is (`load_model`).
    let record = read_record(&optim_path)
        .map_err(|reason| corrupt(&optim_path, reason))
        .and_then(|bytes| {
            OptimizerRecord::from_bytes(burn::tensor::Bytes::from_bytes_vec(bytes))
                .map_err(|e| corrupt(&optim_path, e.to_string()))
        })?;
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

/// The newest checkpoint of `out` whose weights are intact ([`newest_weights`]), saying on
/// stderr which newer ones were passed over and why: what generation and the explorer load.
///
/// # Errors
///
/// [`TrainError::NoCheckpoint`] when `out` has none, and as [`newest_intact`].
pub fn weights_to_use(out: &Path) -> Result<PathBuf, TrainError> {
    let (path, skipped) = newest_weights(out)?;
    for skip in &skipped {
        eprintln!(
            "skipping checkpoint {}: {}",
            skip.path.display(),
            skip.error
        );
    }
    if !skipped.is_empty() {
        eprintln!("using {}, the newest with intact weights", path.display());
    }
    Ok(path)
}

/// Loads the weights of the checkpoint in `dir` into a freshly built `model` of the run `run`
/// (for generating from a trained run, or as part of [`load`]).
///
/// # Errors
///
/// [`TrainError::CorruptCheckpoint`] when the file is missing or unreadable, or holds a weight
/// that is NaN or infinite, [`TrainError::CheckpointMismatch`] when the weights do not fit the
/// model.
pub fn load_model(dir: &Path, model: Model) -> Result<Model, TrainError> {
    let model_path = dir.join(MODEL_FILE);
    // Read whole into memory first: a record read from the file hands its tensors' bytes over
    // lazily, and a short or damaged file would then fail inside the backend (a panic on the
    // CubeCL backends) instead of here.
    let bytes = read_record(&model_path).map_err(|reason| TrainError::CorruptCheckpoint {
        path: model_path.clone(),
        reason,
    })?;
    let model = ModuleRecord::from_bytes(burn::tensor::Bytes::from_bytes_vec(bytes))
        .and_then(|record| model.try_load_record(record))
        .map_err(|e| match e {
            RecordError::Validation(reason) => TrainError::CheckpointMismatch {
                path: model_path.clone(),
                differences: format!("its weights do not fit this model ({reason})"),
            },
            RecordError::Io(reason) => TrainError::CorruptCheckpoint {
                path: model_path.clone(),
                reason,
            },
        })?;
    let mut count = NonFinite::default();
    model.visit(&mut count);
    if count.bad > 0 {
        return Err(TrainError::CorruptCheckpoint {
            path: model_path,
            reason: format!(
                "{} of its {} weights are NaN or infinite (the first in {}); a model that \
                 held them could only write NaN",
                count.bad,
                count.total,
                count.first.unwrap_or_default()
            ),
        });
    }
    Ok(model)
}

/// Checks that every tensor of the optimizer's state at `path` belongs to a parameter of `model`
/// and has its shape: a state saved for another model (its checksum recomputed) is refused
/// instead of being dropped or applied to the wrong weights.
///
/// # Errors
///
/// [`TrainError::CorruptCheckpoint`] when the file cannot be read, or a tensor names no
/// parameter, [`TrainError::CheckpointMismatch`] naming the first tensor that is for another
/// model, with both shapes.
fn check_optimizer_fits(path: &Path, model: &Model) -> Result<(), TrainError> {
    use burn::store::burn_pack::Reader;
    let mut shapes = ParamShapes::default();
    model.visit(&mut shapes);
    let corrupt = |reason: String| TrainError::CorruptCheckpoint {
        path: path.to_path_buf(),
        reason,
    };
    let tensors = Reader::from_file_exact(path)
        .and_then(Reader::into_tensors)
        .map_err(|e| corrupt(e.to_string()))?;
    for tensor in tensors {
        let (name, _, shape, id, _) = tensor.into_parts().map_err(|e| corrupt(e.to_string()))?;
        let Some(id) = id else {
            return Err(corrupt(format!("its tensor {name} names no parameter")));
        };
        let mismatch = |differences: String| TrainError::CheckpointMismatch {
            path: path.to_path_buf(),
            differences,
        };
        match shapes.0.get(&id) {
            None => {
                return Err(mismatch(format!(
                    "its tensor {name} is for a parameter this model does not have; the \
                     optimizer's state is another model's"
                )));
            }
            Some(expected) if expected.as_slice() != &shape[..] => {
                return Err(mismatch(format!(
                    "its tensor {name} has shape {:?}, but the parameter's is {expected:?}; the \
                     optimizer's state is another model's",
                    &shape[..]
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Each parameter's id and shape.
#[derive(Default)]
struct ParamShapes(std::collections::HashMap<u64, Vec<usize>>);

impl burn::module::ModuleVisitor for ParamShapes {
    fn visit_float<const D: usize>(
        &mut self,
        param: &burn::module::Param<burn::tensor::Tensor<D>>,
    ) {
        self.0.insert(param.id.val(), param.lazy_shape().to_vec());
    }
}

/// The bytes of the record file `path`: a regular file, read whole.
fn read_record(path: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))
}

/// Counts the weights that are NaN or infinite, and names the first parameter holding one.
#[derive(Default)]
struct NonFinite {
    bad: usize,
    total: usize,
    first: Option<String>,
}

impl burn::module::ModuleVisitor for NonFinite {
    fn visit_float<const D: usize>(
        &mut self,
        param: &burn::module::Param<burn::tensor::Tensor<D>>,
    ) {
        let weights = param.val();
        let dims = weights.dims();
        self.total += dims.iter().product::<usize>();
        let bad = weights
            .is_finite()
            .bool_not()
            .int()
            .sum()
            .into_scalar::<i64>();
        if bad > 0 {
            self.bad += bad as usize;
            self.first
                .get_or_insert_with(|| format!("the parameter of shape {dims:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_each_setting_with_both_values() {
        let saved = serde_json::json!({"model": {"d_model": 8, "n_heads": 2}, "seed": 5});
        let current = serde_json::json!({"model": {"d_model": 12, "n_heads": 2}, "seed": 6});
        assert_eq!(
            differences(&saved, &current),
            "model.d_model: saved 8, this run 12; seed: saved 5, this run 6"
        );
        assert_eq!(differences(&saved, &saved), "");
    }

    #[test]
    fn candidates_are_step_folders_newest_first() {
        let out =
            std::env::temp_dir().join(format!("attn-train-candidates-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        for name in [
            "step-000002",
            "step-000010",
            "step-000004.partial",
            "my-other-model",
        ] {
            let folder = out.join(CHECKPOINTS).join(name);
            std::fs::create_dir_all(&folder).expect("folder");
            std::fs::write(folder.join(STATE_FILE), "{}").expect("written");
        }
        std::fs::create_dir_all(out.join(CHECKPOINTS).join("step-000020")).expect("empty");
        let steps: Vec<usize> = candidates(&out)
            .expect("readable")
            .into_iter()
            .map(|(step, _)| step)
            .collect();
        assert_eq!(steps, [10, 2]);
        let err = verify(&out.join(CHECKPOINTS).join("step-000010")).expect_err("no manifest");
        assert!(err.to_string().contains("manifest.json"), "{err}");
        std::fs::remove_dir_all(&out).expect("cleanup");
    }
}
