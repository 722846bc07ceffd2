//! The tolerances every comparison with the float32 reference vectors uses, and the closeness
//! check that keeps the largest difference for the report.

use std::fmt;

use burn::tensor::Tensor;

use crate::RefTensor;

/// Absolute tolerance against float32 references.
pub const ATOL: f32 = 1e-5;
/// Relative tolerance against float32 references.
pub const RTOL: f32 = 1e-4;

/// How far a value may be from the expected one: `|actual − expected| ≤ atol + rtol · |expected|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Allowed absolute difference.
    pub atol: f32,
    /// Allowed difference per unit of `|expected|`.
    pub rtol: f32,
}

impl Tolerance {
    /// [`ATOL`] + [`RTOL`] · |expected|: float32 arithmetic in another order of operations.
    pub const FLOAT32: Self = Self::new(ATOL, RTOL);

    /// `atol + rtol · |expected|`.
    pub const fn new(atol: f32, rtol: f32) -> Self {
        Self { atol, rtol }
    }

    /// A purely absolute tolerance.
    pub const fn absolute(atol: f32) -> Self {
        Self::new(atol, 0.0)
    }

    /// Whether `actual` is close enough to `expected` (NaN never is).
    ///
    /// ```
    /// use attn_reference::Tolerance;
    /// assert!(Tolerance::FLOAT32.admits(100.005, 100.0));
    /// assert!(!Tolerance::FLOAT32.admits(100.02, 100.0));
    /// assert!(!Tolerance::FLOAT32.admits(f32::NAN, 0.0));
    /// ```
    pub fn admits(self, actual: f32, expected: f32) -> bool {
        (actual - expected).abs() <= self.atol + self.rtol * expected.abs()
    }
}

impl Default for Tolerance {
    /// [`Tolerance::FLOAT32`].
    fn default() -> Self {
        Self::FLOAT32
    }
}

/// The element that differs most from its expected value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Worst {
    /// Its flat, row-major index within the values it was compared in.
    pub index: usize,
    /// The value computed.
    pub actual: f32,
    /// The value expected.
    pub expected: f32,
}

/// A running comparison of computed values with expected ones: the largest absolute difference
/// over everything compared, where it is, and whether every value was within the tolerance.
///
/// A NaN counts as an infinite difference; a shape or length mismatch fails the comparison
/// with an infinite difference and is named in the message.
///
/// ```
/// use attn_reference::{Closeness, Tolerance};
/// let mut c = Closeness::new(Tolerance::absolute(1e-3));
/// c.values(&[1.0, 2.0005, 3.0], &[1.0, 2.0, 3.0]);
/// assert!(c.is_within());
/// c.values(&[0.5], &[0.0]);
/// assert!(!c.is_within());
/// assert_eq!(c.max_abs_err(), 0.5);
/// assert_eq!(c.worst().map(|w| w.index), Some(0));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Closeness {
    tolerance: Tolerance,
    max_abs_err: f32,
    worst: Option<Worst>,
    mismatch: Option<String>,
    within: bool,
}

impl Default for Closeness {
    /// Within [`Tolerance::FLOAT32`].
    fn default() -> Self {
        Self::new(Tolerance::FLOAT32)
    }
}

impl Closeness {
    /// An empty comparison that passes values within `tolerance`.
    pub fn new(tolerance: Tolerance) -> Self {
        Self {
            tolerance,
            max_abs_err: 0.0,
            worst: None,
            mismatch: None,
            within: true,
        }
    }

    /// Compares `actual` with `expected`, element by element.
    pub fn values(&mut self, actual: &[f32], expected: &[f32]) -> &mut Self {
        if actual.len() != expected.len() {
            return self.mismatched(format!(
                "{} values, expected {}",
                actual.len(),
                expected.len()
            ));
        }
        for (index, (&a, &e)) in actual.iter().zip(expected).enumerate() {
            let d = (a - e).abs();
            let d = if d.is_nan() { f32::INFINITY } else { d };
            if d > self.max_abs_err || (self.worst.is_none() && self.mismatch.is_none()) {
                self.max_abs_err = d;
                self.worst = Some(Worst {
                    index,
                    actual: a,
                    expected: e,
                });
            }
            self.within &= self.tolerance.admits(a, e);
        }
        self
    }

    /// Compares a computed tensor with a reference tensor, shape first.
    pub fn tensor<const D: usize>(&mut self, actual: Tensor<D>, expected: &RefTensor) -> &mut Self {
        let dims = actual.dims();
        if dims.as_slice() != expected.shape.as_slice() {
            return self.mismatched(format!("shape {dims:?}, expected {:?}", expected.shape));
        }
        let actual = actual
            .into_data()
            .try_into_vec_as::<f32>()
            .expect("data converted to f32 reads back as f32");
        self.values(&actual, &expected.data)
    }

    /// Compares two computed tensors, shape first.
    pub fn tensors<const D: usize>(&mut self, actual: Tensor<D>, expected: Tensor<D>) -> &mut Self {
        let (dims, expected_dims) = (actual.dims(), expected.dims());
        if dims != expected_dims {
            return self.mismatched(format!("shape {dims:?}, expected {expected_dims:?}"));
        }
        let expected = expected
            .into_data()
            .try_into_vec_as::<f32>()
            .expect("data converted to f32 reads back as f32");
        let expected = RefTensor {
            shape: dims.to_vec(),
            data: expected,
        };
        self.tensor(actual, &expected)
    }

    /// Whether every value compared so far was within the tolerance and every shape matched.
    pub fn is_within(&self) -> bool {
        self.within
    }

    /// The largest absolute difference so far (infinite after a NaN or a mismatch).
    pub fn max_abs_err(&self) -> f32 {
        self.max_abs_err
    }

    /// The element with the largest difference, if any value was compared.
    pub fn worst(&self) -> Option<Worst> {
        self.worst
    }

    /// The tolerance values are held to.
    pub fn tolerance(&self) -> Tolerance {
        self.tolerance
    }

    fn mismatched(&mut self, what: String) -> &mut Self {
        self.max_abs_err = f32::INFINITY;
        self.within = false;
        self.mismatch.get_or_insert(what);
        self
    }
}

impl fmt::Display for Closeness {
    /// `largest difference 3e-4 at flat index 7 (got 1.0003, expected 1); tolerance ..`, or
    /// the first shape mismatch.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Tolerance { atol, rtol } = self.tolerance;
        if let Some(mismatch) = &self.mismatch {
            return write!(f, "{mismatch}");
        }
        match self.worst {
            Some(Worst {
                index,
                actual,
                expected,
            }) => write!(
                f,
                "largest difference {:e} at flat index {index} (got {actual}, expected {expected}); \
                 tolerance {atol:e} + {rtol:e} * |expected|",
                self.max_abs_err
            ),
            None => write!(f, "no values compared"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_difference_is_kept_with_its_place() {
        let mut c = Closeness::default();
        c.values(&[1.0, 2.0, 3.25], &[1.0, 2.5, 3.0]);
        assert_eq!(c.max_abs_err(), 0.5);
        assert_eq!(
            c.worst(),
            Some(Worst {
                index: 1,
                actual: 2.0,
                expected: 2.5
            })
        );
        assert!(!c.is_within());
        assert_eq!(
            c.to_string(),
            "largest difference 5e-1 at flat index 1 (got 2, expected 2.5); \
             tolerance 1e-5 + 1e-4 * |expected|"
        );
    }

    #[test]
    fn the_relative_part_scales_with_the_expected_value() {
        let mut c = Closeness::new(Tolerance::new(0.0, 1e-3));
        c.values(&[1000.5, 0.0], &[1000.0, 0.0]);
        assert!(c.is_within(), "{c}");
        c.values(&[1e-6], &[0.0]);
        assert!(!c.is_within());
    }

    #[test]
    fn equal_values_pass_with_zero_difference() {
        let mut c = Closeness::new(Tolerance::absolute(0.0));
        c.values(&[0.25, -3.0], &[0.25, -3.0]);
        assert!(c.is_within());
        assert_eq!(c.max_abs_err(), 0.0);
        assert_eq!(c.worst().map(|w| w.index), Some(0));
    }

    #[test]
    fn nan_is_an_infinite_difference() {
        let mut c = Closeness::default();
        c.values(&[0.0, f32::NAN], &[0.0, 1.0]);
        assert!(!c.is_within());
        assert_eq!(c.max_abs_err(), f32::INFINITY);
        assert_eq!(c.worst().map(|w| w.index), Some(1));
    }

    #[test]
    fn a_length_mismatch_fails_and_is_named() {
        let mut c = Closeness::default();
        c.values(&[0.0; 3], &[0.0; 4]);
        assert!(!c.is_within());
        assert_eq!(c.max_abs_err(), f32::INFINITY);
        assert_eq!(c.to_string(), "3 values, expected 4");
        // Later values cannot hide the mismatch.
        c.values(&[1.0], &[1.0]);
        assert!(!c.is_within());
        assert_eq!(c.max_abs_err(), f32::INFINITY);
    }
}
