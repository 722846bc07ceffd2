//! Criterion benchmarks of a decoding step's products by themselves: one row of `x` times the
//! weight matrices of SmolLM2-135M's and Qwen2.5-0.5B's layers and of SmolLM2's output head,
//! `bfloat16` and `f32`, grouped as a decoding step calls them, through
//! `attn_kernels::half::linear_rows_many` (what flex runs for a loaded checkpoint's `Linear`s in a
//! decoding step).
//!
//! ```text
//! cargo bench -p attn-bench --bench decode_products
//! RAYON_NUM_THREADS=1 cargo bench -p attn-bench --bench decode_products   # one thread
//! ```
//!
//! Throughput is the weights' bytes, so criterion reports the read rate, to set against the
//! memory's bandwidth (`attn-bench hf`'s memory wall). Each iteration multiplies the next of
//! several copies of the matrix, 512 MiB of them in all, so that no copy is still in a cache
//! when it is read again, as in a decoding step, where every weight is read once per token.
//! The calls run on rayon's pool, as a model's decoding step does.

// `criterion_group!` defines a public function that cannot carry a doc comment.
#![allow(missing_docs)]

use attn_kernels::half::{Rows, Weight, linear_rows, linear_rows_many};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

/// The products of one call, `[d_output, d_input]` each, as a decoding step makes them: a
/// layer's queries, keys and values together, its output projection, SwiGLU's gate and
/// expansion together, its contraction, and SmolLM2's output head. `_apart` is the same
/// queries, keys and values as three calls, one after another.
const CALLS: &[(&str, &[(usize, usize)])] = &[
    ("smollm2_qkv", &[(576, 576), (192, 576), (192, 576)]),
    ("smollm2_qkv_apart", &[(576, 576), (192, 576), (192, 576)]),
    ("smollm2_o", &[(576, 576)]),
    ("smollm2_gate_up", &[(1536, 576), (1536, 576)]),
    ("smollm2_down", &[(576, 1536)]),
    ("smollm2_head", &[(49152, 576)]),
    ("qwen_qkv", &[(896, 896), (128, 896), (128, 896)]),
    ("qwen_qkv_apart", &[(896, 896), (128, 896), (128, 896)]),
    ("qwen_o", &[(896, 896)]),
    ("qwen_gate_up", &[(4864, 896), (4864, 896)]),
    ("qwen_down", &[(896, 4864)]),
];

/// Bytes of copies the iterations cycle through.
const SPAN: usize = 512 << 20;

fn products<T: Weight>(c: &mut Criterion, type_name: &str, weight: impl Fn(usize) -> T) {
    let mut group = c.benchmark_group(format!("decode_products/{type_name}"));
    for &(name, shapes) in CALLS {
        let per: usize = shapes
            .iter()
            .map(|(d_output, d_input)| d_output * d_input)
            .sum();
        let copies = SPAN / (per * size_of::<T>()) + 1;
        let values: Vec<T> = (0..per * copies).map(&weight).collect();
        let d_input = shapes[0].1;
        let x: Vec<f32> = (0..d_input).map(|i| (i as f32 * 0.01).sin()).collect();
        let apart = name.ends_with("_apart");
        group.throughput(Throughput::Bytes((per * size_of::<T>()) as u64));
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            let mut next = 0;
            b.iter(|| {
                let mut offset = next * per;
                next = (next + 1) % copies;
                let calls: Vec<(Rows<'_, T>, Option<&[f32]>)> = shapes
                    .iter()
                    .map(|&(d_output, d_input)| {
                        let rows = Rows {
                            values: &values,
                            offset,
                            d_output,
                            d_input,
                            row: d_input,
                        };
                        offset += d_output * d_input;
                        (rows, None)
                    })
                    .collect();
                rayon::scope(|_| {
                    if apart {
                        calls
                            .iter()
                            .map(|(w, _)| linear_rows(&x, 1, w, None))
                            .collect::<Vec<_>>()
                    } else {
                        linear_rows_many(&x, 1, &calls)
                    }
                })
            });
        });
    }
    group.finish();
}

fn decode_products(c: &mut Criterion) {
    // bfloat16 values near 1 (bits 0x3f80 to 0x3fff), f32 values in [0, 1).
    products(c, "bf16", |i| 0x3f80u16 | (i as u16 & 0x7f));
    products(c, "f32", |i| (i % 97) as f32 / 97.0);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = decode_products
}
criterion_main!(benches);
