//! Multi-head attention (Vaswani et al. 2017, §3.2.2): project, split into heads, attend,
//! merge, project back.
//!
//! ```text
//! MultiHead(Q, K, V) = Concat(head_1, …, head_h) · W_O
//! head_i = Attention(Q · W_Q_i, K · W_K_i, V · W_V_i)
//! ```
//!
//! Beyond the paper: cross-attention to a context of its own width (`d_context`),
//! grouped-query attention (`n_kv_heads < n_heads` key/value heads, each shared by a group of
//! query heads), heads of a width of their own (`head_dim`, so that `n_heads · d_head` may
//! differ from `d_model`), RMSNorm on each head's queries and keys (Qwen3), a bias switch per
//! projection, rotary or ALiBi positions applied inside attention, and dropout on the weights after softmax (as in tensor2tensor and PyTorch; the
//! paper only drops sub-layer outputs).

use attn_core::{
    AttentionOptions, CausalAlignment, Strategy, merge_heads, padding_mask, split_heads,
    try_scaled_dot_product_attention,
};
use attn_pos::{AlibiForm, PositionalScheme, RotaryEncoding, alibi_bias};
use burn::config::Config;
use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig, RmsNorm, RmsNormConfig};
use burn::tensor::{Bool, Device, Tensor};

use crate::error::{ModelError, check_dropout, check_epsilon, check_heads, check_nonzero};
use crate::project::project;

/// Configuration of [`MultiHeadAttention`].
///
/// ```
/// use attn_model::MultiHeadAttentionConfig;
///
/// let config = MultiHeadAttentionConfig::new(12, 3).with_n_kv_heads(Some(1));
/// assert_eq!(config.d_head(), 4);
/// assert!(config.validate().is_ok());
/// assert!(MultiHeadAttentionConfig::new(10, 3).validate().is_err());
/// ```
#[derive(Config, Debug)]
pub struct MultiHeadAttentionConfig {
    /// Width of the queries and of the output.
    pub d_model: usize,
    /// Number of query heads; `d_head = d_model / n_heads` unless `head_dim` says otherwise.
    pub n_heads: usize,
    /// Width of each head when it is not `d_model / n_heads` (Qwen3, Gemma): queries are
    /// projected to `n_heads · head_dim` and the output projection reads that many features.
    pub head_dim: Option<usize>,
    /// RMSNorm with this epsilon over each head's queries and keys, before positions are
    /// applied (Qwen3's `q_norm`, `k_norm`); `None` means none.
    pub qk_norm: Option<f64>,
    /// Number of key/value heads for grouped-query attention; `None` means `n_heads`
    /// (plain multi-head attention), `Some(1)` is multi-query attention.
    pub n_kv_heads: Option<usize>,
    /// Width of the context that keys and values are projected from in cross-attention;
    /// `None` means `d_model`.
    pub d_context: Option<usize>,
    /// Dropout on the attention weights after softmax, applied only while training.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Whether `W_Q` has a bias.
    #[config(default = true)]
    pub bias_q: bool,
    /// Whether `W_K` has a bias.
    #[config(default = true)]
    pub bias_k: bool,
    /// Whether `W_V` has a bias.
    #[config(default = true)]
    pub bias_v: bool,
    /// Whether `W_O` has a bias.
    #[config(default = true)]
    pub bias_o: bool,
    /// Positions applied inside attention: `Rotary` (rotates queries and keys) or `Alibi`
    /// (adds a distance bias to the scores). `None` when positions are added to the embeddings.
    #[config(default = "PositionalScheme::None")]
    pub pos: PositionalScheme,
    /// How attention is computed (see [`Strategy`]); all give the same numbers.
    #[config(default = "Strategy::Auto")]
    pub strategy: Strategy,
}

impl MultiHeadAttentionConfig {
    /// Width of one head: `head_dim`, else `d_model / n_heads` (0 when `n_heads` is 0).
    pub fn d_head(&self) -> usize {
        self.head_dim
            .unwrap_or_else(|| self.d_model.checked_div(self.n_heads).unwrap_or(0))
    }

    /// Number of key/value heads actually used.
    pub fn kv_heads(&self) -> usize {
        self.n_kv_heads.unwrap_or(self.n_heads)
    }

    /// Width of the context actually used.
    pub fn context_width(&self) -> usize {
        self.d_context.unwrap_or(self.d_model)
    }

    /// Checks every setting without making a tensor.
    ///
    /// # Errors
    /// [`ModelError::ZeroHeads`], [`ModelError::HeadsDoNotDivide`],
    /// [`ModelError::KvHeadsDoNotDivide`], [`ModelError::InvalidDropout`],
    /// [`ModelError::ZeroSize`] for a zero `d_model` or `d_context`,
    /// [`ModelError::SchemeNotInAttention`] for a sinusoidal or learned scheme, and
    /// [`ModelError::Positional`] when the rotary scheme cannot rotate `d_head`.
    pub fn validate(&self) -> Result<(), ModelError> {
        match self.head_dim {
            None => check_heads(self.d_model, self.n_heads)?,
            Some(head_dim) => {
                check_nonzero("n_heads", self.n_heads)?;
                check_nonzero("head_dim", head_dim)?;
                check_nonzero("d_model", self.d_model)?;
            }
        }
        if let Some(epsilon) = self.qk_norm {
            check_epsilon(epsilon)?;
        }
        let n_kv_heads = self.kv_heads();
        if n_kv_heads == 0 || !self.n_heads.is_multiple_of(n_kv_heads) {
            return Err(ModelError::KvHeadsDoNotDivide {
                n_heads: self.n_heads,
                n_kv_heads,
            });
        }
        check_nonzero("d_context", self.context_width())?;
        check_dropout(self.dropout)?;
        self.check_position()
    }

    /// Builds the module after [`validate`](Self::validate).
    ///
    /// # Errors
    /// Any error of [`validate`](Self::validate); nothing is allocated when it fails.
    pub fn init(&self, device: &Device) -> Result<MultiHeadAttention, ModelError> {
        self.validate()?;
        let d_head = self.d_head();
        let d_kv = self.kv_heads() * d_head;
        let linear = |d_input, d_output, bias| {
            LinearConfig::new(d_input, d_output)
                .with_bias(bias)
                .init(device)
        };
        let d_q = self.n_heads * d_head;
        let head_norm = |epsilon| {
            RmsNormConfig::new(d_head)
                .with_epsilon(epsilon)
                .init(device)
        };
        Ok(MultiHeadAttention {
            w_q: linear(self.d_model, d_q, self.bias_q),
            w_k: linear(self.context_width(), d_kv, self.bias_k),
            w_v: linear(self.context_width(), d_kv, self.bias_v),
            w_o: linear(d_q, self.d_model, self.bias_o),
            q_norm: self.qk_norm.map(head_norm),
            k_norm: self.qk_norm.map(head_norm),
            dropout: DropoutConfig::new(self.dropout).init(),
            n_heads: self.n_heads,
            n_kv_heads: self.kv_heads(),
            position: self.position()?,
            strategy: self.strategy,
        })
    }

    /// Checks the positional scheme as [`position`](Self::position) would build it, allocating
    /// nothing: a rotary scheme's frequencies number `d_head / 2`, and `d_head` may come from a
    /// file.
    fn check_position(&self) -> Result<(), ModelError> {
        match &self.pos {
            PositionalScheme::Rotary { theta, scaling, .. } => {
                Ok(RotaryEncoding::check(self.d_head(), *theta, *scaling)?)
            }
            _ => self.position().map(|_| ()),
        }
    }

    /// The positional scheme as attention applies it.
    fn position(&self) -> Result<AttentionPosition, ModelError> {
        match &self.pos {
            PositionalScheme::None => Ok(AttentionPosition::None),
            PositionalScheme::Rotary {
                theta,
                pairing,
                scaling,
            } => Ok(AttentionPosition::Rotary(RotaryEncoding::scaled(
                self.d_head(),
                *theta,
                *pairing,
                *scaling,
            )?)),
            PositionalScheme::Alibi { form } => Ok(AttentionPosition::Alibi(*form)),
            PositionalScheme::Sinusoidal { .. } => Err(ModelError::SchemeNotInAttention {
                scheme: "sinusoidal",
            }),
            PositionalScheme::Learned { .. } => {
                Err(ModelError::SchemeNotInAttention { scheme: "learned" })
            }
        }
    }
}

/// Positions as attention applies them: rotating queries and keys, or biasing the scores.
#[derive(Clone, Debug)]
enum AttentionPosition {
    None,
    Rotary(RotaryEncoding),
    Alibi(AlibiForm),
}

/// Which attention weights [`MultiHeadAttention`] returns besides its output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NeedWeights {
    /// None (the fused and chunked strategies can run).
    #[default]
    No,
    /// Every head's weights, `[batch, n_heads, seq_len_q, seq_len_kv]`.
    PerHead,
    /// The mean over heads, `[batch, 1, seq_len_q, seq_len_kv]` (PyTorch's
    /// `average_attn_weights=True`, with the head axis kept at size 1).
    Averaged,
}

/// What [`MultiHeadAttention`] attends: queries, an optional context, masks, causality.
///
/// Masks use burn's convention: `true` = this key is **not** attended.
#[derive(Clone, Debug)]
pub struct MhaInput {
    query: Tensor<3>,
    context: Option<Tensor<3>>,
    padding: Option<Tensor<2, Bool>>,
    mask: Option<Tensor<3, Bool>>,
    causal: Option<CausalAlignment>,
    need_weights: NeedWeights,
}

impl MhaInput {
    /// Self-attention: queries, keys and values all come from `x`.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq_len, d_model]`
    pub fn self_attention(x: Tensor<3>) -> Self {
        Self {
            query: x,
            context: None,
            padding: None,
            mask: None,
            causal: None,
            need_weights: NeedWeights::No,
        }
    }

    /// Cross-attention: queries from `query`, keys and values from `context`.
    ///
    /// # Shapes
    /// - `query`: `[batch, seq_len_q, d_model]`
    /// - `context`: `[batch, seq_len_kv, d_context]`
    pub fn cross_attention(query: Tensor<3>, context: Tensor<3>) -> Self {
        Self {
            context: Some(context),
            ..Self::self_attention(query)
        }
    }

    /// Masks padded keys (`true` = padding), PyTorch's `key_padding_mask`.
    ///
    /// # Shapes
    /// - `padding`: `[batch, seq_len_kv]`
    pub fn with_padding(mut self, padding: Tensor<2, Bool>) -> Self {
        self.padding = Some(padding);
        self
    }

    /// Masks individual query-key pairs (`true` = not attended).
    ///
    /// # Shapes
    /// - `mask`: `[batch, seq_len_q, seq_len_kv]`
    pub fn with_mask(mut self, mask: Tensor<3, Bool>) -> Self {
        self.mask = Some(mask);
        self
    }

    /// Makes attention causal; with [`CausalAlignment::TopLeft`] query `i` sees keys `0..=i`.
    pub fn with_causal(mut self, alignment: CausalAlignment) -> Self {
        self.causal = Some(alignment);
        self
    }

    /// Asks for the attention weights too.
    pub fn with_weights(mut self, need_weights: NeedWeights) -> Self {
        self.need_weights = need_weights;
        self
    }
}

/// What [`MultiHeadAttention`] returns.
#[derive(Clone, Debug)]
pub struct MhaOutput {
    /// `[batch, seq_len_q, d_model]`.
    pub output: Tensor<3>,
    /// `[batch, n_heads, seq_len_q, seq_len_kv]` for [`NeedWeights::PerHead`],
    /// `[batch, 1, seq_len_q, seq_len_kv]` for [`NeedWeights::Averaged`]: after dropout, i.e.
    /// the weights actually applied to the values.
    pub weights: Option<Tensor<4>>,
}

/// Multi-head attention with projections `W_Q`, `W_K`, `W_V`, `W_O`.
///
/// Built by [`MultiHeadAttentionConfig::init`]. Parameters are stored in burn's layout
/// (`Linear` weights `[d_input, d_output]`); see [`crate::pytorch`] to set them from PyTorch.
#[derive(Module, Debug)]
pub struct MultiHeadAttention {
    /// `W_Q`: `d_model → n_heads · d_head`.
    pub(crate) w_q: Linear,
    /// `W_K`: `d_context → n_kv_heads · d_head`.
    pub(crate) w_k: Linear,
    /// `W_V`: `d_context → n_kv_heads · d_head`.
    pub(crate) w_v: Linear,
    /// `W_O`: `n_heads · d_head → d_model`.
    pub(crate) w_o: Linear,
    /// RMSNorm over each head's queries (Qwen3's `q_norm`), `[d_head]`.
    pub(crate) q_norm: Option<RmsNorm>,
    /// RMSNorm over each head's keys (Qwen3's `k_norm`), `[d_head]`.
    pub(crate) k_norm: Option<RmsNorm>,
    /// Dropout on the weights after softmax; its probability is handed to `attn-core`, which
    /// applies it only on an autodiff device.
    dropout: Dropout,
    n_heads: usize,
    n_kv_heads: usize,
    #[module(skip)]
    position: AttentionPosition,
    #[module(skip)]
    strategy: Strategy,
}

impl MultiHeadAttention {
    /// Attends and projects back, checking shapes first.
    ///
    /// # Shapes
    /// - `input.query`: `[batch, seq_len_q, d_model]`
    /// - `input.context`: `[batch, seq_len_kv, d_context]` (self-attention: the query)
    /// - `input.padding`: `[batch, seq_len_kv]`; `input.mask`: `[batch, seq_len_q, seq_len_kv]`
    /// - returns: output `[batch, seq_len_q, d_model]`, weights
    ///   `[batch, n_heads or 1, seq_len_q, seq_len_kv]`
    ///
    /// # Errors
    /// [`ModelError::WidthMismatch`] or [`ModelError::ShapeMismatch`] naming the input whose shape
    /// does not fit, and [`ModelError::Attention`] when the strategy cannot honour the request
    /// (weights from [`Strategy::Fused`]).
    pub fn try_forward(&self, input: MhaInput) -> Result<MhaOutput, ModelError> {
        let [batch, seq_len_q, _] = input.query.dims();
        let context = input.context.clone().unwrap_or_else(|| input.query.clone());
        let [_, seq_len_kv, _] = context.dims();
        self.check_shapes(&input, &context)?;

        let q = self.queries(input.query.clone(), 0); // [batch, n_heads, seq_len_q, d_head]
        let (k, v) = self.keys_values(context, 0); // [batch, n_kv_heads, seq_len_kv, d_head]
        let options = self.options(&input, [batch, seq_len_q, seq_len_kv], &q.device());
        let attended = try_scaled_dot_product_attention(q, k, v, &options)?;
        let output = project(&self.w_o, merge_heads(attended.context)); // [batch, seq_len_q, d_model]

        let weights = attended.weights.map(|w| match input.need_weights {
            NeedWeights::Averaged => w.mean_dim(1), // [batch, 1, seq_len_q, seq_len_kv]
            _ => w,
        });
        Ok(MhaOutput { output, weights })
    }

    /// [`try_forward`](Self::try_forward) for inputs known to fit.
    ///
    /// # Shapes
    /// As [`try_forward`](Self::try_forward).
    ///
    /// # Panics
    /// On any [`ModelError`], with its message (which names the shapes).
    pub fn forward(&self, input: MhaInput) -> MhaOutput {
        self.try_forward(input)
            .unwrap_or_else(|e| panic!("multi-head attention: {e}"))
    }

    /// Number of query heads.
    pub fn n_heads(&self) -> usize {
        self.n_heads
    }

    /// Number of key/value heads.
    pub fn n_kv_heads(&self) -> usize {
        self.n_kv_heads
    }

    /// Width of the queries and the output.
    pub fn d_model(&self) -> usize {
        self.w_q.weight.shape().dims::<2>()[0]
    }

    /// Width of the context keys and values are projected from.
    pub fn d_context(&self) -> usize {
        self.w_k.weight.shape().dims::<2>()[0]
    }

    /// Queries split into heads, rotated as positions `offset..offset + seq_len` when the
    /// scheme is rotary: the first half of a cached step (see `crate::cache`).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq_len, d_model]`
    /// - returns: `[batch, n_heads, seq_len, d_head]`
    pub(crate) fn queries(&self, x: Tensor<3>, offset: usize) -> Tensor<4> {
        self.queries_from(project(&self.w_q, x), offset)
    }

    /// Keys and values split into heads, keys rotated as positions `offset..offset + seq_len`
    /// when the scheme is rotary: what a key/value cache stores.
    ///
    /// # Shapes
    /// - `context`: `[batch, seq_len, d_context]`
    /// - returns: two `[batch, n_kv_heads, seq_len, d_head]`
    pub(crate) fn keys_values(&self, context: Tensor<3>, offset: usize) -> (Tensor<4>, Tensor<4>) {
        let k = project(&self.w_k, context.clone()); // [batch, seq_len, n_kv_heads · d_head]
        let v = project(&self.w_v, context); // [batch, seq_len, n_kv_heads · d_head]
        self.keys_values_from(k, v, offset)
    }

    /// [`queries`](Self::queries) and [`keys_values`](Self::keys_values) of one `x` (a
    /// self-attention step), the three projections made together ([`crate::ops::linears`]:
    /// one split among the threads for a decoding step's row).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq_len, d_model]`
    /// - returns: `[batch, n_heads, seq_len, d_head]` and two `[batch, n_kv_heads, seq_len, d_head]`
    pub(crate) fn queries_keys_values(
        &self,
        x: Tensor<3>,
        offset: usize,
    ) -> (Tensor<4>, Tensor<4>, Tensor<4>) {
        let mut qkv = crate::project::project_many(&[&self.w_q, &self.w_k, &self.w_v], x);
        let (v, k, q) = (qkv.pop(), qkv.pop(), qkv.pop());
        let (Some(q), Some(k), Some(v)) = (q, k, v) else {
            unreachable!("three projections give three outputs")
        };
        let (k, v) = self.keys_values_from(k, v, offset);
        (self.queries_from(q, offset), k, v)
    }

    /// Projected queries `[batch, seq_len, n_heads · d_head]` split into heads, normed and
    /// rotated.
    fn queries_from(&self, q: Tensor<3>, offset: usize) -> Tensor<4> {
        let q = split_heads(q, self.n_heads); // [batch, n_heads, seq_len, d_head]
        let q = match &self.q_norm {
            Some(norm) => crate::ops::rms_norm(q, norm.gamma.val(), norm.epsilon),
            None => q,
        };
        match &self.position {
            AttentionPosition::Rotary(rotary) => crate::ops::rotary(rotary, q, offset),
            _ => q,
        }
    }

    /// Projected keys and values `[batch, seq_len, n_kv_heads · d_head]` split into heads, the
    /// keys normed and rotated.
    fn keys_values_from(
        &self,
        k: Tensor<3>,
        v: Tensor<3>,
        offset: usize,
    ) -> (Tensor<4>, Tensor<4>) {
        let k = split_heads(k, self.n_kv_heads); // [batch, n_kv_heads, seq_len, d_head]
        let v = split_heads(v, self.n_kv_heads); // [batch, n_kv_heads, seq_len, d_head]
        let k = match &self.k_norm {
            Some(norm) => crate::ops::rms_norm(k, norm.gamma.val(), norm.epsilon),
            None => k,
        };
        let k = match &self.position {
            AttentionPosition::Rotary(rotary) => crate::ops::rotary(rotary, k, offset),
            _ => k,
        };
        (k, v)
    }

    /// The ALiBi form when the scheme biases the scores.
    pub(crate) fn alibi_form(&self) -> Option<AlibiForm> {
        match self.position {
            AttentionPosition::Alibi(form) => Some(form),
            _ => None,
        }
    }

    /// Width of one head.
    pub(crate) fn d_head(&self) -> usize {
        self.w_q.weight.shape().dims::<2>()[1] / self.n_heads
    }

    /// Attention over keys and values already projected (and rotated), then `W_O`: the second
    /// half of a cached step. The caller supplies the mask and the ALiBi bias, since only it
    /// knows where the cached keys sit.
    ///
    /// # Shapes
    /// - `q`: `[batch, n_heads, seq_len_q, d_head]`
    /// - `k`, `v`: `[batch, n_kv_heads, seq_len_kv, d_head]`
    /// - `mask`, `bias`: broadcast to `[batch, n_heads, seq_len_q, seq_len_kv]`
    /// - returns: `[batch, seq_len_q, d_model]`
    pub(crate) fn try_attend(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        mask: Option<Tensor<4, Bool>>,
        causal: Option<CausalAlignment>,
        bias: Option<Tensor<4>>,
    ) -> Result<Tensor<3>, ModelError> {
        let training = self.dropout.training.is_enabled();
        let mut options = AttentionOptions::new()
            .with_dropout(if training { self.dropout.prob } else { 0.0 })
            .with_strategy(self.strategy);
        if let Some(mask) = mask {
            options = options.with_mask(mask);
        }
        if let Some(alignment) = causal {
            options = options.with_causal(alignment);
        }
        if let Some(bias) = bias {
            options = options.with_bias(bias);
        }
        let attended = try_scaled_dot_product_attention(q, k, v, &options)?;
        Ok(project(&self.w_o, merge_heads(attended.context))) // [batch, seq_len_q, d_model]
    }

    /// Mask, ALiBi bias, causality, dropout, weights and strategy for `attn-core`.
    fn options(
        &self,
        input: &MhaInput,
        [batch, seq_len_q, seq_len_kv]: [usize; 3],
        device: &Device,
    ) -> AttentionOptions {
        let training = self.dropout.training.is_enabled();
        let mut options = AttentionOptions::new()
            .with_dropout(if training { self.dropout.prob } else { 0.0 })
            .with_need_weights(input.need_weights != NeedWeights::No)
            .with_strategy(self.strategy);
        if let Some(mask) = combine_masks(
            input.padding.clone(),
            input.mask.clone(),
            [batch, seq_len_q, seq_len_kv],
        ) {
            options = options.with_mask(mask);
        }
        if let Some(alignment) = input.causal {
            options = options.with_causal(alignment);
        }
        if let AttentionPosition::Alibi(form) = self.position {
            // ALiBi (Press et al. 2022): -m_h · distance added to the scaled scores.
            let bias =
                alibi_bias(self.n_heads, seq_len_q, seq_len_kv, form, device).unsqueeze_dim::<4>(0); // [1, n_heads, seq_len_q, seq_len_kv]
            options = options.with_bias(bias);
        }
        options
    }

    /// Checks widths and mask shapes against the module and each other.
    fn check_shapes(&self, input: &MhaInput, context: &Tensor<3>) -> Result<(), ModelError> {
        let [batch, seq_len_q, d_model] = input.query.dims();
        let [batch_kv, seq_len_kv, d_context] = context.dims();
        if d_model != self.d_model() {
            return Err(ModelError::WidthMismatch {
                what: "query",
                expected: self.d_model(),
                got: d_model,
            });
        }
        if d_context != self.d_context() {
            let what = if input.context.is_some() {
                "context"
            } else {
                "self-attention input (keys and values are projected from d_context)"
            };
            return Err(ModelError::WidthMismatch {
                what,
                expected: self.d_context(),
                got: d_context,
            });
        }
        check_shape(
            "context",
            &[batch, seq_len_kv, d_context],
            &[batch_kv, seq_len_kv, d_context],
        )?;
        if let Some(padding) = &input.padding {
            check_shape("padding mask", &[batch, seq_len_kv], &padding.dims())?;
        }
        if let Some(mask) = &input.mask {
            check_shape(
                "attention mask",
                &[batch, seq_len_q, seq_len_kv],
                &mask.dims(),
            )?;
        }
        Ok(())
    }
}

/// One mask from a key padding mask and a per-query mask (`true` = not attended).
///
/// # Shapes
/// - `padding`: `[batch, seq_len_kv]`; `mask`: `[batch, seq_len_q, seq_len_kv]`
/// - returns: `[batch, 1, 1 or seq_len_q, seq_len_kv]`, broadcasting over heads
fn combine_masks(
    padding: Option<Tensor<2, Bool>>,
    mask: Option<Tensor<3, Bool>>,
    [batch, seq_len_q, seq_len_kv]: [usize; 3],
) -> Option<Tensor<4, Bool>> {
    let padding = padding.map(padding_mask); // [batch, 1, 1, seq_len_kv]
    let mask = mask.map(|m| m.unsqueeze_dim::<4>(1)); // [batch, 1, seq_len_q, seq_len_kv]
    match (padding, mask) {
        (Some(p), Some(m)) => Some(p.expand([batch, 1, seq_len_q, seq_len_kv]).bool_or(m)),
        (p, None) => p,
        (None, m) => m,
    }
}

/// Errors with both shapes when `got` differs from `expected`.
pub(crate) fn check_shape(
    what: &'static str,
    expected: &[usize],
    got: &[usize],
) -> Result<(), ModelError> {
    if expected == got {
        Ok(())
    } else {
        Err(ModelError::ShapeMismatch {
            what,
            expected: expected.to_vec(),
            got: got.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_core::{AttentionError, repeat_kv_heads};
    use attn_testing::{
        ATOL, RTOL, SeededRng, assert_close_slices, assert_tensors_close, for_each_device, to_vec,
    };
    use burn::module::Param;
    use burn::tensor::TensorData;

    const BATCH: usize = 3;
    const SEQ_LEN: usize = 5;
    const D_MODEL: usize = 12;
    const N_HEADS: usize = 3;

    fn self_attn(config: &MultiHeadAttentionConfig, x: Tensor<3>) -> MhaOutput {
        let mha = config.init(&x.device()).expect("valid config");
        mha.forward(MhaInput::self_attention(x).with_weights(NeedWeights::PerHead))
    }

    #[test]
    fn config_errors_name_the_numbers_before_any_tensor_is_made() {
        let err = MultiHeadAttentionConfig::new(10, 3)
            .validate()
            .expect_err("10 / 3");
        assert!(matches!(
            err,
            ModelError::HeadsDoNotDivide {
                d_model: 10,
                n_heads: 3
            }
        ));
        let err = MultiHeadAttentionConfig::new(12, 0)
            .validate()
            .expect_err("no heads");
        assert!(matches!(err, ModelError::ZeroHeads));
        let err = MultiHeadAttentionConfig::new(12, 3)
            .with_dropout(1.0)
            .validate()
            .expect_err("p = 1");
        assert!(matches!(err, ModelError::InvalidDropout { dropout } if dropout == 1.0));
        let err = MultiHeadAttentionConfig::new(12, 3)
            .with_dropout(-0.5)
            .validate()
            .expect_err("p < 0");
        assert!(matches!(err, ModelError::InvalidDropout { .. }));
        let err = MultiHeadAttentionConfig::new(12, 6)
            .with_n_kv_heads(Some(4))
            .validate()
            .expect_err("4 does not divide 6");
        assert!(matches!(
            err,
            ModelError::KvHeadsDoNotDivide {
                n_heads: 6,
                n_kv_heads: 4
            }
        ));
        let err = MultiHeadAttentionConfig::new(12, 3)
            .with_pos(PositionalScheme::Sinusoidal { base: 10_000.0 })
            .validate()
            .expect_err("sinusoidal is added to embeddings");
        assert!(matches!(
            err,
            ModelError::SchemeNotInAttention {
                scheme: "sinusoidal"
            }
        ));
    }

    #[test]
    fn config_round_trips_through_json() {
        let config = MultiHeadAttentionConfig::new(12, 3)
            .with_n_kv_heads(Some(1))
            .with_d_context(Some(7))
            .with_bias_k(false)
            .with_pos(PositionalScheme::Alibi {
                form: AlibiForm::Symmetric,
            })
            .with_strategy(Strategy::Chunked { block: 2 });
        let json = burn::config::config_to_json(&config);
        let back: MultiHeadAttentionConfig = serde_json::from_str(&json).expect("parses back");
        assert_eq!(burn::config::config_to_json(&back), json);
        assert_eq!(back.kv_heads(), 1);
    }

    #[test]
    fn shapes_of_self_and_cross_attention_with_their_own_widths() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(11);
            let config = MultiHeadAttentionConfig::new(D_MODEL, N_HEADS).with_d_context(Some(7));
            let mha = config.init(&d.device).expect("valid");
            let query = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
            let context = rng.tensor([BATCH, 4, 7], &d.device);
            let out = mha.forward(
                MhaInput::cross_attention(query.clone(), context)
                    .with_weights(NeedWeights::PerHead),
            );
            assert_eq!(out.output.dims(), [BATCH, SEQ_LEN, D_MODEL]);
            let weights = out.weights.expect("asked for weights");
            assert_eq!(weights.dims(), [BATCH, N_HEADS, SEQ_LEN, 4]);
            let sums = to_vec(weights.sum_dim(3));
            assert_close_slices(&sums, &vec![1.0; sums.len()], 1e-5, 0.0, "rows sum to 1");

            // Self-attention on a module whose context width differs from d_model is an error.
            let err = mha
                .try_forward(MhaInput::self_attention(query))
                .expect_err("width 12 != 7");
            assert!(
                matches!(
                    err,
                    ModelError::WidthMismatch {
                        expected: 7,
                        got: 12,
                        ..
                    }
                ),
                "{err}"
            );
        });
    }

    #[test]
    fn averaged_weights_are_the_mean_of_the_heads() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(12);
            let mha = MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
                .init(&d.device)
                .expect("valid");
            let x = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
            let per_head = mha
                .forward(MhaInput::self_attention(x.clone()).with_weights(NeedWeights::PerHead))
                .weights
                .expect("per head");
            let averaged = mha
                .forward(MhaInput::self_attention(x).with_weights(NeedWeights::Averaged))
                .weights
                .expect("averaged");
            assert_eq!(averaged.dims(), [BATCH, 1, SEQ_LEN, SEQ_LEN]);
            assert_tensors_close(averaged, per_head.mean_dim(1), ATOL, RTOL, "head average");
        });
    }

    #[test]
    fn masks_of_the_wrong_shape_are_errors_naming_both_shapes() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(13);
            let mha = MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
                .init(&d.device)
                .expect("valid");
            let x = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
            let padding = rng.bool_tensor([BATCH, SEQ_LEN + 1], 0.3, &d.device);
            let err = mha
                .try_forward(MhaInput::self_attention(x.clone()).with_padding(padding))
                .expect_err("padding too long");
            assert_eq!(
                err.to_string(),
                "padding mask has shape [3, 6], expected [3, 5]",
            );
            let mask = rng.bool_tensor([BATCH, SEQ_LEN, SEQ_LEN - 1], 0.3, &d.device);
            let err = mha
                .try_forward(MhaInput::self_attention(x).with_mask(mask))
                .expect_err("mask too short");
            assert!(
                matches!(
                    err,
                    ModelError::ShapeMismatch {
                        what: "attention mask",
                        ..
                    }
                ),
                "{err}"
            );
        });
    }

    #[test]
    fn masked_keys_get_zero_weight_from_padding_and_attention_masks_together() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(14);
            let mha = MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
                .init(&d.device)
                .expect("valid");
            let x = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
            // Key 0 stays open everywhere so that no row is fully masked.
            let mut coin = |i: usize| !i.is_multiple_of(SEQ_LEN) && rng.bernoulli(0.4);
            let padding: Vec<bool> = (0..BATCH * SEQ_LEN).map(&mut coin).collect();
            let mask: Vec<bool> = (0..BATCH * SEQ_LEN * SEQ_LEN).map(&mut coin).collect();
            let padding =
                Tensor::<2, Bool>::from_data(TensorData::new(padding, [BATCH, SEQ_LEN]), &d.device);
            let mask = Tensor::<3, Bool>::from_data(
                TensorData::new(mask, [BATCH, SEQ_LEN, SEQ_LEN]),
                &d.device,
            );
            let weights = mha
                .forward(
                    MhaInput::self_attention(x)
                        .with_padding(padding.clone())
                        .with_mask(mask.clone())
                        .with_weights(NeedWeights::PerHead),
                )
                .weights
                .expect("weights");
            let masked = combine_masks(Some(padding), Some(mask), [BATCH, SEQ_LEN, SEQ_LEN])
                .expect("two masks")
                .expand([BATCH, N_HEADS, SEQ_LEN, SEQ_LEN]);
            let masked: Vec<bool> = to_vec(masked.float()).iter().map(|m| *m != 0.0).collect();
            let weights = to_vec(weights);
            assert!(masked.iter().any(|m| *m), "the seed masks something");
            for (i, (w, m)) in weights.iter().zip(&masked).enumerate() {
                if *m {
                    assert_eq!(*w, 0.0, "masked key at flat index {i} has weight {w}");
                }
            }
        });
    }

    #[test]
    fn grouped_query_with_n_kv_heads_equal_n_heads_is_plain_multi_head() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(15);
            let x = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
            let plain = MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
                .init(&d.device)
                .expect("valid");
            let grouped = MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
                .with_n_kv_heads(Some(N_HEADS))
                .init(&d.device)
                .expect("valid")
                .load_record(plain.clone().into_record());
            let a = plain
                .forward(MhaInput::self_attention(x.clone()).with_weights(NeedWeights::PerHead));
            let b = grouped.forward(MhaInput::self_attention(x).with_weights(NeedWeights::PerHead));
            assert_tensors_close(a.output, b.output, ATOL, RTOL, "output");
            assert_tensors_close(
                a.weights.expect("weights"),
                b.weights.expect("weights"),
                ATOL,
                RTOL,
                "weights",
            );
        });
    }

    #[test]
    fn grouped_query_equals_multi_head_with_repeated_key_value_projections() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(16);
            let (n_heads, n_kv_heads, d_head) = (6, 2, 2);
            let d_model = n_heads * d_head;
            let x = rng.tensor([BATCH, SEQ_LEN, d_model], &d.device);
            let grouped = MultiHeadAttentionConfig::new(d_model, n_heads)
                .with_n_kv_heads(Some(n_kv_heads))
                .init(&d.device)
                .expect("valid");
            // Widen W_K and W_V: kv head h / 3 becomes query head h's key/value head.
            let widen = |w: Tensor<2>| -> Tensor<2> {
                let [d_in, _] = w.dims();
                let heads = w.reshape([d_in, n_kv_heads, d_head]).swap_dims(0, 1); // [n_kv_heads, d_in, d_head]
                let heads = heads.unsqueeze_dim::<4>(0); // [1, n_kv_heads, d_in, d_head]
                repeat_kv_heads(heads, n_heads) // [1, n_heads, d_in, d_head]
                    .squeeze_dim::<3>(0) // [n_heads, d_in, d_head]
                    .swap_dims(0, 1) // [d_in, n_heads, d_head]
                    .reshape([d_in, d_model]) // [d_in, d_model]
            };
            let widen_bias =
                |b: Tensor<1>| -> Tensor<1> { widen(b.unsqueeze_dim::<2>(0)).squeeze_dim::<1>(0) };
            let mut plain = MultiHeadAttentionConfig::new(d_model, n_heads)
                .init(&d.device)
                .expect("valid");
            plain.w_q = grouped.w_q.clone();
            plain.w_o = grouped.w_o.clone();
            for (dst, src) in [
                (&mut plain.w_k, &grouped.w_k),
                (&mut plain.w_v, &grouped.w_v),
            ] {
                dst.weight = Param::from_tensor(widen(src.weight.val()));
                dst.bias = src
                    .bias
                    .as_ref()
                    .map(|b| Param::from_tensor(widen_bias(b.val())));
            }
            let a = grouped.forward(MhaInput::self_attention(x.clone()));
            let b = plain.forward(MhaInput::self_attention(x));
            assert_tensors_close(a.output, b.output, ATOL, RTOL, "grouped vs repeated");
        });
    }

    #[test]
    fn every_strategy_gives_the_same_output() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(17);
            let x = rng.tensor([BATCH, SEQ_LEN, D_MODEL], &d.device);
            let padding = attn_core::padding_mask_from_lengths(&[5, 3, 1], SEQ_LEN, &d.device)
                .expect("lengths fit");
            let explicit = MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
                .with_strategy(Strategy::Explicit)
                .init(&d.device)
                .expect("valid");
            let input = MhaInput::self_attention(x)
                .with_padding(padding)
                .with_causal(CausalAlignment::TopLeft);
            let want = explicit.forward(input.clone()).output;
            for strategy in [
                Strategy::Auto,
                Strategy::Chunked { block: 2 },
                Strategy::Fused,
            ] {
                let mut other = explicit.clone();
                other.strategy = strategy;
                let got = other.forward(input.clone()).output;
                assert_tensors_close(got, want.clone(), 1e-5, 1e-4, strategy.name());
            }
            // A forced fused strategy cannot return weights: the error says so.
            let mut fused = explicit.clone();
            fused.strategy = Strategy::Fused;
            let err = fused
                .try_forward(input.with_weights(NeedWeights::PerHead))
                .expect_err("fused has no weights");
            assert!(matches!(
                err,
                ModelError::Attention(AttentionError::StrategyCannot { .. })
            ));
        });
    }

    #[test]
    fn no_bias_switches_remove_the_bias_parameters() {
        let device = Device::flex();
        let mha = MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
            .with_bias_q(false)
            .with_bias_v(false)
            .init(&device)
            .expect("valid");
        assert!(mha.w_q.bias.is_none() && mha.w_v.bias.is_none());
        assert!(mha.w_k.bias.is_some() && mha.w_o.bias.is_some());
        assert_eq!(mha.num_params(), 4 * D_MODEL * D_MODEL + 2 * D_MODEL);
    }

    #[test]
    fn rotary_makes_scores_depend_on_relative_position_only() {
        for_each_device(|d| {
            // With identical tokens, rotary attention weights depend only on i - j: shifting
            // both query and key by one position gives the same weight.
            let mut rng = SeededRng::new(18);
            let token = rng.tensor([1, 1, D_MODEL], &d.device);
            let x = token.expand([1, SEQ_LEN, D_MODEL]);
            let config = MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
                .with_pos(PositionalScheme::rotary_half_split());
            let weights = to_vec(self_attn(&config, x.clone()).weights.expect("weights"));
            let at = |h: usize, i: usize, j: usize| weights[(h * SEQ_LEN + i) * SEQ_LEN + j];
            for h in 0..N_HEADS {
                // Row 4 (last) sees keys 3 and 4; row 3 must weigh keys 2 and 3 in the same ratio
                // before normalisation, so compare score differences via log-ratios.
                let r_last = (at(h, 4, 3) / at(h, 4, 4)).ln();
                let r_prev = (at(h, 3, 2) / at(h, 3, 3)).ln();
                assert!(
                    (r_last - r_prev).abs() < 1e-3,
                    "head {h}: {r_last} vs {r_prev}"
                );
            }
            // Without positions every key gets the same weight.
            let plain = to_vec(
                self_attn(&MultiHeadAttentionConfig::new(D_MODEL, N_HEADS), x)
                    .weights
                    .expect("weights"),
            );
            assert_close_slices(
                &plain,
                &vec![1.0 / SEQ_LEN as f32; plain.len()],
                1e-5,
                0.0,
                "uniform",
            );
        });
    }

    #[test]
    fn alibi_prefers_nearby_keys_for_identical_tokens() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(19);
            let x = rng
                .tensor([1, 1, D_MODEL], &d.device)
                .expand([1, SEQ_LEN, D_MODEL]);
            let config =
                MultiHeadAttentionConfig::new(D_MODEL, N_HEADS).with_pos(PositionalScheme::Alibi {
                    form: AlibiForm::Symmetric,
                });
            let weights = to_vec(self_attn(&config, x).weights.expect("weights"));
            for h in 0..N_HEADS {
                let row = &weights[(h * SEQ_LEN + 2) * SEQ_LEN..(h * SEQ_LEN + 3) * SEQ_LEN];
                assert!(row[2] > row[1] && row[1] > row[0], "head {h}: {row:?}");
                assert!((row[1] - row[3]).abs() < 1e-6, "symmetric: {row:?}");
            }
        });
    }
}
