//! The SIMD layer: what an instruction set provides to the passes, and nothing of the passes.
//!
//! - [`Kernels`]: the inner loops every pass is built from (register-blocked products, the
//!   row maximum, `2^x`), implemented once per instruction set (`portable.rs`, `avx2.rs`,
//!   `avx512.rs`);
//! - [`Gemm`]: a product over whole `[MR, NR]` tiles, so that no call needs ten positional
//!   arguments;
//! - [`MR`], [`NR`]: the register block every implementation and every packed layout share;
//! - [`Pass`] and [`Vectorized`]: how a pass runs on one instruction set's kernels inside
//!   [`pulp`]'s `vectorize`, which compiles everything it inlines with that instruction set
//!   enabled.
//!
//! Every function on the hot path is `#[inline(always)]`, down from [`Vectorized::call`]
//! through [`Pass::run`] to the kernels: code that is not inlined into the `vectorize`d call is
//! compiled without the instruction set (an earlier layout lost a third of the forward's speed
//! that way). Each pass's `Pass::run` is monomorphised once per instruction set, which gives
//! each pass its own concrete entry point per instruction set without an instruction-set file
//! naming it.

/// Rows of the micro-kernel's register block.
pub(crate) const MR: usize = 6;
/// Columns of the micro-kernel's register block: two 8-wide AVX registers.
pub(crate) const NR: usize = 16;

/// The three inner loops, once per instruction set: the register-blocked product, the row
/// maximum and the exponentials. Everything around them is shared.
pub(crate) trait Kernels: Copy {
    /// `a · b + c` for one value, fused where that is one instruction.
    fn mul_add(self, a: f32, b: f32, c: f32) -> f32;

    /// `2^x` for one value (see `exp.rs`).
    fn exp2(self, x: f32) -> f32;

    /// `c[MR, NR] = a[MR, k] · b[k, NR]` with both operands packed: `a` as `[k][MR]`,
    /// `b` as `[k][NR]`; `c` has row stride `ldc`. The `[MR, NR]` result stays in registers
    /// for the whole `k` loop: per step one row of `b` is loaded and each of the `MR` values
    /// of `a` is broadcast against it.
    fn scores_tile(self, a: &[f32], b: &[f32], c: &mut [f32], ldc: usize);

    /// `c[MR, NR] += a[MR, k] · b[k, NR]` with `a` row-major (row stride `lda`), `b` packed as
    /// `[k][NR]`, `c` with row stride `ldc`; with `overwrite`, `c = a · b` (`c` is only
    /// written, so it need not be zeroed first).
    fn accumulate_tile(
        self,
        a: &[f32],
        lda: usize,
        b: &[f32],
        c: &mut [f32],
        ldc: usize,
        overwrite: bool,
    );

    /// [`scores_tile`](Self::scores_tile) on two panels of `b` side by side: `c[MR, 2·NR]`,
    /// its first [`NR`] columns from `b[0]` and the next from `b[1]`, each value the same sum
    /// in the same order as from two single tiles. An instruction set with the registers for
    /// it shares each broadcast of `a` between the two.
    #[inline(always)]
    fn scores_tiles(self, a: &[f32], b: [&[f32]; 2], c: &mut [f32], ldc: usize) {
        self.scores_tile(a, b[0], c, ldc);
        self.scores_tile(a, b[1], &mut c[NR..], ldc);
    }

    /// [`accumulate_tile`](Self::accumulate_tile) on two panels of `b` side by side, as
    /// [`scores_tiles`](Self::scores_tiles) is to `scores_tile`.
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
        self.accumulate_tile(a, lda, b[0], c, ldc, overwrite);
        self.accumulate_tile(a, lda, b[1], &mut c[NR..], ldc, overwrite);
    }

    /// `Σ a[i] · b[i]` over the shorter of the two. The default keeps 16 running sums and adds
    /// them pairwise; an instruction set keeps them in whole vectors, because the compiler
    /// splits the pairwise tree of an array into pieces narrower than its registers.
    #[inline(always)]
    fn dot(self, a: &[f32], b: &[f32]) -> f32 {
        const LANES: usize = 16;
        let n = a.len().min(b.len());
        let (a, b) = (&a[..n], &b[..n]);
        let mut acc = [0.0f32; LANES];
        let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
        let (a_tail, b_tail) = (a_chunks.remainder(), b_chunks.remainder());
        for (x, y) in a_chunks.zip(b_chunks) {
            for ((acc, &x), &y) in acc.iter_mut().zip(x).zip(y) {
                *acc = self.mul_add(x, y, *acc);
            }
        }
        let mut width = LANES / 2;
        while width > 0 {
            let (low, high) = acc.split_at_mut(width);
            for (a, &b) in low.iter_mut().zip(&high[..width]) {
                *a += b;
            }
            width /= 2;
        }
        a_tail
            .iter()
            .zip(b_tail)
            .fold(acc[0], |sum, (&x, &y)| self.mul_add(x, y, sum))
    }

    /// The largest value of `row`, `−∞` for an empty row.
    fn row_max(self, row: &[f32]) -> f32;

    /// `row = 2^(row − max)`, returning the sum of the new values.
    fn exp2_in_place(self, row: &mut [f32], max: f32) -> f32;

    /// `c += a · b` over whole tiles: see [`Gemm`]. An implementation may compile it as a
    /// function of its own (`vectorize` on a [`Vectorized`] product).
    #[inline(always)]
    fn gemm(self, product: Gemm<'_>) {
        product.run(self);
    }
}

/// A pass (or a piece of one) written once over [`Kernels`]: run by
/// [`Instructions::run`](super::instructions::Instructions::run) on the widest kernels the CPU
/// has.
pub(crate) trait Pass {
    /// Runs on `kernels`. Implementations must be `#[inline(always)]`, so that the whole pass
    /// is compiled inside the `vectorize`d call.
    fn run<K: Kernels>(self, kernels: K);
}

/// `pass` on `kernels`, as a function for [`pulp`]'s `vectorize`: one monomorphised entry
/// point per pass and instruction set.
pub(crate) struct Vectorized<P, K>(pub P, pub K);

impl<P: Pass, K: Kernels> pulp::NullaryFnOnce for Vectorized<P, K> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        self.0.run(self.1);
    }
}

/// `c[m, n] += a[m, k] · b[k, n]`, a product of the backward pass: `a` row-major with row
/// stride `lda`, `b` in panels of [`NR`] columns (`panel_stride` floats apart, each
/// `[k][NR]`), `c` row-major with row stride `ldc`; `m` a multiple of [`MR`], `n` of [`NR`].
/// With `overwrite`, `c = a · b`: the tiles are written without being read, so `c` need not
/// be zeroed first.
pub(crate) struct Gemm<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: &'a [f32],
    pub lda: usize,
    pub b: &'a [f32],
    pub panel_stride: usize,
    pub c: &'a mut [f32],
    pub ldc: usize,
    pub overwrite: bool,
}

impl Pass for Gemm<'_> {
    /// One [`Kernels::accumulate_tiles`] per `[MR, 2·NR]` block of `c`, two panels of `b` at
    /// a time, and one [`Kernels::accumulate_tile`] per tile of an odd last panel.
    #[inline(always)]
    fn run<K: Kernels>(self, kernels: K) {
        let Gemm {
            m,
            n,
            k,
            a,
            lda,
            b,
            panel_stride,
            c,
            ldc,
            overwrite,
        } = self;
        let panel = |index: usize| &b[index * panel_stride..][..k * NR];
        let panels = n / NR;
        for first in (0..panels).step_by(2) {
            for tile in 0..m / MR {
                let (a, c) = (
                    &a[tile * MR * lda..],
                    &mut c[tile * MR * ldc + first * NR..],
                );
                if first + 1 < panels {
                    let pair = [panel(first), panel(first + 1)];
                    kernels.accumulate_tiles(a, lda, pair, c, ldc, overwrite);
                } else {
                    kernels.accumulate_tile(a, lda, panel(first), c, ldc, overwrite);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instructions::Instructions;
    use crate::testing::SeededRng;

    /// Both products on two panels at once and on one panel at a time, `k` steps long, from
    /// the same start: the buffers must hold the same bits, the columns past the pair included.
    struct PairsEqualSingles {
        k: usize,
        seed: u64,
    }

    impl Pass for PairsEqualSingles {
        #[inline(always)]
        fn run<K: Kernels>(self, kernels: K) {
            let PairsEqualSingles { k, seed } = self;
            let mut rng = SeededRng::new(seed);
            let mut values = |n: usize| (0..n).map(|_| rng.unit()).collect::<Vec<f32>>();
            let (lda, ldc) = (k + 3, 2 * NR + 5);
            let (a_packed, a_rows) = (values(k * MR), values(MR * lda));
            let (b0, b1) = (values(k * NR), values(k * NR));
            let start = values(MR * ldc);
            let bits = |c: &[f32]| c.iter().map(|x| x.to_bits()).collect::<Vec<_>>();

            let mut pair = start.clone();
            kernels.scores_tiles(&a_packed, [&b0, &b1], &mut pair, ldc);
            let mut singles = start.clone();
            kernels.scores_tile(&a_packed, &b0, &mut singles, ldc);
            kernels.scores_tile(&a_packed, &b1, &mut singles[NR..], ldc);
            assert_eq!(bits(&pair), bits(&singles), "scores, k = {k}");

            for overwrite in [false, true] {
                let mut pair = start.clone();
                kernels.accumulate_tiles(&a_rows, lda, [&b0, &b1], &mut pair, ldc, overwrite);
                let mut singles = start.clone();
                kernels.accumulate_tile(&a_rows, lda, &b0, &mut singles, ldc, overwrite);
                kernels.accumulate_tile(&a_rows, lda, &b1, &mut singles[NR..], ldc, overwrite);
                assert_eq!(bits(&pair), bits(&singles), "accumulate, k = {k}");
            }
        }
    }

    /// `overwrite` computes `a · b` whatever `c` held (NaN here, which an accumulation would
    /// keep), and adds `a · b` to `c` without it, both against the sums in `f64`.
    struct OverwriteIgnoresC {
        k: usize,
        seed: u64,
    }

    impl Pass for OverwriteIgnoresC {
        #[inline(always)]
        fn run<K: Kernels>(self, kernels: K) {
            let OverwriteIgnoresC { k, seed } = self;
            let mut rng = SeededRng::new(seed);
            let mut values = |n: usize| (0..n).map(|_| rng.unit()).collect::<Vec<f32>>();
            let (lda, ldc) = (k + 1, NR + 3);
            let (a, b, start) = (values(MR * lda), values(k * NR), values(MR * ldc));
            let product = |r: usize, j: usize| -> f64 {
                (0..k)
                    .map(|t| f64::from(a[r * lda + t]) * f64::from(b[t * NR + j]))
                    .sum()
            };
            let mut written = vec![f32::NAN; MR * ldc];
            kernels.accumulate_tile(&a, lda, &b, &mut written, ldc, true);
            let mut added = start.clone();
            kernels.accumulate_tile(&a, lda, &b, &mut added, ldc, false);
            for r in 0..MR {
                for j in 0..NR {
                    let want = product(r, j);
                    let at = r * ldc + j;
                    let tolerance = 1e-5 * (1.0 + want.abs()) * k as f64;
                    assert!(
                        (f64::from(written[at]) - want).abs() <= tolerance,
                        "k = {k}"
                    );
                    let want = want + f64::from(start[at]);
                    assert!((f64::from(added[at]) - want).abs() <= tolerance, "k = {k}");
                }
                // The columns past the tile are left as they were.
                assert!(
                    written[r * ldc + NR..][..ldc - NR]
                        .iter()
                        .all(|x| x.is_nan())
                );
            }
        }
    }

    /// Runs `pass(k, seed)` on every instruction set this machine has, for each `k` of `ks`.
    fn on_every_instruction_set<P: Pass>(ks: &[usize], pass: impl Fn(usize, u64) -> P) {
        for instructions in [
            Instructions::Best,
            Instructions::Avx2,
            Instructions::Portable,
        ] {
            for (seed, &k) in ks.iter().enumerate() {
                instructions.run(pass(k, seed as u64));
            }
        }
    }

    #[test]
    fn two_tiles_at_once_are_the_same_bits_as_one_at_a_time() {
        on_every_instruction_set(&[1, 2, 7, 64, 255], |k, seed| PairsEqualSingles { k, seed });
    }

    #[test]
    fn overwrite_ignores_what_c_held() {
        on_every_instruction_set(&[1, 2, 7, 32, 64], |k, seed| OverwriteIgnoresC { k, seed });
    }
}
