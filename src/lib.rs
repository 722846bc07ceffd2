//! `attn`: Transformer attention from first principles, on burn.
//!
//! This facade re-exports the workspace's four crates under short names:
//!
//! | module | crate | what it holds |
//! | --- | --- | --- |
//! | [`core`] | `attn-core` | `softmax(Q·Kᵀ/√d_head)·V` as pure functions: masks, heads, four strategies and the automatic choice |
//! | [`pos`] | `attn-pos` | sinusoidal, learned, rotary and ALiBi positional schemes |
//! | [`model`] | `attn-model` | multi-head attention, feed-forward, encoder block, encoder, token encoder |
//! | [`train`] | `attn-train` | toy tasks, the training loop, checkpoints, plots, the `attn-train` program |
//!
//! Backends are cargo features of this crate: `flex` (default, pure-Rust CPU), `ndarray`,
//! `wgpu` (GPU through Vulkan, Metal or DX12), and `vulkan`, `metal`, `cuda` passed through.

pub use attn_core as core;
pub use attn_model as model;
pub use attn_pos as pos;
pub use attn_train as train;

pub mod reference;
