//! `sdpa.json`: scaled dot-product attention `[batch, n_heads, seq_len, d_head]`, with masks,
//! causality, bias, a custom scale and grouped-query attention, the weights of every case and
//! the gradients of some.

use serde::Deserialize;

use crate::{RefTensor, ReferenceFile};

/// The whole file.
#[derive(Clone, Debug, Deserialize)]
pub struct SdpaFile {
    /// Every case, in file order.
    pub cases: Vec<SdpaCase>,
}

impl ReferenceFile for SdpaFile {
    const PATH: &'static str = "sdpa.json";
}

/// One attention problem and its answer, `softmax(q·kᵀ·scale + bias, masked → −∞)·v`.
#[derive(Clone, Debug, Deserialize)]
pub struct SdpaCase {
    /// What the case pins down (`plain`, `causal_top_left`, ...).
    pub name: String,
    /// Queries `[batch, n_heads, seq_len_q, d_head]`.
    pub q: RefTensor,
    /// Keys `[batch, n_kv_heads, seq_len_kv, d_head]`.
    pub k: RefTensor,
    /// Values `[batch, n_kv_heads, seq_len_kv, d_value]`.
    pub v: RefTensor,
    /// Context `[batch, n_heads, seq_len_q, d_value]`.
    pub out: RefTensor,
    /// Weights after softmax `[batch, n_heads, seq_len_q, seq_len_kv]`.
    pub weights: Option<RefTensor>,
    /// `true` (1) where a key is not attended, broadcast against the weights.
    pub masked: Option<RefTensor>,
    /// Added to the scaled scores, broadcast against the weights.
    pub bias: Option<RefTensor>,
    /// Causal masking, and how it aligns when `seq_len_q != seq_len_kv`.
    pub causal: Option<Causal>,
    /// The factor on `q·kᵀ`; `1/√d_head` when absent.
    pub scale: Option<f64>,
    /// The upstream gradient of `out`: the gradients are those of `sum(out * grad_out)`.
    pub grad_out: Option<RefTensor>,
    /// Gradient with respect to `q`.
    pub grad_q: Option<RefTensor>,
    /// Gradient with respect to `k`.
    pub grad_k: Option<RefTensor>,
    /// Gradient with respect to `v`.
    pub grad_v: Option<RefTensor>,
}

/// Which keys a causal query sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Causal {
    /// Query `i` sees keys `0..=i`.
    TopLeft,
    /// The last query sees every key: query `i` sees keys `0..=i + seq_len_kv − seq_len_q`.
    BottomRight,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_alignment_reads_from_its_name_and_refuses_others() {
        let read = |s: &str| serde_json::from_str::<Causal>(s);
        assert_eq!(read("\"top_left\"").expect("known"), Causal::TopLeft);
        assert_eq!(
            read("\"bottom_right\"").expect("known"),
            Causal::BottomRight
        );
        let err = read("\"diagonal\"").expect_err("unknown");
        assert!(err.to_string().contains("top_left"), "{err}");
    }
}
