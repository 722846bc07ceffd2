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
use attn_pos::PositionalScheme;
use attn_train::backend;
use attn_train::config::{Act, Norm, OptimizerKind, PosName, TrainConfig};
use attn_train::schedule::Decay;
use attn_train::tasks::TaskKind;
use attn_train::train::{self, RunOptions};
use clap::{ArgGroup, Parser};

/// Train a Transformer encoder on a synthetic sequence task.
#[derive(Parser, Debug)]
#[command(name = "attn-train", version, about, long_about = None)]
#[command(group(ArgGroup::new("shape").multiple(true)))]
struct Cli {
    /// The task: copy, reverse, sort, or context (the "apple" problem).
    #[arg(long, value_enum, group = "shape")]
    task: Option<TaskKind>,
    /// Backend; one compiled into this build (see --help for the list and the feature that adds
    /// another). Default: flex.
    #[arg(long, value_name = "flex|ndarray|wgpu|vulkan|metal|cuda")]
    device: Option<String>,
    /// Optimizer updates (the learning-rate schedule spans them).
    #[arg(long)]
    steps: Option<usize>,
    /// Sequences per update.
    #[arg(long, group = "shape")]
    batch_size: Option<usize>,
    /// Tokens per sequence.
    #[arg(long, group = "shape")]
    seq_len: Option<usize>,
    /// Distinct symbols for copy, reverse and sort.
    #[arg(long, group = "shape")]
    vocab: Option<usize>,
    /// context: least distance between the ambiguous word and its cue.
    #[arg(long, group = "shape")]
    min_distance: Option<usize>,
    /// context: the long-range setting, the cue 30 or more positions away (seq_len 48 unless
    /// --seq-len says otherwise).
    #[arg(long, group = "shape")]
    long_range: bool,
    /// Model width.
    #[arg(long, group = "shape")]
    d_model: Option<usize>,
    /// Attention heads per layer.
    #[arg(long, group = "shape")]
    n_heads: Option<usize>,
    /// Encoder layers.
    #[arg(long, group = "shape")]
    n_layers: Option<usize>,
    /// Feed-forward hidden width.
    #[arg(long, group = "shape")]
    d_ff: Option<usize>,
    /// Dropout probability while training.
    #[arg(long, group = "shape")]
    dropout: Option<f64>,
    /// Positional scheme.
    #[arg(long, value_enum, group = "shape")]
    pos: Option<PosName>,
    /// LayerNorm placement. `post` drops the final LayerNorm unless --final-norm true keeps it.
    #[arg(long, value_enum, group = "shape")]
    norm: Option<Norm>,
    /// A LayerNorm after the last layer (default: with pre-norm, not with post-norm, whose
    /// last block already ends in one).
    #[arg(long, group = "shape")]
    final_norm: Option<bool>,
    /// Feed-forward non-linearity.
    #[arg(long, value_enum, group = "shape")]
    activation: Option<Act>,
    /// Adam or AdamW.
    #[arg(long, value_enum, group = "shape")]
    optimizer: Option<OptimizerKind>,
    /// Peak learning rate.
    #[arg(long, group = "shape")]
    lr: Option<f64>,
    /// Warm-up updates.
    #[arg(long, group = "shape")]
    warmup_steps: Option<usize>,
    /// Learning-rate decay after warm-up.
    #[arg(long, value_enum, group = "shape")]
    decay: Option<Decay>,
    /// Weight decay (AdamW: decoupled; Adam: added to the gradient).
    #[arg(long, group = "shape")]
    weight_decay: Option<f64>,
    /// Largest global gradient norm; 0 turns clipping off.
    #[arg(long, group = "shape")]
    grad_clip: Option<f32>,
    /// Evaluate every this many steps.
    #[arg(long, group = "shape")]
    eval_every: Option<usize>,
    /// Held-out sequences.
    #[arg(long, group = "shape")]
    eval_sequences: Option<usize>,
    /// Checkpoint every this many steps (0: only at the end).
    #[arg(long, group = "shape")]
    checkpoint_every: Option<usize>,
    /// Seed of every random stream.
    #[arg(long, group = "shape")]
    seed: Option<u64>,
    /// Read the configuration from a JSON file (flags override it).
    #[arg(long, value_name = "FILE.json", group = "shape")]
    config: Option<PathBuf>,
    /// Output folder. Default: runs/<task>.
    #[arg(long, value_name = "DIR", conflicts_with = "resume")]
    out: Option<PathBuf>,
    /// Continue the run in DIR from its last checkpoint, with the configuration saved there
    /// (only --steps, --device and --stop-at may be given with it).
    #[arg(long, value_name = "DIR", conflicts_with = "shape")]
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
    let cli = Cli::parse();
    let options = RunOptions {
        out: None,
        resume: false,
        stop_at: cli.stop_at,
        progress: !cli.quiet,
        skip_plots: cli.no_plots,
    };

    let summary = if let Some(dir) = &cli.resume {
        let mut config = train::read_config(dir)
            .with_context(|| format!("reading the run to resume in {}", dir.display()))?;
        if let Some(steps) = cli.steps {
            config.steps = steps;
        }
        if let Some(device) = &cli.device {
            config.device = device.clone();
        }
        check_device(&config.device)?;
        let options = RunOptions {
            out: Some(dir.clone()),
            resume: true,
            ..options
        };
        train::run(&config, &options).with_context(|| format!("resuming {}", dir.display()))?
    } else {
        let config = build_config(&cli)?;
        check_device(&config.device)?;
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

/// Fails early, with the feature to enable, on a backend this build does not have.
fn check_device(name: &str) -> Result<()> {
    backend::device(name).with_context(|| format!("choosing the backend `{name}`"))?;
    Ok(())
}

/// Defaults, then the `--config` file, then the flags.
fn build_config(cli: &Cli) -> Result<TrainConfig> {
    let mut c = match &cli.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            TrainConfig::from_json(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => TrainConfig::default(),
    };
    let set = |slot: &mut usize, value: Option<usize>| {
        if let Some(v) = value {
            *slot = v;
        }
    };
    if let Some(kind) = cli.task {
        c.task.kind = kind;
    }
    if cli.long_range {
        if c.task.kind != TaskKind::Context {
            bail!("--long-range applies to --task context only");
        }
        c.task.min_distance = 30;
        c.task.seq_len = 48;
    }
    set(&mut c.task.seq_len, cli.seq_len);
    set(&mut c.task.vocab, cli.vocab);
    set(&mut c.task.min_distance, cli.min_distance);
    set(&mut c.model.d_model, cli.d_model);
    set(&mut c.model.n_heads, cli.n_heads);
    set(&mut c.model.n_layers, cli.n_layers);
    set(&mut c.model.d_ff, cli.d_ff);
    if let Some(p) = cli.dropout {
        c.model.dropout = p;
    }
    if let Some(pos) = cli.pos {
        c.model.pos = pos.scheme(c.task.seq_len);
    }
    // A learned table follows the sequence length unless a config file sized it on purpose.
    if let PositionalScheme::Learned { max_len } = &mut c.model.pos
        && (cli.seq_len.is_some() || cli.long_range || cli.pos.is_some())
    {
        *max_len = c.task.seq_len;
    }
    if let Some(n) = cli.norm {
        c.model.norm = n;
        c.model.final_norm = n == Norm::Pre;
    }
    if let Some(f) = cli.final_norm {
        c.model.final_norm = f;
    }
    if let Some(a) = cli.activation {
        c.model.activation = a;
    }
    if let Some(k) = cli.optimizer {
        c.optim.kind = k;
    }
    if let Some(lr) = cli.lr {
        c.optim.lr = lr;
    }
    set(&mut c.optim.warmup_steps, cli.warmup_steps);
    if let Some(d) = cli.decay {
        c.optim.decay = d;
    }
    if let Some(w) = cli.weight_decay {
        c.optim.weight_decay = w;
    }
    if let Some(clip) = cli.grad_clip {
        c.optim.grad_clip = (clip > 0.0).then_some(clip);
    }
    set(&mut c.steps, cli.steps);
    set(&mut c.batch_size, cli.batch_size);
    set(&mut c.eval_every, cli.eval_every);
    set(&mut c.eval_sequences, cli.eval_sequences);
    set(&mut c.checkpoint_every, cli.checkpoint_every);
    if let Some(seed) = cli.seed {
        c.seed = seed;
    }
    if let Some(device) = &cli.device {
        c.device = device.clone();
    }
    c.validate().context("checking the configuration")?;
    Ok(c)
}
