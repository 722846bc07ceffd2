//! The problem both passes solve, as plain host slices: [`Problem`] (the inputs and their
//! shapes), [`Rows`] (where each row of `q`, `k` or `v` lies in its buffer), [`Broadcast`] (a
//! mask or bias that broadcasts to the scores) and the rows of a mask or bias that a pass
//! applies to one row of scores.

/// A `[batch, heads, rows, width]` tensor of `f32` whose rows are runs of `width` contiguous
/// values, wherever they lie in `data`: row `i` of head `h` of batch `b` starts at
/// `b·strides[0] + h·strides[1] + i·strides[2]`.
///
/// A row-major tensor is one case. Two others are read without a copy: the heads split off a
/// projection (`[batch, seq_len, heads, width]` seen with its middle axes swapped, as
/// `split_heads` leaves it: strides `[seq_len·heads·width, width, heads·width]`), and the
/// filled rows of a longer key/value cache (a head stride of `capacity · width`).
#[derive(Clone, Copy, Debug)]
pub struct Rows<'a> {
    /// The buffer the rows lie in.
    pub data: &'a [f32],
    /// Heads per batch entry.
    pub heads: usize,
    /// Values per row.
    pub width: usize,
    /// Element strides of the batch, head and row axes.
    pub strides: [usize; 3],
}

impl<'a> Rows<'a> {
    /// A row-major `[batch, heads, rows, width]` tensor.
    pub fn row_major(data: &'a [f32], [_, heads, rows, width]: [usize; 4]) -> Self {
        Self {
            data,
            heads,
            width,
            strides: [heads * rows * width, rows * width, width],
        }
    }

    /// The rows of head `head`, counted as `b · heads + h`.
    #[inline]
    pub fn head(&self, head: usize) -> HeadRows<'a> {
        let [s_batch, s_head, s_row] = self.strides;
        let start = (head / self.heads.max(1)) * s_batch + (head % self.heads.max(1)) * s_head;
        HeadRows {
            data: self.data.get(start..).unwrap_or_default(),
            width: self.width,
            stride: s_row,
        }
    }
}

/// The rows of one head of a [`Rows`]: row `i` is `data[i·stride..][..width]`.
#[derive(Clone, Copy, Debug)]
pub struct HeadRows<'a> {
    data: &'a [f32],
    width: usize,
    stride: usize,
}

impl<'a> HeadRows<'a> {
    /// Row `i`, `width` values.
    #[inline(always)]
    pub fn row(&self, i: usize) -> &'a [f32] {
        &self.data[i * self.stride..][..self.width]
    }

    /// Rows `start..end`, in order.
    #[inline]
    pub fn range(
        &self,
        start: usize,
        end: usize,
    ) -> impl ExactSizeIterator<Item = &'a [f32]> + Clone + use<'a> {
        let this = *self;
        (start..end).map(move |i| this.row(i))
    }
}

/// A mask or bias that broadcasts to `[batch, n_heads, seq_len_q, seq_len_kv]`: element
/// `[b, h, i, j]` sits at `b·strides[0] + h·strides[1] + i·strides[2] + j·strides[3]`, with
/// stride 0 along every broadcast dimension.
#[derive(Clone, Copy, Debug)]
pub struct Broadcast<'a, T> {
    /// The values, row-major in their own (possibly broadcast) shape.
    pub data: &'a [T],
    /// Element strides; 0 where the dimension is broadcast.
    pub strides: [usize; 4],
}

impl<'a, T: Copy> Broadcast<'a, T> {
    /// A row-major tensor of shape `dims` broadcast to its target: size-1 dimensions get
    /// stride 0.
    pub fn new(data: &'a [T], dims: [usize; 4]) -> Self {
        let mut strides = [0; 4];
        let mut step = 1;
        for axis in (0..4).rev() {
            strides[axis] = if dims[axis] == 1 { 0 } else { step };
            step *= dims[axis];
        }
        Self { data, strides }
    }

    /// Element `[b, h, i, j]` (the tests' reference reads one value at a time).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn at(&self, b: usize, h: usize, i: usize, j: usize) -> T {
        let [sb, sh, si, sj] = self.strides;
        self.data[b * sb + h * sh + i * si + j * sj]
    }

    /// Keys `j0..j0 + len` of row `[b, h, i]`: a slice, or one value when the key axis is
    /// broadcast.
    pub(crate) fn row(&self, b: usize, h: usize, i: usize, j0: usize, len: usize) -> Row<'a, T> {
        let [sb, sh, si, sj] = self.strides;
        let start = b * sb + h * sh + i * si + j0 * sj;
        if sj == 0 {
            Row::Same(self.data[start])
        } else {
            Row::Keys(&self.data[start..start + len])
        }
    }
}

/// One row of a [`Broadcast`] over a block of keys.
pub(crate) enum Row<'a, T> {
    /// One value per key.
    Keys(&'a [T]),
    /// The same value for every key.
    Same(T),
}

/// Everything the kernel needs, as host slices.
///
/// # Shapes
/// - `q`: `[batch, n_heads, seq_len_q, d_head]`
/// - `k`: `[batch, n_kv_heads, seq_len_kv, d_head]`
/// - `v`: `[batch, n_kv_heads, seq_len_kv, d_value]`
/// - `mask` (`true` = not attended), `bias`: broadcast to `[batch, n_heads, seq_len_q, seq_len_kv]`
#[derive(Clone, Copy, Debug)]
pub struct Problem<'a> {
    /// The queries, `[batch, n_heads, seq_len_q, d_head]`.
    pub q: Rows<'a>,
    /// The keys, `[batch, n_kv_heads, seq_len_kv, d_head]`.
    pub k: Rows<'a>,
    /// The values, `[batch, n_kv_heads, seq_len_kv, d_value]`.
    pub v: Rows<'a>,
    /// Sequences in the batch.
    pub batch: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key and value heads; divides `n_heads` (grouped-query attention when fewer).
    pub n_kv_heads: usize,
    /// Queries per head.
    pub seq_len_q: usize,
    /// Keys (and values) per head.
    pub seq_len_kv: usize,
    /// Width of a query or key.
    pub d_head: usize,
    /// Width of a value.
    pub d_value: usize,
    /// What the dot products are multiplied by, usually `1/√d_head`.
    pub scale: f32,
    /// Keys not attended (`true`), broadcast to the scores.
    pub mask: Option<Broadcast<'a, bool>>,
    /// Added to the scaled scores, broadcast to them.
    pub bias: Option<Broadcast<'a, f32>>,
    /// Key `j` is masked for query `i` when `j > i + offset`.
    pub causal_offset: Option<i64>,
}

impl<'a> Problem<'a> {
    /// One batch, one head, row-major `q`, `k`, `v` of
    /// `[seq_len_q, seq_len_kv, d_head, d_value]`, no mask, bias or causal offset.
    pub fn one_head(
        q: &'a [f32],
        k: &'a [f32],
        v: &'a [f32],
        [seq_len_q, seq_len_kv, d_head, d_value]: [usize; 4],
        scale: f32,
    ) -> Self {
        Problem {
            q: Rows::row_major(q, [1, 1, seq_len_q, d_head]),
            k: Rows::row_major(k, [1, 1, seq_len_kv, d_head]),
            v: Rows::row_major(v, [1, 1, seq_len_kv, d_value]),
            batch: 1,
            n_heads: 1,
            n_kv_heads: 1,
            seq_len_q,
            seq_len_kv,
            d_head,
            d_value,
            scale,
            mask: None,
            bias: None,
            causal_offset: None,
        }
    }
}

/// `row += scale · bias` over the visible keys.
#[inline(always)]
pub(crate) fn add_scaled(row: &mut [f32], bias: Row<'_, f32>, scale: f32) {
    match bias {
        Row::Keys(bias) => {
            for (x, &b) in row.iter_mut().zip(bias) {
                *x += b * scale;
            }
        }
        Row::Same(b) => {
            let b = b * scale;
            for x in row {
                *x += b;
            }
        }
    }
}

/// `row = −∞` where the mask is set.
#[inline(always)]
pub(crate) fn apply_mask(row: &mut [f32], mask: Row<'_, bool>) {
    match mask {
        Row::Keys(mask) => {
            for (x, &masked) in row.iter_mut().zip(mask) {
                *x = if masked { f32::NEG_INFINITY } else { *x };
            }
        }
        Row::Same(true) => row.fill(f32::NEG_INFINITY),
        Row::Same(false) => {}
    }
}

/// A row-major `[batch, heads, rows, width]` tensor laid out token-major with `pad` unused
/// values (NaN) after every row: the buffer `[batch, rows, heads, width + pad]`, read back as
/// the original tensor through [`rows`](Self::rows) (the tests' stand-in for heads split off a
/// projection).
#[cfg(test)]
pub(crate) struct TokenMajor {
    buffer: Vec<f32>,
    dims: [usize; 4],
    strides: [usize; 3],
}

#[cfg(test)]
impl TokenMajor {
    pub fn new(values: &[f32], dims: [usize; 4], pad: usize) -> Self {
        let [batch, heads, rows, width] = dims;
        let row = width + pad;
        let strides = [rows * heads * row, row, heads * row];
        let mut buffer = vec![f32::NAN; batch * rows * heads * row];
        for (index, chunk) in values.chunks_exact(width.max(1)).enumerate() {
            let (b, h, i) = (index / (heads * rows), (index / rows) % heads, index % rows);
            let start = b * strides[0] + h * strides[1] + i * strides[2];
            buffer[start..][..width].copy_from_slice(chunk);
        }
        Self {
            buffer,
            dims,
            strides,
        }
    }

    pub fn rows(&self) -> Rows<'_> {
        Rows {
            data: &self.buffer,
            heads: self.dims[1],
            width: self.dims[3],
            strides: self.strides,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_a_token_major_buffer_as_the_row_major_tensor() {
        let dims = [2, 3, 4, 5];
        let values: Vec<f32> = (0..dims.iter().product::<usize>())
            .map(|x| x as f32)
            .collect();
        let [batch, heads, rows, width] = dims;
        let token_major = TokenMajor::new(&values, dims, 2);
        let scattered = token_major.rows();
        let row_major = Rows::row_major(&values, dims);
        for head in 0..batch * heads {
            for i in 0..rows {
                let want = &values[(head * rows + i) * width..][..width];
                assert_eq!(scattered.head(head).row(i), want, "head {head}, row {i}");
                assert_eq!(row_major.head(head).row(i), want, "head {head}, row {i}");
            }
            let ranged: Vec<f32> = scattered
                .head(head)
                .range(1, 3)
                .flatten()
                .copied()
                .collect();
            assert_eq!(ranged, values[(head * rows + 1) * width..][..2 * width]);
        }
    }
}
