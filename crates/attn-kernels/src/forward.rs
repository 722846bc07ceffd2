//! The forward pass on plain `f32` slices: FlashAttention-2's loop order on a CPU.
//!
//! One task owns `BLOCK_Q` queries of one head and walks the keys in blocks of `BLOCK_KV`
//! (both chosen from the machine's L2 cache and threads: [`ForwardBlocks`]), keeping a running
//! row maximum `m`, a running denominator `l` and an unnormalised output `o` (the online
//! softmax of `chunked.rs`, in base 2):
//!
//! ```text
//! s  = (q · scale · log2 e)·kᵀ + bias · log2 e      (masked → −∞)     [BLOCK_Q, BLOCK_KV]
//! m' = max(m, rowmax(s))
//! p  = 2^(s − m')
//! l  = l · 2^(m − m') + rowsum(p)
//! o  = o · 2^(m − m') + p·v                                            [BLOCK_Q, d_value]
//! ```
//!
//! and at the end `context = o / l` and `lse = (m + log2 l) · ln 2`, the natural log-sum-exp
//! of each row's scores (what a FlashAttention-2 backward recomputes the weights from).
//! Working in base 2 folds `log2 e` into the query scale and the bias, so each weight costs
//! one `2^x` and no multiply.
//!
//! Both products run on the SIMD layer's register-blocked micro-kernels ([`Kernels`]) that keep an
//! `[MR, NR] = [6, 16]` block of the result in twelve 8-wide registers for a whole inner
//! loop: per step one row of 16 values is loaded and each of 6 values is broadcast against it.
//! Keys and values are packed once per head into panels of 16 (`kᵀ` as `[d_head][16]`, `v` as
//! `[seq_len_kv][16]`) and each task's queries into tiles of 6, so that every step reads
//! contiguous memory. The `[BLOCK_Q, BLOCK_KV]` scores of one task stay in L2, the key and
//! value panels in use stay in L1, and no `[seq_len_q, seq_len_kv]` buffer is ever formed.
//! Tasks (batch, head, query block) run on rayon's pool, so both cores stay busy.
//!
//! Causal attention skips the key blocks above the diagonal altogether. Rows whose keys are
//! all masked end with `l = 0` and return zeros, as the other strategies do.
//!
//! The pass is written once over [`Kernels`]; [`Instructions::run`] runs each task on the
//! widest implementation the CPU has (`portable.rs`, `avx2.rs`, `avx512.rs`), picked at run
//! time through [`pulp`]'s feature detection. None needs `unsafe`.

use std::cell::{Cell, RefCell};
use std::mem::take;

use rayon::prelude::*;

use crate::aligned::AlignedBuf;
use crate::instructions::Instructions;
use crate::problem::{Problem, add_scaled, apply_mask};
use crate::simd::{Gemm, Kernels, MR, NR, Pass};
use crate::tiling::ForwardBlocks;

/// Runs attention, writing the context and, when asked for, each row's log-sum-exp.
///
/// # Shapes
/// - `context`: `[batch, n_heads, seq_len_q, d_value]`
/// - `lse`: `[batch, n_heads, seq_len_q]` (`−∞` for a row whose keys are all masked)
pub fn attention(problem: &Problem, context: &mut [f32], lse: Option<&mut [f32]>) {
    let blocks = ForwardBlocks::for_problem(problem);
    run_tasks(problem, context, lse, Instructions::Best, blocks);
}

fn run_tasks(
    p: &Problem,
    context: &mut [f32],
    lse: Option<&mut [f32]>,
    instructions: Instructions,
    blocks: ForwardBlocks,
) {
    assert_eq!(
        context.len(),
        p.batch * p.n_heads * p.seq_len_q * p.d_value,
        "context size"
    );
    if context.is_empty() {
        return;
    }
    let keys = PackedKeys::new(p);
    let ForwardBlocks {
        queries: block_q,
        keys: block_kv,
    } = blocks;

    // One task per (batch, head, block of queries); each owns its rows of the outputs.
    let mut lse_store = Vec::new();
    let lse = match lse {
        Some(lse) => lse,
        None => {
            lse_store.resize(p.batch * p.n_heads * p.seq_len_q, 0.0);
            &mut lse_store[..]
        }
    };
    assert_eq!(lse.len(), p.batch * p.n_heads * p.seq_len_q, "lse size");
    let head_tasks = context
        .chunks_mut(p.seq_len_q * p.d_value)
        .zip(lse.chunks_mut(p.seq_len_q))
        .enumerate();
    let tasks: Vec<_> = head_tasks
        .flat_map(|(head, (context, lse))| {
            context
                .chunks_mut(block_q * p.d_value)
                .zip(lse.chunks_mut(block_q))
                .enumerate()
                .map(move |(block, (context, lse))| (head, block * block_q, context, lse))
        })
        .collect();
    tasks
        .into_par_iter()
        .for_each(|(head, q_start, context, lse)| {
            SCRATCH.with_borrow_mut(|scratch| {
                scratch.fit(p, &keys, block_q, block_kv);
                let task = ForwardTask {
                    p,
                    keys: &keys,
                    head,
                    q_start,
                    block_kv,
                    scratch,
                    context,
                    lse,
                };
                instructions.run(task);
            });
        });
}

thread_local! {
    /// Each thread's [`Scratch`], kept from call to call: buffers of a hundred kilobytes or
    /// more freed after every call make glibc hand their pages back (`madvise`), which flushes
    /// the TLBs of the other cores; at short lengths that cost more than the attention itself.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Keys and values packed once per key/value head into the layouts the micro-kernels stream:
/// `kᵀ` in panels of [`NR`] keys, `[n_key_panels][d_head][NR]` (zero past `seq_len_kv`), and
/// `v` in panels of [`NR`] value columns, `[n_value_panels][seq_len_kv][NR]` (zero past
/// `d_value`). Each micro-kernel step then reads one contiguous row of [`NR`] values.
struct PackedKeys {
    k_panels: AlignedBuf,
    v_panels: AlignedBuf,
    n_key_panels: usize,
    n_value_panels: usize,
}

thread_local! {
    /// The calling thread's [`PackedKeys`] buffers, kept from call to call up to
    /// [`KEEP_PACKED_BYTES`]: allocating and zeroing a few megabytes per call took about a
    /// tenth of the forward at s = 512 (with the kernel's pages faulted in again in some
    /// processes). Taken out while in use, so a call nested in another (a rayon worker that
    /// steals a second forward) packs into buffers of its own.
    static PACKED: Cell<Option<(AlignedBuf, AlignedBuf)>> = const { Cell::new(None) };
}

/// The calling thread keeps its packed keys and values between calls up to this size; larger
/// ones (long sequences, where an allocation costs little next to the work) are freed.
const KEEP_PACKED_BYTES: usize = 16 << 20;

impl PackedKeys {
    fn new(p: &Problem) -> Self {
        let n_key_panels = p.seq_len_kv.div_ceil(NR);
        let n_value_panels = p.d_value.div_ceil(NR);
        let k_len = n_key_panels * p.d_head * NR;
        let v_len = n_value_panels * p.seq_len_kv * NR;
        let n_kv = p.batch * p.n_kv_heads;
        let (mut k_panels, mut v_panels) = PACKED.take().unwrap_or_default();
        // Every value is written below except the padding: keys past `seq_len_kv` in the last
        // key panel, columns past `d_value` in the last value panel. Their products are never
        // read, but a buffer kept from another call could hold anything there (NaN, subnormals
        // that are slow to multiply on some processors), so where there is padding the
        // buffers start from zeros.
        if p.seq_len_kv.is_multiple_of(NR) && p.d_value.is_multiple_of(NR) {
            k_panels.fit(n_kv * k_len);
            v_panels.fit(n_kv * v_len);
        } else {
            k_panels.zeroed(n_kv * k_len);
            v_panels.zeroed(n_kv * v_len);
        }
        k_panels
            .par_chunks_mut(k_len)
            .zip(v_panels.par_chunks_mut(v_len))
            .enumerate()
            .for_each(|(kv_head, (k_packed, v_packed))| {
                let (k, v) = (p.k.head(kv_head), p.v.head(kv_head));
                // The keys gathered row by row first (their rows may be strided, as the heads
                // split off a projection are): a row copy keeps many rows' loads in flight,
                // where the transposing loop below would wait on each row in turn.
                let mut keys = Vec::with_capacity(p.seq_len_kv * p.d_head);
                for key in k.range(0, p.seq_len_kv) {
                    keys.extend_from_slice(key);
                }
                // Panel by panel, so that the writes are contiguous and the (strided) reads
                // stay within the panel's NR keys.
                for (keys, panel) in keys
                    .chunks(NR * p.d_head)
                    .zip(k_packed.chunks_exact_mut(NR * p.d_head))
                {
                    for (c, column) in panel.chunks_exact_mut(NR).enumerate() {
                        for (x, key) in column.iter_mut().zip(keys.chunks_exact(p.d_head)) {
                            *x = key[c];
                        }
                    }
                }
                // Whole panels as arrays: a copy of a fixed NR floats is a few vector moves,
                // where a slice of run-time length goes through the C library's `memmove`, one
                // call per 64 bytes (a sixth of the forward at 256 keys of 32-wide heads went
                // to packing).
                for (j, value) in v.range(0, p.seq_len_kv).enumerate() {
                    let (whole, rest) = value.as_chunks::<NR>();
                    for (panel, cols) in whole.iter().enumerate() {
                        let at = (panel * p.seq_len_kv + j) * NR;
                        let dst: &mut [f32; NR] = (&mut v_packed[at..at + NR])
                            .try_into()
                            .expect("a panel row is NR floats");
                        *dst = *cols;
                    }
                    if !rest.is_empty() {
                        let at = (whole.len() * p.seq_len_kv + j) * NR;
                        v_packed[at..][..rest.len()].copy_from_slice(rest);
                    }
                }
            });
        Self {
            k_panels,
            v_panels,
            n_key_panels,
            n_value_panels,
        }
    }

    /// Key panel `panel` of key/value head `kv_head`, `[d_head][NR]`.
    fn k_panel<'a>(&'a self, p: &Problem, kv_head: usize, panel: usize) -> &'a [f32] {
        let len = p.d_head * NR;
        &self.k_panels[(kv_head * self.n_key_panels + panel) * len..][..len]
    }

    /// The value panels of key/value head `kv_head` from key `j0` on: panel `i`'s rows start
    /// [`value_panel_stride`](Self::value_panel_stride) · `i` floats in, `[len][NR]` each.
    fn values_from<'a>(&'a self, p: &Problem, kv_head: usize, j0: usize) -> &'a [f32] {
        &self.v_panels[(kv_head * self.n_value_panels * p.seq_len_kv + j0) * NR..]
    }

    /// Floats from one value panel to the next.
    fn value_panel_stride(p: &Problem) -> usize {
        p.seq_len_kv * NR
    }
}

impl Drop for PackedKeys {
    fn drop(&mut self) {
        let bytes = (self.k_panels.capacity() + self.v_panels.capacity()) * size_of::<f32>();
        if bytes <= KEEP_PACKED_BYTES {
            let buffers = (take(&mut self.k_panels), take(&mut self.v_panels));
            // A thread being torn down has no buffers to keep.
            let _ = PACKED.try_with(|packed| packed.set(Some(buffers)));
        }
    }
}

/// Per-thread buffers, reused from task to task and call to call.
#[derive(Default)]
struct Scratch {
    /// The block's queries as they are, `[rows, d_head]`, gathered from wherever their rows
    /// lie (see [`PackedKeys::new`]).
    q_rows: Vec<f32>,
    /// Queries times `scale · log2 e`, packed by tiles of [`MR`] rows as
    /// `[BLOCK_Q / MR][d_head][MR]`, zero past the last query.
    q: AlignedBuf,
    /// Scores, then weights, of one key block: `[BLOCK_Q, BLOCK_KV]` at most.
    s: AlignedBuf,
    /// Unnormalised output `[BLOCK_Q, d_value_padded]`.
    o: AlignedBuf,
    /// Running row maximum (base 2).
    m: Vec<f32>,
    /// Running row denominator.
    l: Vec<f32>,
}

impl Scratch {
    /// Sizes the buffers for `p` (their contents are set before they are read).
    fn fit(&mut self, p: &Problem, keys: &PackedKeys, block_q: usize, block_kv: usize) {
        self.q.fit(block_q * p.d_head);
        self.s.fit(block_q * block_kv);
        self.o.fit(block_q * keys.n_value_panels * NR);
        self.m.resize(block_q, 0.0);
        self.l.resize(block_q, 0.0);
    }
}

/// One block of queries of one head.
pub(crate) struct ForwardTask<'a, 'p> {
    p: &'a Problem<'p>,
    keys: &'a PackedKeys,
    /// `b · n_heads + h`.
    head: usize,
    q_start: usize,
    /// Keys per block: a multiple of [`NR`].
    block_kv: usize,
    scratch: &'a mut Scratch,
    /// This block's rows of the context, `[rows, d_value]`.
    context: &'a mut [f32],
    /// This block's rows of the log-sum-exp.
    lse: &'a mut [f32],
}

impl Pass for ForwardTask<'_, '_> {
    /// The online-softmax loop over key blocks, then `o / l`.
    #[inline(always)]
    fn run<K: Kernels>(self, kernels: K) {
        let ForwardTask {
            p,
            keys,
            head,
            q_start,
            block_kv,
            scratch,
            context,
            lse,
        } = self;
        let (b, h) = (head / p.n_heads, head % p.n_heads);
        let kv_head = b * p.n_kv_heads + h / (p.n_heads / p.n_kv_heads);
        let rows = lse.len();
        let rows_padded = rows.next_multiple_of(MR);
        let (d_head, d_value) = (p.d_head, p.d_value);
        let dv_padded = keys.n_value_panels * NR;

        let to_base_2 = std::f32::consts::LOG2_E;
        scratch.q_rows.clear();
        for query in p.q.head(head).range(q_start, q_start + rows) {
            scratch.q_rows.extend_from_slice(query);
        }
        let q = &mut scratch.q[..rows_padded * d_head];
        pack_queries(
            q,
            scratch.q_rows.chunks_exact(d_head.max(1)),
            d_head,
            p.scale * to_base_2,
        );
        let o = &mut scratch.o[..rows_padded * dv_padded];
        o.fill(0.0);
        let m = &mut scratch.m[..rows];
        m.fill(f32::NEG_INFINITY);
        let l = &mut scratch.l[..rows];
        l.fill(0.0);

        // Causal: the last query of the block sees keys up to `q_start + rows − 1 + offset`.
        let kv_end = match p.causal_offset {
            Some(offset) => {
                (q_start as i64 + rows as i64 + offset).clamp(0, p.seq_len_kv as i64) as usize
            }
            None => p.seq_len_kv,
        };
        let s = &mut scratch.s[..];

        for j0 in (0..kv_end).step_by(block_kv) {
            let len = block_kv.min(kv_end - j0);
            // The scores' row stride. It is a run-time value on purpose: with a compile-time
            // stride LLVM hoists all MR broadcasts of the p·v micro-kernel ahead of its FMAs
            // and spills accumulators to the stack.
            let len_padded = len.next_multiple_of(NR);

            // s = q·kᵀ for this block: [rows_padded, d_head] · [d_head, len_padded].
            // Two panels of keys at a time (see `Kernels::scores_tiles`), one if one is left.
            let panels = len_padded / NR;
            for first in (0..panels).step_by(2) {
                let k_panel = |panel: usize| keys.k_panel(p, kv_head, j0 / NR + panel);
                for (tile, q_tile) in q.chunks_exact(MR * d_head).enumerate() {
                    let c = &mut s[tile * MR * len_padded + first * NR..];
                    if first + 1 < panels {
                        let pair = [k_panel(first), k_panel(first + 1)];
                        kernels.scores_tiles(q_tile, pair, c, len_padded);
                    } else {
                        kernels.scores_tile(q_tile, k_panel(first), c, len_padded);
                    }
                }
            }

            for i in 0..rows {
                let query = q_start + i;
                let visible = match p.causal_offset {
                    Some(offset) => {
                        (query as i64 + offset + 1 - j0 as i64).clamp(0, len as i64) as usize
                    }
                    None => len,
                };
                let row = &mut s[i * len_padded..][..len];
                let (seen, hidden) = row.split_at_mut(visible);
                hidden.fill(0.0);
                if let Some(bias) = &p.bias {
                    add_scaled(seen, bias.row(b, h, query, j0, visible), to_base_2);
                }
                if let Some(mask) = &p.mask {
                    apply_mask(seen, mask.row(b, h, query, j0, visible));
                }
                let m_new = m[i].max(kernels.row_max(seen));
                if m_new == f32::NEG_INFINITY {
                    // Nothing visible so far: no weight, nothing to rescale.
                    seen.fill(0.0);
                    continue;
                }
                let rescale = kernels.exp2(m[i] - m_new);
                let sum = kernels.exp2_in_place(seen, m_new);
                l[i] = kernels.mul_add(l[i], rescale, sum);
                if rescale != 1.0 {
                    for x in &mut o[i * dv_padded..][..dv_padded] {
                        *x *= rescale;
                    }
                }
                m[i] = m_new;
            }

            // o += p·v for this block: [rows_padded, len] · [len, dv_padded].
            kernels.gemm(Gemm {
                m: rows_padded,
                n: keys.n_value_panels * NR,
                k: len,
                a: &*s,
                lda: len_padded,
                b: keys.values_from(p, kv_head, j0),
                panel_stride: PackedKeys::value_panel_stride(p),
                c: &mut *o,
                ldc: dv_padded,
                overwrite: false,
            });
        }

        for i in 0..rows {
            let out = &mut context[i * d_value..][..d_value];
            let inv = if l[i] > 0.0 { 1.0 / l[i] } else { 0.0 };
            for (dst, &x) in out.iter_mut().zip(&o[i * dv_padded..][..d_value]) {
                *dst = x * inv;
            }
            lse[i] = if l[i] > 0.0 {
                (m[i] + l[i].log2()) * std::f32::consts::LN_2
            } else {
                f32::NEG_INFINITY
            };
        }
    }
}

/// Copies `rows` (`n` rows of `d_head`) times `scale` into `packed`,
/// `[n_padded / MR][d_head][MR]`, with zero rows past `n`: one micro-kernel step then reads the
/// [`MR`] values it broadcasts from one place.
fn pack_queries<'a>(
    packed: &mut [f32],
    rows: impl Iterator<Item = &'a [f32]>,
    d_head: usize,
    scale: f32,
) {
    packed.fill(0.0);
    for (r, row) in rows.enumerate() {
        let tile = &mut packed[(r / MR) * MR * d_head..][..MR * d_head];
        for (c, &x) in row.iter().enumerate() {
            tile[c * MR + r % MR] = x * scale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Broadcast, Rows, TokenMajor};
    use crate::testing::{SeededRng, assert_close_slices};

    fn values(rng: &mut SeededRng, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| rng.unit() * scale).collect()
    }

    /// A shape for a mask or bias that broadcasts to the scores, chosen by `kind`.
    fn broadcast_dims(kind: usize, scores: [usize; 4]) -> [usize; 4] {
        let [batch, n_heads, seq_len_q, seq_len_kv] = scores;
        match kind % 4 {
            0 => scores,
            1 => [batch, 1, 1, seq_len_kv],
            2 => [1, n_heads, seq_len_q, 1],
            _ => [1, 1, seq_len_q, seq_len_kv],
        }
    }

    #[test]
    fn matches_the_definition_across_block_edges_masks_and_grouped_heads() {
        let mut rng = SeededRng::new(31);
        for trial in 0..16 {
            let batch = rng.range(1, 2);
            let n_kv_heads = rng.range(1, 2);
            let n_heads = n_kv_heads * rng.range(1, 3);
            // Lengths that cross the query blocks (up to 96) and the key blocks (up to 1024), and
            // tiny ones.
            let seq_len_q = if trial % 3 == 0 {
                rng.range(1, 7)
            } else {
                rng.range(90, 200)
            };
            let seq_len_kv = if trial % 4 == 0 {
                rng.range(1, 20)
            } else {
                rng.range(250, 530)
            };
            let (d_head, d_value) = (rng.range(1, 19), rng.range(1, 35));
            let scores = [batch, n_heads, seq_len_q, seq_len_kv];
            let q = values(&mut rng, batch * n_heads * seq_len_q * d_head, 2.0);
            let k = values(&mut rng, batch * n_kv_heads * seq_len_kv * d_head, 2.0);
            let v = values(&mut rng, batch * n_kv_heads * seq_len_kv * d_value, 1.0);
            let mask_dims = broadcast_dims(trial, scores);
            let mask: Vec<bool> = (0..mask_dims.iter().product())
                .map(|_| rng.bernoulli(0.3))
                .collect();
            let bias_dims = broadcast_dims(trial + 1, scores);
            let bias = values(&mut rng, bias_dims.iter().product(), 3.0);
            let q_dims = [batch, n_heads, seq_len_q, d_head];
            let k_dims = [batch, n_kv_heads, seq_len_kv, d_head];
            let v_dims = [batch, n_kv_heads, seq_len_kv, d_value];
            let problem = Problem {
                q: Rows::row_major(&q, q_dims),
                k: Rows::row_major(&k, k_dims),
                v: Rows::row_major(&v, v_dims),
                batch,
                n_heads,
                n_kv_heads,
                seq_len_q,
                seq_len_kv,
                d_head,
                d_value,
                scale: 0.1 + rng.unit().abs(),
                mask: (trial % 3 != 1).then(|| Broadcast::new(&mask, mask_dims)),
                bias: (trial % 2 == 0).then(|| Broadcast::new(&bias, bias_dims)),
                causal_offset: match trial % 4 {
                    0 => None,
                    1 => Some(0),
                    2 => Some(seq_len_kv as i64 - seq_len_q as i64),
                    _ => Some(rng.range(0, 40) as i64 - 20),
                },
            };
            let (want_context, want_lse) = crate::oracle::attention(&problem);
            // The same inputs token-major, as heads split off a projection are read in place,
            // with a gap after each row.
            let pad = trial % 3;
            let scattered = [(&q, q_dims), (&k, k_dims), (&v, v_dims)]
                .map(|(values, dims)| TokenMajor::new(values, dims, pad));
            let token_major_problem = Problem {
                q: scattered[0].rows(),
                k: scattered[1].rows(),
                v: scattered[2].rows(),
                ..problem
            };
            // The blocks this machine picks, the smallest the layouts allow, and larger ones.
            let blocks = [
                ForwardBlocks::for_problem(&problem),
                ForwardBlocks {
                    queries: MR,
                    keys: NR,
                },
                ForwardBlocks {
                    queries: 2 * MR,
                    keys: 3 * NR,
                },
                ForwardBlocks {
                    queries: 16 * MR,
                    keys: 1024,
                },
            ];
            let runs = [
                Instructions::Best,
                Instructions::Avx2,
                Instructions::Portable,
            ]
            .into_iter()
            .flat_map(|instructions| blocks.map(|blocks| (instructions, blocks)))
            .enumerate();
            for (run, (instructions, blocks)) in runs {
                let mut context = vec![f32::NAN; want_context.len()];
                let mut lse = vec![f32::NAN; want_lse.len()];
                let (layout, problem) = if run % 2 == 0 {
                    ("row-major", &problem)
                } else {
                    ("token-major", &token_major_problem)
                };
                run_tasks(problem, &mut context, Some(&mut lse), instructions, blocks);
                let what = format!(
                    "trial {trial} ({instructions:?}, {blocks:?}, {layout}), scores {scores:?}, d_head {d_head}, d_value {d_value}"
                );
                assert_close_slices(
                    &context,
                    &want_context,
                    1e-5,
                    1e-4,
                    &format!("{what}: context"),
                );
                let finite = |x: &[f32]| {
                    x.iter()
                        .map(|&l| if l.is_finite() { l } else { -1e30 })
                        .collect::<Vec<_>>()
                };
                assert_close_slices(
                    &finite(&lse),
                    &finite(&want_lse),
                    1e-4,
                    1e-5,
                    &format!("{what}: lse"),
                );
            }
        }
    }

    /// The packed keys and values are kept on the calling thread from one call to the next:
    /// a call whose keys and value columns fill their panels leaves NaN in them (from NaN
    /// inputs), and nothing of it may reach the next call, whose last panels are padded.
    #[test]
    fn padding_is_zero_in_buffers_kept_from_the_call_before() {
        // Whole panels: 64 keys, 32 value columns, every packed value NaN.
        let (q, k, v) = (
            vec![0.5; 3 * 16],
            vec![f32::NAN; 64 * 16],
            vec![f32::NAN; 64 * 32],
        );
        let full = Problem::one_head(&q, &k, &v, [3, 64, 16, 32], 0.25);
        let mut context = vec![0.0; 3 * 32];
        attention(&full, &mut context, None);
        assert!(
            context.iter().all(|x| x.is_nan()),
            "NaN keys give NaN context"
        );
        // 20 keys and 10 value columns: the last key panel and the value panel are padded.
        let mut rng = SeededRng::new(8);
        let q = values(&mut rng, 3 * 16, 1.0);
        let k = values(&mut rng, 20 * 16, 1.0);
        let v = values(&mut rng, 20 * 10, 1.0);
        let padded = Problem::one_head(&q, &k, &v, [3, 20, 16, 10], 0.25);
        let (want, _) = crate::oracle::attention(&padded);
        let mut context = vec![f32::NAN; want.len()];
        attention(&padded, &mut context, None);
        assert_close_slices(
            &context,
            &want,
            1e-5,
            1e-5,
            "padded after NaN-filled panels",
        );
    }

    #[test]
    fn fully_masked_rows_give_zero_context_and_minus_infinity_lse() {
        let (q, k, v) = (vec![1.0; 2 * 3], vec![1.0; 4 * 3], vec![5.0; 4 * 2]);
        // Query 0 sees no key (causal offset −1), query 1 sees key 0 only.
        let problem = Problem {
            causal_offset: Some(-1),
            ..Problem::one_head(&q, &k, &v, [2, 4, 3, 2], 1.0)
        };
        let (mut context, mut lse) = (vec![f32::NAN; 4], vec![f32::NAN; 2]);
        attention(&problem, &mut context, Some(&mut lse));
        assert_eq!(context, [0.0, 0.0, 5.0, 5.0]);
        assert_eq!(lse[0], f32::NEG_INFINITY);
        assert!(
            (lse[1] - 3.0).abs() < 1e-6,
            "one key with score 3: lse {}",
            lse[1]
        );
    }
}
