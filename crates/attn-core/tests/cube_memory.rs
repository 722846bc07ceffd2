//! Training memory of the GPU kernels: forward plus backward through `Strategy::Native` on a
//! CubeCL device grows linearly with the length, where the explicit strategy's grows with its
//! square. Read from the CubeCL client's memory report (the pools' reservation after each run,
//! released in between), on the wgpu test device; the CPU devices have no such report and skip.

use attn_core::backend::{device_memory, release_device_memory};
use attn_core::{AttentionOptions, CausalAlignment, Route, Strategy, scaled_dot_product_attention};
use attn_testing::{SeededRng, for_each_device};
use burn::tensor::{Device, Tensor};

/// Forward and backward at `seq_len` with `strategy`; the route and the bytes the device's pools
/// reserved for it.
fn train_step(device: &Device, seq_len: usize, strategy: Strategy) -> (Route, u64) {
    let autodiff = device.clone().autodiff();
    let mut rng = SeededRng::new(seq_len as u64);
    let on = |t: Tensor<4>| t.to_device(&autodiff).autodiff().require_grad();
    // Grouped heads and a causal mask, as a decoder trains.
    let q = on(rng.tensor([1, 2, seq_len, 16], device));
    let k = on(rng.tensor([1, 1, seq_len, 16], device));
    let v = on(rng.tensor([1, 1, seq_len, 16], device));
    let g = rng.tensor([1, 2, seq_len, 16], device).to_device(&autodiff);
    release_device_memory(device);
    let options = AttentionOptions::new()
        .with_causal(CausalAlignment::TopLeft)
        .with_strategy(strategy);
    let out = scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &options);
    let grads = (out.context * g).sum().backward();
    let dq = q.grad(&grads).expect("q requires grad");
    // Reading a gradient waits for the device to finish.
    let finite = dq.into_data().iter::<f32>().all(f32::is_finite);
    assert!(finite, "{strategy:?} at {seq_len}: non-finite gradient");
    let memory = device_memory(device).expect("a CubeCL device reports its memory");
    (out.route, memory.reserved)
}

#[test]
fn training_memory_of_the_gpu_kernels_grows_linearly_with_the_length() {
    for_each_device(|d| {
        if device_memory(&d.device).is_none() {
            return;
        }
        let lengths = [1024, 2048, 4096];
        let mut native = Vec::new();
        for seq_len in lengths {
            let (route, bytes) = train_step(&d.device, seq_len, Strategy::Native);
            assert_eq!(route, Route::CubeOperation, "{}", d.name);
            native.push(bytes);
        }
        // The explicit strategy keeps a [seq_len, seq_len] weight matrix per head: the same
        // measure sees its square growth, so the one above is not blind.
        let explicit: Vec<u64> = lengths[..2]
            .iter()
            .map(|&s| train_step(&d.device, s, Strategy::Explicit).1)
            .collect();
        eprintln!(
            "{}: reserved bytes at s = {lengths:?}: native {native:?}, explicit {explicit:?}",
            d.name
        );
        for (pair, s) in native.windows(2).zip(&lengths[1..]) {
            let growth = pair[1] as f64 / pair[0] as f64;
            assert!(
                growth <= 2.3,
                "{}: native training memory grew {growth:.2}x from s = {} to {s} ({} to {} \
                 bytes), more than linear",
                d.name,
                s / 2,
                pair[0],
                pair[1]
            );
        }
        let growth = explicit[1] as f64 / explicit[0] as f64;
        assert!(
            growth >= 3.0,
            "{}: explicit training memory grew only {growth:.2}x from 1024 to 2048 ({explicit:?})",
            d.name
        );
    });
}
