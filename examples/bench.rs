//! Attention benchmarks side by side: this workspace's strategies against burn's own
//! `module::attention` and `nn::MultiHeadAttention`, one line per case.
//!
//! ```text
//! cargo run --release --example bench -- --json
//! ```
//!
//! Other runs:
//!
//! ```text
//! cargo run --release --example bench -- --quick                  # a short set, about a minute
//! cargo run --release --example bench -- --json --device flex --sizes 512,2048 --cases chunked,burn
//! cargo run --release --example bench -- --json --memory          # peak memory, one process per case
//! cargo run --release --features ndarray --example bench -- --json --device flex,ndarray
//! cargo run --release --example bench -- --list                   # every case id
//! cargo run --release --example bench -- report run1.jsonl torch.jsonl --plot docs/img/benchmarks.png
//! ```
//!
//! The attention shape is `[batch, n_heads, seq_len, d_head] = [1, 8, s, 64]`; the
//! multi-head cases take `[batch, seq_len, d_model] = [1, s, 512]`.
//! Each case runs once to warm up (allocator pools, GPU kernel compilation), then repeats until
//! it has both a minimum number of runs and a minimum time; the line reports the median.
//! The device is synchronised before the clock stops, so lazy backends are timed in full.
//!
//! FLOPs count matrix products only (two flops per multiply-add), as PyTorch and FlashAttention
//! do: attention forward is `4·batch·n_heads·seq_len²·d_head` (`q·kᵀ` and `weights·v`), and
//! forward plus backward is three times that (each product has two in the backward pass; the
//! recomputation some kernels do is not counted as useful work).
//!
//! `--memory` measures peak resident memory (`VmHWM` in `/proc/self/status`) instead of time:
//! each case runs once in a fresh child process (this binary re-executed with a hidden
//! subcommand), so one case's allocator high-water mark cannot leak into the next. The child runs
//! under an address-space limit (`prlimit --as`) so a case that would exhaust the machine fails
//! alone and is reported as such.
//!
//! `report` reads JSON lines from several runs (and from `benches/peers/torch_sdpa.py`), takes
//! the median of each case's medians, and prints the Markdown tables of `docs/benchmarks.md`;
//! `--plot` also draws them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use attn_core::{AttentionOptions, DEFAULT_BLOCK, Strategy, scaled_dot_product_attention};
use attn_model::{Activation, EncoderBlockConfig, NormPlacement};
use attn_train::TrainConfig;
use attn_train::backend;
use attn_train::random::Rng;
use burn::nn::activation::ActivationConfig;
use burn::nn::attention::{MhaInput, MultiHeadAttentionConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{TransformerEncoderConfig, TransformerEncoderInput};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::module::attention as burn_attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Device, Distribution, Tensor};
use clap::{Args, Parser, Subcommand};
use serde::{Deserialize, Serialize};

/// `batch` of every case: one sequence, as in the calibration runs.
const BATCH: usize = 1;
/// `n_heads` of every case.
const N_HEADS: usize = 8;
/// `d_head` of every case.
const D_HEAD: usize = 64;
/// `d_model = n_heads · d_head` of the multi-head cases.
const D_MODEL: usize = N_HEADS * D_HEAD;
/// Hidden width of the encoder block's feed-forward network (the paper's `4 · d_model`).
const D_FF: usize = 4 * D_MODEL;
/// Inputs are drawn from the device's generator, seeded so every run sees the same numbers.
const SEED: u64 = 42;

/// Sizes of the full timing set.
const SIZES: &[usize] = &[128, 512, 2048, 4096];
/// Sizes of `--quick`.
const QUICK_SIZES: &[usize] = &[128, 512];
/// Sizes of `--memory`: the growth from one to the next says whether memory is linear in s.
const MEMORY_SIZES: &[usize] = &[2048, 4096, 8192, 16384];
/// Cases of `--memory` unless `--cases` says otherwise.
const MEMORY_CASES: &[&str] = &[
    "attn/explicit",
    "attn/chunked",
    "attn/native",
    "burn/module_attention",
];

#[derive(Parser, Debug)]
#[command(about = "Attention benchmarks: attn's strategies against burn's attention, side by side")]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Print the Markdown tables (and draw the plot) from JSON lines of earlier runs.
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
    /// Run one case once and print its peak memory (the child side of `--memory`).
    #[command(hide = true)]
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

/// What a case differentiates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    /// Inference: no autodiff graph.
    Forward,
    /// Forward on an autodiff device, then `sum().backward()`.
    ForwardBackward,
}

impl Pass {
    const ALL: [Pass; 2] = [Pass::Forward, Pass::ForwardBackward];

    fn name(self) -> &'static str {
        match self {
            Pass::Forward => "forward",
            Pass::ForwardBackward => "forward_backward",
        }
    }
}

/// The computation a case times.
#[derive(Clone, Copy, Debug)]
enum Workload {
    /// `attn_core::scaled_dot_product_attention` with a forced strategy, on `[1, 8, s, 64]`.
    Attn(Strategy),
    /// `burn::tensor::module::attention` on `[1, 8, s, 64]`.
    BurnAttention,
    /// `attn_model::MultiHeadAttention` (d_model 512, 8 heads, automatic strategy) on `[1, s, 512]`.
    AttnMha,
    /// `burn::nn::attention::MultiHeadAttention` (d_model 512, 8 heads, no dropout) on `[1, s, 512]`.
    BurnMha,
    /// `attn_model::EncoderBlock` (post-norm, ReLU, d_ff 2048, no dropout) on `[1, s, 512]`.
    AttnEncoderBlock,
    /// `burn::nn::transformer::TransformerEncoder` with one layer, set up as `AttnEncoderBlock`.
    BurnEncoderBlock,
    /// One training step of the toy model of `attn-train` (its default `TrainConfig`: forward,
    /// cross-entropy, backward, Adam), at the toy model's own sizes.
    TrainStep,
}

/// One benchmarked implementation; each runs for both passes.
#[derive(Clone, Copy, Debug)]
struct Case {
    implementation: &'static str,
    name: &'static str,
    workload: Workload,
}

const CASES: &[Case] = &[
    Case {
        implementation: "attn",
        name: "explicit",
        workload: Workload::Attn(Strategy::Explicit),
    },
    Case {
        implementation: "attn",
        name: "chunked",
        workload: Workload::Attn(Strategy::Chunked {
            block: DEFAULT_BLOCK,
        }),
    },
    Case {
        implementation: "attn",
        name: "fused",
        workload: Workload::Attn(Strategy::Fused),
    },
    Case {
        implementation: "attn",
        name: "native",
        workload: Workload::Attn(Strategy::Native),
    },
    Case {
        implementation: "attn",
        name: "auto",
        workload: Workload::Attn(Strategy::Auto),
    },
    Case {
        implementation: "burn",
        name: "module_attention",
        workload: Workload::BurnAttention,
    },
    Case {
        implementation: "attn",
        name: "mha",
        workload: Workload::AttnMha,
    },
    Case {
        implementation: "burn",
        name: "mha",
        workload: Workload::BurnMha,
    },
    Case {
        implementation: "attn",
        name: "encoder_block",
        workload: Workload::AttnEncoderBlock,
    },
    Case {
        implementation: "burn",
        name: "encoder_block",
        workload: Workload::BurnEncoderBlock,
    },
    Case {
        implementation: "attn",
        name: "train_step",
        workload: Workload::TrainStep,
    },
];

impl Case {
    fn id(&self, pass: Pass) -> String {
        format!("{}/{}/{}", self.implementation, self.name, pass.name())
    }

    fn by_id(id: &str) -> Result<(Case, Pass)> {
        all_cases()
            .find(|(case, pass)| case.id(*pass) == id)
            .ok_or_else(|| anyhow!("unknown case `{id}`; `--list` prints them"))
    }

    /// The passes this case runs: a training step is always forward plus backward.
    fn passes(&self) -> &'static [Pass] {
        match self.workload {
            Workload::TrainStep => &[Pass::ForwardBackward],
            _ => &Pass::ALL,
        }
    }

    /// The sequence length of a case that ignores `--sizes` (the toy model's own).
    fn fixed_seq_len(&self) -> Option<usize> {
        match self.workload {
            Workload::TrainStep => Some(TrainConfig::default().task.seq_len),
            _ => None,
        }
    }

    /// `[batch, n_heads, seq_len, d_head]` of the case at `seq_len`.
    fn dims(&self, seq_len: usize) -> [usize; 4] {
        match self.workload {
            Workload::TrainStep => {
                let config = TrainConfig::default();
                let (n_heads, d_model) = (config.model.n_heads, config.model.d_model);
                [
                    config.batch_size,
                    n_heads,
                    config.task.seq_len,
                    d_model / n_heads,
                ]
            }
            // The layer cases' d_model is n_heads · d_head.
            _ => [BATCH, N_HEADS, seq_len, D_HEAD],
        }
    }

    /// Matrix-product FLOPs of one run, or `None` where they are not well defined.
    fn flops(&self, pass: Pass, seq_len: usize) -> Option<f64> {
        let (batch, seq_len) = (BATCH as f64, seq_len as f64);
        // q·kᵀ and weights·v: 2 products of 2·seq_len²·d_head flops per head.
        let attention = 4.0 * batch * N_HEADS as f64 * seq_len * seq_len * D_HEAD as f64;
        // The q, k, v and output projections, [seq_len, d_model]·[d_model, d_model] each.
        let projections = 4.0 * 2.0 * batch * seq_len * (D_MODEL * D_MODEL) as f64;
        // The feed-forward network, [seq_len, d_model]·[d_model, d_ff] and back.
        let feed_forward = 2.0 * 2.0 * batch * seq_len * (D_MODEL * D_FF) as f64;
        let forward = match self.workload {
            Workload::Attn(_) | Workload::BurnAttention => attention,
            Workload::AttnMha | Workload::BurnMha => attention + projections,
            Workload::AttnEncoderBlock | Workload::BurnEncoderBlock => {
                attention + projections + feed_forward
            }
            Workload::TrainStep => return None,
        };
        Some(match pass {
            Pass::Forward => forward,
            Pass::ForwardBackward => 3.0 * forward,
        })
    }
}

/// One output line. `benches/peers/torch_sdpa.py` prints the same fields.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Record {
    /// `attn`, `burn` or `torch`.
    #[serde(rename = "impl")]
    implementation: String,
    /// The case within the implementation (`chunked`, `module_attention`, `sdpa`, ...).
    case: String,
    /// `forward` or `forward_backward`.
    pass: String,
    /// Backend (`flex`, `ndarray`, `wgpu`; `cpu` for PyTorch).
    device: String,
    batch: usize,
    n_heads: usize,
    seq_len: usize,
    d_head: usize,
    /// Worker threads the backend may use.
    threads: usize,
    /// Timed runs after the warm-up.
    reps: usize,
    median_ms: Option<f64>,
    min_ms: Option<f64>,
    /// Matrix-product FLOPs per second at the median time, in units of 10⁹.
    gflops: Option<f64>,
    /// Peak resident memory of the whole process (`VmHWM`), in MiB, where measured.
    peak_rss_mib: Option<f64>,
    /// Resident memory high-water mark just before the case ran (binary, runtime, inputs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    baseline_rss_mib: Option<f64>,
    /// Why the case has no numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl Record {
    fn new(case: &Case, pass: Pass, device: &str, seq_len: usize) -> Self {
        let [batch, n_heads, seq_len, d_head] = case.dims(seq_len);
        Record {
            implementation: case.implementation.to_string(),
            case: case.name.to_string(),
            pass: pass.name().to_string(),
            device: device.to_string(),
            batch,
            n_heads,
            seq_len,
            d_head,
            threads: threads(),
            reps: 0,
            median_ms: None,
            min_ms: None,
            gflops: None,
            peak_rss_mib: None,
            baseline_rss_mib: None,
            error: None,
        }
    }

    fn with_times(mut self, case: &Case, pass: Pass, times_ms: &[f64]) -> Self {
        let median = median(times_ms);
        self.reps = times_ms.len();
        self.median_ms = median;
        self.min_ms = times_ms.iter().copied().reduce(f64::min);
        self.gflops = median
            .zip(case.flops(pass, self.seq_len))
            .map(|(ms, flops)| flops / (ms * 1e6));
        self
    }

    fn print(&self, json: bool) -> Result<()> {
        if json {
            println!("{}", serde_json::to_string(self)?);
            return Ok(());
        }
        let id = format!("{}/{}/{}", self.implementation, self.case, self.pass);
        let mut line = format!("{id:<40} {:<8} s={:<6}", self.device, self.seq_len);
        if let Some(ms) = self.median_ms {
            line += &format!(" {ms:>10.3} ms ({} runs)", self.reps);
        }
        if let Some(gflops) = self.gflops {
            line += &format!(" {gflops:>7.1} GFLOP/s");
        }
        if let Some(peak) = self.peak_rss_mib {
            line += &format!(" peak {peak:>8.1} MiB");
        }
        if let Some(error) = &self.error {
            line += &format!(" error: {error}");
        }
        println!("{line}");
        Ok(())
    }
}

/// How long each case runs: until it has `min_reps` runs and `target` time, but never past
/// `max_reps` runs or (once it has 3 runs) `max_time`.
struct Budget {
    min_reps: usize,
    max_reps: usize,
    target: Duration,
    max_time: Duration,
}

const FULL: Budget = Budget {
    min_reps: 5,
    max_reps: 200,
    target: Duration::from_secs(2),
    max_time: Duration::from_secs(20),
};
const QUICK: Budget = Budget {
    min_reps: 3,
    max_reps: 50,
    target: Duration::from_millis(250),
    max_time: Duration::from_secs(3),
};

/// One run of a case with its inputs already built; it synchronises the device before returning.
type Step = Box<dyn FnMut() -> Result<()>>;

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Sub::Report {
            inputs,
            plot,
            device,
        }) => report(&inputs, plot.as_deref(), &device),
        Some(Sub::MemoryCase {
            case,
            device,
            seq_len,
        }) => memory_child(&case, &device, seq_len),
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
        (true, true, _) => MEMORY_SIZES.to_vec(),
        (true, false, true) => QUICK_SIZES.to_vec(),
        (true, false, false) => SIZES.to_vec(),
    };
    let filters: Vec<String> = match (args.cases.is_empty(), args.memory) {
        (true, true) => MEMORY_CASES.iter().map(|c| c.to_string()).collect(),
        _ => args.cases.clone(),
    };
    let selected: Vec<(Case, Pass)> = all_cases()
        .filter(|(case, pass)| selected(&case.id(*pass), &filters))
        .collect();
    if args.list {
        for (case, pass) in &selected {
            println!("{}", case.id(*pass));
        }
        return Ok(());
    }
    if selected.is_empty() {
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
            selected
                .iter()
                .filter(|(c, _)| c.fixed_seq_len().is_none())
                .map(move |&(c, p)| (c, p, s))
        });
        let fixed = selected
            .iter()
            .filter_map(|&(c, p)| c.fixed_seq_len().map(|s| (c, p, s)));
        for (case, pass, seq_len) in sized.chain(fixed) {
            let record = if args.memory {
                memory_parent(&case, pass, device_name, seq_len, args.memory_limit_gib)?
            } else {
                time_case(&case, pass, &device, device_name, seq_len, budget)
            };
            record.print(args.json)?;
        }
    }
    Ok(())
}

/// Every case with every pass it runs.
fn all_cases() -> impl Iterator<Item = (Case, Pass)> {
    CASES
        .iter()
        .flat_map(|case| case.passes().iter().map(|&pass| (*case, pass)))
}

/// Whether the case `id` (`impl/case/pass`) passes the filters (none means every case).
fn selected(id: &str, filters: &[String]) -> bool {
    let parts: Vec<&str> = id.split('/').collect();
    filters.is_empty()
        || filters
            .iter()
            .any(|f| f.split('/').all(|want| parts.contains(&want)))
}

fn time_case(
    case: &Case,
    pass: Pass,
    device: &Device,
    device_name: &str,
    seq_len: usize,
    budget: &Budget,
) -> Record {
    let record = Record::new(case, pass, device_name, seq_len);
    let times =
        prepare(case, pass, device, seq_len).and_then(|mut step| measure(&mut step, budget));
    match times {
        Ok(times) => record.with_times(case, pass, &times),
        Err(e) => Record {
            error: Some(format!("{e:#}")),
            ..record
        },
    }
}

/// Times `step`: one warm-up run, then runs until the budget says stop. Milliseconds.
fn measure(step: &mut Step, budget: &Budget) -> Result<Vec<f64>> {
    step()?;
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < budget.max_reps {
        let clock = Instant::now();
        step()?;
        times.push(clock.elapsed().as_secs_f64() * 1e3);
        let spent = start.elapsed();
        if (times.len() >= budget.min_reps && spent >= budget.target)
            || (times.len() >= 3 && spent >= budget.max_time)
        {
            break;
        }
    }
    Ok(times)
}

/// Builds the inputs of a case and returns one run of it.
fn prepare(case: &Case, pass: Pass, device: &Device, seq_len: usize) -> Result<Step> {
    let device = match pass {
        Pass::ForwardBackward => device.clone().autodiff(),
        _ => device.clone(),
    };
    device.seed(SEED);
    let normal = Distribution::Normal(0.0, 1.0);
    match case.workload {
        Workload::Attn(_) | Workload::BurnAttention => {
            let workload = case.workload;
            let shape = [BATCH, N_HEADS, seq_len, D_HEAD];
            let input = || Tensor::<4>::random(shape, normal, &device); // [batch, n_heads, seq_len, d_head]
            let (q, k, v) = (input(), input(), input());
            Ok(match pass {
                Pass::Forward => Box::new(move || {
                    let context = attend(workload, q.clone(), k.clone(), v.clone());
                    finish(&device, context)
                }),
                Pass::ForwardBackward => {
                    let (q, k, v) = (q.require_grad(), k.require_grad(), v.require_grad());
                    Box::new(move || {
                        let context = attend(workload, q.clone(), k.clone(), v.clone());
                        let grads = context.sum().backward();
                        let dq = q.grad(&grads).context("q has no gradient")?;
                        finish(&device, dq)
                    })
                }
            })
        }
        Workload::TrainStep => train_step(&device),
        Workload::AttnMha
        | Workload::BurnMha
        | Workload::AttnEncoderBlock
        | Workload::BurnEncoderBlock => {
            let layer = layer(case.workload, &device)?;
            let x = Tensor::<3>::random([BATCH, seq_len, D_MODEL], normal, &device); // [batch, seq_len, d_model]
            Ok(match pass {
                Pass::Forward => Box::new(move || finish(&device, layer(x.clone()))),
                Pass::ForwardBackward => {
                    let x = x.require_grad();
                    Box::new(move || {
                        let grads = layer(x.clone()).sum().backward();
                        let dx = x.grad(&grads).context("x has no gradient")?;
                        finish(&device, dx)
                    })
                }
            })
        }
    }
}

/// One step of `attn-train`'s loop on its toy model, with the pieces the crate exports: the
/// default `TrainConfig`'s task, model and learning rate, cross-entropy over classes, Adam.
/// One fixed batch is reused, so the clock sees the step and not the data generator.
fn train_step(device: &Device) -> Result<Step> {
    let config = TrainConfig::default();
    let mut model = Some(config.encoder_config().init(device)?);
    let mut optim = AdamConfig::new().init();
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let batch = config.task.batch(config.batch_size, &mut Rng::new(SEED));
    let [batch_size, seq_len] = [batch.batch, batch.seq_len];
    let tokens = batch.tokens_tensor(device); // [batch, seq_len]
    let targets = batch.targets_tensor(device).reshape([batch_size * seq_len]); // [batch * seq_len]
    let lr = config.optim.lr;
    let device = device.clone();
    Ok(Box::new(move || {
        let encoder = model
            .take()
            .context("an earlier step failed and lost the model")?;
        let logits = encoder.forward(tokens.clone()); // [batch, seq_len, n_classes]
        let [_, _, n_classes] = logits.dims();
        let logits = logits.reshape([batch_size * seq_len, n_classes]); // [batch * seq_len, n_classes]
        let loss = loss_fn.forward(logits, targets.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &encoder);
        model = Some(optim.step(lr, encoder, grads));
        finish(&device, loss)
    }))
}

/// A layer from `[batch, seq_len, d_model]` to `[batch, seq_len, d_model]`.
type Layer = Box<dyn Fn(Tensor<3>) -> Tensor<3>>;

/// The module of a layer workload, initialised on `device`; no dropout anywhere, so forward and
/// backward do the same work in every implementation.
fn layer(workload: Workload, device: &Device) -> Result<Layer> {
    Ok(match workload {
        Workload::AttnMha => {
            let mha = attn_model::MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
                .with_dropout(0.0)
                .init(device)?;
            Box::new(move |x| mha.forward(attn_model::MhaInput::self_attention(x)).output)
        }
        Workload::BurnMha => {
            let mha = MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
                .with_dropout(0.0)
                .init(device);
            Box::new(move |x| mha.forward(MhaInput::self_attn(x)).context)
        }
        Workload::AttnEncoderBlock => {
            let block = EncoderBlockConfig::new(D_MODEL, N_HEADS, D_FF)
                .with_dropout(0.0)
                .with_norm(NormPlacement::Post)
                .with_activation(Activation::Relu)
                .init(device)?;
            Box::new(move |x| block.forward(x, None))
        }
        Workload::BurnEncoderBlock => {
            let encoder = TransformerEncoderConfig::new(D_MODEL, D_FF, N_HEADS, 1)
                .with_dropout(0.0)
                .with_norm_first(false)
                .with_activation(ActivationConfig::Relu)
                .init(device);
            Box::new(move |x| encoder.forward(TransformerEncoderInput::new(x)))
        }
        Workload::Attn(_) | Workload::BurnAttention | Workload::TrainStep => {
            bail!("{workload:?} is not a layer")
        }
    })
}

/// The attention context `[batch, n_heads, seq_len, d_head]` of an attention workload.
fn attend(workload: Workload, q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    match workload {
        Workload::Attn(strategy) => {
            let options = AttentionOptions::new().with_strategy(strategy);
            scaled_dot_product_attention(q, k, v, &options).context
        }
        Workload::BurnAttention => {
            burn_attention(q, k, v, None, None, AttentionModuleOptions::default())
        }
        _ => unreachable!("prepare() sends only attention kernels here"),
    }
}

/// Waits for the device to finish the run's work (lazy backends would otherwise stop the clock
/// early), then lets the result go.
///
/// The result is summed and the sum read back first: a lazy backend that fuses operations
/// could otherwise skip work whose output nobody reads. The sum reads the output once, which
/// is small next to the attention that made it.
fn finish<const D: usize>(device: &Device, result: Tensor<D>) -> Result<()> {
    let total = result
        .sum()
        .try_into_data()
        .map_err(|e| anyhow!("reading the result back failed: {e:?}"))?;
    device
        .sync()
        .map_err(|e| anyhow!("device sync failed: {e:?}"))?;
    drop(total);
    Ok(())
}

/// Worker threads of the CPU backends: rayon's `RAYON_NUM_THREADS`, else one per core.
fn threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

// ---------------------------------------------------------------------------------------------
// Peak memory: one child process per case.
// ---------------------------------------------------------------------------------------------

/// Runs one memory case in a fresh child process under an address-space limit.
fn memory_parent(
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
            "memory-case",
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
    // An allocation failure or a panic says why; the last line is often a backtrace hint.
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let why = lines
        .iter()
        .position(|l| l.contains("memory allocation of") || l.contains("panicked at"))
        .map(|i| lines[i..(i + 2).min(lines.len())].join(" "))
        .or_else(|| lines.last().map(|l| l.to_string()))
        .unwrap_or_else(|| "no message".to_string());
    let limit = if has_prlimit {
        format!(" (address-space limit {limit_gib} GiB)")
    } else {
        String::new()
    };
    Ok(Record {
        error: Some(format!("child {}{limit}: {why}", output.status)),
        ..Record::new(case, pass, device, seq_len)
    })
}

/// The child side: builds the inputs, runs the case once, and prints the high-water marks.
fn memory_child(id: &str, device_name: &str, seq_len: usize) -> Result<()> {
    let (case, pass) = Case::by_id(id)?;
    let device = backend::device(device_name)?;
    let mut step = prepare(&case, pass, &device, seq_len)?;
    let baseline = peak_rss_mib()?;
    let clock = Instant::now();
    step()?;
    let ms = clock.elapsed().as_secs_f64() * 1e3;
    let record = Record {
        peak_rss_mib: Some(peak_rss_mib()?),
        baseline_rss_mib: Some(baseline),
        ..Record::new(&case, pass, device_name, seq_len).with_times(&case, pass, &[ms])
    };
    record.print(true)
}

/// This process's resident-memory high-water mark (`VmHWM`), in MiB.
fn peak_rss_mib() -> Result<f64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .context("/proc/self/status has no VmHWM line")?;
    let kib: f64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .with_context(|| format!("cannot read `{line}`"))?;
    Ok(kib / 1024.0)
}

// ---------------------------------------------------------------------------------------------
// Report: tables and plot from JSON lines.
// ---------------------------------------------------------------------------------------------

/// `(impl, case, pass, seq_len)` → median over runs of the median milliseconds.
type Table = BTreeMap<(String, String, String, usize), f64>;

fn report(inputs: &[PathBuf], plot_path: Option<&Path>, device: &str) -> Result<()> {
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
    // PyTorch runs on the CPU: its numbers are the peers of every CPU backend.
    let mine =
        |r: &Record| r.device == device || (r.implementation == "torch" && r.device == "cpu");
    let timed: Vec<&Record> = records
        .iter()
        .filter(|r| mine(r) && r.peak_rss_mib.is_none())
        .collect();
    let table = medians(&timed);
    let runs = timed
        .iter()
        .filter(|r| r.implementation == "attn" && r.case == "auto" && r.pass == "forward")
        .map(|r| (r.seq_len, 1))
        .fold(BTreeMap::<usize, usize>::new(), |mut m, (s, n)| {
            *m.entry(s).or_default() += n;
            m
        });
    println!("Runs per size (attn/auto/forward on {device}): {runs:?}\n");
    for pass in ["forward", "forward_backward"] {
        print_attention_table(&table, pass, device);
        print_layer_table(&table, "mha", pass, device);
        print_layer_table(&table, "encoder_block", pass, device);
    }
    for r in timed.iter().filter(|r| r.case == "train_step") {
        println!(
            "One training step of the toy model (batch {}, seq_len {}, {} heads of {}) on {device}: {} ms median over {} steps\n",
            r.batch,
            r.seq_len,
            r.n_heads,
            r.d_head,
            ms(r.median_ms),
            r.reps
        );
    }
    let memory: Vec<&Record> = records
        .iter()
        .filter(|r| r.peak_rss_mib.is_some() || r.error.is_some())
        .collect();
    print_memory_table(&memory);
    if let Some(path) = plot_path {
        plot(&table, path, device)?;
        println!("\nPlot written to {}", path.display());
    }
    Ok(())
}

fn medians(records: &[&Record]) -> Table {
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

fn lookup(
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

/// The sequence lengths measured for `pass` (the training step, at its own size, has its line).
fn sizes_in(table: &Table, pass: &str) -> Vec<usize> {
    let mut sizes: Vec<usize> = table
        .keys()
        .filter(|k| k.2 == pass && k.1 != "train_step")
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

fn print_attention_table(table: &Table, pass: &str, device: &str) {
    let sizes = sizes_in(table, pass);
    if sizes.is_empty() {
        return;
    }
    println!("#### Attention {pass}, `[1, 8, s, 64]`, {device}, median ms\n");
    println!(
        "| s | attn auto | attn explicit | attn chunked | attn fused | attn native | burn `module::attention` | PyTorch SDPA | auto vs burn | auto vs PyTorch | best attn vs PyTorch |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for s in sizes {
        let ours = |case| lookup(table, "attn", case, pass, s);
        let auto = ours("auto");
        let best = ["explicit", "chunked", "fused", "native", "auto"]
            .into_iter()
            .filter_map(ours)
            .reduce(f64::min);
        let burn = lookup(table, "burn", "module_attention", pass, s);
        let torch = lookup(table, "torch", "sdpa", pass, s);
        println!(
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
        );
    }
    println!();
}

fn print_layer_table(table: &Table, case: &str, pass: &str, device: &str) {
    let sizes: Vec<usize> = sizes_in(table, pass)
        .into_iter()
        .filter(|&s| {
            ["attn", "burn"]
                .iter()
                .any(|i| lookup(table, i, case, pass, s).is_some())
        })
        .collect();
    if sizes.is_empty() {
        return;
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
    println!("#### {title} {pass}, `[1, s, 512]`, 8 heads, {device}, median ms\n");
    println!(
        "| s | attn | burn {burn_name} | PyTorch {torch_name} | attn vs burn | attn vs PyTorch |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for s in sizes {
        let attn = lookup(table, "attn", case, pass, s);
        let burn = lookup(table, "burn", case, pass, s);
        let torch = lookup(table, "torch", case, pass, s);
        println!(
            "| {s} | {} | {} | {} | {} | {} |",
            ms(attn),
            ms(burn),
            ms(torch),
            ratio(attn, burn),
            ratio(attn, torch)
        );
    }
    println!();
}

fn print_memory_table(records: &[&Record]) {
    if records.is_empty() {
        return;
    }
    println!("#### Peak resident memory (VmHWM), `[1, 8, s, 64]`, one process per case\n");
    println!(
        "| case | device | s | peak MiB | before the case MiB | growth MiB | one `[s, s]` score matrix MiB | time ms |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for r in records {
        let scores_mib =
            (r.batch * r.n_heads * r.seq_len * r.seq_len * 4) as f64 / (1024.0 * 1024.0);
        let growth = r.peak_rss_mib.zip(r.baseline_rss_mib).map(|(p, b)| p - b);
        let number = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.0}"));
        let peak = match &r.error {
            Some(e) => format!("failed: {e}"),
            None => number(r.peak_rss_mib),
        };
        println!(
            "| {}/{}/{} | {} | {} | {peak} | {} | {} | {scores_mib:.0} | {} |",
            r.implementation,
            r.case,
            r.pass,
            r.device,
            r.seq_len,
            number(r.baseline_rss_mib),
            number(growth),
            number(r.median_ms),
        );
    }
    println!();
}

fn plot(table: &Table, path: &Path, device: &str) -> Result<()> {
    use plotters::prelude::*;

    attn_train::plot::ensure_font().map_err(|reason| anyhow!(reason))?;
    let series: [(&str, &str, &str); 7] = [
        ("attn", "auto", "attn auto"),
        ("attn", "explicit", "attn explicit"),
        ("attn", "chunked", "attn chunked"),
        ("attn", "fused", "attn fused"),
        ("attn", "native", "attn native"),
        ("burn", "module_attention", "burn module::attention"),
        ("torch", "sdpa", "PyTorch SDPA"),
    ];
    let root = BitMapBackend::new(path, (1400, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 2));
    for (area, pass) in panels.iter().zip(["forward", "forward_backward"]) {
        let lines: Vec<(&str, Vec<(f64, f64)>)> = series
            .iter()
            .map(|&(implementation, case, label)| {
                let points = sizes_in(table, pass)
                    .into_iter()
                    .filter_map(|s| {
                        lookup(table, implementation, case, pass, s).map(|ms| (s as f64, ms))
                    })
                    .collect();
                (label, points)
            })
            .collect();
        let all: Vec<(f64, f64)> = lines.iter().flat_map(|(_, p)| p.iter().copied()).collect();
        if all.is_empty() {
            continue;
        }
        let (x_min, x_max) = all.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            (lo.min(p.0), hi.max(p.0))
        });
        let (y_min, y_max) = all.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            (lo.min(p.1), hi.max(p.1))
        });
        let title = format!("{} on {device}, [1, 8, s, 64]", pass.replace('_', " + "));
        let mut chart = ChartBuilder::on(area)
            .caption(title, ("sans-serif", 24))
            .margin(20)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(
                (x_min * 0.8..x_max * 1.25).log_scale(),
                (y_min * 0.7..y_max * 1.5).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_desc("seq_len s")
            .y_desc("median ms (log scale)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y}"))
            .label_style(("sans-serif", 15))
            .draw()?;
        for (i, (label, points)) in lines.iter().enumerate() {
            if points.is_empty() {
                continue;
            }
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(*label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 16))
            .draw()?;
    }
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
