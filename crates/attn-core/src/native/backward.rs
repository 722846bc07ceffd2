//! The backward pass of attention from the forward's log-sum-exp, FlashAttention-2 style:
//! the weights are recomputed one score at a time and never stored, so the memory beyond the
//! gradients themselves is `O(d_head + d_value)` per thread.
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

use rayon::prelude::*;

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

/// The gradients of `Σ context ∘ d_context` with respect to `q`, `k` and `v`.
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
    // One task per (batch, key/value head): it owns that head's dk and dv and the dq of the
    // query heads that share it, so no two tasks write the same value.
    grads
        .dq
        .par_chunks_mut(group * sq * dh)
        .zip(grads.dk.par_chunks_mut(skv * dh))
        .zip(grads.dv.par_chunks_mut(skv * dvl))
        .enumerate()
        .for_each(|(task, ((dq, dk), dv))| {
            let (b, kv_head) = (task / p.n_kv_heads, task % p.n_kv_heads);
            let k = &p.k[task * skv * dh..][..skv * dh];
            let v = &p.v[task * skv * dvl..][..skv * dvl];
            for g in 0..group {
                let h = kv_head * group + g;
                let head = b * p.n_heads + h;
                for i in 0..sq {
                    let row = head * sq + i;
                    let lse_i = lse[row];
                    if lse_i == f32::NEG_INFINITY {
                        continue; // every key masked: zero output, zero gradient
                    }
                    let q_i = &p.q[row * dh..][..dh];
                    let o_i = &context[row * dvl..][..dvl];
                    let do_i = &d_context[row * dvl..][..dvl];
                    let d_i = dot(do_i, o_i);
                    let dq_i = &mut dq[(g * sq + i) * dh..][..dh];
                    for j in 0..skv {
                        if is_masked(p, b, h, i, j) {
                            continue;
                        }
                        let k_j = &k[j * dh..][..dh];
                        let v_j = &v[j * dvl..][..dvl];
                        let bias = p.bias.map_or(0.0, |bias| bias.at(b, h, i, j));
                        let p_ij = (p.scale * dot(q_i, k_j) + bias - lse_i).exp();
                        axpy(p_ij, do_i, &mut dv[j * dvl..][..dvl]);
                        let ds = p_ij * (dot(do_i, v_j) - d_i) * p.scale;
                        axpy(ds, k_j, dq_i);
                        axpy(ds, q_i, &mut dk[j * dh..][..dh]);
                    }
                }
            }
        });
}

/// Whether key `j` is hidden from query `i` of head `h`, by the mask or by causality.
fn is_masked(p: &Problem, b: usize, h: usize, i: usize, j: usize) -> bool {
    let causal = p
        .causal_offset
        .is_some_and(|offset| j as i64 > i as i64 + offset);
    causal || p.mask.is_some_and(|mask| mask.at(b, h, i, j))
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `y += a · x`.
fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}
