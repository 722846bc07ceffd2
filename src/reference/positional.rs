//! `positional.json`: the sinusoidal table, both rotary pairings and the ALiBi slopes, within
//! `attn_reference::positional::TOLERANCE` on every backend.

use std::path::Path;

use anyhow::Result;
use attn_pos::try_alibi_bias;
use attn_pos::{AlibiForm, DEFAULT_THETA, RotaryEncoding, RotaryPairing, SinusoidalEncoding};
use attn_reference::positional::TOLERANCE;
use attn_reference::{Closeness, PositionalFile, RefTensor, ReferenceFile};
use burn::tensor::{Device, Tensor};

use super::CaseReport;

pub(super) fn check(dir: &Path, devices: &[(String, Device)]) -> Result<Vec<CaseReport>> {
    let file = PositionalFile::read_from(dir)?;
    let mut reports = Vec::new();
    for (backend, device) in devices {
        let mut report = |case: &str, closeness: Closeness| {
            reports.push(CaseReport::new(
                PositionalFile::PATH,
                case,
                backend,
                "table",
                &closeness,
            ));
        };
        if let Some(s) = &file.sinusoidal {
            let mut c = Closeness::new(TOLERANCE);
            let table = SinusoidalEncoding::standard(s.d_model)?.table(s.len, 0, device); // [len, d_model]
            c.tensor(table, &s.pe);
            report("sinusoidal", c);
        }
        if let Some(r) = &file.rope {
            // One head of `len` positions, the position of each row its index.
            let x =
                r.x.try_tensor::<2>(device)?
                    .reshape([1, 1, r.len, r.head_dim]); // [1, 1, len, d_head]
            for (case, pairing, expected) in [
                (
                    "rope_interleaved",
                    RotaryPairing::Interleaved,
                    &r.interleaved,
                ),
                ("rope_half_split", RotaryPairing::HalfSplit, &r.half_split),
            ] {
                let mut c = Closeness::new(TOLERANCE);
                let rope = RotaryEncoding::new(r.head_dim, DEFAULT_THETA, pairing)?;
                let out = rope.try_apply(x.clone(), 0)?.reshape([r.len, r.head_dim]); // [len, d_head]
                c.tensor(out, expected);
                report(case, c);
            }
        }
        if let Some(a) = &file.alibi {
            for (&n_heads, slopes) in &a.slopes {
                // Two positions: the bias from query 1 to key 0, one step back, is −slope.
                let bias = try_alibi_bias(n_heads, 2, 2, AlibiForm::Causal, device)?; // [n_heads, 2, 2]
                let slopes_got: Tensor<1> = bias
                    .slice([0..n_heads, 1..2, 0..1])
                    .reshape([n_heads])
                    .neg();
                let expected = RefTensor::new(
                    vec![slopes.len()],
                    slopes.iter().map(|&s| s as f32).collect(),
                )?;
                let mut c = Closeness::new(TOLERANCE);
                c.tensor(slopes_got, &expected);
                report(&format!("alibi_slopes_{n_heads}"), c);
            }
        }
    }
    Ok(reports)
}
