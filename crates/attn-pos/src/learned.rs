//! A trainable table of absolute position embeddings (GPT-2, BERT): row `p` is added to the
//! embedding of the token at position `p`, and positions past the table have no row.

use burn::config::Config;
use burn::module::{Initializer, Module, Param};
use burn::tensor::{Device, Tensor};

use crate::error::PosError;

/// Standard deviation of the initial table, as in GPT-2: small next to unit-variance token
/// embeddings, so that early training is not dominated by position.
pub const LEARNED_INIT_STD: f64 = 0.02;

/// Settings of a [`LearnedEncoding`]: how many positions it has rows for, and how wide they are.
#[derive(Config, Debug)]
pub struct LearnedEncodingConfig {
    /// Rows in the table: the longest `offset + seq_len` the encoding accepts.
    pub max_len: usize,
    /// Width of every row.
    pub d_model: usize,
}

impl LearnedEncodingConfig {
    /// Checks that the table has at least one row and one column.
    ///
    /// # Errors
    ///
    /// [`PosError::ZeroSize`] naming `max_len` or `d_model`.
    pub fn validate(&self) -> Result<(), PosError> {
        if self.max_len == 0 {
            return Err(PosError::ZeroSize { what: "max_len" });
        }
        if self.d_model == 0 {
            return Err(PosError::ZeroSize { what: "d_model" });
        }
        Ok(())
    }

    /// A table drawn from `N(0, 0.02²)` on `device`.
    ///
    /// # Errors
    ///
    /// As [`LearnedEncodingConfig::validate`].
    pub fn try_init(&self, device: &Device) -> Result<LearnedEncoding, PosError> {
        self.validate()?;
        let initializer = Initializer::Normal {
            mean: 0.0,
            std: LEARNED_INIT_STD,
        };
        Ok(LearnedEncoding {
            weight: initializer.init([self.max_len, self.d_model], device),
        })
    }

    /// A table drawn from `N(0, 0.02²)` on `device`.
    ///
    /// # Panics
    ///
    /// Panics when `max_len` or `d_model` is zero; [`LearnedEncodingConfig::try_init`] returns
    /// that as an error instead.
    pub fn init(&self, device: &Device) -> LearnedEncoding {
        self.try_init(device)
            .unwrap_or_else(|e| panic!("LearnedEncodingConfig::init: {e}"))
    }
}

/// A trainable `[max_len, d_model]` table of position embeddings, saved with the model.
///
/// ```
/// use attn_pos::{LearnedEncodingConfig, PosError};
/// use burn::tensor::{Device, Tensor};
///
/// let device = Device::flex();
/// let pe = LearnedEncodingConfig::new(8, 4).init(&device);
/// let x = Tensor::<3>::zeros([2, 3, 4], &device);
/// assert_eq!(pe.try_forward(x.clone(), 5).unwrap().dims(), [2, 3, 4]);
/// // Positions 6..9 would need a ninth row.
/// assert_eq!(
///     pe.try_forward(x, 6).unwrap_err(),
///     PosError::TooLong { seq_len: 3, offset: 6, max_len: 8 }
/// );
/// ```
#[derive(Module, Debug)]
pub struct LearnedEncoding {
    /// Row `p` is the embedding of position `p`.
    ///
    /// # Shapes
    ///
    /// `[max_len, d_model]`
    pub weight: Param<Tensor<2>>,
}

impl LearnedEncoding {
    /// Rows in the table.
    pub fn max_len(&self) -> usize {
        self.shape()[0]
    }

    /// Width of every row.
    pub fn d_model(&self) -> usize {
        self.shape()[1]
    }

    fn shape(&self) -> [usize; 2] {
        // The shape is known before a lazy parameter is drawn; asking must not draw it.
        self.weight.lazy_shape().dims()
    }

    /// Rows `offset..offset + seq_len` of the table.
    ///
    /// # Shapes
    ///
    /// - output: `[seq_len, d_model]`
    ///
    /// # Errors
    ///
    /// [`PosError::TooLong`] when `offset + seq_len > max_len`.
    pub fn table(&self, seq_len: usize, offset: usize) -> Result<Tensor<2>, PosError> {
        let max_len = self.max_len();
        let fits = offset
            .checked_add(seq_len)
            .is_some_and(|end| end <= max_len);
        if !fits {
            return Err(PosError::TooLong {
                seq_len,
                offset,
                max_len,
            });
        }
        Ok(self.weight.val().narrow(0, offset, seq_len)) // [seq_len, d_model]
    }

    /// Adds the rows for positions `offset..offset + seq_len` to `x`.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, seq_len, d_model]`
    /// - output: `[batch, seq_len, d_model]`
    ///
    /// # Errors
    ///
    /// [`PosError::TooLong`] when `offset + seq_len > max_len`, [`PosError::WidthMismatch`] when
    /// the last dimension of `x` is not `d_model`.
    pub fn try_forward(&self, x: Tensor<3>, offset: usize) -> Result<Tensor<3>, PosError> {
        let [_batch, seq_len, d_model] = x.dims();
        if d_model != self.d_model() {
            return Err(PosError::WidthMismatch {
                what: "d_model",
                expected: self.d_model(),
                got: d_model,
            });
        }
        let pe = self.table(seq_len, offset)?.unsqueeze::<3>(); // [1, seq_len, d_model]
        Ok(x + pe)
    }

    /// [`LearnedEncoding::try_forward`] for inputs known to fit.
    ///
    /// # Shapes
    ///
    /// - x: `[batch, seq_len, d_model]`
    /// - output: `[batch, seq_len, d_model]`
    ///
    /// # Panics
    ///
    /// Panics with [`PosError`]'s message where `try_forward` returns an error.
    pub fn forward(&self, x: Tensor<3>, offset: usize) -> Tensor<3> {
        self.try_forward(x, offset)
            .unwrap_or_else(|e| panic!("LearnedEncoding::forward: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{SeededRng, assert_tensors_close, for_each_device, to_vec};

    #[test]
    fn forward_adds_rows_from_the_offset() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(11);
            let (batch, seq_len, d_model, max_len, offset) = (3, 5, 6, 13, 7);
            let pe = LearnedEncodingConfig::new(max_len, d_model).init(&d.device);
            let x = rng.tensor([batch, seq_len, d_model], &d.device);
            let out = pe.try_forward(x.clone(), offset).expect("7 + 5 <= 13");
            let weight = pe.weight.val();
            let expected_rows = weight.narrow(0, offset, seq_len).unsqueeze::<3>(); // [1, seq_len, d_model]
            assert_tensors_close(out, x + expected_rows, 1e-6, 0.0, d.name);
        });
    }

    #[test]
    fn the_last_row_fits_and_one_more_does_not() {
        for_each_device(|d| {
            let (max_len, d_model) = (9, 4);
            let pe = LearnedEncodingConfig::new(max_len, d_model).init(&d.device);
            let x = Tensor::<3>::zeros([2, 3, d_model], &d.device);
            assert!(pe.try_forward(x.clone(), 6).is_ok(), "{}", d.name);
            let err = pe.try_forward(x.clone(), 7).expect_err("7 + 3 > 9");
            assert_eq!(
                err,
                PosError::TooLong {
                    seq_len: 3,
                    offset: 7,
                    max_len: 9
                }
            );
            let text = err.to_string();
            assert!(
                text.contains('3') && text.contains('7') && text.contains('9'),
                "{text}"
            );
            let long = Tensor::<3>::zeros([1, 10, d_model], &d.device);
            assert_eq!(
                pe.try_forward(long, 0).err(),
                Some(PosError::TooLong {
                    seq_len: 10,
                    offset: 0,
                    max_len: 9
                })
            );
            assert!(
                matches!(pe.table(1, usize::MAX), Err(PosError::TooLong { .. })),
                "overflowing offset accepted"
            );
        });
    }

    #[test]
    fn table_is_a_trained_parameter() {
        for_each_device(|d| {
            let device = d.device.clone().autodiff();
            let (max_len, d_model) = (7, 3);
            let pe = LearnedEncodingConfig::new(max_len, d_model).init(&device);
            assert_eq!(pe.num_params(), max_len * d_model, "{}", d.name);
            let x = Tensor::<3>::zeros([2, 2, d_model], &device);
            let loss = pe.forward(x, 4).sum();
            let grads = loss.backward();
            let grad = pe.weight.grad(&grads).expect("the table requires grad");
            // Rows 4 and 5 are used once per batch element; every other row gets nothing.
            let grad = to_vec(grad);
            for (p, row) in grad.chunks(d_model).enumerate() {
                let expected = if (4..6).contains(&p) { 2.0 } else { 0.0 };
                assert!(
                    row.iter().all(|&g| g == expected),
                    "row {p}: {row:?} on {}",
                    d.name
                );
            }
        });
    }

    #[test]
    fn init_draws_small_values() {
        for_each_device(|d| {
            d.device.seed(5);
            let pe = LearnedEncodingConfig::new(61, 17).init(&d.device);
            assert_eq!((pe.max_len(), pe.d_model()), (61, 17));
            let values = to_vec(pe.weight.val());
            let n = values.len() as f64;
            let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n;
            let var = values
                .iter()
                .map(|&v| (v as f64 - mean).powi(2))
                .sum::<f64>()
                / n;
            // 1037 draws: the sample std is within 0.003 of 0.02 far beyond six sigma.
            assert!(mean.abs() < 0.005, "mean {mean} on {}", d.name);
            assert!(
                (var.sqrt() - LEARNED_INIT_STD).abs() < 0.003,
                "std {} on {}",
                var.sqrt(),
                d.name
            );
        });
    }

    #[test]
    fn rejects_empty_tables_and_wrong_widths() {
        let device = burn::tensor::Device::flex();
        assert_eq!(
            LearnedEncodingConfig::new(0, 4).try_init(&device).err(),
            Some(PosError::ZeroSize { what: "max_len" })
        );
        assert!(matches!(
            LearnedEncodingConfig::new(4, 0).validate(),
            Err(PosError::ZeroSize { what: "d_model" })
        ));
        let pe = LearnedEncodingConfig::new(5, 4).init(&device);
        let x = Tensor::<3>::zeros([1, 2, 3], &device);
        assert_eq!(
            pe.try_forward(x, 0).err(),
            Some(PosError::WidthMismatch {
                what: "d_model",
                expected: 4,
                got: 3
            })
        );
    }

    #[test]
    fn config_round_trips_through_json() {
        let config = LearnedEncodingConfig::new(29, 12);
        let json = serde_json::to_string(&config).expect("config serializes");
        let back: LearnedEncodingConfig = serde_json::from_str(&json).expect("config parses");
        assert_eq!((back.max_len, back.d_model), (29, 12));
    }
}
