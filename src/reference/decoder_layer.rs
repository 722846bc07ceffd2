//! `decoder_layer.json`: `torch.nn.TransformerDecoderLayer` (ReLU post-norm, GELU pre-norm; a
//! causal target and a memory with key padding), loaded from the `state_dict` PyTorch saved
//! beside it, on every strategy.

use std::path::Path;

use anyhow::{Context, Result, ensure};
use attn_model::{DecoderBlockConfig, DecoderInput, StateDict};
use attn_reference::{Closeness, DecoderLayerFile, ReferenceFile};
use burn::tensor::Device;

use super::{CaseReport, STRATEGIES};

pub(super) fn check(dir: &Path, devices: &[(String, Device)]) -> Result<Vec<CaseReport>> {
    let file = DecoderLayerFile::read_from(dir)?;
    let mut reports = Vec::new();
    for case in &file.cases {
        // The block's self-attention is always causal.
        ensure!(
            case.tgt_causal,
            "case {}: a target that is not causal is not a decoder layer's",
            case.name
        );
        let weights = case.weights_path(dir)?;
        let dict = StateDict::from_safetensors_file(&weights)
            .with_context(|| format!("case {}: reading {}", case.name, weights.display()))?;
        let (activation, norm) = super::torch::block_settings(case.activation, case.norm_first);
        for (backend, device) in devices {
            for strategy in STRATEGIES {
                let block = DecoderBlockConfig::new(case.d_model, case.n_heads, case.d_ff)
                    .with_dropout(0.0)
                    .with_activation(activation)
                    .with_norm(norm)
                    .with_layer_norm_eps(case.layer_norm_eps)
                    .with_strategy(strategy)
                    .init(device)?
                    .load_pytorch_state_dict(&dict, "")?;
                let input = DecoderInput::new(case.tgt.try_tensor(device)?).with_memory(
                    case.memory.try_tensor(device)?,
                    Some(case.memory_padding.try_bool_tensor(device)?),
                );
                let out = block.try_forward(input)?.output;
                let mut c = Closeness::default();
                c.tensor(out, &case.out);
                reports.push(CaseReport::new(
                    DecoderLayerFile::PATH,
                    &case.name,
                    backend,
                    strategy.name(),
                    &c,
                ));
            }
        }
    }
    Ok(reports)
}
