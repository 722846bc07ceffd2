//! The `attn-bench` program end to end: the case list, a timed line and a memory line (through
//! the hidden child subcommand) at a tiny size, `tiling`'s children, and the report of the result files kept in
//! `benches/results/`, which must still print the tables of `docs/benchmarks.md`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn attn_bench(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_attn-bench"))
        .args(args)
        .output()
        .expect("the program starts");
    assert!(
        output.status.success(),
        "attn-bench {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("the output is UTF-8")
}

fn results(file: &str) -> String {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "..",
        "benches",
        "results",
        file,
    ]
    .iter()
    .collect();
    path.to_str().expect("the path is UTF-8").to_string()
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("`{l}`: {e}")))
        .collect()
}

#[test]
fn the_list_has_every_case() {
    let stdout = attn_bench(&["--list"]);
    let ids: Vec<&str> = stdout.lines().collect();
    assert_eq!(ids.len(), 34, "{stdout}");
    assert!(ids.contains(&"cpu/fma_peak/forward"));
    assert!(ids.contains(&"attn/train_toy_2replicas/forward_backward"));
    assert!(ids.contains(&"attn/native_one_head/forward_backward"));
    assert!(ids.contains(&"attn/native/forward_backward"));
    assert!(ids.contains(&"burn/sgemm/forward"));
    for shape in ["toy", "mid", "long"] {
        for implementation in ["attn", "burn"] {
            let id = format!("{implementation}/train_{shape}/forward_backward");
            assert!(ids.contains(&id.as_str()), "{id} in {stdout}");
        }
    }
    assert!(!ids.contains(&"attn/train_toy/forward"));
}

#[test]
fn a_timed_line_names_its_machine() {
    let stdout = attn_bench(&[
        "--json",
        "--quick",
        "--device",
        "flex",
        "--sizes",
        "5",
        "--cases",
        "chunked/forward",
    ]);
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 1, "{stdout}");
    let line = &lines[0];
    assert_eq!(line["impl"], "attn");
    assert_eq!(line["case"], "chunked");
    assert_eq!(line["pass"], "forward");
    assert_eq!(line["seq_len"], 5);
    assert!(
        line["median_ms"].as_f64().is_some_and(|ms| ms > 0.0),
        "{line}"
    );
    assert!(
        line["cpu"].as_str().is_some_and(|cpu| !cpu.is_empty()),
        "{line}"
    );
    assert!(line["cpu_features"].is_array(), "{line}");
    assert!(line["threads"].as_u64().is_some_and(|n| n >= 1), "{line}");
    // The L2 cache the native kernels' blocks follow, wherever the processor states it.
    let l2 = attn_core::CpuCaches::detected().map(|c| (c.l2 >> 10) as u64);
    assert_eq!(line.get("l2_kib").and_then(|k| k.as_u64()), l2, "{line}");
}

#[test]
fn a_memory_line_comes_from_a_child_process() {
    let stdout = attn_bench(&[
        "--json",
        "--memory",
        "--device",
        "flex",
        "--sizes",
        "5",
        "--cases",
        "attn/chunked/forward_backward",
    ]);
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 1, "{stdout}");
    let line = &lines[0];
    assert_eq!(line.get("error"), None, "{line}");
    let peak = line["peak_rss_mib"].as_f64().expect("a peak");
    let before = line["baseline_rss_mib"].as_f64().expect("a baseline");
    assert!(peak >= before && before > 0.0, "{line}");
    assert_eq!(line["reps"], 1);
}

#[test]
fn the_kept_results_still_print_the_documented_tables() {
    let report = attn_bench(&["report", &results("run5.jsonl"), &results("torch5.jsonl")]);
    // Lines written before lines named their machine form one machine.
    assert!(report.starts_with("### unknown machine\n"), "{report}");
    let headings = report.lines().filter(|l| l.starts_with("### ")).count();
    assert_eq!(headings, 1, "{report}");
    // Rows of docs/benchmarks.md, "Results (flex)".
    for row in [
        "| 2048 | 29.25 | 199 | 30.49 | 116 | 29.74 | 112 | 46.04 | 3.81× | 1.57× | 1.57× |",
        "| 4096 | 162 | 885 | 386 | 5.46× | 2.38× |",
        "| 128 | 1.17 | 3.00 | 1.18 | 2.93 | 1.17 | 2.61 | 1.11 | 2.23× | 0.95× | 0.95× |",
        "| 4096 | 843 | 3032 | 1046 | 3.60× | 1.24× |",
    ] {
        assert!(report.contains(row), "no `{row}` in\n{report}");
    }
    // The training step of those runs (named `train_step` then), in the training table.
    assert!(
        report.contains("| step | 16 | 12.15 | — | — | — |"),
        "{report}"
    );

    let memory = attn_bench(&["report", &results("memory-flash.jsonl")]);
    assert!(
        memory.contains("| attn/chunked/forward_backward | flex | 16384 | 334 | 101 | 232 |"),
        "{memory}"
    );
}

#[test]
fn tiling_runs_each_candidate_in_its_own_process_and_names_a_bad_one() {
    let stdout = attn_bench(&[
        "tiling",
        "--quick",
        "--json",
        "--sizes",
        "50",
        "--rounds",
        "1",
        "--candidates",
        "6,16,6,48;12,32,12,48,1",
    ]);
    let lines = json_lines(&stdout);
    let tilings: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["tiling"].as_str().expect("a tiling"),
                l["pass"].as_str().expect("a pass"),
            )
        })
        .collect();
    assert_eq!(
        tilings,
        [
            ("chosen", "forward"),
            ("chosen", "forward_backward"),
            ("6,16,6,48", "forward"),
            ("6,16,6,48", "forward_backward"),
            ("12,32,12,48,1", "forward"),
            ("12,32,12,48,1", "forward_backward"),
        ],
        "{stdout}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l["case"] == "native" && l["median_ms"].as_f64().is_some_and(|ms| ms > 0.0)),
        "{stdout}"
    );
    // The table marks one fastest time per row.
    let table = attn_bench(&[
        "tiling",
        "--quick",
        "--sizes",
        "50",
        "--rounds",
        "1",
        "--candidates",
        "6,16,6,48",
    ]);
    assert!(
        table.contains("| pass | s | chosen | 6,16,6,48 |"),
        "{table}"
    );
    for pass in ["forward", "forward_backward"] {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| {pass} | 50 |")))
            .unwrap_or_else(|| panic!("no {pass} row in {table}"));
        assert_eq!(row.matches("**").count(), 2, "{row}");
    }
    // A candidate the kernels cannot use is named, with the reason.
    let output = Command::new(env!("CARGO_BIN_EXE_attn-bench"))
        .args(["tiling", "--quick", "--sizes", "50", "--rounds", "1"])
        .args(["--candidates", "96,250,96,96"])
        .output()
        .expect("the program starts");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("96,250,96,96"), "{stderr}");
    assert!(stderr.contains("forward keys is 250"), "{stderr}");
}
