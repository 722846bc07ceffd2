//! `positional.json`: the sinusoidal table, both rotary pairings and the ALiBi slopes, within
//! 1e-6 on every backend.

use std::collections::BTreeMap;

use anyhow::Result;
use attn_pos::try_alibi_bias;
use attn_pos::{AlibiForm, DEFAULT_THETA, RotaryEncoding, RotaryPairing, SinusoidalEncoding};
use burn::tensor::{Device, Tensor};
use serde::Deserialize;

use super::{CaseReport, Comparison, RefTensor};

const FILE: &str = "positional.json";
/// The tolerance the positional schemes are held to (absolute).
const TOL: f32 = 1e-6;

#[derive(Deserialize)]
struct File {
    sinusoidal: Option<Sinusoidal>,
    rope: Option<Rope>,
    alibi: Option<Alibi>,
}

#[derive(Deserialize)]
struct Sinusoidal {
    d_model: usize,
    len: usize,
    pe: RefTensor,
}

#[derive(Deserialize)]
struct Rope {
    head_dim: usize,
    len: usize,
    x: RefTensor,
    interleaved: RefTensor,
    half_split: RefTensor,
}

#[derive(Deserialize)]
struct Alibi {
    /// Head count (as a string key) to slopes, head 0 first.
    slopes: BTreeMap<String, Vec<f64>>,
}

pub(super) fn check(text: &str, devices: &[(String, Device)]) -> Result<Vec<CaseReport>> {
    let file: File = serde_json::from_str(text)?;
    let mut reports = Vec::new();
    for (backend, device) in devices {
        let mut report = |case: &str, comparison: Comparison| {
            reports.push(comparison.report(FILE, case, backend, "table"));
        };
        if let Some(s) = &file.sinusoidal {
            let mut c = Comparison::within(TOL, 0.0);
            let table = SinusoidalEncoding::standard(s.d_model)?.table(s.len, 0, device); // [len, d_model]
            c.add(table, &s.pe)?;
            report("sinusoidal", c);
        }
        if let Some(r) = &file.rope {
            // One head of `len` positions, the position of each row its index.
            let x = r.x.tensor::<2>(device)?.reshape([1, 1, r.len, r.head_dim]); // [1, 1, len, d_head]
            for (case, pairing, expected) in [
                (
                    "rope_interleaved",
                    RotaryPairing::Interleaved,
                    &r.interleaved,
                ),
                ("rope_half_split", RotaryPairing::HalfSplit, &r.half_split),
            ] {
                let mut c = Comparison::within(TOL, 0.0);
                let rope = RotaryEncoding::new(r.head_dim, DEFAULT_THETA, pairing)?;
                let out = rope.try_apply(x.clone(), 0)?.reshape([r.len, r.head_dim]); // [len, d_head]
                c.add(out, expected)?;
                report(case, c);
            }
        }
        if let Some(a) = &file.alibi {
            for (n_heads, slopes) in &a.slopes {
                let n_heads: usize = n_heads.parse()?;
                // Two positions: the bias from query 1 to key 0, one step back, is −slope.
                let bias = try_alibi_bias(n_heads, 2, 2, AlibiForm::Causal, device)?; // [n_heads, 2, 2]
                let slopes_got: Tensor<1> = bias
                    .slice([0..n_heads, 1..2, 0..1])
                    .reshape([n_heads])
                    .neg();
                let expected = RefTensor {
                    shape: vec![slopes.len()],
                    data: slopes.iter().map(|&s| s as f32).collect(),
                };
                let mut c = Comparison::within(TOL, 0.0);
                c.add(slopes_got, &expected)?;
                report(&format!("alibi_slopes_{n_heads}"), c);
            }
        }
    }
    Ok(reports)
}
