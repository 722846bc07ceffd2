//! The fixed sinusoidal table of Vaswani et al. (2017, section 3.5), added to the token
//! embeddings:
//!
//! ```text
//! PE(pos, 2i)     = sin(pos / base^(2i / d_model))
//! PE(pos, 2i + 1) = cos(pos / base^(2i / d_model))
//! ```
//!
//! Sines sit in even columns and cosines in odd ones (interleaved), as in the paper, and
//! `base` is 10000 there. Wavelengths form a geometric ladder from `2π` to `2π · base`, and
//! `PE(pos + k)` is a fixed rotation of `PE(pos)`, which is what lets attention read relative
//! offsets off absolute positions.

use std::fmt;

use burn::tensor::{Device, Tensor};

use crate::error::PosError;
use crate::position_table::{PositionTable, constant_module};

/// The base of the paper's sinusoids.
pub const DEFAULT_BASE: f64 = 10_000.0;

/// The sinusoidal table of "Attention Is All You Need": a constant, never trained, never saved.
///
/// There is no maximum length: rows are computed on demand, cached per device, and the cache
/// doubles when a longer sequence or a later `offset` arrives. Clones share the cache.
///
/// # In a model
///
/// `SinusoidalEncoding` implements burn's [`Module`](burn::module::Module) as a constant (no
/// parameters, nothing in the record), so it can be a plain field of a `#[derive(Module)]` struct;
/// `#[module(skip)]` works as well. Loading a saved model rebuilds it from the config, not from
/// the record.
///
/// ```
/// use attn_pos::SinusoidalEncoding;
/// use burn::tensor::Device;
///
/// let device = Device::flex();
/// let pe = SinusoidalEncoding::new(4, 10_000.0).unwrap();
/// // Position 1: sin(1), cos(1), sin(1 / 100), cos(1 / 100).
/// let row = pe.table(1, 1, &device).into_data().try_into_vec::<f32>().unwrap();
/// let expected = [1f32.sin(), 1f32.cos(), 0.01f32.sin(), 0.01f32.cos()];
/// for (got, want) in row.iter().zip(expected) {
///     assert!((got - want).abs() < 1e-6);
/// }
/// ```
#[derive(Clone, Debug)]
pub struct SinusoidalEncoding {
    d_model: usize,
    base: f64,
    table: PositionTable,
}

constant_module!(SinusoidalEncoding);

impl SinusoidalEncoding {
    /// A table of width `d_model` with wavelengths up to `2π · base`.
    ///
    /// # Errors
    ///
    /// [`PosError::ZeroSize`] for `d_model == 0`, [`PosError::OddDModel`] for an odd `d_model`
    /// (every sine needs its cosine), [`PosError::InvalidBase`] unless `base` is finite and
    /// greater than 1.
    pub fn new(d_model: usize, base: f64) -> Result<Self, PosError> {
        validate(d_model, base)?;
        let inv_freq = inverse_frequencies(d_model, base);
        let table = PositionTable::new(d_model, move |pos, row| {
            for (pair, &w) in row.chunks_exact_mut(2).zip(&inv_freq) {
                let angle = pos as f64 * w;
                pair[0] = angle.sin();
                pair[1] = angle.cos();
            }
        });
        Ok(Self {
            d_model,
            base,
            table,
        })
    }

    /// The paper's table, `base = 10000`.
    ///
    /// # Errors
    ///
    /// As [`SinusoidalEncoding::new`].
    pub fn standard(d_model: usize) -> Result<Self, PosError> {
        Self::new(d_model, DEFAULT_BASE)
    }

    /// The width of every row.
    pub fn d_model(&self) -> usize {
        self.d_model
    }

    /// The base of the wavelength ladder.
    pub fn base(&self) -> f64 {
        self.base
    }

    /// Rows `offset..offset + seq_len` of the table, on `device`.
    ///
    /// The result carries no autodiff: it is a constant, and burn treats it as one when it meets
    /// a tracked tensor.
    ///
    /// # Shapes
    ///
    /// - output: `[seq_len, d_model]`
    pub fn table(&self, seq_len: usize, offset: usize, device: &Device) -> Tensor<2> {
        self.table.rows(seq_len, offset, device)
    }

    /// Adds the rows for positions `offset..offset + seq_len` to `x`.
    ///
    /// `offset` is the position of the first token: 0 for a whole sequence, the number of
    /// tokens already decoded when feeding one step at a time.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, seq_len, d_model]`
    /// - output: `[batch, seq_len, d_model]`
    ///
    /// # Panics
    ///
    /// Panics when the last dimension of `x` is not `d_model`; [`SinusoidalEncoding::try_forward`]
    /// returns that as an error instead.
    pub fn forward(&self, x: Tensor<3>, offset: usize) -> Tensor<3> {
        self.try_forward(x, offset)
            .unwrap_or_else(|e| panic!("SinusoidalEncoding::forward: {e}"))
    }

    /// [`SinusoidalEncoding::forward`], reporting a width mismatch as an error.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, seq_len, d_model]`
    /// - output: `[batch, seq_len, d_model]`
    ///
    /// # Errors
    ///
    /// [`PosError::WidthMismatch`] when the last dimension of `x` is not `d_model`.
    pub fn try_forward(&self, x: Tensor<3>, offset: usize) -> Result<Tensor<3>, PosError> {
        let [_batch, seq_len, d_model] = x.dims();
        if d_model != self.d_model {
            return Err(PosError::WidthMismatch {
                what: "d_model",
                expected: self.d_model,
                got: d_model,
            });
        }
        let pe = self.table(seq_len, offset, &x.device()).unsqueeze::<3>(); // [1, seq_len, d_model]
        Ok(x + pe)
    }
}

impl fmt::Display for SinusoidalEncoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SinusoidalEncoding {{d_model: {}, base: {}}}",
            self.d_model, self.base
        )
    }
}

/// Checks the settings [`SinusoidalEncoding::new`] accepts.
pub(crate) fn validate(d_model: usize, base: f64) -> Result<(), PosError> {
    if d_model == 0 {
        return Err(PosError::ZeroSize { what: "d_model" });
    }
    if !d_model.is_multiple_of(2) {
        return Err(PosError::OddDModel { d_model });
    }
    if !(base.is_finite() && base > 1.0) {
        return Err(PosError::InvalidBase { base });
    }
    Ok(())
}

/// `ω_i = base^(-2i / d_model)` for `i in 0..d_model / 2`: the angular frequency of pair `i`.
fn inverse_frequencies(d_model: usize, base: f64) -> Vec<f64> {
    (0..d_model / 2)
        .map(|i| base.powf(-((2 * i) as f64) / d_model as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{
        RefTensor, SeededRng, assert_close, assert_tensors_close, for_each_device, to_vec,
    };
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Reference {
        sinusoidal: SinusoidalRef,
    }

    #[derive(Deserialize)]
    struct SinusoidalRef {
        d_model: usize,
        len: usize,
        pe: RefTensor,
    }

    fn reference() -> SinusoidalRef {
        attn_testing::load_reference::<Reference>("positional.json").sinusoidal
    }

    #[test]
    fn table_matches_the_reference() {
        let r = reference();
        for_each_device(|d| {
            let pe = SinusoidalEncoding::standard(r.d_model).expect("even d_model");
            let table = pe.table(r.len, 0, &d.device);
            assert_close(
                table,
                &r.pe,
                1e-6,
                0.0,
                &format!("sinusoidal table on {}", d.name),
            );
        });
    }

    #[test]
    fn offset_gives_later_rows_of_the_full_table() {
        let r = reference();
        let d_model = r.d_model;
        for_each_device(|d| {
            for (seq_len, offset) in [(7, 0), (5, 13), (1, 49), (11, 31)] {
                // A fresh encoding each time, so the offset path also builds its own cache.
                let pe = SinusoidalEncoding::standard(d_model).expect("even d_model");
                let rows = to_vec(pe.table(seq_len, offset, &d.device));
                let expected = &r.pe.data[offset * d_model..(offset + seq_len) * d_model];
                attn_testing::assert_close_slices(
                    &rows,
                    expected,
                    1e-6,
                    0.0,
                    &format!("rows {offset}.. on {}", d.name),
                );
            }
        });
    }

    #[test]
    fn table_grows_past_any_first_length() {
        for_each_device(|d| {
            let pe = SinusoidalEncoding::standard(6).expect("even d_model");
            let short = pe.table(3, 0, &d.device);
            // Far beyond the first cache: rows must match a fresh encoding's.
            let far = pe.table(5, 997, &d.device);
            let fresh = SinusoidalEncoding::standard(6).expect("even d_model");
            assert_tensors_close(far, fresh.table(5, 997, &d.device), 0.0, 0.0, d.name);
            assert_tensors_close(short, fresh.table(3, 0, &d.device), 0.0, 0.0, d.name);
        });
    }

    #[test]
    fn forward_adds_the_table_to_every_batch_row() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(3);
            let (batch, seq_len, d_model, offset) = (3, 5, 10, 4);
            let pe = SinusoidalEncoding::standard(d_model).expect("even d_model");
            let x = rng.tensor([batch, seq_len, d_model], &d.device);
            let out = pe.forward(x.clone(), offset);
            let table = pe.table(seq_len, offset, &d.device);
            for b in 0..batch {
                let row = out.clone().narrow(0, b, 1).reshape([seq_len, d_model]); // [seq_len, d_model]
                let x_row = x.clone().narrow(0, b, 1).reshape([seq_len, d_model]); // [seq_len, d_model]
                assert_tensors_close(row - x_row, table.clone(), 1e-6, 0.0, d.name);
            }
        });
    }

    #[test]
    fn sinusoids_follow_the_formula_with_a_custom_base() {
        for_each_device(|d| {
            let (d_model, base) = (6, 37.0f64);
            let pe = SinusoidalEncoding::new(d_model, base).expect("valid settings");
            let got = to_vec(pe.table(4, 9, &d.device));
            let mut expected = Vec::new();
            for pos in 9..13 {
                for i in 0..d_model / 2 {
                    let angle = pos as f64 / base.powf((2 * i) as f64 / d_model as f64);
                    expected.extend([angle.sin() as f32, angle.cos() as f32]);
                }
            }
            attn_testing::assert_close_slices(&got, &expected, 1e-6, 0.0, d.name);
        });
    }

    #[test]
    fn gradients_flow_through_x_only() {
        for_each_device(|d| {
            let device = d.device.clone().autodiff();
            let pe = SinusoidalEncoding::standard(4).expect("even d_model");
            let x = Tensor::<3>::ones([2, 3, 4], &device).require_grad();
            let out = pe.forward(x.clone(), 2);
            let grads = out.sum().backward();
            let grad = x.grad(&grads).expect("x requires grad");
            assert_eq!(to_vec(grad), vec![1.0; 24], "{}", d.name);
        });
    }

    #[test]
    fn rejects_bad_settings() {
        assert_eq!(
            SinusoidalEncoding::new(15, 10_000.0).err(),
            Some(PosError::OddDModel { d_model: 15 })
        );
        assert_eq!(
            SinusoidalEncoding::new(0, 10_000.0).err(),
            Some(PosError::ZeroSize { what: "d_model" })
        );
        for base in [1.0, 0.5, -3.0, f64::NAN, f64::INFINITY] {
            assert!(
                matches!(
                    SinusoidalEncoding::new(8, base),
                    Err(PosError::InvalidBase { .. })
                ),
                "base {base} accepted"
            );
        }
    }

    #[test]
    fn forward_reports_a_width_mismatch() {
        let device = Device::flex();
        let pe = SinusoidalEncoding::standard(8).expect("even d_model");
        let x = Tensor::<3>::zeros([2, 3, 6], &device);
        assert_eq!(
            pe.try_forward(x, 0).err(),
            Some(PosError::WidthMismatch {
                what: "d_model",
                expected: 8,
                got: 6
            })
        );
    }

    #[test]
    fn is_a_constant_module_with_no_parameters() {
        use burn::module::Module;
        let pe = SinusoidalEncoding::standard(8).expect("even d_model");
        assert_eq!(pe.num_params(), 0);
        assert!(pe.devices().is_empty());
    }
}
