//! `attn-bench tiling`: the native kernels' block sizes measured against each other on this
//! machine, so that the choice `attn_core` makes from the L2 cache can be checked on any
//! processor with one command.
//!
//! The block sizes are read once per process (`ATTN_NATIVE_TILING`), so each candidate runs
//! `attn/native` in a child process of its own: this program re-executed with `--json` and that
//! variable set, or unset for the machine's own choice. The candidates alternate round by
//! round, so that a machine that drifts slows them all alike; the table holds the median of
//! each candidate's rounds.

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{Context, Result, bail};
use attn_bench::machine::Machine;
use attn_bench::record::Record;
use attn_bench::record::median;

/// The candidates of a run unless `--candidates` says otherwise: the blocks every machine used
/// before they followed the L2 (96 × 256 forward, 96 × 96 backward), then larger and smaller key
/// blocks forward and both backward candidates.
pub const DEFAULT_CANDIDATES: &[&str] = &[
    "96,256,96,96",
    "96,128,96,96",
    "96,512,192,96",
    "96,1024,192,96",
    "96,1024,192,192",
];

/// The label of the machine's own choice (no `ATTN_NATIVE_TILING`).
pub const CHOSEN: &str = "chosen";

/// Runs `rounds` rounds of the machine's choice and every candidate (the default ones where
/// `candidates` is empty), then prints the table, or each line as it comes with `json`.
pub fn run(
    candidates: &[String],
    sizes: &[usize],
    rounds: usize,
    device: &str,
    quick: bool,
    json: bool,
) -> Result<()> {
    let mut tilings = vec![CHOSEN.to_string()];
    if candidates.is_empty() {
        tilings.extend(DEFAULT_CANDIDATES.iter().map(|c| c.to_string()));
    } else {
        tilings.extend(candidates.iter().cloned());
    }
    let mut records = Vec::new();
    for round in 1..=rounds {
        for candidate in &tilings {
            eprintln!("round {round}/{rounds}: {candidate}");
            let lines = run_candidate(candidate, device, sizes, quick)?;
            if json {
                for record in &lines {
                    println!("{}", record.to_json()?);
                }
            }
            records.extend(lines);
        }
    }
    if !json {
        let machine = Machine::current();
        let l2 = machine
            .l2_kib
            .map_or("not stated".to_string(), |k| format!("{k} KiB"));
        println!(
            "{}, {} threads, L2 per core {l2}; attn/native on {device}, median ms of {rounds} rounds\n",
            machine.cpu, machine.threads
        );
        print!("{}", table(&records, &tilings));
    }
    Ok(())
}

/// One candidate's lines, labelled with its `tiling`.
pub fn run_candidate(
    tiling: &str,
    device: &str,
    sizes: &[usize],
    quick: bool,
) -> Result<Vec<Record>> {
    let exe = std::env::current_exe().context("cannot find this program to re-run it")?;
    let sizes: Vec<String> = sizes.iter().map(usize::to_string).collect();
    let mut command = Command::new(exe);
    command.args([
        "--json",
        "--device",
        device,
        "--cases",
        "attn/native",
        "--sizes",
        &sizes.join(","),
    ]);
    if quick {
        command.arg("--quick");
    }
    if tiling == CHOSEN {
        command.env_remove("ATTN_NATIVE_TILING");
    } else {
        command.env("ATTN_NATIVE_TILING", tiling);
    }
    let output = command
        .output()
        .with_context(|| format!("cannot start the child for tiling {tiling}"))?;
    if !output.status.success() {
        bail!(
            "the child for tiling {tiling} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| {
            let mut record: Record =
                serde_json::from_str(line).with_context(|| format!("child printed `{line}`"))?;
            record.tiling = Some(tiling.to_string());
            Ok(record)
        })
        .collect()
}

/// The Markdown table of `records`: a row per (pass, seq_len), a column per tiling in the
/// order given, each cell the median of that tiling's medians in ms, the fastest in bold.
pub fn table(records: &[Record], tilings: &[String]) -> String {
    let mut cells: BTreeMap<(String, usize), BTreeMap<&str, Vec<f64>>> = BTreeMap::new();
    for r in records {
        if let (Some(tiling), Some(ms)) = (&r.tiling, r.median_ms) {
            cells
                .entry((r.pass.clone(), r.seq_len))
                .or_default()
                .entry(tiling.as_str())
                .or_default()
                .push(ms);
        }
    }
    let mut out = format!("| pass | s | {} |\n", tilings.join(" | "));
    out.push_str(&format!("|---|---:|{}\n", "---:|".repeat(tilings.len())));
    for ((pass, seq_len), by_tiling) in &cells {
        let medians: Vec<Option<f64>> = tilings
            .iter()
            .map(|t| by_tiling.get(t.as_str()).and_then(|ms| median(ms)))
            .collect();
        let best = medians
            .iter()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let row: Vec<String> = medians
            .iter()
            .map(|m| match m {
                Some(ms) if *ms == best => format!("**{ms:.2}**"),
                Some(ms) => format!("{ms:.2}"),
                None => "—".to_string(),
            })
            .collect();
        out.push_str(&format!("| {pass} | {seq_len} | {} |\n", row.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_bench::cases::{Case, Pass};

    fn line(tiling: &str, pass: Pass, seq_len: usize, ms: f64) -> Record {
        let (case, _) = Case::by_id("attn/native/forward").expect("listed");
        Record {
            tiling: Some(tiling.to_string()),
            median_ms: Some(ms),
            ..Record::new(&case, pass, "flex", seq_len)
        }
    }

    #[test]
    fn the_table_takes_each_tilings_median_and_marks_the_fastest() {
        let records = [
            line("chosen", Pass::Forward, 512, 2.0),
            line("chosen", Pass::Forward, 512, 9.0),
            line("chosen", Pass::Forward, 512, 1.0),
            line("96,256,96,96", Pass::Forward, 512, 3.0),
            line("96,256,96,96", Pass::ForwardBackward, 512, 5.0),
        ];
        let tilings = ["chosen".to_string(), "96,256,96,96".to_string()];
        let table = table(&records, &tilings);
        assert!(table.starts_with("| pass | s | chosen | 96,256,96,96 |\n|---|---:|---:|---:|\n"));
        assert!(
            table.contains("| forward | 512 | **2.00** | 3.00 |"),
            "{table}"
        );
        assert!(
            table.contains("| forward_backward | 512 | — | **5.00** |"),
            "{table}"
        );
    }
}
