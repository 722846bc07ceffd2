//! `encoder_layer.json`: `torch.nn.TransformerEncoderLayer` (ReLU or GELU, post- or pre-norm,
//! with key padding), parameters set from the PyTorch tensors, on every strategy.

use anyhow::{Result, bail};
use attn_model::{
    Activation, EncoderBlockConfig, NormPlacement, TorchEncoderLayer, TorchLayerNorm,
};
use burn::tensor::Device;
use serde::Deserialize;

use super::{
    AttentionWeights, BoolRef, CaseReport, Cases, Comparison, RefTensor, STRATEGIES, torch_linear,
};

#[derive(Deserialize)]
struct Case {
    name: String,
    d_model: usize,
    n_heads: usize,
    d_ff: usize,
    activation: String,
    norm_first: bool,
    layer_norm_eps: f64,
    #[serde(flatten)]
    attention: AttentionWeights,
    w_ff1: RefTensor,
    b_ff1: RefTensor,
    w_ff2: RefTensor,
    b_ff2: RefTensor,
    norm1_gamma: RefTensor,
    norm1_beta: RefTensor,
    norm2_gamma: RefTensor,
    norm2_beta: RefTensor,
    input: RefTensor,
    key_padding_masked: BoolRef,
    out: RefTensor,
}

fn layer_norm(gamma: &RefTensor, beta: &RefTensor, device: &Device) -> Result<TorchLayerNorm> {
    Ok(TorchLayerNorm {
        weight: gamma.tensor(device)?,
        bias: Some(beta.tensor(device)?),
    })
}

fn weights(case: &Case, device: &Device) -> Result<TorchEncoderLayer> {
    Ok(TorchEncoderLayer {
        self_attn: case.attention.torch(device)?,
        linear1: torch_linear(&case.w_ff1, &case.b_ff1, device)?,
        linear2: torch_linear(&case.w_ff2, &case.b_ff2, device)?,
        norm1: layer_norm(&case.norm1_gamma, &case.norm1_beta, device)?,
        norm2: layer_norm(&case.norm2_gamma, &case.norm2_beta, device)?,
    })
}

pub(super) fn check(text: &str, devices: &[(String, Device)]) -> Result<Vec<CaseReport>> {
    let file: Cases<Case> = serde_json::from_str(text)?;
    let mut reports = Vec::new();
    for case in &file.cases {
        let activation = match case.activation.as_str() {
            "relu" => Activation::Relu,
            "gelu" => Activation::Gelu,
            other => bail!("case {}: unknown activation {other:?}", case.name),
        };
        let norm = if case.norm_first {
            NormPlacement::Pre
        } else {
            NormPlacement::Post
        };
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
                let out = block.try_forward(
                    case.input.tensor(device)?,
                    Some(case.key_padding_masked.tensor(device)),
                )?;
                let mut c = Comparison::default();
                c.add(out, &case.out)?;
                reports.push(c.report("encoder_layer.json", &case.name, backend, strategy.name()));
            }
        }
    }
    Ok(reports)
}
