//! `sdpa.json`: scaled dot-product attention cases, checked on every strategy, with weights
//! (explicit strategy) and gradients where the case carries them.

use anyhow::{Result, bail};
use attn_core::{
    AttentionOptions, CausalAlignment, Strategy, native_attention, native_attention_backward,
    try_scaled_dot_product_attention,
};
use burn::tensor::Device;
use serde::Deserialize;

use super::{CaseReport, Cases, Comparison, RefTensor, STRATEGIES};

#[derive(Deserialize)]
struct Case {
    name: String,
    q: RefTensor,
    k: RefTensor,
    v: RefTensor,
    out: RefTensor,
    weights: Option<RefTensor>,
    masked: Option<RefTensor>,
    bias: Option<RefTensor>,
    causal: Option<String>,
    scale: Option<f64>,
    grad_out: Option<RefTensor>,
    grad_q: Option<RefTensor>,
    grad_k: Option<RefTensor>,
    grad_v: Option<RefTensor>,
}

pub(super) fn check(text: &str, devices: &[(String, Device)]) -> Result<Vec<CaseReport>> {
    let file: Cases<Case> = serde_json::from_str(text)?;
    let mut reports = Vec::new();
    for case in &file.cases {
        for (backend, device) in devices {
            for strategy in STRATEGIES {
                let comparison = run(case, device, strategy)?;
                reports.push(comparison.report("sdpa.json", &case.name, backend, strategy.name()));
            }
        }
    }
    Ok(reports)
}

fn options(case: &Case, device: &Device, strategy: Strategy) -> Result<AttentionOptions> {
    let mut options = AttentionOptions::new().with_strategy(strategy);
    if let Some(m) = &case.masked {
        options = options.with_mask(m.bool_tensor(device)?);
    }
    if let Some(b) = &case.bias {
        options = options.with_bias(b.tensor(device)?);
    }
    if let Some(c) = &case.causal {
        options = options.with_causal(match c.as_str() {
            "top_left" => CausalAlignment::TopLeft,
            "bottom_right" => CausalAlignment::BottomRight,
            other => bail!("case {}: unknown causal alignment {other:?}", case.name),
        });
    }
    if let Some(s) = case.scale {
        options = options.with_scale(s);
    }
    Ok(options)
}

fn run(case: &Case, device: &Device, strategy: Strategy) -> Result<Comparison> {
    let mut comparison = Comparison::default();
    let wants_weights = strategy == Strategy::Explicit && case.weights.is_some();
    let opts = options(case, device, strategy)?.with_need_weights(wants_weights);
    let out = try_scaled_dot_product_attention(
        case.q.tensor(device)?,
        case.k.tensor(device)?,
        case.v.tensor(device)?,
        &opts,
    )?;
    comparison.add(out.context, &case.out)?;
    if let (Some(weights), Some(expected)) = (out.weights, &case.weights) {
        comparison.add(weights, expected)?;
    }

    if let (Some(grad_out), Some(gq), Some(gk), Some(gv)) =
        (&case.grad_out, &case.grad_q, &case.grad_k, &case.grad_v)
    {
        if strategy == Strategy::Native {
            // burn's autodiff does not record the native kernel; its own backward pass
            // computes the gradients from the forward's log-sum-exp.
            let opts = options(case, device, strategy)?;
            let (q, k, v) = (
                case.q.tensor::<4>(device)?,
                case.k.tensor::<4>(device)?,
                case.v.tensor::<4>(device)?,
            );
            let forward = native_attention(q.clone(), k.clone(), v.clone(), &opts)?;
            let grads =
                native_attention_backward(q, k, v, &forward, grad_out.tensor(device)?, &opts)?;
            for (grad, expected) in [(grads.dq, gq), (grads.dk, gk), (grads.dv, gv)] {
                comparison.add(grad, expected)?;
            }
            return Ok(comparison);
        }
        let autodiff = device.clone().autodiff();
        let q = case.q.tensor::<4>(&autodiff)?.require_grad();
        let k = case.k.tensor::<4>(&autodiff)?.require_grad();
        let v = case.v.tensor::<4>(&autodiff)?.require_grad();
        let opts = options(case, &autodiff, strategy)?;
        let out = try_scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &opts)?;
        let grads = (out.context * grad_out.tensor::<4>(&autodiff)?)
            .sum()
            .backward();
        for (input, expected) in [(&q, gq), (&k, gk), (&v, gv)] {
            match input.grad(&grads) {
                Some(grad) => comparison.add(grad, expected)?,
                None => bail!("case {}: no gradient reached an input", case.name),
            }
        }
    }
    Ok(comparison)
}
