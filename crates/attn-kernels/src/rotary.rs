//! Rotary positions applied to rows of queries or keys on plain slices: each pair of features
//! turned by its position's angle, the rows split among rayon's threads.
//!
//! ```text
//! y[i] = x[i] · cos[s, i] + rot(x)[i] · sin[s, i]
//! rot(x) sends each pair (a, b) to (−b, a)
//! ```
//!
//! `cos` and `sin` hold each feature's angle (both features of a pair have the same), one row
//! per position, as `attn_pos::RotaryEncoding::cos_sin` gives them.

use rayon::prelude::*;

/// Values per rayon task: enough to pay for a task.
const CHUNK: usize = 1 << 14;

/// `x`'s rows rotated. Row `r` of `x` is at position `r % seq_len` of `cos` and `sin`: `x` is
/// `[.., seq_len, d_head]`, row-major. Pairs are `(j, j + d_head / 2)` when `half_split`
/// (GPT-NeoX, Llama in Hugging Face), else `(2j, 2j + 1)`.
///
/// # Panics
/// When `d_head` is odd or zero, `cos` or `sin` is not `[seq_len, d_head]`, or `x` is not a
/// whole number of `[seq_len, d_head]` blocks.
pub fn rotate(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    seq_len: usize,
    d_head: usize,
    half_split: bool,
) -> Vec<f32> {
    assert!(
        d_head > 0 && d_head.is_multiple_of(2),
        "d_head {d_head} is not even"
    );
    assert!(
        cos.len() == seq_len * d_head && sin.len() == seq_len * d_head,
        "cos and sin hold {} and {} values, not [{seq_len}, {d_head}]",
        cos.len(),
        sin.len()
    );
    assert!(
        x.len().is_multiple_of((seq_len * d_head).max(1)),
        "x holds {} values, not blocks of [{seq_len}, {d_head}]",
        x.len()
    );
    let mut y = vec![0.0; x.len()];
    let rows_per_task = (CHUNK / d_head).max(1);
    let half = d_head / 2;
    y.par_chunks_mut(rows_per_task * d_head)
        .zip(x.par_chunks(rows_per_task * d_head))
        .enumerate()
        .for_each(|(task, (y, x))| {
            for (k, (y, x)) in y
                .chunks_exact_mut(d_head)
                .zip(x.chunks_exact(d_head))
                .enumerate()
            {
                let s = (task * rows_per_task + k) % seq_len;
                let (c, sn) = (&cos[s * d_head..][..d_head], &sin[s * d_head..][..d_head]);
                if half_split {
                    for j in 0..half {
                        let (a, b) = (x[j], x[j + half]);
                        y[j] = a * c[j] - b * sn[j];
                        y[j + half] = b * c[j + half] + a * sn[j + half];
                    }
                } else {
                    for j in 0..half {
                        let (a, b) = (x[2 * j], x[2 * j + 1]);
                        y[2 * j] = a * c[2 * j] - b * sn[2 * j];
                        y[2 * j + 1] = b * c[2 * j + 1] + a * sn[2 * j + 1];
                    }
                }
            }
        });
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{SeededRng, assert_close_slices};

    /// Both pairings against the rotation by the angle `position · θ^(−2j / d_head)`, in
    /// `f64`, over several blocks of positions and enough rows to split among tasks.
    #[test]
    fn turns_each_pair_by_its_angle() {
        let mut rng = SeededRng::new(31);
        for (blocks, seq_len, d_head, offset) in [(1, 1, 64, 130), (3, 5, 8, 0), (40, 20, 64, 7)] {
            let theta: f64 = 10_000.0;
            let angle = |s: usize, j: usize| {
                (offset + s) as f64 * theta.powf(-((2 * j) as f64) / d_head as f64)
            };
            for half_split in [true, false] {
                let pair = |i: usize| if half_split { i % (d_head / 2) } else { i / 2 };
                let (mut cos, mut sin) = (Vec::new(), Vec::new());
                for s in 0..seq_len {
                    for i in 0..d_head {
                        cos.push(angle(s, pair(i)).cos() as f32);
                        sin.push(angle(s, pair(i)).sin() as f32);
                    }
                }
                let x: Vec<f32> = (0..blocks * seq_len * d_head)
                    .map(|_| rng.unit() * 2.0 - 1.0)
                    .collect();
                let y = rotate(&x, &cos, &sin, seq_len, d_head, half_split);
                let mut want = vec![0.0f32; x.len()];
                for (r, (row, out)) in x.chunks(d_head).zip(want.chunks_mut(d_head)).enumerate() {
                    let s = r % seq_len;
                    for j in 0..d_head / 2 {
                        let (ia, ib) = if half_split {
                            (j, j + d_head / 2)
                        } else {
                            (2 * j, 2 * j + 1)
                        };
                        let (a, b, t) = (f64::from(row[ia]), f64::from(row[ib]), angle(s, j));
                        out[ia] = (a * t.cos() - b * t.sin()) as f32;
                        out[ib] = (a * t.sin() + b * t.cos()) as f32;
                    }
                }
                assert_close_slices(
                    &y,
                    &want,
                    1e-5,
                    1e-5,
                    &format!("{blocks}×[{seq_len}, {d_head}], half split {half_split}"),
                );
            }
        }
    }

    #[test]
    #[should_panic(expected = "cos and sin hold 4 and 4 values, not [1, 8]")]
    fn tables_of_the_wrong_size_are_refused() {
        rotate(&[0.0; 8], &[0.0; 4], &[0.0; 4], 1, 8, true);
    }
}
