//! The residual connection every encoder and decoder sub-layer sits in (Vaswani et al. 2017,
//! §5.4), with its LayerNorm after the sum (the paper) or before the sub-layer (pre-norm).
//!
//! ```text
//! post-norm (paper, PyTorch's default):  x = LayerNorm(x + Dropout(Sublayer(x)))
//! pre-norm  (GPT-2, PyTorch norm_first): x = x + Dropout(Sublayer(LayerNorm(x)))
//! ```
//!
//! The LayerNorm is the block's own (`norm_attn`, `norm_ff`, ...), handed in per call, so that
//! its parameters keep their names in the block's record; this module holds only the dropout
//! and the placement, neither of which is recorded.

use burn::module::Module;
use burn::nn::{Dropout, DropoutConfig};
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::norm::{LayerNorm, Norm};

/// Where each block's LayerNorms sit relative to the residual connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum NormPlacement {
    /// `LayerNorm(x + Sublayer(x))`: the paper and PyTorch's default (`norm_first=False`).
    #[default]
    Post,
    /// `x + Sublayer(LayerNorm(x))`: trains more stably in deep stacks (Xiong et al. 2020);
    /// usually followed by a final LayerNorm after the last block.
    Pre,
}

/// The norm a residual connection applies: an encoder block's [`LayerNorm`], a decoder
/// block's [`Norm`].
pub(crate) trait Normalize {
    /// The normalised rows of `x`.
    fn normalize(&self, x: Tensor<3>) -> Tensor<3>;
}

impl Normalize for LayerNorm {
    fn normalize(&self, x: Tensor<3>) -> Tensor<3> {
        self.forward(x)
    }
}

impl Normalize for Norm {
    fn normalize(&self, x: Tensor<3>) -> Tensor<3> {
        self.forward(x)
    }
}

/// Residual dropout and the norm placement of one block's sub-layers.
#[derive(Module, Debug)]
pub(crate) struct Residual {
    /// On each sub-layer's output before it is added (paper §5.4).
    dropout: Dropout,
    #[module(skip)]
    placement: NormPlacement,
}

impl Residual {
    /// Dropout with probability `dropout` on each sub-layer's output, norms at `placement`.
    pub(crate) fn new(placement: NormPlacement, dropout: f64) -> Self {
        Self {
            dropout: DropoutConfig::new(dropout).init(),
            placement,
        }
    }

    /// `LayerNorm(x + Dropout(f(x)))` (post-norm) or `x + Dropout(f(LayerNorm(x)))` (pre-norm),
    /// passing on what the sub-layer returns beside its output (attention weights).
    ///
    /// # Shapes
    /// - `x` and the sub-layer's output: `[batch, seq_len, d_model]`
    /// - returns: `[batch, seq_len, d_model]`
    ///
    /// # Errors
    /// The sub-layer's.
    pub(crate) fn apply<T>(
        &self,
        x: Tensor<3>,
        norm: &impl Normalize,
        sublayer: impl FnOnce(Tensor<3>) -> Result<(Tensor<3>, T), ModelError>,
    ) -> Result<(Tensor<3>, T), ModelError> {
        match self.placement {
            NormPlacement::Post => {
                let (y, extra) = sublayer(x.clone())?;
                Ok((norm.normalize(x + self.dropout.forward(y)), extra))
            }
            NormPlacement::Pre => {
                let (y, extra) = sublayer(norm.normalize(x.clone()))?;
                Ok((x + self.dropout.forward(y), extra))
            }
        }
    }
}
