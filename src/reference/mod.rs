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
mod report;
mod sdpa;
mod torch;

use std::path::Path;

use anyhow::{Context, Result};
use attn_reference::{
    DecoderLayerFile, EncoderLayerFile, MhaFile, PositionalFile, ReferenceFile, SdpaFile,
};
use burn::tensor::Device;

pub use attn_reference::{ATOL, RTOL};
pub use report::{CaseReport, STRATEGIES};

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
