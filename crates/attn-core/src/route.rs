//! The one decision of this crate: which code computes a call of
//! [`try_scaled_dot_product_attention`](crate::try_scaled_dot_product_attention), from the
//! strategy asked for, the options and the device ([`Route::choose`]), and the one `match` that
//! runs it ([`Route::run`]).

use burn::tensor::Tensor;

use crate::flash::{self, FlashKernel};
use crate::{
    AttentionError, AttentionOptions, PreparedAttention, Strategy, chunked, explicit, fused, native,
};

/// What attention returns.
#[derive(Clone, Debug)]
pub struct AttentionOutput {
    /// The weighted sum of values, `[batch, n_heads, seq_len_q, d_value]`.
    pub context: Tensor<4>,
    /// The weights `[batch, n_heads, seq_len_q, seq_len_kv]`, when asked for (after dropout,
    /// i.e. the weights that were actually applied to `v`).
    pub weights: Option<Tensor<4>>,
    /// The code that computed them: the strategy asked for, as settled for these options and
    /// this device.
    pub route: Route,
}

/// From this many keys on, [`Strategy::Auto`] trains through the native kernel and its own
/// backward on the CPU backends. Measured on flex, `[1, 8, s, 64]`, forward plus backward: the
/// explicit strategy through autodiff is faster at s = 16 (0.061 against 0.135 ms), the native
/// pair at s = 64 (0.73 against 1.23 ms) and beyond.
pub const NATIVE_TRAINING_MIN_KEYS: usize = 64;

/// From this many keys on, inference with at most [`DECODE_MAX_QUERIES`] queries per head
/// takes the decode pass ([`Route::NativeDecode`]) on the CPU backends under
/// [`Strategy::Auto`] and [`Strategy::Native`]. Below it a call is too small for the split
/// along the keys to pay for its tasks and merge.
pub const DECODE_MIN_KEYS: usize = 64;

/// The most queries per (batch, head) the decode pass ([`Route::NativeDecode`]) takes.
pub const DECODE_MAX_QUERIES: usize = attn_kernels::DECODE_MAX_QUERIES;

/// The code that computed an attention call ([`AttentionOutput::route`]).
///
/// Each [`Strategy`] is one algorithm; where it runs as more than one route, the routes compute
/// it with the same recurrences and differ only in how burn reaches them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// [`Strategy::Explicit`]: scores and weights as named tensors (`explicit.rs`); burn's
    /// autodiff differentiates every step.
    Explicit,
    /// [`Strategy::Chunked`] as one [`FlashAttentionOps`](crate::FlashAttentionOps) operation
    /// with [`FlashKernel::Blocks`]: the online softmax of `chunked.rs` over blocks of `block`
    /// keys in tensor operations, and under autodiff one graph node whose backward is
    /// `chunked.rs`'s block-by-block backward. Memory `O(seq_len_q × block)` per head, in
    /// training too.
    ChunkedBlocks {
        /// Keys per block.
        block: usize,
    },
    /// [`Strategy::Chunked`]'s forward in tensor operations that burn's autodiff records block
    /// by block (so training keeps every block, `O(seq_len_q × seq_len_kv)`): where the
    /// operation is not built for the device's backend.
    ChunkedRecorded {
        /// Keys per block.
        block: usize,
    },
    /// [`Strategy::Fused`]: burn's `module::attention` (`fused.rs`).
    Fused,
    /// [`Strategy::Native`] as one [`FlashAttentionOps`](crate::FlashAttentionOps) operation
    /// with [`FlashKernel::Native`] (flex and ndarray): differentiable through the kernel's own
    /// backward.
    NativeOperation,
    /// [`Strategy::Native`] on the CubeCL backends (wgpu, Vulkan, Metal, CUDA) as one
    /// [`FlashAttentionOps`](crate::FlashAttentionOps) operation with [`FlashKernel::Cube`]:
    /// this workspace's GPU kernels, forward and FlashAttention-2 backward, so that training
    /// memory is linear in the length. `float32` with head dimensions up to
    /// `attn_kernels::cube::MAX_HEAD_DIM` (256) (the kernels keep a row in registers).
    CubeOperation,
    /// [`Strategy::Native`] through host copies (`into_data`, `from_data`), on a device or for a
    /// problem that neither the CPU nor the GPU kernels serve as the operation; it cannot be
    /// recorded by autodiff.
    NativeHost,
    /// [`Strategy::Native`]'s decode pass (`attn_kernels::decode_attention`), on flex and ndarray in
    /// inference with at most [`DECODE_MAX_QUERIES`] queries and at least [`DECODE_MIN_KEYS`]
    /// keys: the keys of each (batch, key/value head) split into chunks across threads, each
    /// chunk's partial softmax merged exactly (flash-decoding). Never chosen under a recording
    /// autodiff graph.
    NativeDecode,
}

impl Route {
    /// The name used in test messages and benchmark output.
    pub fn name(&self) -> &'static str {
        match self {
            Route::Explicit => "explicit",
            Route::ChunkedBlocks { .. } => "chunked (one operation)",
            Route::ChunkedRecorded { .. } => "chunked (recorded block by block)",
            Route::Fused => "fused",
            Route::NativeOperation => "native (one operation)",
            Route::CubeOperation => "native (CubeCL kernels, one operation)",
            Route::NativeHost => "native (host copies)",
            Route::NativeDecode => "native decode (split keys)",
        }
    }

    /// The route for `options.strategy` on `q`'s device, after checking that a forced strategy
    /// can honour the options.
    pub(crate) fn choose(
        plan: &PreparedAttention,
        q: &Tensor<4>,
        k: &Tensor<4>,
        v: &Tensor<4>,
        options: &AttentionOptions,
    ) -> Result<Self, AttentionError> {
        let device = q.device();
        let bias_tracked = plan.bias.as_ref().is_some_and(Tensor::is_tracked);
        let recording = q.is_tracked() || k.is_tracked() || v.is_tracked() || bias_tracked;
        // FlashAttentionOps is built for this backend: it differentiates q, k, v and a tracked
        // bias (flash_attention_bias_backward).
        let operation = flash::flash_serves(&device);
        let native = if operation && native::native_serves(&device) {
            Route::NativeOperation
        } else if operation && cube_kernels_serve(q, v) {
            Route::CubeOperation
        } else {
            Route::NativeHost
        };
        let differentiable = matches!(native, Route::NativeOperation | Route::CubeOperation);
        let needs_matrix = options.need_weights || plan.dropout > 0.0;
        let [_, _, seq_len_q, seq_len_kv] = plan.scores_shape;
        // A few queries against a long cache, nothing to record, data in host memory.
        let decode = !recording
            && native::native_serves(&device)
            && seq_len_q <= DECODE_MAX_QUERIES
            && seq_len_kv >= DECODE_MIN_KEYS;
        match options.strategy {
            Strategy::Auto if needs_matrix => Ok(Route::Explicit),
            Strategy::Auto if recording => {
                let long = plan.scores_shape[3] >= NATIVE_TRAINING_MIN_KEYS;
                if long && differentiable {
                    Ok(native)
                } else {
                    Ok(Route::Explicit)
                }
            }
            Strategy::Auto if decode => Ok(Route::NativeDecode),
            Strategy::Auto if native::native_serves(&device) => Ok(native),
            Strategy::Auto => Ok(Route::Fused),
            Strategy::Explicit => Ok(Route::Explicit),
            Strategy::Chunked { block } if block == 0 => {
                Err(AttentionError::InvalidBlock { block })
            }
            forced @ (Strategy::Chunked { .. } | Strategy::Fused) if needs_matrix => {
                Err(AttentionError::StrategyCannot {
                    strategy: forced.name(),
                    what: if options.need_weights {
                        "return the attention weights"
                    } else {
                        "apply dropout to the weights"
                    },
                })
            }
            Strategy::Chunked { block } if operation => Ok(Route::ChunkedBlocks { block }),
            Strategy::Chunked { block } => Ok(Route::ChunkedRecorded { block }),
            Strategy::Fused => Ok(Route::Fused),
            Strategy::Native => {
                native::check_can_run(q, k, v, options, plan, differentiable)?;
                Ok(if decode { Route::NativeDecode } else { native })
            }
        }
    }

    /// Runs this route; the weights are returned when `need_weights` (only
    /// [`Route::Explicit`] is chosen then).
    pub(crate) fn run(
        self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        plan: &PreparedAttention,
        need_weights: bool,
    ) -> AttentionOutput {
        let (context, weights) = match self {
            Route::Explicit => {
                let (context, weights) = explicit::attention(q, k, v, plan);
                (context, need_weights.then_some(weights))
            }
            Route::ChunkedBlocks { block } => {
                let (context, _lse) = flash::attention(q, k, v, plan, FlashKernel::Blocks, block);
                (context, None)
            }
            Route::ChunkedRecorded { block } => (chunked::attention(q, k, v, plan, block), None),
            Route::Fused => (fused::attention(q, k, v, plan), None),
            Route::NativeOperation => {
                // The native kernel has its own tiling: the block is not read.
                let block = chunked::DEFAULT_BLOCK;
                let (context, _lse) = flash::attention(q, k, v, plan, FlashKernel::Native, block);
                (context, None)
            }
            Route::CubeOperation => {
                // The GPU kernels have their own tiling: the block is not read.
                let block = chunked::DEFAULT_BLOCK;
                let (context, _lse) = flash::attention(q, k, v, plan, FlashKernel::Cube, block);
                (context, None)
            }
            Route::NativeHost => (native::attention(q, k, v, plan), None),
            Route::NativeDecode => (native::decode_attention(q, k, v, plan), None),
        };
        AttentionOutput {
            context,
            weights,
            route: self,
        }
    }
}

/// Whether `q` and `v` live on a CubeCL backend and the GPU kernels take their shapes and type.
fn cube_kernels_serve(q: &Tensor<4>, v: &Tensor<4>) -> bool {
    #[cfg(feature = "cube")]
    {
        crate::backend::BackendKind::of(&q.device()) == crate::backend::BackendKind::Cube
            && flash::cube_serves(q, v)
    }
    #[cfg(not(feature = "cube"))]
    {
        let _ = (q, v);
        false
    }
}
