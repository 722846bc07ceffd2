//! The decode pass on plain `f32` slices: a few new queries against a long key/value cache,
//! split along the keys (flash-decoding).
//!
//! Decoding attends `seq_len_q` new queries (one per step, a few when a prompt's tail or a
//! draft is checked) to every cached key. The forward pass parallelises over (batch, head,
//! block of queries): at batch 1 with one key/value head that is one task, and its packing of
//! the keys costs as much as the attention itself. This pass reads the cache in place and
//! splits the keys of each (batch, key/value head) into chunks, one task each. A task computes
//! its chunk's partial softmax in base 2 for every query row that reads this key/value head
//! (all `n_heads / n_kv_heads` query heads of the group, so grouped heads share each key read):
//!
//! ```text
//! s_c = (q · scale · log2 e)·k_cᵀ + bias · log2 e      (masked → −∞)   [rows, chunk]
//! m_c = rowmax(s_c)
//! l_c = rowsum(2^(s_c − m_c))
//! o_c = 2^(s_c − m_c) · v_c                                           [rows, d_value]
//! ```
//!
//! and the partials of all chunks merge exactly:
//!
//! ```text
//! M = max_c m_c,   L = Σ_c l_c · 2^(m_c − M),   context = Σ_c o_c · 2^(m_c − M) / L
//! lse = (M + log2 L) · ln 2
//! ```
//!
//! A chunk whose keys are all masked for a row has `m_c = −∞` and adds nothing; a row with no
//! visible key at all returns zeros (and `lse = −∞`), as the other strategies do. Causality
//! skips the chunks that lie wholly past a row's last visible key.
//!
//! The inner loops are dot products and `axpy`s over `d_head` and `d_value`: the dot
//! products, the row maximum and the exponentials are the SIMD layer's, and the `axpy`s are
//! plain loops that the compiler vectorises inside the instruction set's `vectorize`.

use std::cell::RefCell;

use rayon::prelude::*;

use crate::instructions::Instructions;
use crate::problem::{Problem, add_scaled, apply_mask};
use crate::simd::{Kernels, Pass};
use crate::tiling::TASKS_PER_THREAD;

/// The most queries per (batch, head) the decode pass is built for: its scratch holds a
/// `[rows, chunk]` block of scores per task, and past a few queries the forward pass's
/// register-blocked products win.
pub const DECODE_MAX_QUERIES: usize = 16;

/// The fewest keys per chunk: below it the merge and the task costs outweigh the split.
const MIN_CHUNK: usize = 64;
/// The most keys per chunk: the `[rows, chunk]` scores of a task stay in L1/L2.
const MAX_CHUNK: usize = 1024;
/// Partial values below which the merge runs on the calling thread alone.
const MERGE_ALONE: usize = 1 << 15;

/// Runs decoding attention, writing the context and, when asked for, each row's log-sum-exp.
///
/// # Shapes
/// - `context`: `[batch, n_heads, seq_len_q, d_value]`
/// - `lse`: `[batch, n_heads, seq_len_q]` (`−∞` for a row whose keys are all masked)
pub fn attention(problem: &Problem, context: &mut [f32], lse: Option<&mut [f32]>) {
    run_tasks(problem, context, lse, Instructions::Best);
}

/// Keys per chunk for `p`: enough chunks that every thread has [`TASKS_PER_THREAD`] tasks,
/// within [`MIN_CHUNK`] and [`MAX_CHUNK`].
fn chunk_len(p: &Problem) -> usize {
    let groups = p.batch * p.n_kv_heads;
    let wanted = (TASKS_PER_THREAD * rayon::current_num_threads()).div_ceil(groups);
    p.seq_len_kv
        .div_ceil(wanted.max(1))
        .clamp(MIN_CHUNK, MAX_CHUNK)
}

fn run_tasks(
    p: &Problem,
    context: &mut [f32],
    lse: Option<&mut [f32]>,
    instructions: Instructions,
) {
    let n_rows = p.batch * p.n_heads * p.seq_len_q;
    assert_eq!(context.len(), n_rows * p.d_value, "context size");
    if let Some(lse) = &lse {
        assert_eq!(lse.len(), n_rows, "lse size");
    }
    if context.is_empty() {
        return;
    }
    let group = p.n_heads / p.n_kv_heads;
    let rows = group * p.seq_len_q;
    let chunk = chunk_len(p);
    let n_chunks = p.seq_len_kv.div_ceil(chunk).max(1);
    // Each partial: the row maximum, the denominator and the unnormalised output of one row.
    let partial_len = 2 + p.d_value;
    let task_len = rows * partial_len;
    let mut partials = vec![0.0; p.batch * p.n_kv_heads * n_chunks * task_len];
    partials
        .par_chunks_mut(task_len)
        .enumerate()
        .for_each(|(task, partials)| {
            SCRATCH.with_borrow_mut(|scratch| {
                let (kv_group, c) = (task / n_chunks, task % n_chunks);
                let j0 = c * chunk;
                let pass = DecodeTask {
                    p,
                    kv_group,
                    keys: j0..(j0 + chunk).min(p.seq_len_kv),
                    scratch,
                    partials,
                };
                instructions.run(pass);
            });
        });

    // Merge: rows of one (batch, key/value head) group are contiguous in the context.
    let mut lse_store = Vec::new();
    let lse = match lse {
        Some(lse) => lse,
        None => {
            lse_store.resize(n_rows, 0.0);
            &mut lse_store[..]
        }
    };
    let merge = |((context, lse), partials): ((&mut [f32], &mut [f32]), &[f32])| {
        for r in 0..rows {
            let part = |c: usize| &partials[c * task_len + r * partial_len..][..partial_len];
            let m = (0..n_chunks)
                .map(|c| part(c)[0])
                .fold(f32::NEG_INFINITY, f32::max);
            let out = &mut context[r * p.d_value..][..p.d_value];
            out.fill(0.0);
            if m == f32::NEG_INFINITY {
                lse[r] = f32::NEG_INFINITY;
                continue;
            }
            let mut l = 0.0;
            for c in 0..n_chunks {
                let part = part(c);
                if part[0] == f32::NEG_INFINITY {
                    continue;
                }
                let w = (part[0] - m).exp2();
                l += part[1] * w;
                for (x, &o) in out.iter_mut().zip(&part[2..]) {
                    *x += o * w;
                }
            }
            let inv = 1.0 / l;
            for x in out.iter_mut() {
                *x *= inv;
            }
            lse[r] = (m + l.log2()) * std::f32::consts::LN_2;
        }
    };
    // A decoding step's merge reads a few thousand values: handing it to other threads costs
    // more than it does.
    if partials.len() < MERGE_ALONE {
        context
            .chunks_mut(rows * p.d_value)
            .zip(lse.chunks_mut(rows))
            .zip(partials.chunks(n_chunks * task_len))
            .for_each(merge);
    } else {
        context
            .par_chunks_mut(rows * p.d_value)
            .zip(lse.par_chunks_mut(rows))
            .zip(partials.par_chunks(n_chunks * task_len))
            .for_each(merge);
    }
}

thread_local! {
    /// Each thread's [`Scratch`], kept from call to call (see `forward.rs`: freeing buffers
    /// after every call returns pages to the system and flushes the other cores' TLBs).
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Per-thread buffers, reused from task to task and call to call.
#[derive(Default)]
struct Scratch {
    /// The group's queries times `scale · log2 e`, `[rows, d_head]`.
    q: Vec<f32>,
    /// Scores, then weights, of one chunk: `[rows, chunk]`.
    s: Vec<f32>,
}

/// One chunk of keys of one (batch, key/value head), for every query row that reads it.
pub(crate) struct DecodeTask<'a, 'p> {
    p: &'a Problem<'p>,
    /// `b · n_kv_heads + kv_head`.
    kv_group: usize,
    /// The chunk's keys.
    keys: std::ops::Range<usize>,
    scratch: &'a mut Scratch,
    /// This task's partials, `[rows][m, l, o[d_value]]`.
    partials: &'a mut [f32],
}

impl Pass for DecodeTask<'_, '_> {
    /// Scores of the chunk, their softmax pieces, then `o = p · v`.
    #[inline(always)]
    fn run<K: Kernels>(self, kernels: K) {
        let DecodeTask {
            p,
            kv_group,
            keys,
            scratch,
            partials,
        } = self;
        let (b, kv_head) = (kv_group / p.n_kv_heads, kv_group % p.n_kv_heads);
        let group = p.n_heads / p.n_kv_heads;
        let rows = group * p.seq_len_q;
        let (d_head, d_value) = (p.d_head, p.d_value);
        let (j0, len) = (keys.start, keys.len());
        let partial_len = 2 + d_value;

        // The chunk's visible keys per row: j ≤ i + offset under causality.
        let visible = |i: usize| match p.causal_offset {
            Some(offset) => (i as i64 + offset + 1 - j0 as i64).clamp(0, len as i64) as usize,
            None => len,
        };
        let seen_keys = (0..p.seq_len_q).map(visible).max().unwrap_or(0);
        for part in partials.chunks_exact_mut(partial_len) {
            part[0] = f32::NEG_INFINITY;
            part[1..].fill(0.0);
        }
        if seen_keys == 0 {
            return;
        }

        let to_base_2 = std::f32::consts::LOG2_E;
        let first_head = b * p.n_heads + kv_head * group;
        let q = &mut scratch.q;
        q.clear();
        for head in first_head..first_head + group {
            for query in p.q.head(head).range(0, p.seq_len_q) {
                q.extend(query.iter().map(|&x| x * (p.scale * to_base_2)));
            }
        }
        scratch.s.resize(rows * len, 0.0);
        let s = &mut scratch.s[..rows * len];

        // s = q·kᵀ: each key is read once for all rows of the group.
        let k = p.k.head(kv_group).range(j0, j0 + seen_keys);
        for (jj, key) in k.enumerate() {
            for (r, query) in q.chunks_exact(d_head).enumerate() {
                s[r * len + jj] = kernels.dot(query, key);
            }
        }

        for (r, part) in partials.chunks_exact_mut(partial_len).enumerate() {
            let (g, i) = (r / p.seq_len_q, r % p.seq_len_q);
            let h = kv_head * group + g;
            let row = &mut s[r * len..][..len];
            let (seen, hidden) = row.split_at_mut(visible(i));
            hidden.fill(0.0);
            if let Some(bias) = &p.bias {
                add_scaled(seen, bias.row(b, h, i, j0, seen.len()), to_base_2);
            }
            if let Some(mask) = &p.mask {
                apply_mask(seen, mask.row(b, h, i, j0, seen.len()));
            }
            let m = kernels.row_max(seen);
            if m == f32::NEG_INFINITY {
                seen.fill(0.0);
                continue;
            }
            part[0] = m;
            part[1] = kernels.exp2_in_place(seen, m);
        }

        // o = p·v: each value row is read once for all rows of the group.
        let v = p.v.head(kv_group).range(j0, j0 + seen_keys);
        for (jj, value) in v.enumerate() {
            for (r, part) in partials.chunks_exact_mut(partial_len).enumerate() {
                let weight = s[r * len + jj];
                if weight != 0.0 {
                    for (o, &x) in part[2..].iter_mut().zip(value) {
                        *o = kernels.mul_add(weight, x, *o);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Broadcast, Rows};
    use crate::testing::{SeededRng, assert_close_slices};

    fn values(rng: &mut SeededRng, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| rng.unit() * scale).collect()
    }

    /// Runs `problem` on every instruction set and compares with the `f64` definition.
    fn check_every_instruction_set(problem: &Problem, what: &str) {
        let (want_context, want_lse) = crate::oracle::attention(problem);
        for instructions in [
            Instructions::Best,
            Instructions::Avx2,
            Instructions::Portable,
        ] {
            let mut context = vec![f32::NAN; want_context.len()];
            let mut lse = vec![f32::NAN; want_lse.len()];
            run_tasks(problem, &mut context, Some(&mut lse), instructions);
            let what = format!("{what} ({instructions:?})");
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

    #[test]
    fn decode_matches_the_definition_with_grouped_heads_masks_bias_and_causality() {
        let mut rng = SeededRng::new(47);
        for trial in 0..24 {
            let batch = rng.range(1, 2);
            let n_kv_heads = rng.range(1, 3);
            let n_heads = n_kv_heads * [1, 3, 4][trial % 3];
            let seq_len_q = if trial % 2 == 0 {
                1
            } else {
                rng.range(2, DECODE_MAX_QUERIES)
            };
            // Lengths below one chunk, across several chunks, and with a short last chunk.
            let seq_len_kv = match trial % 4 {
                0 => rng.range(1, 40),
                1 => rng.range(60, 200),
                _ => rng.range(700, 2300),
            };
            let (d_head, d_value) = (rng.range(1, 70), rng.range(1, 40));
            let scores = [batch, n_heads, seq_len_q, seq_len_kv];
            // Every other trial reads the keys as the filled prefix of a cache with room for
            // more rows, whose unfilled rows are NaN: reading one would poison the result.
            let kv_rows = seq_len_kv + (trial % 2) * rng.range(1, 50);
            let cache = |rng: &mut SeededRng, width: usize, scale: f32| -> Vec<f32> {
                let mut rows = vec![f32::NAN; batch * n_kv_heads * kv_rows * width];
                for group in rows.chunks_mut(kv_rows * width) {
                    group[..seq_len_kv * width].copy_from_slice(&values(
                        rng,
                        seq_len_kv * width,
                        scale,
                    ));
                }
                rows
            };
            let q = values(&mut rng, batch * n_heads * seq_len_q * d_head, 2.0);
            let k = cache(&mut rng, d_head, 2.0);
            let v = cache(&mut rng, d_value, 1.0);
            // A padding-like mask on keys, or one per query row, dense enough that some rows
            // lose every key.
            let (mask_dims, density) = match trial % 3 {
                0 => ([batch, 1, 1, seq_len_kv], 0.4),
                1 => (scores, 0.3),
                _ => ([1, n_heads, seq_len_q, seq_len_kv], 0.97),
            };
            let mask: Vec<bool> = (0..mask_dims.iter().product())
                .map(|_| rng.bernoulli(density))
                .collect();
            let bias_dims = [1, n_heads, seq_len_q, seq_len_kv];
            let bias = values(&mut rng, bias_dims.iter().product(), 3.0);
            // The cache's rows: the first `seq_len_kv` of `kv_rows` per head.
            let cache_rows = |data, width| Rows {
                data,
                heads: n_kv_heads,
                width,
                strides: [n_kv_heads * kv_rows * width, kv_rows * width, width],
            };
            let problem = Problem {
                q: Rows::row_major(&q, [batch, n_heads, seq_len_q, d_head]),
                k: cache_rows(&k, d_head),
                v: cache_rows(&v, d_value),
                batch,
                n_heads,
                n_kv_heads,
                seq_len_q,
                seq_len_kv,
                d_head,
                d_value,
                scale: 0.1 + rng.unit().abs(),
                mask: (trial % 5 != 4).then(|| Broadcast::new(&mask, mask_dims)),
                bias: (trial % 2 == 1).then(|| Broadcast::new(&bias, bias_dims)),
                causal_offset: match trial % 4 {
                    0 => None,
                    // Top-left: query i sees keys 0..=i.
                    1 => Some(0),
                    // Bottom-right: the last query sees every key.
                    2 => Some(seq_len_kv as i64 - seq_len_q as i64),
                    // Bottom-right with fewer keys than queries: the first rows see none.
                    _ => Some(rng.range(0, 5) as i64 - 6),
                },
            };
            let what = format!(
                "trial {trial}, scores {scores:?}, kv_rows {kv_rows}, d_head {d_head}, d_value {d_value}"
            );
            check_every_instruction_set(&problem, &what);
        }
    }

    #[test]
    fn decode_gives_zeros_for_fully_masked_rows_and_merges_chunks_exactly() {
        // One query head against 3000 keys (several chunks), mask everything but two keys in
        // different chunks for row 0, and every key for row 1.
        let (seq_len_q, seq_len_kv, d_head, d_value) = (2, 3000, 3, 2);
        let q = vec![1.0; seq_len_q * d_head];
        let k = vec![1.0; seq_len_kv * d_head];
        let mut v = vec![0.0; seq_len_kv * d_value];
        v[10 * d_value..][..d_value].copy_from_slice(&[2.0, 4.0]);
        v[2900 * d_value..][..d_value].copy_from_slice(&[6.0, 8.0]);
        let mut mask = vec![true; seq_len_q * seq_len_kv];
        mask[10] = false;
        mask[2900] = false;
        let problem = Problem {
            mask: Some(Broadcast::new(&mask, [1, 1, seq_len_q, seq_len_kv])),
            ..Problem::one_head(&q, &k, &v, [seq_len_q, seq_len_kv, d_head, d_value], 1.0)
        };
        let (mut context, mut lse) = (vec![f32::NAN; 4], vec![f32::NAN; 2]);
        attention(&problem, &mut context, Some(&mut lse));
        // Two equal scores of 3: the mean of the two values, lse = 3 + ln 2.
        assert_close_slices(&context, &[4.0, 6.0, 0.0, 0.0], 1e-6, 1e-6, "context");
        assert!(
            (lse[0] - (3.0 + std::f32::consts::LN_2)).abs() < 1e-5,
            "lse {}",
            lse[0]
        );
        assert_eq!(lse[1], f32::NEG_INFINITY);
    }
}
