//! `attn`: Transformer attention from first principles, on burn.
//!
//! ```text
//! Attention(Q, K, V) = softmax(Q·Kᵀ / √d_head) · V
//! ```
//!
//! This facade re-exports the workspace's four crates under short names:
//!
//! | module | crate | what it holds |
//! | --- | --- | --- |
//! | [`core`] | `attn-core` | `softmax(Q·Kᵀ/√d_head)·V` as pure functions: masks, heads, the strategies (explicit, chunked, fused, native CPU kernels) and the automatic choice |
//! | [`pos`] | `attn-pos` | sinusoidal, learned, rotary and ALiBi positional schemes |
//! | [`model`] | `attn-model` | multi-head attention, feed-forward, encoder and decoder blocks and stacks, the token encoder, the decoder-only `TokenDecoder` and the `EncoderDecoder`; the KV cache and generation (greedy, temperature, top-k, top-p); PyTorch weights and Hugging Face BERT and GPT-2 folders ([`model::hf`]) |
//! | [`train`] | `attn-train` | toy tasks, the training loop, evaluation by generation, checkpoints, plots, the `attn-train` program |
//!
//! and [`reference`](mod@reference), which checks the implementation against reference vectors in
//! `attn-reference`'s format, as the `check_reference` example does.
//!
//! Backends are cargo features of this crate: `flex` (default, pure-Rust CPU), `ndarray`,
//! `wgpu` (GPU through Vulkan, Metal or DX12), and `vulkan`, `metal`, `cuda` passed through.
//!
//! A newcomer starts with the workspace's README: the toy run
//! (`cargo run --release -p attn-train -- --task reverse --seed 1`), the walkthrough example
//! and the `docs/` pages, one concept per page.

pub use attn_core as core;
pub use attn_infer as infer;
pub use attn_model as model;
pub use attn_pos as pos;
pub use attn_train as train;

pub mod reference;
