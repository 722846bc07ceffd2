//! Criterion benchmarks of every case of the catalogue (`attn_bench::cases`), on every backend
//! of the test devices (flex, ndarray and wgpu; `ATTN_TEST_DEVICES=flex` narrows the list, as for
//! the tests): `attn_core`'s strategies beside burn's own `module::attention` on
//! `[batch, n_heads, seq_len, d_head] = [1, 8, s, 64]`, `attn_model`'s multi-head attention and
//! encoder block beside burn's `nn::MultiHeadAttention` and one-layer
//! `nn::transformer::TransformerEncoder` on `[1, s, 512]`, for s in {128, 512, 2048, 4096}, and
//! one training step of `attn-train`'s toy model.
//!
//! ```text
//! ATTN_TEST_DEVICES=flex cargo bench -p attn-bench --bench attention
//! ```
//!
//! Benchmark ids read `{device}/{impl}/{case}/{pass}/{seq_len}`: narrow a run with criterion's
//! filter, e.g.
//! `ATTN_TEST_DEVICES=flex cargo bench -p attn-bench --bench attention -- flex/attn/chunked/forward/`.
//! The native kernel runs on the CPU backends only; elsewhere its cases are left out.
//!
//! Each iteration is one run of the case as the `attn-bench` program times it: the result is
//! summed, read back and the device synchronised, so a lazy backend's queued work is inside the
//! measured time. For one JSON line per case, GFLOP/s, PyTorch alongside and peak memory, see
//! the `attn-bench` program and `docs/benchmarks.md`.

// `criterion_group!` defines a public function that cannot carry a doc comment.
#![allow(missing_docs)]

use std::time::Duration;

use attn_bench::cases::{SIZES, Step, all_cases};
use attn_testing::TestDevice;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn catalogue(c: &mut Criterion) {
    for TestDevice {
        name: device_name,
        device,
    } in attn_testing::devices()
    {
        for (case, pass) in all_cases().filter(|(case, _)| case.runs_on(&device)) {
            let id = case.id(pass);
            let mut group = c.benchmark_group(format!("{device_name}/{id}"));
            let sizes = case
                .fixed_seq_len()
                .map_or_else(|| SIZES.to_vec(), |s| vec![s]);
            for seq_len in sizes {
                if let Some(flops) = case.flops(pass, seq_len) {
                    group.throughput(Throughput::Elements(flops as u64));
                }
                // Built on the first call, so a case the filter leaves out never allocates.
                let mut step: Option<Step> = None;
                group.bench_function(BenchmarkId::from_parameter(seq_len), |b| {
                    let step = step.get_or_insert_with(|| {
                        case.prepare(pass, &device, seq_len)
                            .unwrap_or_else(|e| panic!("{device_name}/{id}/{seq_len}: {e:#}"))
                    });
                    b.iter(|| {
                        step().unwrap_or_else(|e| panic!("{device_name}/{id}/{seq_len}: {e:#}"))
                    })
                });
            }
            group.finish();
        }
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
    targets = catalogue
}
criterion_main!(benches);
