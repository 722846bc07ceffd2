//! The backward pass of attention from the forward's log-sum-exp, FlashAttention-2 style:
//! the weights are recomputed block by block and never stored, so the memory beyond the
//! gradients themselves is `O(block² + seq_len · (d_head + d_value))` per head.
//!
//! For one head, with `s_ij = scale · q_i·k_j + bias_ij` (`−∞` where masked) and the forward's
//! `lse_i = ln Σ_j exp(s_ij)` and output `o_i`, over blocks `I` of queries and `J` of keys:
//!
//! ```text
//! P_IJ  = exp(S_IJ − lse_I)             the weights, recomputed        [BR, BC]
//! D_i   = do_i · o_i                    = Σ_j p_ij (do_i · v_j)
//! dP_IJ = dO_I · V_Jᵀ                                                  [BR, BC]
//! dS_IJ = P_IJ ∘ (dP_IJ − D_I) · scale  softmax's derivative
//! dV_J += P_IJᵀ · dO_I      dK_J += dS_IJᵀ · Q_I      dQ_I += dS_IJ · K_J
//! ```
//!
//! All five products run on the SIMD layer's register-blocked micro-kernel
//! ([`Kernels::accumulate_tile`], through [`Gemm`]), with the operand it streams packed in panels of [`NR`]
//! columns. `dV_J` and `dK_J` are accumulated transposed (`dV_Jᵀ += dO_Iᵀ · P_IJ`), so the
//! weights are packed straight from their rows and nothing of size `[BR, BC]` is transposed.
//! `S_IJ` and `dP_IJ` are written over their buffers (`Gemm::overwrite`), not zeroed and then
//! accumulated, and the queries are scaled by `scale · log2 e` once per head, as the forward
//! scales them, so `S_IJ` comes out of its product already in base 2.
//! Causal attention skips the blocks above the diagonal. One task per (batch, query head),
//! or per (batch, query head, range of keys) where that many tasks would leave threads idle
//! ([`BackwardBlocks`]: the block sizes and the cut come from the machine); heads that share a
//! key/value head, and the key ranges of one head, add their shares at the end.

use std::cell::RefCell;

use rayon::prelude::*;

use crate::aligned::AlignedBuf;
use crate::instructions::Instructions;
use crate::problem::{Problem, Rows, add_scaled, apply_mask};
use crate::simd::{Gemm, Kernels, MR, NR, Pass};
use crate::tiling::{BackwardBlocks, KEY_STEP};

/// Where a backward pass writes: the gradients of `q`, `k` and `v`, zeroed by the caller.
///
/// # Shapes
/// - `dq`: `[batch, n_heads, seq_len_q, d_head]`
/// - `dk`: `[batch, n_kv_heads, seq_len_kv, d_head]`
/// - `dv`: `[batch, n_kv_heads, seq_len_kv, d_value]`
pub struct Gradients<'a> {
    /// `∂L/∂q`.
    pub dq: &'a mut [f32],
    /// `∂L/∂k`.
    pub dk: &'a mut [f32],
    /// `∂L/∂v`.
    pub dv: &'a mut [f32],
}

/// The gradients of `Σ context ∘ d_context` with respect to `q`, `k` and `v`.
///
/// # Shapes
/// - `context`, `d_context`: `[batch, n_heads, seq_len_q, d_value]`
/// - `lse`: `[batch, n_heads, seq_len_q]`, `−∞` for rows whose keys are all masked
pub fn attention_backward(
    p: &Problem,
    context: Rows<'_>,
    lse: &[f32],
    d_context: Rows<'_>,
    grads: Gradients<'_>,
) {
    let blocks = BackwardBlocks::for_problem(p);
    backward_with(
        p,
        context,
        lse,
        d_context,
        grads,
        Instructions::Best,
        blocks,
    );
}

pub(crate) fn backward_with(
    p: &Problem,
    context: Rows<'_>,
    lse: &[f32],
    d_context: Rows<'_>,
    grads: Gradients<'_>,
    instructions: Instructions,
    blocks: BackwardBlocks,
) {
    let Problem {
        seq_len_q,
        seq_len_kv,
        d_head,
        d_value,
        ..
    } = *p;
    if grads.dq.is_empty() && grads.dk.is_empty() {
        return;
    }
    let inputs = Inputs {
        p,
        context,
        lse,
        d_context,
        blocks,
    };
    let run =
        |head: usize, keys: (usize, usize), dq: &mut [f32], dk: &mut [f32], dv: &mut [f32]| {
            WORKSPACE.with_borrow_mut(|workspace| {
                let mut task = BackwardTask {
                    inputs: &inputs,
                    head,
                    keys,
                    dq,
                    dk,
                    dv,
                    workspace,
                };
                instructions.run(&mut task);
                if workspace.bytes() > KEEP_BYTES {
                    *workspace = Workspace::default();
                }
            });
        };
    let group = p.n_heads / p.n_kv_heads;
    let ranges: Vec<(usize, usize)> = blocks.key_ranges(seq_len_kv).collect();
    if group == 1 && ranges.len() == 1 {
        // One task per (batch, head), owning that head's rows of dq, dk and dv.
        grads
            .dq
            .par_chunks_mut(seq_len_q * d_head)
            .zip(grads.dk.par_chunks_mut(seq_len_kv * d_head))
            .zip(grads.dv.par_chunks_mut(seq_len_kv * d_value))
            .enumerate()
            .for_each(|(head, ((dq, dk), dv))| run(head, (0, seq_len_kv), dq, dk, dv));
        return;
    }
    // Grouped heads, or heads cut into key ranges: one task per (batch, query head, key range),
    // returning its share of dq and its keys' share of dk and dv, summed below in task order.
    let shares: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = (0..p.batch * p.n_heads * ranges.len())
        .into_par_iter()
        .map(|task| {
            let (head, (start, end)) = (task / ranges.len(), ranges[task % ranges.len()]);
            let mut dq = vec![0.0; seq_len_q * d_head];
            let mut dk = vec![0.0; (end - start) * d_head];
            let mut dv = vec![0.0; (end - start) * d_value];
            run(head, (start, end), &mut dq, &mut dk, &mut dv);
            (dq, dk, dv)
        })
        .collect();
    for (task, (dq, dk, dv)) in shares.into_iter().enumerate() {
        let (head, (start, end)) = (task / ranges.len(), ranges[task % ranges.len()]);
        let kv_head = head / group; // b · n_kv_heads + kv head
        add(
            &mut grads.dq[head * seq_len_q * d_head..][..seq_len_q * d_head],
            &dq,
        );
        let rows = kv_head * seq_len_kv + start;
        add(
            &mut grads.dk[rows * d_head..][..(end - start) * d_head],
            &dk,
        );
        add(
            &mut grads.dv[rows * d_value..][..(end - start) * d_value],
            &dv,
        );
    }
}

thread_local! {
    /// Each thread's [`Workspace`], kept from call to call (see `forward::SCRATCH` for why).
    static WORKSPACE: RefCell<Workspace> = RefCell::new(Workspace::default());
}

fn add(out: &mut [f32], x: &[f32]) {
    for (o, &x) in out.iter_mut().zip(x) {
        *o += x;
    }
}

/// What every task reads.
struct Inputs<'a, 'p> {
    p: &'a Problem<'p>,
    context: Rows<'a>,
    lse: &'a [f32],
    d_context: Rows<'a>,
    blocks: BackwardBlocks,
}

/// The gradients of one (batch, query head), from one range of its keys.
pub(crate) struct BackwardTask<'a, 'p> {
    inputs: &'a Inputs<'a, 'p>,
    /// `b · n_heads + h`.
    head: usize,
    /// The keys `[start, end)` this task covers: a multiple of the key block, and the end of
    /// a block or of the keys.
    keys: (usize, usize),
    /// This head's `dq` (or its share from these keys), `[seq_len_q, d_head]`.
    dq: &'a mut [f32],
    /// These keys' `dk` (or this head's share of them), `[end − start, d_head]`.
    dk: &'a mut [f32],
    /// These keys' `dv` (or share), `[end − start, d_value]`.
    dv: &'a mut [f32],
    workspace: &'a mut Workspace,
}

/// A task's buffers: one head's operands, padded with zeros and laid out for the
/// micro-kernel (row-major operands with row counts rounded up to [`MR`], streamed operands in
/// panels of [`NR`]), its accumulators and one block pair's scratch. Sizes ending in `_mr` are
/// rounded up to a multiple of [`MR`], in `_nr` to one of [`NR`], `seq_len_kv_padded` to one of
/// [`KEY_STEP`].
#[derive(Default)]
pub(crate) struct Workspace {
    /// `q`, `[seq_len_q_mr, d_head]`.
    q: AlignedBuf,
    /// `qᵀ` by blocks of queries, `[n_query_blocks][d_head_mr][BR]`.
    q_t: AlignedBuf,
    /// `do`, `[seq_len_q_mr, d_value]`.
    d_out: AlignedBuf,
    /// `doᵀ` by blocks of queries, `[n_query_blocks][d_value_mr][BR]`.
    d_out_t: AlignedBuf,
    /// `k`, `[seq_len_kv, d_head]`, and `v`, `[seq_len_kv, d_value]`, gathered row by row
    /// from wherever their rows lie, so that the packing passes below read them from cache.
    k_rows: AlignedBuf,
    v_rows: AlignedBuf,
    /// `kᵀ` in panels of keys, `[seq_len_kv_padded / NR][d_head][NR]` (for `S = Q·Kᵀ`).
    k_t_panels: AlignedBuf,
    /// `vᵀ` in panels of keys, `[seq_len_kv_padded / NR][d_value][NR]` (for `dP = dO·Vᵀ`).
    v_t_panels: AlignedBuf,
    /// `k` in panels of `d_head` columns, `[d_head_nr / NR][seq_len_kv_padded][NR]` (for `dQ += dS·K`).
    k_panels: AlignedBuf,
    /// `dq`, `[seq_len_q_mr, d_head_nr]`.
    dq: AlignedBuf,
    /// `dkᵀ` by blocks of keys, `[n_key_blocks][d_head_mr][BC]`.
    dk_t: AlignedBuf,
    /// `dvᵀ` by blocks of keys, `[n_key_blocks][d_value_mr][BC]`.
    dv_t: AlignedBuf,
    /// `S`, then `P`, of one block pair: `[BR, BC]`.
    s: AlignedBuf,
    /// `dP`, then `dS`: `[BR, BC]`.
    dp: AlignedBuf,
    /// `P` as `[BC / NR][BR][NR]`.
    p_panels: AlignedBuf,
    /// `dS` as `[BC / NR][BR][NR]`.
    ds_panels: AlignedBuf,
}

/// A thread keeps its [`Workspace`] between calls up to this size; a larger one (long
/// sequences, where an allocation costs little next to the work) is freed after the task.
const KEEP_BYTES: usize = 16 << 20;

impl Workspace {
    /// The bytes its buffers hold.
    fn bytes(&self) -> usize {
        let buffers = [
            &self.q,
            &self.q_t,
            &self.d_out,
            &self.d_out_t,
            &self.k_rows,
            &self.v_rows,
            &self.k_t_panels,
            &self.v_t_panels,
            &self.k_panels,
            &self.dq,
            &self.dk_t,
            &self.dv_t,
            &self.s,
            &self.dp,
            &self.p_panels,
            &self.ds_panels,
        ];
        buffers.iter().map(|b| b.capacity()).sum::<usize>() * size_of::<f32>()
    }
}

/// Copies `rows` (`n` rows of `width`) into `[n_p, width]` (zeros past `n`).
fn padded_rows<'a>(
    out: &mut AlignedBuf,
    rows: impl Iterator<Item = &'a [f32]>,
    width: usize,
    n_p: usize,
) {
    let out = out.zeroed(n_p * width);
    for (row, dst) in rows.zip(out.chunks_exact_mut(width.max(1))) {
        dst.copy_from_slice(row);
    }
}

/// `rows` (`n` rows of `width`) transposed block by block: `[n_blocks][width_p][block]`,
/// block `t` holding rows `t·block..(t+1)·block` as columns (zeros past the edges).
///
/// Short row strides keep the micro-kernel's six rows of `a` and of `c` off the same cache
/// sets: a stride of `seq_len` floats, a power of two in the usual cases, would map them all
/// to one set of L1.
fn transposed_blocks<'a>(
    out: &mut AlignedBuf,
    rows: impl ExactSizeIterator<Item = &'a [f32]>,
    width_p: usize,
    block: usize,
) {
    let n_blocks = rows.len().div_ceil(block);
    transposed_blocks_into(out.zeroed(n_blocks * width_p * block), rows, width_p, block);
}

/// [`transposed_blocks`] into `out`, zeros, at least as long as the blocks.
fn transposed_blocks_into<'a>(
    out: &mut [f32],
    rows: impl ExactSizeIterator<Item = &'a [f32]>,
    width_p: usize,
    block: usize,
) {
    // Up to GROUP rows of one block at a time, GROUP columns at a time: read along the rows
    // into a local tile, written out along the columns as runs of up to GROUP values. Writing
    // each value straight to its column scattered one store per value over `width` cache lines.
    const GROUP: usize = 16;
    let mut rows = rows.enumerate();
    let mut group: [&[f32]; GROUP] = [&[]; GROUP];
    loop {
        let (mut n, mut first) = (0, 0);
        for (r, row) in rows.by_ref() {
            if n == 0 {
                first = r;
            }
            group[n] = row;
            n += 1;
            if n == GROUP || (r + 1) % block == 0 {
                break;
            }
        }
        if n == 0 {
            return;
        }
        let (tile, r0) = (&mut out[(first / block) * width_p * block..], first % block);
        let width = group[0].len();
        for c0 in (0..width).step_by(GROUP) {
            let columns = GROUP.min(width - c0);
            let mut local = [[0.0f32; GROUP]; GROUP];
            for (r, row) in group[..n].iter().enumerate() {
                for (c, &x) in row[c0..][..columns].iter().enumerate() {
                    local[c][r] = x;
                }
            }
            for (c, column) in local[..columns].iter().enumerate() {
                tile[(c0 + c) * block + r0..][..n].copy_from_slice(&column[..n]);
            }
        }
    }
}

/// `rows` (`n` rows of `width`) as `[n_p / NR][width][NR]`: panel `t` holds rows
/// `t·NR..(t+1)·NR` as columns (zeros past `n`).
fn row_panels<'a>(
    out: &mut AlignedBuf,
    rows: impl ExactSizeIterator<Item = &'a [f32]>,
    width: usize,
    n_p: usize,
) {
    // Blocks of NR rows transposed are exactly these panels, followed by zero panels up to
    // `n_p`.
    transposed_blocks_into(out.zeroed(n_p * width), rows, width, NR);
}

/// `rows` (`n` rows of `width`) as `[width_p / NR][n_p][NR]`: panel `t` holds columns
/// `t·NR..(t+1)·NR` of every row (zeros past the edges).
fn column_panels<'a>(
    out: &mut AlignedBuf,
    rows: impl Iterator<Item = &'a [f32]>,
    width_p: usize,
    n_p: usize,
) {
    let out = out.zeroed(width_p * n_p);
    for (r, row) in rows.enumerate() {
        for (c, &x) in row.iter().enumerate() {
            out[((c / NR) * n_p + r) * NR + c % NR] = x;
        }
    }
}

impl Pass for &mut BackwardTask<'_, '_> {
    /// The loop over key blocks and, inside, query blocks.
    #[inline(always)]
    fn run<K: Kernels>(self, kernels: K) {
        let Inputs {
            p,
            context,
            lse,
            d_context,
            blocks,
        } = *self.inputs;
        let head = self.head;
        let (key_start, key_end) = self.keys;
        // Queries per block (a multiple of MR: rows of the S, dP and dQ products) and keys per
        // block (a multiple of KEY_STEP: columns of S and dP), named as in the papers.
        #[allow(non_snake_case)]
        let (BR, BC) = (blocks.queries, blocks.keys);
        let (b, h) = (head / p.n_heads, head % p.n_heads);
        let kv_head = b * p.n_kv_heads + h / (p.n_heads / p.n_kv_heads);
        let Problem {
            seq_len_q,
            seq_len_kv,
            d_head,
            d_value,
            ..
        } = *p;
        // Padded sizes: `_mr` rounded up to a multiple of MR, `_nr` of NR; keys to KEY_STEP.
        let seq_len_q_mr = seq_len_q.next_multiple_of(MR);
        let seq_len_kv_padded = seq_len_kv.next_multiple_of(KEY_STEP);
        // The transposed accumulators keep whole blocks of BC columns (row stride BC).
        let seq_len_kv_blocks = seq_len_kv.next_multiple_of(BC);
        let (d_head_mr, d_value_mr) = (d_head.next_multiple_of(MR), d_value.next_multiple_of(MR));
        let d_head_nr = d_head.next_multiple_of(NR);
        let to_base_2 = std::f32::consts::LOG2_E;

        let q = p.q.head(head).range(0, seq_len_q);
        let k = p.k.head(kv_head).range(0, seq_len_kv);
        let v = p.v.head(kv_head).range(0, seq_len_kv);
        let d_out = d_context.head(head).range(0, seq_len_q);
        let out = context.head(head).range(0, seq_len_q);
        let lse = &lse[head * seq_len_q..][..seq_len_q];
        let Workspace {
            q: q_rows,
            q_t,
            d_out: d_out_rows,
            d_out_t,
            k_rows,
            v_rows,
            k_t_panels,
            v_t_panels,
            k_panels,
            dq,
            dk_t,
            dv_t,
            s,
            dp,
            p_panels,
            ds_panels,
        } = &mut *self.workspace;
        // Each input is read once from where it lies (its rows may be strided: the heads split
        // off a projection) into a contiguous buffer; every other layout is packed from that.
        // A row copy reads its cache lines with wide loads, many rows in flight; the scattering
        // passes below, reading strided rows directly, waited on each row in turn.
        padded_rows(q_rows, q, d_head, seq_len_q_mr);
        padded_rows(d_out_rows, d_out, d_value, seq_len_q_mr);
        padded_rows(k_rows, k, d_head, seq_len_kv);
        padded_rows(v_rows, v, d_value, seq_len_kv);
        fn rows(
            buffer: &[f32],
            n: usize,
            width: usize,
        ) -> impl ExactSizeIterator<Item = &[f32]> + Clone {
            buffer[..n * width].chunks_exact(width.max(1)).take(n)
        }
        let (q, d_out) = (
            rows(q_rows, seq_len_q, d_head),
            rows(d_out_rows, seq_len_q, d_value),
        );
        let (k, v) = (
            rows(k_rows, seq_len_kv, d_head),
            rows(v_rows, seq_len_kv, d_value),
        );
        transposed_blocks(q_t, q, d_head_mr, BR);
        transposed_blocks(d_out_t, d_out.clone(), d_value_mr, BR);
        row_panels(k_t_panels, k.clone(), d_head, seq_len_kv_padded);
        row_panels(v_t_panels, v, d_value, seq_len_kv_padded);
        column_panels(k_panels, k, d_head_nr, seq_len_kv_padded);
        // The queries scaled once by `scale · log2 e`, as the forward scales them, so that `S`
        // comes out of its product in base 2 (`q_t`, for `dK`, keeps them as they were).
        let q_scale = p.scale * to_base_2;
        for x in q_rows.iter_mut() {
            *x *= q_scale;
        }
        // D_i = do_i · o_i; lse in base 2.
        let d: Vec<f32> = d_out
            .zip(out)
            .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x * y).sum())
            .collect();
        let lse_2: Vec<f32> = lse.iter().map(|&l| l * to_base_2).collect();

        let dq = dq.zeroed(seq_len_q_mr * d_head_nr);
        let dk_t = dk_t.zeroed(d_head_mr * seq_len_kv_blocks);
        let dv_t = dv_t.zeroed(d_value_mr * seq_len_kv_blocks);
        let s = s.zeroed(BR * BC);
        let dp = dp.zeroed(BR * BC);
        let p_panels = p_panels.zeroed(BC * BR);
        let ds_panels = ds_panels.zeroed(BC * BR);

        // The last range runs on into the padding; the others end on a block edge.
        let blocks_end = if key_end == seq_len_kv {
            seq_len_kv_padded
        } else {
            key_end
        };
        for j0 in (key_start..blocks_end).step_by(BC) {
            let bc = BC.min(seq_len_kv_padded - j0);
            let keys = (seq_len_kv - j0).min(bc); // real keys in the block
            for i0 in (0..seq_len_q_mr).step_by(BR) {
                let br = BR.min(seq_len_q_mr - i0);
                // Causal: the block's last query sees keys up to `i0 + br − 1 + offset`.
                if p.causal_offset
                    .is_some_and(|offset| j0 as i64 > (i0 + br) as i64 - 1 + offset)
                {
                    continue;
                }
                // S = Q_I · K_Jᵀ (the queries already scaled) and dP = dO_I · V_Jᵀ: [br, bc],
                // written over what the buffers held.
                let (s, dp) = (&mut s[..br * BC], &mut dp[..br * BC]);
                let a = &q_rows[i0 * d_head..];
                let panels = &k_t_panels[j0 * d_head..];
                kernels.gemm(Gemm {
                    m: br,
                    n: bc,
                    k: d_head,
                    a,
                    lda: d_head,
                    b: panels,
                    panel_stride: d_head * NR,
                    c: s,
                    ldc: BC,
                    overwrite: true,
                });
                let a = &d_out_rows[i0 * d_value..];
                let panels = &v_t_panels[j0 * d_value..];
                kernels.gemm(Gemm {
                    m: br,
                    n: bc,
                    k: d_value,
                    a,
                    lda: d_value,
                    b: panels,
                    panel_stride: d_value * NR,
                    c: dp,
                    ldc: BC,
                    overwrite: true,
                });

                for r in 0..br {
                    let i = i0 + r;
                    let (s_row, dp_row) = (&mut s[r * BC..][..bc], &mut dp[r * BC..][..bc]);
                    if i >= seq_len_q || lse[i] == f32::NEG_INFINITY {
                        // Padding, or every key masked: zero output, zero gradient.
                        s_row.fill(0.0);
                        dp_row.fill(0.0);
                    } else {
                        let visible = match p.causal_offset {
                            Some(offset) => {
                                (i as i64 + offset + 1 - j0 as i64).clamp(0, keys as i64) as usize
                            }
                            None => keys,
                        };
                        let (seen, hidden) = s_row.split_at_mut(visible);
                        if let Some(bias) = &p.bias {
                            add_scaled(seen, bias.row(b, h, i, j0, visible), to_base_2);
                        }
                        if let Some(mask) = &p.mask {
                            apply_mask(seen, mask.row(b, h, i, j0, visible));
                        }
                        hidden.fill(f32::NEG_INFINITY);
                        // P = 2^(S·log2 e − lse·log2 e); −∞ gives exactly 0.
                        kernels.exp2_in_place(s_row, lse_2[i]);
                        for (ds, &w) in dp_row.iter_mut().zip(s_row.iter()) {
                            *ds = w * (*ds - d[i]) * p.scale;
                        }
                    }
                    for panel in 0..bc / NR {
                        let at = (panel * BR + r) * NR;
                        p_panels[at..][..NR].copy_from_slice(&s_row[panel * NR..][..NR]);
                        ds_panels[at..][..NR].copy_from_slice(&dp_row[panel * NR..][..NR]);
                    }
                }

                // dV_Jᵀ += dO_Iᵀ · P and dK_Jᵀ += Q_Iᵀ · dS: [d, bc], k = br.
                let a = &d_out_t[i0 * d_value_mr..];
                let c = &mut dv_t[j0 * d_value_mr..];
                kernels.gemm(Gemm {
                    m: d_value_mr,
                    n: bc,
                    k: br,
                    a,
                    lda: BR,
                    b: p_panels,
                    panel_stride: BR * NR,
                    c,
                    ldc: BC,
                    overwrite: false,
                });
                let a = &q_t[i0 * d_head_mr..];
                let c = &mut dk_t[j0 * d_head_mr..];
                kernels.gemm(Gemm {
                    m: d_head_mr,
                    n: bc,
                    k: br,
                    a,
                    lda: BR,
                    b: ds_panels,
                    panel_stride: BR * NR,
                    c,
                    ldc: BC,
                    overwrite: false,
                });
                // dQ_I += dS · K_J: [br, d_head_nr], k = bc.
                let panels = &k_panels[j0 * NR..];
                let c = &mut dq[i0 * d_head_nr..];
                kernels.gemm(Gemm {
                    m: br,
                    n: d_head_nr,
                    k: bc,
                    a: dp,
                    lda: BC,
                    b: panels,
                    panel_stride: seq_len_kv_padded * NR,
                    c,
                    ldc: d_head_nr,
                    overwrite: false,
                });
            }
        }

        for (i, row) in self.dq.chunks_exact_mut(d_head).enumerate() {
            row.copy_from_slice(&dq[i * d_head_nr..][..d_head]);
        }
        for j in key_start..key_end {
            let (tile, col) = (j / BC * BC, j % BC);
            let row = j - key_start;
            for c in 0..d_head {
                self.dk[row * d_head + c] = dk_t[tile * d_head_mr + c * BC + col];
            }
            for c in 0..d_value {
                self.dv[row * d_value + c] = dv_t[tile * d_value_mr + c * BC + col];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::{Broadcast, TokenMajor};
    use crate::testing::SeededRng;

    /// Each value lands where the layout says: row `r`, column `c` at
    /// `[r / block][c][r % block]`, zeros everywhere else (padding columns, rows past the end),
    /// whatever the buffer held before; for blocks shorter and longer than the copy's groups of
    /// sixteen rows and widths on either side of its sixteen columns.
    #[test]
    fn transposed_blocks_puts_every_value_in_its_place() {
        let mut rng = SeededRng::new(5);
        let mut out = AlignedBuf::default();
        out.fit(7).fill(f32::NAN);
        for (n, width, width_p, block) in [
            (1, 1, 1, 6),
            (13, 5, 6, 6),
            (40, 17, 18, 16),
            (100, 32, 36, 96),
            (250, 33, 36, 192),
            (37, 64, 64, 16),
        ] {
            let values: Vec<f32> = (0..n * width).map(|_| rng.unit() + 1.0).collect();
            transposed_blocks(&mut out, values.chunks_exact(width), width_p, block);
            let n_blocks = n.div_ceil(block);
            assert_eq!(
                out.len(),
                n_blocks * width_p * block,
                "{n} × {width}, block {block}"
            );
            let mut want = vec![0.0; out.len()];
            for r in 0..n {
                for c in 0..width {
                    want[(r / block) * width_p * block + c * block + r % block] =
                        values[r * width + c];
                }
            }
            assert_eq!(*out, want[..], "{n} × {width}, block {block}");
        }
    }

    #[test]
    fn both_instruction_sets_match_the_definition_across_block_edges() {
        let mut rng = SeededRng::new(23);
        let values =
            |rng: &mut SeededRng, n: usize| -> Vec<f32> { (0..n).map(|_| rng.unit()).collect() };
        // Lengths on and off the block edges (6 to 192 queries, 16 to 192 keys), odd head sizes,
        // grouped heads, a mask, a bias and both causal offsets.
        for (trial, &(seq_len_q, seq_len_kv, d_head, d_value)) in [
            (5, 7, 3, 5),
            (97, 100, 17, 9),
            (96, 192, 16, 16),
            (130, 97, 8, 20),
        ]
        .iter()
        .enumerate()
        {
            let (batch, n_kv_heads, group) = (1, 2, 1 + trial % 2);
            let n_heads = n_kv_heads * group;
            let q = values(&mut rng, batch * n_heads * seq_len_q * d_head);
            let k = values(&mut rng, batch * n_kv_heads * seq_len_kv * d_head);
            let v = values(&mut rng, batch * n_kv_heads * seq_len_kv * d_value);
            let mask: Vec<bool> = (0..seq_len_q * seq_len_kv)
                .map(|_| rng.unit() > 0.8)
                .collect();
            let bias = values(&mut rng, n_heads * seq_len_q * seq_len_kv);
            let causal_offset = match trial % 3 {
                0 => None,
                1 => Some(0),
                _ => Some(seq_len_kv as i64 - seq_len_q as i64),
            };
            let q_dims = [batch, n_heads, seq_len_q, d_head];
            let k_dims = [batch, n_kv_heads, seq_len_kv, d_head];
            let v_dims = [batch, n_kv_heads, seq_len_kv, d_value];
            let p = Problem {
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
                scale: 0.4,
                mask: Some(Broadcast::new(&mask, [1, 1, seq_len_q, seq_len_kv])),
                bias: Some(Broadcast::new(&bias, [1, n_heads, seq_len_q, seq_len_kv])),
                causal_offset,
            };
            let mut context = vec![0.0; batch * n_heads * seq_len_q * d_value];
            let mut lse = vec![0.0; batch * n_heads * seq_len_q];
            crate::forward::attention(&p, &mut context, Some(&mut lse));
            let d_out = values(&mut rng, context.len());
            let expected = crate::oracle::attention_backward(&p, &context, &d_out);
            // The same inputs (and `d_context`) token-major, as heads split off a projection
            // are read in place, with a gap after each row.
            let out_dims = [batch, n_heads, seq_len_q, d_value];
            let scattered = [(&q, q_dims), (&k, k_dims), (&v, v_dims), (&d_out, out_dims)]
                .map(|(values, dims)| TokenMajor::new(values, dims, 1 + trial % 2));
            let token_major_problem = Problem {
                q: scattered[0].rows(),
                k: scattered[1].rows(),
                v: scattered[2].rows(),
                ..p
            };
            // The blocks this machine picks; the smallest, one head cut into key ranges of one
            // block each; and the largest.
            let blocks = [
                BackwardBlocks::for_problem(&p),
                BackwardBlocks {
                    queries: MR,
                    keys: KEY_STEP,
                    key_blocks_per_task: 1,
                },
                BackwardBlocks {
                    queries: 32 * MR,
                    keys: 12 * KEY_STEP,
                    key_blocks_per_task: 1,
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
                let mut dq = vec![0.0; q.len()];
                let mut dk = vec![0.0; k.len()];
                let mut dv = vec![0.0; v.len()];
                let grads = Gradients {
                    dq: &mut dq,
                    dk: &mut dk,
                    dv: &mut dv,
                };
                let context = Rows::row_major(&context, out_dims);
                let (layout, problem, d_out) = if run % 2 == 0 {
                    ("row-major", &p, Rows::row_major(&d_out, out_dims))
                } else {
                    ("token-major", &token_major_problem, scattered[3].rows())
                };
                backward_with(problem, context, &lse, d_out, grads, instructions, blocks);
                for (name, got, want) in [
                    ("dq", &dq, &expected[0]),
                    ("dk", &dk, &expected[1]),
                    ("dv", &dv, &expected[2]),
                ] {
                    for (x, (&g, &w)) in got.iter().zip(want).enumerate() {
                        assert!(
                            (f64::from(g) - w).abs() <= 1e-4 + 1e-3 * w.abs(),
                            "trial {trial} {instructions:?} {blocks:?} {layout} {name}[{x}]: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}
