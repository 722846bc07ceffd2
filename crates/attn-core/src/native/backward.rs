//! The backward pass of attention from the forward's log-sum-exp, FlashAttention-2 style:
//! the weights are recomputed block by block and never stored, so the memory beyond the
//! gradients themselves is `O(block · (d_head + d_value) + seq_len_q)` per thread.
//!
//! For one head, with `s_ij = scale · q_i·k_j + bias_ij` (`−∞` where masked) and the forward's
//! `lse_i = ln Σ_j exp(s_ij)` and output `o_i`:
//!
//! ```text
//! p_ij  = exp(s_ij − lse_i)              the weight, recomputed
//! D_i   = do_i · o_i                     = Σ_j p_ij (do_i · v_j)
//! dv_j += p_ij · do_i
//! ds_ij = p_ij · (do_i · v_j − D_i)      softmax's derivative
//! dq_i += scale · ds_ij · k_j
//! dk_j += scale · ds_ij · q_i
//! ```

use std::f32::consts::LOG2_E;

use rayon::prelude::*;

use super::exp::{exp2, mul_add};
use super::kernel::Problem;

/// Where a backward pass writes: the gradients of `q`, `k` and `v`, zeroed by the caller.
///
/// # Shapes
/// - `dq`: `[batch, n_heads, seq_len_q, d_head]`
/// - `dk`: `[batch, n_kv_heads, seq_len_kv, d_head]`
/// - `dv`: `[batch, n_kv_heads, seq_len_kv, d_value]`
pub(crate) struct Gradients<'a> {
    pub dq: &'a mut [f32],
    pub dk: &'a mut [f32],
    pub dv: &'a mut [f32],
}

/// Keys per block: the transposed key and value blocks of one task stay in L1/L2.
const BLOCK: usize = 64;

/// The gradients of `Σ context ∘ d_context` with respect to `q`, `k` and `v`.
///
/// Keys go block by block; each block of `k` and `v` is copied transposed, so that a query's
/// scores `q_i · k_j` and `do_i · v_j` over the block are sums of contiguous, vectorisable
/// rows, and every update of `dq`, `dk` and `dv` is a contiguous `y += a · x`.
///
/// # Shapes
/// - `context`, `d_context`: `[batch, n_heads, seq_len_q, d_value]`
/// - `lse`: `[batch, n_heads, seq_len_q]`, `−∞` for rows whose keys are all masked
pub(crate) fn attention_backward(
    p: &Problem,
    context: &[f32],
    lse: &[f32],
    d_context: &[f32],
    grads: Gradients<'_>,
) {
    let group = p.n_heads / p.n_kv_heads;
    let (sq, skv, dh, dvl) = (p.seq_len_q, p.seq_len_kv, p.d_head, p.d_value);
    let inputs = Inputs {
        p,
        context,
        lse,
        d_context,
    };
    // One task per (batch, key/value head): it owns that head's dk and dv and the dq of the
    // query heads that share it, so no two tasks write the same value.
    grads
        .dq
        .par_chunks_mut(group * sq * dh)
        .zip(grads.dk.par_chunks_mut(skv * dh))
        .zip(grads.dv.par_chunks_mut(skv * dvl))
        .enumerate()
        .for_each(|(index, ((dq, dk), dv))| {
            let task = Task {
                inputs: &inputs,
                index,
                dq,
                dk,
                dv,
            };
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            if let Some(simd) = pulp::x86::V3::try_new() {
                // Compiled with AVX2 and FMA: the loops below vectorise eight lanes wide.
                return simd.vectorize(task);
            }
            task.run::<false>();
        });
}

/// What every task reads.
struct Inputs<'a, 'p> {
    p: &'a Problem<'p>,
    context: &'a [f32],
    lse: &'a [f32],
    d_context: &'a [f32],
}

/// The gradients of one (batch, key/value head).
struct Task<'a, 'p> {
    inputs: &'a Inputs<'a, 'p>,
    /// `batch · n_kv_heads + kv_head`.
    index: usize,
    /// `[group, seq_len_q, d_head]`: the query heads that share this key/value head.
    dq: &'a mut [f32],
    /// `[seq_len_kv, d_head]`.
    dk: &'a mut [f32],
    /// `[seq_len_kv, d_value]`.
    dv: &'a mut [f32],
}

impl pulp::NullaryFnOnce for Task<'_, '_> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        self.run::<true>();
    }
}

impl Task<'_, '_> {
    /// The backward pass of this task's heads; `FMA` where the caller proved the CPU has it.
    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let Inputs {
            p,
            context,
            lse,
            d_context,
        } = *self.inputs;
        let (dq, dk, dv) = (self.dq, self.dk, self.dv);
        let group = p.n_heads / p.n_kv_heads;
        let (sq, skv, dh, dvl) = (p.seq_len_q, p.seq_len_kv, p.d_head, p.d_value);
        let task = self.index;
        let (b, kv_head) = (task / p.n_kv_heads, task % p.n_kv_heads);
        let k = &p.k[task * skv * dh..][..skv * dh];
        let v = &p.v[task * skv * dvl..][..skv * dvl];
        let first_head = b * p.n_heads + kv_head * group;
        // D_i = do_i · o_i for every query row of the task's heads.
        let d: Vec<f32> = (0..group * sq)
            .map(|r| {
                let row = first_head * sq + r;
                dot(&d_context[row * dvl..][..dvl], &context[row * dvl..][..dvl])
            })
            .collect();
        let mut k_t = vec![0.0; dh * BLOCK]; // [d_head, BLOCK]
        let mut v_t = vec![0.0; dvl * BLOCK]; // [d_value, BLOCK]
        let mut weights = [0.0f32; BLOCK];
        let mut d_scores = [0.0f32; BLOCK];
        for j0 in (0..skv).step_by(BLOCK) {
            let n = BLOCK.min(skv - j0);
            transpose_into(&k[j0 * dh..][..n * dh], dh, &mut k_t);
            transpose_into(&v[j0 * dvl..][..n * dvl], dvl, &mut v_t);
            for g in 0..group {
                let h = kv_head * group + g;
                for i in 0..sq {
                    let row = (first_head + g) * sq + i;
                    let lse_i = lse[row];
                    if lse_i == f32::NEG_INFINITY {
                        continue; // every key masked: zero output, zero gradient
                    }
                    let q_i = &p.q[row * dh..][..dh];
                    let do_i = &d_context[row * dvl..][..dvl];
                    let (weights, d_scores) = (&mut weights[..n], &mut d_scores[..n]);
                    // q_i · k_j and do_i · v_j for the block's keys.
                    row_times_block::<FMA>(q_i, &k_t, weights);
                    row_times_block::<FMA>(do_i, &v_t, d_scores);
                    // p_ij = exp(s_ij − lse_i) = 2^((s_ij − lse_i) · log2 e); a masked key's
                    // −∞ gives exactly 0.
                    for (jj, w) in weights.iter_mut().enumerate() {
                        let j = j0 + jj;
                        *w = if is_masked(p, b, h, i, j) {
                            f32::NEG_INFINITY
                        } else {
                            let bias = p.bias.map_or(0.0, |bias| bias.at(b, h, i, j));
                            (p.scale * *w + bias - lse_i) * LOG2_E
                        };
                    }
                    for w in weights.iter_mut() {
                        *w = exp2::<FMA>(*w);
                    }
                    let d_i = d[g * sq + i];
                    for (ds, &p_ij) in d_scores.iter_mut().zip(weights.iter()) {
                        *ds = p_ij * (*ds - d_i) * p.scale;
                    }
                    let dq_i = &mut dq[(g * sq + i) * dh..][..dh];
                    for jj in 0..n {
                        let (p_ij, ds) = (weights[jj], d_scores[jj]);
                        if p_ij == 0.0 {
                            continue; // masked, or a weight below f32's range
                        }
                        let j = j0 + jj;
                        axpy::<FMA>(p_ij, do_i, &mut dv[j * dvl..][..dvl]);
                        axpy::<FMA>(ds, &k[j * dh..][..dh], dq_i);
                        axpy::<FMA>(ds, q_i, &mut dk[j * dh..][..dh]);
                    }
                }
            }
        }
    }
}

/// Copies `rows` (`n` rows of `width`) into `out` as `[width, BLOCK]`, column `r` = row `r`.
#[inline(always)]
fn transpose_into(rows: &[f32], width: usize, out: &mut [f32]) {
    for (r, row) in rows.chunks_exact(width).enumerate() {
        for (c, &x) in row.iter().enumerate() {
            out[c * BLOCK + r] = x;
        }
    }
}

/// `out[jj] = Σ_c x[c] · block_t[c, jj]`: one row against a transposed block, written as
/// contiguous `y += a · x` updates so that the compiler vectorises them.
#[inline(always)]
fn row_times_block<const FMA: bool>(x: &[f32], block_t: &[f32], out: &mut [f32]) {
    out.fill(0.0);
    let n = out.len();
    for (c, &a) in x.iter().enumerate() {
        axpy::<FMA>(a, &block_t[c * BLOCK..][..n], out);
    }
}

/// Whether key `j` is hidden from query `i` of head `h`, by the mask or by causality.
#[inline(always)]
fn is_masked(p: &Problem, b: usize, h: usize, i: usize, j: usize) -> bool {
    let causal = p
        .causal_offset
        .is_some_and(|offset| j as i64 > i as i64 + offset);
    causal || p.mask.is_some_and(|mask| mask.at(b, h, i, j))
}

#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `y += a · x`.
#[inline(always)]
fn axpy<const FMA: bool>(a: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = mul_add::<FMA>(a, *x, *y);
    }
}
