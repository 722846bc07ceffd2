//! The error every fallible function of this crate returns: a file that cannot be read or does
//! not follow the format, and a tensor asked for with the wrong rank or kind.

use std::path::PathBuf;

use thiserror::Error;

/// Why a reference file or one of its tensors cannot be used.
#[derive(Debug, Error)]
pub enum ReferenceError {
    /// The file is missing or unreadable.
    #[error("cannot read reference file {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the file system said (part of the message, so not repeated as a source).
        error: std::io::Error,
    },
    /// The file is not JSON, or lacks a field, or a value does not fit its field.
    #[error("reference file {} does not follow the format: {error}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line and column (part of the message).
        error: serde_json::Error,
    },
    /// A tensor whose shape and data disagree.
    #[error("shape {shape:?} needs {needed} values, the tensor has {len}")]
    Size {
        /// The stored shape.
        shape: Vec<usize>,
        /// The product of the shape.
        needed: usize,
        /// The number of values stored.
        len: usize,
    },
    /// A tensor whose shape holds more values than a `usize` counts.
    #[error("shape {shape:?} holds more values than a usize counts")]
    ShapeOverflow {
        /// The stored shape.
        shape: Vec<usize>,
    },
    /// A tensor asked for with another rank than it has.
    #[error("expected a rank-{rank} tensor, got shape {shape:?}")]
    Rank {
        /// The rank asked for.
        rank: usize,
        /// The stored shape.
        shape: Vec<usize>,
    },
    /// A value of a tensor read as integers (token ids, masks) outside the 32-bit integers
    /// every backend's `Int` tensors hold.
    #[error(
        "value {value} at flat index {index} is outside the 32-bit integers an Int tensor holds"
    )]
    IntegerOutOfRange {
        /// Where the value is, in row-major order.
        index: usize,
        /// The value.
        value: f32,
    },
    /// A value of a tensor read as integers (token ids, masks) that is not a whole number.
    #[error("value {value} at flat index {index} is not an integer")]
    NotInteger {
        /// Where the value is, in row-major order.
        index: usize,
        /// The value.
        value: f32,
    },
    /// A file named by a reference file that is not a plain name of a file beside it.
    #[error("{field} is {name:?}, which is not the name of a file beside the reference file")]
    NotAFileName {
        /// The field that names the file.
        field: &'static str,
        /// The name given.
        name: String,
    },
}
