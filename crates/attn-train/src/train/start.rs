//! Where a run starts: the model, optimizer and scheduler built afresh, or loaded from the
//! newest intact checkpoint of the run folder, and the folder made ready.

use std::path::PathBuf;

use burn::optim::ModuleOptimizer;
use burn::tensor::Device;

use super::{RunOptions, optimizer};
use crate::checkpoint::{self, TrainState};
use crate::config::TrainConfig;
use crate::error::TrainError;
use crate::metrics::MetricsLog;
use crate::model::Model;
use crate::random::{self, Rng, Stream};
use crate::run_dir::RunDir;
use crate::schedule::Scheduler;

/// Where a run starts: afresh, or from the newest checkpoint of its folder.
pub(super) struct Start {
    /// The run's configuration, with the `text` task's text loaded.
    pub config: TrainConfig,
    pub model: Model,
    pub optim: ModuleOptimizer,
    pub scheduler: Scheduler,
    pub state: TrainState,
    pub log: MetricsLog,
    pub resumed_from: Option<usize>,
    pub last_checkpoint: Option<PathBuf>,
    pub run_dir: Option<RunDir>,
}

/// Prepares the run folder (cleared for a fresh run), loads the `text` task's text, builds the
/// model, optimizer and scheduler, then loads the newest checkpoint into them when resuming,
/// and writes `config.json`.
pub(super) fn start(
    config: &TrainConfig,
    train_device: &Device,
    options: &RunOptions,
) -> Result<Start, TrainError> {
    // A fresh run's folder is made here; whether it was there before decides whether a run that
    // fails before its first step takes the folder away again.
    let created = options
        .out
        .as_ref()
        .is_some_and(|out| !options.resume && std::fs::symlink_metadata(out).is_err());
    let run_dir = match &options.out {
        None => None,
        Some(out) if options.resume => Some(RunDir::existing(out)?),
        Some(out) => Some(RunDir::fresh(out, options.overwrite)?),
    };
    let mut config = config.clone();
    let prepared = (|| {
        config.task.load_text(run_dir.as_ref(), options.resume)?;
        // The text's vocabulary is known only now.
        crate::budget::check(&config, crate::budget::available())?;
        let schedule = config.schedule();
        let scheduler = schedule.scheduler()?;
        train_device.seed(random::init_seed(config.seed));
        let model = Model::init(&config, train_device)?;
        Ok::<_, TrainError>((schedule, scheduler, model))
    })();
    let (schedule, scheduler, model) = match prepared {
        Ok(prepared) => prepared,
        Err(error) => {
            // A fresh run that failed before its first step leaves nothing behind.
            if let Some(run_dir) = run_dir
                && !options.resume
            {
                run_dir.discard(created);
            }
            return Err(error);
        }
    };
    let mut start = Start {
        model,
        optim: optimizer(&config.optim),
        scheduler,
        state: TrainState {
            step: 0,
            train_rng: Rng::stream(config.seed, Stream::Train),
            schedule,
            wall_seconds: 0.0,
            train_seconds: 0.0,
            tokens_seen: 0,
            loss_sum: 0.0,
            loss_count: 0,
            first_loss: None,
            run: config.identity(),
        },
        log: MetricsLog::default(),
        resumed_from: None,
        last_checkpoint: None,
        run_dir: None,
        config,
    };
    let Some(run_dir) = run_dir else {
        return Ok(start);
    };
    let config = &start.config;
    let out = run_dir.root();
    if options.resume {
        let (path, skipped) = checkpoint::newest_intact(out)?;
        for skip in &skipped {
            eprintln!(
                "skipping checkpoint {}: {}",
                skip.path.display(),
                skip.error
            );
        }
        if !skipped.is_empty() {
            eprintln!(
                "resuming from {}, the newest intact checkpoint",
                path.display()
            );
        }
        let loaded = checkpoint::load(
            &path,
            start.model,
            start.optim,
            &config.schedule(),
            &config.identity(),
        )?;
        start.model = loaded.model;
        start.optim = loaded.optim;
        start.scheduler = loaded.scheduler;
        // From here on the scheduler follows this run's schedule, whatever the checkpoint's was.
        start.state = TrainState {
            schedule: config.schedule(),
            ..loaded.state
        };
        let done = start.state.step;
        for (what, asked) in [
            ("--steps", Some(config.steps)),
            ("--stop-at", options.stop_at),
        ] {
            if let Some(asked) = asked
                && asked < done
            {
                return Err(TrainError::FewerStepsThanDone {
                    what,
                    asked,
                    done,
                    path: path.clone(),
                });
            }
        }
        start.resumed_from = Some(done);
        if run_dir.metrics().exists() {
            start.log = MetricsLog::read_csv(&run_dir.metrics())?;
            start.log.truncate_after(start.state.step);
        }
        start.last_checkpoint = Some(path);
    }
    run_dir.write_config(&start.config)?;
    start.run_dir = Some(run_dir);
    Ok(start)
}

#[cfg(test)]
mod tests {
    use attn_testing::for_each_device;

    use super::super::tests::{Poison, TRAINING, quiet, temp_out, tiny};

    use burn::module::Module;
    use sha2::{Digest, Sha256};

    use crate::model::Model;

    /// Recomputes the size and SHA-256 of every file a checkpoint's manifest lists, as a
    /// deliberate forger would.
    fn rehash(dir: &std::path::Path) {
        let path = dir.join("manifest.json");
        let mut manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("manifest")).expect("JSON");
        for file in manifest["files"].as_array_mut().expect("files") {
            let name = file["name"].as_str().expect("a name").to_string();
            let bytes = std::fs::read(dir.join(&name)).expect("the file");
            let digest: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            file["size"] = bytes.len().into();
            file["sha256"] = digest.into();
        }
        std::fs::write(&path, manifest.to_string()).expect("writes the manifest");
    }
    use super::super::{RunOptions, run_on};
    use crate::checkpoint;
    use crate::error::TrainError;
    use crate::tasks::TaskKind;

    #[test]
    fn resuming_with_more_steps_stretches_the_schedule() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            let mut config = tiny(d, TaskKind::Reverse, 8);
            config.eval_every = 4;
            config.checkpoint_every = 4;
            let out = temp_out("stretch", d.name);
            let first = RunOptions {
                stop_at: Some(4),
                ..quiet(Some(out.clone()))
            };
            run_on(&config, d.device.clone(), &first).expect("first half");

            config.steps = 12;
            let resume = RunOptions {
                resume: true,
                ..quiet(Some(out.clone()))
            };
            let resumed = run_on(&config, d.device.clone(), &resume).expect("stretched");
            let mut scheduler = config.schedule().scheduler().expect("valid");
            let lrs: Vec<f64> = (0..12).map(|_| scheduler.step()).collect();
            let logged: Vec<(usize, f64)> = resumed
                .history
                .rows
                .iter()
                .map(|r| (r.step, r.lr))
                .collect();
            assert_eq!(logged.len(), 3, "{logged:?}");
            for &(step, lr) in &logged[1..] {
                assert_eq!(lr, lrs[step - 1], "step {step}: {logged:?}");
            }
            std::fs::remove_dir_all(out).expect("cleanup");
        });
    }

    #[test]
    fn corrupt_or_mismatched_checkpoints_are_clear_errors() {
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            let config = tiny(d, TaskKind::Copy, 2);
            let out = temp_out("corrupt", d.name);
            run_on(&config, d.device.clone(), &quiet(Some(out.clone()))).expect("trains");
            let resume = RunOptions {
                resume: true,
                ..quiet(Some(out.clone()))
            };

            let mut other = config.clone();
            other.model.d_model = 12;
            other.model.n_heads = 3;
            let err = run_on(&other, d.device.clone(), &resume).expect_err("different model");
            assert!(
                matches!(err, TrainError::CheckpointMismatch { .. }),
                "{err}"
            );

            let dir = checkpoint::latest(&out)
                .expect("readable")
                .expect("a checkpoint");
            std::fs::write(dir.join("model.bpk"), b"not a burnpack file").expect("overwrite");
            let err = run_on(&config, d.device.clone(), &resume).expect_err("corrupt model file");
            assert!(matches!(err, TrainError::CorruptCheckpoint { .. }), "{err}");
            assert!(err.to_string().contains("model.bpk"), "{err}");

            // A checkpoint whose weights are NaN, with its hashes recomputed: refused at load,
            // never trained on (a NaN that an update turned back into numbers would hide it).
            std::fs::remove_dir_all(&out).expect("cleanup");
            run_on(&config, d.device.clone(), &quiet(Some(out.clone()))).expect("trains");
            let dir = checkpoint::latest(&out)
                .expect("readable")
                .expect("a checkpoint");
            let model =
                checkpoint::load_model(&dir, Model::init(&config, &d.device).expect("valid"))
                    .expect("loads");
            let poisoned = model.map(&mut Poison);
            let record_path = dir.join("model.bpk");
            poisoned.save_file(&record_path).expect("saves");
            rehash(&dir);
            checkpoint::verify(&dir).expect("the hashes match the poisoned weights");
            let err = run_on(&config, d.device.clone(), &resume).expect_err("NaN weights");
            assert!(matches!(err, TrainError::CorruptCheckpoint { .. }), "{err}");
            assert!(err.to_string().contains("are NaN or infinite"), "{err}");

            // An optimizer's state from another model, its hashes recomputed: refused by the
            // shapes of its tensors, not dropped or applied to the wrong weights.
            std::fs::remove_dir_all(&out).expect("cleanup");
            run_on(&config, d.device.clone(), &quiet(Some(out.clone()))).expect("trains");
            let other_out = temp_out("corrupt-other", d.name);
            run_on(&other, d.device.clone(), &quiet(Some(other_out.clone())))
                .expect("the other model trains");
            let dir = checkpoint::latest(&out)
                .expect("readable")
                .expect("a checkpoint");
            let theirs = checkpoint::latest(&other_out)
                .expect("readable")
                .expect("a checkpoint");
            let ours = std::fs::read(dir.join("optimizer.bpk")).expect("ours");
            std::fs::copy(theirs.join("optimizer.bpk"), dir.join("optimizer.bpk")).expect("copy");
            rehash(&dir);
            let err = run_on(&config, d.device.clone(), &resume).expect_err("foreign state");
            assert!(
                matches!(err, TrainError::CheckpointMismatch { .. }),
                "{err}"
            );
            assert!(err.to_string().contains("another model's"), "{err}");
            std::fs::write(dir.join("optimizer.bpk"), ours).expect("restored");
            rehash(&dir);

            // A step past the run's, forged with its folder, manifest and hashes: refused
            // before the scheduler would replay that many steps.
            let forged_step = 1usize << 60;
            let forged = dir.with_file_name(checkpoint::folder_name(forged_step));
            std::fs::rename(&dir, &forged).expect("renamed");
            for file in ["state.json", "manifest.json"] {
                let path = forged.join(file);
                let mut json: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("JSON");
                json["step"] = forged_step.into();
                std::fs::write(&path, json.to_string()).expect("written");
            }
            rehash(&forged);
            checkpoint::verify(&forged).expect("the forgery passes the checksums");
            let err = run_on(&config, d.device.clone(), &resume).expect_err("absurd step");
            assert!(
                matches!(err, TrainError::FewerStepsThanDone { done, .. } if done == forged_step),
                "{err}"
            );
            std::fs::remove_dir_all(&other_out).expect("cleanup");

            let empty = temp_out("empty", d.name);
            let resume_empty = RunOptions {
                resume: true,
                ..quiet(Some(empty.clone()))
            };
            let err =
                run_on(&config, d.device.clone(), &resume_empty).expect_err("nothing to resume");
            assert!(matches!(err, TrainError::NoCheckpoint { .. }), "{err}");
            assert!(!empty.exists(), "a failed resume creates no folder");
            std::fs::remove_dir_all(out).expect("cleanup");
        });
    }
}
