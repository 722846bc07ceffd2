//! Boolean masks. Convention everywhere: `true` = this key is **masked** (not attended),
//! as in burn; PyTorch's boolean `attn_mask` means the opposite ("keep") and converts with
//! [`keep_to_mask`].

use burn::tensor::{Bool, Device, Tensor, TensorData};

use crate::{AttentionError, CausalAlignment};

/// The causal mask for `seq_len_q` queries and `seq_len_kv` keys: `true` above the diagonal.
///
/// With [`CausalAlignment::TopLeft`] query `i` sees keys `0..=i`; with
/// [`CausalAlignment::BottomRight`] it sees keys `0..=i + seq_len_kv - seq_len_q`.
///
/// # Shapes
/// - returns: `[seq_len_q, seq_len_kv]`
///
/// ```
/// use attn_core::{causal_mask, CausalAlignment};
/// let m = causal_mask(2, 3, CausalAlignment::TopLeft, &burn::tensor::Device::flex());
/// assert_eq!(m.into_data().try_to_vec::<bool>().unwrap(), [false, true, true, false, false, true]);
/// ```
pub fn causal_mask(
    seq_len_q: usize,
    seq_len_kv: usize,
    alignment: CausalAlignment,
    device: &Device,
) -> Tensor<2, Bool> {
    causal_block(
        seq_len_q,
        0,
        seq_len_kv,
        causal_offset(alignment, seq_len_q, seq_len_kv),
        device,
    )
}

/// How many keys past its own index the last-but-diagonal key of each query is.
pub(crate) fn causal_offset(
    alignment: CausalAlignment,
    seq_len_q: usize,
    seq_len_kv: usize,
) -> i64 {
    match alignment {
        CausalAlignment::TopLeft => 0,
        CausalAlignment::BottomRight => seq_len_kv as i64 - seq_len_q as i64,
    }
}

/// Causal mask restricted to keys `kv_start..kv_start + len`: key `j` is masked for query `i`
/// when `j > i + offset`.
pub(crate) fn causal_block(
    seq_len_q: usize,
    kv_start: usize,
    len: usize,
    offset: i64,
    device: &Device,
) -> Tensor<2, Bool> {
    // tril_mask is `false` on and below the shifted diagonal, `true` above it.
    Tensor::<2, Bool>::tril_mask([seq_len_q, len], offset - kv_start as i64, device)
}

/// The sliding-window mask of `seq_len` queries over the same `seq_len` keys: `true` where key
/// `j` is `window` or more positions before query `i` (`j + window <= i`). Together with
/// causality, each query sees itself and the `window − 1` tokens before it (Child et al. 2019,
/// Mistral's sliding window); keys after the query are left to the causal mask.
///
/// # Shapes
/// - returns: `[seq_len, seq_len]`
///
/// ```
/// use attn_core::window_mask;
/// let m = window_mask(3, 2, &burn::tensor::Device::flex());
/// assert_eq!(
///     m.into_data().try_to_vec::<bool>().unwrap(),
///     [false, false, false, false, false, false, true, false, false],
/// );
/// ```
pub fn window_mask(seq_len: usize, window: usize, device: &Device) -> Tensor<2, Bool> {
    let data: Vec<bool> = (0..seq_len)
        .flat_map(|i| (0..seq_len).map(move |j| j + window <= i))
        .collect();
    Tensor::from_data(TensorData::new(data, [seq_len, seq_len]), device)
}

/// Marks padding: `true` at positions `length..seq_len` of each sequence.
///
/// # Shapes
/// - returns: `[batch, seq_len]` with `batch = lengths.len()`
///
/// # Errors
/// [`AttentionError::LengthTooLong`] when a length exceeds `seq_len`.
pub fn padding_mask_from_lengths(
    lengths: &[usize],
    seq_len: usize,
    device: &Device,
) -> Result<Tensor<2, Bool>, AttentionError> {
    if let Some((index, &length)) = lengths.iter().enumerate().find(|(_, l)| **l > seq_len) {
        return Err(AttentionError::LengthTooLong {
            index,
            length,
            seq_len,
        });
    }
    let data: Vec<bool> = lengths
        .iter()
        .flat_map(|&length| (0..seq_len).map(move |pos| pos >= length))
        .collect();
    Ok(Tensor::from_data(
        TensorData::new(data, [lengths.len(), seq_len]),
        device,
    ))
}

/// Turns a key padding mask into an attention mask that broadcasts over heads and queries.
///
/// # Shapes
/// - `padding`: `[batch, seq_len_kv]`, `true` = padding
/// - returns: `[batch, 1, 1, seq_len_kv]`
pub fn padding_mask(padding: Tensor<2, Bool>) -> Tensor<4, Bool> {
    let [batch, seq_len_kv] = padding.dims();
    padding.reshape([batch, 1, 1, seq_len_kv]) // [batch, 1, 1, seq_len_kv]
}

/// Converts a keep-mask (`true` = attend, PyTorch's boolean `attn_mask`) into a mask
/// (`true` = do not attend).
pub fn keep_to_mask<const D: usize>(keep: Tensor<D, Bool>) -> Tensor<D, Bool> {
    keep.bool_not()
}

/// Converts a mask (`true` = do not attend) into a keep-mask (`true` = attend).
pub fn mask_to_keep<const D: usize>(mask: Tensor<D, Bool>) -> Tensor<D, Bool> {
    mask.bool_not()
}
