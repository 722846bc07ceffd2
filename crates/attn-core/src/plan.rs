//! One call's shapes and options, checked once ([`PreparedAttention`]): what every strategy and
//! the route read.

use burn::tensor::{Bool, Tensor};

use crate::mask::{causal_block, causal_offset};
use crate::{AttentionError, AttentionOptions};

/// Validated shapes and options, shared by every strategy.
#[derive(Clone, Debug)]
pub struct PreparedAttention {
    /// `[batch, n_heads, seq_len_q, seq_len_kv]`.
    pub scores_shape: [usize; 4],
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// The factor on `q·kᵀ`.
    pub scale: f64,
    /// Dropout actually applied (0 outside autodiff).
    pub dropout: f64,
    /// The caller's mask, as given (it broadcasts to `scores_shape`).
    pub mask: Option<Tensor<4, Bool>>,
    /// The caller's bias, as given (it broadcasts to `scores_shape`).
    pub bias: Option<Tensor<4>>,
    /// Key `j` is masked for query `i` when `j > i + offset`.
    pub causal_offset: Option<i64>,
}

impl PreparedAttention {
    /// Checks `q`, `k`, `v` and `options` against each other.
    ///
    /// # Errors
    /// See [`AttentionError`].
    pub fn new(
        q: &Tensor<4>,
        k: &Tensor<4>,
        v: &Tensor<4>,
        options: &AttentionOptions,
    ) -> Result<Self, AttentionError> {
        let [batch, n_heads, seq_len_q, d_head] = q.dims();
        let [batch_k, n_kv_heads, seq_len_kv, d_head_k] = k.dims();
        let [batch_v, n_kv_heads_v, seq_len_v, _d_value] = v.dims();
        if batch != batch_k || batch != batch_v {
            return Err(AttentionError::BatchMismatch {
                batch_q: batch,
                batch_k,
                batch_v,
            });
        }
        if d_head != d_head_k {
            return Err(AttentionError::HeadDimMismatch {
                d_head_q: d_head,
                d_head_k,
            });
        }
        if n_kv_heads != n_kv_heads_v || seq_len_kv != seq_len_v {
            return Err(AttentionError::KeyValueMismatch {
                n_kv_heads_k: n_kv_heads,
                n_kv_heads_v,
                seq_len_k: seq_len_kv,
                seq_len_v,
            });
        }
        if n_kv_heads == 0 || !n_heads.is_multiple_of(n_kv_heads) {
            return Err(AttentionError::KvHeadsDoNotDivide {
                n_heads,
                n_kv_heads,
            });
        }
        for (what, size) in [("seq_len_kv", seq_len_kv), ("d_head", d_head)] {
            if size == 0 {
                return Err(AttentionError::EmptyDimension {
                    what,
                    q: q.dims(),
                    k: k.dims(),
                });
            }
        }
        let scores_shape = [batch, n_heads, seq_len_q, seq_len_kv];
        if let Some(mask) = &options.mask {
            check_broadcast("mask", mask.dims(), scores_shape)?;
        }
        if let Some(bias) = &options.bias {
            check_broadcast("bias", bias.dims(), scores_shape)?;
        }
        if !(0.0..1.0).contains(&options.dropout) {
            return Err(AttentionError::InvalidDropout {
                dropout: options.dropout,
            });
        }
        let scale = options.scale.unwrap_or(1.0 / (d_head as f64).sqrt());
        if !(scale.is_finite() && scale > 0.0) {
            return Err(AttentionError::InvalidScale { scale });
        }
        let training = q.is_autodiff() || q.device().is_autodiff();
        Ok(Self {
            scores_shape,
            n_kv_heads,
            scale,
            dropout: if training { options.dropout } else { 0.0 },
            mask: options.mask.clone(),
            bias: options.bias.clone(),
            causal_offset: options
                .causal
                .map(|a| causal_offset(a, seq_len_q, seq_len_kv)),
        })
    }

    /// The combined mask (caller's mask and causal) for keys `kv_start..kv_start + len`,
    /// expanded to `[batch, n_heads, seq_len_q, len]`; `None` when nothing is masked.
    pub fn mask_for_keys(
        &self,
        kv_start: usize,
        len: usize,
        device: &burn::tensor::Device,
    ) -> Option<Tensor<4, Bool>> {
        let [batch, n_heads, seq_len_q, seq_len_kv] = self.scores_shape;
        let shape = [batch, n_heads, seq_len_q, len];
        let caller = self.mask.clone().map(|m| {
            let m = if m.dims()[3] == seq_len_kv && len != seq_len_kv {
                m.narrow(3, kv_start, len)
            } else {
                m
            };
            m.expand(shape)
        });
        let causal = self.causal_offset.map(|offset| {
            causal_block(seq_len_q, kv_start, len, offset, device)
                .reshape([1, 1, seq_len_q, len]) // [1, 1, seq_len_q, len]
                .expand(shape)
        });
        match (caller, causal) {
            (Some(a), Some(b)) => Some(a.bool_or(b)),
            (a, None) => a,
            (None, b) => b,
        }
    }

    /// The bias for keys `kv_start..kv_start + len`, expanded to `[batch, n_heads, seq_len_q, len]`.
    pub fn bias_for_keys(&self, kv_start: usize, len: usize) -> Option<Tensor<4>> {
        let [batch, n_heads, seq_len_q, seq_len_kv] = self.scores_shape;
        self.bias.clone().map(|b| {
            let b = if b.dims()[3] == seq_len_kv && len != seq_len_kv {
                b.narrow(3, kv_start, len)
            } else {
                b
            };
            b.expand([batch, n_heads, seq_len_q, len])
        })
    }

    /// Masks (`−∞`) and biases a block of scaled scores for keys `kv_start..kv_start + len`.
    pub fn mask_and_bias(&self, scores: Tensor<4>, kv_start: usize) -> Tensor<4> {
        let len = scores.dims()[3];
        let scores = match self.mask_for_keys(kv_start, len, &scores.device()) {
            Some(mask) => scores.mask_fill(mask, f32::NEG_INFINITY),
            None => scores,
        };
        match self.bias_for_keys(kv_start, len) {
            Some(bias) => scores + bias,
            None => scores,
        }
    }
}

fn check_broadcast(
    what: &'static str,
    got: [usize; 4],
    expected: [usize; 4],
) -> Result<(), AttentionError> {
    if got.iter().zip(expected).all(|(&g, e)| g == e || g == 1) {
        Ok(())
    } else {
        Err(AttentionError::DoesNotBroadcast {
            what,
            got,
            expected,
        })
    }
}
