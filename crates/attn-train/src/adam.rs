//! burn's Adam, with its update run as one pass over each parameter on flex.
//!
//! burn's [`Adam`] computes, per parameter `θ` with gradient `g` at step `t` (Kingma and Ba 2015,
//! with burn's placement of ε):
//!
//! ```text
//! g  = g + λ·θ                                 (weight decay, when set)
//! m  = β₁·m + (1 − β₁)·g
//! v  = β₂·v + (1 − β₂)·g²
//! c₂ = √(1 − β₂ᵗ)
//! θ  = θ − lr · (m · c₂ / (1 − β₁ᵗ)) / (√v + ε·c₂)
//! ```
//!
//! as about a dozen tensor operations, and flex runs each of them on one thread: an update's
//! optimizer step is a dozen single-threaded passes over every parameter, its gradient and both
//! moments. [`FusedAdam`] is burn's optimizer with its state (`AdamState`, so records and
//! checkpoints are burn's own) whose step, for contiguous `f32` flex tensors, computes the same
//! expressions element by element, in the same order and with the same roundings, in one pass
//! on every thread. Anything else (other backends, other float types, strided views) goes to
//! burn's `Adam` unchanged.
//!
//! Why not burn's optimizer alone: on 2 cores of an AMD EPYC (Zen 4), its step was about 2% of
//! the long training shape's update (`attn-bench --cases attn/train_long`), all on one thread
//! while the other waited; see docs/benchmarks.md.

use burn::optim::{Adam, AdamConfig, AdamState, LearningRate, Optimizer, decay::WeightDecayConfig};
use burn::tensor::{Device, Tensor};

/// burn's Adam (no AMSGrad) with the one-pass step on flex. Build it with [`FusedAdam::new`].
#[derive(Clone)]
pub struct FusedAdam {
    /// burn's optimizer, for every tensor the one pass does not take.
    burn: Adam,
    /// The coefficients, as [`AdamConfig`] takes them.
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
    /// Weight decay `λ` added to the gradient, if any.
    weight_decay: Option<f32>,
}

impl FusedAdam {
    /// Adam with moments `beta_1`, `beta_2`, `epsilon`, and `weight_decay` (`λ`) added to the
    /// gradient when given: [`AdamConfig`]'s fields of the same names.
    pub fn new(beta_1: f32, beta_2: f32, epsilon: f32, weight_decay: Option<f32>) -> Self {
        let burn = AdamConfig::new()
            .with_beta_1(beta_1)
            .with_beta_2(beta_2)
            .with_epsilon(epsilon)
            .with_weight_decay(weight_decay.map(WeightDecayConfig::new))
            .build();
        Self {
            burn,
            beta_1,
            beta_2,
            epsilon,
            weight_decay,
        }
    }
}

impl Optimizer for FusedAdam {
    type State<const D: usize> = AdamState<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        #[cfg(feature = "flex")]
        if let Some(done) = flex::step(self, lr, &tensor, &grad, state.as_ref()) {
            return done;
        }
        self.burn.step(lr, tensor, grad, state)
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
        Adam::to_device(state, device)
    }
}

/// The scalars of one step, computed once as burn computes them (all in `f32`).
#[derive(Clone, Copy, Debug)]
struct Coefficients {
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

impl Coefficients {
    fn new(adam: &FusedAdam, time: usize, lr: LearningRate) -> Self {
        let time = time as i32;
        let c2 = (1.0 - adam.beta_2.powi(time)).sqrt();
        Self {
            beta_1: adam.beta_1,
            beta_2: adam.beta_2,
            rest_1: 1.0 - adam.beta_1,
            rest_2: 1.0 - adam.beta_2,
            combined: c2 / (1.0 - adam.beta_1.powi(time)),
            epsilon: adam.epsilon * c2,
            // burn's scalar multiply takes the learning rate as the tensor's float type.
            lr: lr as f32,
            weight_decay: adam.weight_decay,
        }
    }

    /// One element: `(θ, m, v)` after the step, from `θ`, `g` and the moments before it (`None`
    /// at the first step, where burn starts them from `(1 − β)·g` and `(1 − β)·g²`).
    #[inline(always)]
    fn update(self, theta: f32, grad: f32, moments: Option<(f32, f32)>) -> (f32, f32, f32) {
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
}

#[cfg(feature = "flex")]
mod flex {
    use burn::backend::Flex;
    use burn::backend::flex::FlexTensor;
    use burn::optim::{AdamState, AdaptiveMomentumState, LearningRate};
    use burn::tensor::{DType, Tensor, TensorData};
    use rayon::prelude::*;

    use super::{Coefficients, FusedAdam};

    /// Elements per task: large enough that a task outweighs its scheduling.
    const CHUNK: usize = 1 << 14;

    /// The step in one pass, or `None` where burn's operations must run it: not flex, not
    /// `f32`, not contiguous, or AMSGrad's extra state present.
    pub(super) fn step<const D: usize>(
        adam: &FusedAdam,
        lr: LearningRate,
        tensor: &Tensor<D>,
        grad: &Tensor<D>,
        state: Option<&AdamState<D>>,
    ) -> Option<(Tensor<D>, Option<AdamState<D>>)> {
        let primitive = |t: &Tensor<D>| -> Option<FlexTensor> {
            let t = t.clone().try_into_primitive::<Flex>().ok()?;
            (t.dtype() == DType::F32).then_some(t)
        };
        let (theta_t, grad_t) = (primitive(tensor)?, primitive(grad)?);
        let moments_t = match state {
            Some(s) if s.momentum.max_moment_2.is_some() => return None,
            Some(s) => Some((
                primitive(&s.momentum.moment_1)?,
                primitive(&s.momentum.moment_2)?,
            )),
            None => None,
        };
        let theta = theta_t.as_slice::<f32>()?;
        let g = grad_t.as_slice::<f32>()?;
        let moments = match &moments_t {
            Some((m, v)) => Some((m.as_slice::<f32>()?, v.as_slice::<f32>()?)),
            None => None,
        };
        let n = theta.len();
        if g.len() != n || moments.is_some_and(|(m, v)| m.len() != n || v.len() != n) {
            return None;
        }
        let time = state.map_or(1, |s| s.momentum.time + 1);
        let c = Coefficients::new(adam, time, lr);

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
                            (*t_o, *m_o, *v_o) = c.update(theta[i], g[i], Some((m[i], v[i])));
                        }
                    }
                    None => {
                        for (i, ((t_o, m_o), v_o)) in outs.enumerate() {
                            (*t_o, *m_o, *v_o) = c.update(theta[i], g[i], None);
                        }
                    }
                }
            });

        let shape = tensor.shape();
        let device = tensor.device();
        let host =
            |values: Vec<f32>| Tensor::from_data(TensorData::new(values, shape.clone()), &device);
        let momentum = AdaptiveMomentumState::new(time, host(m_out), host(v_out));
        Some((host(theta_out), Some(AdamState::new(momentum))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{SeededRng, for_each_device, to_vec};

    /// Three steps of both optimizers from the same parameter and gradients: the same values,
    /// bit for bit (the one pass computes burn's expressions in burn's order), and states that
    /// continue alike.
    #[test]
    fn steps_equal_burns_adam_bit_for_bit() {
        for weight_decay in [None, Some(0.01)] {
            for_each_device(|d| {
                let mut rng = SeededRng::new(40);
                let fused = FusedAdam::new(0.9, 0.98, 1e-8, weight_decay);
                let burn = AdamConfig::new()
                    .with_beta_1(0.9)
                    .with_beta_2(0.98)
                    .with_epsilon(1e-8)
                    .with_weight_decay(weight_decay.map(WeightDecayConfig::new))
                    .build();
                // More elements than one task, and not a multiple of it.
                let shape = [37, 1000];
                let start: Tensor<2> = rng.tensor(shape, &d.device);
                let (mut ours, mut theirs) = (start.clone(), start.clone());
                let mut previous = start;
                let (mut our_state, mut their_state) = (None, None);
                for (step, lr) in [1e-3, 3e-4, 5e-2].into_iter().enumerate() {
                    let grad: Tensor<2> = rng.tensor(shape, &d.device) * 0.1;
                    (ours, our_state) = fused.step(lr, ours, grad.clone(), our_state);
                    (theirs, their_state) = burn.step(lr, theirs, grad, their_state);
                    let before = to_vec(previous.clone());
                    previous = ours.clone();
                    let (a, b) = (to_vec(ours.clone()), to_vec(theirs.clone()));
                    let moved = a.iter().zip(&before).filter(|(x, y)| x != y).count();
                    // A step can round to nothing where the moments nearly cancel; almost all move.
                    assert!(
                        moved * 100 > a.len() * 99,
                        "{}: {moved} values moved at step {step}",
                        d.name
                    );
                    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                        assert_eq!(
                            x.to_bits(),
                            y.to_bits(),
                            "{} step {step} weight decay {weight_decay:?}: θ[{i}] {x} against burn's {y}",
                            d.name
                        );
                    }
                    let (s, t) = (
                        our_state.as_ref().expect("our state"),
                        their_state.as_ref().expect("burn's state"),
                    );
                    assert_eq!(s.momentum.time, t.momentum.time);
                    assert_eq!(
                        to_vec(s.momentum.moment_2.clone()),
                        to_vec(t.momentum.moment_2.clone()),
                        "{} second moments",
                        d.name
                    );
                }
            });
        }
    }

    /// On flex the one pass takes contiguous `f32` tensors, and leaves a strided view to burn.
    #[cfg(feature = "flex")]
    #[test]
    fn the_one_pass_takes_contiguous_flex_tensors() {
        let device = Device::flex();
        let mut rng = SeededRng::new(41);
        let adam = FusedAdam::new(0.9, 0.999, 1e-8, None);
        let theta: Tensor<2> = rng.tensor([8, 5], &device);
        let grad: Tensor<2> = rng.tensor([8, 5], &device);
        let (_, state) = flex::step(&adam, 1e-3, &theta, &grad, None).expect("contiguous f32");
        let state = state.expect("a state");
        assert_eq!(state.momentum.time, 1);
        assert!(flex::step(&adam, 1e-3, &theta, &grad, Some(&state)).is_some());
        let (theta_t, grad_t) = (theta.transpose(), grad.transpose());
        assert!(
            flex::step(&adam, 1e-3, &theta_t, &grad_t, None).is_none(),
            "strided"
        );
    }

    /// The update follows Adam's equations, checked in `f64` on a few values by hand.
    #[test]
    fn one_element_follows_the_equations() {
        let adam = FusedAdam::new(0.9, 0.999, 1e-8, None);
        let (theta, g, lr) = (0.5f32, 0.2f32, 0.01);
        let c = Coefficients::new(&adam, 2, lr);
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
}
