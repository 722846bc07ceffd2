//! Positional schemes: self-attention alone treats its input as a set, so a model that needs word
//! order must be told where each token is. This crate holds the four classic answers:
//!
//! - [`SinusoidalEncoding`]: the fixed table of Vaswani et al. (2017), added to the embeddings.
//!   Any length, cached per device, a constant (never trained, never saved).
//! - [`LearnedEncoding`]: a trainable `[max_len, d_model]` table (GPT-2, BERT), saved with the
//!   model; a sequence that runs past `max_len` is a [`PosError::TooLong`].
//! - [`RotaryEncoding`]: rotary embedding of queries and keys (RoFormer), in both pairings
//!   ([`RotaryPairing`]), so that scores depend on the distance between tokens only.
//! - [`alibi_slopes`] and [`alibi_bias`]: ALiBi's per-head linear penalty on the scores, the
//!   additive bias `attn-core` takes.
//!
//! [`PositionalScheme`] is the serializable choice between them (or none) that a model config
//! holds.
//!
//! Tables and angles are computed on the host in `f64` and rounded once to `f32`, so they match
//! the papers' formulas within `1e-6` on every backend, at any position.
//!
//! ```
//! use attn_pos::{RotaryEncoding, RotaryPairing, SinusoidalEncoding};
//! use burn::tensor::{Device, Tensor};
//!
//! let device = Device::flex();
//! // Sinusoidal: position 0 is sin(0) = 0 and cos(0) = 1 in every pair.
//! let pe = SinusoidalEncoding::new(6, 10_000.0).unwrap();
//! let row0 = pe.table(1, 0, &device).into_data().try_into_vec::<f32>().unwrap();
//! assert_eq!(row0, [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]);
//!
//! // Rotary: the score between a query at 7 and a key at 4 equals the one between 3 and 0.
//! let rope = RotaryEncoding::new(4, 10_000.0, RotaryPairing::HalfSplit).unwrap();
//! let q = Tensor::<4>::from_floats([[[[0.3, -1.2, 0.8, 0.5]]]], &device); // [1, 1, 1, 4]
//! let k = Tensor::<4>::from_floats([[[[1.1, 0.4, -0.7, 0.2]]]], &device); // [1, 1, 1, 4]
//! let score = |m, n| {
//!     let q = rope.apply(q.clone(), m);
//!     let k = rope.apply(k.clone(), n);
//!     (q * k).sum().into_scalar::<f32>()
//! };
//! assert!((score(7, 4) - score(3, 0)).abs() < 1e-5);
//! ```

mod alibi;
mod error;
mod learned;
mod position_table;
mod rotary;
mod scheme;
mod sinusoidal;

pub use alibi::{AlibiForm, alibi_bias, alibi_slopes, try_alibi_bias};
pub use error::PosError;
pub use learned::{LEARNED_INIT_STD, LearnedEncoding, LearnedEncodingConfig};
pub use rotary::{DEFAULT_THETA, RotaryEncoding, RotaryPairing, RotaryScaling};
pub use scheme::PositionalScheme;
pub use sinusoidal::{DEFAULT_BASE, SinusoidalEncoding};

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{SeededRng, assert_tensors_close, for_each_device};
    use burn::module::Module;

    /// How a model crate holds the encodings: plain fields of a derived module.
    #[derive(Module, Debug)]
    struct Holder {
        sinusoidal: SinusoidalEncoding,
        rotary: RotaryEncoding,
        learned: LearnedEncoding,
    }

    #[test]
    fn encodings_sit_in_a_derived_module_and_only_the_learned_table_counts() {
        for_each_device(|d| {
            let device = d.device.clone().autodiff();
            let (max_len, d_model, d_head) = (11, 6, 4);
            let holder = Holder {
                sinusoidal: SinusoidalEncoding::standard(d_model).expect("even d_model"),
                rotary: RotaryEncoding::new(d_head, DEFAULT_THETA, RotaryPairing::HalfSplit)
                    .expect("even d_head"),
                learned: LearnedEncodingConfig::new(max_len, d_model).init(&device),
            };
            assert_eq!(holder.num_params(), max_len * d_model, "{}", d.name);
            // Saving writes one tensor: the learned table. The constants are rebuilt from config.
            assert_eq!(holder.clone().into_record().len(), 1, "{}", d.name);
            // The constants survive the switch to inference and keep computing the same rows.
            let mut rng = SeededRng::new(29);
            let x = rng.tensor([2, 3, d_model], &d.device);
            let before = holder.sinusoidal.forward(x.clone(), 5);
            let valid = holder.valid();
            assert_tensors_close(valid.sinusoidal.forward(x, 5), before, 0.0, 0.0, d.name);
            let q = rng.tensor([2, 3, 5, d_head], &d.device);
            let rotated = valid.rotary.apply(q.clone(), 2);
            assert_eq!(rotated.dims(), q.dims(), "{}", d.name);
            let display = format!("{valid}");
            assert!(display.contains("SinusoidalEncoding"), "{display}");
        });
    }
}
