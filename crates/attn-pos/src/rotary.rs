//! Rotary position embedding (RoPE, Su et al. 2021): each pair of features of a query or key is
//! rotated by an angle proportional to its position,
//!
//! ```text
//! ω_j = theta^(-2j / d_head)                          for j in 0..d_head / 2
//! (a, b) at position p  ↦  (a cos pω_j − b sin pω_j,  a sin pω_j + b cos pω_j)
//! ```
//!
//! so that `q_m · k_n` depends on `m − n` only. Which two features form pair `j` is a convention
//! that checkpoints disagree on, so it is chosen explicitly with [`RotaryPairing`]:
//! interleaved `(2j, 2j + 1)` (the paper, GPT-J, burn's `RotaryEncoding`) or half-split
//! `(j, j + d_head / 2)` (GPT-NeoX, Llama in Hugging Face `transformers`).
//!
//! Written as `x ⊙ cos + rotate(x) ⊙ sin`, where `rotate` sends each pair `(a, b)` to `(−b, a)`
//! and `cos`, `sin` repeat each pair's value at both of its features.
//!
//! Models trained on short texts and run on long ones rescale the frequencies
//! ([`RotaryScaling`]): all of them by one factor (`linear`, position interpolation), or, as
//! Llama 3.1 does, only the low ones, with a smooth ramp between (`llama3`).

use std::fmt;

use burn::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::error::PosError;
use crate::position_table::{PositionTable, constant_module};

/// The paper's theta.
pub const DEFAULT_THETA: f64 = 10_000.0;

/// Which two features of a head form each rotated pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RotaryPairing {
    /// Pair `j` is features `(2j, 2j + 1)`: the paper, GPT-J, burn.
    Interleaved,
    /// Pair `j` is features `(j, j + d_head / 2)`: GPT-NeoX, Llama in Hugging Face.
    HalfSplit,
}

impl RotaryPairing {
    /// The pair feature `k` of a head of width `d_head` belongs to.
    pub fn pair_of(self, k: usize, d_head: usize) -> usize {
        match self {
            RotaryPairing::Interleaved => k / 2,
            RotaryPairing::HalfSplit => k % (d_head / 2),
        }
    }
}

/// How the frequencies `ω_j` are rescaled for contexts longer than the model was trained on:
/// Hugging Face's `rope_type` (`rope_scaling` or `rope_parameters` in `config.json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub enum RotaryScaling {
    /// `ω_j` as they are (`rope_type: "default"`).
    #[default]
    None,
    /// Every `ω_j` divided by `factor` (`"linear"`, Chen et al. 2023's position interpolation).
    Linear {
        /// How many times longer the contexts are.
        factor: f64,
    },
    /// Llama 3.1's scaling (`"llama3"`): wavelengths `2π / ω_j` shorter than
    /// `original_max_position_embeddings / high_freq_factor` keep their frequency, those
    /// longer than `original_max_position_embeddings / low_freq_factor` are divided by
    /// `factor`, and those between blend the two linearly in
    /// `original_max_position_embeddings / wavelength`.
    Llama3 {
        /// The division of the low frequencies.
        factor: f64,
        /// Wavelengths past `original / low_freq_factor` are low frequencies.
        low_freq_factor: f64,
        /// Wavelengths below `original / high_freq_factor` are high frequencies.
        high_freq_factor: f64,
        /// The context length the model was first trained on.
        original_max_position_embeddings: usize,
    },
}

impl RotaryScaling {
    /// Whether the frequencies are left as they are.
    pub fn is_none(&self) -> bool {
        *self == RotaryScaling::None
    }

    /// Checks the factors, naming the one that cannot work.
    ///
    /// # Errors
    /// [`PosError::InvalidScaling`] for a factor that is not finite and positive, a
    /// `high_freq_factor` not above `low_freq_factor`, or a zero original length.
    pub fn validate(&self) -> Result<(), PosError> {
        let positive = |what: &'static str, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(())
            } else {
                Err(PosError::InvalidScaling {
                    what,
                    value: value.to_string(),
                })
            }
        };
        match *self {
            RotaryScaling::None => Ok(()),
            RotaryScaling::Linear { factor } => positive("factor", factor),
            RotaryScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                positive("factor", factor)?;
                positive("low_freq_factor", low_freq_factor)?;
                positive("high_freq_factor", high_freq_factor)?;
                if high_freq_factor <= low_freq_factor {
                    return Err(PosError::InvalidScaling {
                        what: "high_freq_factor (it must exceed low_freq_factor)",
                        value: format!("{high_freq_factor} <= {low_freq_factor}"),
                    });
                }
                if original_max_position_embeddings == 0 {
                    return Err(PosError::InvalidScaling {
                        what: "original_max_position_embeddings",
                        value: "0".into(),
                    });
                }
                Ok(())
            }
        }
    }

    /// The frequency that replaces `omega`, as transformers' `_compute_linear_scaling_rope_parameters`
    /// and `_compute_llama3_parameters` compute it.
    pub fn rescale(&self, omega: f64) -> f64 {
        match *self {
            RotaryScaling::None => omega,
            RotaryScaling::Linear { factor } => omega / factor,
            RotaryScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                let original = original_max_position_embeddings as f64;
                let wavelength = 2.0 * std::f64::consts::PI / omega;
                if wavelength < original / high_freq_factor {
                    omega
                } else if wavelength > original / low_freq_factor {
                    omega / factor
                } else {
                    let smooth = (original / wavelength - low_freq_factor)
                        / (high_freq_factor - low_freq_factor);
                    (1.0 - smooth) * omega / factor + smooth * omega
                }
            }
        }
    }
}

/// Rotary position embedding for queries and keys, with cosines and sines cached per device.
///
/// Like [`crate::SinusoidalEncoding`], it has no maximum length, holds no parameters, and
/// implements burn's [`Module`](burn::module::Module) as a constant so that it can be a plain
/// field of a `#[derive(Module)]` struct. Clones share the cache.
///
/// ```
/// use attn_pos::{RotaryEncoding, RotaryPairing};
/// use burn::tensor::{Device, Tensor};
///
/// let device = Device::flex();
/// let rope = RotaryEncoding::new(2, 10_000.0, RotaryPairing::Interleaved).unwrap();
/// // One head of width 2 is a single pair with ω = 1: position 3 rotates it by 3 radians.
/// let x = Tensor::<4>::from_floats([[[[1.0, 0.0]]]], &device); // [1, 1, 1, 2]
/// let out = rope.apply(x, 3).into_data().try_into_vec::<f32>().unwrap();
/// assert!((out[0] - 3f32.cos()).abs() < 1e-6);
/// assert!((out[1] - 3f32.sin()).abs() < 1e-6);
/// ```
#[derive(Clone, Debug)]
pub struct RotaryEncoding {
    d_head: usize,
    theta: f64,
    pairing: RotaryPairing,
    scaling: RotaryScaling,
    /// Row `p` is `[cos(pω) | sin(pω)]`, each `d_head` wide and laid out by `pairing`.
    table: PositionTable,
}

constant_module!(RotaryEncoding);

impl RotaryEncoding {
    /// Rotations for heads of width `d_head`, frequencies `theta^(-2j / d_head)`.
    ///
    /// # Errors
    ///
    /// [`PosError::ZeroSize`] for `d_head == 0`, [`PosError::OddDHead`] for an odd `d_head`,
    /// [`PosError::InvalidTheta`] unless `theta` is finite and greater than 1.
    pub fn new(d_head: usize, theta: f64, pairing: RotaryPairing) -> Result<Self, PosError> {
        Self::scaled(d_head, theta, pairing, RotaryScaling::None)
    }

    /// Checks the settings [`scaled`](Self::scaled) takes without building anything: its
    /// frequency ladder holds `d_head / 2` values, so a configuration's validation must not
    /// build it before the sizes are known to be affordable.
    ///
    /// # Errors
    ///
    /// As [`scaled`](Self::scaled).
    pub fn check(d_head: usize, theta: f64, scaling: RotaryScaling) -> Result<(), PosError> {
        validate(d_head, theta)?;
        scaling.validate()
    }

    /// Rotations whose frequencies `theta^(-2j / d_head)` are then rescaled by `scaling`.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), and [`PosError::InvalidScaling`] (see
    /// [`RotaryScaling::validate`]).
    pub fn scaled(
        d_head: usize,
        theta: f64,
        pairing: RotaryPairing,
        scaling: RotaryScaling,
    ) -> Result<Self, PosError> {
        Self::check(d_head, theta, scaling)?;
        let inv_freq: Vec<f64> = (0..d_head / 2)
            .map(|j| scaling.rescale(theta.powf(-((2 * j) as f64) / d_head as f64)))
            .collect();
        let table = PositionTable::new(2 * d_head, move |pos, row| {
            let (cos, sin) = row.split_at_mut(d_head);
            for k in 0..d_head {
                let angle = pos as f64 * inv_freq[pairing.pair_of(k, d_head)];
                cos[k] = angle.cos();
                sin[k] = angle.sin();
            }
        });
        Ok(Self {
            d_head,
            theta,
            pairing,
            scaling,
            table,
        })
    }

    /// Width of the heads this rotates.
    pub fn d_head(&self) -> usize {
        self.d_head
    }

    /// The base of the frequency ladder.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// Which features form each pair.
    pub fn pairing(&self) -> RotaryPairing {
        self.pairing
    }

    /// How the frequencies are rescaled.
    pub fn scaling(&self) -> RotaryScaling {
        self.scaling
    }

    /// Rotates every head of `x`, token `t` by the angles of position `offset + t`.
    ///
    /// Apply it to queries and to keys (never to values), after splitting heads and before the
    /// scores. When decoding step by step, `offset` is the number of tokens already cached.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, n_heads, seq_len, d_head]`
    /// - output: `[batch, n_heads, seq_len, d_head]`
    ///
    /// # Panics
    ///
    /// Panics when the last dimension of `x` is not `d_head`; [`RotaryEncoding::try_apply`]
    /// returns that as an error instead.
    pub fn apply(&self, x: Tensor<4>, offset: usize) -> Tensor<4> {
        self.try_apply(x, offset)
            .unwrap_or_else(|e| panic!("RotaryEncoding::apply: {e}"))
    }

    /// [`RotaryEncoding::apply`], reporting a width mismatch as an error.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, n_heads, seq_len, d_head]`
    /// - output: `[batch, n_heads, seq_len, d_head]`
    ///
    /// # Errors
    ///
    /// [`PosError::WidthMismatch`] when the last dimension of `x` is not `d_head`.
    pub fn try_apply(&self, x: Tensor<4>, offset: usize) -> Result<Tensor<4>, PosError> {
        let [_batch, _n_heads, seq_len, d_head] = x.dims();
        if d_head != self.d_head {
            return Err(PosError::WidthMismatch {
                what: "d_head",
                expected: self.d_head,
                got: d_head,
            });
        }
        let (cos, sin) = self.cos_sin(seq_len, offset, &x.device());
        let cos = cos.reshape([1, 1, seq_len, d_head]); // [1, 1, seq_len, d_head]
        let sin = sin.reshape([1, 1, seq_len, d_head]); // [1, 1, seq_len, d_head]
        Ok(x.clone() * cos + self.rotate_pairs(x) * sin)
    }

    /// Cosines and sines of positions `offset..offset + seq_len`, each feature holding its
    /// pair's angle.
    ///
    /// # Shapes
    ///
    /// - output: `([seq_len, d_head], [seq_len, d_head])`
    pub fn cos_sin(
        &self,
        seq_len: usize,
        offset: usize,
        device: &Device,
    ) -> (Tensor<2>, Tensor<2>) {
        let rows = self.table.rows(seq_len, offset, device); // [seq_len, 2 * d_head]
        let cos = rows.clone().narrow(1, 0, self.d_head); // [seq_len, d_head]
        let sin = rows.narrow(1, self.d_head, self.d_head); // [seq_len, d_head]
        (cos, sin)
    }

    /// Sends each pair `(a, b)` to `(−b, a)`: a quarter turn, the `sin` half of the rotation.
    fn rotate_pairs(&self, x: Tensor<4>) -> Tensor<4> {
        let [batch, n_heads, seq_len, d_head] = x.dims();
        let half = d_head / 2;
        match self.pairing {
            RotaryPairing::Interleaved => {
                let pairs = x.reshape([batch, n_heads, seq_len, half, 2]); // [batch, n_heads, seq_len, d_head / 2, 2]
                let a = pairs.clone().narrow(4, 0, 1); // [batch, n_heads, seq_len, d_head / 2, 1]
                let b = pairs.narrow(4, 1, 1); // [batch, n_heads, seq_len, d_head / 2, 1]
                Tensor::cat(vec![b.neg(), a], 4).reshape([batch, n_heads, seq_len, d_head]) // [batch, n_heads, seq_len, d_head]
            }
            RotaryPairing::HalfSplit => {
                let a = x.clone().narrow(3, 0, half); // [batch, n_heads, seq_len, d_head / 2]
                let b = x.narrow(3, half, half); // [batch, n_heads, seq_len, d_head / 2]
                Tensor::cat(vec![b.neg(), a], 3) // [batch, n_heads, seq_len, d_head]
            }
        }
    }
}

impl fmt::Display for RotaryEncoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RotaryEncoding {{d_head: {}, theta: {}, pairing: {:?}, scaling: {:?}}}",
            self.d_head, self.theta, self.pairing, self.scaling
        )
    }
}

/// Checks the settings [`RotaryEncoding::new`] accepts.
pub(crate) fn validate(d_head: usize, theta: f64) -> Result<(), PosError> {
    if d_head == 0 {
        return Err(PosError::ZeroSize { what: "d_head" });
    }
    if !d_head.is_multiple_of(2) {
        return Err(PosError::OddDHead { d_head });
    }
    if !(theta.is_finite() && theta > 1.0) {
        return Err(PosError::InvalidTheta { theta });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{
        RefTensor, SeededRng, assert_close, assert_close_slices, for_each_device, to_vec,
    };
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Reference {
        rope: RopeRef,
    }

    #[derive(Deserialize)]
    struct RopeRef {
        head_dim: usize,
        len: usize,
        x: RefTensor,
        interleaved: RefTensor,
        half_split: RefTensor,
    }

    fn reference() -> RopeRef {
        attn_testing::load_reference::<Reference>("positional.json").rope
    }

    /// The readable path: rotate each pair by its own 2×2 matrix, in `f64`, one vector at a time.
    fn rotate_reference(
        x: &[f32],
        d_head: usize,
        position: usize,
        theta: f64,
        pairing: RotaryPairing,
    ) -> Vec<f32> {
        let half = d_head / 2;
        let mut out = vec![0.0f32; d_head];
        for j in 0..half {
            let (ia, ib) = match pairing {
                RotaryPairing::Interleaved => (2 * j, 2 * j + 1),
                RotaryPairing::HalfSplit => (j, j + half),
            };
            let angle = position as f64 * theta.powf(-((2 * j) as f64) / d_head as f64);
            let (a, b) = (x[ia] as f64, x[ib] as f64);
            out[ia] = (a * angle.cos() - b * angle.sin()) as f32;
            out[ib] = (a * angle.sin() + b * angle.cos()) as f32;
        }
        out
    }

    #[test]
    fn both_pairings_match_the_reference() {
        let r = reference();
        for_each_device(|d| {
            // The reference is one head of 50 positions: [50, 8] seen as [1, 1, 50, 8].
            let x =
                r.x.tensor::<2>(&d.device)
                    .reshape([1, 1, r.len, r.head_dim]); // [1, 1, seq_len, d_head]
            for (pairing, expected) in [
                (RotaryPairing::Interleaved, &r.interleaved),
                (RotaryPairing::HalfSplit, &r.half_split),
            ] {
                let rope =
                    RotaryEncoding::new(r.head_dim, DEFAULT_THETA, pairing).expect("even d_head");
                let out = rope.apply(x.clone(), 0).reshape([r.len, r.head_dim]); // [seq_len, d_head]
                assert_close(
                    out,
                    expected,
                    1e-6,
                    0.0,
                    &format!("{pairing:?} on {}", d.name),
                );
            }
        });
    }

    #[test]
    fn fast_path_agrees_with_the_pairwise_rotation() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(21);
            let (batch, n_heads, seq_len, d_head, theta) = (3, 2, 5, 6, 500.0);
            for pairing in [RotaryPairing::Interleaved, RotaryPairing::HalfSplit] {
                for offset in [0, 9, 130] {
                    let rope = RotaryEncoding::new(d_head, theta, pairing).expect("even d_head");
                    let x = rng.tensor([batch, n_heads, seq_len, d_head], &d.device);
                    let got = to_vec(rope.apply(x.clone(), offset));
                    let x = to_vec(x);
                    let expected: Vec<f32> = x
                        .chunks(d_head)
                        .enumerate()
                        .flat_map(|(row, v)| {
                            rotate_reference(v, d_head, offset + row % seq_len, theta, pairing)
                        })
                        .collect();
                    let what = format!("{pairing:?} offset {offset} on {}", d.name);
                    assert_close_slices(&got, &expected, 1e-5, 1e-5, &what);
                }
            }
        });
    }

    #[test]
    fn rotation_keeps_norms() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(5);
            let (batch, n_heads, seq_len, d_head) = (2, 3, 7, 10);
            for pairing in [RotaryPairing::Interleaved, RotaryPairing::HalfSplit] {
                let rope =
                    RotaryEncoding::new(d_head, DEFAULT_THETA, pairing).expect("even d_head");
                for offset in [0, 4, 1000] {
                    let x = rng.tensor([batch, n_heads, seq_len, d_head], &d.device);
                    let out = rope.apply(x.clone(), offset);
                    let norm_in = x.powi_scalar(2).sum_dim(3); // [batch, n_heads, seq_len, 1]
                    let norm_out = out.powi_scalar(2).sum_dim(3); // [batch, n_heads, seq_len, 1]
                    assert_close_slices(
                        &to_vec(norm_out),
                        &to_vec(norm_in),
                        1e-5,
                        1e-5,
                        &format!("{pairing:?} offset {offset} on {}", d.name),
                    );
                }
            }
        });
    }

    #[test]
    fn scores_depend_only_on_the_position_difference() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(8);
            let d_head = 8;
            for pairing in [RotaryPairing::Interleaved, RotaryPairing::HalfSplit] {
                let rope =
                    RotaryEncoding::new(d_head, DEFAULT_THETA, pairing).expect("even d_head");
                for _ in 0..4 {
                    let q = rng.tensor([1, 1, 1, d_head], &d.device);
                    let k = rng.tensor([1, 1, 1, d_head], &d.device);
                    let gap = rng.range(0, 20);
                    let score = |m: usize, n: usize| {
                        let q = rope.apply(q.clone(), m);
                        let k = rope.apply(k.clone(), n);
                        (q * k).sum().into_scalar::<f32>()
                    };
                    let base = score(gap, 0);
                    for shift in [3, 17, 250] {
                        let shifted = score(gap + shift, shift);
                        assert!(
                            (shifted - base).abs() < 1e-4,
                            "{pairing:?} gap {gap} shift {shift}: {shifted} vs {base} on {}",
                            d.name
                        );
                    }
                    // And the score does change with the gap, so the test can fail.
                    let other = score(gap + 1, 0);
                    assert!(
                        (other - base).abs() > 1e-6,
                        "{pairing:?}: gap ignored on {}",
                        d.name
                    );
                }
            }
        });
    }

    #[test]
    fn offset_equals_slicing_a_longer_sequence() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(13);
            let (batch, n_heads, seq_len, d_head, offset) = (2, 3, 9, 4, 5);
            let rope = RotaryEncoding::new(d_head, DEFAULT_THETA, RotaryPairing::HalfSplit)
                .expect("even d_head");
            let x = rng.tensor([batch, n_heads, seq_len, d_head], &d.device);
            let whole = rope.apply(x.clone(), 0).narrow(2, offset, seq_len - offset); // [batch, n_heads, seq_len - offset, d_head]
            let tail = rope.apply(x.narrow(2, offset, seq_len - offset), offset); // [batch, n_heads, seq_len - offset, d_head]
            attn_testing::assert_tensors_close(tail, whole, 1e-6, 0.0, d.name);
        });
    }

    #[test]
    fn pairings_rotate_different_features_together() {
        for_each_device(|d| {
            let x = Tensor::<4>::from_floats([[[[1.0, 2.0, 3.0, 4.0]]]], &d.device); // [1, 1, 1, 4]
            let (c1, s1) = (1f32.cos(), 1f32.sin());
            let (c2, s2) = (0.01f32.cos(), 0.01f32.sin());
            // Position 1, ω = (1, 0.01). Interleaved rotates (1, 2) by 1 and (3, 4) by 0.01.
            let inter = RotaryEncoding::new(4, DEFAULT_THETA, RotaryPairing::Interleaved)
                .expect("even d_head");
            let expected = [
                c1 - 2.0 * s1,
                s1 + 2.0 * c1,
                3.0 * c2 - 4.0 * s2,
                3.0 * s2 + 4.0 * c2,
            ];
            assert_close_slices(
                &to_vec(inter.apply(x.clone(), 1)),
                &expected,
                1e-6,
                1e-6,
                d.name,
            );
            // Half-split rotates (1, 3) by 1 and (2, 4) by 0.01.
            let split = RotaryEncoding::new(4, DEFAULT_THETA, RotaryPairing::HalfSplit)
                .expect("even d_head");
            let expected = [
                c1 - 3.0 * s1,
                2.0 * c2 - 4.0 * s2,
                s1 + 3.0 * c1,
                2.0 * s2 + 4.0 * c2,
            ];
            assert_close_slices(&to_vec(split.apply(x, 1)), &expected, 1e-6, 1e-6, d.name);
        });
    }

    #[test]
    fn rejects_bad_settings_and_widths() {
        assert_eq!(
            RotaryEncoding::new(7, DEFAULT_THETA, RotaryPairing::Interleaved).err(),
            Some(PosError::OddDHead { d_head: 7 })
        );
        assert!(matches!(
            RotaryEncoding::new(0, DEFAULT_THETA, RotaryPairing::HalfSplit),
            Err(PosError::ZeroSize { what: "d_head" })
        ));
        for theta in [0.0, 1.0, f64::NAN, f64::NEG_INFINITY] {
            assert!(
                matches!(
                    RotaryEncoding::new(4, theta, RotaryPairing::Interleaved),
                    Err(PosError::InvalidTheta { .. })
                ),
                "theta {theta} accepted"
            );
        }
        let rope =
            RotaryEncoding::new(4, DEFAULT_THETA, RotaryPairing::Interleaved).expect("even d_head");
        let x = Tensor::<4>::zeros([1, 2, 3, 6], &Device::flex());
        assert_eq!(
            rope.try_apply(x, 0).err(),
            Some(PosError::WidthMismatch {
                what: "d_head",
                expected: 4,
                got: 6
            })
        );
    }

    #[test]
    fn pairing_serializes_by_name() {
        let json = serde_json::to_string(&RotaryPairing::HalfSplit).expect("serializes");
        assert_eq!(json, "\"HalfSplit\"");
        let back: RotaryPairing = serde_json::from_str("\"Interleaved\"").expect("parses");
        assert_eq!(back, RotaryPairing::Interleaved);
    }
}
