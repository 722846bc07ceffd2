//! flex's one-row products split across rayon's threads: a decoding step's projections, each
//! strip of output columns computed by the same `gemm` path on its own thread.

use burn::tensor::{DType, Tensor};
use rayon::prelude::*;

/// Output columns per strip at the least: a strip of `W` as wide as a few cache lines, so
/// that each of its rows is read in whole lines.
const MIN_COLUMNS: usize = 64;

/// Values of `W` below which one thread is quicker than waking the others.
const MIN_VALUES: usize = 1 << 16;

/// Whether [`one_row`] splits this call across threads.
pub(super) fn serves<const D: usize>(
    x: &Tensor<D>,
    weight: &Tensor<2>,
    bias: Option<&Tensor<1>>,
) -> bool {
    let dims = x.dims();
    let [d_input, d_output] = weight.dims();
    let rows: usize = dims[..D - 1].iter().product();
    rows == 1
        && dims[D - 1] == d_input
        && d_input * d_output >= MIN_VALUES
        && d_output >= 2 * MIN_COLUMNS
        && rayon::current_num_threads() > 1
        && bias.is_none_or(|b| b.dims() == [d_output])
        && [x.dtype(), weight.dtype()]
            .into_iter()
            .chain(bias.map(Tensor::dtype))
            .all(|t| t == DType::F32)
        && super::super::is_flex_inference(x)
        && !stored_as_rows(weight)
}

/// [`super::linears`]' shared split, or `None` when the call is not one
/// [`super::products::few_rows_many`] serves (or there is one product alone).
pub(super) fn few_rows_many<const D: usize>(
    x: &Tensor<D>,
    products: &[(Tensor<2>, Option<Tensor<1>>)],
) -> Option<Vec<Tensor<D>>> {
    if products.len() < 2 || !super::super::is_flex_inference(x) {
        return None;
    }
    let flex = |t: Tensor<2>| t.try_into_primitive::<burn::backend::Flex>().ok();
    let operands = products
        .iter()
        .map(|(w, b)| {
            let bias = match b {
                Some(b) => Some(b.clone().try_into_primitive::<burn::backend::Flex>().ok()?),
                None => None,
            };
            Some((flex(w.clone())?, bias))
        })
        .collect::<Option<Vec<_>>>()?;
    let values = x.clone().try_into_primitive::<burn::backend::Flex>().ok()?;
    let ys = super::products::few_rows_many(&values, &operands)?;
    let device = x.device();
    Some(
        ys.into_iter()
            .zip(products)
            .map(|(y, (w, _))| {
                let mut dims = x.dims();
                dims[D - 1] = w.dims()[1];
                Tensor::from_data(burn::tensor::TensorData::new(y, dims), &device)
            })
            .collect(),
    )
}

/// Whether `weight` is a flex tensor stored as rows, which `products` multiplies by one
/// row of `x` itself.
fn stored_as_rows(weight: &Tensor<2>) -> bool {
    weight
        .clone()
        .try_into_primitive::<burn::backend::Flex>()
        .is_ok_and(|w| super::products::is_rows_view(&w))
}

/// `x · weight + bias` with the output columns split into one strip per thread, or `None`
/// when the call is not one this path serves.
///
/// Each strip is a two-dimensional product of `x` by a `narrow`ed view of `W`: flex
/// multiplies strided views in place (a batch dimension would make it copy the view first),
/// and `gemm` takes its matrix-vector path for the strip. The strips are joined with one
/// `cat` of `d_output` floats.
pub(super) fn one_row<const D: usize>(
    x: &Tensor<D>,
    weight: &Tensor<2>,
    bias: Option<&Tensor<1>>,
) -> Option<Tensor<D>> {
    if !serves(x, weight, bias) {
        return None;
    }
    let mut dims = x.dims();
    let [d_input, d_output] = weight.dims();
    let row = x.clone().reshape([1, d_input]); // [1, d_input]
    let columns = d_output
        .div_ceil(rayon::current_num_threads())
        .next_multiple_of(MIN_COLUMNS);
    let strips: Vec<(usize, usize)> = (0..d_output)
        .step_by(columns)
        .map(|first| (first, columns.min(d_output - first)))
        .collect();
    let parts: Vec<Tensor<2>> = strips
        .into_par_iter()
        .map(|(first, n)| {
            let product = row.clone().matmul(weight.clone().narrow(1, first, n)); // [1, n]
            match bias {
                Some(b) => product + b.clone().narrow(0, first, n).unsqueeze(), // [1, n]
                None => product,
            }
        })
        .collect();
    dims[D - 1] = d_output;
    Some(Tensor::cat(parts, 1).reshape(dims))
}
