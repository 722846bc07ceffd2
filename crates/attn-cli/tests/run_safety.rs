//! The `attn` program as a user meets it: run folders that hold other files, SIGINT in
//! the middle of a run, checkpoints with flipped bytes, inputs that cannot work, a diverging
//! run, and the same seed twice. Every run is tiny, so each test takes seconds.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use attn_testing::{TestDevice, for_each_device};
use attn_train::checkpoint;

/// A fresh, missing folder under the system's temporary folder.
fn temp(name: &str, device: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "attn-safety-{name}-{device}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The flags of a tiny `reverse` run on `device`, with `extra` added; a flag of `extra` replaces
/// the tiny run's own.
fn tiny(device: &str, extra: &[&str]) -> Vec<String> {
    let base = [
        ("--task", "reverse"),
        ("--seq-len", "5"),
        ("--vocab", "3"),
        ("--d-model", "8"),
        ("--n-heads", "2"),
        ("--n-layers", "1"),
        ("--d-ff", "12"),
        ("--batch-size", "6"),
        ("--eval-sequences", "6"),
        ("--warmup-steps", "2"),
        ("--lr", "0.01"),
        ("--seed", "5"),
        ("--checkpoint-seconds", "0"),
        ("--device", device),
    ];
    let given = |flag: &str| {
        extra
            .iter()
            .any(|e| *e == flag || e.starts_with(&format!("{flag}=")))
    };
    let mut args = vec!["train".to_string(), "--no-plots".to_string()];
    for (flag, value) in base {
        // `context` has its own words, so the tiny run's --vocab is not for it.
        let context = flag == "--vocab" && extra.contains(&"context");
        if !given(flag) && !context {
            args.extend([flag.to_string(), value.to_string()]);
        }
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn attn(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_attn"))
        .args(args)
        .output()
        .expect("attn runs")
}

/// `tiny` with `extra`, run to the end; panics with its stderr unless it succeeds.
fn train(device: &str, extra: &[&str]) -> Output {
    let mut args = tiny(device, extra);
    args.push("--quiet".into());
    let output = attn(&args);
    assert!(
        output.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Asserts that the run in `actual` wrote the metrics of the run in `expected`: byte for byte
/// where `device` repeats bit for bit, and otherwise the same rows and steps with every figure
/// within 1e-5 relative (see [`TestDevice::repeats_bit_for_bit`]).
fn assert_same_metrics(device: &TestDevice, actual: &Path, expected: &Path, context: &str) {
    let text = |run: &Path| String::from_utf8(read(&run.join("metrics.csv"))).expect("utf-8");
    let (actual, expected) = (text(actual), text(expected));
    if device.repeats_bit_for_bit() {
        assert_eq!(actual, expected, "{context}");
        return;
    }
    let rows = |text: &str| -> Vec<csv::StringRecord> {
        csv::Reader::from_reader(text.as_bytes())
            .records()
            .map(|r| r.expect("a metrics row"))
            .collect()
    };
    let header = |text: &str| text.lines().next().map(str::to_owned);
    assert_eq!(header(&actual), header(&expected), "{context}: header");
    let (a, e) = (rows(&actual), rows(&expected));
    assert_eq!(a.len(), e.len(), "{context}: rows\n{actual}\n{expected}");
    for (row_a, row_e) in a.iter().zip(&e) {
        assert_eq!(row_a.get(0), row_e.get(0), "{context}: steps");
        assert_eq!(
            row_a.len(),
            row_e.len(),
            "{context}: fields at step {:?}",
            row_e.get(0)
        );
        for (x, y) in row_a.iter().zip(row_e.iter()).skip(1) {
            let (x, y): (f64, f64) = (x.parse().expect("a number"), y.parse().expect("a number"));
            assert!(
                (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                "{context}: {x} against {y} at step {:?}",
                row_e.get(0)
            );
        }
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every file under `dir`, as sorted relative paths.
fn listing(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("readable") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let relative = path.strip_prefix(root).expect("inside");
                out.push(relative.display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("created");
    for entry in std::fs::read_dir(from).expect("readable") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("named"));
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).expect("copied");
        }
    }
}

#[test]
fn a_folder_holding_a_users_files_keeps_them() {
    for_each_device(|d| {
        let out = temp("users-files", d.name);
        let theirs = [
            ("notes.md", "my notes"),
            ("attention/notes.md", "about heads"),
            ("checkpoints/my-other-model/model.bpk", "another model"),
        ];
        for (file, text) in theirs {
            let path = out.join(file);
            std::fs::create_dir_all(path.parent().expect("inside")).expect("folder");
            std::fs::write(path, text).expect("written");
        }
        let before = listing(&out);
        let out_arg = out.display().to_string();

        let args = tiny(d.name, &["--steps", "2", "--quiet", "--out", &out_arg]);
        let refused = attn(&args);
        assert!(!refused.status.success(), "a folder with files is refused");
        let message = stderr(&refused);
        assert!(
            message.contains("attn resume") && message.contains("--overwrite"),
            "{message}"
        );
        assert_eq!(listing(&out), before, "nothing written or removed");

        for _ in 0..2 {
            train(d.name, &["--steps", "2", "--out", &out_arg, "--overwrite"]);
            for (file, text) in theirs {
                assert_eq!(std::fs::read_to_string(out.join(file)).expect(file), text);
            }
            assert!(out.join("metrics.csv").is_file());
            let checkpoint = checkpoint::latest(&out).expect("readable");
            assert_eq!(
                checkpoint,
                Some(out.join("checkpoints").join("step-000002"))
            );
        }
        std::fs::remove_dir_all(&out).expect("cleanup");
    });
}

#[test]
fn sigint_mid_run_then_resume_ends_like_an_unbroken_run() {
    for_each_device(|d| {
        let flags = [
            "--steps",
            "400",
            "--eval-every",
            "20",
            "--checkpoint-every",
            "0",
        ];
        let whole = temp("sigint-whole", d.name);
        train(
            d.name,
            &[&flags[..], &["--out", &whole.display().to_string()]].concat(),
        );

        let split = temp("sigint-split", d.name);
        let split_arg = split.display().to_string();
        let args = tiny(d.name, &[&flags[..], &["--out", &split_arg]].concat());
        let mut child = Command::new(env!("CARGO_BIN_EXE_attn"))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("attn starts");
        let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
        // Progress lines come at each evaluation: the first says training is under way.
        let first = lines
            .by_ref()
            .map(|l| l.expect("utf-8"))
            .find(|l| l.starts_with("step "))
            .expect("a progress line");
        let pid = child.id().to_string();
        let sent = Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let rest: Vec<String> = lines.map(|l| l.expect("utf-8")).collect();
        let status = child.wait().expect("exits");
        assert_eq!(status.code(), Some(130), "after {first}: {rest:?}");
        let resume_line = rest
            .iter()
            .find_map(|l| l.strip_prefix("resume with: "))
            .unwrap_or_else(|| panic!("no resume command in {rest:?}"));
        assert!(
            resume_line.ends_with(&format!("resume {} --no-plots", split.display())),
            "{resume_line}"
        );
        let (stopped, _) = checkpoint::newest_intact(&split).expect("a checkpoint");
        let step = checkpoint::verify(&stopped).expect("intact");
        assert!((20..400).contains(&step), "stopped at step {step}");

        let resumed = attn(&[
            "resume".into(),
            split.display().to_string(),
            "--quiet".into(),
            "--no-plots".into(),
        ]);
        assert!(resumed.status.success(), "{}", stderr(&resumed));
        assert_same_metrics(d, &split, &whole, &format!("interrupted at step {step}"));
        for dir in [whole, split] {
            std::fs::remove_dir_all(dir).expect("cleanup");
        }
    });
}

#[test]
fn flipped_bytes_in_each_checkpoint_file_are_detected_and_an_older_one_used() {
    for_each_device(|d| {
        let base = temp("flip-base", d.name);
        let base_arg = base.display().to_string();
        let flags = [
            "--steps",
            "4",
            "--eval-every",
            "2",
            "--checkpoint-every",
            "2",
        ];
        train(d.name, &[&flags[..], &["--out", &base_arg]].concat());
        let newest = Path::new("checkpoints").join("step-000004");

        let spoil_byte = |path: &Path| {
            let mut bytes = read(path);
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x55;
            std::fs::write(path, bytes).expect("spoilt");
        };
        let set_step = |path: &Path| {
            let text = String::from_utf8(read(path)).expect("utf-8");
            let edited = text.replacen("\"step\": 4", "\"step\": 1000000", 1);
            assert_ne!(edited, text);
            std::fs::write(path, edited).expect("edited");
        };
        type Spoil<'a> = &'a dyn Fn(&Path);
        let cases: [(&str, Spoil); 6] = [
            ("model.bpk", &spoil_byte),
            ("optimizer.bpk", &spoil_byte),
            ("scheduler.bpk", &spoil_byte),
            ("state.json", &spoil_byte),
            ("state.json", &set_step),
            ("manifest.json", &set_step),
        ];
        for (file, spoil) in cases {
            let copy = temp(&format!("flip-{file}"), d.name);
            copy_dir(&base, &copy);
            spoil(&copy.join(&newest).join(file));
            let resumed = attn(&[
                "resume".into(),
                copy.display().to_string(),
                "--quiet".into(),
                "--no-plots".into(),
            ]);
            let message = stderr(&resumed);
            assert!(resumed.status.success(), "{file}: {message}");
            assert!(message.contains(file), "{file} not named: {message}");
            assert!(
                message.contains("resuming from") && message.contains("step-000002"),
                "{file}: {message}"
            );
            assert_same_metrics(
                d,
                &copy,
                &base,
                &format!("{file}: resumed from step 2, the run ends as it did"),
            );
            std::fs::remove_dir_all(&copy).expect("cleanup");
        }

        // With no intact checkpoint left, resuming fails and names the fault.
        for step in ["step-000002", "step-000004"] {
            spoil_byte(&base.join("checkpoints").join(step).join("optimizer.bpk"));
        }
        let resumed = attn(&["resume".into(), base_arg.clone(), "--quiet".into()]);
        let message = stderr(&resumed);
        assert!(!resumed.status.success(), "{message}");
        assert!(
            message.contains("optimizer.bpk") && message.contains("SHA-256"),
            "{message}"
        );
        std::fs::remove_dir_all(&base).expect("cleanup");
    });
}

#[test]
fn each_refused_input_exits_non_zero_naming_the_value_before_anything_is_written() {
    let d = &attn_testing::devices()[0];
    let files = temp("refused-files", d.name);
    std::fs::create_dir_all(&files).expect("created");
    let config = |name: &str, json: &str| {
        let path = files.join(name);
        std::fs::write(&path, json).expect("written");
        path.display().to_string()
    };
    let beta = config("beta.json", r#"{"optim": {"beta_1": 1.5}}"#);
    let epsilon = config("epsilon.json", r#"{"optim": {"epsilon": -1.0}}"#);
    let learned = config(
        "learned.json",
        r#"{"model": {"pos": {"Learned": {"max_len": 1000000000000}}}}"#,
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--vocab", "3000000000"], "vocab is 3000000000"),
        (vec!["--n-layers", "0"], "n_layers is 0"),
        (vec!["--grad-clip", "-1"], "grad_clip"),
        (vec!["--grad-clip", "nan"], "got NaN"),
        (vec!["--config", &beta], "beta_1 must be in [0, 1), got 1.5"),
        (
            vec!["--config", &epsilon],
            "epsilon must be finite and positive, got -1",
        ),
        (vec!["--min-distance", "3"], "--min-distance (given 3)"),
        (
            vec!["--task", "context", "--vocab", "20"],
            "--vocab (given 20)",
        ),
        (vec!["--stop-at", "0"], "--stop-at is 0"),
        (vec!["--checkpoint-seconds", "-5"], "got -5"),
        (
            vec!["--warmup-steps", "5"],
            "warmup_steps is 5 but the run has 2 steps",
        ),
        // Sizes the machine cannot hold: refused with the estimate before any allocation.
        (vec!["--d-model", "100000000"], "--d-model 100000000"),
        (vec!["--n-layers", "100000000"], "--n-layers 100000000"),
        (vec!["--d-ff", "10000000000"], "--d-ff 10000000000"),
        (vec!["--batch-size", "100000000"], "--batch-size 100000000"),
        (
            vec!["--eval-sequences", "1000000000"],
            "--eval-sequences 1000000000",
        ),
        (
            vec!["--task", "copy", "--vocab", "100000000"],
            "100000000 classes",
        ),
    ];
    for (extra, expected) in cases {
        let out = temp("refused", d.name);
        let out_arg = out.display().to_string();
        let args = tiny(
            d.name,
            &[&["--steps", "2", "--out", &out_arg], &extra[..]].concat(),
        );
        let output = attn(&args);
        let message = stderr(&output);
        assert!(!output.status.success(), "{extra:?} accepted");
        assert_eq!(
            message.matches(expected).count(),
            1,
            "{extra:?}: {expected:?} once in {message}"
        );
        assert!(!message.contains("panicked"), "{extra:?}: {message}");
        // The sizes of eight digits and more, but the vocabulary past i32 that the task refuses.
        if expected.contains("00000") && !expected.starts_with("vocab is") {
            assert!(message.contains("would need about"), "{extra:?}: {message}");
        }
        assert!(!out.exists(), "{extra:?}: {} was written", out.display());
    }

    // A learned table of 10^12 positions from a file (the tiny run's --seq-len would resize
    // it, so the run is the default one).
    let out = temp("refused-learned", d.name);
    let output = attn(&[
        "train".into(),
        "--config".into(),
        learned,
        "--out".into(),
        out.display().to_string(),
    ]);
    let message = stderr(&output);
    assert!(
        !output.status.success(),
        "a table of 10^12 positions accepted"
    );
    assert!(
        message.contains("a learned table of 1000000000000 positions")
            && message.contains("would need about"),
        "{message}"
    );
    assert!(!out.exists());

    // Fewer steps than a checkpoint has done: refused, config.json and the manifest untouched.
    let run = temp("refused-resume", d.name);
    let run_arg = run.display().to_string();
    train(d.name, &["--steps", "4", "--out", &run_arg]);
    let before: Vec<(String, Vec<u8>)> = listing(&run)
        .into_iter()
        .map(|f| {
            let bytes = read(&run.join(&f));
            (f, bytes)
        })
        .collect();
    for (flag, expected) in [("--steps", "--steps is 2"), ("--stop-at", "--stop-at is 3")] {
        let value = if flag == "--steps" { "2" } else { "3" };
        let output = attn(&["resume".into(), run_arg.clone(), flag.into(), value.into()]);
        let message = stderr(&output);
        assert!(!output.status.success(), "{flag} {value} accepted");
        assert_eq!(message.matches(expected).count(), 1, "{message}");
        assert!(message.contains("done 4 steps"), "{message}");
    }
    let after: Vec<(String, Vec<u8>)> = listing(&run)
        .into_iter()
        .map(|f| {
            let bytes = read(&run.join(&f));
            (f, bytes)
        })
        .collect();
    assert!(before == after, "the run folder changed");
    for dir in [files, run] {
        std::fs::remove_dir_all(dir).expect("cleanup");
    }
}

#[test]
fn a_resumed_configuration_that_differs_names_the_field_and_both_values() {
    let d = &attn_testing::devices()[0];
    let run = temp("mismatch", d.name);
    let run_arg = run.display().to_string();
    train(d.name, &["--steps", "2", "--out", &run_arg]);
    let config = run.join("config.json");
    let text = String::from_utf8(read(&config)).expect("utf-8");
    let edited = text.replacen("\"d_model\": 8", "\"d_model\": 12", 1);
    assert_ne!(edited, text);
    std::fs::write(&config, edited).expect("edited");
    let output = attn(&["resume".into(), run_arg, "--steps".into(), "4".into()]);
    let message = stderr(&output);
    assert!(!output.status.success(), "{message}");
    assert_eq!(
        message
            .matches("model.d_model: saved 8, this run 12")
            .count(),
        1,
        "{message}"
    );
    assert!(!message.contains("\"task\""), "no JSON dump: {message}");
    std::fs::remove_dir_all(&run).expect("cleanup");
}

#[test]
fn a_huge_learning_rate_stops_as_diverged_without_a_checkpoint_of_diverged_weights() {
    let d = &attn_testing::devices()[0];
    let run = temp("diverged", d.name);
    let run_arg = run.display().to_string();
    let args = tiny(
        d.name,
        &[
            "--lr",
            "1e6",
            "--warmup-steps",
            "0",
            "--steps",
            "50",
            "--eval-every",
            "5",
            "--checkpoint-every",
            "1",
            "--quiet",
            "--out",
            &run_arg,
        ],
    );
    let output = attn(&args);
    let message = stderr(&output);
    assert!(!output.status.success(), "{message}");
    assert_eq!(message.matches("the run diverged").count(), 1, "{message}");
    for (_, path) in checkpoint::candidates(&run).expect("readable") {
        checkpoint::verify(&path).expect("every checkpoint left is intact");
    }
    std::fs::remove_dir_all(&run).expect("cleanup");
}

#[test]
fn the_same_seed_twice_writes_the_same_metrics() {
    for_each_device(|d| {
        let runs = [temp("same-seed-a", d.name), temp("same-seed-b", d.name)];
        for run in &runs {
            train(
                d.name,
                &[
                    "--steps",
                    "12",
                    "--eval-every",
                    "3",
                    "--out",
                    &run.display().to_string(),
                ],
            );
            assert!(run.join("timings.csv").is_file());
        }
        let [a, b] = &runs;
        assert_same_metrics(d, a, b, "the same seed twice");
        assert_eq!(read(&a.join("config.json")), read(&b.join("config.json")));
        for run in runs {
            std::fs::remove_dir_all(run).expect("cleanup");
        }
    });
}

/// The bytes of every regular file under `dir` (links not followed), by relative path.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).expect("readable") {
            let path = entry.expect("entry").path();
            let kind = path.symlink_metadata().expect("examined").file_type();
            if kind.is_dir() {
                walk(root, &path, out);
            } else if kind.is_file() {
                let relative = path.strip_prefix(root).expect("inside");
                out.push((relative.display().to_string(), read(&path)));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn links_and_users_files_where_the_run_writes_stop_it_and_stay_as_they_are() {
    let d = &attn_testing::devices()[0];
    let base = temp("links", d.name);
    let (run, other) = (base.join("run"), base.join("other"));
    let victim = base.join("victim.txt");
    std::fs::create_dir_all(&base).expect("created");
    std::fs::write(&victim, "precious").expect("written");
    let run_arg = run.display().to_string();
    for dir in [&run, &other] {
        train(
            d.name,
            &["--steps", "2", "--out", &dir.display().to_string()],
        );
    }
    let others = contents(&other);
    let overwrite = || {
        let output = attn(&tiny(
            d.name,
            &["--steps", "2", "--quiet", "--out", &run_arg, "--overwrite"],
        ));
        assert!(!output.status.success(), "the run went ahead");
        let message = stderr(&output);
        assert!(!message.contains("panicked"), "{message}");
        message
    };

    // A heatmap's place linked to a file outside the folder.
    let heatmap = run.join("attention/layer0-head0.png");
    std::fs::create_dir_all(heatmap.parent().expect("inside")).expect("created");
    std::os::unix::fs::symlink(&victim, &heatmap).expect("linked");
    let message = overwrite();
    assert!(
        message.contains("layer0-head0.png is a symbolic link"),
        "{message}"
    );
    std::fs::remove_file(&heatmap).expect("unlinked");

    // A user's picture where a heatmap goes, which no run wrote.
    std::fs::write(&heatmap, "my picture").expect("written");
    let message = overwrite();
    assert!(
        message.contains("is not a file of an earlier run"),
        "{message}"
    );
    assert_eq!(read(&heatmap), b"my picture");
    std::fs::remove_file(&heatmap).expect("removed");

    // A user's file inside a checkpoint folder of the run.
    let readme = run.join("checkpoints/step-000002/README.txt");
    std::fs::write(&readme, "my notes").expect("written");
    let message = overwrite();
    assert!(message.contains("README.txt"), "{message}");
    assert_eq!(read(&readme), b"my notes");
    assert!(run.join("checkpoints/step-000002/model.bpk").is_file());
    std::fs::remove_file(&readme).expect("removed");

    // The checkpoints folder a link to another run's.
    std::fs::rename(run.join("checkpoints"), base.join("ours")).expect("moved");
    std::os::unix::fs::symlink(other.join("checkpoints"), run.join("checkpoints")).expect("ln");
    let message = overwrite();
    assert!(message.contains("symbolic link"), "{message}");

    assert_eq!(read(&victim), b"precious");
    assert!(contents(&other) == others, "the other run's files changed");
    std::fs::remove_dir_all(&base).expect("cleanup");
}

#[test]
fn a_second_run_into_a_folder_in_use_is_refused_and_a_listed_file_behind_a_link_is_kept() {
    let d = &attn_testing::devices()[0];
    let base = temp("in-use", d.name);
    let run = base.join("run");
    let run_arg = run.display().to_string();
    train(d.name, &["--steps", "2", "--out", &run_arg]);

    // Another process holding the folder's lock, as a run writing there does.
    let held = std::fs::File::open(&run).expect("opened");
    held.try_lock().expect("locked");
    for args in [
        ["resume", &run_arg, "--steps", "3", "--quiet"]
            .map(String::from)
            .to_vec(),
        tiny(
            d.name,
            &["--steps", "2", "--quiet", "--out", &run_arg, "--overwrite"],
        ),
    ] {
        let output = attn(&args);
        let message = stderr(&output);
        assert!(!output.status.success(), "{args:?} went ahead");
        assert!(message.contains("is in use by another run"), "{message}");
    }
    drop(held);
    let resumed = attn(&["resume", &run_arg, "--steps", "3", "--quiet"].map(String::from));
    assert!(resumed.status.success(), "{}", stderr(&resumed));

    // A manifest entry reached through a linked folder: the file behind the link stays.
    let outside = base.join("outside");
    std::fs::create_dir_all(&outside).expect("created");
    std::fs::write(outside.join("x"), "mine").expect("written");
    std::os::unix::fs::symlink(&outside, run.join("sub")).expect("linked");
    let manifest = run.join("manifest.json");
    let mut listed: serde_json::Value =
        serde_json::from_slice(&read(&manifest)).expect("the manifest parses");
    listed["files"]
        .as_array_mut()
        .expect("a list")
        .push("sub/x".into());
    std::fs::write(&manifest, listed.to_string()).expect("written");
    train(d.name, &["--steps", "2", "--out", &run_arg, "--overwrite"]);
    assert_eq!(read(&outside.join("x")), b"mine");
    std::fs::remove_dir_all(&base).expect("cleanup");
}

#[test]
fn fifos_and_names_that_are_not_utf8_are_refused_before_anything_is_written() {
    use std::os::unix::ffi::OsStrExt;
    let d = &attn_testing::devices()[0];
    let base = temp("fifo", d.name);
    std::fs::create_dir_all(&base).expect("created");
    let fifo = base.join("config.json");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let out = base.join("out");
    let output = attn(&tiny(
        d.name,
        &[
            "--steps",
            "2",
            "--config",
            &fifo.display().to_string(),
            "--out",
            &out.display().to_string(),
        ],
    ));
    let message = stderr(&output);
    assert!(!output.status.success());
    assert!(message.contains("is not a regular file"), "{message}");
    assert!(!out.exists());

    let bad = base.join(std::ffi::OsStr::from_bytes(b"run-\xff"));
    let output = Command::new(env!("CARGO_BIN_EXE_attn"))
        .args(tiny(d.name, &["--steps", "2"]))
        .arg("--out")
        .arg(&bad)
        .output()
        .expect("attn runs");
    let message = stderr(&output);
    assert!(!output.status.success());
    assert!(message.contains("is not valid UTF-8"), "{message}");
    assert!(!bad.exists(), "nothing was written");
    std::fs::remove_dir_all(&base).expect("cleanup");
}
