//! The mathematics of the kernels in `f64`, one value at a time, straight from the definitions:
//! the reference every kernel test compares against. Slow on purpose, and short enough to check
//! by eye.
//!
//! ```text
//! s_ij    = q_i · k_j · scale + bias_ij          (−∞ where masked or j > i + causal offset)
//! w_ij    = exp(s_ij − lse_i),  lse_i = ln Σ_j exp(s_ij)
//! o_i     = Σ_j w_ij v_j
//! ∂L/∂v_j = Σ_i w_ij dO_i
//! ∂L/∂s_ij = w_ij (dO_i · v_j − dO_i · o_i)
//! ∂L/∂q_i = Σ_j ∂L/∂s_ij · scale · k_j,   ∂L/∂k_j = Σ_i ∂L/∂s_ij · scale · q_i
//! ```
//!
//! Rows whose keys are all masked have no weights: their context and gradients are zero and
//! their log-sum-exp is `−∞`.

use crate::Problem;

/// The scores of query `i` of head `h` in batch `b`, `None` where the key is masked.
pub fn scores(p: &Problem, b: usize, h: usize, i: usize) -> Vec<Option<f64>> {
    let head = b * p.n_heads + h;
    let kv_head = b * p.n_kv_heads + h / (p.n_heads / p.n_kv_heads);
    let q = p.q.head(head).row(i);
    (0..p.seq_len_kv)
        .map(|j| {
            let causal = p.causal_offset.is_some_and(|o| j as i64 > i as i64 + o);
            if causal || p.mask.is_some_and(|m| m.at(b, h, i, j)) {
                return None;
            }
            let k = p.k.head(kv_head).row(j);
            let dot: f64 = q
                .iter()
                .zip(k)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            let bias = p.bias.map_or(0.0, |x| f64::from(x.at(b, h, i, j)));
            Some(dot * f64::from(p.scale) + bias)
        })
        .collect()
}

/// The softmax of one row of [`scores`] (zero where masked) and its log-sum-exp; `None` when
/// every key is masked.
pub fn softmax(scores: &[Option<f64>]) -> Option<(Vec<f64>, f64)> {
    let max = scores
        .iter()
        .flatten()
        .fold(f64::NEG_INFINITY, |a, &s| a.max(s));
    if max == f64::NEG_INFINITY {
        return None;
    }
    let total: f64 = scores.iter().flatten().map(|s| (s - max).exp()).sum();
    let weights = scores
        .iter()
        .map(|s| s.map_or(0.0, |s| (s - max).exp() / total))
        .collect();
    Some((weights, max + total.ln()))
}

/// The context `[batch, n_heads, seq_len_q, d_value]` and the log-sum-exp
/// `[batch, n_heads, seq_len_q]` of `p`, rounded to `f32` at the end.
pub fn attention(p: &Problem) -> (Vec<f32>, Vec<f32>) {
    let mut context = vec![0.0; p.batch * p.n_heads * p.seq_len_q * p.d_value];
    let mut lse = vec![f32::NEG_INFINITY; p.batch * p.n_heads * p.seq_len_q];
    for b in 0..p.batch {
        for h in 0..p.n_heads {
            let kv_head = b * p.n_kv_heads + h / (p.n_heads / p.n_kv_heads);
            for i in 0..p.seq_len_q {
                let row = (b * p.n_heads + h) * p.seq_len_q + i;
                let Some((weights, row_lse)) = softmax(&scores(p, b, h, i)) else {
                    continue;
                };
                lse[row] = row_lse as f32;
                for c in 0..p.d_value {
                    let value = |j: usize| f64::from(p.v.head(kv_head).row(j)[c]);
                    let out: f64 = weights.iter().enumerate().map(|(j, w)| w * value(j)).sum();
                    context[row * p.d_value + c] = out as f32;
                }
            }
        }
    }
    (context, lse)
}

/// The gradients `[dq, dk, dv]` of `Σ context ∘ d_context`, shaped like `q`, `k` and `v`
/// (row-major), given the forward's `context` and `d_context`, both
/// `[batch, n_heads, seq_len_q, d_value]` row-major.
pub fn attention_backward(p: &Problem, context: &[f32], d_context: &[f32]) -> [Vec<f64>; 3] {
    let Problem {
        seq_len_q,
        seq_len_kv,
        d_head,
        d_value,
        ..
    } = *p;
    let mut dq = vec![0.0; p.batch * p.n_heads * seq_len_q * d_head];
    let mut dk = vec![0.0; p.batch * p.n_kv_heads * seq_len_kv * d_head];
    let mut dv = vec![0.0; p.batch * p.n_kv_heads * seq_len_kv * d_value];
    for b in 0..p.batch {
        for h in 0..p.n_heads {
            let head = b * p.n_heads + h;
            let kv_head = b * p.n_kv_heads + h / (p.n_heads / p.n_kv_heads);
            for i in 0..seq_len_q {
                let Some((weights, _)) = softmax(&scores(p, b, h, i)) else {
                    continue;
                };
                let row = (head * seq_len_q + i) * d_value;
                let d_o = |c: usize| f64::from(d_context[row + c]);
                let d_i: f64 = (0..d_value)
                    .map(|c| d_o(c) * f64::from(context[row + c]))
                    .sum();
                for (j, &w) in weights.iter().enumerate() {
                    let value = p.v.head(kv_head).row(j);
                    let dp: f64 = (0..d_value).map(|c| d_o(c) * f64::from(value[c])).sum();
                    let ds = w * (dp - d_i) * f64::from(p.scale);
                    for c in 0..d_value {
                        dv[(kv_head * seq_len_kv + j) * d_value + c] += w * d_o(c);
                    }
                    for c in 0..d_head {
                        dq[(head * seq_len_q + i) * d_head + c] +=
                            ds * f64::from(p.k.head(kv_head).row(j)[c]);
                        dk[(kv_head * seq_len_kv + j) * d_head + c] +=
                            ds * f64::from(p.q.head(head).row(i)[c]);
                    }
                }
            }
        }
    }
    [dq, dk, dv]
}

/// LayerNorm of each row of `x` (`gamma.len()` values), `γ ∘ (x − μ) / √(σ² + ε) + β` with the
/// biased variance `σ²`.
pub fn layer_norm(x: &[f64], gamma: &[f64], beta: &[f64], epsilon: f64) -> Vec<f64> {
    let d = gamma.len();
    x.chunks(d)
        .flat_map(|row| {
            let mean = row.iter().sum::<f64>() / d as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
            let r = 1.0 / (var + epsilon).sqrt();
            row.iter()
                .zip(gamma.iter().zip(beta))
                .map(move |(v, (g, b))| (v - mean) * r * g + b)
        })
        .collect()
}

/// RMSNorm of each row of `x` (`gamma.len()` values), `γ ∘ x / √(mean(x²) + ε)`.
pub fn rms_norm(x: &[f64], gamma: &[f64], epsilon: f64) -> Vec<f64> {
    let d = gamma.len();
    x.chunks(d)
        .flat_map(|row| {
            let r = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / d as f64 + epsilon).sqrt();
            row.iter().zip(gamma).map(move |(v, g)| v * r * g)
        })
        .collect()
}

/// The gradients `[dx, dgamma, dbeta]` of `Σ layer_norm(x) ∘ dy`, by the chain rule written
/// out: `dx = r · (g − mean(g) − x̂ · mean(g ∘ x̂))` with `g = dy ∘ γ`.
pub fn layer_norm_backward(x: &[f64], gamma: &[f64], dy: &[f64], epsilon: f64) -> [Vec<f64>; 3] {
    let d = gamma.len();
    let (mut dgamma, mut dbeta, mut dx) = (vec![0.0; d], vec![0.0; d], Vec::with_capacity(x.len()));
    for (row, dy) in x.chunks(d).zip(dy.chunks(d)) {
        let mean = row.iter().sum::<f64>() / d as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
        let r = 1.0 / (var + epsilon).sqrt();
        let x_hat: Vec<f64> = row.iter().map(|v| (v - mean) * r).collect();
        let g: Vec<f64> = dy.iter().zip(gamma).map(|(dy, g)| dy * g).collect();
        let mean_g = g.iter().sum::<f64>() / d as f64;
        let mean_g_x_hat = g.iter().zip(&x_hat).map(|(g, x)| g * x).sum::<f64>() / d as f64;
        for c in 0..d {
            dgamma[c] += dy[c] * x_hat[c];
            dbeta[c] += dy[c];
            dx.push(r * (g[c] - mean_g - x_hat[c] * mean_g_x_hat));
        }
    }
    [dx, dgamma, dbeta]
}

/// GPT-2's GELU by its definition, `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`.
pub fn gelu_tanh(x: f64) -> f64 {
    let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    0.5 * x * (1.0 + u.tanh())
}

/// The exact GELU by its definition, `x · Φ(x) = x/2 · erfc(−x/√2)`, with `libm`'s `erfc`.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
}

/// The exact GELU's derivative, `Φ(x) + x · φ(x)` with `φ(x) = e^(−x²/2) / √(2π)`.
pub fn gelu_derivative(x: f64) -> f64 {
    let density = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    0.5 * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2) + x * density
}

/// The derivative of GPT-2's GELU, from its definition by the product rule:
/// `(1 + tanh u)/2 + x/2 · (1 − tanh² u) · u'`.
pub fn gelu_tanh_derivative(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let u = c * (x + 0.044715 * x * x * x);
    let du = c * (1.0 + 3.0 * 0.044715 * x * x);
    0.5 * (1.0 + u.tanh()) + 0.5 * x * (1.0 - u.tanh() * u.tanh()) * du
}

/// SiLU by its definition, `x / (1 + e^(−x))`.
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A case worked by hand: one query, two keys, the second masked by the causal offset.
    #[test]
    fn attention_of_a_hand_worked_case() {
        let (q, k, v) = ([1.0, 2.0], [3.0, 0.0, 0.0, 1.0], [1.0, 2.0, 10.0, 20.0]);
        let mut p = Problem::one_head(&q, &k, &v, [1, 2, 2, 2], 0.5);
        // s = [1.5, 1.0]: w = softmax = [0.622459, 0.377541], o = w · v.
        let (context, lse) = attention(&p);
        let w0 = 1.0 / (1.0 + (-0.5f64).exp());
        let want = [w0 + 10.0 * (1.0 - w0), 2.0 * w0 + 20.0 * (1.0 - w0)];
        assert!(
            (f64::from(context[0]) - want[0]).abs() < 1e-5,
            "{context:?}"
        );
        assert!(
            (f64::from(context[1]) - want[1]).abs() < 1e-5,
            "{context:?}"
        );
        let want_lse = (1.5f64.exp() + 1.0f64.exp()).ln();
        assert!((f64::from(lse[0]) - want_lse).abs() < 1e-6, "{lse:?}");
        p.causal_offset = Some(-1);
        let (context, lse) = attention(&p);
        assert_eq!((context, lse), (vec![0.0, 0.0], vec![f32::NEG_INFINITY]));
        p.causal_offset = Some(0);
        assert_eq!(attention(&p).0, vec![1.0, 2.0]);
    }

    /// The backward against central finite differences of the forward, in `f64`.
    #[test]
    fn backward_matches_finite_differences() {
        let (q, k, v) = (
            vec![0.3, -0.7, 0.2, 0.9, -0.4, 0.1],
            vec![0.5, 0.1, -0.3, -0.2, 0.8, 0.6, 0.4, -0.9],
            vec![1.0, -2.0, 0.5, 0.3, -1.5, 2.5, 0.7, -0.1],
        );
        let d_context = [0.2, -0.5, 1.0, 0.4, -0.3, 0.8];
        let dims = [3, 4, 2, 2];
        let loss = |q: &[f32], k: &[f32], v: &[f32]| -> f64 {
            let p = Problem::one_head(q, k, v, dims, 0.7);
            let (context, _) = attention(&p);
            context
                .iter()
                .zip(&d_context)
                .map(|(&c, &d)| f64::from(c) * f64::from(d))
                .sum()
        };
        let p = Problem::one_head(&q, &k, &v, dims, 0.7);
        let (context, _) = attention(&p);
        let grads = attention_backward(&p, &context, &d_context);
        let eps = 1e-2;
        for (which, grad) in grads.iter().enumerate() {
            for idx in 0..grad.len() {
                let nudge = |x: &mut Vec<f32>, by: f32| x[idx] += by;
                let at = |q: &[f32], k: &[f32], v: &[f32]| loss(q, k, v);
                let mut plus = [q.clone(), k.clone(), v.clone()];
                nudge(&mut plus[which], eps);
                let mut minus = [q.clone(), k.clone(), v.clone()];
                nudge(&mut minus[which], -eps);
                let numeric = (at(&plus[0], &plus[1], &plus[2])
                    - at(&minus[0], &minus[1], &minus[2]))
                    / (2.0 * f64::from(eps));
                assert!(
                    (numeric - grad[idx]).abs() < 2e-3,
                    "input {which}, element {idx}: {numeric} by differences, {} by the oracle",
                    grad[idx]
                );
            }
        }
    }

    /// LayerNorm's written-out backward against central differences of its forward.
    #[test]
    fn layer_norm_backward_matches_finite_differences() {
        let x = [0.3, -1.2, 0.8, 2.0, -0.5, 0.1, 0.9, -0.7];
        let (gamma, beta) = ([1.5, -0.4, 0.7, 1.1], [0.2, 0.0, -0.3, 0.5]);
        let dy = [0.6, -1.0, 0.25, 0.4, -0.8, 0.3, 1.2, -0.2];
        let eps = 1e-5;
        let loss = |x: &[f64], gamma: &[f64], beta: &[f64]| -> f64 {
            layer_norm(x, gamma, beta, eps)
                .iter()
                .zip(&dy)
                .map(|(y, d)| y * d)
                .sum()
        };
        let grads = layer_norm_backward(&x, &gamma, &dy, eps);
        let h = 1e-6;
        for (which, grad) in grads.iter().enumerate() {
            for idx in 0..grad.len() {
                let mut inputs = [x.to_vec(), gamma.to_vec(), beta.to_vec()];
                inputs[which][idx] += h;
                let plus = loss(&inputs[0], &inputs[1], &inputs[2]);
                inputs[which][idx] -= 2.0 * h;
                let minus = loss(&inputs[0], &inputs[1], &inputs[2]);
                let numeric = (plus - minus) / (2.0 * h);
                assert!(
                    (numeric - grad[idx]).abs() < 1e-6,
                    "input {which}, element {idx}: {numeric} by differences, {} written out",
                    grad[idx]
                );
            }
        }
    }

    #[test]
    fn gelu_tanh_at_known_points() {
        assert_eq!(gelu_tanh(0.0), 0.0);
        // tanh(√(2/π)·1.044715) = 0.682484..., so gelu(1) = 0.841192.
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-6);
        assert!((gelu_tanh(-1.0) + 0.158_808).abs() < 1e-6);
    }
}
