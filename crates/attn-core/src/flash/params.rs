//! The arguments of [`FlashAttentionOps`](super::FlashAttentionOps) besides `q`, `k` and `v`:
//! the scale, causality and block ([`FlashParams`]), the kernel that computes it
//! ([`FlashKernel`]), and the optional mask and bias ([`Masking`], [`Biasing`]). They sit below
//! the operation and its kernels, which all take them.

use burn::backend::{
    Backend, ExtensionType,
    tensor::{BoolTensor, FloatTensor},
};

/// The non-tensor arguments of [`FlashAttentionOps`](super::FlashAttentionOps).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlashParams {
    /// The factor on `q·kᵀ`.
    pub scale: f64,
    /// Key `j` is masked for query `i` when `j > i + offset`.
    pub causal_offset: Option<i64>,
    /// Keys per block of [`FlashKernel::Blocks`] (the native kernel has its own tiling).
    pub block: usize,
    /// Which implementation computes the operation.
    pub kernel: FlashKernel,
}

/// Which implementation of the same recurrences [`FlashAttentionOps`](super::FlashAttentionOps)
/// runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlashKernel {
    /// The native CPU kernels ([`crate::native_attention`] and
    /// [`crate::native_attention_backward`]) on the inputs in host memory: flex's storage read
    /// in place, every other backend's tensors read back to the host.
    Native,
    /// The online softmax of `chunked.rs` in the backend's own tensor operations, over blocks
    /// of [`FlashParams::block`] keys, forward and backward: the same code on every backend.
    Blocks,
    /// The GPU kernels of `attn_kernels::cube` on the CubeCL backends (wgpu, Vulkan, Metal,
    /// CUDA): one unit per row, the other side's rows streamed through shared memory, the
    /// backward recomputing each weight from the log-sum-exp. `float32`, head dimensions up
    /// to `attn_kernels::cube::MAX_HEAD_DIM`; other problems run as [`FlashKernel::Blocks`].
    /// On flex and ndarray, which CubeCL does not run, it is [`FlashKernel::Native`].
    Cube,
}

/// The mask argument of [`FlashAttentionOps`](super::FlashAttentionOps) (`true` = the key is
/// not attended).
#[derive(ExtensionType, Clone, Debug)]
pub enum Masking<B: Backend> {
    /// Every key is attended (apart from causality).
    Unmasked,
    /// A mask broadcasting to `[batch, n_heads, seq_len_q, seq_len_kv]`.
    Masked(BoolTensor<B>),
}

/// The bias argument of [`FlashAttentionOps`](super::FlashAttentionOps): added to the scaled
/// scores.
#[derive(ExtensionType, Clone, Debug)]
pub enum Biasing<B: Backend> {
    /// No bias.
    Unbiased,
    /// A bias broadcasting to `[batch, n_heads, seq_len_q, seq_len_kv]`.
    Biased(FloatTensor<B>),
}

impl<B: Backend> Masking<B> {
    pub(crate) fn into_option(self) -> Option<BoolTensor<B>> {
        match self {
            Self::Unmasked => None,
            Self::Masked(mask) => Some(mask),
        }
    }
}

impl<B: Backend> Biasing<B> {
    pub(crate) fn into_option(self) -> Option<FloatTensor<B>> {
        match self {
            Self::Unbiased => None,
            Self::Biased(bias) => Some(bias),
        }
    }
}
