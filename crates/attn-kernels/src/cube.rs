//! FlashAttention-2 on GPUs: the forward and backward passes as CubeCL kernels, for every
//! runtime CubeCL compiles to (wgpu, Vulkan, Metal, CUDA, ROCm).
//!
//! The same recurrences as the CPU passes ([`crate::attention`], [`crate::attention_backward`]),
//! written for a grid of cubes. Each unit of a cube owns one row (a query in the forward and in
//! `dq`, a key in `dk` and `dv`) and keeps it, and its accumulators, in registers; the rows of
//! the other side stream through shared memory a tile at a time, loaded by all the cube's units
//! together. Nothing of size `seq_len_q × seq_len_kv` is ever written.
//!
//! ```text
//! forward   m, l, acc over key tiles: s = q·kᵀ·scale + offset; online softmax;
//!           context = acc / l, lse = m + ln l
//! prepass   stats = (lse, D = rowsum(d_context ∘ context))
//! dq        over key tiles:   p = exp(s − lse), ds = p ∘ (d_context·vᵀ − D), dq += ds · k · scale
//! dk, dv    over query tiles of every query head of the key's group:
//!           dv += pᵀ · d_context, dk += dsᵀ · q · scale
//! ```
//!
//! Inputs are `[batch, heads, seq_len, d]` tensors with any strides; key/value heads may be
//! fewer than query heads (grouped-query attention), and are read in place, never repeated.
//! The mask and the bias arrive as one additive tensor, the *offsets*, broadcasting to the
//! scores ([`MASKED_OFFSET`] where a key is masked): a score at or below [`MASKED`] is skipped,
//! so a row whose keys are all masked gets a zero context, a log-sum-exp of `−∞` and zero
//! gradients. Causal masking is computed, not read, and whole tiles beyond a cube's last
//! visible key are never loaded.
//!
//! At most seven tensors per kernel: wgpu's default limit is eight storage buffers per stage,
//! one of which carries the tensors' shapes and strides. That is why the backward packs each
//! query's `lse` and `D` into one `stats` tensor, and writes `dk` and `dv` side by side into
//! one `[batch, kv_heads, seq_len_kv, d_head + d_value]` tensor.

use cubecl::prelude::*;
use cubecl::{CubeDim, client::Client};

/// Units (rows) per cube.
const ROWS: usize = 32;

/// A score at or below this counts as masked. WGSL has no literal for infinity and lets its
/// compilers assume none occur, so the kernels never compare with `−∞`: a masked key's offset
/// is [`MASKED_OFFSET`], and a score that low (or `−∞`, from a bias) is skipped. No unmasked
/// score comes near: at `−10³⁸` below a row's largest score, a weight is exactly 0 in `f32`.
pub const MASKED: f32 = -1.0e38;

/// The offset of a masked key: `f32::MIN`, finite, and below [`MASKED`] for any score under
/// `2·10³⁸`.
pub const MASKED_OFFSET: f32 = f32::MIN;

/// The largest `d_head` and `d_value` the kernels take: a unit keeps its row and its
/// accumulators (up to four rows of this length) in registers.
pub const MAX_HEAD_DIM: usize = 256;

/// What the kernels need besides the tensors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// The factor on `q·kᵀ`.
    pub scale: f32,
    /// Key `j` is masked for query `i` when `j > i + causal_offset`.
    pub causal_offset: Option<i64>,
    /// Whether the offsets tensor holds a mask or a bias; when `false` it is not read (pass any
    /// one-element tensor).
    pub offsets: bool,
}

impl Settings {
    /// The causal test `j + shift_k > i + shift_q`, in unsigned numbers.
    fn shifts(&self) -> (u32, u32) {
        let offset = self.causal_offset.unwrap_or(0);
        let clamp = |x: i64| u32::try_from(x.max(0)).unwrap_or(u32::MAX);
        (clamp(offset), clamp(-offset))
    }
}

/// Whether the kernels take these head dimensions: each at most [`MAX_HEAD_DIM`].
pub fn serves(d_head: usize, d_value: usize) -> bool {
    (1..=MAX_HEAD_DIM).contains(&d_head) && (1..=MAX_HEAD_DIM).contains(&d_value)
}

/// Rows per shared-memory tile, for tiles whose rows hold `width` values of 4 bytes: as many as
/// fit in the device's shared memory, up to [`ROWS`]. Every device CubeCL runs on has at least
/// the 16 KiB WebGPU guarantees, which holds 7 rows of the widest tile (`2·MAX_HEAD_DIM + 2`).
fn tile_rows(client: &Client, width: usize) -> usize {
    let bytes = client.properties().hardware.max_shared_memory_size;
    let rows = (bytes / (4 * width)).min(ROWS);
    assert!(
        rows > 0,
        "{bytes} bytes of shared memory hold no row of {width} values"
    );
    rows
}

/// What a kernel is compiled for: its head dimensions, the rows of its shared-memory tiles, and
/// whether it computes causality and reads offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Layout {
    d_head: usize,
    d_value: usize,
    tile: usize,
    causal: bool,
    biased: bool,
}

/// `index` along a dimension of `size`, or 0 where the dimension broadcasts.
#[cube]
fn along(size: usize, index: usize) -> usize {
    let mut at = 0;
    if size > 1 {
        at = index;
    }
    at
}

/// Row `index`'s values of a `[batch, heads, rows, width]` tensor whose `(batch, head)` matrix
/// starts at `base`, times `factor`, into `row`; zeros where the unit has no row.
#[cube]
fn load_row<E: Float>(
    row: &mut Array<E>,
    t: &Tensor<E>,
    base: usize,
    index: usize,
    active: bool,
    factor: E,
    #[comptime] width: usize,
) {
    let at = base + index * t.stride(2);
    #[unroll]
    for c in 0..width {
        row[c] = E::new(0.0);
        if active {
            row[c] = t[at + c * t.stride(3)] * factor;
        }
    }
}

/// Rows `start .. start + rows_per_tile` of the matrix at `base` into a shared tile, zeros past
/// `rows`: every unit of the cube loads its share, and the caller syncs.
#[cube]
fn load_tile<E: Float>(
    tile: &mut Shared<[E]>,
    t: &Tensor<E>,
    base: usize,
    start: usize,
    rows: usize,
    #[comptime] width: usize,
    #[comptime] rows_per_tile: usize,
) {
    for at in range_stepped(
        UNIT_POS_X as usize,
        rows_per_tile * width,
        CUBE_DIM_X as usize,
    ) {
        let row = start + at / width;
        tile[at] = E::new(0.0);
        if row < rows {
            tile[at] = t[base + row * t.stride(2) + (at % width) * t.stride(3)];
        }
    }
}

/// How many keys the cube whose first query is `first` reads: all of them, or under causality
/// those up to its last query's last visible key, `last + shift_q − shift_k`.
#[cube]
fn visible_keys(
    first: usize,
    seq_q: usize,
    seq_kv: usize,
    shift_q: usize,
    shift_k: usize,
    #[comptime] causal: bool,
) -> usize {
    let mut keys = seq_kv;
    if causal {
        let mut end = seq_q;
        if first + (CUBE_DIM_X as usize) < seq_q {
            end = first + CUBE_DIM_X as usize;
        }
        let bound = end + shift_q;
        keys = 0;
        if bound > shift_k {
            keys = bound - shift_k;
            if keys > seq_kv {
                keys = seq_kv;
            }
        }
    }
    keys
}

/// Where query `i`'s offsets start for `(batch, head)`; its key `j` is `j` steps of
/// [`key_step`] on.
#[cube]
fn query_offsets<E: Float>(offsets: &Tensor<E>, batch: usize, head: usize, i: usize) -> usize {
    along(offsets.shape(0), batch) * offsets.stride(0)
        + along(offsets.shape(1), head) * offsets.stride(1)
        + along(offsets.shape(2), i) * offsets.stride(2)
}

/// The step between one key's offset and the next's (0 where the keys share one).
#[cube]
fn key_step<E: Float>(offsets: &Tensor<E>) -> usize {
    along(offsets.shape(3), 1) * offsets.stride(3)
}

/// The forward pass: `context [batch, heads, seq_len_q, d_value]` and `lse [batch, heads,
/// seq_len_q]`, both contiguous. Cube `(x, y)` takes query rows `x·ROWS ..` of `(batch, head)`
/// number `y`.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn forward_kernel<E: Float>(
    q: &Tensor<E>,
    k: &Tensor<E>,
    v: &Tensor<E>,
    offsets: &Tensor<E>,
    context: &mut Tensor<E>,
    lse: &mut Tensor<E>,
    scale: f32,
    neg_inf: f32,
    shift_q: u32,
    shift_k: u32,
    #[comptime] layout: Layout,
    #[define(E)] _dtype: ElemType,
) {
    let (d_head, d_value, tile) = (layout.d_head, layout.d_value, layout.tile);
    let (causal, biased) = (layout.causal, layout.biased);
    let (shift_q, shift_k) = (shift_q as usize, shift_k as usize);
    let n_heads = q.shape(1);
    let seq_q = q.shape(2);
    let seq_kv = k.shape(2);
    let pair = CUBE_POS_Y as usize;
    let (batch, head) = (pair / n_heads, pair % n_heads);
    let kv_head = head / (n_heads / k.shape(1));
    let units = CUBE_DIM_X as usize;
    let first = CUBE_POS_X as usize * units;
    let i = first + UNIT_POS_X as usize;
    let active = i < seq_q;
    let scale = E::cast_from(scale);

    let mut q_row = Array::<E>::new(d_head);
    let q_at = batch * q.stride(0) + head * q.stride(1);
    load_row(&mut q_row, q, q_at, i, active, scale, d_head);
    let mut acc = Array::<E>::new(d_value);
    #[unroll]
    for c in 0..d_value {
        acc[c] = E::new(0.0);
    }
    let offsets_at = query_offsets(offsets, batch, head, i);
    let offsets_step = key_step(offsets);
    let keys = visible_keys(first, seq_q, seq_kv, shift_q, shift_k, causal);

    let k_at = batch * k.stride(0) + kv_head * k.stride(1);
    let v_at = batch * v.stride(0) + kv_head * v.stride(1);
    let mut k_tile = Shared::<[E]>::new_slice(tile * d_head);
    let mut v_tile = Shared::<[E]>::new_slice(tile * d_value);
    let mut seen = false;
    let mut m = E::new(0.0);
    let mut l = E::new(0.0);
    let n_tiles = keys.div_ceil(tile);
    for t in 0..n_tiles {
        let start = t * tile;
        load_tile(&mut k_tile, k, k_at, start, seq_kv, d_head, tile);
        load_tile(&mut v_tile, v, v_at, start, seq_kv, d_value, tile);
        sync_cube();
        if active {
            let end = if start + tile < keys {
                tile
            } else {
                keys - start
            };
            for r in 0..end {
                let j = start + r;
                if !causal || j + shift_k <= i + shift_q {
                    let mut s = E::new(0.0);
                    #[unroll]
                    for c in 0..d_head {
                        s += q_row[c] * k_tile[r * d_head + c];
                    }
                    if biased {
                        s += offsets[offsets_at + j * offsets_step];
                    }
                    // A masked key is skipped; so is a NaN.
                    if s > E::new(MASKED) {
                        if !seen {
                            m = s;
                            l = E::new(1.0);
                            #[unroll]
                            for c in 0..d_value {
                                acc[c] = v_tile[r * d_value + c];
                            }
                            seen = true;
                        } else if s > m {
                            let correction = (m - s).exp();
                            l = l * correction + E::new(1.0);
                            #[unroll]
                            for c in 0..d_value {
                                acc[c] = acc[c] * correction + v_tile[r * d_value + c];
                            }
                            m = s;
                        } else {
                            let p = (s - m).exp();
                            l += p;
                            #[unroll]
                            for c in 0..d_value {
                                acc[c] += p * v_tile[r * d_value + c];
                            }
                        }
                    }
                }
            }
        }
        sync_cube();
    }

    if active {
        let row = pair * seq_q + i;
        if seen {
            let inverse = E::new(1.0) / l;
            #[unroll]
            for c in 0..d_value {
                context[row * d_value + c] = acc[c] * inverse;
            }
            lse[row] = m + l.ln();
        } else {
            #[unroll]
            for c in 0..d_value {
                context[row * d_value + c] = E::new(0.0);
            }
            // −∞ arrives as an argument: WGSL cannot write it.
            lse[row] = E::cast_from(neg_inf);
        }
    }
}

/// `stats [batch, heads, seq_len_q, 2]`: each query's log-sum-exp, and `D = Σ d_context ∘
/// context` over its row. One unit per query.
#[cube(launch, address_type = "dynamic")]
fn prepass_kernel<E: Float>(
    context: &Tensor<E>,
    d_context: &Tensor<E>,
    lse: &Tensor<E>,
    stats: &mut Tensor<E>,
    #[comptime] d_value: usize,
    #[define(E)] _dtype: ElemType,
) {
    let row = ABSOLUTE_POS;
    let n_heads = context.shape(1);
    let seq_q = context.shape(2);
    if row >= context.shape(0) * n_heads * seq_q {
        terminate!();
    }
    let i = row % seq_q;
    let pair = row / seq_q;
    let (batch, head) = (pair / n_heads, pair % n_heads);
    let o_at = batch * context.stride(0) + head * context.stride(1) + i * context.stride(2);
    let g_at = batch * d_context.stride(0) + head * d_context.stride(1) + i * d_context.stride(2);
    let mut d = E::new(0.0);
    #[unroll]
    for c in 0..d_value {
        d += context[o_at + c * context.stride(3)] * d_context[g_at + c * d_context.stride(3)];
    }
    stats[2 * row] = lse[batch * lse.stride(0) + head * lse.stride(1) + i * lse.stride(2)];
    stats[2 * row + 1] = d;
}

/// `dq [batch, heads, seq_len_q, d_head]`, contiguous: the forward's layout (one unit per
/// query, key and value tiles in shared memory), each weight recomputed from the stats.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn dq_kernel<E: Float>(
    q: &Tensor<E>,
    k: &Tensor<E>,
    v: &Tensor<E>,
    d_context: &Tensor<E>,
    stats: &Tensor<E>,
    offsets: &Tensor<E>,
    dq: &mut Tensor<E>,
    scale: f32,
    shift_q: u32,
    shift_k: u32,
    #[comptime] layout: Layout,
    #[define(E)] _dtype: ElemType,
) {
    let (d_head, d_value, tile) = (layout.d_head, layout.d_value, layout.tile);
    let (causal, biased) = (layout.causal, layout.biased);
    let (shift_q, shift_k) = (shift_q as usize, shift_k as usize);
    let n_heads = q.shape(1);
    let seq_q = q.shape(2);
    let seq_kv = k.shape(2);
    let pair = CUBE_POS_Y as usize;
    let (batch, head) = (pair / n_heads, pair % n_heads);
    let kv_head = head / (n_heads / k.shape(1));
    let units = CUBE_DIM_X as usize;
    let first = CUBE_POS_X as usize * units;
    let i = first + UNIT_POS_X as usize;
    let active = i < seq_q;
    let scale = E::cast_from(scale);

    let mut q_row = Array::<E>::new(d_head);
    let mut g_row = Array::<E>::new(d_value);
    let mut acc = Array::<E>::new(d_head);
    let q_at = batch * q.stride(0) + head * q.stride(1);
    let g_at = batch * d_context.stride(0) + head * d_context.stride(1);
    load_row(&mut q_row, q, q_at, i, active, scale, d_head);
    load_row(&mut g_row, d_context, g_at, i, active, E::new(1.0), d_value);
    #[unroll]
    for c in 0..d_head {
        acc[c] = E::new(0.0);
    }
    let mut lse = E::new(MASKED);
    let mut big_d = E::new(0.0);
    if active {
        lse = stats[2 * (pair * seq_q + i)];
        big_d = stats[2 * (pair * seq_q + i) + 1];
    }
    let offsets_at = query_offsets(offsets, batch, head, i);
    let offsets_step = key_step(offsets);
    let keys = visible_keys(first, seq_q, seq_kv, shift_q, shift_k, causal);

    let k_at = batch * k.stride(0) + kv_head * k.stride(1);
    let v_at = batch * v.stride(0) + kv_head * v.stride(1);
    let mut k_tile = Shared::<[E]>::new_slice(tile * d_head);
    let mut v_tile = Shared::<[E]>::new_slice(tile * d_value);
    let n_tiles = keys.div_ceil(tile);
    for t in 0..n_tiles {
        let start = t * tile;
        load_tile(&mut k_tile, k, k_at, start, seq_kv, d_head, tile);
        load_tile(&mut v_tile, v, v_at, start, seq_kv, d_value, tile);
        sync_cube();
        // A row whose keys are all masked has lse = −∞ and no gradient.
        if active && lse > E::new(MASKED) {
            let end = if start + tile < keys {
                tile
            } else {
                keys - start
            };
            for r in 0..end {
                let j = start + r;
                if !causal || j + shift_k <= i + shift_q {
                    let mut s = E::new(0.0);
                    #[unroll]
                    for c in 0..d_head {
                        s += q_row[c] * k_tile[r * d_head + c];
                    }
                    if biased {
                        s += offsets[offsets_at + j * offsets_step];
                    }
                    if s > E::new(MASKED) {
                        let p = (s - lse).exp();
                        let mut dp = E::new(0.0);
                        #[unroll]
                        for c in 0..d_value {
                            dp += g_row[c] * v_tile[r * d_value + c];
                        }
                        let ds = p * (dp - big_d);
                        #[unroll]
                        for c in 0..d_head {
                            acc[c] += ds * k_tile[r * d_head + c];
                        }
                    }
                }
            }
        }
        sync_cube();
    }

    if active {
        let row = pair * seq_q + i;
        #[unroll]
        for c in 0..d_head {
            dq[row * d_head + c] = acc[c] * scale;
        }
    }
}

/// `dk` and `dv` side by side in `dkdv [batch, kv_heads, seq_len_kv, d_head + d_value]`,
/// contiguous. Cube `(x, y)` takes key rows `x·ROWS ..` of `(batch, kv_head)` number `y`, one
/// unit per key, and sweeps the queries of every query head that reads that key/value head, a
/// tile of queries, their `d_context` rows and their stats at a time in shared memory: each
/// key's gradients are summed in its own registers, with no atomics.
#[cube(launch, address_type = "dynamic")]
#[allow(clippy::too_many_arguments)]
fn dkdv_kernel<E: Float>(
    q: &Tensor<E>,
    k: &Tensor<E>,
    v: &Tensor<E>,
    d_context: &Tensor<E>,
    stats: &Tensor<E>,
    offsets: &Tensor<E>,
    dkdv: &mut Tensor<E>,
    scale: f32,
    shift_q: u32,
    shift_k: u32,
    #[comptime] layout: Layout,
    #[define(E)] _dtype: ElemType,
) {
    let (d_head, d_value, tile) = (layout.d_head, layout.d_value, layout.tile);
    let (causal, biased) = (layout.causal, layout.biased);
    let (shift_q, shift_k) = (shift_q as usize, shift_k as usize);
    let n_heads = q.shape(1);
    let n_kv_heads = k.shape(1);
    let group = n_heads / n_kv_heads;
    let seq_q = q.shape(2);
    let seq_kv = k.shape(2);
    let pair = CUBE_POS_Y as usize;
    let (batch, kv_head) = (pair / n_kv_heads, pair % n_kv_heads);
    let units = CUBE_DIM_X as usize;
    let first = CUBE_POS_X as usize * units;
    let j = first + UNIT_POS_X as usize;
    let active = j < seq_kv;
    let scale = E::cast_from(scale);

    let mut k_row = Array::<E>::new(d_head);
    let mut v_row = Array::<E>::new(d_value);
    let mut dk = Array::<E>::new(d_head);
    let mut dv = Array::<E>::new(d_value);
    let k_at = batch * k.stride(0) + kv_head * k.stride(1);
    let v_at = batch * v.stride(0) + kv_head * v.stride(1);
    load_row(&mut k_row, k, k_at, j, active, E::new(1.0), d_head);
    load_row(&mut v_row, v, v_at, j, active, E::new(1.0), d_value);
    #[unroll]
    for c in 0..d_head {
        dk[c] = E::new(0.0);
    }
    #[unroll]
    for c in 0..d_value {
        dv[c] = E::new(0.0);
    }

    // The cube's first key is seen from query `first + shift_k − shift_q` on.
    let mut first_query = 0;
    if causal && first + shift_k > shift_q {
        first_query = first + shift_k - shift_q;
    }
    let first_tile = first_query / tile;
    let n_tiles = seq_q.div_ceil(tile);

    let mut q_tile = Shared::<[E]>::new_slice(tile * d_head);
    let mut g_tile = Shared::<[E]>::new_slice(tile * d_value);
    let mut s_tile = Shared::<[E]>::new_slice(tile * 2);
    for head in kv_head * group..(kv_head + 1) * group {
        let q_at = batch * q.stride(0) + head * q.stride(1);
        let g_at = batch * d_context.stride(0) + head * d_context.stride(1);
        let stats_at = 2 * (batch * n_heads + head) * seq_q;
        // Along the queries this time: key `j`'s offset for query 0, then a step per query.
        let offsets_at = query_offsets(offsets, batch, head, 0) + j * key_step(offsets);
        let offsets_step = along(offsets.shape(2), 1) * offsets.stride(2);
        for t in first_tile..n_tiles {
            let start = t * tile;
            load_tile(&mut q_tile, q, q_at, start, seq_q, d_head, tile);
            load_tile(&mut g_tile, d_context, g_at, start, seq_q, d_value, tile);
            for at in range_stepped(UNIT_POS_X as usize, tile * 2, units) {
                s_tile[at] = E::new(MASKED);
                if start + at / 2 < seq_q {
                    s_tile[at] = stats[stats_at + 2 * start + at];
                }
            }
            sync_cube();
            if active {
                let end = if start + tile < seq_q {
                    tile
                } else {
                    seq_q - start
                };
                for r in 0..end {
                    let i = start + r;
                    let lse = s_tile[2 * r];
                    if (!causal || j + shift_k <= i + shift_q) && lse > E::new(MASKED) {
                        let mut s = E::new(0.0);
                        #[unroll]
                        for c in 0..d_head {
                            s += q_tile[r * d_head + c] * k_row[c];
                        }
                        s *= scale;
                        if biased {
                            s += offsets[offsets_at + i * offsets_step];
                        }
                        if s > E::new(MASKED) {
                            let p = (s - lse).exp();
                            let mut dp = E::new(0.0);
                            #[unroll]
                            for c in 0..d_value {
                                let g = g_tile[r * d_value + c];
                                dv[c] += p * g;
                                dp += g * v_row[c];
                            }
                            let ds = p * (dp - s_tile[2 * r + 1]);
                            #[unroll]
                            for c in 0..d_head {
                                dk[c] += ds * q_tile[r * d_head + c];
                            }
                        }
                    }
                }
            }
            sync_cube();
        }
    }

    if active {
        let width = d_head + d_value;
        let row = (pair * seq_kv + j) * width;
        #[unroll]
        for c in 0..d_head {
            dkdv[row + c] = dk[c] * scale;
        }
        #[unroll]
        for c in 0..d_value {
            dkdv[row + d_head + c] = dv[c];
        }
    }
}

/// The tensors of one call, as bindings of the runtime's buffers.
#[derive(Clone)]
pub struct Inputs {
    /// `[batch, heads, seq_len_q, d_head]`.
    pub q: TensorBinding,
    /// `[batch, kv_heads, seq_len_kv, d_head]`, `kv_heads` dividing `heads`.
    pub k: TensorBinding,
    /// `[batch, kv_heads, seq_len_kv, d_value]`.
    pub v: TensorBinding,
    /// Added to the scaled scores, `−∞` where a key is masked; broadcasting to `[batch, heads,
    /// seq_len_q, seq_len_kv]` (size-1 dimensions are read as broadcast whatever their stride).
    /// Read only when [`Settings::offsets`] is set.
    pub offsets: TensorBinding,
}

/// The shape of a binding as four sizes.
fn dims(t: &TensorBinding) -> [usize; 4] {
    let s = &t.shape;
    assert_eq!(s.len(), 4, "attention tensors have four dimensions");
    [s[0], s[1], s[2], s[3]]
}

/// The launch geometry every kernel shares: one cube per `ROWS` rows of each `(batch, head)`.
fn grid(rows: usize, pairs: usize) -> (CubeCount, CubeDim) {
    let count = CubeCount::Static(
        u32::try_from(rows.div_ceil(ROWS)).expect("rows fit a grid"),
        u32::try_from(pairs).expect("heads fit a grid"),
        1,
    );
    (count, CubeDim::new_1d(ROWS as u32))
}

/// The widest addressing any of `bindings` needs.
fn address_type(bindings: &[&TensorBinding], elem_size: usize) -> AddressType {
    bindings
        .iter()
        .map(|b| b.required_address_type(elem_size))
        .max()
        .expect("a kernel has tensors")
}

/// The forward pass into `context [batch, heads, seq_len_q, d_value]` and `lse [batch, heads,
/// seq_len_q]`, both contiguous and allocated by the caller.
///
/// # Panics
///
/// When [`serves`] is false for the head dimensions.
pub fn forward(
    client: &Client,
    inputs: Inputs,
    context: TensorBinding,
    lse: TensorBinding,
    settings: Settings,
    dtype: ElemType,
) {
    let [batch, n_heads, seq_q, d_head] = dims(&inputs.q);
    let d_value = dims(&inputs.v)[3];
    assert!(
        serves(d_head, d_value),
        "head dimensions {d_head} and {d_value}"
    );
    let tile = tile_rows(client, d_head + d_value);
    let (shift_q, shift_k) = settings.shifts();
    let (count, dim) = grid(seq_q, batch * n_heads);
    let all = [
        &inputs.q,
        &inputs.k,
        &inputs.v,
        &inputs.offsets,
        &context,
        &lse,
    ];
    let address = address_type(&all, dtype.size());
    forward_kernel::launch(
        client,
        count,
        dim,
        address,
        inputs.q.into_tensor_arg(),
        inputs.k.into_tensor_arg(),
        inputs.v.into_tensor_arg(),
        inputs.offsets.into_tensor_arg(),
        context.into_tensor_arg(),
        lse.into_tensor_arg(),
        settings.scale,
        f32::NEG_INFINITY,
        shift_q,
        shift_k,
        Layout {
            d_head,
            d_value,
            tile,
            causal: settings.causal_offset.is_some(),
            biased: settings.offsets,
        },
        dtype,
    );
}

/// What the backward pass reads besides [`Inputs`]: the forward's outputs and the gradient of
/// the context.
#[derive(Clone)]
pub struct Outputs {
    /// The forward's context.
    pub context: TensorBinding,
    /// The forward's log-sum-exp.
    pub lse: TensorBinding,
    /// The gradient of a loss with respect to the context.
    pub d_context: TensorBinding,
}

/// Where the backward pass writes, all contiguous and allocated by the caller.
#[derive(Clone)]
pub struct Gradients {
    /// `[batch, heads, seq_len_q, 2]`: scratch for each query's `lse` and `D`.
    pub stats: TensorBinding,
    /// `[batch, heads, seq_len_q, d_head]`.
    pub dq: TensorBinding,
    /// `[batch, kv_heads, seq_len_kv, d_head + d_value]`: `dk` then `dv` on each row.
    pub dkdv: TensorBinding,
}

/// The backward pass: the prepass, then `dq`, then `dk` and `dv`.
///
/// # Panics
///
/// When [`serves`] is false for the head dimensions.
pub fn backward(
    client: &Client,
    inputs: Inputs,
    outputs: Outputs,
    gradients: Gradients,
    settings: Settings,
    dtype: ElemType,
) {
    let [batch, n_heads, seq_q, d_head] = dims(&inputs.q);
    let [_, n_kv_heads, seq_kv, _] = dims(&inputs.k);
    let d_value = dims(&inputs.v)[3];
    assert!(
        serves(d_head, d_value),
        "head dimensions {d_head} and {d_value}"
    );
    let (shift_q, shift_k) = settings.shifts();
    let causal = settings.causal_offset.is_some();
    let size = dtype.size();

    let rows = batch * n_heads * seq_q;
    let prepass = [
        &outputs.context,
        &outputs.d_context,
        &outputs.lse,
        &gradients.stats,
    ];
    prepass_kernel::launch(
        client,
        CubeCount::Static(
            u32::try_from(rows.div_ceil(ROWS)).expect("rows fit a grid"),
            1,
            1,
        ),
        CubeDim::new_1d(ROWS as u32),
        address_type(&prepass, size),
        outputs.context.into_tensor_arg(),
        outputs.d_context.clone().into_tensor_arg(),
        outputs.lse.into_tensor_arg(),
        gradients.stats.clone().into_tensor_arg(),
        d_value,
        dtype,
    );

    let tile = tile_rows(client, d_head + d_value);
    let (count, dim) = grid(seq_q, batch * n_heads);
    let all = [
        &inputs.q,
        &inputs.k,
        &inputs.v,
        &outputs.d_context,
        &gradients.stats,
        &inputs.offsets,
        &gradients.dq,
    ];
    dq_kernel::launch(
        client,
        count,
        dim,
        address_type(&all, size),
        inputs.q.clone().into_tensor_arg(),
        inputs.k.clone().into_tensor_arg(),
        inputs.v.clone().into_tensor_arg(),
        outputs.d_context.clone().into_tensor_arg(),
        gradients.stats.clone().into_tensor_arg(),
        inputs.offsets.clone().into_tensor_arg(),
        gradients.dq.into_tensor_arg(),
        settings.scale,
        shift_q,
        shift_k,
        Layout {
            d_head,
            d_value,
            tile,
            causal,
            biased: settings.offsets,
        },
        dtype,
    );

    let tile = tile_rows(client, d_head + d_value + 2);
    let (count, dim) = grid(seq_kv, batch * n_kv_heads);
    let all = [
        &inputs.q,
        &inputs.k,
        &inputs.v,
        &outputs.d_context,
        &gradients.stats,
        &inputs.offsets,
        &gradients.dkdv,
    ];
    dkdv_kernel::launch(
        client,
        count,
        dim,
        address_type(&all, size),
        inputs.q.into_tensor_arg(),
        inputs.k.into_tensor_arg(),
        inputs.v.into_tensor_arg(),
        outputs.d_context.into_tensor_arg(),
        gradients.stats.into_tensor_arg(),
        inputs.offsets.into_tensor_arg(),
        gradients.dkdv.into_tensor_arg(),
        settings.scale,
        shift_q,
        shift_k,
        Layout {
            d_head,
            d_value,
            tile,
            causal,
            biased: settings.offsets,
        },
        dtype,
    );
}
