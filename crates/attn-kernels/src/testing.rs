//! What the kernels' tests share: seeded inputs and a comparison that names the worst value.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::weight_rows::{Bf16Rows, bf16_to_f32, round_to_bf16};

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

/// The operands of a product with `bfloat16` weights, for the kernels' tests: `W`
/// (`[d_output, d_input]`) in rows `row` apart from `offset` (both drawn), values in [-1, 1);
/// `x` (`[rows, d_input]`) in [-2, 2); a bias in [-1, 1).
pub(crate) struct Bf16Product {
    pub(crate) rows: usize,
    pub(crate) x: Vec<f32>,
    pub(crate) bias: Vec<f32>,
    values: Vec<u16>,
    offset: usize,
    d_output: usize,
    d_input: usize,
    row: usize,
}

impl Bf16Product {
    /// Operands drawn from `rng`.
    pub(crate) fn draw(rng: &mut SeededRng, rows: usize, d_input: usize, d_output: usize) -> Self {
        let row = d_input + rng.range(0, 2);
        let offset = rng.range(0, 4);
        let values = (0..offset + d_output * row)
            .map(|_| round_to_bf16(rng.unit()))
            .collect();
        Bf16Product {
            rows,
            x: (0..rows * d_input).map(|_| 2.0 * rng.unit()).collect(),
            bias: (0..d_output).map(|_| rng.unit()).collect(),
            values,
            offset,
            d_output,
            d_input,
            row,
        }
    }

    /// `W`.
    pub(crate) fn w(&self) -> Bf16Rows<'_> {
        Bf16Rows {
            values: &self.values,
            offset: self.offset,
            d_output: self.d_output,
            d_input: self.d_input,
            row: self.row,
        }
    }

    /// Asserts that `y` is `bf16(x) · Wᵀ + bias` as summed in `f64` (the inputs rounded to
    /// `bfloat16`, every product exact), within a few `f32` roundings of each running sum;
    /// names `what` ran and the first value off.
    #[track_caller]
    pub(crate) fn assert_sums(&self, y: &[f32], bias: Option<&[f32]>, what: &str) {
        let (rows, d_input, d_output) = (self.rows, self.d_input, self.d_output);
        assert_eq!(y.len(), rows * d_output, "{what}: y is [rows, d_output]");
        let w = self.w();
        for (k, &got) in y.iter().enumerate() {
            let (r, j) = (k / d_output, k % d_output);
            let (mut sum, mut size) = (bias.map_or(0.0, |b| f64::from(b[j])), 1.0);
            for i in 0..d_input {
                let xi = f64::from(bf16_to_f32(round_to_bf16(self.x[r * d_input + i])));
                let wi = f64::from(bf16_to_f32(w.values[w.offset + j * w.row + i]));
                sum += xi * wi;
                size += (xi * wi).abs();
            }
            let tolerance = 1e-6 * size * (d_input as f64).sqrt();
            assert!(
                (f64::from(got) - sum).abs() <= tolerance,
                "{what}, [{rows}, {d_input}] x [{d_output}]: y[{k}] = {got}, expected {sum}"
            );
        }
    }
}

/// For each `(rows, d_input, d_output)` of `shapes`, operands drawn from a generator seeded
/// with `seed`, and `check` run on them without a bias and with one.
pub(crate) fn for_each_bf16_product(
    seed: u64,
    shapes: &[(usize, usize, usize)],
    check: impl Fn(&Bf16Product, Option<&[f32]>),
) {
    let mut rng = SeededRng::new(seed);
    for &(rows, d_input, d_output) in shapes {
        let product = Bf16Product::draw(&mut rng, rows, d_input, d_output);
        for bias in [None, Some(product.bias.as_slice())] {
            check(&product, bias);
        }
    }
}

/// Asserts that a NaN among the inputs of rows `nan_rows` (input 3 of 40, inside the first 32
/// that vector instructions round) reaches every output of its row and no other: `product`
/// multiplies `rows` rows of ones, but for the NaNs, by 40 outputs' weights of 0.5.
#[track_caller]
pub(crate) fn assert_a_nan_stays_in_its_row(
    rows: usize,
    nan_rows: &[usize],
    product: impl Fn(&[f32], &Bf16Rows<'_>) -> Vec<f32>,
) {
    let (d_input, d_output) = (40, 40);
    let values = vec![round_to_bf16(0.5); d_output * d_input];
    let w = Bf16Rows {
        values: &values,
        offset: 0,
        d_output,
        d_input,
        row: d_input,
    };
    let mut x = vec![1.0f32; rows * d_input];
    for &r in nan_rows {
        x[r * d_input + 3] = f32::NAN;
    }
    for (r, row) in product(&x, &w).chunks(d_output).enumerate() {
        if nan_rows.contains(&r) {
            assert!(row.iter().all(|v| v.is_nan()), "row {r}: {row:?}");
        } else {
            assert!(row.iter().all(|&v| v == 20.0), "row {r}: {row:?}");
        }
    }
}
