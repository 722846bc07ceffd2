//! `mha.json`: `torch.nn.MultiheadAttention` (self and cross, with key padding), parameters set
//! from the PyTorch tensors; outputs on every strategy, per-head weights where asked.

use anyhow::Result;
use attn_model::{MhaInput, MultiHeadAttentionConfig, NeedWeights, TorchMultiheadAttention};
use burn::tensor::Device;
use serde::Deserialize;

use super::{BoolRef, CaseReport, Cases, Comparison, RefTensor, STRATEGIES, torch_linear};

#[derive(Deserialize)]
struct Case {
    name: String,
    d_model: usize,
    n_heads: usize,
    w_q: RefTensor,
    b_q: RefTensor,
    w_k: RefTensor,
    b_k: RefTensor,
    w_v: RefTensor,
    b_v: RefTensor,
    w_o: RefTensor,
    b_o: RefTensor,
    query: RefTensor,
    /// Keys and values come from here; self-attention cases store the query again.
    context: RefTensor,
    key_padding_masked: BoolRef,
    out: RefTensor,
    weights_per_head: Option<RefTensor>,
}

pub(super) fn check(text: &str, devices: &[(String, Device)]) -> Result<Vec<CaseReport>> {
    let file: Cases<Case> = serde_json::from_str(text)?;
    let mut reports = Vec::new();
    for case in &file.cases {
        for (backend, device) in devices {
            for strategy in STRATEGIES {
                let weights = TorchMultiheadAttention {
                    q: torch_linear(&case.w_q, &case.b_q, device)?,
                    k: torch_linear(&case.w_k, &case.b_k, device)?,
                    v: torch_linear(&case.w_v, &case.b_v, device)?,
                    out_proj: torch_linear(&case.w_o, &case.b_o, device)?,
                };
                let [_, d_context] = case.w_k.shape[..] else {
                    anyhow::bail!("case {}: w_k must be [d_model, d_context]", case.name);
                };
                let mha = MultiHeadAttentionConfig::new(case.d_model, case.n_heads)
                    .with_d_context(Some(d_context))
                    .with_strategy(strategy)
                    .init(device)?
                    .load_pytorch(weights)?;
                let query = case.query.tensor::<3>(device)?;
                let input = if case.name.starts_with("self") {
                    MhaInput::self_attention(query)
                } else {
                    MhaInput::cross_attention(query, case.context.tensor(device)?)
                };
                // Weights exist only where they are materialised: the explicit strategy.
                let need = match (&case.weights_per_head, strategy) {
                    (Some(_), attn_core::Strategy::Explicit) => NeedWeights::PerHead,
                    _ => NeedWeights::No,
                };
                let out = mha.try_forward(
                    input
                        .with_padding(case.key_padding_masked.tensor(device))
                        .with_weights(need),
                )?;
                let mut c = Comparison::default();
                c.add(out.output, &case.out)?;
                if let (Some(got), Some(expected)) = (out.weights, &case.weights_per_head) {
                    c.add(got, expected)?;
                }
                reports.push(c.report("mha.json", &case.name, backend, strategy.name()));
            }
        }
    }
    Ok(reports)
}
