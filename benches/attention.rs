//! Criterion benchmarks of attention: every strategy of `attn_core` beside burn's own
//! `module::attention`, forward and forward plus backward, on
//! `[batch, n_heads, seq_len, d_head] = [1, 8, s, 64]` for s in {128, 512, 2048, 4096}; and
//! `attn_model`'s multi-head attention and encoder block beside burn's `nn::MultiHeadAttention`
//! and one-layer `nn::transformer::TransformerEncoder` on `[1, s, 512]`. Every CPU backend
//! compiled in runs (wgpu too behind its feature).
//!
//! ```text
//! cargo bench --bench attention
//! ```
//!
//! Narrow it with criterion's filter, e.g. `cargo bench --bench attention -- forward/flex/chunked`,
//! and add backends with features: `cargo bench --features ndarray --bench attention`.
//! Benchmark ids read `{pass}/{device}/{case}/{seq_len}`, `layers/{device}/{layer}/{pass}/{seq_len}`
//! and `train_step/{device}` (one step of `attn-train`'s toy model).
//!
//! The device is synchronised inside every iteration, so a lazy backend's queued work is inside
//! the measured time. For one JSON line per case, GFLOP/s, PyTorch alongside and peak memory, see
//! `examples/bench.rs` and `docs/benchmarks.md`.

// `criterion_group!` defines a public function that cannot carry a doc comment.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use attn_core::{AttentionOptions, DEFAULT_BLOCK, Strategy, scaled_dot_product_attention};
use attn_model::{Activation, EncoderBlockConfig, NormPlacement};
use attn_train::TrainConfig;
use attn_train::backend;
use attn_train::random::Rng;
use burn::nn::activation::ActivationConfig;
use burn::nn::attention::{MhaInput, MultiHeadAttentionConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{TransformerEncoderConfig, TransformerEncoderInput};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::module::attention as burn_attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Device, Distribution, Tensor};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

const BATCH: usize = 1;
const N_HEADS: usize = 8;
const D_HEAD: usize = 64;
/// `d_model = n_heads · d_head` of the multi-head case.
const D_MODEL: usize = N_HEADS * D_HEAD;
const SIZES: [usize; 4] = [128, 512, 2048, 4096];
const SEED: u64 = 42;

/// The attention computations side by side.
#[derive(Clone, Copy)]
enum Kernel {
    Attn(Strategy),
    BurnAttention,
}

const KERNELS: [(&str, Kernel); 6] = [
    ("explicit", Kernel::Attn(Strategy::Explicit)),
    (
        "chunked",
        Kernel::Attn(Strategy::Chunked {
            block: DEFAULT_BLOCK,
        }),
    ),
    ("fused", Kernel::Attn(Strategy::Fused)),
    ("native", Kernel::Attn(Strategy::Native)),
    ("auto", Kernel::Attn(Strategy::Auto)),
    ("burn_module_attention", Kernel::BurnAttention),
];

/// Every backend compiled into this build (flex by default; ndarray, wgpu, ... by feature).
fn devices() -> Vec<(&'static str, Device)> {
    backend::COMPILED
        .iter()
        .map(|&name| {
            (
                name,
                backend::device(name).expect("a compiled-in backend has a device"),
            )
        })
        .collect()
}

fn attend(kernel: Kernel, q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    match kernel {
        Kernel::Attn(strategy) => {
            scaled_dot_product_attention(q, k, v, &AttentionOptions::new().with_strategy(strategy))
                .context
        }
        Kernel::BurnAttention => {
            burn_attention(q, k, v, None, None, AttentionModuleOptions::default())
        }
    }
}

fn sync(device: &Device) {
    device
        .sync()
        .expect("the device failed while running the benchmark");
}

/// `[batch, n_heads, seq_len, d_head]` standard-normal inputs.
fn qkv(seq_len: usize, device: &Device) -> [Tensor<4>; 3] {
    device.seed(SEED);
    let shape = [BATCH, N_HEADS, seq_len, D_HEAD];
    std::array::from_fn(|_| Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), device))
}

/// Matrix-product FLOPs of attention forward: `q·kᵀ` and `weights·v`.
fn attention_flops(seq_len: usize) -> u64 {
    (4 * BATCH * N_HEADS * seq_len * seq_len * D_HEAD) as u64
}

fn attention_forward(c: &mut Criterion) {
    for (device_name, device) in devices() {
        let mut group = c.benchmark_group(format!("forward/{device_name}"));
        for seq_len in SIZES {
            group.throughput(Throughput::Elements(attention_flops(seq_len)));
            let [q, k, v] = qkv(seq_len, &device);
            for (name, kernel) in KERNELS {
                group.bench_function(BenchmarkId::new(name, seq_len), |b| {
                    b.iter(|| {
                        let context = attend(kernel, q.clone(), k.clone(), v.clone());
                        sync(&device);
                        black_box(context)
                    })
                });
            }
        }
        group.finish();
    }
}

fn attention_forward_backward(c: &mut Criterion) {
    for (device_name, device) in devices() {
        let device = device.autodiff();
        let mut group = c.benchmark_group(format!("forward_backward/{device_name}"));
        for seq_len in SIZES {
            // Forward plus backward does three times the forward's matrix products.
            group.throughput(Throughput::Elements(3 * attention_flops(seq_len)));
            let [q, k, v] = qkv(seq_len, &device).map(Tensor::require_grad);
            // The native kernel has no backward pass.
            let differentiable = KERNELS
                .into_iter()
                .filter(|(_, kernel)| !matches!(kernel, Kernel::Attn(Strategy::Native)));
            for (name, kernel) in differentiable {
                group.bench_function(BenchmarkId::new(name, seq_len), |b| {
                    b.iter(|| {
                        let context = attend(kernel, q.clone(), k.clone(), v.clone());
                        let grads = context.sum().backward();
                        let dq = q.grad(&grads).expect("q requires its gradient");
                        sync(&device);
                        black_box(dq)
                    })
                });
            }
        }
        group.finish();
    }
}

/// A layer from `[batch, seq_len, d_model]` to `[batch, seq_len, d_model]`.
type Layer = Box<dyn Fn(Tensor<3>) -> Tensor<3>>;

/// Builds a layer's module on a device.
type BuildLayer = fn(&Device) -> Layer;

/// Hidden width of the encoder block's feed-forward network (the paper's `4 · d_model`).
const D_FF: usize = 4 * D_MODEL;

/// The layers side by side, each built on a device; no dropout anywhere, post-norm and ReLU in
/// both encoder blocks, so every pair does the same work.
const LAYERS: [(&str, BuildLayer); 4] = [
    ("attn_mha", |device| {
        let mha = attn_model::MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
            .with_dropout(0.0)
            .init(device)
            .expect("d_model 512 with 8 heads is a valid configuration");
        Box::new(move |x| mha.forward(attn_model::MhaInput::self_attention(x)).output)
    }),
    ("burn_mha", |device| {
        let mha = MultiHeadAttentionConfig::new(D_MODEL, N_HEADS)
            .with_dropout(0.0)
            .init(device);
        Box::new(move |x| mha.forward(MhaInput::self_attn(x)).context)
    }),
    ("attn_encoder_block", |device| {
        let block = EncoderBlockConfig::new(D_MODEL, N_HEADS, D_FF)
            .with_dropout(0.0)
            .with_norm(NormPlacement::Post)
            .with_activation(Activation::Relu)
            .init(device)
            .expect("d_model 512, 8 heads, d_ff 2048 is a valid configuration");
        Box::new(move |x| block.forward(x, None))
    }),
    ("burn_encoder_block", |device| {
        let encoder = TransformerEncoderConfig::new(D_MODEL, D_FF, N_HEADS, 1)
            .with_dropout(0.0)
            .with_norm_first(false)
            .with_activation(ActivationConfig::Relu)
            .init(device);
        Box::new(move |x| encoder.forward(TransformerEncoderInput::new(x)))
    }),
];

/// Multi-head attention and the encoder block, ours and burn's, on `[1, s, 512]`.
fn layers(c: &mut Criterion) {
    for (device_name, device) in devices() {
        let train = device.clone().autodiff();
        let mut group = c.benchmark_group(format!("layers/{device_name}"));
        for seq_len in SIZES {
            device.seed(SEED);
            let x = Tensor::<3>::random(
                [BATCH, seq_len, D_MODEL],
                Distribution::Normal(0.0, 1.0),
                &device,
            );
            for (name, build) in LAYERS {
                let layer = build(&device);
                group.bench_function(BenchmarkId::new(format!("{name}/forward"), seq_len), |b| {
                    b.iter(|| {
                        let y = layer(x.clone());
                        sync(&device);
                        black_box(y)
                    })
                });

                let layer = build(&train);
                let x = x.clone().autodiff().require_grad();
                group.bench_function(
                    BenchmarkId::new(format!("{name}/forward_backward"), seq_len),
                    |b| {
                        b.iter(|| {
                            let grads = layer(x.clone()).sum().backward();
                            let dx = x.grad(&grads).expect("x requires its gradient");
                            sync(&train);
                            black_box(dx)
                        })
                    },
                );
            }
        }
        group.finish();
    }
}

/// One step of `attn-train`'s loop on its toy model (default `TrainConfig`: forward,
/// cross-entropy, backward, Adam), on one fixed batch so the clock sees the step only.
fn train_step(c: &mut Criterion) {
    for (device_name, device) in devices() {
        let device = device.autodiff();
        let config = TrainConfig::default();
        device.seed(SEED);
        let mut model = Some(
            config
                .encoder_config()
                .init(&device)
                .expect("the default configuration is valid"),
        );
        let mut optim = AdamConfig::new().init();
        let loss_fn = CrossEntropyLossConfig::new().init(&device);
        let batch = config.task.batch(config.batch_size, &mut Rng::new(SEED));
        let [batch_size, seq_len] = [batch.batch, batch.seq_len];
        let tokens = batch.tokens_tensor(&device); // [batch, seq_len]
        let targets = batch
            .targets_tensor(&device)
            .reshape([batch_size * seq_len]); // [batch * seq_len]
        c.bench_function(&format!("train_step/{device_name}"), |b| {
            b.iter(|| {
                let encoder = model.take().expect("the previous step put the model back");
                let logits = encoder.forward(tokens.clone()); // [batch, seq_len, n_classes]
                let [_, _, n_classes] = logits.dims();
                let logits = logits.reshape([batch_size * seq_len, n_classes]); // [batch * seq_len, n_classes]
                let loss = loss_fn.forward(logits, targets.clone());
                let grads = GradientsParams::from_grads(loss.backward(), &encoder);
                model = Some(optim.step(config.optim.lr, encoder, grads));
                sync(&device);
                black_box(loss)
            })
        });
    }
}

criterion_group! {
    name = benches;
    // Long sequences take seconds per iteration on two cores: ten samples and a short warm-up
    // keep the whole suite to tens of minutes rather than hours.
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    targets = attention_forward, attention_forward_backward, layers, train_step
}
criterion_main!(benches);
