//! The reference-vector format of the workspace: JSON files whose every tensor is
//! `{"shape": [..], "data": [..]}` (float32, row-major), made by an independent implementation
//! (PyTorch, or the papers' formulas), and the tolerances they are checked to.
//!
//! - [`RefTensor`] is the one tensor type, with its conversion to burn tensors.
//! - [`ReferenceFile`] reads a known file from a reference folder, with an error that names
//!   the file and what is wrong ([`ReferenceError`]); [`read`] reads any other layout.
//! - Each known file is one module holding its case types: [`sdpa`], [`positional`], [`mha`],
//!   [`encoder_layer`], [`decoder_layer`], [`hf`].
//! - [`ATOL`], [`RTOL`] and [`Closeness`] decide whether computed values match, and keep the
//!   largest difference for the report.
//!
//! This crate never turns on a burn backend: tensors are built on the caller's device.
//!
//! ```
//! use attn_reference::{Closeness, RefTensor};
//! let expected: RefTensor = serde_json::from_str(r#"{"shape": [3], "data": [1, 2, 3]}"#)?;
//! let mut closeness = Closeness::default();
//! closeness.values(&[1.0, 2.000_01, 3.0], &expected.data);
//! assert!(closeness.is_within());
//! # Ok::<(), serde_json::Error>(())
//! ```

pub mod close;
pub mod decoder_layer;
pub mod encoder_layer;
mod error;
mod file;
pub mod hf;
pub mod mha;
pub mod positional;
pub mod sdpa;
mod tensor;

pub use close::{ATOL, Closeness, RTOL, Tolerance, Worst};
pub use decoder_layer::{DecoderLayerCase, DecoderLayerFile};
pub use encoder_layer::{EncoderLayerCase, EncoderLayerFile};
pub use error::ReferenceError;
pub use file::{ReferenceFile, read};
pub use hf::{BertReference, CausalLmReference, ChatReference, Gpt2Reference};
pub use mha::{AttentionWeights, MhaCase, MhaFile};
pub use positional::PositionalFile;
pub use sdpa::{SdpaCase, SdpaFile};
pub use tensor::RefTensor;
