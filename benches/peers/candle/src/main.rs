//! candle peer for Llama-family folders: load, prefill and cached decode on the CPU.
//!
//! The Rust counterpart of `benches/peers/hf_llama.py time`: the same folders (written by
//! transformers' `save_pretrained`), the same measurements and the same JSON lines, with the
//! model run by candle-transformers' own `models::llama` or `models::qwen2`. `check` prints the
//! logits of a short greedy continuation, for `check.py` to compare with transformers.
//! See README.md.

use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{llama, qwen2};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{json, Map, Value};

const CANDLE_VERSION: &str = env!("CANDLE_VERSION");

/// The instruction sets of crates/attn-bench/src/machine.rs and benches/peers/torch_sdpa.py
/// (X86_FEATURES), with the name each has among the flags of /proc/cpuinfo.
const X86_FEATURES: &[(&str, &str)] = &[
    ("avx2", "avx2"),
    ("fma", "fma"),
    ("avx512f", "avx512f"),
    ("avx512cd", "avx512cd"),
    ("avx512bw", "avx512bw"),
    ("avx512dq", "avx512dq"),
    ("avx512vl", "avx512vl"),
    ("avx512bf16", "avx512_bf16"),
    ("avx512fp16", "avx512_fp16"),
    ("amx-tile", "amx_tile"),
    ("amx-bf16", "amx_bf16"),
];

#[derive(Parser)]
#[command(
    name = "candle-peer",
    about = "candle peer for Llama-family folders: load, prefill \
                                         and cached decode on the CPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Time one folder: load, prefill and decode, one JSON line per measurement on stdout.
    Time(TimeArgs),
    /// Print one JSON object with the logits of a greedy continuation of a seeded prompt.
    Check(CheckArgs),
}

#[derive(Args)]
struct Common {
    /// A folder written by transformers' save_pretrained (config.json, *.safetensors).
    folder: PathBuf,
    /// Threads of candle's CPU backend (RAYON_NUM_THREADS and CANDLE_NUM_THREADS).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Load the weights as this type instead of the type stored in the folder.
    #[arg(long, value_enum)]
    dtype: Option<DtypeArg>,
}

#[derive(Args)]
struct TimeArgs {
    #[command(flatten)]
    common: Common,
    /// Timed runs per measurement, after one warm-up.
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Prompt tokens of prefill.
    #[arg(long, default_value_t = 512)]
    prefill_len: usize,
    /// Comma-separated decode contexts.
    #[arg(long, value_delimiter = ',', default_value = "128,1024")]
    contexts: Vec<usize>,
    /// Single-token forwards per decode run.
    #[arg(long, default_value_t = 16)]
    decode_tokens: usize,
    /// Seed of the prompts and tokens.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

#[derive(Args)]
struct CheckArgs {
    #[command(flatten)]
    common: Common,
    /// Tokens of the seeded prompt.
    #[arg(long, default_value_t = 12)]
    prompt_len: usize,
    /// Forwards: the prompt's prefill, then steps - 1 greedy tokens through the cache.
    #[arg(long, default_value_t = 8)]
    steps: usize,
    /// Seed of the prompt.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum DtypeArg {
    F32,
    Bf16,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let threads = match &cli.command {
        Command::Time(a) => a.common.threads,
        Command::Check(a) => a.common.threads,
    };
    if threads < 1 {
        bail!("--threads must be at least 1");
    }
    // candle sizes its CPU thread pools from these variables when each pool first starts
    // (rayon's global pool and candle's own pool from RAYON_NUM_THREADS, the barrier pool
    // of the quantized and flash-attention kernels from CANDLE_NUM_THREADS), and hands gemm
    // `get_num_threads()` on every matmul. No pool has started yet: set them first.
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    std::env::set_var("CANDLE_NUM_THREADS", threads.to_string());
    let effective = candle_core::utils::get_num_threads();
    if effective != threads {
        bail!("candle reports {effective} threads, not the {threads} asked for");
    }
    // The barrier pool runs large elementwise ops on its workers and the calling thread.
    let barrier = candle_core::utils::barrier_pool().n_workers() + 1;
    if barrier != threads {
        bail!("candle's barrier pool has {barrier} threads, not the {threads} asked for");
    }
    // Everything runs inside candle's private CPU pool (`Device::with_context`), which keeps
    // its workers warm between the many short parallel sections of a forward.
    Device::Cpu.with_context(move || match cli.command {
        Command::Time(args) => time_folder(args),
        Command::Check(args) => check_folder(args),
    })
}

/// A model as candle-transformers builds it, with what a fresh cache needs.
enum Model {
    /// `llama::Llama` keeps its key/value cache (and the rotary tables) in a separate
    /// `llama::Cache`; `fresh` is one with no tokens, made at load.
    Llama {
        model: llama::Llama,
        fresh: llama::Cache,
    },
    /// `qwen2::ModelForCausalLM` keeps its cache inside its attention layers.
    Qwen2(qwen2::ModelForCausalLM),
}

/// The state one sequence runs through: a cache, or for qwen2 a copy of the model holding it.
/// Cloning either shares the weights and the cached tensors (candle tensors are reference
/// counted and never written in place by these models, which build a new key/value tensor
/// at every step), so a clone is a snapshot that later steps on another clone leave as is.
#[derive(Clone)]
enum State {
    Llama(llama::Cache),
    Qwen2(qwen2::ModelForCausalLM),
}

impl Model {
    fn fresh(&self) -> State {
        match self {
            Model::Llama { fresh, .. } => State::Llama(fresh.clone()),
            Model::Qwen2(model) => {
                let mut model = model.clone();
                model.clear_kv_cache();
                State::Qwen2(model)
            }
        }
    }

    /// One forward of `ids` (batch 1, shape (1, n)) at positions `pos..pos + n`, through and
    /// into the state's cache; the logits of the last position (both models compute no others).
    fn forward(&self, state: &mut State, ids: &Tensor, pos: usize) -> Result<Tensor> {
        Ok(match (self, state) {
            (Model::Llama { model, .. }, State::Llama(cache)) => model.forward(ids, pos, cache)?,
            (Model::Qwen2(_), State::Qwen2(model)) => model.forward(ids, pos)?,
            _ => unreachable!("a state of another model"),
        })
    }
}

struct Loaded {
    folder: String,
    architecture: String,
    dtype_name: &'static str,
    vocab: usize,
    max_positions: usize,
    model: Model,
    load_s: f64,
    rss_before: u64,
    peak_rss: u64,
    weights_bytes: u64,
}

fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float32",
        DType::BF16 => "bfloat16",
        DType::F16 => "float16",
        _ => "other",
    }
}

fn safetensors_files(folder: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = fs::read_dir(folder)
        .with_context(|| format!("reading {}", folder.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("{} holds no *.safetensors weights", folder.display());
    }
    Ok(files)
}

/// The one weight type of the folder's safetensors files, from their headers.
fn folder_dtype(files: &[PathBuf]) -> Result<DType> {
    let mut found = BTreeSet::new();
    for path in files {
        let mut file =
            fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let mut size = [0u8; 8];
        file.read_exact(&mut size)?;
        let mut header = vec![0u8; u64::from_le_bytes(size) as usize];
        file.read_exact(&mut header)?;
        let header: Map<String, Value> = serde_json::from_slice(&header)
            .with_context(|| format!("the safetensors header of {}", path.display()))?;
        for (name, entry) in &header {
            if name != "__metadata__" {
                found.insert(entry["dtype"].as_str().unwrap_or("?").to_string());
            }
        }
    }
    if found.len() != 1 {
        bail!("expected one weight dtype of F32, BF16, F16, found {found:?}");
    }
    match found.into_iter().next().unwrap().as_str() {
        "F32" => Ok(DType::F32),
        "BF16" => Ok(DType::BF16),
        "F16" => Ok(DType::F16),
        other => bail!("weights of dtype {other}: expected F32, BF16 or F16"),
    }
}

/// The rotary base: top-level `rope_theta` (transformers 4), or `rope_parameters.rope_theta`
/// (transformers 5). Only the default rotary embedding is accepted.
fn rope_theta(config: &Value) -> Result<Option<f64>> {
    if let Some(scaling) = config.get("rope_scaling").filter(|v| !v.is_null()) {
        let kind = scaling.get("rope_type").or_else(|| scaling.get("type"));
        if kind.and_then(Value::as_str) != Some("default") {
            bail!("rope_scaling {scaling} is not supported by this program");
        }
    }
    if let Some(theta) = config.get("rope_theta").and_then(Value::as_f64) {
        return Ok(Some(theta));
    }
    if let Some(params) = config.get("rope_parameters").filter(|v| !v.is_null()) {
        let kind = params
            .get("rope_type")
            .and_then(Value::as_str)
            .unwrap_or("default");
        if kind != "default" {
            bail!("rope_type {kind:?} is not supported by this program");
        }
        return Ok(params.get("rope_theta").and_then(Value::as_f64));
    }
    Ok(None)
}

fn usize_field(config: &Value, name: &str) -> Result<usize> {
    config
        .get(name)
        .and_then(Value::as_u64)
        .map(|v| v as usize)
        .ok_or_else(|| anyhow!("config.json has no {name}"))
}

/// config.json as candle's `llama::LlamaConfig` reads it: the rotary base moved to the top
/// level, and a refusal of what candle's Llama does not implement.
fn llama_config(config: &Value) -> Result<llama::Config> {
    let mut patched = config.clone();
    let hidden = usize_field(config, "hidden_size")?;
    let heads = usize_field(config, "num_attention_heads")?;
    if let Some(head_dim) = config.get("head_dim").and_then(Value::as_u64) {
        if head_dim as usize * heads != hidden {
            bail!(
                "head_dim {head_dim} is not hidden_size / num_attention_heads: candle's \
                   Llama derives it so"
            );
        }
    }
    for flag in ["attention_bias", "mlp_bias"] {
        if config.get(flag).and_then(Value::as_bool) == Some(true) {
            bail!("{flag} is true: candle's Llama has no biases");
        }
    }
    if let Some(act) = config.get("hidden_act").and_then(Value::as_str) {
        if act != "silu" {
            bail!("hidden_act {act:?}: candle's Llama uses silu");
        }
    }
    if let Some(theta) = rope_theta(config)? {
        patched["rope_theta"] = json!(theta);
    }
    patched["rope_scaling"] = Value::Null;
    let parsed: llama::LlamaConfig =
        serde_json::from_value(patched).context("config.json as candle's LlamaConfig")?;
    Ok(parsed.into_config(false))
}

/// config.json as candle's `qwen2::Config` reads it: the rotary base at the top level, and no
/// sliding window written as a window as long as the positions (candle masks with whatever
/// `sliding_window` holds; transformers ignores it unless `use_sliding_window`).
fn qwen2_config(config: &Value) -> Result<qwen2::Config> {
    let mut patched = config.clone();
    if config.get("use_sliding_window").and_then(Value::as_bool) == Some(true) {
        bail!("use_sliding_window is true: not supported by this program");
    }
    let hidden = usize_field(config, "hidden_size")?;
    let heads = usize_field(config, "num_attention_heads")?;
    if let Some(head_dim) = config.get("head_dim").and_then(Value::as_u64) {
        if head_dim as usize * heads != hidden {
            bail!(
                "head_dim {head_dim} is not hidden_size / num_attention_heads: candle's \
                   Qwen2 derives it so"
            );
        }
    }
    let max_positions = usize_field(config, "max_position_embeddings")?;
    let layers = usize_field(config, "num_hidden_layers")?;
    let object = patched.as_object_mut().unwrap();
    object.insert("use_sliding_window".into(), json!(false));
    object.insert("sliding_window".into(), json!(max_positions));
    object.entry("max_window_layers").or_insert(json!(layers));
    object.entry("num_key_value_heads").or_insert(json!(heads));
    object.entry("tie_word_embeddings").or_insert(json!(false));
    object.entry("hidden_act").or_insert(json!("silu"));
    if let Some(theta) = rope_theta(config)? {
        object.insert("rope_theta".into(), json!(theta));
    } else {
        object.entry("rope_theta").or_insert(json!(10_000.0));
    }
    serde_json::from_value(patched).context("config.json as candle's qwen2::Config")
}

fn max_rss_bytes() -> u64 {
    // ru_maxrss is in KiB on Linux.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_maxrss as u64 * 1024
}

fn load(common: &Common) -> Result<Loaded> {
    let folder = fs::canonicalize(&common.folder)
        .with_context(|| format!("{} does not exist", common.folder.display()))?;
    let config_text = fs::read_to_string(folder.join("config.json"))
        .with_context(|| format!("reading {}/config.json", folder.display()))?;
    let config: Value = serde_json::from_str(&config_text)?;
    let architecture = config["architectures"][0]
        .as_str()
        .unwrap_or("?")
        .to_string();
    let model_type = config["model_type"].as_str().unwrap_or("?").to_string();
    let files = safetensors_files(&folder)?;
    let stored = folder_dtype(&files)?;
    let config_dtype = config.get("dtype").or_else(|| config.get("torch_dtype"));
    if let Some(name) = config_dtype.and_then(Value::as_str) {
        if name != dtype_name(stored) {
            eprintln!(
                "config.json says {name}, the safetensors hold {}",
                dtype_name(stored)
            );
        }
    }
    let dtype = match common.dtype {
        None => stored,
        Some(DtypeArg::F32) => DType::F32,
        Some(DtypeArg::Bf16) => DType::BF16,
    };
    let vocab = usize_field(&config, "vocab_size")?;
    let max_positions = usize_field(&config, "max_position_embeddings")?;
    enum Parsed {
        Llama(llama::Config),
        Qwen2(qwen2::Config),
    }
    let parsed = match model_type.as_str() {
        "llama" => Parsed::Llama(llama_config(&config)?),
        "qwen2" => Parsed::Qwen2(qwen2_config(&config)?),
        other => bail!("model_type {other:?}: this program runs llama and qwen2"),
    };
    let weights_bytes = files
        .iter()
        .map(|f| fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    eprintln!(
        "candle {CANDLE_VERSION}, {} threads, {architecture} {} from {}",
        candle_core::utils::get_num_threads(),
        dtype_name(dtype),
        folder.display()
    );

    let device = Device::Cpu;
    let rss_before = max_rss_bytes();
    let clock = Instant::now();
    // Safety: the files are not modified while the program runs.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files, dtype, &device)? };
    let model = match parsed {
        Parsed::Llama(cfg) => {
            let model = llama::Llama::load(vb, &cfg)?;
            let fresh = llama::Cache::new(true, dtype, &cfg, &device)?;
            Model::Llama { model, fresh }
        }
        Parsed::Qwen2(cfg) => Model::Qwen2(qwen2::ModelForCausalLM::new(&cfg, vb)?),
    };
    let load_s = clock.elapsed().as_secs_f64();
    let peak_rss = max_rss_bytes();
    Ok(Loaded {
        folder: folder.display().to_string(),
        architecture,
        dtype_name: dtype_name(dtype),
        vocab,
        max_positions,
        model,
        load_s,
        rss_before,
        peak_rss,
        weights_bytes,
    })
}

/// (cpu, cpu_features): the first `model name` and the listed `flags` of /proc/cpuinfo, as
/// benches/peers/torch_sdpa.py's `machine()` gives them.
fn machine() -> (String, Vec<&'static str>) {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let mut model_name = None;
    let mut flags = None;
    for line in cpuinfo.lines() {
        if let Some((key, value)) = line.split_once(':') {
            match key.trim() {
                "model name" if model_name.is_none() => model_name = Some(value.trim().to_string()),
                "flags" if flags.is_none() => flags = Some(value.trim().to_string()),
                _ => {}
            }
        }
    }
    let cpu = model_name
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| "unknown".into());
    let flags: BTreeSet<&str> = flags.as_deref().unwrap_or("").split_whitespace().collect();
    let x86 = cfg!(any(target_arch = "x86_64", target_arch = "x86"));
    let features = X86_FEATURES
        .iter()
        .filter(|(_, flag)| x86 && flags.contains(flag))
        .map(|(name, _)| *name)
        .collect();
    (cpu, features)
}

/// Python's `statistics.median`: the middle value, or the mean of the two middle ones.
fn median(times: &[f64]) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// splitmix64: the seeded token ids (not the ids torch's generator draws for the same seed).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn tokens(&mut self, n: usize, vocab: usize) -> Vec<u32> {
        (0..n)
            .map(|_| (self.next_u64() % vocab as u64) as u32)
            .collect()
    }
}

fn ids_tensor(ids: &[u32]) -> Result<Tensor> {
    Ok(Tensor::new(ids, &Device::Cpu)?.unsqueeze(0)?)
}

fn logits_vec(logits: &Tensor) -> Result<Vec<f32>> {
    Ok(logits
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?)
}

/// One warm-up, then `repeats` runs; each run returns the milliseconds of its timed part,
/// divided here by `per`.
fn timed(repeats: usize, per: usize, mut run: impl FnMut() -> Result<f64>) -> Result<Vec<f64>> {
    run()?;
    (0..repeats).map(|_| Ok(run()? / per as f64)).collect()
}

fn ms_since(clock: Instant) -> f64 {
    clock.elapsed().as_secs_f64() * 1e3
}

fn time_folder(args: TimeArgs) -> Result<()> {
    if args.repeats < 1 || args.decode_tokens < 1 || args.prefill_len < 1 {
        bail!("--repeats, --decode-tokens and --prefill-len must be at least 1");
    }
    if args.contexts.iter().any(|&c| c < 1) {
        bail!("--contexts must be at least 1");
    }
    let loaded = load(&args.common)?;
    let longest = args
        .contexts
        .iter()
        .map(|c| c + args.decode_tokens)
        .max()
        .unwrap_or(0);
    if args.prefill_len.max(longest) > loaded.max_positions {
        bail!(
            "the runs reach past max_position_embeddings {}",
            loaded.max_positions
        );
    }
    let (cpu, cpu_features) = machine();
    let threads = candle_core::utils::get_num_threads();
    let line =
        |what: &str, context: Option<usize>, tokens: Option<usize>, times: &[f64], extra: Value| {
            let med = median(times);
            let min = times.iter().cloned().fold(f64::INFINITY, f64::min);
            let mut object = json!({
                "peer": "candle", "candle": CANDLE_VERSION,
                "folder": loaded.folder, "model": loaded.architecture, "dtype": loaded.dtype_name,
                "threads": threads, "what": what, "context": context, "tokens": tokens,
                "median_ms": med, "min_ms": min, "samples": times,
                "tokens_per_s": tokens.map(|t| t as f64 / (med / 1e3)),
                "cpu": cpu, "cpu_features": cpu_features,
            });
            if let Value::Object(extra) = extra {
                object.as_object_mut().unwrap().extend(extra);
            }
            let mut out = std::io::stdout().lock();
            writeln!(out, "{object}")
                .and_then(|_| out.flush())
                .expect("stdout");
        };

    line(
        "load",
        None,
        None,
        &[loaded.load_s * 1e3],
        json!({
            "load_s": loaded.load_s, "peak_rss_bytes": loaded.peak_rss,
            "rss_before_load_bytes": loaded.rss_before, "weights_bytes": loaded.weights_bytes,
            "peak_rss_over_weights": loaded.peak_rss as f64 / loaded.weights_bytes as f64,
        }),
    );

    let model = &loaded.model;
    let vocab = loaded.vocab;
    let mut rng = Rng(args.seed);
    let prompt = ids_tensor(&rng.tokens(args.prefill_len, vocab))?;
    let contexts: Vec<(usize, Tensor)> = args
        .contexts
        .iter()
        .map(|&c| Ok((c, ids_tensor(&rng.tokens(c, vocab))?)))
        .collect::<Result<_>>()?;
    let new_tokens: Vec<Tensor> = rng
        .tokens(args.decode_tokens, vocab)
        .iter()
        .map(|&t| ids_tensor(&[t]))
        .collect::<Result<_>>()?;

    // Prefill: a fresh cache each run (made before the clock starts), the logits of the
    // last position (the only ones candle's models compute).
    let times = timed(args.repeats, 1, || {
        let mut state = model.fresh();
        let clock = Instant::now();
        let logits = model.forward(&mut state, &prompt, 0)?;
        let ms = ms_since(clock);
        if logits.elem_count() != vocab {
            bail!("prefill gave {:?} logits", logits.shape());
        }
        Ok(ms)
    })?;
    line(
        "prefill",
        Some(0),
        Some(args.prefill_len),
        &times,
        json!({"logits": "last"}),
    );
    eprintln!("prefill {}: {:.1} ms", args.prefill_len, median(&times));

    for (context, context_ids) in &contexts {
        // The context is prefilled once (untimed); every run starts from a clone of that
        // state, which puts the cache back at `context` tokens.
        let mut at_context = model.fresh();
        model.forward(&mut at_context, context_ids, 0)?;
        let times = timed(args.repeats, args.decode_tokens, || {
            let mut state = at_context.clone();
            let clock = Instant::now();
            for (i, token) in new_tokens.iter().enumerate() {
                model.forward(&mut state, token, context + i)?;
            }
            Ok(ms_since(clock))
        })?;
        line(
            "decode",
            Some(*context),
            Some(1),
            &times,
            json!({"decode_tokens": args.decode_tokens}),
        );
        eprintln!("decode at {context}: {:.2} ms/token", median(&times));
    }
    Ok(())
}

fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy continuation from `state`: `steps` logits (the state's last position, then each
/// new token's) and the `steps` tokens taken from them.
fn greedy(
    model: &Model,
    mut state: State,
    first: Tensor,
    pos: usize,
    steps: usize,
) -> Result<(Vec<Vec<f32>>, Vec<u32>)> {
    let mut logits = vec![logits_vec(&first)?];
    let mut tokens = vec![argmax(&logits[0])];
    for i in 1..steps {
        let out = model.forward(&mut state, &ids_tensor(&[tokens[i - 1]])?, pos + i - 1)?;
        logits.push(logits_vec(&out)?);
        tokens.push(argmax(logits.last().unwrap()));
    }
    Ok((logits, tokens))
}

fn check_folder(args: CheckArgs) -> Result<()> {
    if args.prompt_len < 1 || args.steps < 1 {
        bail!("--prompt-len and --steps must be at least 1");
    }
    let loaded = load(&args.common)?;
    let model = &loaded.model;
    let prompt = Rng(args.seed).tokens(args.prompt_len, loaded.vocab);
    let mut state = model.fresh();
    let first = model.forward(&mut state, &ids_tensor(&prompt)?, 0)?;
    // Twice from clones of the state after the prompt: the second run must repeat the first
    // bit for bit, which is what the timing's reset by cloning relies on.
    let (logits, tokens) = greedy(
        model,
        state.clone(),
        first.clone(),
        args.prompt_len,
        args.steps,
    )?;
    let (again, _) = greedy(model, state, first, args.prompt_len, args.steps)?;
    let repeatable = again == logits;
    println!(
        "{}",
        json!({
            "peer": "candle", "candle": CANDLE_VERSION, "folder": loaded.folder,
            "model": loaded.architecture, "dtype": loaded.dtype_name,
            "threads": candle_core::utils::get_num_threads(),
            "prompt": prompt, "tokens": tokens, "logits": logits,
            "snapshot_repeatable": repeatable,
        })
    );
    if !repeatable {
        bail!("decoding from a clone of the same state gave other logits");
    }
    Ok(())
}
