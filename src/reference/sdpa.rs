//! `sdpa.json`: scaled dot-product attention cases, checked on every strategy, with weights
//! (explicit strategy) and gradients where the case carries them.

use std::path::Path;

use anyhow::{Result, bail};
use attn_core::{
    AttentionOptions, CausalAlignment, Strategy, native_attention, native_attention_backward,
    try_scaled_dot_product_attention,
};
use attn_reference::sdpa::Causal;
use attn_reference::{Closeness, ReferenceFile, SdpaCase, SdpaFile};
use burn::tensor::Device;

use super::{CaseReport, STRATEGIES};

pub(super) fn check(dir: &Path, devices: &[(String, Device)]) -> Result<Vec<CaseReport>> {
    let file = SdpaFile::read_from(dir)?;
    let mut reports = Vec::new();
    for case in &file.cases {
        for (backend, device) in devices {
            for strategy in STRATEGIES {
                let closeness = run(case, device, strategy)?;
                reports.push(CaseReport::new(
                    SdpaFile::PATH,
                    &case.name,
                    backend,
                    strategy.name(),
                    &closeness,
                ));
            }
        }
    }
    Ok(reports)
}

fn options(case: &SdpaCase, device: &Device, strategy: Strategy) -> Result<AttentionOptions> {
    let mut options = AttentionOptions::new().with_strategy(strategy);
    if let Some(m) = &case.masked {
        options = options.with_mask(m.try_bool_tensor(device)?);
    }
    if let Some(b) = &case.bias {
        options = options.with_bias(b.try_tensor(device)?);
    }
    if let Some(c) = case.causal {
        options = options.with_causal(match c {
            Causal::TopLeft => CausalAlignment::TopLeft,
            Causal::BottomRight => CausalAlignment::BottomRight,
        });
    }
    if let Some(s) = case.scale {
        options = options.with_scale(s);
    }
    Ok(options)
}

fn run(case: &SdpaCase, device: &Device, strategy: Strategy) -> Result<Closeness> {
    let mut closeness = Closeness::default();
    let wants_weights = strategy == Strategy::Explicit && case.weights.is_some();
    let opts = options(case, device, strategy)?.with_need_weights(wants_weights);
    let out = try_scaled_dot_product_attention(
        case.q.try_tensor(device)?,
        case.k.try_tensor(device)?,
        case.v.try_tensor(device)?,
        &opts,
    )?;
    closeness.tensor(out.context, &case.out);
    if let (Some(weights), Some(expected)) = (out.weights, &case.weights) {
        closeness.tensor(weights, expected);
    }

    if let (Some(grad_out), Some(gq), Some(gk), Some(gv)) =
        (&case.grad_out, &case.grad_q, &case.grad_k, &case.grad_v)
    {
        if strategy == Strategy::Native {
            // burn's autodiff does not record the native kernel; its own backward pass
            // computes the gradients from the forward's log-sum-exp.
            let opts = options(case, device, strategy)?;
            let (q, k, v) = (
                case.q.try_tensor::<4>(device)?,
                case.k.try_tensor::<4>(device)?,
                case.v.try_tensor::<4>(device)?,
            );
            let forward = native_attention(q.clone(), k.clone(), v.clone(), &opts)?;
            let grads =
                native_attention_backward(q, k, v, &forward, grad_out.try_tensor(device)?, &opts)?;
            for (grad, expected) in [(grads.dq, gq), (grads.dk, gk), (grads.dv, gv)] {
                closeness.tensor(grad, expected);
            }
            return Ok(closeness);
        }
        let autodiff = device.clone().autodiff();
        let q = case.q.try_tensor::<4>(&autodiff)?.require_grad();
        let k = case.k.try_tensor::<4>(&autodiff)?.require_grad();
        let v = case.v.try_tensor::<4>(&autodiff)?.require_grad();
        let opts = options(case, &autodiff, strategy)?;
        let out = try_scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &opts)?;
        let grads = (out.context * grad_out.try_tensor::<4>(&autodiff)?)
            .sum()
            .backward();
        for (input, expected) in [(&q, gq), (&k, gk), (&v, gv)] {
            match input.grad(&grads) {
                Some(grad) => closeness.tensor(grad, expected),
                None => bail!("case {}: no gradient reached an input", case.name),
            };
        }
    }
    Ok(closeness)
}
