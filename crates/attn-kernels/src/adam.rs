//! Adam's and AdamW's update of one parameter tensor, element by element, in one pass on every
//! thread.
//!
//! The expressions are burn's (`burn::optim::Adam` and `burn::optim::AdamW`), in burn's order
//! and with burn's roundings, so that a step here equals burn's step bit for bit (Kingma and Ba
//! 2015, Loshchilov and Hutter 2019, with burn's placements of ε). [`AdamStep`]:
//!
//! ```text
//! g  = g + λ·θ                                 (weight decay, when set)
//! m  = β₁·m + (1 − β₁)·g
//! v  = β₂·v + (1 − β₂)·g²
//! c₂ = √(1 − β₂ᵗ)
//! θ  = θ − lr · (m · c₂ / (1 − β₁ᵗ)) / (√v + ε·c₂)
//! ```
//!
//! [`AdamWStep`], with the weight decay decoupled from the moments:
//!
//! ```text
//! m  = β₁·m + (1 − β₁)·g
//! v  = β₂·v + (1 − β₂)·g²
//! θ  = θ · (1 − lr·λ) − lr · (m / (1 − β₁ᵗ)) / (√(v / (1 − β₂ᵗ)) + ε)
//! ```

use rayon::prelude::*;

/// Elements per task: large enough that a task outweighs its scheduling.
const CHUNK: usize = 1 << 14;

/// The scalars of one Adam step, computed once as burn computes them (all in `f32`).
#[derive(Clone, Copy, Debug)]
pub struct AdamStep {
    beta_1: f32,
    beta_2: f32,
    /// `1 − β₁` and `1 − β₂`.
    rest_1: f32,
    rest_2: f32,
    /// `c₂ / (1 − β₁ᵗ)`.
    combined: f32,
    /// `ε · c₂`.
    epsilon: f32,
    lr: f32,
    weight_decay: Option<f32>,
}

impl AdamStep {
    /// Step `time` (counted from 1) with learning rate `lr`.
    pub fn new(
        beta_1: f32,
        beta_2: f32,
        epsilon: f32,
        weight_decay: Option<f32>,
        time: usize,
        lr: f64,
    ) -> Self {
        let time = i32::try_from(time).unwrap_or(i32::MAX);
        let c2 = (1.0 - beta_2.powi(time)).sqrt();
        Self {
            beta_1,
            beta_2,
            rest_1: 1.0 - beta_1,
            rest_2: 1.0 - beta_2,
            combined: c2 / (1.0 - beta_1.powi(time)),
            epsilon: epsilon * c2,
            // burn's scalar multiply takes the learning rate as the tensor's float type.
            lr: lr as f32,
            weight_decay,
        }
    }

    /// One element: `(θ, m, v)` after the step, from `θ`, `g` and the moments before it (`None`
    /// at the first step, where burn starts them from `(1 − β)·g` and `(1 − β)·g²`).
    #[inline(always)]
    pub fn update(self, theta: f32, grad: f32, moments: Option<(f32, f32)>) -> (f32, f32, f32) {
        let g = match self.weight_decay {
            Some(lambda) => theta * lambda + grad,
            None => grad,
        };
        let (m, v) = match moments {
            Some((m, v)) => (
                m * self.beta_1 + g * self.rest_1,
                v * self.beta_2 + g * g * self.rest_2,
            ),
            None => (g * self.rest_1, g * g * self.rest_2),
        };
        let step = m * self.combined / (v.sqrt() + self.epsilon);
        (theta - step * self.lr, m, v)
    }

    /// `(θ, m, v)` after the step for every element, in one pass on every thread; `moments` is
    /// `None` at the first step.
    ///
    /// # Panics
    /// When `g` or the moments are not as long as `theta`.
    pub fn apply(
        self,
        theta: &[f32],
        g: &[f32],
        moments: Option<(&[f32], &[f32])>,
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        apply(theta, g, moments, |theta, g, moments| {
            self.update(theta, g, moments)
        })
    }
}

/// The scalars of one AdamW step, computed once as burn computes them.
#[derive(Clone, Copy, Debug)]
pub struct AdamWStep {
    beta_1: f32,
    beta_2: f32,
    /// `1 − β₁` and `1 − β₂`.
    rest_1: f32,
    rest_2: f32,
    /// `1 − β₁ᵗ` and `1 − β₂ᵗ`.
    correction_1: f32,
    correction_2: f32,
    epsilon: f32,
    lr: f32,
    /// `1 − lr·λ`, or `None` where `lr·λ` is zero and burn leaves `θ` as it is.
    keep: Option<f32>,
}

impl AdamWStep {
    /// Step `time` (counted from 1) with learning rate `lr` and decoupled weight decay `λ`.
    pub fn new(
        beta_1: f32,
        beta_2: f32,
        epsilon: f32,
        weight_decay: f32,
        time: usize,
        lr: f64,
    ) -> Self {
        let time = i32::try_from(time).unwrap_or(i32::MAX);
        // burn computes the decay rate in f64 and hands `1 − lr·λ` to a scalar multiply.
        let decay_rate = lr * f64::from(weight_decay);
        Self {
            beta_1,
            beta_2,
            rest_1: 1.0 - beta_1,
            rest_2: 1.0 - beta_2,
            correction_1: 1.0 - beta_1.powi(time),
            correction_2: 1.0 - beta_2.powi(time),
            epsilon,
            lr: lr as f32,
            keep: (decay_rate != 0.0).then_some((1.0 - decay_rate) as f32),
        }
    }

    /// One element: `(θ, m, v)` after the step, from `θ`, `g` and the moments before it (`None`
    /// at the first step, where burn starts them from `(1 − β)·g` and `(1 − β)·g²`).
    #[inline(always)]
    pub fn update(self, theta: f32, g: f32, moments: Option<(f32, f32)>) -> (f32, f32, f32) {
        let (m, v) = match moments {
            Some((m, v)) => (
                m * self.beta_1 + g * self.rest_1,
                v * self.beta_2 + g * g * self.rest_2,
            ),
            None => (g * self.rest_1, g * g * self.rest_2),
        };
        let delta = (m / self.correction_1) / ((v / self.correction_2).sqrt() + self.epsilon);
        let decayed = match self.keep {
            Some(keep) => theta * keep,
            None => theta,
        };
        (decayed - delta * self.lr, m, v)
    }

    /// `(θ, m, v)` after the step for every element, in one pass on every thread; `moments` is
    /// `None` at the first step.
    ///
    /// # Panics
    /// When `g` or the moments are not as long as `theta`.
    pub fn apply(
        self,
        theta: &[f32],
        g: &[f32],
        moments: Option<(&[f32], &[f32])>,
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        apply(theta, g, moments, |theta, g, moments| {
            self.update(theta, g, moments)
        })
    }
}

/// `(θ, m, v)` after `update` of every element, chunk by chunk on every thread.
fn apply(
    theta: &[f32],
    g: &[f32],
    moments: Option<(&[f32], &[f32])>,
    update: impl Fn(f32, f32, Option<(f32, f32)>) -> (f32, f32, f32) + Sync,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let n = theta.len();
    assert_eq!(g.len(), n, "one gradient per parameter");
    assert!(
        moments.is_none_or(|(m, v)| m.len() == n && v.len() == n),
        "one moment per parameter"
    );
    let (mut theta_out, mut m_out, mut v_out) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    theta_out
        .par_chunks_mut(CHUNK)
        .zip(m_out.par_chunks_mut(CHUNK))
        .zip(v_out.par_chunks_mut(CHUNK))
        .enumerate()
        .for_each(|(chunk, ((theta_o, m_o), v_o))| {
            let start = chunk * CHUNK;
            let range = start..start + theta_o.len();
            let (theta, g) = (&theta[range.clone()], &g[range.clone()]);
            let outs = theta_o.iter_mut().zip(m_o.iter_mut()).zip(v_o.iter_mut());
            match moments {
                Some((m, v)) => {
                    let (m, v) = (&m[range.clone()], &v[range]);
                    for (i, ((t_o, m_o), v_o)) in outs.enumerate() {
                        (*t_o, *m_o, *v_o) = update(theta[i], g[i], Some((m[i], v[i])));
                    }
                }
                None => {
                    for (i, ((t_o, m_o), v_o)) in outs.enumerate() {
                        (*t_o, *m_o, *v_o) = update(theta[i], g[i], None);
                    }
                }
            }
        });
    (theta_out, m_out, v_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The update follows Adam's equations, checked in `f64` on a few values by hand.
    #[test]
    fn one_element_follows_the_equations() {
        let (theta, g, lr) = (0.5f32, 0.2f32, 0.01);
        let c = AdamStep::new(0.9, 0.999, 1e-8, None, 2, lr);
        let (m0, v0) = (0.1f32, 0.003f32);
        let (new_theta, m, v) = c.update(theta, g, Some((m0, v0)));
        let m_want = 0.9 * f64::from(m0) + 0.1 * f64::from(g);
        let v_want = 0.999 * f64::from(v0) + 0.001 * f64::from(g) * f64::from(g);
        let c2 = (1.0 - 0.999f64.powi(2)).sqrt();
        let step = m_want * c2 / (1.0 - 0.9f64.powi(2)) / (v_want.sqrt() + 1e-8 * c2);
        let theta_want = f64::from(theta) - lr * step;
        assert!(
            (f64::from(m) - m_want).abs() < 1e-7,
            "m {m} against {m_want}"
        );
        assert!(
            (f64::from(v) - v_want).abs() < 1e-9,
            "v {v} against {v_want}"
        );
        assert!(
            (f64::from(new_theta) - theta_want).abs() < 1e-6,
            "θ {new_theta} against {theta_want}"
        );
    }

    /// AdamW's update follows its equations, checked in `f64` on a few values by hand.
    #[test]
    fn adamw_element_follows_the_equations() {
        let (theta, g, lr, lambda) = (0.5f32, 0.2f32, 0.01, 0.1);
        let c = AdamWStep::new(0.9, 0.999, 1e-8, lambda, 2, lr);
        let (m0, v0) = (0.1f32, 0.003f32);
        let (new_theta, m, v) = c.update(theta, g, Some((m0, v0)));
        let m_want = 0.9 * f64::from(m0) + 0.1 * f64::from(g);
        let v_want = 0.999 * f64::from(v0) + 0.001 * f64::from(g) * f64::from(g);
        let m_hat = m_want / (1.0 - 0.9f64.powi(2));
        let v_hat = v_want / (1.0 - 0.999f64.powi(2));
        let theta_want =
            f64::from(theta) * (1.0 - lr * f64::from(lambda)) - lr * m_hat / (v_hat.sqrt() + 1e-8);
        assert!(
            (f64::from(m) - m_want).abs() < 1e-7,
            "m {m} against {m_want}"
        );
        assert!(
            (f64::from(v) - v_want).abs() < 1e-9,
            "v {v} against {v_want}"
        );
        assert!(
            (f64::from(new_theta) - theta_want).abs() < 1e-6,
            "θ {new_theta} against {theta_want}"
        );
        // Without decay θ moves by the Adam step alone.
        let (plain, _, _) =
            AdamWStep::new(0.9, 0.999, 1e-8, 0.0, 2, lr).update(theta, g, Some((m0, v0)));
        let plain_want = f64::from(theta) - lr * m_hat / (v_hat.sqrt() + 1e-8);
        assert!(
            (f64::from(plain) - plain_want).abs() < 1e-6,
            "θ {plain} against {plain_want}"
        );
    }

    /// The pass over a slice equals the element's update everywhere, across task boundaries,
    /// with and without moments and weight decay.
    #[test]
    fn apply_updates_every_element_as_update_does() {
        let n = 2 * CHUNK + 5;
        let theta: Vec<f32> = (0..n).map(|i| (i % 97) as f32 / 50.0 - 1.0).collect();
        let g: Vec<f32> = (0..n).map(|i| (i % 89) as f32 / 40.0 - 1.1).collect();
        let m: Vec<f32> = (0..n).map(|i| (i % 13) as f32 / 100.0).collect();
        let v: Vec<f32> = (0..n).map(|i| (i % 7) as f32 / 1000.0).collect();
        for weight_decay in [None, Some(0.01)] {
            let c = AdamStep::new(0.9, 0.95, 1e-8, weight_decay, 3, 3e-4);
            for moments in [None, Some((&m[..], &v[..]))] {
                let (t_out, m_out, v_out) = c.apply(&theta, &g, moments);
                for i in (0..n).step_by(997).chain([n - 1]) {
                    let want = c.update(theta[i], g[i], moments.map(|(m, v)| (m[i], v[i])));
                    assert_eq!((t_out[i], m_out[i], v_out[i]), want, "element {i}");
                }
            }
        }
    }
}
