//! Peak resident memory (`VmHWM` in `/proc/self/status`), one child process per case.
//!
//! Each case runs once in a fresh child process (this program re-executed with the hidden
//! subcommand [`CHILD_SUBCOMMAND`]), so one case's allocator high-water mark cannot leak into
//! the next. The child runs under an address-space limit (`prlimit --as`) so a case that would
//! exhaust the machine fails alone and is reported as such.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use attn_bench::cases::{Case, Pass};
use attn_bench::record::Record;
use attn_train::backend;

/// Sequence lengths of a memory run: the growth from one to the next says whether memory is
/// linear in `seq_len`.
pub const MEMORY_SIZES: &[usize] = &[2048, 4096, 8192, 16384];

/// Cases of a memory run unless `--cases` says otherwise.
pub const MEMORY_CASES: &[&str] = &[
    "attn/explicit",
    "attn/chunked",
    "attn/native",
    "burn/module_attention",
];

/// The hidden subcommand that runs one case in the child.
pub const CHILD_SUBCOMMAND: &str = "memory-case";

/// Runs one case in a fresh child process under an address-space limit of `limit_gib`.
///
/// A child that fails (out of memory under the limit, a panic) gives a line whose `error` says
/// why; only a child that cannot be started is an error here.
pub fn in_child(
    case: &Case,
    pass: Pass,
    device: &str,
    seq_len: usize,
    limit_gib: f64,
) -> Result<Record> {
    let exe = std::env::current_exe().context("cannot find this program to re-run it")?;
    let limit_bytes = (limit_gib * 1024.0 * 1024.0 * 1024.0) as u64;
    let has_prlimit = Command::new("prlimit")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let mut command = if has_prlimit {
        let mut c = Command::new("prlimit");
        c.arg(format!("--as={limit_bytes}")).arg("--").arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    let seq_len_arg = seq_len.to_string();
    let id = case.id(pass);
    let output = command
        .args([
            CHILD_SUBCOMMAND,
            "--case",
            &id,
            "--device",
            device,
            "--seq-len",
            &seq_len_arg,
        ])
        .output()
        .with_context(|| format!("cannot start the child process for {id}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if output.status.success()
        && let Some(line) = stdout.lines().rev().find(|l| l.starts_with('{'))
    {
        return serde_json::from_str(line).with_context(|| format!("child printed `{line}`"));
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let limit = if has_prlimit {
        format!(" (address-space limit {limit_gib} GiB)")
    } else {
        String::new()
    };
    Ok(Record {
        error: Some(format!("child {}{limit}: {}", output.status, why(&stderr))),
        ..Record::new(case, pass, device, seq_len)
    })
}

/// The reason in a failed child's stderr: an allocation failure or a panic says why; otherwise
/// the last line (often only a backtrace hint).
fn why(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    lines
        .iter()
        .position(|l| l.contains("memory allocation of") || l.contains("panicked at"))
        .map(|i| lines[i..(i + 2).min(lines.len())].join(" "))
        .or_else(|| lines.last().map(|l| l.to_string()))
        .unwrap_or_else(|| "no message".to_string())
}

/// The child side: builds the inputs, runs the case once, and prints its line with the
/// high-water marks before and after.
pub fn child(id: &str, device_name: &str, seq_len: usize) -> Result<()> {
    let (case, pass) = Case::by_id(id)?;
    let device = backend::device(device_name)?;
    let mut step = case.prepare(pass, &device, seq_len)?;
    let baseline = peak_rss_mib()?;
    let clock = Instant::now();
    step()?;
    let ms = clock.elapsed().as_secs_f64() * 1e3;
    let record = Record {
        peak_rss_mib: Some(peak_rss_mib()?),
        baseline_rss_mib: Some(baseline),
        ..Record::new(&case, pass, device_name, seq_len).with_times(&case, pass, &[ms])
    };
    println!("{}", record.to_json()?);
    Ok(())
}

/// This process's resident-memory high-water mark (`VmHWM`), in MiB.
fn peak_rss_mib() -> Result<f64> {
    Ok(attn_bench::machine::peak_resident_bytes()? as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_high_water_mark_reads_in_mib() {
        let status = "Name:\tattn-bench\nVmPeak:\t  999 kB\nVmHWM:\t    3072 kB\nVmRSS:\t 1 kB\n";
        let vm_hwm = |status: &str| attn_bench::machine::status_bytes(status, "VmHWM:");
        assert_eq!(vm_hwm(status).expect("has VmHWM"), 3 << 20);
        assert!(vm_hwm("Name:\tattn-bench\n").is_err());
    }

    #[test]
    fn a_failed_child_says_why() {
        let stderr = "\nmemory allocation of 8589934592 bytes failed\nAborted\n";
        assert_eq!(
            why(stderr),
            "memory allocation of 8589934592 bytes failed Aborted"
        );
        assert_eq!(
            why("note: run with `RUST_BACKTRACE=1`\n"),
            "note: run with `RUST_BACKTRACE=1`"
        );
        assert_eq!(why(""), "no message");
    }

    #[test]
    fn the_default_memory_cases_exist() {
        let ids: Vec<String> = attn_bench::cases::all_cases()
            .map(|(case, pass)| case.id(pass))
            .collect();
        for filter in MEMORY_CASES {
            let filters = [filter.to_string()];
            assert!(
                ids.iter()
                    .any(|id| attn_bench::cases::selected(id, &filters)),
                "`{filter}` selects nothing"
            );
        }
    }
}
