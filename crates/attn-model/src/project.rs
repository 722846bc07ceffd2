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

/// Each of `linears` applied to `x`, through [`crate::ops::linears`]: one split of all the
/// products among the threads when `x` is the few rows of a decoding step.
///
/// # Shapes
/// - `x`: `[..., d_input]`
/// - returns: one `[..., d_output_i]` for each linear
pub(crate) fn project_many<const D: usize>(linears: &[&Linear], x: Tensor<D>) -> Vec<Tensor<D>> {
    let products: Vec<_> = linears
        .iter()
        .map(|l| (l.weight.val(), l.bias.as_ref().map(Param::val)))
        .collect();
    crate::ops::linears(x, &products)
}
