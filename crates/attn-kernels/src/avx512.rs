//! The SIMD layer's kernels with 16-wide AVX-512 vectors (through [`pulp`]'s safe wrappers),
//! for CPUs that have AVX-512F (with BW, CD, DQ and VL: pulp's `V4` level).
//!
//! The `[MR, NR] = [6, 16]` register block is one 16-wide vector per row, so a step of the
//! micro-kernel is one load of `b` and six fused multiply-adds. Six dependent chains would
//! leave the FMA units waiting on their four-cycle latency, so the products keep two sets of
//! accumulators, for even and odd steps, and add them at the end: twelve independent chains,
//! as in the AVX2 block. Six broadcasts of `a` per six multiply-adds would make the loads,
//! not the multiply-adds, the limit, so where two panels of `b` sit side by side the passes
//! take them together (`scores_tiles`, `accumulate_tiles`): each broadcast then feeds two
//! multiply-adds, through 24 accumulators of the 32 registers.

use pulp::x86::V4;
use pulp::{f32x16, u32x16};

use crate::exp::{LOWEST, P, ROUND_MAGIC, exp2, mul_add};
use crate::simd::{Gemm, Kernels, MR, NR, Vectorized};

/// The AVX-512 instruction set, proven present by [`V4::try_new`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512(pub V4);

/// Sixteen values from the front of `values`.
#[inline(always)]
fn load(values: &[f32]) -> f32x16 {
    let lanes: [f32; 16] = values[..16].try_into().expect("sixteen values");
    pulp::cast(lanes)
}

/// Writes sixteen values to the front of `out`.
#[inline(always)]
fn store(out: &mut [f32], x: f32x16) {
    let lanes: [f32; 16] = pulp::cast(x);
    out[..16].copy_from_slice(&lanes);
}

/// The arguments of one [`Kernels::accumulate_tile`] (`N = 1`) or
/// [`Kernels::accumulate_tiles`] (`N = 2`), to run inside `vectorize`.
struct AccumulateTiles<'a, const N: usize> {
    kernels: Avx512,
    a: &'a [f32],
    lda: usize,
    b: [&'a [f32]; N],
    c: &'a mut [f32],
    ldc: usize,
    overwrite: bool,
}

impl<const N: usize> pulp::NullaryFnOnce for AccumulateTiles<'_, N> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let AccumulateTiles {
            kernels,
            a,
            lda,
            b,
            c,
            ldc,
            overwrite,
        } = self;
        kernels.accumulate_inlined(a, lda, b, c, ldc, overwrite);
    }
}

impl Avx512 {
    /// `c += a · [b₀ … b_N]` on `N` side-by-side `[MR, NR]` tiles, the body of
    /// [`Kernels::accumulate_tile`] and [`Kernels::accumulate_tiles`]. Each broadcast of a
    /// value of `a` feeds `N` multiply-adds; for `N = 2` that is 24 accumulators, four rows of
    /// `b` and the broadcasts in 32 registers. Each tile's sums are the same, in the same
    /// order, whatever `N` is. With `overwrite` the sums start from zero instead of `c`
    /// (`c = a · b`), and `c` is only written.
    #[inline(always)]
    fn accumulate_inlined<const N: usize>(
        self,
        a: &[f32],
        lda: usize,
        b: [&[f32]; N],
        c: &mut [f32],
        ldc: usize,
        overwrite: bool,
    ) {
        let s = self.0;
        let k = b[0].len() / NR;
        let mut even = [[s.splat_f32x16(0.0); MR]; N];
        if !overwrite {
            for (t, tile) in even.iter_mut().enumerate() {
                for (r, acc) in tile.iter_mut().enumerate() {
                    *acc = load(&c[r * ldc + t * NR..][..NR]);
                }
            }
        }
        let mut odd = [[s.splat_f32x16(0.0); MR]; N];
        let a_rows: [&[f32]; MR] = std::array::from_fn(|r| &a[r * lda..][..k]);
        // Steps two at a time, as arrays: with every length checked once here, the loop
        // below indexes without a bounds check.
        let pairs = k / 2;
        let a_pairs: [&[[f32; 2]]; MR] = a_rows.map(|row| row.as_chunks::<2>().0);
        let b_pairs: [&[[f32; 2 * NR]]; N] =
            std::array::from_fn(|t| b[t][..k * NR].as_chunks::<{ 2 * NR }>().0);
        assert!(a_pairs.iter().all(|p| p.len() == pairs));
        assert!(b_pairs.iter().all(|p| p.len() == pairs));
        for step in 0..pairs {
            let b0: [f32x16; N] = std::array::from_fn(|t| load(&b_pairs[t][step][..NR]));
            let b1: [f32x16; N] = std::array::from_fn(|t| load(&b_pairs[t][step][NR..]));
            for r in 0..MR {
                let [x0, x1] = a_pairs[r][step];
                let (a0, a1) = (s.splat_f32x16(x0), s.splat_f32x16(x1));
                for t in 0..N {
                    even[t][r] = s.mul_add_f32x16(a0, b0[t], even[t][r]);
                    odd[t][r] = s.mul_add_f32x16(a1, b1[t], odd[t][r]);
                }
            }
        }
        if k % 2 == 1 {
            let kk = k - 1;
            let b0: [f32x16; N] = std::array::from_fn(|t| load(&b[t][kk * NR..]));
            for r in 0..MR {
                let a0 = s.splat_f32x16(a_rows[r][kk]);
                for t in 0..N {
                    even[t][r] = s.mul_add_f32x16(a0, b0[t], even[t][r]);
                }
            }
        }
        self.store_tiles(even, odd, c, ldc);
    }

    /// `c = a · [b₀ … b_N]` on `N` side-by-side tiles, `a` and each `b` packed: the body of
    /// [`Kernels::scores_tile`] and [`Kernels::scores_tiles`], shaped as
    /// [`accumulate_inlined`](Self::accumulate_inlined).
    ///
    /// The two loops differ only in how `a` is read, and stay two on purpose: one shared loop
    /// reading `a` through closures compiled to other code and made the native forward plus
    /// backward about a fifth slower (`attn-bench --cases attn/native/forward_backward`, five
    /// alternations on an Intel Xeon: 14.2 to 16.1 against 11.2 to 13.1 ms at s = 512).
    #[inline(always)]
    fn scores_inlined<const N: usize>(self, a: &[f32], b: [&[f32]; N], c: &mut [f32], ldc: usize) {
        let s = self.0;
        let zero = s.splat_f32x16(0.0);
        let (mut even, mut odd) = ([[zero; MR]; N], [[zero; MR]; N]);
        let k = b[0].len() / NR;
        // As in `accumulate_inlined`: lengths checked once, none in the loop.
        let pairs = k / 2;
        let a_pairs = a[..k * MR].as_chunks::<{ 2 * MR }>().0;
        let b_pairs: [&[[f32; 2 * NR]]; N] =
            std::array::from_fn(|t| b[t][..k * NR].as_chunks::<{ 2 * NR }>().0);
        assert!(a_pairs.len() == pairs && b_pairs.iter().all(|p| p.len() == pairs));
        for step in 0..pairs {
            let a_two = &a_pairs[step];
            let b0: [f32x16; N] = std::array::from_fn(|t| load(&b_pairs[t][step][..NR]));
            let b1: [f32x16; N] = std::array::from_fn(|t| load(&b_pairs[t][step][NR..]));
            for r in 0..MR {
                let (a0, a1) = (s.splat_f32x16(a_two[r]), s.splat_f32x16(a_two[MR + r]));
                for t in 0..N {
                    even[t][r] = s.mul_add_f32x16(a0, b0[t], even[t][r]);
                    odd[t][r] = s.mul_add_f32x16(a1, b1[t], odd[t][r]);
                }
            }
        }
        // An odd number of steps leaves one.
        if k % 2 == 1 {
            let kk = k - 1;
            let b0: [f32x16; N] = std::array::from_fn(|t| load(&b[t][kk * NR..]));
            for r in 0..MR {
                let a0 = s.splat_f32x16(a[kk * MR + r]);
                for t in 0..N {
                    even[t][r] = s.mul_add_f32x16(a0, b0[t], even[t][r]);
                }
            }
        }
        self.store_tiles(even, odd, c, ldc);
    }

    /// `2^x` on sixteen lanes: [`exp2`] line for line.
    #[inline(always)]
    fn exp2_x16(self, x: f32x16) -> f32x16 {
        let s = self.0;
        let x = s.max_f32x16(x, s.splat_f32x16(LOWEST));
        let shifted = s.add_f32x16(x, s.splat_f32x16(ROUND_MAGIC));
        let n = s.sub_f32x16(shifted, s.splat_f32x16(ROUND_MAGIC));
        let f = s.sub_f32x16(x, n);
        // (bits(shifted) + 127) << 23, as in `avx2::exp2_x8`.
        let bits: u32x16 = pulp::cast(shifted);
        let two_to_n: f32x16 =
            pulp::cast(s.shl_const_u32x16::<23>(s.wrapping_add_u32x16(bits, s.splat_u32x16(127))));
        let mut poly = s.splat_f32x16(P[0]);
        for &c in &P[1..] {
            poly = s.mul_add_f32x16(poly, f, s.splat_f32x16(c));
        }
        let two_to_f = s.mul_add_f32x16(f, poly, s.splat_f32x16(1.0));
        s.mul_f32x16(two_to_f, two_to_n)
    }

    /// Adds the odd steps' accumulators to the even steps' and writes the `N` tiles to `c`.
    #[inline(always)]
    fn store_tiles<const N: usize>(
        self,
        even: [[f32x16; MR]; N],
        odd: [[f32x16; MR]; N],
        c: &mut [f32],
        ldc: usize,
    ) {
        const { assert!(NR == 16, "one 16-wide vector per row") };
        for (t, (even, odd)) in even.iter().zip(&odd).enumerate() {
            for (r, (e, o)) in even.iter().zip(odd).enumerate() {
                store(&mut c[r * ldc + t * NR..][..NR], self.0.add_f32x16(*e, *o));
            }
        }
    }
}

impl Kernels for Avx512 {
    /// One `weights · v` tile as its own AVX-512 function. Inlined into a pass with everything
    /// else, its accumulators can be spilled to the stack, depending on what surrounds it (the
    /// forward ran up to 2.7x slower at s = 512 when the pass's entry point changed shape).
    #[inline(always)]
    fn accumulate_tile(
        self,
        a: &[f32],
        lda: usize,
        b: &[f32],
        c: &mut [f32],
        ldc: usize,
        overwrite: bool,
    ) {
        self.0.vectorize(AccumulateTiles {
            kernels: self,
            a,
            lda,
            b: [b],
            c,
            ldc,
            overwrite,
        });
    }

    /// Two tiles as one AVX-512 function, for the reason [`accumulate_tile`](Self::accumulate_tile) is one.
    #[inline(always)]
    fn accumulate_tiles(
        self,
        a: &[f32],
        lda: usize,
        b: [&[f32]; 2],
        c: &mut [f32],
        ldc: usize,
        overwrite: bool,
    ) {
        self.0.vectorize(AccumulateTiles {
            kernels: self,
            a,
            lda,
            b,
            c,
            ldc,
            overwrite,
        });
    }

    /// One [`Gemm`] as its own AVX-512 function (see `Avx2::gemm`).
    #[inline(always)]
    fn gemm(self, product: Gemm<'_>) {
        self.0.vectorize(Vectorized(product, self));
    }

    #[inline(always)]
    fn mul_add(self, a: f32, b: f32, c: f32) -> f32 {
        mul_add::<true>(a, b, c)
    }

    #[inline(always)]
    fn exp2(self, x: f32) -> f32 {
        exp2::<true>(x)
    }

    /// Two 16-wide running sums (two chains of multiply-adds in flight), added and reduced
    /// across the lanes once at the end.
    #[inline(always)]
    fn dot(self, a: &[f32], b: &[f32]) -> f32 {
        use pulp::Simd;
        let s = self.0;
        let n = a.len().min(b.len());
        let (a32, a_rest) = a[..n].as_chunks::<32>();
        let (b32, b_rest) = b[..n].as_chunks::<32>();
        let mut acc = [s.splat_f32x16(0.0); 2];
        for (x, y) in a32.iter().zip(b32) {
            acc[0] = s.mul_add_f32x16(load(&x[..16]), load(&y[..16]), acc[0]);
            acc[1] = s.mul_add_f32x16(load(&x[16..]), load(&y[16..]), acc[1]);
        }
        let mut sum = s.add_f32x16(acc[0], acc[1]);
        let (a16, a_tail) = a_rest.as_chunks::<16>();
        let (b16, b_tail) = b_rest.as_chunks::<16>();
        for (x, y) in a16.iter().zip(b16) {
            sum = s.mul_add_f32x16(load(x), load(y), sum);
        }
        a_tail
            .iter()
            .zip(b_tail)
            .fold(s.reduce_sum_f32s(sum), |sum, (&x, &y)| {
                mul_add::<true>(x, y, sum)
            })
    }

    #[inline(always)]
    fn scores_tile(self, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize) {
        self.scores_inlined(a, [b], c, ldc);
    }

    #[inline(always)]
    fn scores_tiles(self, a: &[f32], b: [&[f32]; 2], c: &mut [f32], ldc: usize) {
        self.scores_inlined(a, b, c, ldc);
    }

    #[inline(always)]
    fn row_max(self, row: &[f32]) -> f32 {
        let s = self.0;
        let mut chunks = row.chunks_exact(16);
        let mut max = s.splat_f32x16(f32::NEG_INFINITY);
        for chunk in &mut chunks {
            max = s.max_f32x16(max, load(chunk));
        }
        let lanes: [f32; 16] = pulp::cast(max);
        lanes
            .iter()
            .chain(chunks.remainder())
            .fold(f32::NEG_INFINITY, |a, &x| if x > a { x } else { a })
    }

    #[inline(always)]
    fn exp2_in_place(self, row: &mut [f32], max: f32) -> f32 {
        let s = self.0;
        let max_x16 = s.splat_f32x16(max);
        let mut sum = s.splat_f32x16(0.0);
        let mut chunks = row.chunks_exact_mut(16);
        for chunk in &mut chunks {
            let p = self.exp2_x16(s.sub_f32x16(load(chunk), max_x16));
            store(chunk, p);
            sum = s.add_f32x16(sum, p);
        }
        let mut tail = 0.0;
        for x in chunks.into_remainder() {
            *x = exp2::<true>(*x - max);
            tail += *x;
        }
        let lanes: [f32; 16] = pulp::cast(sum);
        lanes.iter().sum::<f32>() + tail
    }
}
