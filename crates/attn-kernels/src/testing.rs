//! What the kernels' tests share: seeded inputs and a comparison that names the worst value.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::half::{Bf16Rows, bf16_to_f32, round_to_bf16};

/// Seeded random inputs, the same on every platform.
pub(crate) struct SeededRng(ChaCha8Rng);

impl SeededRng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }

    /// A uniform integer in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: usize, hi: usize) -> usize {
        self.0.random_range(lo..=hi)
    }

    /// A uniform float in `[-1, 1)`.
    pub(crate) fn unit(&mut self) -> f32 {
        self.0.random_range(-1.0..1.0)
    }

    /// `true` with probability `p`.
    pub(crate) fn bernoulli(&mut self, p: f64) -> bool {
        self.0.random_bool(p)
    }
}

/// Asserts `|actual − expected| ≤ atol + rtol·|expected|` everywhere (NaN never passes),
/// naming the worst element and its difference.
#[track_caller]
pub(crate) fn assert_close_slices(
    actual: &[f32],
    expected: &[f32],
    atol: f32,
    rtol: f32,
    what: &str,
) {
    assert_eq!(actual.len(), expected.len(), "{what}: lengths differ");
    let excess = |(a, e): (&f32, &f32)| {
        let excess = (a - e).abs() - (atol + rtol * e.abs());
        if excess.is_nan() {
            f32::INFINITY
        } else {
            excess
        }
    };
    let worst = actual
        .iter()
        .zip(expected)
        .map(excess)
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((index, excess)) = worst {
        assert!(
            excess <= 0.0,
            "{what}: element {index} is {} where {} was expected (atol {atol}, rtol {rtol})",
            actual[index],
            expected[index],
        );
    }
}

/// `y = bf16(x) · Wᵀ + bias` in `f64` (the inputs rounded to `bfloat16`, every product exact),
/// and beside each value the sum of its terms' magnitudes plus one, for its tolerance.
pub(crate) fn bf16_products(
    x: &[f32],
    rows: usize,
    w: &Bf16Rows<'_>,
    bias: Option<&[f32]>,
) -> (Vec<f64>, Vec<f64>) {
    let mut y = Vec::new();
    let mut scale = Vec::new();
    for r in 0..rows {
        for j in 0..w.d_output {
            let (mut sum, mut size) = (bias.map_or(0.0, |b| f64::from(b[j])), 0.0);
            for i in 0..w.d_input {
                let xi = f64::from(bf16_to_f32(round_to_bf16(x[r * w.d_input + i])));
                let wi = f64::from(bf16_to_f32(w.values[w.offset + j * w.row + i]));
                sum += xi * wi;
                size += (xi * wi).abs();
            }
            y.push(sum);
            scale.push(size + 1.0);
        }
    }
    (y, scale)
}
