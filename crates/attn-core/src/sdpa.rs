//! The entry point: checks shapes and options, settles the strategy, and runs it.

use burn::tensor::{Bool, Tensor};

use crate::mask::{causal_block, causal_offset};
use crate::{AttentionError, AttentionOptions, Strategy, chunked, explicit, flash, fused, native};

/// From this many keys on, [`Strategy::Auto`] trains through the native kernel and its own
/// backward on the CPU backends. Measured on flex, `[1, 8, s, 64]`, forward plus backward: the
/// explicit strategy through autodiff is faster at s = 16 (0.061 against 0.135 ms), the native
/// pair at s = 64 (0.73 against 1.23 ms) and beyond.
pub const NATIVE_TRAINING_MIN_KEYS: usize = 64;

/// What attention returns.
#[derive(Clone, Debug)]
pub struct AttentionOutput {
    /// The weighted sum of values, `[batch, n_heads, seq_len_q, d_value]`.
    pub context: Tensor<4>,
    /// The weights `[batch, n_heads, seq_len_q, seq_len_kv]`, when asked for (after dropout,
    /// i.e. the weights that were actually applied to `v`).
    pub weights: Option<Tensor<4>>,
}

/// Scaled dot-product attention, `softmax(q·kᵀ · scale + bias, masked → −∞) · v`.
///
/// Rows whose keys are all masked return zeros (context and weights) with zero gradients.
///
/// # Shapes
/// - `q`: `[batch, n_heads, seq_len_q, d_head]`
/// - `k`: `[batch, n_kv_heads, seq_len_kv, d_head]`, `n_kv_heads` dividing `n_heads`
/// - `v`: `[batch, n_kv_heads, seq_len_kv, d_value]`
/// - `options.mask`, `options.bias`: broadcast to `[batch, n_heads, seq_len_q, seq_len_kv]`
/// - returns: context `[batch, n_heads, seq_len_q, d_value]`, weights
///   `[batch, n_heads, seq_len_q, seq_len_kv]`
///
/// # Errors
/// An [`AttentionError`] naming the dimensions when the shapes cannot work, or when a forced
/// strategy cannot honour the options (weights or dropout from `Chunked`, `Fused` or `Native`;
/// gradients from `Native`).
pub fn try_scaled_dot_product_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    options: &AttentionOptions,
) -> Result<AttentionOutput, AttentionError> {
    let plan = PreparedAttention::new(&q, &k, &v, options)?;
    let strategy = plan.strategy(&q, &k, &v, options)?;
    let output = match strategy {
        Strategy::Explicit | Strategy::Auto => {
            let (context, weights) = explicit::attention(q, k, v, &plan);
            AttentionOutput {
                context,
                weights: options.need_weights.then_some(weights),
            }
        }
        Strategy::Chunked { block } if plan.flash_applies(&q) => AttentionOutput {
            context: flash::attention(q, k, v, &plan, block).0,
            weights: None,
        },
        Strategy::Chunked { block } => AttentionOutput {
            context: chunked::attention(q, k, v, &plan, block),
            weights: None,
        },
        Strategy::Fused => AttentionOutput {
            context: fused::attention(q, k, v, &plan),
            weights: None,
        },
        Strategy::Native if plan.native_flash_applies(&q) => AttentionOutput {
            context: flash::attention(q, k, v, &plan, chunked::DEFAULT_BLOCK).0,
            weights: None,
        },
        Strategy::Native => AttentionOutput {
            context: native::attention(q, k, v, &plan),
            weights: None,
        },
    };
    Ok(output)
}

/// [`try_scaled_dot_product_attention`] for callers whose shapes are known to be valid.
///
/// # Shapes
/// As [`try_scaled_dot_product_attention`].
///
/// # Panics
/// On any [`AttentionError`], with its message (which names the dimensions).
pub fn scaled_dot_product_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    options: &AttentionOptions,
) -> AttentionOutput {
    try_scaled_dot_product_attention(q, k, v, options).unwrap_or_else(|e| panic!("attention: {e}"))
}

/// Validated shapes and options, shared by the three strategies.
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

    /// The strategy that will run: `options.strategy`, or the automatic choice, after checking
    /// that a forced strategy can honour the options.
    fn strategy(
        &self,
        q: &Tensor<4>,
        k: &Tensor<4>,
        v: &Tensor<4>,
        options: &AttentionOptions,
    ) -> Result<Strategy, AttentionError> {
        let needs_matrix = options.need_weights || self.dropout > 0.0;
        match options.strategy {
            Strategy::Auto if needs_matrix => Ok(Strategy::Explicit),
            Strategy::Auto if q.is_tracked() || k.is_tracked() || v.is_tracked() => {
                let long = self.scores_shape[3] >= NATIVE_TRAINING_MIN_KEYS;
                if long && self.native_flash_applies(q) {
                    Ok(Strategy::Native)
                } else {
                    Ok(Strategy::Explicit)
                }
            }
            Strategy::Auto if native::native_serves(&q.device()) => Ok(Strategy::Native),
            Strategy::Auto => Ok(Strategy::Fused),
            Strategy::Explicit => Ok(Strategy::Explicit),
            Strategy::Chunked { block } if block == 0 => {
                Err(AttentionError::InvalidBlock { block })
            }
            forced @ (Strategy::Chunked { .. } | Strategy::Fused) if needs_matrix => {
                Err(AttentionError::StrategyCannot {
                    strategy: forced.name(),
                    what: if options.need_weights {
                        "return the attention weights"
                    } else {
                        "apply dropout to the weights"
                    },
                })
            }
            Strategy::Native => {
                let differentiable = self.native_flash_applies(q);
                native::check_can_run(q, k, v, options, self, differentiable)?;
                Ok(Strategy::Native)
            }
            forced => Ok(forced),
        }
    }

    /// Whether attention can run as the backend operation [`FlashAttentionOps`]
    /// (crate::FlashAttentionOps), its own backward included: the backend implements it in this
    /// build, and no gradient is wanted for the bias (the operation treats it as a constant).
    fn flash_applies(&self, q: &Tensor<4>) -> bool {
        flash::flash_serves(&q.device()) && !self.bias.as_ref().is_some_and(Tensor::is_tracked)
    }

    /// Whether the native kernel runs as [`FlashAttentionOps`](crate::FlashAttentionOps)
    /// (so differentiably): [`Self::flash_applies`] on a device where the operation is the
    /// native kernel (flex, ndarray).
    fn native_flash_applies(&self, q: &Tensor<4>) -> bool {
        self.flash_applies(q) && native::native_serves(&q.device())
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
