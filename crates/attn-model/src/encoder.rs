//! The Transformer encoder (Vaswani et al. 2017, §3.1): a stack of blocks, each a self-attention
//! sub-layer and a feed-forward sub-layer, each wrapped in a residual connection and a LayerNorm.
//!
//! ```text
//! post-norm (paper, PyTorch's default):  x = LayerNorm(x + Dropout(Sublayer(x)))
//! pre-norm  (GPT-2, PyTorch norm_first): x = x + Dropout(Sublayer(LayerNorm(x)))
//! ```
//!
//! Deviations from the paper, all as in PyTorch's `TransformerEncoderLayer`: LayerNorm epsilon
//! `1e-5` (the paper does not give one), dropout also on the attention weights after softmax
//! and on the feed-forward's hidden units, and pre-norm as an option.

use attn_core::{CausalAlignment, Strategy};
use attn_pos::PositionalScheme;
use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Bool, Device, Tensor};

use crate::attention::{MhaInput, MultiHeadAttention, MultiHeadAttentionConfig, NeedWeights};
use crate::error::{ModelError, check_epsilon};
use crate::feed_forward::{Activation, FeedForward, FeedForwardConfig};
use crate::norm::{LayerNorm, LayerNormConfig};
use crate::residual::{NormPlacement, Residual};

/// Configuration of one [`EncoderBlock`].
#[derive(Config, Debug)]
pub struct EncoderBlockConfig {
    /// Model width.
    pub d_model: usize,
    /// Number of attention heads.
    pub n_heads: usize,
    /// Hidden width of the feed-forward network.
    pub d_ff: usize,
    /// Key/value heads for grouped-query attention; `None` means `n_heads`.
    pub n_kv_heads: Option<usize>,
    /// Dropout on sub-layer outputs, attention weights and feed-forward hidden units while
    /// training (`P_drop = 0.1` in the paper).
    #[config(default = 0.1)]
    pub dropout: f64,
    /// Post-norm (paper) or pre-norm.
    #[config(default = "NormPlacement::Post")]
    pub norm: NormPlacement,
    /// ReLU (paper) or GELU.
    #[config(default = "Activation::Relu")]
    pub activation: Activation,
    /// LayerNorm epsilon; `1e-5` as PyTorch (the paper gives none).
    #[config(default = 1e-5)]
    pub layer_norm_eps: f64,
    /// Rotary or ALiBi positions inside attention; `None` otherwise.
    #[config(default = "PositionalScheme::None")]
    pub pos: PositionalScheme,
    /// How attention is computed.
    #[config(default = "Strategy::Auto")]
    pub strategy: Strategy,
    /// Whether each position attends only to itself and earlier positions.
    #[config(default = false)]
    pub causal: bool,
}

impl EncoderBlockConfig {
    /// The self-attention sub-layer's configuration.
    pub fn attention(&self) -> MultiHeadAttentionConfig {
        MultiHeadAttentionConfig::new(self.d_model, self.n_heads)
            .with_n_kv_heads(self.n_kv_heads)
            .with_dropout(self.dropout)
            .with_pos(self.pos.clone())
            .with_strategy(self.strategy)
    }

    /// The feed-forward sub-layer's configuration.
    pub fn feed_forward(&self) -> FeedForwardConfig {
        FeedForwardConfig::new(self.d_model, self.d_ff)
            .with_activation(self.activation)
            .with_dropout(self.dropout)
    }

    /// Checks every setting without making a tensor.
    ///
    /// # Errors
    /// Those of [`MultiHeadAttentionConfig::validate`] and [`FeedForwardConfig::validate`], and
    /// [`ModelError::InvalidEpsilon`].
    pub fn validate(&self) -> Result<(), ModelError> {
        self.attention().validate()?;
        self.feed_forward().validate()?;
        check_epsilon(self.layer_norm_eps)
    }

    /// Builds the block after [`validate`](Self::validate).
    ///
    /// # Errors
    /// Any error of [`validate`](Self::validate).
    pub fn init(&self, device: &Device) -> Result<EncoderBlock, ModelError> {
        self.validate()?;
        let norm = LayerNormConfig::new(self.d_model).with_epsilon(self.layer_norm_eps);
        Ok(EncoderBlock {
            attention: self.attention().init(device)?,
            norm_attn: norm.init(device),
            feed_forward: self.feed_forward().init(device)?,
            norm_ff: norm.init(device),
            residual: Residual::new(self.norm, self.dropout),
            causal: self.causal,
        })
    }
}

/// What an [`EncoderBlock`] or [`Encoder`] reads: the stream, its key padding, and which
/// self-attention weights to return beside the output.
///
/// Masks use burn's convention: `true` = this key is **not** attended.
#[derive(Clone, Debug)]
pub struct EncoderInput {
    pub(crate) x: Tensor<3>,
    pub(crate) padding: Option<Tensor<2, Bool>>,
    pub(crate) need_weights: NeedWeights,
}

impl EncoderInput {
    /// The stream, without padding or weights.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq_len, d_model]`
    pub fn new(x: Tensor<3>) -> Self {
        Self {
            x,
            padding: None,
            need_weights: NeedWeights::No,
        }
    }

    /// Masks padded keys (`true` = padding), PyTorch's `src_key_padding_mask`.
    ///
    /// # Shapes
    /// - `padding`: `[batch, seq_len]`
    pub fn with_padding(mut self, padding: Tensor<2, Bool>) -> Self {
        self.padding = Some(padding);
        self
    }

    /// Asks for every block's self-attention weights too (the fused, chunked and native
    /// strategies cannot return them).
    pub fn with_weights(mut self, need_weights: NeedWeights) -> Self {
        self.need_weights = need_weights;
        self
    }
}

/// What an [`EncoderBlock`] or [`Encoder`] returns.
#[derive(Clone, Debug)]
pub struct EncoderOutput {
    /// `[batch, seq_len, d_model]`.
    pub output: Tensor<3>,
    /// Each block's self-attention weights, first to last (a block gives one), when the input
    /// asked for them: `[batch, n_heads, seq_len, seq_len]` for [`NeedWeights::PerHead`],
    /// `[batch, 1, seq_len, seq_len]` for [`NeedWeights::Averaged`]; empty otherwise.
    pub weights: Vec<Tensor<4>>,
}

/// One encoder block: self-attention and feed-forward, each with a residual and a LayerNorm.
#[derive(Module, Debug)]
pub struct EncoderBlock {
    /// Self-attention (PyTorch's `self_attn`).
    pub(crate) attention: MultiHeadAttention,
    /// The LayerNorm around self-attention (PyTorch's `norm1`).
    pub(crate) norm_attn: LayerNorm,
    /// The feed-forward network (PyTorch's `linear1`, `linear2`).
    pub(crate) feed_forward: FeedForward,
    /// The LayerNorm around the feed-forward network (PyTorch's `norm2`).
    pub(crate) norm_ff: LayerNorm,
    /// Residual dropout and the norms' placement.
    residual: Residual,
    causal: bool,
}

impl EncoderBlock {
    /// Runs the block, checking shapes.
    ///
    /// # Shapes
    /// - `input.x`: `[batch, seq_len, d_model]`
    /// - `input.padding`: `[batch, seq_len]`, `true` = padding (never attended as a key)
    /// - returns: output `[batch, seq_len, d_model]`; weights as [`EncoderOutput::weights`]
    ///
    /// # Errors
    /// [`ModelError::WidthMismatch`] or [`ModelError::ShapeMismatch`] naming the input that does
    /// not fit; [`ModelError::Attention`] when the configured strategy cannot run (or cannot
    /// return the weights asked for).
    pub fn try_forward(&self, input: EncoderInput) -> Result<EncoderOutput, ModelError> {
        let (output, weights) = self.run(input.x, input.padding, input.need_weights)?;
        Ok(EncoderOutput {
            output,
            weights: weights.into_iter().collect(),
        })
    }

    /// [`try_forward`](Self::try_forward) for inputs known to fit.
    ///
    /// # Shapes
    /// As [`try_forward`](Self::try_forward).
    ///
    /// # Panics
    /// On any [`ModelError`], with its message.
    pub fn forward(&self, input: EncoderInput) -> EncoderOutput {
        self.try_forward(input)
            .unwrap_or_else(|e| panic!("encoder block: {e}"))
    }

    /// Model width.
    pub fn d_model(&self) -> usize {
        self.attention.d_model()
    }

    /// Self-attention, then feed-forward, each inside a residual connection.
    fn run(
        &self,
        x: Tensor<3>,
        padding: Option<Tensor<2, Bool>>,
        need_weights: NeedWeights,
    ) -> Result<(Tensor<3>, Option<Tensor<4>>), ModelError> {
        let [_batch, _seq_len, d_model] = x.dims();
        if d_model != self.d_model() {
            // Checked here because a pre-norm block would hit LayerNorm's panic first.
            return Err(ModelError::WidthMismatch {
                what: "encoder block input",
                expected: self.d_model(),
                got: d_model,
            });
        }
        let (x, weights) = self.residual.apply(x, &self.norm_attn, |x| {
            let out =
                self.attention
                    .try_forward(self.self_attention_input(x, padding, need_weights))?;
            Ok((out.output, out.weights))
        })?;
        let (x, ()) = self
            .residual
            .apply(x, &self.norm_ff, |x| Ok((self.feed_forward.forward(x), ())))?;
        Ok((x, weights))
    }

    fn self_attention_input(
        &self,
        x: Tensor<3>,
        padding: Option<Tensor<2, Bool>>,
        need_weights: NeedWeights,
    ) -> MhaInput {
        let mut input = MhaInput::self_attention(x).with_weights(need_weights);
        if let Some(padding) = padding {
            input = input.with_padding(padding);
        }
        if self.causal {
            input = input.with_causal(CausalAlignment::TopLeft);
        }
        input
    }
}

/// Configuration of an [`Encoder`]: `n_layers` identical blocks.
#[derive(Config, Debug)]
pub struct EncoderConfig {
    /// Number of blocks (6 in the paper).
    pub n_layers: usize,
    /// Every block's configuration.
    pub block: EncoderBlockConfig,
    /// A LayerNorm after the last block (PyTorch's `TransformerEncoder(norm=...)`); what
    /// pre-norm stacks need, since their residual stream is never normalised otherwise.
    #[config(default = false)]
    pub final_norm: bool,
}

impl EncoderConfig {
    /// Checks every setting without making a tensor.
    ///
    /// # Errors
    /// Those of [`EncoderBlockConfig::validate`].
    pub fn validate(&self) -> Result<(), ModelError> {
        self.block.validate()
    }

    /// Builds the encoder after [`validate`](Self::validate).
    ///
    /// # Errors
    /// Any error of [`validate`](Self::validate).
    pub fn init(&self, device: &Device) -> Result<Encoder, ModelError> {
        self.validate()?;
        let layers = (0..self.n_layers)
            .map(|_| self.block.init(device))
            .collect::<Result<Vec<_>, _>>()?;
        let norm_final = self.final_norm.then(|| {
            LayerNormConfig::new(self.block.d_model)
                .with_epsilon(self.block.layer_norm_eps)
                .init(device)
        });
        Ok(Encoder { layers, norm_final })
    }
}

/// A stack of [`EncoderBlock`]s with an optional final LayerNorm.
#[derive(Module, Debug)]
pub struct Encoder {
    /// The blocks, first to last (PyTorch's `layers`).
    pub(crate) layers: Vec<EncoderBlock>,
    /// LayerNorm after the last block (PyTorch's `norm`).
    pub(crate) norm_final: Option<LayerNorm>,
}

impl Encoder {
    /// Runs every block, checking shapes.
    ///
    /// # Shapes
    /// - `input.x`: `[batch, seq_len, d_model]`; `input.padding`: `[batch, seq_len]`,
    ///   `true` = padding
    /// - returns: output `[batch, seq_len, d_model]`; `n_layers` weights as
    ///   [`EncoderOutput::weights`] when asked for
    ///
    /// # Errors
    /// As [`EncoderBlock::try_forward`].
    pub fn try_forward(&self, input: EncoderInput) -> Result<EncoderOutput, ModelError> {
        let mut x = input.x;
        let mut weights = Vec::new();
        for layer in &self.layers {
            let (y, w) = layer.run(x, input.padding.clone(), input.need_weights)?;
            x = y;
            weights.extend(w);
        }
        let output = match &self.norm_final {
            Some(norm) => norm.forward(x),
            None => x,
        };
        Ok(EncoderOutput { output, weights })
    }

    /// [`try_forward`](Self::try_forward) for inputs known to fit.
    ///
    /// # Shapes
    /// As [`try_forward`](Self::try_forward).
    ///
    /// # Panics
    /// On any [`ModelError`], with its message.
    pub fn forward(&self, input: EncoderInput) -> EncoderOutput {
        self.try_forward(input)
            .unwrap_or_else(|e| panic!("encoder: {e}"))
    }

    /// Number of blocks.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{
        ATOL, RTOL, SeededRng, assert_close_slices, assert_tensors_close, for_each_device, to_vec,
    };
    use burn::tensor::TensorData;

    const BATCH: usize = 3;
    const SEQ_LEN: usize = 5;
    const D_MODEL: usize = 12;
    const N_HEADS: usize = 3;
    const D_FF: usize = 7;

    fn block_config(norm: NormPlacement) -> EncoderBlockConfig {
        EncoderBlockConfig::new(D_MODEL, N_HEADS, D_FF)
            .with_dropout(0.0)
            .with_norm(norm)
    }

    fn padding(lengths: &[usize], device: &Device) -> Tensor<2, Bool> {
        attn_core::padding_mask_from_lengths(lengths, SEQ_LEN, device).expect("lengths fit")
    }

    #[test]
    fn changing_padded_tokens_does_not_change_other_positions() {
        for_each_device(|d| {
            for norm in [NormPlacement::Post, NormPlacement::Pre] {
                let mut rng = SeededRng::new(31);
                let encoder = EncoderConfig::new(2, block_config(norm))
                    .init(&d.device)
                    .expect("valid");
                let lengths = [5, 3, 1];
                let x = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
                let noise = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device) * 10.0;
                let pad = padding(&lengths, &d.device);
                let keep = pad.clone().bool_not().float().unsqueeze_dim::<3>(2); // [batch, seq_len, 1]
                // Only padded positions change: x + noise · padding.
                let changed = x.clone() + noise * pad.clone().float().unsqueeze_dim::<3>(2);
                let a = encoder
                    .forward(EncoderInput::new(x).with_padding(pad.clone()))
                    .output;
                let b = encoder
                    .forward(EncoderInput::new(changed).with_padding(pad))
                    .output;
                let a = to_vec(a * keep.clone());
                let b = to_vec(b * keep);
                assert_close_slices(&b, &a, ATOL, RTOL, &format!("{norm:?}: real positions"));
            }
        });
    }

    #[test]
    fn causal_block_equals_token_by_token_recomputation() {
        for_each_device(|d| {
            for norm in [NormPlacement::Post, NormPlacement::Pre] {
                let mut rng = SeededRng::new(32);
                let block = block_config(norm)
                    .with_causal(true)
                    .init(&d.device)
                    .expect("valid");
                let x = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
                let full = block.forward(EncoderInput::new(x.clone())).output;
                for t in 0..SEQ_LEN {
                    let prefix = block
                        .forward(EncoderInput::new(x.clone().slice([
                            0..BATCH,
                            0..t + 1,
                            0..D_MODEL,
                        ])))
                        .output;
                    assert_tensors_close(
                        prefix.slice([0..BATCH, t..t + 1, 0..D_MODEL]),
                        full.clone().slice([0..BATCH, t..t + 1, 0..D_MODEL]),
                        ATOL,
                        RTOL,
                        &format!("{norm:?}: position {t}"),
                    );
                }
            }
        });
    }

    #[test]
    fn encoder_without_positions_is_permutation_equivariant() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(33);
            let encoder = EncoderConfig::new(2, block_config(NormPlacement::Pre))
                .with_final_norm(true)
                .init(&d.device)
                .expect("valid");
            let x = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
            let order = [3_i64, 0, 4, 1, 2];
            let perm =
                Tensor::<1, burn::tensor::Int>::from_data(TensorData::from(order), &d.device);
            let permuted_out = encoder
                .forward(EncoderInput::new(x.clone().select(1, perm.clone())))
                .output;
            let out_permuted = encoder.forward(EncoderInput::new(x)).output.select(1, perm);
            assert_tensors_close(permuted_out, out_permuted, ATOL, RTOL, "f(Px) = P f(x)");
        });
    }

    #[test]
    fn every_layers_weights_are_returned_and_rows_sum_to_one() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(34);
            let encoder = EncoderConfig::new(3, block_config(NormPlacement::Post))
                .init(&d.device)
                .expect("valid");
            assert_eq!(encoder.n_layers(), 3);
            let x = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
            let pad = padding(&[5, 3, 2], &d.device);
            let EncoderOutput {
                output: out,
                weights,
            } = encoder
                .try_forward(
                    EncoderInput::new(x.clone())
                        .with_padding(pad.clone())
                        .with_weights(NeedWeights::PerHead),
                )
                .expect("explicit strategy");
            assert_tensors_close(
                out,
                encoder
                    .forward(EncoderInput::new(x).with_padding(pad))
                    .output,
                ATOL,
                RTOL,
                "same output",
            );
            assert_eq!(weights.len(), 3);
            for w in weights {
                assert_eq!(w.dims(), [BATCH, N_HEADS, SEQ_LEN, SEQ_LEN]);
                // Sequence 1 has 3 real tokens: keys 3 and 4 get no weight.
                let padded = to_vec(w.clone().slice([1..2, 0..N_HEADS, 0..SEQ_LEN, 3..5]));
                assert!(padded.iter().all(|v| *v == 0.0), "{padded:?}");
                let sums = to_vec(w.sum_dim(3));
                assert_close_slices(&sums, &vec![1.0; sums.len()], 1e-5, 0.0, "rows sum to 1");
            }
        });
    }

    #[test]
    fn post_and_pre_norm_differ_and_post_norm_output_is_normalised() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(35);
            let x = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
            let post = block_config(NormPlacement::Post)
                .init(&d.device)
                .expect("valid");
            let pre = block_config(NormPlacement::Pre)
                .init(&d.device)
                .expect("valid")
                .load_record(post.clone().into_record());
            let y = post.forward(EncoderInput::new(x.clone())).output;
            // A freshly initialised LayerNorm (gamma 1, beta 0) leaves every position with
            // mean 0 and variance 1 (up to epsilon).
            let mean = to_vec(y.clone().mean_dim(2));
            assert_close_slices(&mean, &vec![0.0; mean.len()], 1e-5, 0.0, "mean");
            let var = to_vec(y.clone().var_bias(2));
            assert_close_slices(&var, &vec![1.0; var.len()], 1e-3, 0.0, "variance");
            let z = pre.forward(EncoderInput::new(x)).output;
            let (diff, _) = attn_testing::max_abs_diff(&to_vec(y), &to_vec(z));
            assert!(
                diff > 1e-2,
                "same parameters, different placement: diff {diff}"
            );
        });
    }

    #[test]
    fn config_errors_surface_from_every_part() {
        let err = EncoderBlockConfig::new(10, 3, 7)
            .validate()
            .expect_err("10 / 3");
        assert!(matches!(
            err,
            ModelError::HeadsDoNotDivide {
                d_model: 10,
                n_heads: 3
            }
        ));
        let err = EncoderBlockConfig::new(12, 3, 0)
            .validate()
            .expect_err("d_ff 0");
        assert!(matches!(err, ModelError::ZeroSize { what: "d_ff" }));
        let err = EncoderBlockConfig::new(12, 3, 7)
            .with_layer_norm_eps(0.0)
            .validate()
            .expect_err("eps");
        assert!(matches!(err, ModelError::InvalidEpsilon { .. }));
        let err = EncoderConfig::new(2, EncoderBlockConfig::new(12, 3, 7).with_dropout(1.0))
            .init(&Device::flex())
            .expect_err("dropout 1");
        assert!(matches!(err, ModelError::InvalidDropout { .. }));
    }

    #[test]
    fn wrong_width_is_an_error_not_a_panic_inside_burn() {
        let device = Device::flex();
        let block = block_config(NormPlacement::Post)
            .init(&device)
            .expect("valid");
        let err = block
            .try_forward(EncoderInput::new(Tensor::zeros([1, 2, 8], &device)))
            .expect_err("width 8");
        assert!(
            matches!(
                err,
                ModelError::WidthMismatch {
                    expected: 12,
                    got: 8,
                    ..
                }
            ),
            "{err}"
        );
    }
}
