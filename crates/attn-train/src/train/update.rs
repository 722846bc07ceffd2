//! One update of the loop: the loss of a batch, its gradients, clipping and the optimizer's
//! step, on one device or shared among several (data-parallel), and the optimizer itself.

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::loss::CrossEntropyLoss;
use burn::optim::{GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Tensor};

use crate::adam::{FusedAdam, MatrixDecayAdamW};
use crate::clip::clip_global_norm;
use crate::config::{OptimConfig, OptimizerKind};
use crate::error::TrainError;
use crate::loss::{token_loss, value_of};
use crate::model::Model;
use crate::tasks::Batch;

/// One update of the loop: the logits of `batch` on the autodiff `device`, the loss, its
/// gradients (scaled down to the global L2 norm `grad_clip` when they exceed it), burn's
/// optimizer step at `lr`. Returns the updated model and the loss, read back to the host (the
/// one synchronisation of a step, which NaN and divergence detection need).
///
/// The bench program times this same function (`attn-bench`'s training cases).
///
/// The update runs on rayon's global pool, whose threads run the CPU backends' parallel
/// operations (flex, ndarray). Called from a thread outside the pool (the program's main
/// thread), that thread waits for it: otherwise it would run the update's many small
/// operations itself while the pool's idle threads, woken by each parallel one, spin and
/// yield on the same cores. On 2 cores of an AMD EPYC (Zen 4) this took the toy update from
/// 19.2 to 16.0 ms (docs/benchmarks.md). Called from a pool thread, it runs in place.
///
/// Only on the CPU backends (`attn_core::native_serves`): elsewhere the update stays on the
/// calling thread. On wgpu, with the update on a pool thread and the checkpoint written from
/// the calling thread, a run resumed after Ctrl-C no longer ended like an unbroken one (the
/// `run_safety` test: a loss of 0.591 against 0.561 at step 260); the cause was not found.
///
/// # Errors
/// [`TrainError`] when the batch does not fit the model.
pub fn update(
    model: Model,
    optim: &mut ModuleOptimizer,
    loss_fn: &CrossEntropyLoss,
    batch: &Batch,
    lr: f64,
    grad_clip: Option<f32>,
    device: &Device,
) -> Result<(Model, f64), TrainError> {
    let run = || {
        let (loss_value, grads) = loss_and_gradients(&model, loss_fn, batch, 1.0, device)?;
        Ok((step(model, optim, grads, lr, grad_clip), loss_value))
    };
    attn_core::backend::on_cpu_pool(device, run)
}

/// One data-parallel update over `devices` (autodiff devices; the first holds `model` and the
/// optimizer's state): the batch is [split](Batch::split) into one share per device, each
/// device runs the forward and backward pass of its share on its own replica of the model,
/// and the replicas' gradients meet on the first device, where they are summed, clipped and
/// applied by one optimizer step, exactly as [`update`] applies the gradients of the whole
/// batch on one device:
///
/// ```text
/// loss = Σ_r (n_r / n) · loss_r          n_r scored positions of share r, n of the batch
/// g    = Σ_r (n_r / n) · ∇ loss_r        = ∇ loss, the whole batch's gradient
/// ```
///
/// This is burn's local multi-device scheme (burn-train's `MultiDeviceNaive` strategy), built
/// from burn's own parts: `Module::fork` puts a replica on its device, `GradientsParams::to_device`
/// brings its gradients to the first device, and `GradientsAccumulator` sums them. burn
/// 0.22.1's collective `all_reduce` (burn-train's DDP strategy) dispatches only on its CUDA and
/// remote backends, so it serves none of the backends tested here.
///
/// The shares run at the same time, one thread each (on the CPU backends as tasks of rayon's
/// pool, as [`update`] runs), when `concurrent`; otherwise one after another, each after
/// `before_share(r)` (which reseeds the backend's generator: burn's generator is global per
/// backend, so replicas that draw dropout masks at the same time from one backend would draw
/// in an order set by the threads' timing).
///
/// # Errors
/// [`TrainError`] when a share does not fit the model, or the batch has fewer rows than there
/// are devices.
#[allow(clippy::too_many_arguments)]
pub fn update_data_parallel(
    model: Model,
    optim: &mut ModuleOptimizer,
    loss_fn: &CrossEntropyLoss,
    batch: &Batch,
    lr: f64,
    grad_clip: Option<f32>,
    devices: &[Device],
    concurrent: bool,
    before_share: &(dyn Fn(usize) + Sync),
) -> Result<(Model, f64), TrainError> {
    let Some(main) = devices.first() else {
        return Err(TrainError::Config(
            "data-parallel training needs a device".into(),
        ));
    };
    if batch.batch < devices.len() {
        return Err(TrainError::Config(format!(
            "a batch of {} sequences cannot be shared among {} devices: each needs at least one",
            batch.batch,
            devices.len()
        )));
    }
    let shares = batch.split(devices.len());
    let scored: Vec<usize> = shares
        .iter()
        .map(|share| scored_positions(loss_fn, share))
        .collect();
    let total = scored.iter().sum::<usize>().max(1) as f64;
    // Each share's loss and gradients, the gradients moved to the first device.
    let share_job = |r: usize| -> Result<Option<(f64, GradientsParams)>, TrainError> {
        if scored[r] == 0 {
            return Ok(None); // no position to score: its weight in the sum is 0
        }
        before_share(r);
        let device = &devices[r];
        let replica = if r == 0 {
            model.clone()
        } else {
            model.clone().fork(device)
        };
        let weight = scored[r] as f64 / total;
        let (loss, grads) = loss_and_gradients(&replica, loss_fn, &shares[r], weight, device)?;
        let grads = if r == 0 {
            grads
        } else {
            grads.to_device(main, &replica)
        };
        Ok(Some((loss, grads)))
    };
    let gather = || -> Vec<Result<Option<(f64, GradientsParams)>, TrainError>> {
        let n = devices.len();
        if !concurrent {
            return (0..n).map(share_job).collect();
        }
        let mut results = Vec::with_capacity(n);
        // burn draws a parameter's initial value lazily, at its first use, from the backend's
        // global generator, so one device's first forward pass draws them in the order it uses
        // them. Until all are drawn, share 0 runs alone: the replicas then fork the weights one
        // device would have had, whatever the threads' timing.
        if !all_drawn(&model) {
            results.push(share_job(0));
        }
        let rest = results.len()..n;
        if devices.iter().all(attn_core::native_serves) {
            use rayon::prelude::*;
            results.par_extend(rest.into_par_iter().map(share_job));
        } else {
            std::thread::scope(|scope| {
                let mut rest = rest;
                let here = rest.next(); // runs on this thread, the rest on their own
                let others: Vec<_> = rest.map(|r| scope.spawn(move || share_job(r))).collect();
                results.extend(here.map(share_job));
                results.extend(others.into_iter().map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                }));
            });
        }
        results
    };
    let results = attn_core::backend::on_cpu_pool(main, gather);
    let apply = || -> Result<(Model, f64), TrainError> {
        let mut sum = GradientsAccumulator::<Model>::new();
        let mut loss = 0.0;
        for result in results {
            if let Some((share_loss, grads)) = result? {
                loss += share_loss;
                sum.accumulate(&model, grads);
            }
        }
        Ok((step(model, optim, sum.grads(), lr, grad_clip), loss))
    };
    attn_core::backend::on_cpu_pool(main, apply)
}

/// The loss of `batch` times `weight`, read back to the host, and its gradients.
fn loss_and_gradients(
    model: &Model,
    loss_fn: &CrossEntropyLoss,
    batch: &Batch,
    weight: f64,
    device: &Device,
) -> Result<(f64, GradientsParams), TrainError> {
    let logits = model.logits(batch, device)?; // [batch, seq_len, n_classes]
    let mut loss = token_loss(loss_fn, logits, batch.targets_tensor(device));
    if weight != 1.0 {
        loss = loss * weight;
    }
    let loss_value = value_of(loss.clone())?;
    Ok((
        loss_value,
        GradientsParams::from_grads(loss.backward(), model),
    ))
}

/// Clipping, then burn's optimizer step.
fn step(
    model: Model,
    optim: &mut ModuleOptimizer,
    grads: GradientsParams,
    lr: f64,
    grad_clip: Option<f32>,
) -> Model {
    let grads = match grad_clip {
        Some(max_norm) => clip_global_norm(&model, grads, max_norm).0,
        None => grads,
    };
    optim.step(lr, model, grads)
}

/// Whether every float parameter of `model` holds its value (none is still lazily waiting for
/// its first use to be drawn).
fn all_drawn(model: &Model) -> bool {
    struct Drawn(bool);
    impl ModuleVisitor for Drawn {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0 &= param.is_initialized();
        }
    }
    let mut drawn = Drawn(true);
    model.visit(&mut drawn);
    drawn.0
}

/// The positions of `batch` that the loss scores: those whose target is not one of the loss's
/// ignored classes.
fn scored_positions(loss_fn: &CrossEntropyLoss, batch: &Batch) -> usize {
    let ignored = loss_fn.pad_tokens.as_deref().unwrap_or(&[]);
    batch
        .targets
        .iter()
        .filter(|&&t| !ignored.iter().any(|&i| i as i64 == t))
        .count()
}

/// Adam ([`FusedAdam`]) or AdamW with weight decay on matrices only ([`MatrixDecayAdamW`]),
/// both burn's with their step as one pass on flex, from the configuration. Clipping is done by
/// [`clip_global_norm`] before the step (in [`update`]), not by burn's per-parameter clipping.
pub fn optimizer(o: &OptimConfig) -> ModuleOptimizer {
    match o.kind {
        OptimizerKind::Adam => ModuleOptimizer::from(FusedAdam::new(
            o.beta_1,
            o.beta_2,
            o.epsilon,
            (o.weight_decay > 0.0).then_some(o.weight_decay as f32),
        )),
        OptimizerKind::Adamw => ModuleOptimizer::from(MatrixDecayAdamW::new(
            o.beta_1,
            o.beta_2,
            o.epsilon,
            o.weight_decay as f32,
        )),
    }
}

#[cfg(test)]
mod tests {
    use attn_testing::for_each_device;
    use burn::module::Module;

    use super::super::tests::{Poison, TRAINING, tiny};
    use super::*;
    use crate::config::PosName;
    use crate::loss::loss_function;
    use crate::random::Rng;
    use crate::tasks::TaskKind;

    /// A NaN in the weights reaches the loss and every weight the step writes: nothing between
    /// them (a clamp, a max, a mask) turns it back into numbers, which would hide a divergence.
    #[test]
    fn nan_weights_make_the_loss_nan_and_the_step_keeps_them_nan() {
        // Building models draws from the backend's generator, which runs of other tests
        // repeat from a seed: they take turns.
        let _turn = TRAINING.lock().unwrap_or_else(|e| e.into_inner());
        for_each_device(|d| {
            for kind in [TaskKind::Copy, TaskKind::Add, TaskKind::Translate] {
                let mut config = tiny(d, kind, 2);
                config.model.dropout = 0.0;
                config.model.pos = PosName::Learned.scheme(config.task.model_seq_len());
                let device = d.device.clone().autodiff();
                let model = Model::init(&config, &device)
                    .expect("valid")
                    .map(&mut Poison);
                let batch = config.task.batch(config.batch_size, &mut Rng::new(1));
                let loss_fn = loss_function(&config.task, &device);
                let logits = model.logits(&batch, &device).expect("runs");
                let finite = logits.is_finite().int().sum().into_scalar::<i64>();
                assert_eq!(finite, 0, "{kind}: {finite} finite logits");
                let mut optim = optimizer(&config.optim);
                let (model, loss) = update(
                    model,
                    &mut optim,
                    &loss_fn,
                    &batch,
                    1e-3,
                    Some(1.0),
                    &device,
                )
                .expect("a step");
                assert!(loss.is_nan(), "{kind}: the loss is {loss}");
                let mut count = FiniteWeights::default();
                model.visit(&mut count);
                assert_eq!(count.0, 0, "{kind}: {} weights finite again", count.0);
            }
        });
    }

    #[derive(Default)]
    struct FiniteWeights(i64);

    impl ModuleVisitor for FiniteWeights {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0 += param.val().is_finite().int().sum().into_scalar::<i64>();
        }
    }
}
