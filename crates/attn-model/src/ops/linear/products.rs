//! The `gemm` calls behind flex's [`LinearOps`](super::LinearOps): each output is a fresh
//! vector that the product alone writes (after the bias rows, where there is a bias).

use std::borrow::Cow;

use attn_kernels::products::{Matrix, product};
use burn::backend::TensorMetadata;
use burn::backend::flex::FlexTensor;
use burn::tensor::{DType, Shape, TensorData};

use attn_core::backend::flex_floats;

/// `t` as a `[rows, columns]` [`Matrix`]: all its leading dimensions are rows. Contiguous values
/// are borrowed, so is a two-dimensional view with non-negative strides (a transpose,
/// a narrowed block); anything else is copied out. `None` unless `t` is `f32`.
fn matrix(t: &FlexTensor) -> Option<Matrix<'_>> {
    if t.dtype() != DType::F32 {
        return None;
    }
    let shape = t.shape();
    let columns = shape.as_slice().last().copied().unwrap_or(1);
    let rows = shape.num_elements().checked_div(columns).unwrap_or(0);
    let layout = t.layout();
    let strides = layout.strides();
    if shape.num_dims() == 2 && !layout.is_contiguous() && strides.iter().all(|&s| s >= 0) {
        return Some(Matrix {
            values: Cow::Borrowed(t.storage::<f32>()),
            offset: layout.start_offset(),
            rows,
            columns,
            row: strides[0].unsigned_abs(),
            column: strides[1].unsigned_abs(),
        });
    }
    Some(Matrix {
        values: flex_floats(t),
        offset: 0,
        rows,
        columns,
        row: columns,
        column: 1,
    })
}

fn tensor(values: Vec<f32>, shape: Shape) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape))
}

/// `shape` with its last dimension `last`.
fn with_last(shape: Shape, last: usize) -> Shape {
    let mut dims = shape.as_slice().to_vec();
    if let Some(d) = dims.last_mut() {
        *d = last;
    }
    Shape::from(dims)
}

/// Rows of `x` up to which a `bfloat16` weight is read in place, each value widened in
/// registers and multiplied by `f32` inputs ([`attn_kernels::half`]); past them, the
/// product is compute-bound: the inputs are rounded to `bfloat16` for the CPU's
/// `vdpbf16ps` where it has one ([`attn_kernels::half::linear_bf16_dot`]), else the weight
/// is widened to `f32` for `gemm`.
const HALF_ROWS: usize = 8;

/// What [`forward_bf16`] runs `rows` rows of a weight in rows on ([`super::bf16_products`]).
pub(super) fn bf16_instructions(rows: usize) -> &'static str {
    if rows <= HALF_ROWS {
        "bf16 widened in registers"
    } else {
        attn_kernels::half::bf16_dot_instructions(rows).unwrap_or("f32 gemm")
    }
}

/// `x · weight + bias` for a `bfloat16` weight and `f32` `x` and bias: read in place when
/// the weight is the transpose of `[d_output, d_input]` storage (a loaded checkpoint's
/// `Linear`, a tied embedding table), by [`HALF_ROWS`]'s rule, else widened to `f32` where
/// its values lie and multiplied through the same strides. `None` when `x` or the bias is not
/// `f32`, or the weight has a negative stride.
fn forward_bf16(
    x: &FlexTensor,
    weight: &FlexTensor,
    bias: Option<&FlexTensor>,
) -> Option<FlexTensor> {
    use half::slice::HalfFloatSliceExt;
    let a = matrix(x)?;
    let bias = match bias {
        Some(b) if b.dtype() != DType::F32 => return None,
        Some(b) => Some(flex_floats(b)),
        None => None,
    };
    let layout = weight.layout();
    let (shape, strides) = (weight.shape(), layout.strides());
    let (d_input, d_output) = (shape[0], shape[1]);
    let in_rows = a.columns == d_input
        && strides[0] == 1
        && strides[1] >= 0
        && strides[1].unsigned_abs() >= d_input;
    let rows = rows_of(weight, weight.storage::<half::bf16>().reinterpret_cast());
    let dot =
        || attn_kernels::half::linear_bf16_dot(&flex_floats(x), a.rows, &rows, bias.as_deref());
    let y = if in_rows && a.rows <= HALF_ROWS {
        let x = flex_floats(x);
        attn_kernels::half::linear_bf16(&x, a.rows, &rows, bias.as_deref())
    } else if let Some(y) = in_rows.then(dot).flatten() {
        // Many rows on a CPU with AVX-512 BF16: rounded to bfloat16, multiplied with
        // vdpbf16ps, as PyTorch multiplies a bfloat16 model.
        y
    } else if strides.iter().all(|&s| s >= 0) {
        // The stored values widened where they lie, on every thread, and multiplied as
        // the same strided view: no transposed copy is made.
        use rayon::prelude::*;
        let stored: &[half::bf16] = weight.storage::<half::bf16>();
        let mut wide = vec![0f32; stored.len()];
        wide.par_chunks_mut(1 << 16)
            .zip(stored.par_chunks(1 << 16))
            .for_each(|(out, values)| {
                for (o, v) in out.iter_mut().zip(values) {
                    *o = v.to_f32();
                }
            });
        let w = Matrix {
            values: Cow::Owned(wide),
            offset: layout.start_offset(),
            rows: d_input,
            columns: d_output,
            row: strides[0].unsigned_abs(),
            column: strides[1].unsigned_abs(),
        };
        product(&a, &w, bias.as_deref())
    } else {
        return None;
    };
    Some(tensor(y, with_last(x.shape(), d_output)))
}

/// Whether `weight` (`[d_input, d_output]`) is the transpose of `[d_output, d_input]`
/// storage, each output's weights contiguous: a loaded checkpoint's `Linear`, a tied
/// embedding table seen as the output head.
pub(super) fn is_rows_view(weight: &FlexTensor) -> bool {
    let (shape, layout) = (weight.shape(), weight.layout());
    let strides = layout.strides();
    shape.num_dims() == 2
        && strides[0] == 1
        && strides[1] >= 0
        && strides[1].unsigned_abs() >= shape[0]
}

/// `x · weight + bias` for at most [`HALF_ROWS`] rows of `x` and an `f32` weight stored as
/// rows ([`is_rows_view`]): each output's weights read once as a dot product with every row,
/// the outputs split among the threads ([`attn_kernels::half::linear_rows`]); a decoding
/// step's products. `None` for any other call.
fn few_rows_f32(
    x: &FlexTensor,
    weight: &FlexTensor,
    bias: Option<&FlexTensor>,
) -> Option<FlexTensor> {
    if weight.dtype() != DType::F32 || x.dtype() != DType::F32 || !is_rows_view(weight) {
        return None;
    }
    let a = matrix(x)?;
    let (d_input, d_output) = (weight.shape()[0], weight.shape()[1]);
    if a.rows > HALF_ROWS || a.columns != d_input {
        return None;
    }
    let bias = match bias {
        Some(b) if b.dtype() != DType::F32 => return None,
        Some(b) => Some(flex_floats(b)),
        None => None,
    };
    let rows = rows_of(weight, weight.storage::<f32>());
    let y = attn_kernels::half::linear_rows(&flex_floats(x), a.rows, &rows, bias.as_deref());
    Some(tensor(y, with_last(x.shape(), d_output)))
}

/// `weight` (stored as rows, [`is_rows_view`]) as [`attn_kernels::half::Rows`] over
/// `values`, its storage seen as `T`.
fn rows_of<'a, T>(weight: &FlexTensor, values: &'a [T]) -> attn_kernels::half::Rows<'a, T> {
    let layout = weight.layout();
    attn_kernels::half::Rows {
        values,
        offset: layout.start_offset(),
        d_output: weight.shape()[1],
        d_input: weight.shape()[0],
        row: layout.strides()[1].unsigned_abs(),
    }
}

/// `x · W_i + b_i` for each of `products`, in one split of all their outputs among the
/// threads ([`attn_kernels::half::linear_rows_many`]): at most [`HALF_ROWS`] rows of `f32`
/// `x`, every weight stored as rows ([`is_rows_view`]), all `f32` or all `bfloat16`, `f32`
/// biases. Each output's values, `[rows, d_output_i]`; `None` for any other call.
pub(super) fn few_rows_many(
    x: &FlexTensor,
    products: &[(FlexTensor, Option<FlexTensor>)],
) -> Option<Vec<Vec<f32>>> {
    let shape = x.shape();
    let d_input = shape.as_slice().last().copied()?;
    let rows = shape.num_elements().checked_div(d_input)?;
    let dtype = products.first()?.0.dtype();
    let fits = x.dtype() == DType::F32
        && rows <= HALF_ROWS
        && matches!(dtype, DType::F32 | DType::BF16)
        && products.iter().all(|(w, b)| {
            w.dtype() == dtype
                && w.shape().num_dims() == 2
                && w.shape()[0] == d_input
                && is_rows_view(w)
                && b.as_ref().is_none_or(|b| {
                    b.dtype() == DType::F32 && b.shape().as_slice() == [w.shape()[1]]
                })
        });
    if !fits {
        return None;
    }
    let x = flex_floats(x);
    let biases: Vec<Option<Cow<'_, [f32]>>> = products
        .iter()
        .map(|(_, b)| b.as_ref().map(flex_floats))
        .collect();
    let biases = biases.iter().map(|b| b.as_deref());
    Some(if dtype == DType::BF16 {
        use half::slice::HalfFloatSliceExt;
        let products: Vec<_> = products
            .iter()
            .map(|(w, _)| rows_of(w, w.storage::<half::bf16>().reinterpret_cast()))
            .zip(biases)
            .collect();
        attn_kernels::half::linear_rows_many(&x, rows, &products)
    } else {
        let products: Vec<_> = products
            .iter()
            .map(|(w, _)| rows_of(w, w.storage::<f32>()))
            .zip(biases)
            .collect();
        attn_kernels::half::linear_rows_many(&x, rows, &products)
    })
}

/// `x · weight + bias`, or `None` when an operand is not `f32` (a `bfloat16` weight with
/// `f32` `x` is served too: [`forward_bf16`]).
pub(super) fn forward(
    x: &FlexTensor,
    weight: &FlexTensor,
    bias: Option<&FlexTensor>,
) -> Option<FlexTensor> {
    if weight.dtype() == DType::BF16 && weight.shape().num_dims() == 2 {
        return forward_bf16(x, weight, bias);
    }
    if let Some(y) = few_rows_f32(x, weight, bias) {
        return Some(y);
    }
    let (a, w) = (matrix(x)?, matrix(weight)?);
    let bias = match bias {
        Some(b) if b.dtype() != DType::F32 => return None,
        Some(b) => Some(flex_floats(b)),
        None => None,
    };
    let y = product(&a, &w, bias.as_deref());
    Some(tensor(y, with_last(x.shape(), w.columns)))
}

/// `dy · weightᵀ`, or `None` when an operand is not `f32`.
pub(super) fn x_backward(weight: &FlexTensor, dy: &FlexTensor) -> Option<FlexTensor> {
    let (g, w) = (matrix(dy)?, matrix(weight)?);
    let dx = product(&g, &w.transposed(), None);
    Some(tensor(dx, with_last(dy.shape(), weight.shape()[0])))
}

/// `xᵀ · dy` over all rows, or `None` when an operand is not `f32`.
pub(super) fn weight_backward(x: &FlexTensor, dy: &FlexTensor) -> Option<FlexTensor> {
    let (a, g) = (matrix(x)?, matrix(dy)?);
    let (d_input, d_output) = (a.columns, g.columns);
    let dw = product(&a.transposed(), &g, None);
    Some(tensor(dw, Shape::from(vec![d_input, d_output])))
}
