//! `cargo run --release --example check_reference --features ndarray,wgpu -- crates/attn-testing/data`
//!
//! Runs every reference case found in a folder (files in the format of
//! `crates/attn-testing/data`) on every compiled-in backend and strategy, prints one JSON line
//! per case, backend and strategy, and exits non-zero if any is over tolerance.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use attn::reference::check_dir;
use attn::train::backend;
use clap::Parser;

/// Check attention against reference vectors.
#[derive(Parser)]
struct Args {
    /// Folder holding sdpa.json, positional.json, mha.json, encoder_layer.json,
    /// decoder_layer.json (any subset).
    dir: PathBuf,
    /// Backends to run on (default: every compiled-in backend).
    #[arg(long, value_delimiter = ',')]
    device: Vec<String>,
}

fn main() -> Result<ExitCode> {
    let args = Args::parse();
    let names: Vec<String> = if args.device.is_empty() {
        backend::COMPILED.iter().map(|s| s.to_string()).collect()
    } else {
        args.device
    };
    let devices = names
        .into_iter()
        .map(|name| {
            let device = backend::device(&name).with_context(|| format!("backend {name}"))?;
            Ok((name, device))
        })
        .collect::<Result<Vec<_>>>()?;
    let reports = check_dir(&args.dir, &devices)?;
    let failed = reports.iter().filter(|r| !r.pass).count();
    for report in &reports {
        println!("{}", serde_json::to_string(report)?);
    }
    eprintln!("{} checks, {} over tolerance", reports.len(), failed);
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
