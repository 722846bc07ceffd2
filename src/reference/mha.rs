//! `mha.json`: `torch.nn.MultiheadAttention` (self and cross, with key padding), parameters set
//! from the PyTorch tensors; outputs on every strategy, per-head weights where asked.

use std::path::Path;

use anyhow::{Context, Result};
use attn_model::{MhaInput, MultiHeadAttentionConfig, NeedWeights};
use attn_reference::{Closeness, MhaFile, ReferenceFile};
use burn::tensor::Device;

use super::torch::torch_attention;
use super::{CaseReport, STRATEGIES};

pub(super) fn check(dir: &Path, devices: &[(String, Device)]) -> Result<Vec<CaseReport>> {
    let file = MhaFile::read_from(dir)?;
    let mut reports = Vec::new();
    for case in &file.cases {
        let d_context = case
            .attention
            .d_context()
            .with_context(|| format!("case {}: w_k must be [d_model, d_context]", case.name))?;
        for (backend, device) in devices {
            let weights = torch_attention(&case.attention, device)?;
            for strategy in STRATEGIES {
                let mha = MultiHeadAttentionConfig::new(case.d_model, case.n_heads)
                    .with_d_context(Some(d_context))
                    .with_strategy(strategy)
                    .init(device)?
                    .load_pytorch(weights.clone())?;
                let query = case.query.try_tensor::<3>(device)?;
                let input = if case.is_self_attention() {
                    MhaInput::self_attention(query)
                } else {
                    MhaInput::cross_attention(query, case.context.try_tensor(device)?)
                };
                // Weights exist only where they are materialised: the explicit strategy.
                let need = match (&case.weights_per_head, strategy) {
                    (Some(_), attn_core::Strategy::Explicit) => NeedWeights::PerHead,
                    _ => NeedWeights::No,
                };
                let out = mha.try_forward(
                    input
                        .with_padding(case.key_padding_masked.try_bool_tensor(device)?)
                        .with_weights(need),
                )?;
                let mut c = Closeness::default();
                c.tensor(out.output, &case.out);
                if let (Some(got), Some(expected)) = (out.weights, &case.weights_per_head) {
                    c.tensor(got, expected);
                }
                reports.push(CaseReport::new(
                    MhaFile::PATH,
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
