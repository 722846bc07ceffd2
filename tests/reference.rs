//! The reference checker against the shipped PyTorch files, a file it has never seen (other
//! sizes, values computed here from the formula), and a file with one value spoiled.
//!
//! `cargo test -p attn --test reference`

use std::path::{Path, PathBuf};

use attn::reference::{CaseReport, check_dir};
use attn::train::backend;
use burn::tensor::Device;

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/attn-testing/data")
}

fn devices() -> Vec<(String, Device)> {
    backend::COMPILED
        .iter()
        .map(|name| {
            let device = backend::device(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name.to_string(), device)
        })
        .collect()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("attn-reference-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn failures(reports: &[CaseReport]) -> Vec<&CaseReport> {
    reports.iter().filter(|r| !r.pass).collect()
}

#[test]
fn every_shipped_case_passes_on_every_backend_and_strategy() {
    let devices = devices();
    let reports = check_dir(&data_dir(), &devices).expect("files read");
    assert!(failures(&reports).is_empty(), "{:#?}", failures(&reports));
    for (file, per_device) in [
        // 5 strategies for each attention case; positional: the table, two RoPE pairings, 7 slopes.
        ("sdpa.json", None),
        ("positional.json", Some(10)),
        ("mha.json", Some(2 * 5)),
        ("encoder_layer.json", Some(4 * 5)),
        ("decoder_layer.json", Some(2 * 5)),
    ] {
        let n = reports.iter().filter(|r| r.file == file).count();
        assert!(n > 0, "no case of {file} ran");
        if let Some(expected) = per_device {
            assert_eq!(n, expected * devices.len(), "{file}");
        }
    }
}

/// PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same), in f64.
fn sinusoidal_table(len: usize, d_model: usize) -> Vec<f32> {
    let mut pe = Vec::with_capacity(len * d_model);
    for pos in 0..len {
        for k in 0..d_model {
            let i = (k / 2) as f64;
            let angle = pos as f64 / 10000f64.powf(2.0 * i / d_model as f64);
            pe.push(if k % 2 == 0 { angle.sin() } else { angle.cos() } as f32);
        }
    }
    pe
}

#[test]
fn files_of_other_sizes_are_checked_and_a_spoiled_value_fails() {
    let (len, d_model) = (23, 10);
    let mut pe = sinusoidal_table(len, d_model);
    let write = |dir: &Path, pe: &[f32]| {
        let file = serde_json::json!({
            "sinusoidal": {"d_model": d_model, "len": len, "pe": {"shape": [len, d_model], "data": pe}},
            "alibi": {"slopes": {"3": [0.0625, 0.00390625, 0.25]}},
        });
        std::fs::write(dir.join("positional.json"), file.to_string()).expect("write");
    };
    let good = temp_dir("good");
    write(&good, &pe);
    let reports = check_dir(&good, &devices()).expect("read");
    assert_eq!(reports.len(), 2 * devices().len());
    assert!(failures(&reports).is_empty(), "{:#?}", failures(&reports));

    pe[7 * d_model + 3] += 1e-3;
    let bad = temp_dir("bad");
    write(&bad, &pe);
    let reports = check_dir(&bad, &devices()).expect("read");
    let failed = failures(&reports);
    assert_eq!(failed.len(), devices().len(), "{reports:#?}");
    assert!(
        failed
            .iter()
            .all(|r| r.case == "sinusoidal" && r.max_abs_err > 9e-4)
    );
    for dir in [good, bad] {
        std::fs::remove_dir_all(dir).expect("cleanup");
    }
}

#[test]
fn a_folder_without_reference_files_is_an_error() {
    let empty = temp_dir("empty");
    let err = check_dir(&empty, &devices()).expect_err("nothing to check");
    assert!(err.to_string().contains("sdpa.json"), "{err}");
    std::fs::remove_dir_all(empty).expect("cleanup");
}

#[test]
fn a_malformed_file_is_an_error_naming_the_file_and_the_fault() {
    let dir = temp_dir("malformed");
    let file = serde_json::json!({
        "sinusoidal": {"d_model": 4, "len": 2, "pe": {"shape": [2, 4], "data": [0.0, 1.0, 0.0]}},
    });
    std::fs::write(dir.join("positional.json"), file.to_string()).expect("write");
    let err = check_dir(&dir, &devices()).expect_err("3 values for 8");
    let message = format!("{err:#}");
    assert!(
        message.contains(&dir.join("positional.json").display().to_string()),
        "{message}"
    );
    assert!(
        message.contains("shape [2, 4] needs 8 values, the tensor has 3"),
        "{message}"
    );
    std::fs::remove_dir_all(dir).expect("cleanup");
}

/// What a Llama-family folder is checked for.
const LLAMA_CASES: [&str; 4] = [
    "batch_logits",
    "greedy_step_logits",
    "greedy_ids",
    "batch_greedy_ids",
];

#[test]
fn a_folder_of_model_folders_runs_every_one() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/attn-model/tests/data");
    let devices = vec![("flex".to_string(), Device::flex())];
    let reports = check_dir(&data, &devices).expect("model folders run");
    assert!(failures(&reports).is_empty(), "{:#?}", failures(&reports));
    for model in [
        "bert_tiny",
        "gpt2_tiny",
        "llama_tiny",
        "qwen2_tiny",
        "qwen3_tiny",
        "mistral_tiny",
    ] {
        assert!(
            reports
                .iter()
                .any(|r| r.file.contains(&format!("/{model}/"))),
            "{model} was not checked"
        );
    }
}

#[test]
fn hugging_face_model_folders_pass_on_every_backend() {
    let hf = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/attn-model/tests/data/hf");
    let devices = devices();
    for (model, cases) in [
        (
            "bert_tiny",
            ["last_hidden_state", "pooler_output"].as_slice(),
        ),
        (
            "gpt2_tiny",
            ["batch_logits", "greedy_step_logits", "greedy_ids"].as_slice(),
        ),
        ("llama_tiny", LLAMA_CASES.as_slice()),
        ("qwen2_tiny", LLAMA_CASES.as_slice()),
        ("qwen3_tiny", LLAMA_CASES.as_slice()),
        ("mistral_tiny", LLAMA_CASES.as_slice()),
    ] {
        let reports = check_dir(&hf.join(model), &devices).expect("model folder runs");
        assert!(failures(&reports).is_empty(), "{:#?}", failures(&reports));
        assert_eq!(reports.len(), cases.len() * devices.len(), "{model}");
        for case in cases {
            assert!(reports.iter().any(|r| r.case == *case), "{model}: {case}");
        }
    }
}
