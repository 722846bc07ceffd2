//! The problem both passes solve, as plain host slices: [`Problem`] (the inputs and their
//! shapes), [`Broadcast`] (a mask or bias that broadcasts to the scores) and the rows of a mask
//! or bias that a pass applies to one row of scores.

/// A mask or bias that broadcasts to `[batch, n_heads, seq_len_q, seq_len_kv]`: element
/// `[b, h, i, j]` sits at `b·strides[0] + h·strides[1] + i·strides[2] + j·strides[3]`, with
/// stride 0 along every broadcast dimension.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Broadcast<'a, T> {
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
    pub(super) fn row(&self, b: usize, h: usize, i: usize, j0: usize, len: usize) -> Row<'a, T> {
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
pub(super) enum Row<'a, T> {
    /// One value per key.
    Keys(&'a [T]),
    /// The same value for every key.
    Same(T),
}

/// Everything the kernel needs, as host slices.
///
/// # Shapes
/// - `q`: `[batch, n_heads, seq_len_q, d_head]`, row-major
/// - `k`: `[batch, n_kv_heads, seq_len_kv, d_head]` (the first `seq_len_kv` of `kv_rows` rows)
/// - `v`: `[batch, n_kv_heads, seq_len_kv, d_value]` (the same)
/// - `mask` (`true` = not attended), `bias`: broadcast to `[batch, n_heads, seq_len_q, seq_len_kv]`
#[derive(Clone, Copy, Debug)]
pub(crate) struct Problem<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub batch: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub seq_len_q: usize,
    pub seq_len_kv: usize,
    /// Rows of `k` and `v` from the start of one (batch, key/value head) to the next:
    /// `seq_len_kv`, or more when the keys are the filled prefix of a longer buffer (a
    /// key/value cache read in place, which only the decode pass takes).
    pub kv_rows: usize,
    pub d_head: usize,
    pub d_value: usize,
    pub scale: f32,
    pub mask: Option<Broadcast<'a, bool>>,
    pub bias: Option<Broadcast<'a, f32>>,
    /// Key `j` is masked for query `i` when `j > i + offset`.
    pub causal_offset: Option<i64>,
}

/// `row += scale · bias` over the visible keys.
#[inline(always)]
pub(super) fn add_scaled(row: &mut [f32], bias: Row<'_, f32>, scale: f32) {
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
pub(super) fn apply_mask(row: &mut [f32], mask: Row<'_, bool>) {
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
