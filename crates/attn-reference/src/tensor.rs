//! The one tensor type of every reference file, `{"shape": [..], "data": [..]}`, and its
//! conversion to burn tensors of float, boolean and integer kind.

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use serde::Deserialize;

use crate::ReferenceError;

/// A tensor as the reference files store it: shape and row-major float32 data.
///
/// Masks stored as JSON booleans read as 1 and 0, and integer tensors (token ids) read as
/// whole floats, so every tensor of a file has this one type.
/// A tensor whose data does not fill its shape is refused while the file is read.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "StoredTensor")]
pub struct RefTensor {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Values in row-major order.
    pub data: Vec<f32>,
}

impl RefTensor {
    /// A tensor from its shape and row-major values.
    ///
    /// # Errors
    ///
    /// [`ReferenceError::Size`] when the values do not fill the shape.
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Result<Self, ReferenceError> {
        let tensor = Self { shape, data };
        tensor.check_size()?;
        Ok(tensor)
    }

    /// The tensor on `device`.
    ///
    /// # Errors
    ///
    /// [`ReferenceError::Rank`] when the tensor does not have rank `D`, and
    /// [`ReferenceError::Size`] when its fields were changed so that the data no longer fills
    /// the shape.
    pub fn try_tensor<const D: usize>(&self, device: &Device) -> Result<Tensor<D>, ReferenceError> {
        self.check_rank(D)?;
        Ok(Tensor::from_data(
            TensorData::new(self.data.clone(), self.shape.clone()),
            device,
        ))
    }

    /// The tensor on `device`.
    ///
    /// # Panics
    ///
    /// Panics with the message of [`RefTensor::try_tensor`]'s error.
    pub fn tensor<const D: usize>(&self, device: &Device) -> Tensor<D> {
        self.try_tensor(device).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The tensor as booleans, `value != 0`, on `device` (masks: `true` where a key is not
    /// attended).
    ///
    /// # Errors
    ///
    /// As [`RefTensor::try_tensor`].
    pub fn try_bool_tensor<const D: usize>(
        &self,
        device: &Device,
    ) -> Result<Tensor<D, Bool>, ReferenceError> {
        self.check_rank(D)?;
        let data: Vec<bool> = self.data.iter().map(|&x| x != 0.0).collect();
        Ok(Tensor::from_data(
            TensorData::new(data, self.shape.clone()),
            device,
        ))
    }

    /// The tensor as booleans, `value != 0`, on `device`.
    ///
    /// # Panics
    ///
    /// Panics with the message of [`RefTensor::try_bool_tensor`]'s error.
    pub fn bool_tensor<const D: usize>(&self, device: &Device) -> Tensor<D, Bool> {
        self.try_bool_tensor(device)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The tensor as integers (token ids, attention masks of ones and zeros) on `device`.
    ///
    /// # Errors
    ///
    /// As [`RefTensor::try_tensor`], [`ReferenceError::NotInteger`] for the first value that
    /// is not a whole number, and [`ReferenceError::IntegerOutOfRange`] for the first outside
    /// the 32-bit integers.
    pub fn try_int_tensor<const D: usize>(
        &self,
        device: &Device,
    ) -> Result<Tensor<D, Int>, ReferenceError> {
        self.check_rank(D)?;
        let data = self
            .data
            .iter()
            .enumerate()
            .map(|(index, &value)| {
                if value.fract() != 0.0 {
                    Err(ReferenceError::NotInteger { index, value })
                } else if !(-2_147_483_648.0..2_147_483_648.0).contains(&value) {
                    // Past i32, burn panics converting the data to a backend's Int type.
                    Err(ReferenceError::IntegerOutOfRange { index, value })
                } else {
                    Ok(value as i64)
                }
            })
            .collect::<Result<Vec<i64>, _>>()?;
        Ok(Tensor::from_data(
            TensorData::new(data, self.shape.clone()),
            device,
        ))
    }

    /// The tensor as integers on `device`.
    ///
    /// # Panics
    ///
    /// Panics with the message of [`RefTensor::try_int_tensor`]'s error.
    pub fn int_tensor<const D: usize>(&self, device: &Device) -> Tensor<D, Int> {
        self.try_int_tensor(device)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn check_size(&self) -> Result<(), ReferenceError> {
        let needed = self
            .shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| ReferenceError::ShapeOverflow {
                shape: self.shape.clone(),
            })?;
        if needed == self.data.len() {
            Ok(())
        } else {
            Err(ReferenceError::Size {
                shape: self.shape.clone(),
                needed,
                len: self.data.len(),
            })
        }
    }

    fn check_rank(&self, rank: usize) -> Result<(), ReferenceError> {
        if self.shape.len() != rank {
            return Err(ReferenceError::Rank {
                rank,
                shape: self.shape.clone(),
            });
        }
        self.check_size()
    }
}

/// A tensor exactly as written in a file, before its shape is checked against its data.
#[derive(Deserialize)]
struct StoredTensor {
    shape: Vec<usize>,
    data: Vec<Value>,
}

/// One element of a stored tensor: a number, or a boolean in a mask.
#[derive(Deserialize)]
#[serde(untagged)]
enum Value {
    Number(f32),
    Bool(bool),
}

impl TryFrom<StoredTensor> for RefTensor {
    type Error = ReferenceError;

    fn try_from(stored: StoredTensor) -> Result<Self, Self::Error> {
        let data = stored
            .data
            .into_iter()
            .map(|v| match v {
                Value::Number(x) => x,
                Value::Bool(b) => f32::from(u8::from(b)),
            })
            .collect();
        Self::new(stored.shape, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<RefTensor, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn numbers_and_booleans_read_as_floats() {
        let t = parse(r#"{"shape": [2, 3], "data": [1.5, -2, 0, true, false, true]}"#)
            .expect("valid tensor");
        assert_eq!(t.shape, [2, 3]);
        assert_eq!(t.data, [1.5, -2.0, 0.0, 1.0, 0.0, 1.0]);
    }

    #[test]
    fn data_that_does_not_fill_the_shape_is_refused_with_both_numbers() {
        let err = parse(r#"{"shape": [2, 3], "data": [1, 2, 3, 4, 5]}"#).expect_err("5 of 6");
        let message = err.to_string();
        assert!(
            message.contains("shape [2, 3] needs 6 values, the tensor has 5"),
            "{message}"
        );
        let err = RefTensor::new(vec![4], vec![0.0; 3]).expect_err("3 of 4");
        assert!(matches!(
            err,
            ReferenceError::Size {
                needed: 4,
                len: 3,
                ..
            }
        ));
    }

    #[test]
    fn a_shape_past_usize_is_refused_naming_it() {
        let err =
            parse(r#"{"shape": [4294967296, 4294967296], "data": []}"#).expect_err("2^64 values");
        assert!(
            err.to_string()
                .contains("shape [4294967296, 4294967296] holds more values than a usize counts"),
            "{err}"
        );
    }

    #[test]
    fn a_value_that_is_neither_number_nor_boolean_is_refused() {
        assert!(parse(r#"{"shape": [2], "data": [1, "two"]}"#).is_err());
        assert!(parse(r#"{"shape": [2]}"#).is_err());
    }

    #[test]
    fn a_wrong_rank_names_the_rank_and_the_shape() {
        let t = RefTensor::new(vec![2, 3], vec![0.0; 6]).expect("fills its shape");
        let err = t.check_rank(3).expect_err("rank 2");
        assert_eq!(
            err.to_string(),
            "expected a rank-3 tensor, got shape [2, 3]"
        );
        assert!(t.check_rank(2).is_ok());
    }
}
