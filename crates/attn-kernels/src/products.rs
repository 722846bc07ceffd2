//! `c = a · b (+ bias)` on `f32` matrices read where they lie (any non-negative strides), through
//! the `gemm` crate, the matrix products burn's flex backend uses: the output is written once,
//! by the product alone, with the bias rows laid down first and accumulated into.
//!
//! One case is copied first: a `b` too large for L1 whose columns are strided (`Wᵀ` in
//! `dx = dy · Wᵀ`). `gemm` packs such an operand one element at a time, from rows a power of two
//! apart that share two sets of L1; [`Matrix::row_major`] copies it tile by tile into a buffer
//! the calling thread keeps (at most 32 MiB; a larger operand is left to `gemm`).

use std::borrow::Cow;
use std::cell::RefCell;

/// A matrix read where it lies: element `(i, j)` is `values[offset + i·row + j·column]`.
pub struct Matrix<'a> {
    /// The storage the matrix lies in.
    pub values: Cow<'a, [f32]>,
    /// Where element `(0, 0)` is.
    pub offset: usize,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub columns: usize,
    /// Elements from one row to the next.
    pub row: usize,
    /// Elements from one column to the next.
    pub column: usize,
}

impl<'a> Matrix<'a> {
    /// A row-major `[rows, columns]` matrix over `values`.
    pub fn row_major_of(values: impl Into<Cow<'a, [f32]>>, rows: usize, columns: usize) -> Self {
        Self {
            values: values.into(),
            offset: 0,
            rows,
            columns,
            row: columns,
            column: 1,
        }
    }

    /// The same values read as the transpose, `[columns, rows]`.
    pub fn transposed(self) -> Self {
        Self {
            rows: self.columns,
            columns: self.rows,
            row: self.column,
            column: self.row,
            ..self
        }
    }

    /// The same matrix copied into row-major order, tile by tile.
    ///
    /// `gemm` packs `b` of a product into panels along its rows, one element at a time
    /// when its columns are strided: for `dx = dy · Wᵀ`, each value of `W` read from a
    /// different row, `d_output` floats apart. At a power-of-two stride those rows fall
    /// into two sets of L1, so nearly every read waits on L2. Here each `TILE` × `TILE` (16 × 16)
    /// tile is read as whole rows of the stored matrix (columns of this one) into a local
    /// array and written out as whole rows, blocks of rows on every thread.
    ///
    /// `buffer` holds the copy: it is resized to fit and every value is overwritten.
    pub fn row_major<'b>(&self, buffer: &'b mut Vec<f32>) -> Matrix<'b> {
        use rayon::prelude::*;
        const TILE: usize = 16;
        let (rows, columns) = (self.rows, self.columns);
        buffer.resize(rows * columns, 0.0);
        let out = &mut buffer[..rows * columns];
        let values = &self.values[self.offset..];
        let (row, column) = (self.row, self.column);
        let block = |(t, out): (usize, &mut [f32])| {
            let i0 = t * TILE;
            let height = out.len() / columns;
            let mut tile = [[0.0f32; TILE]; TILE];
            for j0 in (0..columns).step_by(TILE) {
                let width = TILE.min(columns - j0);
                // tile[jj][ii] = self(i0 + ii, j0 + jj): a column of this matrix.
                for (jj, line) in tile.iter_mut().enumerate().take(width) {
                    let start = (j0 + jj) * column + i0 * row;
                    if row == 1 && height == TILE {
                        // A fixed-size copy, compiled to two vector moves.
                        let whole: &[f32; TILE] =
                            values[start..][..TILE].try_into().expect("one tile");
                        *line = *whole;
                    } else {
                        for (ii, x) in line.iter_mut().enumerate().take(height) {
                            *x = values[start + ii * row];
                        }
                    }
                }
                for ii in 0..height {
                    let dst = &mut out[ii * columns + j0..][..width];
                    for (jj, x) in dst.iter_mut().enumerate() {
                        *x = tile[jj][ii];
                    }
                }
            }
        };
        let band = TILE * columns.max(1);
        if rows * columns >= PARALLEL_COPY && rayon::current_num_threads() > 1 {
            out.par_chunks_mut(band).enumerate().for_each(block);
        } else {
            out.chunks_mut(band).enumerate().for_each(block);
        }
        Matrix {
            values: Cow::Borrowed(out),
            offset: 0,
            rows,
            columns,
            row: columns,
            column: 1,
        }
    }

    /// Whether every element lies inside `values` (what makes the raw reads sound).
    pub fn in_bounds(&self) -> bool {
        if self.rows == 0 || self.columns == 0 {
            return true;
        }
        let last = (self.rows - 1)
            .checked_mul(self.row)
            .zip((self.columns - 1).checked_mul(self.column))
            .and_then(|(a, b)| a.checked_add(b))
            .and_then(|a| a.checked_add(self.offset));
        last.is_some_and(|last| last < self.values.len())
    }
}

/// [`product`] copies a `b` whose columns are strided into row-major order first (see
/// [`Matrix::row_major`]) when `a` has at least this many rows and `b` at least
/// [`VALUES_TO_COPY_B`] values and at most [`KEEP_VALUES`]. A smaller `b` (128 KiB, four
/// times a 32 KiB L1) stays in cache while `gemm` packs it, and the copy would only add a
/// pass; a larger one (a vocabulary-sized tied embedding) would need a fresh buffer of its
/// size at every call, zeroed page by page by the kernel.
const ROWS_TO_COPY_B: usize = 8;
const VALUES_TO_COPY_B: usize = 1 << 15;

/// Values from which [`Matrix::row_major`] copies on every thread.
const PARALLEL_COPY: usize = 1 << 16;

thread_local! {
    /// Each thread's buffer for [`Matrix::row_major`], kept from product to product: a
    /// fresh one would cost a zeroing pass and, at these sizes, fresh pages from the kernel.
    static ROW_MAJOR: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The largest `b` [`product`] copies (32 MiB): the most a thread's [`ROW_MAJOR`] buffer
/// holds.
const KEEP_VALUES: usize = 8 << 20;

/// `a · b` into a new `[a.rows, b.columns]` row-major vector; with `bias`, each row starts
/// as `bias` and the product is added to it.
///
/// # Panics
/// When the inner dimensions differ, a view reaches outside its storage, or `bias` does not
/// hold one value per output column.
pub fn product(a: &Matrix<'_>, b: &Matrix<'_>, bias: Option<&[f32]>) -> Vec<f32> {
    let (m, k, n) = (a.rows, a.columns, b.columns);
    if b.column == 1 || m < ROWS_TO_COPY_B || !(VALUES_TO_COPY_B..=KEEP_VALUES).contains(&(k * n)) {
        return gemm_product(a, b, bias);
    }
    assert!(b.in_bounds(), "matrix views inside their storage");
    ROW_MAJOR.with(|kept| {
        // A product that runs while this thread's buffer is in use (a rayon task taken up
        // while `gemm` waits) copies into a buffer of its own.
        let mut own = Vec::new();
        let mut kept = kept.try_borrow_mut();
        let buffer = match kept.as_deref_mut() {
            Ok(buffer) => buffer,
            Err(_) => &mut own,
        };
        gemm_product(a, &b.row_major(buffer), bias)
    })
}

/// [`product`] as one `gemm` call on the operands as they are.
fn gemm_product(a: &Matrix<'_>, b: &Matrix<'_>, bias: Option<&[f32]>) -> Vec<f32> {
    let (m, k, n) = (a.rows, a.columns, b.columns);
    assert_eq!(b.rows, k, "inner dimensions of the product");
    assert!(
        a.in_bounds() && b.in_bounds(),
        "matrix views inside their storage"
    );
    let len = m.checked_mul(n).expect("product size fits in memory");
    let mut out: Vec<f32> = match bias {
        Some(bias) => {
            assert_eq!(bias.len(), n, "one bias value per output column");
            let mut rows = Vec::with_capacity(len);
            for _ in 0..m {
                rows.extend_from_slice(bias);
            }
            rows
        }
        None if k == 0 => vec![0.0; len],
        None => Vec::with_capacity(len),
    };
    if m == 0 || n == 0 || k == 0 {
        return out;
    }
    let parallelism = if rayon::current_num_threads() > 1 {
        // gemm keeps small products on one thread by its own threshold.
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    let read_dst = bias.is_some();
    let isize_of = |v: usize| isize::try_from(v).expect("stride fits in isize");
    #[allow(unsafe_code)]
    // SAFETY: `a` and `b` lie inside their storage (checked above), so every read is in
    // bounds; the destination holds `len = m·n` floats of capacity, row-major (row stride
    // `n`, column stride 1), each written once by the product. Without a bias the
    // destination is not read (`read_dst` false, alpha 0) and every one of its `m·n`
    // elements is written (k > 0), so `set_len(len)` exposes only initialised values.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.as_mut_ptr(),
            1,
            isize_of(n),
            read_dst,
            a.values.as_ptr().add(a.offset),
            isize_of(a.column),
            isize_of(a.row),
            b.values.as_ptr().add(b.offset),
            isize_of(b.column),
            isize_of(b.row),
            if read_dst { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            parallelism,
        );
        if !read_dst {
            out.set_len(len);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `[rows, columns]` view of `values` with the given strides.
    fn view(values: &[f32], [rows, columns]: [usize; 2], [row, column]: [usize; 2]) -> Matrix<'_> {
        Matrix {
            values: Cow::Borrowed(values),
            offset: 3,
            rows,
            columns,
            row,
            column,
        }
    }

    /// Every element of the copy is the element of the view it came from, for views read
    /// down their stored rows (row stride 1, the transpose of a weight) and with both
    /// strides above 1, with edge tiles, on one thread and on several, into a kept buffer
    /// that was larger and held other values.
    #[test]
    fn row_major_copies_every_element_of_any_view() {
        let values: Vec<f32> = (0..300 * 700).map(|v| v as f32).collect();
        let mut buffer = vec![f32::NAN; 400 * 400];
        for (shape, strides) in [
            ([37, 21], [1, 40]),
            ([21, 37], [2, 90]),
            ([300, 260], [1, 301]),
            ([16, 16], [17, 1]),
            ([5, 3], [1, 5]),
        ] {
            let m = view(&values, shape, strides);
            let copy = m.row_major(&mut buffer);
            let [rows, columns] = shape;
            assert_eq!(
                (copy.rows, copy.columns, copy.row, copy.column),
                (rows, columns, columns, 1)
            );
            for i in 0..rows {
                for j in 0..columns {
                    assert_eq!(
                        copy.values[copy.offset + i * columns + j],
                        values[3 + i * strides[0] + j * strides[1]],
                        "{shape:?} {strides:?} at ({i}, {j})"
                    );
                }
            }
        }
    }

    /// `product` with a strided `b`, copied first (`b` large enough) and read in place
    /// (too few rows of `a`): both are `a · b` by the definition in `f64`.
    #[test]
    fn products_of_strided_b_copied_or_not_equal_the_definition() {
        let values: Vec<f32> = (0..200 * 201)
            .map(|v| ((v * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let (k, n) = (190, 180);
        assert!(k * n >= VALUES_TO_COPY_B);
        let b = view(&values, [k, n], [1, 201]); // the transpose of a [180, 201] table
        for m in [ROWS_TO_COPY_B - 1, ROWS_TO_COPY_B, 33] {
            let a_values: Vec<f32> = (0..m * k)
                .map(|v| ((v * 13 % 29) as f32 - 14.0) / 14.0)
                .collect();
            let a = Matrix {
                values: Cow::Borrowed(&a_values),
                offset: 0,
                rows: m,
                columns: k,
                row: k,
                column: 1,
            };
            let got = product(&a, &b, None);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k)
                        .map(|t| {
                            f64::from(a_values[i * k + t]) * f64::from(values[3 + t + j * 201])
                        })
                        .sum();
                    let diff = (f64::from(got[i * n + j]) - want).abs();
                    assert!(
                        diff <= 1e-4 * (1.0 + want.abs()),
                        "m = {m} at ({i}, {j}): {} against {want}",
                        got[i * n + j]
                    );
                }
            }
        }
    }
}
