//! The key/value cache of a decoder: what each layer's self-attention has already computed
//! for the tokens seen so far, so that a decoding step projects only its new tokens.
//!
//! ```text
//! step t:  q_t = x_t · W_Q,   k_t = x_t · W_K,   v_t = x_t · W_V      only the new tokens
//!          K[.., t, ..] ← k_t,  V[.., t, ..] ← v_t                     written in place
//!          out_t = softmax(q_t · K[0..=t]ᵀ / √d_head) · V[0..=t]       O(t) work, not O(t²)
//! ```
//!
//! Each layer holds `K` and `V` preallocated to `[batch, n_kv_heads, slots, d_head]`; a step
//! writes its `seq_len` new keys and values with `slice_assign` into slots
//! `filled..filled + seq_len` and attends over the filled prefix (the cache narrowed to
//! `filled + seq_len` keys) with [`CausalAlignment::BottomRight`], so that the new queries
//! see every earlier key and, among themselves, only the ones before them.
//!
//! Written in place: burn-flex's `slice_assign` (`burn-flex-0.22.1/src/ops/slice.rs`,
//! `slice_write_impl`) writes into the destination's own buffer when that tensor is uniquely
//! owned (`Arc::strong_count == 1`), contiguous and starts at offset 0, and copies the whole
//! buffer first otherwise (`into_contiguous`, or `Arc::make_mut` in `storage_mut`).
//! burn-ndarray's does the same through `ArcArray::into_owned`. So the cache keeps each
//! buffer in an `Option` that a step takes out (never clones) before writing, and the narrowed
//! view a step attends over, which shares the buffer, is dropped before the next write.
//! The cache is never concatenated to grow (the one concatenation, below, is bounded by the
//! window).
//!
//! Batches of different lengths are **left-padded**: sequence `b` starts with `left_pad[b]`
//! padding slots, so every sequence's next token goes to the same slot and one `slice_assign`
//! serves the whole batch. Padding slots are masked as keys; positions count from each
//! sequence's first real token (slot `t` of sequence `b` is position `t − left_pad[b]`).
//! Rotary and ALiBi positions depend only on the distance between two tokens, which is the
//! same in slots, so they use slot indices.
//!
//! With a sliding window of `window` tokens (each query sees itself and the `window − 1`
//! tokens before it) the cache holds `min(capacity, window)` slots and rolls: position `t`
//! lives in slot `t mod slots`. A step of one token writes its slot first and then attends
//! over every slot, masking the ones not yet written; a step of several tokens attends over
//! the old slots and its own keys together (a concatenation of at most `window + seq_len`
//! keys, never the whole context), then writes its last `min(seq_len, window)` keys.
//! The slots are out of order, so causality and the window are one explicit mask, and ALiBi's
//! bias is computed from each slot's position.
//!
//! Cross-attention's keys and values depend only on the encoder's output, so
//! [`MemoryCache`] projects them once per memory and every step reuses them.

use attn_core::CausalAlignment;
use attn_pos::{AlibiForm, alibi_bias, alibi_slopes};
use burn::tensor::{Bool, Device, Tensor, TensorData};

use crate::error::{ModelError, check_nonzero};

/// One layer's cached keys and values, `[batch, n_kv_heads, slots, d_head]` each.
///
/// The buffers sit in `Option`s so that a step can take them out without cloning: a clone
/// would share the buffer and turn the in-place write into a copy.
#[derive(Debug)]
pub(crate) struct LayerKv {
    k: Option<Tensor<4>>,
    v: Option<Tensor<4>>,
}

/// The self-attention keys and values of every layer of a decoder, for a batch of
/// sequences decoded together.
///
/// Made by `new_cache` on [`Decoder`](crate::Decoder), [`TokenDecoder`](crate::TokenDecoder)
/// or [`EncoderDecoder`](crate::EncoderDecoder); every cached step ([`TokenDecoderInput::with_cache`](crate::TokenDecoderInput::with_cache)) appends to it.
/// It is deliberately not `Clone`: a copy would share the buffers and make every later write
/// copy them.
///
/// # Shapes
/// - each layer: keys and values `[batch, n_kv_heads, slots, d_head]`, with
///   `slots = min(capacity, window)`
#[derive(Debug)]
pub struct KvCache {
    layers: Vec<LayerKv>,
    batch: usize,
    capacity: usize,
    slots: usize,
    n_kv_heads: usize,
    d_head: usize,
    filled: usize,
    left_pad: Vec<usize>,
    window: Option<usize>,
}

/// How the keys a step attends over are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Slot = position; attend over slots `0..seq_len_kv` after writing.
    Linear { seq_len_kv: usize },
    /// One new token written into its rolling slot; attend over every slot.
    RollingInPlace,
    /// Several new tokens: attend over the old slots followed by the new keys, then write.
    RollingConcat,
}

/// What every layer of one step shares: where the new tokens go, the mask, the causal
/// alignment and the ALiBi bias over the keys attended.
#[derive(Clone, Debug)]
pub(crate) struct StepPlan {
    /// Slot position of the first new token (tokens already written).
    pub(crate) offset: usize,
    /// New tokens per sequence.
    pub(crate) seq_len: usize,
    layout: Layout,
    slots: usize,
    /// `[batch, 1, seq_len, seq_len_kv]`, `true` = not attended.
    pub(crate) mask: Option<Tensor<4, Bool>>,
    pub(crate) causal: Option<CausalAlignment>,
    /// `[1, n_heads, seq_len, seq_len_kv]`.
    pub(crate) bias: Option<Tensor<4>>,
}

impl KvCache {
    /// An empty cache: every layer's buffers allocated, nothing written.
    ///
    /// # Errors
    /// [`ModelError::ZeroSize`] for a zero batch or capacity,
    /// [`ModelError::PerSequenceMismatch`] when `left_pad` has not one entry per sequence,
    /// [`ModelError::PaddingTooLong`] when a padding does not fit the capacity.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        n_layers: usize,
        batch: usize,
        capacity: usize,
        [n_kv_heads, d_head]: [usize; 2],
        window: Option<usize>,
        left_pad: Option<&[usize]>,
        device: &Device,
    ) -> Result<Self, ModelError> {
        check_nonzero("batch", batch)?;
        check_nonzero("capacity", capacity)?;
        let left_pad = check_left_pad(left_pad, batch, capacity)?;
        let slots = window.map_or(capacity, |w| w.min(capacity));
        let layers = (0..n_layers)
            .map(|_| LayerKv {
                k: Some(Tensor::zeros([batch, n_kv_heads, slots, d_head], device)),
                v: Some(Tensor::zeros([batch, n_kv_heads, slots, d_head], device)),
            })
            .collect();
        Ok(Self {
            layers,
            batch,
            capacity,
            slots,
            n_kv_heads,
            d_head,
            filled: 0,
            left_pad,
            window,
        })
    }

    /// Sequences in the batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Tokens per sequence the cache accepts, padding included.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Slots each layer holds: the capacity, or the window when that is shorter.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Tokens per sequence written so far, padding included: the position of the next one.
    pub fn filled(&self) -> usize {
        self.filled
    }

    /// The sliding window, if the decoder has one.
    pub fn window(&self) -> Option<usize> {
        self.window
    }

    /// Whether the slots are reused once full (a window shorter than the capacity).
    pub fn is_rolling(&self) -> bool {
        self.slots < self.capacity
    }

    /// Forgets every token past the first `len` of each sequence, as transformers'
    /// `DynamicCache.crop` does: the next step writes at position `len`. Nothing is copied or
    /// freed; the slots past `len` are written again by later steps. Undoes a step that was
    /// rejected (a draft token, a regenerated answer) or returns to a shared prompt.
    ///
    /// # Errors
    /// [`ModelError::CacheTruncate`] when `len` is past what is written, inside a sequence's
    /// left padding, or when a rolling window has already overwritten a key before `len`
    /// (more than `slots` tokens written).
    pub fn truncate(&mut self, len: usize) -> Result<(), ModelError> {
        let left_pad = self.left_pad.iter().copied().max().unwrap_or(0);
        let overwritten = self.is_rolling() && self.filled > self.slots;
        if len > self.filled || len < left_pad || overwritten {
            return Err(ModelError::CacheTruncate {
                len,
                filled: self.filled,
                slots: self.slots,
                left_pad,
            });
        }
        self.filled = len;
        Ok(())
    }

    /// Leading padding slots of each sequence.
    pub fn left_pad(&self) -> &[usize] {
        &self.left_pad
    }

    /// Number of layers.
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// `[n_kv_heads, d_head]` of every layer's keys and values.
    pub(crate) fn head_shape(&self) -> [usize; 2] {
        [self.n_kv_heads, self.d_head]
    }

    pub(crate) fn layers_mut(&mut self) -> &mut [LayerKv] {
        &mut self.layers
    }

    /// Checks a step of `seq_len` tokens for `batch` sequences and plans it.
    ///
    /// # Errors
    /// [`ModelError::CacheBatchMismatch`], [`ModelError::CacheFull`] naming the numbers;
    /// [`ModelError::ZeroSize`] for an empty step.
    pub(crate) fn plan(
        &self,
        batch: usize,
        seq_len: usize,
        alibi: Option<(usize, AlibiForm)>,
        device: &Device,
    ) -> Result<StepPlan, ModelError> {
        if batch != self.batch {
            return Err(ModelError::CacheBatchMismatch {
                expected: self.batch,
                got: batch,
            });
        }
        check_nonzero("seq_len", seq_len)?;
        if self.filled + seq_len > self.capacity {
            return Err(ModelError::CacheFull {
                capacity: self.capacity,
                filled: self.filled,
                new: seq_len,
            });
        }
        let layout = if !self.is_rolling() {
            Layout::Linear {
                seq_len_kv: self.filled + seq_len,
            }
        } else if seq_len == 1 {
            Layout::RollingInPlace
        } else {
            Layout::RollingConcat
        };
        let key_positions = self.key_positions(layout, seq_len);
        let query_positions: Vec<usize> = (self.filled..self.filled + seq_len).collect();
        let (mask, causal, bias) = match layout {
            Layout::Linear { seq_len_kv } => {
                // Causality by attn-core's bottom-right alignment; padding and the window here.
                let mask = self.mask(&query_positions, &key_positions, false, device);
                let bias = alibi.map(|(n_heads, form)| {
                    alibi_bias(n_heads, seq_len, seq_len_kv, form, device).unsqueeze_dim::<4>(0) // [1, n_heads, seq_len, seq_len_kv]
                });
                (mask, Some(CausalAlignment::BottomRight), bias)
            }
            Layout::RollingInPlace | Layout::RollingConcat => {
                let mask = self.mask(&query_positions, &key_positions, true, device);
                let bias = alibi.map(|(n_heads, form)| {
                    bias_at(n_heads, form, &query_positions, &key_positions, device)
                });
                (mask, None, bias)
            }
        };
        Ok(StepPlan {
            offset: self.filled,
            seq_len,
            layout,
            slots: self.slots,
            mask,
            causal,
            bias,
        })
    }

    /// Records that a planned step has been written by every layer.
    pub(crate) fn advance(&mut self, plan: &StepPlan) {
        self.filled += plan.seq_len;
    }

    /// The position held by each key a step attends over, `None` for a slot not yet written.
    fn key_positions(&self, layout: Layout, seq_len: usize) -> Vec<Option<usize>> {
        // Slot s holds the latest position p <= last with p mod slots == s.
        let rolling = |last: Option<usize>| {
            (0..self.slots)
                .map(move |s| last.filter(|&l| s <= l).map(|l| l - (l - s) % self.slots))
                .collect::<Vec<_>>()
        };
        match layout {
            Layout::Linear { seq_len_kv } => (0..seq_len_kv).map(Some).collect(),
            Layout::RollingInPlace => rolling(Some(self.filled)),
            Layout::RollingConcat => {
                let mut keys = rolling(self.filled.checked_sub(1));
                keys.extend((self.filled..self.filled + seq_len).map(Some));
                keys
            }
        }
    }

    /// `[batch, 1, seq_len_q, seq_len_kv]`, `true` where a key is padding, not written yet,
    /// outside the window, or (with `causal`) after the query; `None` when nothing is masked.
    fn mask(
        &self,
        queries: &[usize],
        keys: &[Option<usize>],
        causal: bool,
        device: &Device,
    ) -> Option<Tensor<4, Bool>> {
        let mut data = Vec::with_capacity(self.batch * queries.len() * keys.len());
        for &pad in &self.left_pad {
            for &q in queries {
                data.extend(keys.iter().map(|key| match *key {
                    None => true,
                    Some(k) => {
                        k < pad
                            || (causal && k > q)
                            || self.window.is_some_and(|w| k <= q && q - k >= w)
                    }
                }));
            }
        }
        data.iter().any(|m| *m).then(|| {
            Tensor::from_data(
                TensorData::new(data, [self.batch, 1, queries.len(), keys.len()]),
                device,
            )
        })
    }
}

impl LayerKv {
    /// Writes a step's keys and values and returns the keys and values it attends over.
    ///
    /// # Shapes
    /// - `k`, `v`: `[batch, n_kv_heads, seq_len, d_head]`
    /// - returns: two `[batch, n_kv_heads, seq_len_kv, d_head]`
    pub(crate) fn append(
        &mut self,
        k: Tensor<4>,
        v: Tensor<4>,
        plan: &StepPlan,
    ) -> (Tensor<4>, Tensor<4>) {
        (
            append_one(&mut self.k, k, plan),
            append_one(&mut self.v, v, plan),
        )
    }
}

fn append_one(buffer: &mut Option<Tensor<4>>, new: Tensor<4>, plan: &StepPlan) -> Tensor<4> {
    let full = buffer
        .take()
        .expect("a step always puts the buffer back before returning");
    let (full, attended) = match plan.layout {
        Layout::Linear { seq_len_kv } => {
            let full = write(full, new, plan.offset);
            let attended = full.clone().narrow(2, 0, seq_len_kv); // [batch, n_kv_heads, seq_len_kv, d_head]
            (full, attended)
        }
        Layout::RollingInPlace => {
            let full = write(full, new, plan.offset % plan.slots);
            (full.clone(), full)
        }
        Layout::RollingConcat => {
            let attended = Tensor::cat(vec![full.clone(), new.clone()], 2); // [batch, n_kv_heads, slots + seq_len, d_head]
            (write_rolling(full, new, plan), attended)
        }
    };
    *buffer = Some(full);
    attended
}

/// Writes `new` into slots `start..start + seq_len` of `buffer`, in place when `buffer` is
/// its buffer's only owner.
///
/// # Shapes
/// - `buffer`: `[batch, n_kv_heads, slots, d_head]`; `new`: `[batch, n_kv_heads, seq_len, d_head]`
fn write(buffer: Tensor<4>, new: Tensor<4>, start: usize) -> Tensor<4> {
    let [batch, n_kv_heads, _slots, d_head] = buffer.dims();
    let [_, _, seq_len, _] = new.dims();
    buffer.slice_assign(
        [0..batch, 0..n_kv_heads, start..start + seq_len, 0..d_head],
        new,
    )
}

/// Writes the last `min(seq_len, slots)` of a step's keys into their rolling slots: one run of
/// slots, or two when it wraps past the end.
fn write_rolling(buffer: Tensor<4>, new: Tensor<4>, plan: &StepPlan) -> Tensor<4> {
    let kept = plan.seq_len.min(plan.slots);
    let new = new.narrow(2, plan.seq_len - kept, kept); // [batch, n_kv_heads, kept, d_head]
    let start = (plan.offset + plan.seq_len - kept) % plan.slots;
    let first = kept.min(plan.slots - start);
    let buffer = write(buffer, new.clone().narrow(2, 0, first), start);
    if first < kept {
        write(buffer, new.narrow(2, first, kept - first), 0)
    } else {
        buffer
    }
}

/// ALiBi's `−slope_h · distance` between queries and keys at the given positions (keys not
/// written get 0; the mask hides them).
///
/// # Shapes
/// - returns: `[1, n_heads, seq_len_q, seq_len_kv]`
fn bias_at(
    n_heads: usize,
    form: AlibiForm,
    queries: &[usize],
    keys: &[Option<usize>],
    device: &Device,
) -> Tensor<4> {
    let mut data = Vec::with_capacity(n_heads * queries.len() * keys.len());
    for slope in alibi_slopes(n_heads) {
        for &q in queries {
            data.extend(keys.iter().map(|key| {
                let distance = key.map_or(0.0, |k| match form {
                    AlibiForm::Causal => q.saturating_sub(k) as f64,
                    AlibiForm::Symmetric => q.abs_diff(k) as f64,
                });
                (-slope * distance) as f32
            }));
        }
    }
    Tensor::from_data(
        TensorData::new(data, [1, n_heads, queries.len(), keys.len()]),
        device,
    )
}

/// One entry per sequence, each fitting `seq_len` slots; all zeros when `None`.
pub(crate) fn check_left_pad(
    left_pad: Option<&[usize]>,
    batch: usize,
    seq_len: usize,
) -> Result<Vec<usize>, ModelError> {
    let Some(left_pad) = left_pad else {
        return Ok(vec![0; batch]);
    };
    if left_pad.len() != batch {
        return Err(ModelError::PerSequenceMismatch {
            what: "left_pad",
            batch,
            got: left_pad.len(),
        });
    }
    if let Some((batch_index, &pad)) = left_pad.iter().enumerate().find(|(_, p)| **p > seq_len) {
        return Err(ModelError::PaddingTooLong {
            batch_index,
            left_pad: pad,
            seq_len,
        });
    }
    Ok(left_pad.to_vec())
}

/// `[batch, seq_len]`, `true` on each sequence's leading padding slots.
pub(crate) fn left_padding_mask(
    left_pad: &[usize],
    seq_len: usize,
    device: &Device,
) -> Tensor<2, Bool> {
    let data: Vec<bool> = left_pad
        .iter()
        .flat_map(|&pad| (0..seq_len).map(move |t| t < pad))
        .collect();
    Tensor::from_data(TensorData::new(data, [left_pad.len(), seq_len]), device)
}

/// Cross-attention keys and values of every layer, projected once from an encoder's output,
/// and its padding mask: every decoding step reuses them.
///
/// # Shapes
/// - each layer: keys and values `[batch, n_kv_heads, seq_len_kv, d_head]`
/// - mask: `[batch, 1, 1, seq_len_kv]`
#[derive(Clone, Debug)]
pub struct MemoryCache {
    pub(crate) layers: Vec<(Tensor<4>, Tensor<4>)>,
    pub(crate) mask: Option<Tensor<4, Bool>>,
    pub(crate) batch: usize,
    pub(crate) seq_len_kv: usize,
}

/// One layer's share of a [`MemoryCache`].
///
/// # Shapes
/// - `k`, `v`: `[batch, n_kv_heads, seq_len_kv, d_head]`; `mask`: `[batch, 1, 1, seq_len_kv]`
#[derive(Clone, Copy, Debug)]
pub(crate) struct LayerMemory<'a> {
    pub(crate) k: &'a Tensor<4>,
    pub(crate) v: &'a Tensor<4>,
    pub(crate) mask: Option<&'a Tensor<4, Bool>>,
}

impl MemoryCache {
    /// Layer `i`'s keys and values and the mask.
    pub(crate) fn layer(&self, i: usize) -> LayerMemory<'_> {
        let (k, v) = &self.layers[i];
        LayerMemory {
            k,
            v,
            mask: self.mask.as_ref(),
        }
    }

    /// Sequences in the batch.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Keys per sequence (the encoder's `seq_len`).
    pub fn seq_len_kv(&self) -> usize {
        self.seq_len_kv
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{for_each_device, to_vec};

    fn cache(capacity: usize, window: Option<usize>, device: &Device) -> KvCache {
        KvCache::new(1, 2, capacity, [1, 1], window, Some(&[0, 1]), device).expect("valid")
    }

    #[test]
    fn truncation_stays_inside_what_is_written_and_kept() {
        let device = Device::flex();
        let mut linear = cache(10, None, &device);
        linear.filled = 6;
        linear.truncate(2).expect("inside what is written");
        assert_eq!(linear.filled(), 2);
        // Past what is written, then inside sequence 1's padding of one slot.
        for len in [3, 0] {
            let err = linear.truncate(len).expect_err("refused");
            assert!(
                matches!(err, ModelError::CacheTruncate { len: l, filled: 2, slots: 10, left_pad: 1 } if l == len),
                "{err}"
            );
        }
        // A window of 3 keeps the keys until the fourth token overwrites slot 0.
        let mut rolling = cache(10, Some(3), &device);
        rolling.filled = 3;
        rolling.truncate(1).expect("nothing overwritten yet");
        rolling.filled = 4;
        let err = rolling
            .truncate(2)
            .expect_err("position 0's slot holds position 3");
        assert!(
            matches!(
                err,
                ModelError::CacheTruncate {
                    filled: 4,
                    slots: 3,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn rolling_slots_hold_the_latest_positions() {
        let device = Device::flex();
        let mut cache = cache(10, Some(3), &device);
        assert!(cache.is_rolling());
        assert_eq!(cache.slots(), 3);
        cache.filled = 4;
        // Writing position 4 into slot 1: slots hold 3, 4, 2.
        assert_eq!(
            cache.key_positions(Layout::RollingInPlace, 1),
            [Some(3), Some(4), Some(2)]
        );
        // Before writing positions 4 and 5: old slots hold 3, 1, 2, then the new keys.
        assert_eq!(
            cache.key_positions(Layout::RollingConcat, 2),
            [Some(3), Some(1), Some(2), Some(4), Some(5)]
        );
        cache.filled = 1;
        assert_eq!(
            cache.key_positions(Layout::RollingInPlace, 1),
            [Some(0), Some(1), None]
        );
    }

    #[test]
    fn writes_wrap_around_the_rolling_slots() {
        for_each_device(|d| {
            let mut cache = cache(10, Some(3), &d.device);
            cache.filled = 2;
            let plan = cache.plan(2, 4, None, &d.device).expect("fits");
            let new = Tensor::<1>::from_floats(
                [10.0, 11.0, 12.0, 13.0, 20.0, 21.0, 22.0, 23.0],
                &d.device,
            )
            .reshape([2, 1, 4, 1]); // [batch, n_kv_heads, seq_len, d_head]
            let layer = &mut cache.layers[0];
            let (k, _) = layer.append(new.clone(), new, &plan);
            // Attended: the three old slots (zeros) then the four new keys.
            assert_eq!(k.dims(), [2, 1, 7, 1]);
            // Positions 3, 4, 5 (values x1, x2, x3) land in slots 0, 1, 2.
            let stored = to_vec(layer.k.clone().expect("put back"));
            assert_eq!(stored, [11.0, 12.0, 13.0, 21.0, 22.0, 23.0]);
        });
    }

    #[test]
    fn mask_hides_padding_unwritten_slots_and_keys_outside_the_window() {
        let device = Device::flex();
        let mut cache = cache(10, Some(2), &device);
        cache.filled = 2;
        let keys = cache.key_positions(Layout::RollingInPlace, 1); // slots hold 2, 1
        // Both sequences see both slots (sequence 1 pads position 0 only): no mask at all.
        assert!(cache.mask(&[2], &keys, true, &device).is_none());
        let keys = vec![Some(0), Some(1), Some(2)];
        let mask: Vec<bool> = cache
            .mask(&[2], &keys, true, &device)
            .expect("window masks")
            .into_data()
            .try_to_vec()
            .expect("bool");
        // Window 2: position 0 is out for both; sequence 1 also pads it.
        assert_eq!(mask, [true, false, false, true, false, false]);
    }
}
