//! The one choice a model makes about positions, as a serializable value: nothing, a table added
//! to the embeddings (sinusoidal or learned), a rotation of queries and keys (rotary), or a bias
//! on the scores (ALiBi).

use serde::{Deserialize, Serialize};

use crate::alibi::AlibiForm;
use crate::error::PosError;
use crate::rotary::{self, DEFAULT_THETA, RotaryPairing, RotaryScaling};
use crate::sinusoidal::{self, DEFAULT_BASE};

/// How a model tells its attention where each token is.
///
/// Each scheme acts at a different place in the model:
///
/// | scheme | acts on | see |
/// | --- | --- | --- |
/// | `None` | nothing: attention is permutation-equivariant | |
/// | `Sinusoidal` | embeddings, `x + PE` | [`crate::SinusoidalEncoding`] |
/// | `Learned` | embeddings, `x + table`, trained | [`crate::LearnedEncoding`] |
/// | `Rotary` | queries and keys of every head | [`crate::RotaryEncoding`] |
/// | `Alibi` | the scores, as additive bias | [`crate::alibi_bias`] |
///
/// ```
/// use attn_pos::PositionalScheme;
///
/// let scheme: PositionalScheme = serde_json::from_str(
///     r#"{"Rotary": {"theta": 10000.0, "pairing": "HalfSplit"}}"#,
/// ).unwrap();
/// assert_eq!(scheme, PositionalScheme::rotary_half_split());
/// assert!(scheme.rotates_queries_and_keys());
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PositionalScheme {
    /// No positional information.
    None,
    /// The fixed sinusoidal table of Vaswani et al. (2017).
    Sinusoidal {
        /// Base of the wavelength ladder (10000 in the paper).
        base: f64,
    },
    /// A trainable table of `max_len` rows.
    Learned {
        /// The longest `offset + seq_len` the model accepts.
        max_len: usize,
    },
    /// Rotary position embedding of queries and keys.
    Rotary {
        /// Base of the frequency ladder (10000 in the paper).
        theta: f64,
        /// Which features form each rotated pair.
        pairing: RotaryPairing,
        /// How the frequencies are rescaled for long contexts (absent from JSON when none).
        #[serde(default, skip_serializing_if = "RotaryScaling::is_none")]
        scaling: RotaryScaling,
    },
    /// Attention with linear biases.
    Alibi {
        /// Penalise keys on both sides (encoders) or only before the query (decoders).
        form: AlibiForm,
    },
}

impl PositionalScheme {
    /// The paper's sinusoidal table, base 10000.
    pub fn sinusoidal() -> Self {
        Self::Sinusoidal { base: DEFAULT_BASE }
    }

    /// A learned table of `max_len` rows.
    pub fn learned(max_len: usize) -> Self {
        Self::Learned { max_len }
    }

    /// Rotary embedding with theta 10000 and interleaved pairs (the paper, GPT-J, burn).
    pub fn rotary() -> Self {
        Self::Rotary {
            theta: DEFAULT_THETA,
            pairing: RotaryPairing::Interleaved,
            scaling: RotaryScaling::None,
        }
    }

    /// Rotary embedding with theta 10000 and half-split pairs (GPT-NeoX, Llama in Hugging Face).
    pub fn rotary_half_split() -> Self {
        Self::Rotary {
            theta: DEFAULT_THETA,
            pairing: RotaryPairing::HalfSplit,
            scaling: RotaryScaling::None,
        }
    }

    /// ALiBi in its symmetric form, for encoders that see both sides.
    pub fn alibi() -> Self {
        Self::Alibi {
            form: AlibiForm::Symmetric,
        }
    }

    /// ALiBi in its causal form, for decoders (pair it with causal attention).
    pub fn alibi_causal() -> Self {
        Self::Alibi {
            form: AlibiForm::Causal,
        }
    }

    /// Whether the scheme adds a table to the token embeddings (sinusoidal, learned).
    pub fn adds_to_embeddings(&self) -> bool {
        matches!(self, Self::Sinusoidal { .. } | Self::Learned { .. })
    }

    /// Whether the scheme rotates queries and keys inside attention (rotary).
    pub fn rotates_queries_and_keys(&self) -> bool {
        matches!(self, Self::Rotary { .. })
    }

    /// Whether the scheme adds a bias to the attention scores (ALiBi).
    pub fn biases_scores(&self) -> bool {
        matches!(self, Self::Alibi { .. })
    }

    /// Whether the scheme has trainable parameters (learned).
    pub fn is_trained(&self) -> bool {
        matches!(self, Self::Learned { .. })
    }

    /// Checks that the scheme can serve a model of width `d_model` with `n_heads` heads, before
    /// any module is built.
    ///
    /// # Errors
    ///
    /// - `Sinusoidal`: as [`crate::SinusoidalEncoding::new`] for `d_model`.
    /// - `Learned`: [`PosError::ZeroSize`] for `max_len == 0` or `d_model == 0`.
    /// - `Rotary`: [`PosError::HeadsDoNotDivide`] or [`PosError::ZeroHeads`] when `d_head`
    ///   is undefined, then as [`crate::RotaryEncoding::new`] for `d_head = d_model / n_heads`.
    /// - `Alibi`: [`PosError::ZeroHeads`] for `n_heads == 0`.
    pub fn validate(&self, d_model: usize, n_heads: usize) -> Result<(), PosError> {
        match *self {
            Self::None => Ok(()),
            Self::Sinusoidal { base } => sinusoidal::validate(d_model, base),
            Self::Learned { max_len } => {
                if max_len == 0 {
                    return Err(PosError::ZeroSize { what: "max_len" });
                }
                if d_model == 0 {
                    return Err(PosError::ZeroSize { what: "d_model" });
                }
                Ok(())
            }
            Self::Rotary { theta, scaling, .. } => {
                if n_heads == 0 {
                    return Err(PosError::ZeroHeads);
                }
                if !d_model.is_multiple_of(n_heads) {
                    return Err(PosError::HeadsDoNotDivide { d_model, n_heads });
                }
                scaling.validate()?;
                rotary::validate(d_model / n_heads, theta)
            }
            Self::Alibi { .. } => {
                if n_heads == 0 {
                    return Err(PosError::ZeroHeads);
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_schemes() -> Vec<PositionalScheme> {
        vec![
            PositionalScheme::None,
            PositionalScheme::sinusoidal(),
            PositionalScheme::Sinusoidal { base: 500.0 },
            PositionalScheme::learned(37),
            PositionalScheme::rotary(),
            PositionalScheme::rotary_half_split(),
            PositionalScheme::alibi(),
            PositionalScheme::alibi_causal(),
        ]
    }

    #[test]
    fn every_scheme_round_trips_through_json() {
        for scheme in all_schemes() {
            let json = serde_json::to_string(&scheme).expect("serializes");
            let back: PositionalScheme = serde_json::from_str(&json).expect("parses");
            assert_eq!(back, scheme, "{json}");
        }
    }

    #[test]
    fn json_spells_the_variants_by_name() {
        assert_eq!(
            serde_json::to_string(&PositionalScheme::None).expect("serializes"),
            "\"None\""
        );
        assert_eq!(
            serde_json::to_string(&PositionalScheme::learned(12)).expect("serializes"),
            r#"{"Learned":{"max_len":12}}"#
        );
        assert_eq!(
            serde_json::to_string(&PositionalScheme::alibi()).expect("serializes"),
            r#"{"Alibi":{"form":"Symmetric"}}"#
        );
    }

    #[test]
    fn defaults_are_the_papers() {
        assert_eq!(
            PositionalScheme::sinusoidal(),
            PositionalScheme::Sinusoidal { base: 10_000.0 }
        );
        assert_eq!(
            PositionalScheme::rotary(),
            PositionalScheme::Rotary {
                theta: 10_000.0,
                pairing: RotaryPairing::Interleaved,
                scaling: RotaryScaling::None,
            }
        );
        assert_eq!(
            PositionalScheme::alibi(),
            PositionalScheme::Alibi {
                form: AlibiForm::Symmetric
            }
        );
    }

    #[test]
    fn each_scheme_acts_in_exactly_one_place() {
        for scheme in all_schemes() {
            let places = [
                scheme.adds_to_embeddings(),
                scheme.rotates_queries_and_keys(),
                scheme.biases_scores(),
            ];
            let expected = usize::from(scheme != PositionalScheme::None);
            assert_eq!(
                places.iter().filter(|&&p| p).count(),
                expected,
                "{scheme:?}"
            );
        }
        assert!(PositionalScheme::learned(5).is_trained());
        assert!(!PositionalScheme::sinusoidal().is_trained());
    }

    #[test]
    fn validate_names_what_cannot_work() {
        assert_eq!(PositionalScheme::None.validate(13, 3), Ok(()));
        assert_eq!(
            PositionalScheme::sinusoidal().validate(15, 3),
            Err(PosError::OddDModel { d_model: 15 })
        );
        assert_eq!(
            PositionalScheme::Sinusoidal { base: 0.0 }.validate(16, 4),
            Err(PosError::InvalidBase { base: 0.0 })
        );
        assert_eq!(
            PositionalScheme::learned(0).validate(16, 4),
            Err(PosError::ZeroSize { what: "max_len" })
        );
        // 15 = 3 heads of 5: an odd head cannot be rotated in pairs.
        assert_eq!(
            PositionalScheme::rotary().validate(15, 3),
            Err(PosError::OddDHead { d_head: 5 })
        );
        assert_eq!(
            PositionalScheme::rotary().validate(14, 3),
            Err(PosError::HeadsDoNotDivide {
                d_model: 14,
                n_heads: 3
            })
        );
        assert_eq!(PositionalScheme::rotary().validate(18, 3), Ok(()));
        assert_eq!(
            PositionalScheme::alibi().validate(12, 0),
            Err(PosError::ZeroHeads)
        );
        assert_eq!(PositionalScheme::alibi_causal().validate(15, 5), Ok(()));
    }
}
