//! The report: JSON lines of several runs (and of `benches/peers/torch_sdpa.py`) turned into the
//! Markdown tables of `docs/benchmarks.md`.
//!
//! Lines are grouped by machine (their CPU model), and each machine gets its own set of tables,
//! headed by it: a ratio is only ever taken between lines of the same machine.
//! Within a machine, each case's time is the median of its runs' medians.

use std::collections::BTreeMap;
use std::fmt::{self, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use attn_bench::cases::{Case, Pass};
use attn_bench::record::Record;
use attn_bench::record::median;

/// `(impl, case, pass, seq_len)` → median over runs of the median milliseconds.
pub type Table = BTreeMap<(String, String, String, usize), f64>;

/// The lines of one machine.
pub struct MachineLines<'a> {
    /// The CPU model every line shares.
    pub cpu: &'a str,
    /// Its lines, in the order they were read.
    pub records: Vec<&'a Record>,
}

/// Every line of the JSON-lines files, in order; lines not starting with `{` are skipped.
///
/// # Errors
/// A file that cannot be read, or a line that is not a record, named by file and line number.
pub fn load(inputs: &[PathBuf]) -> Result<Vec<Record>> {
    if inputs.is_empty() {
        bail!("report needs at least one JSON-lines file");
    }
    let mut records = Vec::new();
    for path in inputs {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        for (n, line) in text.lines().enumerate().filter(|(_, l)| l.starts_with('{')) {
            let record: Record = serde_json::from_str(line)
                .with_context(|| format!("{}:{}", path.display(), n + 1))?;
            records.push(record);
        }
    }
    Ok(records)
}

/// The lines grouped by CPU model, machines in the order they first appear.
pub fn by_machine(records: &[Record]) -> Vec<MachineLines<'_>> {
    let mut machines: Vec<MachineLines<'_>> = Vec::new();
    for record in records {
        match machines.iter_mut().find(|m| m.cpu == record.cpu) {
            Some(machine) => machine.records.push(record),
            None => machines.push(MachineLines {
                cpu: &record.cpu,
                records: vec![record],
            }),
        }
    }
    machines
}

/// Whether a line is a `--memory` measurement: one run of a case in a fresh process, whose
/// time is rough. A line with a peak and several runs (`benches/peers/torch_train.py` reports
/// its process's peak beside the median of its steps) is a timed line that also says its
/// memory.
pub fn is_memory_run(record: &Record) -> bool {
    record.peak_rss_mib.is_some() && record.reps <= 1
}

/// Whether a line belongs on `device`'s tables: PyTorch runs on the CPU, so its numbers are
/// the peers of every CPU backend.
fn on_device(record: &Record, device: &str) -> bool {
    record.device == device || (record.implementation == "torch" && record.device == "cpu")
}

/// The timed lines (not memory runs) of one machine that belong on `device`'s tables.
pub fn timed<'a>(machine: &MachineLines<'a>, device: &str) -> Vec<&'a Record> {
    machine
        .records
        .iter()
        .copied()
        .filter(|r| on_device(r, device) && !is_memory_run(r))
        .collect()
}

/// The report of every machine, as Markdown.
pub fn render(records: &[Record], device: &str) -> String {
    let mut out = String::new();
    for machine in by_machine(records) {
        render_machine(&mut out, &machine, device).expect("writing to a String cannot fail");
    }
    out
}

fn render_machine(out: &mut String, machine: &MachineLines<'_>, device: &str) -> fmt::Result {
    writeln!(out, "### {}\n", machine.cpu)?;
    let mut features: Vec<&str> = Vec::new();
    let mut threads: Vec<usize> = Vec::new();
    let mut l2_kib: Vec<usize> = Vec::new();
    for r in &machine.records {
        l2_kib.extend(r.l2_kib);
        for f in &r.cpu_features {
            if !features.contains(&f.as_str()) {
                features.push(f);
            }
        }
        threads.push(r.threads);
    }
    threads.sort_unstable();
    threads.dedup();
    l2_kib.sort_unstable();
    l2_kib.dedup();
    let l2 = if l2_kib.is_empty() {
        String::new()
    } else {
        let sizes: Vec<String> = l2_kib.iter().map(|k| format!("{k} KiB")).collect();
        format!("; L2 per core: {}", sizes.join(", "))
    };
    let features = if features.is_empty() {
        "none recorded".to_string()
    } else {
        features.join(", ")
    };
    let threads: Vec<String> = threads.iter().map(usize::to_string).collect();
    writeln!(
        out,
        "Instruction sets: {features}; threads: {}{l2}.\n",
        threads.join(", ")
    )?;

    let timed = timed(machine, device);
    let table = medians(&timed);
    let runs = timed
        .iter()
        .filter(|r| r.implementation == "attn" && r.case == "auto" && r.pass == "forward")
        .fold(BTreeMap::<usize, usize>::new(), |mut m, r| {
            *m.entry(r.seq_len).or_default() += 1;
            m
        });
    writeln!(
        out,
        "Runs per size (attn/auto/forward on {device}): {runs:?}\n"
    )?;
    for pass in ["forward", "forward_backward"] {
        attention_table(out, &table, pass, device)?;
        layer_table(out, &table, "mha", pass, device)?;
        layer_table(out, &table, "encoder_block", pass, device)?;
    }
    let peaks: Vec<&Record> = machine
        .records
        .iter()
        .copied()
        .filter(|r| on_device(r, device) && r.peak_rss_mib.is_some())
        .collect();
    // The cores' multiply-add peak: the median of its lines' rates (each line counts the
    // threads and vector lanes of its own run).
    let fma_rates: Vec<f64> = timed
        .iter()
        .filter(|r| r.case == FMA_PEAK)
        .filter_map(|r| r.gflops)
        .collect();
    let fma_peak = median(&fma_rates);
    sgemm_table(out, &table, fma_peak)?;
    train_table(out, &table, &peaks, device, fma_peak)?;
    // The attention cases' memory runs; the training shapes' peaks are in their own table.
    let memory: Vec<&Record> = machine
        .records
        .iter()
        .copied()
        .filter(|r| (is_memory_run(r) || r.error.is_some()) && !r.case.starts_with("train_"))
        .collect();
    memory_table(out, &memory)
}

/// The native kernel's GFLOP/s at s ≥ 2048 as a share of the best rate of PyTorch's sgemm on
/// the same machine (`n × n` by `n × n` products, `2n³` flops), the "Checked how" of the speed
/// issue. Attention's flops are the case catalogue's count ([`Case::flops`]).
///
/// The same products through burn's `matmul` on the device (`burn/sgemm/forward`), where
/// measured, are stated beside PyTorch's, and both beside the cores' multiply-add peak
/// (`cpu/fma_peak/forward`, [`attn_bench::peak`]) where it was measured.
fn sgemm_table(out: &mut String, table: &Table, fma_peak: Option<f64>) -> fmt::Result {
    let rates_of = |implementation: &str| -> Vec<(usize, f64)> {
        table
            .iter()
            .filter(|(k, _)| k.0 == implementation && k.1 == SGEMM)
            .map(|(k, &ms)| (k.3, 2.0 * (k.3 as f64).powi(3) / (ms * 1e6)))
            .collect()
    };
    let listed = |rates: &[(usize, f64)]| -> String {
        let each: Vec<String> = rates
            .iter()
            .map(|(n, rate)| match fma_peak {
                Some(peak) => format!(
                    "{rate:.0} GFLOP/s at {n}² ({:.0}% of the peak)",
                    100.0 * rate / peak
                ),
                None => format!("{rate:.0} GFLOP/s at {n}²"),
            })
            .collect();
        each.join(", ")
    };
    let (rates, burns) = (rates_of("torch"), rates_of("burn"));
    if rates.is_empty() && burns.is_empty() && fma_peak.is_none() {
        return Ok(());
    }
    writeln!(out, "#### Against the machine's sgemm\n")?;
    if let Some(peak) = fma_peak {
        writeln!(
            out,
            "The cores' multiply-add peak (`cpu/fma_peak/forward`, every thread): {peak:.0} GFLOP/s.\n"
        )?;
    }
    if !rates.is_empty() {
        writeln!(out, "PyTorch's sgemm: {}.\n", listed(&rates))?;
    }
    if !burns.is_empty() {
        writeln!(
            out,
            "burn's `matmul` on this device (`burn/sgemm/forward`): {}.\n",
            listed(&burns)
        )?;
    }
    let Some(best) = rates.iter().map(|r| r.1).reduce(f64::max) else {
        return Ok(());
    };
    let mut rows = Vec::new();
    for pass in Pass::ALL {
        let (case, pass) = Case::by_id(&format!("attn/native/{}", pass.name()))
            .expect("the catalogue has the native cases");
        let pass_name = pass.name();
        for s in sizes_in(table, pass_name)
            .into_iter()
            .filter(|&s| s >= 2048)
        {
            let (Some(native), Some(flops)) = (
                lookup(table, "attn", "native", pass_name, s),
                case.flops(pass, s),
            ) else {
                continue;
            };
            let rate = flops / (native * 1e6);
            rows.push(format!(
                "| {pass_name} | {s} | {} | {rate:.0} | {:.0}% |",
                ms(Some(native)),
                100.0 * rate / best
            ));
        }
    }
    // A round without the native kernel at s ≥ 2048 has no table, not an empty one.
    if !rows.is_empty() {
        writeln!(
            out,
            "| pass | s | attn native ms | GFLOP/s | share of the best sgemm |"
        )?;
        writeln!(out, "|---|---:|---:|---:|---:|")?;
        for row in rows {
            writeln!(out, "{row}")?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// The training shapes: milliseconds per update of each implementation (`attn`, burn's stack,
/// and PyTorch's from `benches/peers/torch_train.py`), `attn` against PyTorch, and each one's
/// peak resident memory where a line says it (`attn-bench --memory` for ours, the peer's own
/// lines for PyTorch), as the whole process's peak and, in brackets, its growth over the
/// process before the first update.
///
/// The rates count the update's matrix products ([`attn_bench::cases::TrainShape::forward_flops`],
/// the same count for every implementation), and `attn`'s share of the cores' multiply-add
/// peak where it was measured: how much faster any implementation could still go.
fn train_table(
    out: &mut String,
    table: &Table,
    peaks: &[&Record],
    device: &str,
    fma_peak: Option<f64>,
) -> fmt::Result {
    let shapes: Vec<(String, usize)> = table
        .keys()
        .filter(|k| k.1.starts_with("train_"))
        .map(|k| (k.1.clone(), k.3))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if shapes.is_empty() {
        return Ok(());
    }
    writeln!(out, "#### Training updates on {device}, median ms\n")?;
    writeln!(
        out,
        "| shape | seq_len | attn ms | burn ms | torch ms | attn / torch | attn GFLOP/s | torch GFLOP/s | attn share of the peak | attn peak MiB | burn peak MiB | torch peak MiB |"
    )?;
    writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )?;
    for (case, seq_len) in shapes {
        let peak = |implementation: &str| {
            let lines: Vec<&&Record> = peaks
                .iter()
                .filter(|r| r.implementation == implementation && r.case == case)
                .collect();
            let highest = lines.iter().filter_map(|r| r.peak_rss_mib).reduce(f64::max);
            let growth = lines
                .iter()
                .filter_map(|r| r.peak_rss_mib.zip(r.baseline_rss_mib).map(|(p, b)| p - b))
                .reduce(f64::max);
            match (highest, growth) {
                (Some(p), Some(g)) => format!("{p:.0} (+{g:.0})"),
                (Some(p), None) => format!("{p:.0}"),
                _ => "—".to_string(),
            }
        };
        let at = |implementation: &str| {
            lookup(table, implementation, &case, "forward_backward", seq_len)
        };
        let (attn, burn, torch) = (at("attn"), at("burn"), at("torch"));
        let ratio = match (attn, torch) {
            (Some(a), Some(t)) => format!("{:.2}×", t / a),
            _ => "—".to_string(),
        };
        let flops = Case::by_id(&format!("attn/{case}/forward_backward"))
            .ok()
            .and_then(|(c, pass)| c.flops(pass, seq_len));
        let rate = |ms: Option<f64>| ms.zip(flops).map(|(ms, flops)| flops / (ms * 1e6));
        let gflops = |ms: Option<f64>| rate(ms).map_or("—".to_string(), |r| format!("{r:.0}"));
        let share = match (rate(attn), fma_peak) {
            (Some(r), Some(peak)) => format!("{:.0}%", 100.0 * r / peak),
            _ => "—".to_string(),
        };
        writeln!(
            out,
            "| {} | {seq_len} | {} | {} | {} | {ratio} | {} | {} | {share} | {} | {} | {} |",
            case.trim_start_matches("train_"),
            ms(attn),
            ms(burn),
            ms(torch),
            gflops(attn),
            gflops(torch),
            peak("attn"),
            peak("burn"),
            peak("torch")
        )?;
    }
    writeln!(out)?;
    Ok(())
}

/// Each case's median over its runs' medians.
pub fn medians(records: &[&Record]) -> Table {
    let mut runs: BTreeMap<(String, String, String, usize), Vec<f64>> = BTreeMap::new();
    for r in records {
        if let Some(ms) = r.median_ms {
            runs.entry((
                r.implementation.clone(),
                r.case.clone(),
                r.pass.clone(),
                r.seq_len,
            ))
            .or_default()
            .push(ms);
        }
    }
    runs.into_iter()
        .filter_map(|(key, times)| median(&times).map(|m| (key, m)))
        .collect()
}

/// The median milliseconds of a case at `seq_len`, if measured.
pub fn lookup(
    table: &Table,
    implementation: &str,
    case: &str,
    pass: &str,
    seq_len: usize,
) -> Option<f64> {
    table
        .get(&(
            implementation.to_string(),
            case.to_string(),
            pass.to_string(),
            seq_len,
        ))
        .copied()
}

/// The case of `benches/peers/torch_sdpa.py`'s square matrix products (`seq_len` is their
/// side): the machine's practical rate for `f32` products, which the native kernels are held to.
pub const SGEMM: &str = "sgemm";

/// The case of the cores' multiply-add peak (`cpu/fma_peak/forward`, [`attn_bench::peak`]): one line
/// per run, at "sequence length" 1.
pub const FMA_PEAK: &str = "fma_peak";

/// The sequence lengths measured for `pass` (the training step, at its own size, has its line;
/// the sgemm lines are sides of matrices, not sequence lengths).
pub fn sizes_in(table: &Table, pass: &str) -> Vec<usize> {
    let mut sizes: Vec<usize> = table
        .keys()
        .filter(|k| k.2 == pass && !k.1.starts_with("train_") && k.1 != SGEMM && k.1 != FMA_PEAK)
        .map(|k| k.3)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

fn ms(value: Option<f64>) -> String {
    value.map_or("—".to_string(), |v| {
        if v >= 100.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.2}")
        }
    })
}

/// `peer / ours`: above 1 means ours is faster.
fn ratio(ours: Option<f64>, peer: Option<f64>) -> String {
    ours.zip(peer)
        .map_or("—".to_string(), |(o, p)| format!("{:.2}×", p / o))
}

fn attention_table(out: &mut String, table: &Table, pass: &str, device: &str) -> fmt::Result {
    let sizes = sizes_in(table, pass);
    if sizes.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "#### Attention {pass}, `[1, 8, s, 64]`, {device}, median ms\n"
    )?;
    writeln!(
        out,
        "| s | attn auto | attn explicit | attn chunked | attn fused | attn native | burn `module::attention` | PyTorch SDPA | auto vs burn | auto vs PyTorch | best attn vs PyTorch |"
    )?;
    writeln!(
        out,
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )?;
    for s in sizes {
        let ours = |case| lookup(table, "attn", case, pass, s);
        let auto = ours("auto");
        let best = ["explicit", "chunked", "fused", "native", "auto"]
            .into_iter()
            .filter_map(ours)
            .reduce(f64::min);
        let burn = lookup(table, "burn", "module_attention", pass, s);
        let torch = lookup(table, "torch", "sdpa", pass, s);
        writeln!(
            out,
            "| {s} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            ms(auto),
            ms(ours("explicit")),
            ms(ours("chunked")),
            ms(ours("fused")),
            ms(ours("native")),
            ms(burn),
            ms(torch),
            ratio(auto, burn),
            ratio(auto, torch),
            ratio(best, torch),
        )?;
    }
    writeln!(out)
}

fn layer_table(
    out: &mut String,
    table: &Table,
    case: &str,
    pass: &str,
    device: &str,
) -> fmt::Result {
    let sizes: Vec<usize> = sizes_in(table, pass)
        .into_iter()
        .filter(|&s| {
            ["attn", "burn"]
                .iter()
                .any(|i| lookup(table, i, case, pass, s).is_some())
        })
        .collect();
    if sizes.is_empty() {
        return Ok(());
    }
    let (title, burn_name, torch_name) = match case {
        "mha" => (
            "Multi-head attention",
            "`nn::MultiHeadAttention`",
            "`nn.MultiheadAttention`",
        ),
        _ => (
            "Encoder block",
            "`nn::transformer::TransformerEncoder` (1 layer)",
            "`nn.TransformerEncoderLayer`",
        ),
    };
    writeln!(
        out,
        "#### {title} {pass}, `[1, s, 512]`, 8 heads, {device}, median ms\n"
    )?;
    writeln!(
        out,
        "| s | attn | burn {burn_name} | PyTorch {torch_name} | attn vs burn | attn vs PyTorch |"
    )?;
    writeln!(out, "|---:|---:|---:|---:|---:|---:|")?;
    for s in sizes {
        let attn = lookup(table, "attn", case, pass, s);
        let burn = lookup(table, "burn", case, pass, s);
        let torch = lookup(table, "torch", case, pass, s);
        writeln!(
            out,
            "| {s} | {} | {} | {} | {} | {} |",
            ms(attn),
            ms(burn),
            ms(torch),
            ratio(attn, burn),
            ratio(attn, torch)
        )?;
    }
    writeln!(out)
}

fn memory_table(out: &mut String, records: &[&Record]) -> fmt::Result {
    if records.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "#### Peak resident memory (VmHWM), `[1, 8, s, 64]`, one process per case\n"
    )?;
    writeln!(
        out,
        "| case | device | s | peak MiB | before the case MiB | growth MiB | one `[s, s]` score matrix MiB | time ms |"
    )?;
    writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|")?;
    for r in records {
        let scores_mib =
            (r.batch * r.n_heads * r.seq_len * r.seq_len * 4) as f64 / (1024.0 * 1024.0);
        let growth = r.peak_rss_mib.zip(r.baseline_rss_mib).map(|(p, b)| p - b);
        let number = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.0}"));
        let peak = match &r.error {
            Some(e) => format!("failed: {e}"),
            None => number(r.peak_rss_mib),
        };
        writeln!(
            out,
            "| {} | {} | {} | {peak} | {} | {} | {scores_mib:.0} | {} |",
            r.id(),
            r.device,
            r.seq_len,
            number(r.baseline_rss_mib),
            number(growth),
            number(r.median_ms),
        )?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(implementation: &str, case: &str, cpu: &str, median_ms: f64) -> Record {
        let json = format!(
            r#"{{"impl":"{implementation}","case":"{case}","pass":"forward","device":"{}","batch":1,"n_heads":8,"seq_len":512,"d_head":64,"threads":2,"cpu":"{cpu}","cpu_features":["avx2"],"reps":5,"median_ms":{median_ms},"min_ms":{median_ms},"gflops":null,"peak_rss_mib":null}}"#,
            if implementation == "torch" {
                "cpu"
            } else {
                "flex"
            }
        );
        serde_json::from_str(&json).expect("a valid line")
    }

    #[test]
    fn each_machine_gets_its_own_tables() {
        let records = [
            line("attn", "auto", "CPU A", 2.0),
            line("torch", "sdpa", "CPU B", 3.0),
            line("burn", "module_attention", "CPU A", 6.0),
        ];
        let report = render(&records, "flex");
        let a = report.find("### CPU A").expect("CPU A has a heading");
        let b = report.find("### CPU B").expect("CPU B has a heading");
        assert!(a < b, "machines in the order they appear:\n{report}");
        let (part_a, part_b) = report.split_at(b);
        // On machine A: auto 2.00, burn 6.00, no PyTorch; 3.00× against burn.
        assert!(
            part_a.contains("| 512 | 2.00 | — | — | — | — | 6.00 | — | 3.00× | — | — |"),
            "{part_a}"
        );
        // PyTorch's line is on machine B alone: never a ratio with A's numbers.
        assert!(
            part_b.contains("| 512 | — | — | — | — | — | — | 3.00 | — | — | — |"),
            "{part_b}"
        );
    }

    #[test]
    fn training_rows_take_the_peers_timed_lines_and_every_peak() {
        let train =
            |implementation: &str, median_ms: f64, reps: usize, peak: Option<(f64, f64)>| {
                let base = line(implementation, "train_toy", "A", median_ms);
                Record {
                    pass: "forward_backward".into(),
                    seq_len: 16,
                    reps,
                    peak_rss_mib: peak.map(|p| p.0),
                    baseline_rss_mib: peak.map(|p| p.1),
                    ..base
                }
            };
        let records = [
            train("attn", 30.0, 40, None),
            // attn-bench --memory: one run in a fresh process; its time is not the median.
            train("attn", 99.0, 1, Some((59.0, 10.0))),
            // torch_train.py: the median of 200 steps and the process's peak.
            train("torch", 24.0, 200, Some((712.0, 680.0))),
            // The multiply-add peak, twice the rate of attn's update (below).
            Record {
                implementation: "cpu".into(),
                seq_len: 1,
                gflops: Some(2.0 * toy_flops() / (30.0 * 1e6)),
                ..line("cpu", FMA_PEAK, "A", 0.5)
            },
        ];
        let report = render(&records, "flex");
        // The update's products at 30 and 24 ms.
        let rate = |ms: f64| format!("{:.0}", toy_flops() / (ms * 1e6));
        let row = format!(
            "| toy | 16 | 30.00 | — | 24.00 | 0.80× | {} | {} | 50% | 59 (+49) | — | 712 (+32) |",
            rate(30.0),
            rate(24.0)
        );
        assert!(report.contains(&row), "{row} in {report}");
        // The peak is no row of the attention tables.
        assert!(!report.contains("| 1 |"), "{report}");
        // The training shapes are not rows of the attention cases' memory table.
        assert!(
            !report.contains("attn/train_toy/forward_backward"),
            "{report}"
        );
    }

    /// The toy update's matrix-product flops: three times the forward's, counted by hand
    /// from `attn-train`'s default shape (two layers, 64 sequences of 16 tokens, d_model 64,
    /// d_ff 256) and the reverse task's classes.
    fn toy_flops() -> f64 {
        let n_classes = attn_train::TrainConfig::default().task.n_classes() as f64;
        let tokens = 64.0 * 16.0;
        let layer = 8.0 * tokens * 64.0 * 64.0
            + 4.0 * tokens * 64.0 * 256.0
            + 4.0 * 64.0 * 16.0 * 16.0 * 64.0;
        3.0 * (2.0 * layer + 2.0 * tokens * 64.0 * n_classes)
    }

    #[test]
    fn the_native_kernel_is_held_to_the_machines_sgemm() {
        let at = |implementation: &str, case: &str, pass: &str, seq_len: usize, ms: f64| Record {
            pass: pass.into(),
            seq_len,
            ..line(implementation, case, "A", ms)
        };
        let records = [
            // 2 · 1024³ flops in 20 ms: 107.4 GFLOP/s; 2 · 2048³ in 100 ms: 171.8, the best.
            at("torch", SGEMM, "forward", 1024, 20.0),
            at("torch", SGEMM, "forward", 2048, 100.0),
            // 4 · 2048² · 64 · 8 = 8.59 GFLOP in 100 ms: 85.9 GFLOP/s, half the best.
            at("attn", "native", "forward", 2048, 100.0),
            // Three times the flops in 600 ms: 42.9 GFLOP/s, a quarter.
            at("attn", "native", "forward_backward", 2048, 600.0),
            // Below 2048: not held to it.
            at("attn", "native", "forward", 512, 1.0),
            // burn's matmul: 2 · 1024³ flops in 40 ms, 53.7 GFLOP/s.
            at("burn", SGEMM, "forward", 1024, 40.0),
            // Two runs of the multiply-add peak, at 180 and 200 GFLOP/s: their median is 190.
            Record {
                gflops: Some(180.0),
                ..at("cpu", FMA_PEAK, "forward", 1, 4.0)
            },
            Record {
                gflops: Some(200.0),
                ..at("cpu", FMA_PEAK, "forward", 1, 3.6)
            },
        ];
        let report = render(&records, "flex");
        assert!(
            report.contains(
                "The cores' multiply-add peak (`cpu/fma_peak/forward`, every thread): 190 GFLOP/s."
            ),
            "{report}"
        );
        assert!(
            report.contains(
                "PyTorch's sgemm: 107 GFLOP/s at 1024² (57% of the peak), 172 GFLOP/s at 2048² (90% of the peak)."
            ),
            "{report}"
        );
        assert!(
            report.contains("| forward | 2048 | 100 | 86 | 50% |"),
            "{report}"
        );
        assert!(
            report.contains("| forward_backward | 2048 | 600 | 43 | 25% |"),
            "{report}"
        );
        assert!(!report.contains("| forward | 512 |"), "{report}");
        // Without the native kernel's lines, no table of them.
        let sgemm_only: Vec<Record> = records
            .iter()
            .filter(|r| r.case != "native")
            .cloned()
            .collect();
        let report_without = render(&sgemm_only, "flex");
        assert!(
            report_without.contains("PyTorch's sgemm"),
            "{report_without}"
        );
        assert!(
            !report_without.contains("share of the best sgemm"),
            "{report_without}"
        );
        assert!(
            report.contains(
                "burn's `matmul` on this device (`burn/sgemm/forward`): 54 GFLOP/s at 1024² (28% of the peak)."
            ),
            "{report}"
        );
        // The sides of the sgemm matrices are no rows of the attention tables.
        assert!(!report.contains("| 1024 |"), "{report}");
    }

    #[test]
    fn lines_without_a_machine_form_one_group() {
        let mut old = line("attn", "auto", "x", 2.0);
        let mut json: serde_json::Value = serde_json::to_value(&old).expect("a record is JSON");
        let object = json.as_object_mut().expect("a record is an object");
        object.remove("cpu");
        object.remove("cpu_features");
        old = serde_json::from_value(json).expect("old lines load");
        let peer = Record {
            implementation: "torch".into(),
            case: "sdpa".into(),
            device: "cpu".into(),
            median_ms: Some(3.0),
            ..old.clone()
        };
        let machines = by_machine(std::slice::from_ref(&old));
        assert_eq!(machines.len(), 1);
        let report = render(&[old, peer], "flex");
        assert!(report.starts_with("### unknown machine\n"), "{report}");
        assert!(report.contains("Instruction sets: none recorded; threads: 2."));
        assert!(report.contains("| 1.50× | 1.50× |"), "{report}");
        // A line that records its L2 cache names it in its machine's heading.
        let newer = Record {
            l2_kib: Some(1024),
            ..line("attn", "auto", "x", 2.0)
        };
        let report = render(&[newer], "flex");
        assert!(
            report.contains("; threads: 2; L2 per core: 1024 KiB."),
            "{report}"
        );
    }

    #[test]
    fn medians_are_of_the_runs_medians() {
        let records = [
            line("attn", "auto", "A", 1.0),
            line("attn", "auto", "A", 5.0),
            line("attn", "auto", "A", 2.0),
        ];
        let refs: Vec<&Record> = records.iter().collect();
        let table = medians(&refs);
        assert_eq!(lookup(&table, "attn", "auto", "forward", 512), Some(2.0));
        assert_eq!(sizes_in(&table, "forward"), vec![512]);
        assert_eq!(sizes_in(&table, "forward_backward"), Vec::<usize>::new());
    }
}
