//! Attention benchmarks side by side: this workspace's strategies against burn's own
//! `module::attention` and `nn::MultiHeadAttention`, one line per case.
//!
//! ```text
//! cargo run --release -p attn-bench -- --json
//! ```
//!
//! Other runs:
//!
//! ```text
//! cargo run --release -p attn-bench -- --quick                  # a short set, about a minute
//! cargo run --release -p attn-bench -- --json --device flex --sizes 512,2048 --cases chunked,burn
//! cargo run --release -p attn-bench -- --json --memory          # peak memory, one process per case
//! cargo run --release -p attn-bench --features ndarray -- --json --device flex,ndarray
//! cargo run --release -p attn-bench -- --list                   # every case id
//! cargo run --release -p attn-bench -- hf /tmp/gpt2-small   # a Hugging Face model folder
//! cargo run --release -p attn-bench -- report run1.jsonl torch.jsonl --plot docs/img/benchmarks.png
//! cargo run --release -p attn-bench -- tiling                    # the native kernels' block sizes
//! ```
//!
//! The cases, their shapes and FLOP counts are the catalogue of [`attn_bench::cases`]; how each
//! is timed is [`attn_bench::timing`]; every line names its machine ([`attn_bench::machine`]).
//! `--memory` measures peak resident memory instead of time, each case in a child process
//! (`memory`).
//! `report` reads JSON lines from several runs (and from `benches/peers/torch_sdpa.py`), groups
//! them by machine, takes the median of each case's medians, and prints the Markdown tables of
//! `docs/benchmarks.md`; `--plot` also draws them.
//! `tiling` times the native kernel with several block sizes against the ones `attn_core`
//! chooses from this machine's L2 cache, each in a child process (`tiling`).

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
// It keeps the memory it frees, set first thing in `main`: see `attn_train::allocator`.

mod memory;
mod plot;
mod report;
mod tiling;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use attn_bench::cases::{Case, Pass, QUICK_SIZES, SIZES, all_cases, selected};
use attn_bench::timing::{FULL, QUICK, time_case};
use attn_train::backend;
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "attn-bench",
    about = "Attention benchmarks: attn's strategies against burn's attention, side by side"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Print the Markdown tables (and draw the plot) from JSON lines of earlier runs, one set
    /// per machine.
    Report {
        /// JSON-lines files: runs of this program and of `benches/peers/torch_sdpa.py`.
        inputs: Vec<PathBuf>,
        /// Draw forward and forward+backward times against seq_len into this PNG.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// The backend whose numbers the tables and the plot show.
        #[arg(long, default_value = "flex")]
        device: String,
    },
    /// Time a Hugging Face folder (`save_pretrained`'s layout; GPT-2, Llama, Qwen2, Qwen3,
    /// Mistral): the prompt processed once, and one token at a time against the key/value
    /// cache, then decoding against the memory's bandwidth; the peers are
    /// `benches/peers/hf_gpt2.py` and `benches/peers/hf_llama.py`, which also write such
    /// folders.
    #[command(alias = "hf-gpt2")]
    Hf {
        /// The model folder.
        folder: PathBuf,
        /// Prompt tokens.
        #[arg(long, default_value_t = 512)]
        prompt: usize,
        /// Backends to run on, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "flex")]
        device: Vec<String>,
        /// The type the matrices are held in: f32, or bf16 (Llama-family folders).
        #[arg(long, default_value = "f32", value_parser = ["f32", "bf16"])]
        dtype: String,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Time the native kernel (`attn/native`) with several block sizes against the ones chosen
    /// from this machine's L2 cache, alternating them round by round, each in a child process
    /// with `ATTN_NATIVE_TILING` set; print the medians (the fastest in bold).
    Tiling {
        /// Candidates, separated by `;`: each `fq,fk,bq,bk[,kb]` as `ATTN_NATIVE_TILING` takes
        /// it (forward queries and keys, backward queries and keys per block, key blocks per
        /// backward task) [default: the blocks before they followed the L2, and four others].
        #[arg(long, value_delimiter = ';')]
        candidates: Vec<String>,
        /// Sequence lengths, comma separated.
        #[arg(long, value_delimiter = ',', default_value = "512,2048,4096")]
        sizes: Vec<usize>,
        /// Rounds: each runs every candidate once.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// The CPU backend to run on.
        #[arg(long, default_value = "flex")]
        device: String,
        /// Short time budgets in the children (for a check that it works, not for figures).
        #[arg(long)]
        quick: bool,
        /// Print every child's JSON lines (each with its `tiling`) instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Run one case once and print its peak memory (the child side of `--memory`).
    #[command(name = memory::CHILD_SUBCOMMAND, hide = true)]
    MemoryCase {
        #[arg(long)]
        case: String,
        #[arg(long)]
        device: String,
        #[arg(long)]
        seq_len: usize,
    },
}

#[derive(Args, Debug)]
struct RunArgs {
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// A short set (seq_len 128 and 512, short time budget) that finishes in about a minute.
    #[arg(long)]
    quick: bool,
    /// Measure peak resident memory, each case in a fresh process, instead of time.
    #[arg(long)]
    memory: bool,
    /// Backends to run on, comma separated [default: every backend compiled in].
    #[arg(long, value_delimiter = ',')]
    device: Vec<String>,
    /// Sequence lengths, comma separated [default: 128,512,2048,4096; with --memory 2048,4096,8192,16384].
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Case filters, comma separated: a case runs when every `/`-separated part of some filter
    /// names a part of its id `impl/case/pass` (`chunked`, `burn`, `explicit/forward`).
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// Address-space limit of each `--memory` child, in GiB.
    #[arg(long, default_value_t = 16.0)]
    memory_limit_gib: f64,
    /// Print every case id and exit.
    #[arg(long)]
    list: bool,
}

fn main() -> Result<()> {
    #[cfg(feature = "mimalloc")]
    attn_train::allocator::keep_freed_memory();
    let cli = Cli::parse();
    match cli.command {
        Some(Sub::Report {
            inputs,
            plot,
            device,
        }) => {
            let records = report::load(&inputs)?;
            print!("{}", report::render(&records, &device));
            if let Some(path) = plot {
                let machines: Vec<(&str, report::Table)> = report::by_machine(&records)
                    .iter()
                    .map(|m| (m.cpu, report::medians(&report::timed(m, &device))))
                    .collect();
                plot::draw(&machines, &path, &device)?;
                println!("\nPlot written to {}", path.display());
            }
            Ok(())
        }
        Some(Sub::Hf {
            folder,
            prompt,
            device,
            dtype,
            json,
        }) => {
            let dtype = if dtype == "bf16" {
                burn::tensor::DType::BF16
            } else {
                burn::tensor::DType::F32
            };
            for name in &device {
                let on = backend::device(name).with_context(|| format!("--device {name}"))?;
                let mut run =
                    attn_bench::hf::folder_records(&folder, &on, name, prompt, dtype, &FULL)?;
                if json {
                    println!("{}", serde_json::to_string(&run.load)?);
                } else {
                    println!("{}", run.load.to_text());
                }
                for record in &run.records {
                    if json {
                        println!("{}", record.to_json()?);
                    } else {
                        println!("{}", record.to_text());
                    }
                }
                if run.records.iter().any(|r| r.error.is_some()) {
                    continue;
                }
                let wall = attn_bench::hf::MemoryWall::measure(
                    &run.model,
                    &mut run.decode,
                    attn_bench::hf::WALL_ROUNDS,
                )?;
                if json {
                    println!("{}", serde_json::to_string(&wall)?);
                } else {
                    println!("{}", wall.to_text());
                }
            }
            Ok(())
        }
        Some(Sub::Tiling {
            candidates,
            sizes,
            rounds,
            device,
            quick,
            json,
        }) => tiling::run(&candidates, &sizes, rounds, &device, quick, json),
        Some(Sub::MemoryCase {
            case,
            device,
            seq_len,
        }) => memory::child(&case, &device, seq_len),
        None => run(&cli.run),
    }
}

fn run(args: &RunArgs) -> Result<()> {
    let devices: Vec<String> = if !args.device.is_empty() {
        args.device.clone()
    } else if args.quick {
        vec![backend::default_backend().to_string()]
    } else {
        backend::COMPILED
            .iter()
            .map(|name| name.to_string())
            .collect()
    };
    let sizes = match (args.sizes.is_empty(), args.memory, args.quick) {
        (false, _, _) => args.sizes.clone(),
        (true, true, _) => memory::MEMORY_SIZES.to_vec(),
        (true, false, true) => QUICK_SIZES.to_vec(),
        (true, false, false) => SIZES.to_vec(),
    };
    let filters: Vec<String> = match (args.cases.is_empty(), args.memory) {
        (true, true) => memory::MEMORY_CASES.iter().map(|c| c.to_string()).collect(),
        _ => args.cases.clone(),
    };
    let chosen: Vec<(Case, Pass)> = all_cases()
        .filter(|(case, pass)| selected(&case.id(*pass), &filters))
        .collect();
    if args.list {
        for (case, pass) in &chosen {
            println!("{}", case.id(*pass));
        }
        return Ok(());
    }
    if chosen.is_empty() {
        bail!(
            "no case matches --cases {}; `--list` prints them",
            filters.join(",")
        );
    }
    let budget = if args.quick { &QUICK } else { &FULL };
    for device_name in &devices {
        let device =
            backend::device(device_name).with_context(|| format!("--device {device_name}"))?;
        // Cases at a fixed size (the training step) run once, after the others.
        let sized = sizes.iter().flat_map(|&s| {
            chosen
                .iter()
                .filter(|(c, _)| c.fixed_seq_len().is_none())
                .map(move |&(c, p)| (c, p, s))
        });
        let fixed = chosen
            .iter()
            .filter_map(|&(c, p)| c.fixed_seq_len().map(|s| (c, p, s)));
        for (case, pass, seq_len) in sized.chain(fixed) {
            let record = if args.memory {
                memory::in_child(&case, pass, device_name, seq_len, args.memory_limit_gib)?
            } else {
                time_case(&case, pass, &device, device_name, seq_len, budget)
            };
            if args.json {
                println!("{}", record.to_json()?);
            } else {
                println!("{}", record.to_text());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_memory_child_parses_what_the_parent_passes() {
        let cli = Cli::try_parse_from([
            "attn-bench",
            memory::CHILD_SUBCOMMAND,
            "--case",
            "attn/chunked/forward_backward",
            "--device",
            "flex",
            "--seq-len",
            "2048",
        ])
        .expect("the child's arguments parse");
        match cli.command {
            Some(Sub::MemoryCase {
                case,
                device,
                seq_len,
            }) => assert_eq!(
                (case.as_str(), device.as_str(), seq_len),
                ("attn/chunked/forward_backward", "flex", 2048)
            ),
            other => panic!("parsed as {other:?}"),
        }
    }
}
