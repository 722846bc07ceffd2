//! `encoder_layer.json`: `torch.nn.TransformerEncoderLayer` (ReLU or GELU, post- or pre-norm,
//! with key padding), parameters set from the PyTorch tensors, on every strategy.

use std::path::Path;

use anyhow::Result;
use attn_model::{EncoderBlockConfig, EncoderInput, TorchEncoderLayer, TorchLayerNorm};
use attn_reference::{Closeness, EncoderLayerCase, EncoderLayerFile, RefTensor, ReferenceFile};
use burn::tensor::Device;

use super::torch::{torch_attention, torch_linear};
use super::{CaseReport, STRATEGIES};

fn layer_norm(gamma: &RefTensor, beta: &RefTensor, device: &Device) -> Result<TorchLayerNorm> {
    Ok(TorchLayerNorm {
        weight: gamma.try_tensor(device)?,
        bias: Some(beta.try_tensor(device)?),
    })
}

fn weights(case: &EncoderLayerCase, device: &Device) -> Result<TorchEncoderLayer> {
    Ok(TorchEncoderLayer {
        self_attn: torch_attention(&case.self_attn, device)?,
        linear1: torch_linear(&case.w_ff1, &case.b_ff1, device)?,
        linear2: torch_linear(&case.w_ff2, &case.b_ff2, device)?,
        norm1: layer_norm(&case.norm1_gamma, &case.norm1_beta, device)?,
        norm2: layer_norm(&case.norm2_gamma, &case.norm2_beta, device)?,
    })
}

pub(super) fn check(dir: &Path, devices: &[(String, Device)]) -> Result<Vec<CaseReport>> {
    let file = EncoderLayerFile::read_from(dir)?;
    let mut reports = Vec::new();
    for case in &file.cases {
        let (activation, norm) = super::torch::block_settings(case.activation, case.norm_first);
        for (backend, device) in devices {
            let weights = weights(case, device)?;
            for strategy in STRATEGIES {
                let block = EncoderBlockConfig::new(case.d_model, case.n_heads, case.d_ff)
                    .with_dropout(0.0)
                    .with_activation(activation)
                    .with_norm(norm)
                    .with_layer_norm_eps(case.layer_norm_eps)
                    .with_strategy(strategy)
                    .init(device)?
                    .load_pytorch(weights.clone())?;
                let out = block
                    .try_forward(
                        EncoderInput::new(case.input.try_tensor(device)?)
                            .with_padding(case.key_padding_masked.try_bool_tensor(device)?),
                    )?
                    .output;
                let mut c = Closeness::default();
                c.tensor(out, &case.out);
                reports.push(CaseReport::new(
                    EncoderLayerFile::PATH,
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
