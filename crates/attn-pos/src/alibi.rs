//! ALiBi, attention with linear biases (Press et al. 2022): no position is added to the tokens;
//! instead head `h` subtracts `slope_h × distance` from every score,
//!
//! ```text
//! scores[h, i, j] = q_i · k_j / √d_head − slope_h · |i − j|
//! ```
//!
//! so that each head prefers nearby keys, with its own reach. Slopes form a geometric sequence
//! `2^(−8/n), 2^(−16/n), …, 2^(−8)` for `n` heads; for a head count that is not a power of two
//! the paper takes the `2^⌊log₂ n⌋` slopes of that power and fills the rest with every other
//! slope of the next power of two.

use burn::tensor::{Device, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::error::PosError;

/// Which keys are penalised by distance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AlibiForm {
    /// For decoders: `−slope · (i − j)` for keys at or before the query; keys after it get 0,
    /// because causal attention masks them anyway. As in the paper.
    Causal,
    /// For encoders: `−slope · |i − j|` on both sides.
    Symmetric,
}

/// The slope of each head, largest first for a power of two.
///
/// Returns an empty vector for `n_heads == 0`; [`try_alibi_bias`] reports that as
/// [`PosError::ZeroHeads`].
///
/// ```
/// use attn_pos::alibi_slopes;
///
/// assert_eq!(alibi_slopes(4), vec![0.25, 0.0625, 0.015625, 0.00390625]);
/// // Six heads: the four of n = 4, then slopes 1 and 3 of n = 8.
/// assert_eq!(alibi_slopes(6)[4..], [0.5, 0.125]);
/// ```
pub fn alibi_slopes(n_heads: usize) -> Vec<f64> {
    if n_heads == 0 {
        return Vec::new();
    }
    if n_heads.is_power_of_two() {
        return power_of_two_slopes(n_heads);
    }
    // The largest power of two below n_heads gets its own ladder; the heads left over
    // interleave between its rungs, taken from the ladder twice as fine.
    let below = 1 << n_heads.ilog2();
    let mut slopes = power_of_two_slopes(below);
    slopes.extend(
        power_of_two_slopes(2 * below)
            .into_iter()
            .step_by(2)
            .take(n_heads - below),
    );
    slopes
}

/// `2^(−8k/n)` for `k in 1..=n`.
fn power_of_two_slopes(n: usize) -> Vec<f64> {
    (1..=n)
        .map(|k| 2f64.powf(-8.0 * k as f64 / n as f64))
        .collect()
}

/// The additive bias `−slope_h · distance(i, j)` for every head, query and key.
///
/// Query `i` sits at position `i + seq_len_kv − seq_len_q` (bottom-right alignment): with a
/// key/value cache the new queries are the last positions, and for `seq_len_q == seq_len_kv`
/// this is the plain `i`. Add it to the scores through
/// `AttentionOptions::with_bias(bias.unsqueeze::<4>())` (`[1, n_heads, seq_len_q, seq_len_kv]`);
/// the causal form also needs causal attention (bottom-right) to hide future keys.
///
/// # Shapes
///
/// - output: `[n_heads, seq_len_q, seq_len_kv]`
///
/// # Panics
///
/// Panics where [`try_alibi_bias`] returns an error.
///
/// ```
/// use attn_pos::{alibi_bias, AlibiForm};
/// use burn::tensor::Device;
///
/// let device = Device::flex();
/// // One head, slope 2^-8; three queries against three keys.
/// let bias = alibi_bias(1, 3, 3, AlibiForm::Symmetric, &device);
/// let bias = bias.into_data().try_into_vec::<f32>().unwrap();
/// let s = 1.0 / 256.0;
/// assert_eq!(bias, [0.0, -s, -2.0 * s, -s, 0.0, -s, -2.0 * s, -s, 0.0]);
/// ```
pub fn alibi_bias(
    n_heads: usize,
    seq_len_q: usize,
    seq_len_kv: usize,
    form: AlibiForm,
    device: &Device,
) -> Tensor<3> {
    try_alibi_bias(n_heads, seq_len_q, seq_len_kv, form, device)
        .unwrap_or_else(|e| panic!("alibi_bias: {e}"))
}

/// [`alibi_bias`], reporting impossible sizes as errors.
///
/// # Shapes
///
/// - output: `[n_heads, seq_len_q, seq_len_kv]`
///
/// # Errors
///
/// [`PosError::ZeroHeads`] for `n_heads == 0`, [`PosError::ZeroSize`] for an empty
/// `seq_len_q` or `seq_len_kv`.
pub fn try_alibi_bias(
    n_heads: usize,
    seq_len_q: usize,
    seq_len_kv: usize,
    form: AlibiForm,
    device: &Device,
) -> Result<Tensor<3>, PosError> {
    if n_heads == 0 {
        return Err(PosError::ZeroHeads);
    }
    if seq_len_q == 0 {
        return Err(PosError::ZeroSize { what: "seq_len_q" });
    }
    if seq_len_kv == 0 {
        return Err(PosError::ZeroSize { what: "seq_len_kv" });
    }
    let distance = distance(seq_len_q, seq_len_kv, form, device).unsqueeze::<3>(); // [1, seq_len_q, seq_len_kv]
    let neg_slopes: Vec<f32> = alibi_slopes(n_heads).iter().map(|&s| -s as f32).collect();
    let neg_slopes = Tensor::<3>::from_data(TensorData::new(neg_slopes, [n_heads, 1, 1]), device); // [n_heads, 1, 1]
    Ok(distance * neg_slopes) // [n_heads, seq_len_q, seq_len_kv]
}

/// How far key `j` is from query `i`, counted the way `form` penalises it.
///
/// # Shapes
///
/// - output: `[seq_len_q, seq_len_kv]`
fn distance(seq_len_q: usize, seq_len_kv: usize, form: AlibiForm, device: &Device) -> Tensor<2> {
    // Bottom-right alignment: the last query is the last key's position.
    let first = seq_len_kv as i64 - seq_len_q as i64;
    let query_pos =
        Tensor::<1, Int>::arange(first..first + seq_len_q as i64, device).reshape([seq_len_q, 1]); // [seq_len_q, 1]
    let key_pos = Tensor::<1, Int>::arange(0..seq_len_kv as i64, device).reshape([1, seq_len_kv]); // [1, seq_len_kv]
    let behind = query_pos - key_pos; // [seq_len_q, seq_len_kv]
    let distance = match form {
        AlibiForm::Causal => behind.clamp_min(0),
        AlibiForm::Symmetric => behind.abs(),
    };
    distance.float()
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_core::{AttentionOptions, CausalAlignment, scaled_dot_product_attention};
    use attn_testing::{SeededRng, assert_close_slices, for_each_device, to_vec};
    use std::collections::BTreeMap;

    #[derive(serde::Deserialize)]
    struct Reference {
        alibi: AlibiRef,
    }

    #[derive(serde::Deserialize)]
    struct AlibiRef {
        slopes: BTreeMap<String, Vec<f64>>,
    }

    fn reference_slopes() -> BTreeMap<usize, Vec<f64>> {
        attn_testing::load_reference::<Reference>("positional.json")
            .alibi
            .slopes
            .into_iter()
            .map(|(n, s)| (n.parse().expect("head counts are integers"), s))
            .collect()
    }

    #[test]
    fn slopes_match_the_reference() {
        let reference = reference_slopes();
        assert!(reference.contains_key(&6) && reference.contains_key(&12));
        for (n_heads, expected) in &reference {
            let got = alibi_slopes(*n_heads);
            assert_eq!(got.len(), *n_heads);
            for (h, (g, e)) in got.iter().zip(expected).enumerate() {
                assert!(
                    (g - e).abs() < 1e-12,
                    "n_heads {n_heads}, head {h}: {g} vs {e}"
                );
            }
        }
    }

    #[test]
    fn bias_uses_the_reference_slopes_on_every_backend() {
        let reference = reference_slopes();
        for_each_device(|d| {
            for (&n_heads, slopes) in &reference {
                let (seq_len_q, seq_len_kv) = (3, 5);
                let bias = alibi_bias(
                    n_heads,
                    seq_len_q,
                    seq_len_kv,
                    AlibiForm::Symmetric,
                    &d.device,
                );
                assert_eq!(bias.dims(), [n_heads, seq_len_q, seq_len_kv]);
                let mut expected = Vec::new();
                for slope in slopes {
                    for i in 0..seq_len_q {
                        let pos = (i + seq_len_kv - seq_len_q) as f64;
                        for j in 0..seq_len_kv {
                            expected.push((-slope * (pos - j as f64).abs()) as f32);
                        }
                    }
                }
                let what = format!("{n_heads} heads on {}", d.name);
                assert_close_slices(&to_vec(bias), &expected, 1e-6, 0.0, &what);
            }
        });
    }

    #[test]
    fn causal_form_is_zero_after_the_query_and_linear_before() {
        for_each_device(|d| {
            let (n_heads, seq_len_q, seq_len_kv) = (3, 2, 5);
            let bias = to_vec(alibi_bias(
                n_heads,
                seq_len_q,
                seq_len_kv,
                AlibiForm::Causal,
                &d.device,
            ));
            let slopes = alibi_slopes(n_heads);
            for (h, slope) in slopes.iter().enumerate() {
                for i in 0..seq_len_q {
                    // Queries 0 and 1 sit at positions 3 and 4 (bottom-right).
                    let pos = i + 3;
                    for j in 0..seq_len_kv {
                        let got = bias[(h * seq_len_q + i) * seq_len_kv + j];
                        let expected = if j <= pos {
                            -(slope * (pos - j) as f64) as f32
                        } else {
                            0.0
                        };
                        assert!(
                            (got - expected).abs() < 1e-6,
                            "head {h} query {i} key {j}: {got} on {}",
                            d.name
                        );
                    }
                }
            }
        });
    }

    #[test]
    fn square_symmetric_bias_is_symmetric_and_zero_on_the_diagonal() {
        for_each_device(|d| {
            let bias = alibi_bias(5, 7, 7, AlibiForm::Symmetric, &d.device);
            let transposed = bias.clone().swap_dims(1, 2); // [n_heads, seq_len_kv, seq_len_q]
            attn_testing::assert_tensors_close(bias.clone(), transposed, 0.0, 0.0, d.name);
            let values = to_vec(bias);
            for h in 0..5 {
                for i in 0..7 {
                    assert_eq!(values[(h * 7 + i) * 7 + i], 0.0, "{}", d.name);
                }
            }
        });
    }

    #[test]
    fn attention_with_the_bias_prefers_near_keys() {
        // Identical keys make every score equal, so the weights are softmax(bias) alone:
        // for one query they must fall with distance, following exp(−slope · distance).
        for_each_device(|d| {
            let mut rng = SeededRng::new(17);
            let (batch, n_heads, seq_len, d_head) = (2, 3, 5, 4);
            let q = rng.tensor([batch, n_heads, seq_len, d_head], &d.device);
            let k = Tensor::<4>::zeros([batch, n_heads, seq_len, d_head], &d.device);
            let v = rng.tensor([batch, n_heads, seq_len, d_head], &d.device);
            let bias = alibi_bias(n_heads, seq_len, seq_len, AlibiForm::Causal, &d.device)
                .unsqueeze::<4>(); // [1, n_heads, seq_len, seq_len]
            let options = AttentionOptions::new()
                .with_bias(bias)
                .with_causal(CausalAlignment::BottomRight)
                .with_need_weights(true);
            let weights = scaled_dot_product_attention(q, k, v, &options)
                .weights
                .expect("weights were asked for");
            let weights = to_vec(weights);
            let slopes = alibi_slopes(n_heads);
            for b in 0..batch {
                for (h, slope) in slopes.iter().enumerate() {
                    let i = seq_len - 1;
                    let row = &weights[((b * n_heads + h) * seq_len + i) * seq_len..][..seq_len];
                    let unnormalised: Vec<f64> = (0..seq_len)
                        .map(|j| (-slope * (i - j) as f64).exp())
                        .collect();
                    let total: f64 = unnormalised.iter().sum();
                    let expected: Vec<f32> =
                        unnormalised.iter().map(|u| (u / total) as f32).collect();
                    assert_close_slices(
                        row,
                        &expected,
                        1e-5,
                        1e-4,
                        &format!("head {h} on {}", d.name),
                    );
                }
            }
        });
    }

    #[test]
    fn rejects_zero_sizes() {
        let device = Device::flex();
        assert!(alibi_slopes(0).is_empty());
        assert_eq!(
            try_alibi_bias(0, 3, 3, AlibiForm::Causal, &device).err(),
            Some(PosError::ZeroHeads)
        );
        assert_eq!(
            try_alibi_bias(2, 0, 3, AlibiForm::Causal, &device).err(),
            Some(PosError::ZeroSize { what: "seq_len_q" })
        );
        assert_eq!(
            try_alibi_bias(2, 3, 0, AlibiForm::Symmetric, &device).err(),
            Some(PosError::ZeroSize { what: "seq_len_kv" })
        );
    }
}
