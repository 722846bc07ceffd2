//! How the layers apply their `Linear`s.

use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::Tensor;

/// `linear`'s `x · W + b`, through [`crate::ops::linear`]: the same values as
/// `Linear::forward`, with both cores busy when `x` is the one row of a decoding step.
///
/// # Shapes
/// - `x`: `[..., d_input]`
/// - returns: `[..., d_output]`
pub(crate) fn project<const D: usize>(linear: &Linear, x: Tensor<D>) -> Tensor<D> {
    crate::ops::linear(x, linear.weight.val(), linear.bias.as_ref().map(Param::val))
}
