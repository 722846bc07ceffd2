//! The model the training crate uses: token ids in, one row of logits per position out.
//!
//! ```text
//! x = Embedding(tokens) · √d_model  (+ positional encoding)
//! x = Dropout(x)
//! x = Encoder(x)
//! logits = x · W_head + b_head
//! ```
//!
//! The embedding is the token models' shared [`TokenEmbedding`]: the scale `√d_model` and the
//! dropout on the embedded sum are the paper's (§3.4, §5.4). Sinusoidal and learned positions
//! are added to the embeddings; rotary and ALiBi positions act inside every attention layer
//! instead.

use attn_core::Strategy;
use attn_pos::PositionalScheme;
use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Bool, Device, Int, Tensor};

use crate::attention::NeedWeights;
use crate::embedding::{DrawOrder, Table, TokenEmbedding};
use crate::encoder::{Encoder, EncoderBlockConfig, EncoderConfig, EncoderInput};
use crate::error::{ModelError, check_nonzero};
use crate::feed_forward::Activation;
use crate::project::project;
use crate::residual::NormPlacement;

/// Configuration of a [`TokenEncoder`].
///
/// ```
/// use attn_model::{PositionalScheme, TokenEncoderConfig, TokenEncoderInput};
/// use burn::tensor::{Device, Int, Tensor};
///
/// let config = TokenEncoderConfig::new(11, 4, 12, 3, 2, 24, PositionalScheme::Sinusoidal { base: 10_000.0 });
/// let model = config.init(&Device::flex()).unwrap();
/// let tokens = Tensor::<2, Int>::from_ints([[1, 2, 3], [4, 5, 10]], &Device::flex());
/// assert_eq!(model.forward(TokenEncoderInput::new(tokens)).logits.dims(), [2, 3, 4]);
/// // An id outside 0..11 is an error that names it.
/// let bad = Tensor::<2, Int>::from_ints([[1, 11]], &Device::flex());
/// let err = model.try_forward(TokenEncoderInput::new(bad)).unwrap_err();
/// assert_eq!(err.to_string(), "token 11 at batch index 0, position 1 is outside the vocabulary 0..11");
/// ```
#[derive(Config, Debug)]
pub struct TokenEncoderConfig {
    /// Vocabulary size: token ids are `0..vocab`.
    pub vocab: usize,
    /// Number of output classes per position (the width of the logits).
    pub n_classes: usize,
    /// Model width.
    pub d_model: usize,
    /// Attention heads per layer.
    pub n_heads: usize,
    /// Number of encoder blocks.
    pub n_layers: usize,
    /// Hidden width of the feed-forward networks.
    pub d_ff: usize,
    /// Dropout on the embedded input, sub-layer outputs, attention weights and feed-forward
    /// hidden units while training (`P_drop = 0.1` in the paper).
    #[config(default = 0.1)]
    pub dropout: f64,
    /// How positions enter the model.
    pub pos: PositionalScheme,
    /// Post-norm (paper) or pre-norm blocks.
    #[config(default = "NormPlacement::Post")]
    pub norm: NormPlacement,
    /// ReLU (paper) or GELU in the feed-forward networks.
    #[config(default = "Activation::Relu")]
    pub activation: Activation,
    /// Multiply the embeddings by `√d_model` (paper §3.4).
    #[config(default = true)]
    pub scale_embedding: bool,
    /// A LayerNorm after the last block (advisable with pre-norm).
    #[config(default = false)]
    pub final_norm: bool,
    /// Key/value heads for grouped-query attention; `None` means `n_heads`.
    pub n_kv_heads: Option<usize>,
    /// Longest sequence accepted; `None` means no limit beyond the positional scheme's own
    /// (a learned table's `max_len`).
    pub max_len: Option<usize>,
    /// Whether each position attends only to itself and earlier positions.
    #[config(default = false)]
    pub causal: bool,
    /// LayerNorm epsilon.
    #[config(default = 1e-5)]
    pub layer_norm_eps: f64,
    /// How attention is computed.
    #[config(default = "Strategy::Auto")]
    pub strategy: Strategy,
}

impl TokenEncoderConfig {
    /// The encoder's configuration: rotary and ALiBi go to every attention layer, additive
    /// schemes stay with the embeddings.
    pub fn encoder(&self) -> EncoderConfig {
        let attention_pos = match &self.pos {
            scheme @ (PositionalScheme::Rotary { .. } | PositionalScheme::Alibi { .. }) => {
                scheme.clone()
            }
            _ => PositionalScheme::None,
        };
        let block = EncoderBlockConfig::new(self.d_model, self.n_heads, self.d_ff)
            .with_n_kv_heads(self.n_kv_heads)
            .with_dropout(self.dropout)
            .with_norm(self.norm)
            .with_activation(self.activation)
            .with_layer_norm_eps(self.layer_norm_eps)
            .with_pos(attention_pos)
            .with_strategy(self.strategy)
            .with_causal(self.causal);
        EncoderConfig::new(self.n_layers, block).with_final_norm(self.final_norm)
    }

    /// The longest sequence the model accepts, if any.
    pub fn effective_max_len(&self) -> Option<usize> {
        let learned = match &self.pos {
            PositionalScheme::Learned { max_len } => Some(*max_len),
            _ => None,
        };
        match (self.max_len, learned) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Checks every setting without making a tensor.
    ///
    /// # Errors
    /// [`ModelError::ZeroSize`] for a zero `vocab`, `n_classes` or `max_len`, the errors of
    /// [`EncoderConfig::validate`], and [`ModelError::Positional`] when the positional scheme
    /// refuses `d_model`.
    pub fn validate(&self) -> Result<(), ModelError> {
        check_nonzero("vocab", self.vocab)?;
        check_nonzero("n_classes", self.n_classes)?;
        if let Some(max_len) = self.effective_max_len() {
            check_nonzero("max_len", max_len)?;
        }
        self.encoder().validate()?;
        Ok(self.pos.validate(self.d_model, self.n_heads)?)
    }

    /// Builds the model after [`validate`](Self::validate).
    ///
    /// # Errors
    /// Any error of [`validate`](Self::validate).
    pub fn init(&self, device: &Device) -> Result<TokenEncoder, ModelError> {
        self.validate()?;
        Ok(TokenEncoder {
            embedding: TokenEmbedding::new(
                self.vocab,
                self.d_model,
                &self.pos,
                self.dropout,
                Table::of(self.scale_embedding, false),
                DrawOrder::TableFirst,
                device,
            )?,
            encoder: self.encoder().init(device)?,
            head: LinearConfig::new(self.d_model, self.n_classes).init(device),
            max_len: self.effective_max_len(),
        })
    }
}

/// Token embedding, positions, encoder and a linear head: logits for every position.
#[derive(Module, Debug)]
pub struct TokenEncoder {
    /// Token embedding, additive positions and the dropout on their sum.
    pub(crate) embedding: TokenEmbedding,
    /// The stack of encoder blocks.
    pub(crate) encoder: Encoder,
    /// `d_model → n_classes`.
    pub(crate) head: Linear,
    #[module(skip)]
    max_len: Option<usize>,
}

/// What a [`TokenEncoder`] reads: token ids, their key padding, and which self-attention
/// weights to return beside the logits.
#[derive(Clone, Debug)]
pub struct TokenEncoderInput {
    tokens: Tensor<2, Int>,
    padding: Option<Tensor<2, Bool>>,
    need_weights: NeedWeights,
}

impl TokenEncoderInput {
    /// Token ids, without padding or weights.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq_len]`, ids in `0..vocab`
    pub fn new(tokens: Tensor<2, Int>) -> Self {
        Self {
            tokens,
            padding: None,
            need_weights: NeedWeights::No,
        }
    }

    /// Masks padded keys (`true` = padding, never attended as a key).
    ///
    /// # Shapes
    /// - `padding`: `[batch, seq_len]`
    pub fn with_padding(mut self, padding: Tensor<2, Bool>) -> Self {
        self.padding = Some(padding);
        self
    }

    /// Asks for every layer's self-attention weights too, for inspection (the fused, chunked
    /// and native strategies cannot return them).
    pub fn with_weights(mut self, need_weights: NeedWeights) -> Self {
        self.need_weights = need_weights;
        self
    }
}

/// What a [`TokenEncoder`] returns.
#[derive(Clone, Debug)]
pub struct TokenEncoderOutput {
    /// `[batch, seq_len, n_classes]`.
    pub logits: Tensor<3>,
    /// Each layer's self-attention weights, first to last, when the input asked for them
    /// (see [`EncoderOutput::weights`](crate::EncoderOutput::weights)); empty otherwise.
    pub weights: Vec<Tensor<4>>,
}

impl TokenEncoder {
    /// Logits for every position, after checking ids and length.
    ///
    /// Reads the token ids back to the host to check them.
    ///
    /// # Shapes
    /// - `input.tokens`: `[batch, seq_len]`, ids in `0..vocab`
    /// - `input.padding`: `[batch, seq_len]`, `true` = padding (never attended as a key)
    /// - returns: logits `[batch, seq_len, n_classes]`; `n_layers` weights
    ///   `[batch, n_heads, seq_len, seq_len]` when asked for
    ///
    /// # Errors
    /// [`ModelError::TokenOutOfRange`] naming the first bad id and where it is,
    /// [`ModelError::SequenceTooLong`], [`ModelError::ShapeMismatch`] for a padding mask of
    /// the wrong shape, [`ModelError::Attention`] when the configured strategy cannot return the
    /// weights asked for.
    pub fn try_forward(&self, input: TokenEncoderInput) -> Result<TokenEncoderOutput, ModelError> {
        let device = input.tokens.device();
        attn_core::backend::on_cpu_pool(&device, || self.forward_here(input))
    }

    /// [`try_forward`](Self::try_forward) on the calling thread.
    fn forward_here(&self, input: TokenEncoderInput) -> Result<TokenEncoderOutput, ModelError> {
        let TokenEncoderInput {
            tokens,
            padding,
            need_weights,
        } = input;
        let [batch, seq_len] = tokens.dims();
        if let Some(max_len) = self.max_len
            && seq_len > max_len
        {
            return Err(ModelError::SequenceTooLong { seq_len, max_len });
        }
        let x = self.embedding.forward(tokens, 0, &vec![0; batch])?; // [batch, seq_len, d_model]
        if let Some(padding) = &padding {
            crate::attention::check_shape("padding mask", &[batch, seq_len], &padding.dims())?;
        }
        let encoded = self.encoder.try_forward(EncoderInput {
            x,
            padding,
            need_weights,
        })?;
        Ok(TokenEncoderOutput {
            logits: project(&self.head, encoded.output), // [batch, seq_len, n_classes]
            weights: encoded.weights,
        })
    }

    /// [`try_forward`](Self::try_forward) for inputs known to fit.
    ///
    /// # Shapes
    /// As [`try_forward`](Self::try_forward).
    ///
    /// # Panics
    /// On an id outside `0..vocab` or a sequence longer than `max_len`, with the
    /// [`ModelError`] message.
    pub fn forward(&self, input: TokenEncoderInput) -> TokenEncoderOutput {
        self.try_forward(input)
            .unwrap_or_else(|e| panic!("token encoder: {e}"))
    }

    /// Vocabulary size.
    pub fn vocab(&self) -> usize {
        self.embedding.vocab()
    }

    /// The longest sequence accepted, if any.
    pub fn max_len(&self) -> Option<usize> {
        self.max_len
    }

    /// The encoder stack, e.g. to load PyTorch weights into it.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_pos::AlibiForm;
    use attn_testing::{ATOL, RTOL, SeededRng, assert_tensors_close, for_each_device, to_vec};
    use burn::tensor::TensorData;

    const VOCAB: usize = 11;
    const N_CLASSES: usize = 4;
    const D_MODEL: usize = 12;
    const N_HEADS: usize = 3;
    const N_LAYERS: usize = 2;
    const D_FF: usize = 7;

    fn config(pos: PositionalScheme) -> TokenEncoderConfig {
        TokenEncoderConfig::new(VOCAB, N_CLASSES, D_MODEL, N_HEADS, N_LAYERS, D_FF, pos)
            .with_dropout(0.0)
    }

    fn random_tokens(
        rng: &mut SeededRng,
        batch: usize,
        seq_len: usize,
        device: &Device,
    ) -> Tensor<2, Int> {
        let ids: Vec<i64> = (0..batch * seq_len)
            .map(|_| rng.range(0, VOCAB - 1) as i64)
            .collect();
        Tensor::from_data(TensorData::new(ids, [batch, seq_len]), device)
    }

    fn all_schemes() -> Vec<PositionalScheme> {
        vec![
            PositionalScheme::None,
            PositionalScheme::Sinusoidal { base: 10_000.0 },
            PositionalScheme::Learned { max_len: 9 },
            PositionalScheme::rotary(),
            PositionalScheme::Alibi {
                form: AlibiForm::Symmetric,
            },
        ]
    }

    #[test]
    fn logits_and_weights_have_the_documented_shapes_for_every_scheme() {
        for_each_device(|d| {
            for pos in all_schemes() {
                let mut rng = SeededRng::new(41);
                let model = config(pos.clone()).init(&d.device).expect("valid");
                let tokens = random_tokens(&mut rng, 3, 5, &d.device);
                let logits = model.forward(TokenEncoderInput::new(tokens.clone())).logits;
                assert_eq!(logits.dims(), [3, 5, N_CLASSES], "{pos:?}");
                assert!(
                    to_vec(logits.clone()).iter().all(|v| v.is_finite()),
                    "{pos:?}"
                );
                let TokenEncoderOutput {
                    logits: with,
                    weights,
                } = model
                    .try_forward(TokenEncoderInput::new(tokens).with_weights(NeedWeights::PerHead))
                    .expect("explicit");
                assert_tensors_close(with, logits, ATOL, RTOL, "same logits");
                assert_eq!(weights.len(), N_LAYERS);
                assert!(weights.iter().all(|w| w.dims() == [3, N_HEADS, 5, 5]));
            }
        });
    }

    #[test]
    fn out_of_range_and_negative_ids_are_errors_naming_where() {
        let device = Device::flex();
        let model = config(PositionalScheme::None).init(&device).expect("valid");
        let tokens = Tensor::<2, Int>::from_ints([[1, 2, 3], [4, 5, 12]], &device);
        let err = model
            .try_forward(TokenEncoderInput::new(tokens))
            .expect_err("12 >= 11");
        assert!(matches!(
            err,
            ModelError::TokenOutOfRange {
                token: 12,
                vocab: VOCAB,
                batch_index: 1,
                position: 2
            }
        ));
        let tokens = Tensor::<2, Int>::from_ints([[1, -1, 3]], &device);
        let err = model
            .try_forward(TokenEncoderInput::new(tokens))
            .expect_err("negative");
        assert!(
            matches!(
                err,
                ModelError::TokenOutOfRange {
                    token: -1,
                    position: 1,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn sequences_longer_than_the_learned_table_or_max_len_are_errors() {
        let device = Device::flex();
        let mut rng = SeededRng::new(42);
        let model = config(PositionalScheme::Learned { max_len: 4 })
            .init(&device)
            .expect("valid");
        let err = model
            .try_forward(TokenEncoderInput::new(random_tokens(
                &mut rng, 2, 5, &device,
            )))
            .expect_err("5 > 4");
        assert!(matches!(
            err,
            ModelError::SequenceTooLong {
                seq_len: 5,
                max_len: 4
            }
        ));
        let model = config(PositionalScheme::None)
            .with_max_len(Some(3))
            .init(&device)
            .expect("valid");
        assert_eq!(model.max_len(), Some(3));
        let err = model
            .try_forward(TokenEncoderInput::new(random_tokens(
                &mut rng, 2, 4, &device,
            )))
            .expect_err("4 > 3");
        assert_eq!(
            err.to_string(),
            "sequence of length 4 is longer than max_len 3"
        );
    }

    #[test]
    fn padded_tokens_do_not_change_other_positions_logits() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(43);
            let model = config(PositionalScheme::Sinusoidal { base: 10_000.0 })
                .init(&d.device)
                .expect("valid");
            let lengths = [5, 2, 4];
            let padding =
                attn_core::padding_mask_from_lengths(&lengths, 5, &d.device).expect("fit");
            let a = random_tokens(&mut rng, 3, 5, &d.device);
            let b = random_tokens(&mut rng, 3, 5, &d.device);
            // Same real tokens, different padding tokens.
            let mixed = a.clone().mask_where(padding.clone(), b);
            let la = to_vec(
                model
                    .try_forward(TokenEncoderInput::new(a).with_padding(padding.clone()))
                    .expect("fits")
                    .logits,
            );
            let lb = to_vec(
                model
                    .try_forward(TokenEncoderInput::new(mixed).with_padding(padding))
                    .expect("fits")
                    .logits,
            );
            for (i, (x, y)) in la.iter().zip(&lb).enumerate() {
                let (batch, position) = (i / (5 * N_CLASSES), i / N_CLASSES % 5);
                if position < lengths[batch] {
                    assert!(
                        (x - y).abs() <= ATOL + RTOL * y.abs(),
                        "{batch},{position}: {x} vs {y}"
                    );
                }
            }
        });
    }

    #[test]
    fn permutation_equivariant_without_positions_and_not_with_sinusoidal() {
        for_each_device(|d| {
            let order = [2_i64, 4, 0, 3, 1];
            let perm = Tensor::<1, Int>::from_data(TensorData::from(order), &d.device);
            for (pos, equivariant) in [
                (PositionalScheme::None, true),
                (PositionalScheme::Sinusoidal { base: 10_000.0 }, false),
            ] {
                let mut rng = SeededRng::new(44);
                let model = config(pos.clone()).init(&d.device).expect("valid");
                let tokens = random_tokens(&mut rng, 3, 5, &d.device);
                let permuted_out = to_vec(
                    model
                        .forward(TokenEncoderInput::new(
                            tokens.clone().select(1, perm.clone()),
                        ))
                        .logits,
                );
                let out_permuted = to_vec(
                    model
                        .forward(TokenEncoderInput::new(tokens))
                        .logits
                        .select(1, perm.clone()),
                );
                let close = attn_testing::all_close(&permuted_out, &out_permuted, ATOL, RTOL);
                assert_eq!(close, equivariant, "{pos:?}");
            }
        });
    }

    #[test]
    fn config_and_module_round_trip_through_json_and_a_record() {
        let device = Device::flex();
        let dir =
            std::env::temp_dir().join(format!("attn-model-token-encoder-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let cfg = config(PositionalScheme::Learned { max_len: 6 })
            .with_norm(NormPlacement::Pre)
            .with_activation(Activation::Gelu)
            .with_final_norm(true)
            .with_n_kv_heads(Some(1));
        let cfg_path = dir.join("config.json");
        cfg.save(&cfg_path).expect("save config");
        let loaded = TokenEncoderConfig::load(&cfg_path).expect("load config");
        assert_eq!(
            burn::config::config_to_json(&loaded),
            burn::config::config_to_json(&cfg)
        );

        let mut rng = SeededRng::new(45);
        let model = cfg.init(&device).expect("valid");
        let tokens = random_tokens(&mut rng, 3, 5, &device);
        let want = model.forward(TokenEncoderInput::new(tokens.clone())).logits;
        let model_path = dir.join("model.bpk");
        model.save_file(&model_path).expect("save record");
        let fresh = loaded.init(&device).expect("valid");
        let (diff, _) = attn_testing::max_abs_diff(
            &to_vec(fresh.forward(TokenEncoderInput::new(tokens.clone())).logits),
            &to_vec(want.clone()),
        );
        assert!(diff > 1e-3, "a fresh model differs before loading");
        let restored = fresh.try_load_file(&model_path).expect("load record");
        assert_tensors_close(
            restored.forward(TokenEncoderInput::new(tokens)).logits,
            want,
            0.0,
            0.0,
            "restored model",
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn gradients_reach_every_part_and_dropout_acts_only_while_training() {
        for_each_device(|d| {
            let device = d.device.clone().autodiff();
            device.seed(46);
            let mut rng = SeededRng::new(46);
            let model = config(PositionalScheme::Learned { max_len: 6 })
                .with_dropout(0.3)
                .init(&device)
                .expect("valid");
            let tokens = random_tokens(&mut rng, 3, 5, &device);
            let logits = model.forward(TokenEncoderInput::new(tokens.clone())).logits;
            let grads = (logits.clone() * logits.clone()).sum().backward();
            let block = &model.encoder.layers[0];
            let grad = |p: Tensor<2>| p.grad(&grads).map(to_vec);
            let parts = [
                ("embedding", grad(model.embedding.embedding.weight.val())),
                (
                    "learned positions",
                    grad(
                        model
                            .embedding
                            .learned
                            .as_ref()
                            .expect("learned")
                            .weight
                            .val(),
                    ),
                ),
                ("first W_Q", grad(block.attention.w_q.weight.val())),
                ("first W_1", grad(block.feed_forward.expand.weight.val())),
                (
                    "first norm_ff gamma",
                    block.norm_ff.gamma.val().grad(&grads).map(to_vec),
                ),
                ("head", grad(model.head.weight.val())),
            ];
            for (what, grad) in parts {
                let grad = grad.unwrap_or_else(|| panic!("{what} has no gradient"));
                assert!(grad.iter().any(|g| *g != 0.0), "{what}: all-zero gradient");
            }
            // Training: two passes draw different dropout masks.
            let (diff, _) = attn_testing::max_abs_diff(
                &to_vec(model.forward(TokenEncoderInput::new(tokens.clone())).logits),
                &to_vec(logits),
            );
            assert!(
                diff > 1e-4,
                "dropout changes the output while training: {diff}"
            );
            // Validation: no dropout, the same output twice.
            let eval = model.valid();
            let tokens = Tensor::<2, Int>::from_data(tokens.to_data(), &d.device);
            assert_tensors_close(
                eval.forward(TokenEncoderInput::new(tokens.clone())).logits,
                eval.forward(TokenEncoderInput::new(tokens)).logits,
                0.0,
                0.0,
                "deterministic in validation",
            );
        });
    }

    #[test]
    fn config_errors_come_before_any_tensor() {
        let err = TokenEncoderConfig::new(
            0,
            N_CLASSES,
            D_MODEL,
            N_HEADS,
            N_LAYERS,
            D_FF,
            PositionalScheme::None,
        )
        .validate()
        .expect_err("vocab 0");
        assert!(matches!(err, ModelError::ZeroSize { what: "vocab" }));
        let err = TokenEncoderConfig::new(VOCAB, N_CLASSES, 10, 3, 1, 7, PositionalScheme::None)
            .validate()
            .expect_err("10 / 3");
        assert!(matches!(
            err,
            ModelError::HeadsDoNotDivide {
                d_model: 10,
                n_heads: 3
            }
        ));
        let err = config(PositionalScheme::None)
            .with_dropout(1.0)
            .validate()
            .expect_err("p = 1");
        assert!(matches!(err, ModelError::InvalidDropout { .. }));
    }
}
