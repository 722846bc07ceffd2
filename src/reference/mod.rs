//! Checks the implementation against reference vectors: the files of `attn_reference`'s format
//! made by an independent implementation (PyTorch for the files shipped in
//! `crates/attn-testing/data`).
//!
//! Every case found is run on every device given and, for attention, every strategy; each run
//! yields one [`CaseReport`]. Shapes and values come from the files, so files made with other
//! shapes or seeds are checked the same way.

mod decoder_layer;
mod encoder_layer;
mod hf;
mod mha;
mod positional;
mod sdpa;

use std::path::Path;

use anyhow::{Context, Result};
use attn_core::Strategy;
use attn_reference::{
    AttentionWeights, Closeness, DecoderLayerFile, EncoderLayerFile, MhaFile, PositionalFile,
    RefTensor, ReferenceFile, SdpaFile,
};
use burn::tensor::Device;
use serde::Serialize;

pub use attn_reference::{ATOL, RTOL};

/// Every attention strategy, each checked on its own.
pub const STRATEGIES: [Strategy; 5] = [
    Strategy::Explicit,
    Strategy::Chunked { block: 64 },
    Strategy::Fused,
    Strategy::Native,
    Strategy::Auto,
];

/// The outcome of one case on one backend with one strategy.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CaseReport {
    /// The file the case came from.
    pub file: String,
    /// The case's name.
    pub case: String,
    /// The backend it ran on.
    pub backend: String,
    /// The computation path (an attention strategy, or `module` for layers).
    pub strategy: String,
    /// The largest absolute difference over every compared tensor.
    pub max_abs_err: f32,
    /// Whether every compared value was within `ATOL + RTOL · |expected|`.
    pub pass: bool,
}

impl CaseReport {
    /// The report of `case` of `file`, run on `backend` along `strategy`.
    fn new(file: &str, case: &str, backend: &str, strategy: &str, closeness: &Closeness) -> Self {
        Self {
            file: file.to_string(),
            case: case.to_string(),
            backend: backend.to_string(),
            strategy: strategy.to_string(),
            max_abs_err: closeness.max_abs_err(),
            pass: closeness.is_within(),
        }
    }
}

/// The reference files this checker understands, with the function that runs each.
type Checker = fn(&Path, &[(String, Device)]) -> Result<Vec<CaseReport>>;
const FILES: [(&str, Checker); 5] = [
    (SdpaFile::PATH, sdpa::check),
    (PositionalFile::PATH, positional::check),
    (MhaFile::PATH, mha::check),
    (EncoderLayerFile::PATH, encoder_layer::check),
    (DecoderLayerFile::PATH, decoder_layer::check),
];

/// Runs every known reference file present in `dir` on every device, and every Hugging Face
/// model folder: `dir` itself when it is one, and each folder of `dir/hf/`.
///
/// # Errors
/// When `dir` holds none of the known files or model folders, or a file cannot be read or
/// parsed, or a model cannot be loaded.
pub fn check_dir(dir: &Path, devices: &[(String, Device)]) -> Result<Vec<CaseReport>> {
    let mut reports = Vec::new();
    let mut found = 0;
    let mut models = vec![dir.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(dir.join("hf")) {
        let mut folders: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        folders.sort();
        models.extend(folders);
    }
    for model in models.iter().filter(|m| hf::is_model_folder(m)) {
        found += 1;
        reports.extend(
            hf::check(model, devices).with_context(|| format!("checking {}", model.display()))?,
        );
    }
    for (name, check) in FILES {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        found += 1;
        reports
            .extend(check(dir, devices).with_context(|| format!("checking {}", path.display()))?);
    }
    anyhow::ensure!(
        found > 0,
        "{} holds none of the reference files {:?} and no model folder (config.json and \
         reference.json)",
        dir.display(),
        FILES.map(|(n, _)| n)
    );
    Ok(reports)
}

/// The block settings of a PyTorch layer's `activation` and `norm_first`.
fn block_settings(
    activation: attn_reference::encoder_layer::Activation,
    norm_first: bool,
) -> (attn_model::Activation, attn_model::NormPlacement) {
    use attn_reference::encoder_layer::Activation as Torch;
    let activation = match activation {
        Torch::Relu => attn_model::Activation::Relu,
        Torch::Gelu => attn_model::Activation::Gelu,
    };
    let norm = if norm_first {
        attn_model::NormPlacement::Pre
    } else {
        attn_model::NormPlacement::Post
    };
    (activation, norm)
}

/// The projections as the model's PyTorch loader takes them, on `device`.
fn torch_attention(
    weights: &AttentionWeights,
    device: &Device,
) -> Result<attn_model::TorchMultiheadAttention> {
    Ok(attn_model::TorchMultiheadAttention {
        q: torch_linear(&weights.w_q, &weights.b_q, device)?,
        k: torch_linear(&weights.w_k, &weights.b_k, device)?,
        v: torch_linear(&weights.w_v, &weights.b_v, device)?,
        out_proj: torch_linear(&weights.w_o, &weights.b_o, device)?,
    })
}

/// PyTorch's `Linear` weight `[out, in]` and bias `[out]` as the model's loader takes them.
fn torch_linear(
    weight: &RefTensor,
    bias: &RefTensor,
    device: &Device,
) -> Result<attn_model::TorchLinear> {
    Ok(attn_model::TorchLinear {
        weight: weight.try_tensor(device)?,
        bias: Some(bias.try_tensor(device)?),
    })
}
