//! `attn-train`: trains a Transformer encoder on a synthetic per-token task and writes metrics,
//! checkpoints and plots.
//!
//! ```text
//! cargo run --release -p attn-train -- --task reverse --seed 1
//! ```
//!
//! Flags override `--config FILE.json`, which overrides the defaults. A progress bar goes to
//! stderr; one JSON line summarising the run goes to stdout at the end.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use attn_train::config::{Overrides, TrainConfig};
use attn_train::train::{self, RunOptions};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};

/// Train a Transformer encoder on a synthetic sequence task.
#[derive(Parser, Debug)]
#[command(name = "attn-train", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    overrides: Overrides,
    /// Read the configuration from a JSON file (flags override it).
    #[arg(long, value_name = "FILE.json")]
    config: Option<PathBuf>,
    /// Output folder (default: runs/<task>).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Continue the run in DIR from its last checkpoint, with the configuration saved there
    /// (only --steps, --device and --stop-at may be given with it).
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// Stop after this many steps, checkpointing there, as if interrupted.
    #[arg(long)]
    stop_at: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// Skip the PNG plots.
    #[arg(long)]
    no_plots: bool,
}

fn main() -> Result<()> {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let options = RunOptions {
        out: None,
        resume: false,
        stop_at: cli.stop_at,
        progress: !cli.quiet,
        skip_plots: cli.no_plots,
    };

    let summary = if let Some(dir) = &cli.resume {
        let refused = refused_with_resume(&matches);
        if !refused.is_empty() {
            bail!(
                "--resume continues with the configuration saved in {}, so {} cannot be given \
                 with it (only --steps, --device and --stop-at can)",
                dir.display(),
                refused.join(", ")
            );
        }
        train::resume(dir, &cli.overrides, &options)
            .with_context(|| format!("resuming {}", dir.display()))?
    } else {
        let mut config = match &cli.config {
            Some(path) => TrainConfig::from_file(path)?,
            None => TrainConfig::default(),
        };
        config.apply(&cli.overrides)?;
        let out = cli
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("runs").join(config.task.kind.to_string()));
        let options = RunOptions {
            out: Some(out.clone()),
            ..options
        };
        train::run(&config, &options)
            .with_context(|| format!("training {} into {}", config.task.kind, out.display()))?
    };

    println!(
        "{}",
        serde_json::to_string(&summary).context("serialising the summary")?
    );
    Ok(())
}

/// The flags that `--resume` takes along: the rest would change the saved configuration.
const WITH_RESUME: [&str; 6] = ["resume", "steps", "device", "stop_at", "quiet", "no_plots"];

/// The flags given on the command line that `--resume` refuses, as `--name`.
fn refused_with_resume(matches: &ArgMatches) -> Vec<String> {
    Cli::command()
        .get_arguments()
        .filter(|arg| !WITH_RESUME.contains(&arg.get_id().as_str()))
        .filter(|arg| matches.value_source(arg.get_id().as_str()) == Some(ValueSource::CommandLine))
        .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags refused when `args` follow `--resume runs/x`.
    fn refused(args: &[&str]) -> Vec<String> {
        let command_line = ["attn-train", "--resume", "runs/x"].iter().chain(args);
        let matches = Cli::command()
            .try_get_matches_from(command_line)
            .expect("flags parse");
        refused_with_resume(&matches)
    }

    #[test]
    fn resume_names_only_the_refused_flags_that_were_given() {
        let given = refused(&["--steps", "9", "--lr", "0.1", "--long-range"]);
        assert_eq!(given, ["--long-range", "--lr"]);
        let given = refused(&["--config", "c.json", "--out", "elsewhere"]);
        assert_eq!(given, ["--config", "--out"]);
        let given = refused(&["--steps", "9", "--device", "ndarray", "--quiet"]);
        assert!(given.is_empty(), "{given:?}");
    }
}
