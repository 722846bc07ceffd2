//! The error every fallible function of this crate returns: settings and inputs that cannot
//! work, each variant naming the numbers involved.

use thiserror::Error;

/// Why a positional scheme cannot be built or applied.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum PosError {
    /// Sinusoidal tables pair each sine with a cosine, so `d_model` must be even.
    #[error("d_model must be even to pair every sine with a cosine, got {d_model}")]
    OddDModel {
        /// The model width given.
        d_model: usize,
    },
    /// Rotary encoding rotates pairs of features, so `d_head` must be even.
    #[error("d_head must be even to rotate features in pairs, got {d_head}")]
    OddDHead {
        /// The head width given.
        d_head: usize,
    },
    /// A learned table has no row for some position of the input.
    #[error(
        "seq_len {seq_len} from offset {offset} needs {seq_len} + {offset} rows, \
         more than the learned table's max_len {max_len}"
    )]
    TooLong {
        /// Length of the input sequence.
        seq_len: usize,
        /// Position of its first token.
        offset: usize,
        /// Rows in the learned table.
        max_len: usize,
    },
    /// ALiBi needs at least one head to give a slope to.
    #[error("ALiBi needs at least one head, got n_heads = 0")]
    ZeroHeads,
    /// A sinusoidal base that does not give a geometric ladder of wavelengths.
    #[error("sinusoidal base must be finite and greater than 1, got {base}")]
    InvalidBase {
        /// The base given.
        base: f64,
    },
    /// A rotary theta that does not give a geometric ladder of frequencies.
    #[error("rotary theta must be finite and greater than 1, got {theta}")]
    InvalidTheta {
        /// The theta given.
        theta: f64,
    },
    /// A rotary frequency scaling whose factors cannot work.
    #[error("rotary scaling: {what} cannot be {value}")]
    InvalidScaling {
        /// Which setting.
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// A size that must hold at least one element.
    #[error("{what} must be at least 1, got 0")]
    ZeroSize {
        /// Which size: `"d_model"`, `"d_head"`, `"max_len"`, `"seq_len_q"` or `"seq_len_kv"`.
        what: &'static str,
    },
    /// An input whose feature width differs from the one the encoding was built for.
    #[error("{what} of the input is {got}, but the encoding was built for {expected}")]
    WidthMismatch {
        /// Which width: `"d_model"` or `"d_head"`.
        what: &'static str,
        /// The width the encoding was built for.
        expected: usize,
        /// The width of the input.
        got: usize,
    },
    /// `d_model` cannot be cut into `n_heads` equal heads (checked by [`crate::PositionalScheme::validate`]).
    #[error("d_model ({d_model}) is not divisible by n_heads ({n_heads})")]
    HeadsDoNotDivide {
        /// Model width.
        d_model: usize,
        /// Number of heads.
        n_heads: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_numbers() {
        let too_long = PosError::TooLong {
            seq_len: 7,
            offset: 5,
            max_len: 11,
        };
        let text = too_long.to_string();
        assert!(text.contains("seq_len 7"), "{text}");
        assert!(text.contains("offset 5"), "{text}");
        assert!(text.contains("max_len 11"), "{text}");
        assert!(
            PosError::OddDModel { d_model: 13 }
                .to_string()
                .contains("13")
        );
        assert!(PosError::OddDHead { d_head: 9 }.to_string().contains('9'));
        assert!(
            PosError::InvalidBase { base: 0.5 }
                .to_string()
                .contains("0.5")
        );
        let mismatch = PosError::WidthMismatch {
            what: "d_head",
            expected: 6,
            got: 10,
        }
        .to_string();
        assert!(mismatch.contains("d_head") && mismatch.contains('6') && mismatch.contains("10"));
    }
}
