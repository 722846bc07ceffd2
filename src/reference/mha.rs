//! `mha.json`: `torch.nn.MultiheadAttention` (self and cross, with key padding), parameters set
//! from the PyTorch tensors; outputs on every strategy, per-head weights where asked.

use anyhow::Result;
use attn_model::{MhaInput, MultiHeadAttentionConfig, NeedWeights};
use burn::tensor::Device;
use serde::Deserialize;

use super::{AttentionWeights, BoolRef, CaseReport, Cases, Comparison, RefTensor, STRATEGIES};

#[derive(Deserialize)]
struct Case {
    name: String,
    d_model: usize,
    n_heads: usize,
    #[serde(flatten)]
    weights: AttentionWeights,
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
        let [_, d_context] = case.weights.w_k.shape[..] else {
            anyhow::bail!("case {}: w_k must be [d_model, d_context]", case.name);
        };
        for (backend, device) in devices {
            let weights = case.weights.torch(device)?;
            for strategy in STRATEGIES {
                let mha = MultiHeadAttentionConfig::new(case.d_model, case.n_heads)
                    .with_d_context(Some(d_context))
                    .with_strategy(strategy)
                    .init(device)?
                    .load_pytorch(weights.clone())?;
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
