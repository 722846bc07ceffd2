//! CPU kernels for scaled dot-product attention, on plain `f32` slices.
//!
//! ```text
//! Attention(Q, K, V) = softmax(Q·Kᵀ · scale + bias, masked → −∞) · V
//! ```
//!
//! [`Problem`] describes one call: `q`, `k` and `v` as rows of slices (any strides whose rows
//! are contiguous), the shapes, the scale, an optional mask and bias that broadcast to the
//! scores, and an optional causal offset. The passes write into buffers the caller owns:
//!
//! - [`attention`]: FlashAttention-2's forward, the context and each row's log-sum-exp;
//! - [`attention_backward`]: FlashAttention-2's backward, the gradients of `q`, `k` and `v`,
//!   with each block of weights recomputed from the log-sum-exp and never stored;
//! - [`decode_attention`]: a few queries (up to [`DECODE_MAX_QUERIES`]) against many keys,
//!   split along the keys so that every core has work;
//! - [`gelu`] and [`gelu_backward`]: GELU, exact or GPT-2's tanh form, one pass on every core;
//! - [`silu_mul`]: SwiGLU's `silu(gate) · up`, one pass on every core;
//! - [`layer_norm`] and [`layer_norm_backward`]: LayerNorm's row loops, and [`rms_norm`]:
//!   RMSNorm's, rows split among the threads;
//! - [`rotate`]: rotary positions applied to rows of queries or keys, one pass;
//! - [`products`]: matrix products on strided views through `gemm`, each output written once;
//! - [`half`]: `x · Wᵀ` with `bfloat16` weights widened in registers, for decoding a
//!   half-precision model;
//! - [`AdamStep`] and [`AdamWStep`]: Adam's and AdamW's update of one parameter, burn's
//!   expressions in one pass on every thread.
//!
//! With the `cube` feature, the `cube` module holds the FlashAttention-2 forward and backward as CubeCL
//! kernels, for GPUs.
//!
//! [`oracle`] holds the same mathematics in `f64`, one value at a time: the reference that
//! every kernel is tested against.
//!
//! # Layout
//!
//! Each line uses only the lines below it:
//!
//! ```text
//! forward.rs, backward.rs, decode.rs  the attention passes (one Pass each)
//! activation.rs                       element-wise passes (GELU and its backward, SwiGLU's gate)
//! layer_norm.rs                       LayerNorm's and RMSNorm's row loops
//! rotary.rs                           rotary positions on rows
//! products.rs                         matrix products through gemm (Matrix, product)
//! half.rs                             products with bfloat16 weights, and the kernel for many rows
//! bf16_tiles.rs                       many rows by bfloat16 weights on AMX tiles
//! bf16_dot.rs                         many rows on vdpbf16ps, and the packing both kernels use
//! weight_rows.rs                      weights stored as rows (Rows, Bf16Rows), bfloat16 bits
//! adam.rs                             Adam's element loop (AdamStep)
//! problem.rs                          the inputs as slices (Problem, Rows, Broadcast)
//! tiling.rs                           block sizes and tasks from the machine (CpuCaches)
//! instructions.rs                     which instruction set runs a pass (Instructions)
//! portable.rs, avx2.rs, avx512.rs     the micro-kernels, once per instruction set (exp.rs: 2^x)
//! simd.rs                             the SIMD layer (Kernels, Gemm, MR, NR, Pass, Vectorized)
//! aligned.rs                          buffers that start on a cache line
//! ```
//!
//! A new pass is a new file that implements `simd::Pass`; no instruction-set file changes.
//! This crate has no dependency on burn or any tensor library: Cargo keeps the kernels on
//! slices.
//!
//! # Environment
//!
//! - `ATTN_NATIVE_ISA=avx512|avx2|portable` caps the instruction set of a process (to time the
//!   AVX2 loops on an AVX-512 machine, or `vdpbf16ps` on one with AMX); `amx`, the default,
//!   caps nothing. Any other value is refused with a message.
//! - `ATTN_NATIVE_TILING` overrides the block sizes (see [`CpuCaches`] and `tiling.rs`).

mod activation;
mod adam;
mod aligned;
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod backward;
mod bf16_dot;
mod bf16_tiles;
#[cfg(feature = "cube")]
pub mod cube;
mod decode;
mod exp;
mod forward;
pub mod half;
mod instructions;
mod layer_norm;
pub mod oracle;
mod portable;
mod problem;
pub mod products;
mod rotary;
mod simd;
#[cfg(test)]
mod testing;
mod tiling;
mod weight_rows;

pub use activation::{GeluForm, gelu, gelu_backward, gelu_tanh, silu_mul};
pub use adam::{AdamStep, AdamWStep};
pub use backward::{Gradients, attention_backward};
pub use decode::{DECODE_MAX_QUERIES, attention as decode_attention};
pub use forward::attention;
pub use layer_norm::{layer_norm, layer_norm_backward, rms_norm};
pub use problem::{Broadcast, HeadRows, Problem, Rows};
pub use rotary::rotate;
pub use tiling::CpuCaches;

/// The README's example, run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
