//! The native kernels through their public API (`native_attention`,
//! `native_attention_backward`, `native_serves`) and through the strategy, against the
//! explicit strategy and its autodiff.

use attn_core::{
    AttentionError, AttentionOptions, CausalAlignment, NATIVE_TRAINING_MIN_KEYS, NativeOutput,
    Strategy, native_attention, native_attention_backward, native_serves, padding_mask,
    padding_mask_from_lengths, repeat_kv_heads, scaled_scores, try_scaled_dot_product_attention,
};
use attn_testing::{ATOL, RTOL, SeededRng, assert_tensors_close, device_for, for_each_device};
use burn::tensor::{Device, Tensor};

/// `q`, `k`, `v` with grouped-query heads and lengths that cross the kernel's query block
/// (96) and key block (256).
fn inputs(rng: &mut SeededRng, trial: usize, device: &Device) -> [Tensor<4>; 3] {
    let batch = rng.range(1, 2);
    let n_kv_heads = rng.range(1, 2);
    let n_heads = n_kv_heads * rng.range(1, 3);
    let seq_len_q = if trial.is_multiple_of(2) {
        rng.range(1, 9)
    } else {
        rng.range(95, 130)
    };
    let seq_len_kv = if trial.is_multiple_of(3) {
        rng.range(1, 12)
    } else {
        rng.range(250, 300)
    };
    let (d_head, d_value) = (rng.range(1, 20), rng.range(1, 20));
    [
        rng.tensor([batch, n_heads, seq_len_q, d_head], device)
            .mul_scalar(2.0),
        rng.tensor([batch, n_kv_heads, seq_len_kv, d_head], device)
            .mul_scalar(2.0),
        rng.tensor([batch, n_kv_heads, seq_len_kv, d_value], device),
    ]
}

/// Options for trial `trial`: a custom scale, then by turns no mask, a random mask or
/// padding, a bias on odd trials, and causality in either alignment on most.
fn options_for(
    rng: &mut SeededRng,
    trial: usize,
    q: &Tensor<4>,
    k: &Tensor<4>,
    device: &Device,
) -> AttentionOptions {
    let [batch, n_heads, seq_len_q, _] = q.dims();
    let seq_len_kv = k.dims()[2];
    let mut options = AttentionOptions::new().with_scale(0.2 + f64::from(rng.unit().abs()));
    options = match trial % 3 {
        0 => options,
        1 => {
            options.with_mask(rng.bool_tensor([batch, n_heads, seq_len_q, seq_len_kv], 0.3, device))
        }
        _ => {
            let lengths: Vec<usize> = (0..batch).map(|_| rng.range(1, seq_len_kv)).collect();
            let padding =
                padding_mask_from_lengths(&lengths, seq_len_kv, device).expect("lengths fit");
            options.with_mask(padding_mask(padding))
        }
    };
    if trial % 2 == 1 {
        options = options.with_bias(rng.tensor([1, n_heads, seq_len_q, seq_len_kv], device));
    }
    if !trial.is_multiple_of(4) {
        let alignment = if trial % 4 == 1 {
            CausalAlignment::TopLeft
        } else {
            CausalAlignment::BottomRight
        };
        options = options.with_causal(alignment);
    }
    options
}

#[test]
fn native_equals_explicit_with_masks_bias_causality_and_grouped_heads() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(77);
        for trial in 0..8 {
            let [q, k, v] = inputs(&mut rng, trial, &d.device);
            let options = options_for(&mut rng, trial, &q, &k, &d.device);
            let run = |strategy| {
                let options = options.clone().with_strategy(strategy);
                try_scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &options)
                    .expect("valid problem")
                    .context
            };
            let what = format!(
                "{} trial {trial}: native vs explicit, q {:?}, k {:?}",
                d.name,
                q.dims(),
                k.dims()
            );
            assert_tensors_close(
                run(Strategy::Native),
                run(Strategy::Explicit),
                ATOL,
                RTOL,
                &what,
            );
        }
    });
}

#[test]
fn backward_equals_explicit_autodiff_with_masks_bias_causality_and_grouped_heads() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(31);
        for trial in 0..8 {
            let [q, k, v] = inputs(&mut rng, trial, &d.device);
            let options = options_for(&mut rng, trial, &q, &k, &d.device);
            let forward =
                native_attention(q.clone(), k.clone(), v.clone(), &options).expect("valid problem");
            let d_context = rng.tensor(forward.context.dims(), &d.device);
            let ours = native_attention_backward(
                q.clone(),
                k.clone(),
                v.clone(),
                &forward,
                d_context.clone(),
                &options,
            )
            .expect("valid problem");

            // The reference: burn's autodiff through the explicit strategy.
            let autodiff = d.device.clone().autodiff();
            let on = |t: &Tensor<4>| Tensor::<4>::from_data(t.to_data(), &autodiff).require_grad();
            let (qa, ka, va) = (on(&q), on(&k), on(&v));
            let mut explicit = options.clone().with_strategy(Strategy::Explicit);
            explicit.mask = options
                .mask
                .as_ref()
                .map(|m| Tensor::from_data(m.to_data(), &autodiff));
            explicit.bias = options
                .bias
                .as_ref()
                .map(|b| Tensor::from_data(b.to_data(), &autodiff));
            let out =
                try_scaled_dot_product_attention(qa.clone(), ka.clone(), va.clone(), &explicit)
                    .expect("valid problem")
                    .context;
            let grads = (out * Tensor::<4>::from_data(d_context.to_data(), &autodiff))
                .sum()
                .backward();
            for (name, got, input) in [
                ("dq", ours.dq, &qa),
                ("dk", ours.dk, &ka),
                ("dv", ours.dv, &va),
            ] {
                let expected = input.grad(&grads).expect("the input is in the graph");
                assert_tensors_close(
                    got,
                    Tensor::<4>::from_data(expected.to_data(), &d.device),
                    ATOL,
                    RTOL,
                    &format!(
                        "{} trial {trial}: {name}, q {:?}, k {:?}",
                        d.name,
                        q.dims(),
                        k.dims()
                    ),
                );
            }
        }
    });
}

#[test]
fn backward_names_a_gradient_of_the_wrong_shape() {
    let device = Device::flex();
    let mut rng = SeededRng::new(5);
    let q = rng.tensor([1, 2, 3, 4], &device);
    let k = rng.tensor([1, 2, 5, 4], &device);
    let v = rng.tensor([1, 2, 5, 6], &device);
    let options = AttentionOptions::new();
    let forward = native_attention(q.clone(), k.clone(), v.clone(), &options).expect("valid");
    let err = native_attention_backward(
        q,
        k,
        v,
        &forward,
        rng.tensor([1, 2, 3, 5], &device),
        &options,
    )
    .expect_err("d_value is 6");
    assert_eq!(
        err,
        AttentionError::GradientShape {
            what: "d_context",
            got: vec![1, 2, 3, 5],
            expected: vec![1, 2, 3, 6],
        }
    );
}

#[test]
fn lse_is_the_log_sum_exp_of_the_scaled_biased_scores() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(12);
        let [q, k, v] = inputs(&mut rng, 1, &d.device);
        let [batch, n_heads, seq_len_q, _] = q.dims();
        let seq_len_kv = k.dims()[2];
        let bias = rng.tensor([batch, 1, seq_len_q, seq_len_kv], &d.device);
        let options = AttentionOptions::new().with_bias(bias.clone());
        let out = native_attention(q.clone(), k.clone(), v, &options).expect("valid problem");
        assert_eq!(out.lse.dims(), [batch, n_heads, seq_len_q]);

        let scale = 1.0 / (q.dims()[3] as f64).sqrt();
        let scores = scaled_scores(q, repeat_kv_heads(k, n_heads), scale) + bias; // [batch, n_heads, seq_len_q, seq_len_kv]
        let max = scores.clone().max_dim(3); // [batch, n_heads, seq_len_q, 1]
        let lse = ((scores - max.clone()).exp().sum_dim(3).log() + max)
            .reshape([batch, n_heads, seq_len_q]);
        assert_tensors_close(out.lse, lse, ATOL, RTOL, &format!("{}: lse", d.name));
    });
}

#[test]
fn serves_the_host_memory_backends_only() {
    for name in ["flex", "ndarray"] {
        let device = device_for(name).expect("a backend name");
        assert!(native_serves(&device), "{name}");
        assert!(native_serves(&device.autodiff()), "{name} with autodiff");
    }
    let wgpu = device_for("wgpu").expect("a backend name");
    assert!(!native_serves(&wgpu));
}

#[test]
fn refuses_weights_dropout_and_gradients() {
    let device = Device::flex();
    let t = |shape: [usize; 4], device: &Device| Tensor::<4>::ones(shape, device);
    let cannot = |result: Result<NativeOutput, AttentionError>| match result {
        Err(AttentionError::StrategyCannot {
            strategy: "native",
            what,
        }) => what,
        other => panic!("expected StrategyCannot from native, got {other:?}"),
    };
    let weights = AttentionOptions::new().with_need_weights(true);
    let what = cannot(native_attention(
        t([1, 2, 3, 4], &device),
        t([1, 2, 5, 4], &device),
        t([1, 2, 5, 4], &device),
        &weights,
    ));
    assert!(what.contains("weights"), "{what}");

    let autodiff = device.autodiff();
    let q = t([1, 2, 3, 4], &autodiff).require_grad();
    let (k, v) = (t([1, 2, 5, 4], &autodiff), t([1, 2, 5, 4], &autodiff));
    let dropout = AttentionOptions::new().with_dropout(0.5);
    let what = cannot(native_attention(q.clone(), k.clone(), v.clone(), &dropout));
    assert!(what.contains("dropout"), "{what}");
    let what = cannot(native_attention(
        q.clone(),
        k.clone(),
        v.clone(),
        &AttentionOptions::new(),
    ));
    assert!(what.contains("gradients"), "{what}");
    // Through the strategy, the kernel runs as a backend operation with its own backward
    // (`FlashAttentionOps`), so autodiff records it; a dropout it cannot apply is refused.
    let forced = AttentionOptions::new().with_strategy(Strategy::Native);
    let out = try_scaled_dot_product_attention(q.clone(), k.clone(), v.clone(), &forced)
        .expect("native is differentiable through its backend operation");
    assert!(out.context.is_tracked());
    assert!(matches!(
        try_scaled_dot_product_attention(
            q.clone(),
            k.clone(),
            v.clone(),
            &forced.clone().with_dropout(0.5)
        ),
        Err(AttentionError::StrategyCannot {
            strategy: "native",
            ..
        })
    ));
    // The automatic choice stays differentiable.
    let out = try_scaled_dot_product_attention(q, k, v, &AttentionOptions::new())
        .expect("auto falls back");
    assert!(out.context.is_tracked());
}

#[test]
fn auto_trains_through_the_native_backward_from_the_threshold_on() {
    for_each_device(|d| {
        let mut rng = SeededRng::new(8);
        let autodiff = d.device.clone().autodiff();
        for seq_len_kv in [NATIVE_TRAINING_MIN_KEYS - 1, NATIVE_TRAINING_MIN_KEYS] {
            let q = rng.tensor([1, 2, 5, 8], &d.device);
            let k = rng.tensor([1, 2, seq_len_kv, 8], &d.device);
            let v = rng.tensor([1, 2, seq_len_kv, 4], &d.device);
            let grads = |strategy| {
                let on =
                    |t: &Tensor<4>| Tensor::<4>::from_data(t.to_data(), &autodiff).require_grad();
                let (qa, ka, va) = (on(&q), on(&k), on(&v));
                let options = AttentionOptions::new()
                    .with_causal(CausalAlignment::BottomRight)
                    .with_strategy(strategy);
                let out =
                    try_scaled_dot_product_attention(qa.clone(), ka.clone(), va.clone(), &options)
                        .expect("valid problem")
                        .context;
                let grads = out.sum().backward();
                [&qa, &ka, &va].map(|t| {
                    Tensor::<4>::from_data(
                        t.grad(&grads).expect("in the graph").to_data(),
                        &d.device,
                    )
                })
            };
            let what = format!("{} with {seq_len_kv} keys", d.name);
            for (auto, explicit) in grads(Strategy::Auto)
                .into_iter()
                .zip(grads(Strategy::Explicit))
            {
                assert_tensors_close(auto, explicit, ATOL, RTOL, &what);
            }
        }
    });
}
