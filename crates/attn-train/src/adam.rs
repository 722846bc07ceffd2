//! burn's Adam and AdamW, with their update run as one pass over each parameter on flex.
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

use burn::optim::{
    Adam, AdamConfig, AdamState, AdamW, AdamWConfig, AdamWState, LearningRate, Optimizer,
    decay::WeightDecayConfig,
};
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

#[cfg(feature = "flex")]
mod flex {
    use attn_kernels::{AdamStep, AdamWStep};
    use burn::backend::Flex;
    use burn::backend::flex::FlexTensor;
    use burn::optim::{AdamState, AdamWState, AdaptiveMomentumState, LearningRate};
    use burn::tensor::{DType, Tensor, TensorData};

    use super::{FusedAdam, MatrixDecayAdamW};

    /// The parameter, gradient and moments as flex `f32` tensors, or `None` where burn's
    /// operations must run the step: not flex, not `f32`, or AMSGrad's extra state present.
    struct Operands {
        theta: FlexTensor,
        grad: FlexTensor,
        moments: Option<(FlexTensor, FlexTensor)>,
        /// The step's number, counted from 1.
        time: usize,
    }

    impl Operands {
        fn new<const D: usize>(
            tensor: &Tensor<D>,
            grad: &Tensor<D>,
            momentum: Option<&AdaptiveMomentumState<D>>,
        ) -> Option<Self> {
            let primitive = |t: &Tensor<D>| -> Option<FlexTensor> {
                let t = t.clone().try_into_primitive::<Flex>().ok()?;
                (t.dtype() == DType::F32).then_some(t)
            };
            let moments = match momentum {
                Some(s) if s.max_moment_2.is_some() => return None,
                Some(s) => Some((primitive(&s.moment_1)?, primitive(&s.moment_2)?)),
                None => None,
            };
            Some(Self {
                theta: primitive(tensor)?,
                grad: primitive(grad)?,
                moments,
                time: momentum.map_or(1, |s| s.time + 1),
            })
        }

        /// `(θ, m, v)` after `apply`, or `None` where a tensor is not contiguous or the lengths
        /// differ.
        fn run<const D: usize>(
            &self,
            like: &Tensor<D>,
            apply: impl FnOnce(
                &[f32],
                &[f32],
                Option<(&[f32], &[f32])>,
            ) -> (Vec<f32>, Vec<f32>, Vec<f32>),
        ) -> Option<(Tensor<D>, AdaptiveMomentumState<D>)> {
            let theta = self.theta.as_slice::<f32>()?;
            let g = self.grad.as_slice::<f32>()?;
            let moments = match &self.moments {
                Some((m, v)) => Some((m.as_slice::<f32>()?, v.as_slice::<f32>()?)),
                None => None,
            };
            let n = theta.len();
            if g.len() != n || moments.is_some_and(|(m, v)| m.len() != n || v.len() != n) {
                return None;
            }
            let (theta_out, m_out, v_out) = apply(theta, g, moments);
            let shape = like.shape();
            let device = like.device();
            let host = |values: Vec<f32>| {
                Tensor::from_data(TensorData::new(values, shape.clone()), &device)
            };
            let momentum = AdaptiveMomentumState::new(self.time, host(m_out), host(v_out));
            Some((host(theta_out), momentum))
        }
    }

    /// Adam's step in one pass, or `None` where burn's operations must run it.
    pub(super) fn step<const D: usize>(
        adam: &FusedAdam,
        lr: LearningRate,
        tensor: &Tensor<D>,
        grad: &Tensor<D>,
        state: Option<&AdamState<D>>,
    ) -> Option<(Tensor<D>, Option<AdamState<D>>)> {
        let operands = Operands::new(tensor, grad, state.map(|s| &s.momentum))?;
        let c = AdamStep::new(
            adam.beta_1,
            adam.beta_2,
            adam.epsilon,
            adam.weight_decay,
            operands.time,
            lr,
        );
        let (theta, momentum) = operands.run(tensor, |t, g, m| c.apply(t, g, m))?;
        Some((theta, Some(AdamState::new(momentum))))
    }

    /// AdamW's step with decoupled `weight_decay` in one pass, or `None` where burn's
    /// operations must run it.
    pub(super) fn step_adamw<const D: usize>(
        adamw: &MatrixDecayAdamW,
        weight_decay: f32,
        lr: LearningRate,
        tensor: &Tensor<D>,
        grad: &Tensor<D>,
        state: Option<&AdamWState<D>>,
    ) -> Option<(Tensor<D>, Option<AdamWState<D>>)> {
        let operands = Operands::new(tensor, grad, state.map(|s| &s.momentum))?;
        let c = AdamWStep::new(
            adamw.beta_1,
            adamw.beta_2,
            adamw.epsilon,
            weight_decay,
            operands.time,
            lr,
        );
        let (theta, momentum) = operands.run(tensor, |t, g, m| c.apply(t, g, m))?;
        Some((theta, Some(AdamWState::new(momentum))))
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

    /// Three steps of [`MatrixDecayAdamW`] and of burn's `AdamW` (decaying the matrix, not the
    /// vector) from the same parameters and gradients: the same values, bit for bit.
    #[test]
    fn adamw_steps_equal_burns_adamw_bit_for_bit() {
        for_each_device(|d| {
            let mut rng = SeededRng::new(42);
            let ours = MatrixDecayAdamW::new(0.9, 0.99, 1e-8, 0.1);
            let config = AdamWConfig::new()
                .with_beta_1(0.9)
                .with_beta_2(0.99)
                .with_epsilon(1e-8);
            let decayed = config.clone().with_weight_decay(0.1).build();
            let undecayed = config.with_weight_decay(0.0).build();
            // More elements than one task, and not a multiple of it.
            let matrix: Tensor<2> = rng.tensor([37, 1000], &d.device);
            let vector: Tensor<1> = rng.tensor([999], &d.device);
            let (mut m_ours, mut m_theirs) = (matrix.clone(), matrix.clone());
            let (mut v_ours, mut v_theirs) = (vector.clone(), vector);
            let (mut ms_ours, mut ms_theirs, mut vs_ours, mut vs_theirs) = (None, None, None, None);
            for (step, lr) in [1e-3, 3e-4, 5e-2].into_iter().enumerate() {
                let g_m: Tensor<2> = rng.tensor([37, 1000], &d.device) * 0.1;
                let g_v: Tensor<1> = rng.tensor([999], &d.device) * 0.1;
                (m_ours, ms_ours) = ours.step(lr, m_ours, g_m.clone(), ms_ours);
                (m_theirs, ms_theirs) = decayed.step(lr, m_theirs, g_m, ms_theirs);
                (v_ours, vs_ours) = ours.step(lr, v_ours, g_v.clone(), vs_ours);
                (v_theirs, vs_theirs) = undecayed.step(lr, v_theirs, g_v, vs_theirs);
                let pairs = [
                    ("matrix", to_vec(m_ours.clone()), to_vec(m_theirs.clone())),
                    ("vector", to_vec(v_ours.clone()), to_vec(v_theirs.clone())),
                ];
                for (what, a, b) in pairs {
                    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                        assert_eq!(
                            x.to_bits(),
                            y.to_bits(),
                            "{} step {step} {what}: θ[{i}] {x} against burn's {y}",
                            d.name
                        );
                    }
                }
                let (s, t) = (
                    ms_ours.as_ref().expect("ours"),
                    ms_theirs.as_ref().expect("burn's"),
                );
                assert_eq!(s.momentum.time, t.momentum.time);
                assert_eq!(
                    to_vec(s.momentum.moment_2.clone()),
                    to_vec(t.momentum.moment_2.clone()),
                    "{} second moments",
                    d.name
                );
            }
            // The matrix decayed and the vector did not: the matrix moved further toward zero
            // than a step without decay would have taken it.
            assert!(
                to_vec(m_ours)
                    .iter()
                    .zip(to_vec(matrix))
                    .any(|(a, b)| a != &b),
                "{}: the matrix moved",
                d.name
            );
        });
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
}

/// burn's AdamW with its weight decay on matrices only: parameters of rank 2 or more (the
/// projections, the feed-forward weights, the embedding tables) decay; vectors (biases,
/// LayerNorm's gain and shift) do not, as GPT-2's and nanoGPT's training decays them. Both
/// halves are burn's [`AdamW`], so the state and the records are burn's; on flex, contiguous
/// `f32` tensors take the same step as one pass on every thread (`attn_kernels::AdamWStep`,
/// burn's expressions in burn's order), as [`FusedAdam`] does for Adam.
///
/// Why not burn's optimizer alone: its step is about a dozen tensor operations per parameter,
/// each on one thread on flex; for the text recipe's model (0.8 M parameters, batches of 768
/// tokens) that is several milliseconds of every update.
#[derive(Clone)]
pub struct MatrixDecayAdamW {
    decayed: AdamW,
    undecayed: AdamW,
    /// The coefficients, as [`AdamWConfig`] takes them.
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
    weight_decay: f32,
}

impl MatrixDecayAdamW {
    /// AdamW with moments `beta_1`, `beta_2`, `epsilon`, and decoupled `weight_decay` (`λ`) on
    /// the matrices: [`AdamWConfig`]'s fields of the same names.
    pub fn new(beta_1: f32, beta_2: f32, epsilon: f32, weight_decay: f32) -> Self {
        let config = AdamWConfig::new()
            .with_beta_1(beta_1)
            .with_beta_2(beta_2)
            .with_epsilon(epsilon)
            .with_weight_decay(weight_decay);
        Self {
            decayed: config.build(),
            undecayed: config.with_weight_decay(0.0).build(),
            beta_1,
            beta_2,
            epsilon,
            weight_decay,
        }
    }
}

impl Optimizer for MatrixDecayAdamW {
    type State<const D: usize> = AdamWState<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        let (optimizer, weight_decay) = if D >= 2 {
            (&self.decayed, self.weight_decay)
        } else {
            (&self.undecayed, 0.0)
        };
        #[cfg(feature = "flex")]
        if let Some(done) = flex::step_adamw(self, weight_decay, lr, &tensor, &grad, state.as_ref())
        {
            return done;
        }
        let _ = weight_decay;
        optimizer.step(lr, tensor, grad, state)
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &Device) -> Self::State<D> {
        AdamW::to_device(state, device)
    }
}
