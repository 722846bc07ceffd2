//! A Hugging Face folder (GPT-2, or Llama, Qwen2, Qwen3 and Mistral), timed as transformers
//! times it in `benches/peers/hf_gpt2.py` and `benches/peers/hf_llama.py`: the prompt processed
//! once (`hf_<model_type>_prefill`), then one new token at a time against the key/value cache
//! (`hf_<model_type>_decode`), at contexts `prompt .. prompt + 15` as the peers time it.
//!
//! ```text
//! /root/peers/bin/python benches/peers/hf_gpt2.py --write /tmp/gpt2-small
//! cargo run --release -p attn-bench -- hf /tmp/gpt2-small --json
//! /root/peers/bin/python benches/peers/hf_llama.py write --shape smollm2-135m /tmp/smollm2
//! cargo run --release -p attn-bench -- hf /tmp/smollm2 --prompt 128
//! ```
//!
//! The folder is loaded with [`attn_model::hf::AutoModel`], as its `model_type` says; the lines have the
//! bench's format, `impl` `attn`, `seq_len` the prompt's length, batch 1.
//!
//! Decoding one token reads every weight once, so its speed is bounded by the memory's
//! bandwidth: [`MemoryWall`] sets the decode time against `bytes of weights ÷ bandwidth`, the
//! steps and the reads of the memory ([`crate::machine::ReadBuffer`]) timed in turn.

use std::path::Path;

use anyhow::{Context, Result, bail};
use attn_model::hf::{AutoModel, Family, Gpt2Config, LlamaConfig, read_config};
use attn_model::{KvCache, TokenDecoder, TokenDecoderInput};
use burn::module::Module;
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::cases::{Pass, SEED, Step, finish};
use crate::record::{Record, median};
use crate::timing::{Budget, measure};

/// Tokens the decode case adds to the prompt's cache before it truncates the cache back to
/// the prompt ([`KvCache::truncate`]), as `hf_llama.py` crops transformers' `DynamicCache`
/// after its 16 `--decode-tokens`: both time steps at contexts `prompt .. prompt + 15`.
pub const DECODE_TOKENS: usize = 16;

/// What the bench needs to know of a folder before loading it.
struct Shape {
    model_type: &'static str,
    /// Positions the model has, `None` where it has no limit.
    positions: Option<usize>,
    n_heads: usize,
    d_head: usize,
}

/// The shape of the model in `folder`, from its `config.json`.
fn shape(folder: &Path) -> Result<Shape> {
    let family = Family::of_folder(folder)?;
    Ok(match family {
        Family::Gpt2 => {
            let config: Gpt2Config = read_config(folder)?;
            Shape {
                model_type: family.model_type(),
                positions: Some(config.n_positions),
                n_heads: config.n_head,
                d_head: config.n_embd / config.n_head.max(1),
            }
        }
        Family::Llama(_) => {
            let config: LlamaConfig = read_config(folder)?;
            let heads = config.num_attention_heads;
            Shape {
                model_type: family.model_type(),
                positions: config.max_position_embeddings,
                n_heads: heads,
                d_head: config.head_dim.unwrap_or(config.hidden_size / heads.max(1)),
            }
        }
        Family::Bert => bail!(
            "{} holds a bert model, an encoder: the bench times decoders, token by token",
            folder.display()
        ),
    })
}

/// The decoder in `folder`, its matrices held as `dtype` (through [`AutoModel`], which
/// refuses a half-precision type for a family that loads in f32 only).
fn load(folder: &Path, device: &Device, dtype: DType) -> Result<TokenDecoder> {
    let loading = || format!("loading {}", folder.display());
    AutoModel::from_pretrained_as(folder, device, dtype)
        .with_context(loading)?
        .into_decoder()
        .map_err(|_| anyhow::anyhow!("{} holds no decoder", folder.display()))
}

/// What [`folder_records`] measured, with the model and the decoding step it timed.
pub struct FolderRun {
    /// The prefill and decode lines.
    pub records: Vec<Record>,
    /// The model timed.
    pub model: TokenDecoder,
    /// Its load.
    pub load: Load,
    /// One decoding step, as the decode line timed it ([`MemoryWall::measure`] times more).
    pub decode: Step,
}

impl std::fmt::Debug for FolderRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FolderRun")
            .field("records", &self.records)
            .field("load", &self.load)
            .finish_non_exhaustive()
    }
}

/// The prefill and decode lines of the model folder at `folder` on `device`, for a prompt of
/// `prompt_len` seeded token ids, and the model they timed.
///
/// # Errors
/// When the folder cannot be loaded or the prompt does not fit its positions; a failure of a
/// run becomes its line's `error`.
pub fn folder_records(
    folder: &Path,
    device: &Device,
    device_name: &str,
    prompt_len: usize,
    dtype: DType,
    budget: &Budget,
) -> Result<FolderRun> {
    if prompt_len == 0 {
        bail!("a prompt needs at least one token, got 0");
    }
    let Shape {
        model_type,
        positions,
        n_heads,
        d_head,
    } = shape(folder)?;
    let mut capacity = prompt_len.saturating_add(DECODE_TOKENS);
    if let Some(positions) = positions {
        if prompt_len >= positions {
            bail!(
                "a prompt of {prompt_len} tokens leaves no room for a new token in the \
                 {positions} positions of {}",
                folder.display()
            );
        }
        capacity = capacity.min(positions);
    }
    let rss_before = crate::machine::resident_bytes()?;
    let clock = std::time::Instant::now();
    let model = load(folder, device, dtype)?;
    let load_s = clock.elapsed().as_secs_f64();
    let loaded = Load::new(folder, load_s, rss_before)?;
    let timed = model.clone();
    let vocab = model.vocab();
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let mut ids = |n: usize| {
        let ids: Vec<i64> = (0..n).map(|_| rng.random_range(0..vocab) as i64).collect();
        Tensor::<2, Int>::from_data(TensorData::new(ids, [1, n]), device) // [batch, n]
    };
    let prompt = ids(prompt_len);
    let token = ids(1);
    let prefill = {
        let (model, prompt) = (timed.clone(), prompt.clone());
        move || -> Result<(KvCache, Tensor<3>)> {
            let mut cache = model.new_cache(1, capacity, None)?;
            let logits = model
                .try_forward(TokenDecoderInput::new(prompt.clone()).with_cache(&mut cache))?
                .logits; // [batch, prompt_len, vocab]
            Ok((cache, logits))
        }
    };

    let mut prefill_step: Step = {
        let (prefill, device) = (prefill.clone(), device.clone());
        Box::new(move || {
            let (_, logits) = prefill()?;
            finish(&device, logits)
        })
    };
    let mut decode_step: Step = {
        let device = device.clone();
        let mut cache: Option<KvCache> = None;
        Box::new(move || {
            let mut current = match cache.take() {
                Some(c) if c.filled() < capacity => c,
                Some(mut c) => {
                    c.truncate(prompt_len)?;
                    c
                }
                None => prefill()?.0,
            };
            let logits = timed
                .try_forward(TokenDecoderInput::new(token.clone()).with_cache(&mut current))?
                .logits; // [batch, 1, vocab]
            cache = Some(current);
            finish(&device, logits.argmax(2).float())
        })
    };

    // The case names the type where it is not f32: `hf_llama_bf16_decode`.
    let suffix = match dtype {
        DType::F32 => String::new(),
        other => format!("_{}", format!("{other:?}").to_lowercase()),
    };
    let mut records = Vec::new();
    for (name, step, rows) in [
        (
            format!("hf_{model_type}{suffix}_prefill"),
            &mut prefill_step,
            prompt_len,
        ),
        (
            format!("hf_{model_type}{suffix}_decode"),
            &mut decode_step,
            1,
        ),
    ] {
        let record = Record {
            bf16_products: (dtype == DType::BF16)
                .then(|| attn_model::ops::bf16_products(device, rows).to_string()),
            ..Record::named(
                "attn",
                &name,
                Pass::Forward,
                device_name,
                [1, n_heads, prompt_len, d_head],
            )
        };
        records.push(match measure(step, budget) {
            Ok(times) => record.with_times_only(&times),
            Err(e) => Record {
                error: Some(format!("{e:#}")),
                ..record
            },
        });
    }
    Ok(FolderRun {
        records,
        model,
        load: loaded,
        decode: decode_step,
    })
}

/// Loading the folder: its time, and the process's resident memory against the weights'
/// files, as `benches/peers/hf_llama.py` reports transformers' `from_pretrained`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Load {
    /// Always `"load"`, telling the line from the bench's records.
    pub kind: &'static str,
    /// The CPU, as the records name it.
    pub cpu: String,
    /// Seconds from reading `config.json` to a model ready to run.
    pub load_s: f64,
    /// The process's resident-memory high-water mark after the load (`VmHWM`), in bytes.
    pub peak_rss_bytes: u64,
    /// The process's resident memory before the load, in bytes.
    pub rss_before_load_bytes: u64,
    /// Bytes of the folder's `*.safetensors` files.
    pub weights_bytes: u64,
    /// `peak_rss_bytes / weights_bytes`.
    pub peak_rss_over_weights: f64,
}

impl Load {
    /// The load of `folder` that took `load_s`, measured now, with `rss_before` resident
    /// before it.
    ///
    /// # Errors
    /// When `/proc/self/status` or the folder cannot be read.
    pub fn new(folder: &Path, load_s: f64, rss_before: u64) -> Result<Self> {
        let mut weights_bytes = 0;
        for entry in std::fs::read_dir(folder)? {
            let entry = entry?;
            if entry
                .file_name()
                .to_string_lossy()
                .ends_with(".safetensors")
            {
                weights_bytes += entry.metadata()?.len();
            }
        }
        let peak_rss_bytes = crate::machine::peak_resident_bytes()?;
        Ok(Self {
            kind: "load",
            cpu: crate::machine::Machine::current().cpu.clone(),
            load_s,
            peak_rss_bytes,
            rss_before_load_bytes: rss_before,
            weights_bytes,
            peak_rss_over_weights: peak_rss_bytes as f64 / weights_bytes.max(1) as f64,
        })
    }

    /// One line for a person.
    pub fn to_text(&self) -> String {
        format!(
            "load: {:.2} s; resident memory peaked at {:.1} MB ({:.1} MB before), {:.2}x the \
             {:.1} MB of weight files",
            self.load_s,
            self.peak_rss_bytes as f64 / 1e6,
            self.rss_before_load_bytes as f64 / 1e6,
            self.peak_rss_over_weights,
            self.weights_bytes as f64 / 1e6
        )
    }
}

/// Rounds of [`MemoryWall::measure`]: each times [`DECODE_TOKENS`] decoding steps, then one
/// read of the memory.
pub const WALL_ROUNDS: usize = 9;

/// Decoding against the memory's bandwidth: one token reads every weight once (the embedding
/// table only as the tied head, or not at all when the head is its own matrix), so it takes at
/// least `weight_bytes / bandwidth`.
///
/// Decoding steps and reads of the memory are timed in turn, in the same seconds, and the
/// fraction compares their medians: on a machine whose neighbours take a varying share of the
/// memory, both then see the same share. The best read is kept beside it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryWall {
    /// Always `"memory_wall"`, telling the line from the bench's records.
    pub kind: &'static str,
    /// The CPU, as the records name it.
    pub cpu: String,
    /// Bytes of weights one decoding step reads.
    pub weight_bytes: u64,
    /// The median read bandwidth in GB/s ([`crate::machine::ReadBuffer::pass`]).
    pub bandwidth_gb_s: f64,
    /// The best read bandwidth in GB/s.
    pub best_read_gb_s: f64,
    /// Reads timed.
    pub reads: usize,
    /// `weight_bytes / bandwidth`, in milliseconds: the fastest a step can be.
    pub bound_ms: f64,
    /// The median decoding step, in milliseconds.
    pub decode_ms: f64,
    /// Decoding steps timed.
    pub decode_steps: usize,
    /// `bound_ms / decode_ms`: the fraction of the median read's bandwidth decoding reaches.
    pub fraction: f64,
    /// The fraction of the best read's bandwidth.
    pub fraction_of_best: f64,
}

impl MemoryWall {
    /// Times `rounds` of [`DECODE_TOKENS`] steps of `decode` (a step of `model`), each followed
    /// by one read of a [`crate::machine::ReadBuffer`].
    ///
    /// # Errors
    /// When a step fails.
    pub fn measure(model: &TokenDecoder, decode: &mut Step, rounds: usize) -> Result<Self> {
        let buffer = crate::machine::ReadBuffer::new();
        let (mut steps, mut reads) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for _ in 0..DECODE_TOKENS {
                let clock = std::time::Instant::now();
                decode()?;
                steps.push(clock.elapsed().as_secs_f64() * 1e3);
            }
            reads.push(buffer.pass());
        }
        Ok(Self::new(model, &steps, &reads))
    }

    /// The wall for `model`, from decoding steps of `decode_ms` each and reads of
    /// `reads_gb_s` each (neither empty).
    pub fn new(model: &TokenDecoder, decode_ms: &[f64], reads_gb_s: &[f64]) -> Self {
        let mut held = HeldBytes {
            table: (!model.ties_embeddings()).then(|| [model.vocab(), model.decoder().d_model()]),
            bytes: 0,
        };
        model.visit(&mut held);
        let weight_bytes = held.bytes;
        let bound = |gb_s: f64| weight_bytes as f64 / (gb_s * 1e9) * 1e3;
        let bandwidth_gb_s = median(reads_gb_s).unwrap_or(f64::NAN);
        let best_read_gb_s = reads_gb_s.iter().copied().fold(f64::NAN, f64::max);
        let decode = median(decode_ms).unwrap_or(f64::NAN);
        Self {
            kind: "memory_wall",
            cpu: crate::machine::Machine::current().cpu.clone(),
            weight_bytes,
            bandwidth_gb_s,
            best_read_gb_s,
            reads: reads_gb_s.len(),
            bound_ms: bound(bandwidth_gb_s),
            decode_ms: decode,
            decode_steps: decode_ms.len(),
            fraction: bound(bandwidth_gb_s) / decode,
            fraction_of_best: bound(best_read_gb_s) / decode,
        }
    }

    /// One line for a person.
    pub fn to_text(&self) -> String {
        format!(
            "memory wall ({}): {:.1} MB of weights a token; the median of {} reads between the \
             steps, {:.1} GB/s, gives {:.2} ms at best; the median of {} steps took {:.2} ms, \
             {:.0}% of the bandwidth ({:.0}% of the best read, {:.1} GB/s)",
            self.cpu,
            self.weight_bytes as f64 / 1e6,
            self.reads,
            self.bandwidth_gb_s,
            self.bound_ms,
            self.decode_steps,
            self.decode_ms,
            100.0 * self.fraction,
            100.0 * self.fraction_of_best,
            self.best_read_gb_s,
        )
    }
}

/// Bytes of the parameters as they are held (each in its own type), but an untied input
/// table, which decoding reads one row of.
struct HeldBytes {
    /// The input table's shape when the head is a matrix of its own.
    table: Option<[usize; 2]>,
    bytes: u64,
}

impl burn::module::ModuleVisitor for HeldBytes {
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
        let tensor = param.val();
        let dims = tensor.dims();
        if self.table.is_some_and(|table| dims.as_slice() == table) {
            return;
        }
        self.bytes += (dims.iter().product::<usize>() * tensor.dtype().size()) as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::QUICK;

    #[test]
    fn a_prompt_of_no_token_or_past_every_position_is_an_error_not_a_panic() {
        let folder =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../attn-model/tests/data/hf/gpt2_tiny");
        let device = Device::flex();
        let empty =
            folder_records(&folder, &device, "flex", 0, DType::F32, &QUICK).expect_err("0 tokens");
        assert!(empty.to_string().contains("at least one token"), "{empty}");
        let huge = folder_records(&folder, &device, "flex", usize::MAX, DType::F32, &QUICK)
            .expect_err("usize::MAX");
        let text = huge.to_string();
        assert!(
            text.contains(&usize::MAX.to_string()) && text.contains("48 positions"),
            "{text}"
        );
    }

    #[test]
    fn a_llama_folder_is_timed_and_its_wall_counts_each_weight_once() {
        let folder =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../attn-model/tests/data/hf/llama_tiny");
        let device = Device::flex();
        let FolderRun {
            records,
            model,
            load,
            mut decode,
        } = folder_records(&folder, &device, "flex", 4, DType::F32, &QUICK)
            .expect("a Llama folder");
        // The load line counts the folder's weight file, and a peak at least what was resident.
        let file = std::fs::metadata(folder.join("model.safetensors"))
            .expect("the weights")
            .len();
        assert_eq!(load.weights_bytes, file);
        assert!(load.peak_rss_bytes >= load.rss_before_load_bytes && load.load_s > 0.0);
        let names: Vec<&str> = records.iter().map(|r| r.case.as_str()).collect();
        assert_eq!(names, ["hf_llama_prefill", "hf_llama_decode"]);
        assert!(records.iter().all(|r| r.error.is_none()), "{records:?}");
        // The folder's safetensors file lists each weight once: its header's shapes count them.
        let bytes = std::fs::read(folder.join("model.safetensors")).expect("the weights");
        let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&bytes[8..8 + header_len]).expect("a JSON header");
        let stored: u64 = header
            .iter()
            .filter(|(name, _)| *name != "__metadata__")
            .map(|(_, t)| {
                t["shape"]
                    .as_array()
                    .expect("a shape")
                    .iter()
                    .map(|d| d.as_u64().expect("a size"))
                    .product::<u64>()
            })
            .sum();
        let wall = MemoryWall::new(&model, &[2.0, 1.0, 3.0], &[10.0, 30.0, 5.0, 20.0]);
        let table = (model.vocab() * model.decoder().d_model()) as u64;
        let read = if model.ties_embeddings() {
            stored
        } else {
            stored - table
        };
        assert_eq!(wall.weight_bytes, read * 4, "{stored} values stored");
        // Held in bfloat16, the matrices take two bytes a value, the norms four.
        let half = folder_records(&folder, &device, "flex", 4, DType::BF16, &QUICK)
            .expect("in bf16")
            .model;
        let half_wall = MemoryWall::new(&half, &[2.0], &[10.0]);
        assert!(
            half_wall.weight_bytes > read * 2 && half_wall.weight_bytes < read * 2 + 4096,
            "{} bytes held in bf16 for {read} values",
            half_wall.weight_bytes
        );
        // Medians 2 ms and 15 GB/s; the best read 30 GB/s.
        assert_eq!((wall.bandwidth_gb_s, wall.best_read_gb_s), (15.0, 30.0));
        assert!((wall.bound_ms - wall.weight_bytes as f64 / 1.5e7).abs() < 1e-9);
        assert!((wall.fraction - wall.bound_ms / 2.0).abs() < 1e-12);
        assert!((wall.fraction_of_best - wall.fraction / 2.0).abs() < 1e-12);
        // Measured: a round is DECODE_TOKENS steps and one read.
        let measured = MemoryWall::measure(&model, &mut decode, 1).expect("steps run");
        assert_eq!((measured.decode_steps, measured.reads), (DECODE_TOKENS, 1));
        assert!(measured.decode_ms > 0.0 && measured.bandwidth_gb_s > 0.0);
    }
}
