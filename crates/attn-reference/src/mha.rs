//! `mha.json`: `torch.nn.MultiheadAttention(batch_first=True)`, self- and cross-attention with
//! a key padding mask, and the four projections it was run with.

use serde::Deserialize;

use crate::{RefTensor, ReferenceFile};

/// The whole file.
#[derive(Clone, Debug, Deserialize)]
pub struct MhaFile {
    /// Every case, in file order.
    pub cases: Vec<MhaCase>,
}

impl ReferenceFile for MhaFile {
    const PATH: &'static str = "mha.json";
}

/// One multi-head attention layer, its inputs and its outputs.
#[derive(Clone, Debug, Deserialize)]
pub struct MhaCase {
    /// `self_attention` or `cross_attention`.
    pub name: String,
    /// Width of the queries and of the output.
    pub d_model: usize,
    /// Query heads.
    pub n_heads: usize,
    /// The projections.
    #[serde(flatten)]
    pub attention: AttentionWeights,
    /// Queries `[batch, seq_len_q, d_model]`.
    pub query: RefTensor,
    /// Keys and values come from here, `[batch, seq_len_kv, d_context]`; self-attention cases
    /// store the query again.
    pub context: RefTensor,
    /// `true` where a key is padding, `[batch, seq_len_kv]`.
    pub key_padding_masked: RefTensor,
    /// Output `[batch, seq_len_q, d_model]`.
    pub out: RefTensor,
    /// Weights of each head `[batch, n_heads, seq_len_q, seq_len_kv]`.
    pub weights_per_head: Option<RefTensor>,
}

impl MhaCase {
    /// Whether keys and values come from the query itself (the `self_*` cases).
    pub fn is_self_attention(&self) -> bool {
        self.name.starts_with("self")
    }
}

/// The four projections of `nn.MultiheadAttention`, in PyTorch's `Linear` layout: weights
/// `[out, in]` (`y = x·Wᵀ + b`), biases `[out]`. Transpose for burn's `[in, out]`.
#[derive(Clone, Debug, Deserialize)]
pub struct AttentionWeights {
    /// Query projection `[d_model, d_model]`.
    pub w_q: RefTensor,
    /// Query bias `[d_model]`.
    pub b_q: RefTensor,
    /// Key projection `[d_model, d_context]`.
    pub w_k: RefTensor,
    /// Key bias `[d_model]`.
    pub b_k: RefTensor,
    /// Value projection `[d_model, d_context]`.
    pub w_v: RefTensor,
    /// Value bias `[d_model]`.
    pub b_v: RefTensor,
    /// Output projection `[d_model, d_model]`.
    pub w_o: RefTensor,
    /// Output bias `[d_model]`.
    pub b_o: RefTensor,
}

impl AttentionWeights {
    /// The width keys and values are projected from, read off the key projection.
    pub fn d_context(&self) -> Option<usize> {
        match self.w_k.shape[..] {
            [_, d_context] => Some(d_context),
            _ => None,
        }
    }
}
