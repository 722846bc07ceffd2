//! Products of many rows with `bfloat16` weights on AMX tiles (Intel's Advanced Matrix
//! Extensions, from Sapphire Rapids on). `tdpbf16ps` multiplies a tile of 16 rows by 32
//! `bfloat16` inputs with a tile of 32 inputs by 16 outputs, and adds the products to a tile
//! of 16 × 16 `f32` sums: 8192 multiply-adds in one instruction. PyTorch, through oneDNN,
//! multiplies a `bfloat16` model this way on such a CPU.
//!
//! ```text
//! y[r, j] = bias[j] + Σ_p  bf16(x[r, 2p])·W[j, 2p] + bf16(x[r, 2p+1])·W[j, 2p+1]
//! ```
//!
//! The operands are `bf16_dot`'s packing, padded with zeros to whole tiles:
//! - a tile of `x` is 16 packed rows, 16 pairs each (rows `pairs` apart);
//! - a tile of weights is 16 pairs of a panel's 16 outputs (`[p, j]`, pairs [`NR`] apart).
//!   That is the pair-interleaved layout the instruction asks of its second operand.
//!
//! A block of 32 rows by 32 outputs keeps its sums in four tiles over every pair. Two tiles of
//! `x` and two of weights feed them, so each tile loaded serves two products.
//!
//! Rust has neither stable AMX intrinsics nor their run-time detection. The instructions are
//! `asm!`, and the CPU is asked through `cpuid`. Linux hands a process the tiles' state only
//! when it asks (`arch_prctl(ARCH_REQ_XCOMP_PERM)`).
//!
//! The kernel is written once over [`Tiles`], the six instructions it uses. [`Definition`] is
//! Intel's definition of them in plain Rust, with the checks that make the CPU fault. So the
//! tests run this kernel's packing, strides and blocks on every CPU, and on a CPU with AMX they
//! run the same cases on its tiles. A process uses the tiles only after one block has given
//! the definition's sums on them ([`Amx::usable`]).
//!
//! While its tiles are configured, a task calls nothing that could run another task on its
//! thread.
//!
//! This module allows unsafe code for the instructions and the raw pointers they take, each
//! block with its bounds stated.

#![allow(unsafe_code)]

use std::sync::OnceLock;

use rayon::prelude::*;

use crate::bf16_dot::{NR, Out, Tasks, pack_rows, pack_stripe};
use crate::weight_rows::{Bf16Rows, bf16_to_f32, check_operands, round_to_bf16};

/// Rows of a tile, and pairs in a row of a tile (64 bytes).
const TILE: usize = 16;

/// Rows of `x` per block: two tiles.
const BLOCK_ROWS: usize = 2 * TILE;

/// Rows from which [`linear_bf16_dot`](crate::half::linear_bf16_dot) takes the tiles: fewer
/// would leave most of a block's rows empty.
const MIN_ROWS: usize = TILE;

/// `ldtilecfg`'s operand for palette 1, as Intel lays it out: the palette (byte 0), the start
/// row (byte 1, zero), reserved bytes, then the bytes per row of tiles 0 to 15 (16-bit, from
/// byte 16) and their rows (one byte each, from byte 48). Palette 1 has eight tiles.
#[repr(C, align(64))]
pub(crate) struct Config([u8; 64]);

/// Every one of the eight tiles is 16 rows of 64 bytes. Tiles 0 to 3 hold the sums (rows
/// `16 h..` by outputs `16 n..` in tile `2h + n`), 4 and 5 two tiles of `x`, 6 and 7 two of
/// weights.
const CONFIG: Config = {
    let mut bytes = [0u8; 64];
    bytes[0] = 1;
    let mut tile = 0;
    while tile < 8 {
        bytes[16 + 2 * tile] = 64;
        bytes[48 + tile] = TILE as u8;
        tile += 1;
    }
    Config(bytes)
};

/// The AMX instructions the kernel uses. Tiles are named by number, as the instructions name
/// their registers.
///
/// # Safety
/// Every method but `configure` needs `configure` first. `load` reads, and `store` writes,
/// each configured row of the tile, rows `stride` bytes apart from `at`.
pub(crate) trait Tiles {
    /// `ldtilecfg`: sets every tile's shape and zeroes them.
    unsafe fn configure(&mut self, config: &Config);
    /// `tilezero`.
    unsafe fn zero<const T: u8>(&mut self);
    /// `tileloadd`.
    unsafe fn load<const T: u8>(&mut self, at: *const u8, stride: usize);
    /// `tdpbf16ps`: `C += A · B`, `A` and `B` as pairs of `bfloat16`, `C` in `f32`.
    unsafe fn dot<const C: u8, const A: u8, const B: u8>(&mut self);
    /// `tilestored`.
    unsafe fn store<const T: u8>(&mut self, at: *mut u8, stride: usize);
    /// `tilerelease`: back to the initial state, no tile configured.
    unsafe fn release(&mut self);
}

/// `y = bf16(x) · Wᵀ + bias`, each task on the tiles `tiles` makes: what
/// [`linear_bf16_dot`](crate::half::linear_bf16_dot) runs for [`MIN_ROWS`] rows or more on a
/// CPU with AMX.
///
/// # Panics
/// As `linear_bf16_dot`; and where `T` is [`Definition`], where the kernel breaks a rule of the
/// instructions.
pub(crate) fn linear<T: Tiles>(
    tiles: &(impl Fn() -> T + Sync),
    x: &[f32],
    rows: usize,
    w: &Bf16Rows<'_>,
    bias: Option<&[f32]>,
) -> Vec<f32> {
    check_operands(x, rows, w, bias);
    let mut y = vec![0f32; rows * w.d_output];
    if rows == 0 || w.d_output == 0 {
        return y;
    }
    let pairs = w.d_input.div_ceil(2).next_multiple_of(TILE);
    let a = pack_rows(x, rows, w.d_input, BLOCK_ROWS, pairs);
    let tasks = Tasks::of(w.d_output, rows.div_ceil(BLOCK_ROWS));
    let out = Out(y.as_mut_ptr());
    let (out, a) = (&out, &a);
    (0..tasks.count()).into_par_iter().for_each(|task| {
        let (first, outputs, blocks) = tasks.task(task);
        if blocks.is_empty() {
            return;
        }
        let packed = pack_stripe(w, first, outputs, pairs);
        assert!(blocks.end * BLOCK_ROWS * pairs <= a.len());
        assert!(packed.len() == outputs.div_ceil(NR) * pairs * NR);
        let mut tiles = tiles();
        let mut sums = [0f32; BLOCK_ROWS * NR]; // [32 rows, 32 outputs]
        // SAFETY: `CONFIG` is palette 1's, and the tiles come from `Amx::usable` (or are the
        // definition).
        unsafe { tiles.configure(&CONFIG) };
        for block in blocks {
            for panel in 0..outputs.div_ceil(NR) {
                // SAFETY: the block's rows (`BLOCK_ROWS · pairs` values from its first) lie
                // inside `a`, and the panel's `pairs · NR` values inside `packed` (the
                // assertions above).
                unsafe {
                    block_sums(
                        &mut tiles,
                        a.as_ptr().add(block * BLOCK_ROWS * pairs),
                        pairs,
                        packed.as_ptr().add(panel * pairs * NR),
                        &mut sums,
                    );
                }
                let valid = BLOCK_ROWS.min(rows - block * BLOCK_ROWS);
                let columns = NR.min(outputs - panel * NR);
                let bias = bias.map(|b| &b[first + panel * NR..][..columns]);
                for (r, sums) in sums.chunks_exact(NR).take(valid).enumerate() {
                    let start = (block * BLOCK_ROWS + r) * w.d_output + first + panel * NR;
                    // SAFETY: `columns` values of row `block · BLOCK_ROWS + r`, from output
                    // `first + panel · NR`: inside `[rows, d_output]`, and this task's own
                    // (its stripe of outputs in its blocks of rows).
                    let y = unsafe { std::slice::from_raw_parts_mut(out.0.add(start), columns) };
                    for (j, (y, sum)) in y.iter_mut().zip(sums).enumerate() {
                        *y = sum + bias.map_or(0.0, |b| b[j]);
                    }
                }
            }
        }
        // SAFETY: configured above.
        unsafe { tiles.release() };
    });
    y
}

/// The sums of 32 rows of `x` (from `a`, rows `pairs` apart) by one panel of 32 outputs (from
/// `b`, `[p, j]`) over all `pairs` pairs, into `sums` (`[32 rows, 32 outputs]`).
///
/// # Safety
/// The tiles are configured with [`CONFIG`]; `a` holds 32 rows of `pairs` values and `b`
/// `pairs · NR` values; `pairs` is a whole number of tiles.
unsafe fn block_sums<T: Tiles>(
    tiles: &mut T,
    a: *const u32,
    pairs: usize,
    b: *const u32,
    sums: &mut [f32; BLOCK_ROWS * NR],
) {
    let (row_bytes, pair_bytes, sum_bytes) = (4 * pairs, 4 * NR, 4 * NR);
    // SAFETY (the caller's): each load reads 16 rows of 16 values inside the block's rows of
    // `a` or the panel of `b`; each store writes 16 rows of 16 values inside `sums`.
    unsafe {
        tiles.zero::<0>();
        tiles.zero::<1>();
        tiles.zero::<2>();
        tiles.zero::<3>();
        for p in (0..pairs).step_by(TILE) {
            let x = a.add(p).cast::<u8>(); // rows 0..16, pairs p..p + 16
            let w = b.add(p * NR).cast::<u8>(); // pairs p..p + 16, outputs 0..16
            tiles.load::<4>(x, row_bytes);
            tiles.load::<5>(x.add(TILE * row_bytes), row_bytes);
            tiles.load::<6>(w, pair_bytes);
            tiles.load::<7>(w.add(4 * TILE), pair_bytes);
            tiles.dot::<0, 4, 6>();
            tiles.dot::<1, 4, 7>();
            tiles.dot::<2, 5, 6>();
            tiles.dot::<3, 5, 7>();
        }
        let s = sums.as_mut_ptr().cast::<u8>();
        tiles.store::<0>(s, sum_bytes);
        tiles.store::<1>(s.add(4 * TILE), sum_bytes);
        tiles.store::<2>(s.add(TILE * sum_bytes), sum_bytes);
        tiles.store::<3>(s.add(TILE * sum_bytes + 4 * TILE), sum_bytes);
    }
}

/// The CPU's tiles. One exists only where the CPU has AMX-TILE and AMX-BF16 and the operating
/// system granted this process their state.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Amx(());

impl Amx {
    /// The tiles that multiply `rows` rows: from [`MIN_ROWS`] on, where [`Amx::usable`] gives
    /// them.
    pub(crate) fn for_rows(rows: usize) -> Option<Amx> {
        (rows >= MIN_ROWS).then(Amx::usable).flatten()
    }

    /// The CPU's tiles, where [`Amx::granted`] gives them, `ATTN_NATIVE_ISA` leaves them to the
    /// kernels, and one block multiplied on them gives the definition's sums. Decided once per
    /// process.
    pub(crate) fn usable() -> Option<Amx> {
        static USABLE: OnceLock<Option<Amx>> = OnceLock::new();
        *USABLE.get_or_init(|| {
            if !crate::instructions::tiles_allowed() {
                return None;
            }
            Amx::granted().filter(|&amx| agrees_with_the_definition(|| amx))
        })
    }

    /// The CPU's tiles where it has AMX-TILE and AMX-BF16 and Linux grants the tile data to
    /// this process.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    fn granted() -> Option<Amx> {
        let features = raw_cpuid::CpuId::new().get_extended_feature_info()?;
        if !(features.has_amx_tile() && features.has_amx_bf16()) {
            return None;
        }
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: this request asks for a permission and touches no memory of the process.
        let status = unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        };
        (status == 0).then_some(Amx(()))
    }

    /// No tiles off Linux on x86-64.
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    fn granted() -> Option<Amx> {
        None
    }
}

/// Whether one block (32 rows by 32 outputs over 48 pairs, the last tile of pairs padded) gives
/// the same sums on the tiles `tiles` makes as on the [`Definition`]. Its inputs are multiples
/// of 1/4 below 2 in magnitude, so every sum is exact in `f32` and the two agree to the bit or
/// not at all.
fn agrees_with_the_definition<T: Tiles>(tiles: impl Fn() -> T) -> bool {
    let (rows, d_input, pairs) = (BLOCK_ROWS, 70, 48);
    // The rows of x as pairs, packed here rather than by `pack_rows`: its threads, while this
    // runs inside `Amx::usable`'s `OnceLock`, could take a task that asks for the same lock.
    let x = |r: usize, i: usize| round_to_bf16(((r * d_input + i) * 7 % 11) as f32 / 4.0 - 1.25);
    let a: Vec<u32> = (0..rows)
        .flat_map(|r| {
            (0..pairs).map(move |p| {
                if 2 * p < d_input {
                    u32::from(x(r, 2 * p)) | (u32::from(x(r, 2 * p + 1)) << 16)
                } else {
                    0
                }
            })
        })
        .collect();
    let values: Vec<u16> = (0..NR * d_input)
        .map(|i| round_to_bf16((i * 5 % 13) as f32 / 4.0 - 1.5))
        .collect();
    let w = Bf16Rows {
        values: &values,
        offset: 0,
        d_output: NR,
        d_input,
        row: d_input,
    };
    let b = pack_stripe(&w, 0, NR, pairs);
    let mut on_tiles = [f32::NAN; BLOCK_ROWS * NR];
    sums_of_one_block(tiles(), &a, pairs, &b, &mut on_tiles);
    let mut defined = [f32::NAN; BLOCK_ROWS * NR];
    sums_of_one_block(Definition::new(), &a, pairs, &b, &mut defined);
    on_tiles
        .iter()
        .zip(&defined)
        .all(|(a, d)| a.to_bits() == d.to_bits())
}

/// [`block_sums`] of the first 32 rows of `a` and the first panel of `b`, tiles configured and
/// released around it.
fn sums_of_one_block<T: Tiles>(
    mut tiles: T,
    a: &[u32],
    pairs: usize,
    b: &[u32],
    sums: &mut [f32; BLOCK_ROWS * NR],
) {
    assert!(pairs.is_multiple_of(TILE) && a.len() >= BLOCK_ROWS * pairs && b.len() >= pairs * NR);
    // SAFETY: `CONFIG` is palette 1's; the block and the panel lie inside `a` and `b` (the
    // assertion above).
    unsafe {
        tiles.configure(&CONFIG);
        block_sums(&mut tiles, a.as_ptr(), pairs, b.as_ptr(), sums);
        tiles.release();
    }
}

#[cfg(target_arch = "x86_64")]
impl Tiles for Amx {
    // SAFETY, for each: an `Amx` exists only where the CPU runs these instructions and this
    // process holds the tile state (`Amx::granted`); the trait's contract keeps the memory
    // read and written in bounds.

    #[inline(always)]
    unsafe fn configure(&mut self, config: &Config) {
        unsafe {
            std::arch::asm!(
                "ldtilecfg [{config}]",
                config = in(reg) config.0.as_ptr(),
                options(nostack, readonly, preserves_flags),
            );
        }
    }

    #[inline(always)]
    unsafe fn zero<const T: u8>(&mut self) {
        unsafe {
            std::arch::asm!("tilezero tmm{t}", t = const T, options(nostack, preserves_flags));
        }
    }

    #[inline(always)]
    unsafe fn load<const T: u8>(&mut self, at: *const u8, stride: usize) {
        unsafe {
            std::arch::asm!(
                "tileloadd tmm{t}, [{at} + {stride} * 1]",
                t = const T,
                at = in(reg) at,
                stride = in(reg) stride,
                options(nostack, readonly, preserves_flags),
            );
        }
    }

    #[inline(always)]
    unsafe fn dot<const C: u8, const A: u8, const B: u8>(&mut self) {
        unsafe {
            std::arch::asm!(
                "tdpbf16ps tmm{c}, tmm{a}, tmm{b}",
                c = const C,
                a = const A,
                b = const B,
                options(nostack, preserves_flags),
            );
        }
    }

    #[inline(always)]
    unsafe fn store<const T: u8>(&mut self, at: *mut u8, stride: usize) {
        unsafe {
            std::arch::asm!(
                "tilestored [{at} + {stride} * 1], tmm{t}",
                t = const T,
                at = in(reg) at,
                stride = in(reg) stride,
                options(nostack, preserves_flags),
            );
        }
    }

    #[inline(always)]
    unsafe fn release(&mut self) {
        unsafe { std::arch::asm!("tilerelease", options(nostack, preserves_flags)) };
    }
}

/// No tiles off x86-64: an `Amx` is never made there.
#[cfg(not(target_arch = "x86_64"))]
impl Tiles for Amx {
    unsafe fn configure(&mut self, _: &Config) {
        unreachable!("no AMX off x86-64")
    }
    unsafe fn zero<const T: u8>(&mut self) {
        unreachable!("no AMX off x86-64")
    }
    unsafe fn load<const T: u8>(&mut self, _: *const u8, _: usize) {
        unreachable!("no AMX off x86-64")
    }
    unsafe fn dot<const C: u8, const A: u8, const B: u8>(&mut self) {
        unreachable!("no AMX off x86-64")
    }
    unsafe fn store<const T: u8>(&mut self, _: *mut u8, _: usize) {
        unreachable!("no AMX off x86-64")
    }
    unsafe fn release(&mut self) {
        unreachable!("no AMX off x86-64")
    }
}

/// The six instructions as the Intel SDM defines them, in plain Rust, on eight tiles in
/// memory. Where the CPU would fault (a tile used unconfigured, operands whose shapes do not
/// chain, a tile named twice), this panics.
#[derive(Clone, Debug)]
pub(crate) struct Definition {
    /// Each tile's bytes per row and rows; `None` before `configure` and after `release`.
    shapes: Option<[(usize, usize); 8]>,
    /// Each tile's 16 rows of 64 bytes.
    data: Box<[[u8; 64 * TILE]; 8]>,
}

impl Definition {
    /// Eight tiles, none configured.
    pub(crate) fn new() -> Definition {
        Definition {
            shapes: None,
            data: Box::new([[0; 64 * TILE]; 8]),
        }
    }

    /// Tile `t`'s bytes per row and rows.
    fn shape(&self, t: u8) -> (usize, usize) {
        let shapes = self.shapes.expect("a tile instruction before ldtilecfg");
        *shapes
            .get(usize::from(t))
            .unwrap_or_else(|| panic!("tmm{t}: palette 1 has eight tiles"))
    }

    /// Element `i` of row `row` of tile `t`, as `bfloat16` widened, a denormal read as zero
    /// (DAZ).
    fn bf16(&self, t: u8, row: usize, i: usize) -> f32 {
        let at = &self.data[usize::from(t)][64 * row + 2 * i..];
        denormal_as_zero(bf16_to_f32(u16::from_le_bytes([at[0], at[1]])))
    }

    /// Element `i` of row `row` of tile `t`, as `f32`.
    fn f32(&self, t: u8, row: usize, i: usize) -> f32 {
        let at = &self.data[usize::from(t)][64 * row + 4 * i..];
        f32::from_le_bytes([at[0], at[1], at[2], at[3]])
    }
}

/// A denormal as a zero of its sign, as the tile instructions read their operands (DAZ) and
/// write their results (FTZ).
fn denormal_as_zero(v: f32) -> f32 {
    if v.is_subnormal() {
        0.0f32.copysign(v)
    } else {
        v
    }
}

impl Tiles for Definition {
    unsafe fn configure(&mut self, config: &Config) {
        let c = &config.0;
        assert_eq!(c[0], 1, "palette {}: only palette 1 is defined", c[0]);
        assert!(
            c[1..16].iter().all(|&b| b == 0),
            "start_row and reserved bytes are 0"
        );
        assert!(
            c[32..48].iter().chain(&c[56..64]).all(|&b| b == 0),
            "tiles 8 to 15 do not exist in palette 1"
        );
        let shapes = std::array::from_fn(|t| {
            let bytes = usize::from(u16::from_le_bytes([c[16 + 2 * t], c[17 + 2 * t]]));
            let rows = usize::from(c[48 + t]);
            assert!(
                bytes <= 64 && rows <= TILE && (bytes == 0) == (rows == 0),
                "tmm{t}: {rows} rows of {bytes} bytes"
            );
            (bytes, rows)
        });
        self.shapes = Some(shapes);
        *self.data = [[0; 64 * TILE]; 8];
    }

    unsafe fn zero<const T: u8>(&mut self) {
        self.shape(T);
        self.data[usize::from(T)] = [0; 64 * TILE];
    }

    unsafe fn load<const T: u8>(&mut self, at: *const u8, stride: usize) {
        let (bytes, rows) = self.shape(T);
        let tile = &mut self.data[usize::from(T)];
        *tile = [0; 64 * TILE];
        for (row, to) in tile.chunks_exact_mut(64).take(rows).enumerate() {
            // SAFETY (the caller's): each configured row lies in readable memory.
            unsafe { std::ptr::copy_nonoverlapping(at.add(row * stride), to.as_mut_ptr(), bytes) };
        }
    }

    unsafe fn dot<const C: u8, const A: u8, const B: u8>(&mut self) {
        let ((c_bytes, c_rows), (a_bytes, a_rows), (b_bytes, b_rows)) =
            (self.shape(C), self.shape(A), self.shape(B));
        assert!(C != A && C != B && A != B, "tdpbf16ps names a tile twice");
        assert!(
            a_rows == c_rows && a_bytes == 4 * b_rows && b_bytes == c_bytes,
            "tdpbf16ps tmm{C} ({c_rows} × {c_bytes} B), tmm{A} ({a_rows} × {a_bytes} B), \
             tmm{B} ({b_rows} × {b_bytes} B): the shapes do not chain"
        );
        for m in 0..c_rows {
            // Even and odd products are summed apart over every pair, then added.
            let mut even_odd = [0f32; 32];
            for k in 0..a_bytes / 4 {
                for n in 0..c_bytes / 4 {
                    for e in 0..2 {
                        let product = self.bf16(A, m, 2 * k + e) * self.bf16(B, k, 2 * n + e);
                        even_odd[2 * n + e] = denormal_as_zero(even_odd[2 * n + e] + product);
                    }
                }
            }
            for n in 0..c_bytes / 4 {
                let pair = denormal_as_zero(even_odd[2 * n] + even_odd[2 * n + 1]);
                let sum = denormal_as_zero(denormal_as_zero(self.f32(C, m, n)) + pair);
                self.data[usize::from(C)][64 * m + 4 * n..][..4]
                    .copy_from_slice(&sum.to_le_bytes());
            }
            // The rest of the row is zeroed.
            self.data[usize::from(C)][64 * m + c_bytes..64 * (m + 1)].fill(0);
        }
    }

    unsafe fn store<const T: u8>(&mut self, at: *mut u8, stride: usize) {
        let (bytes, rows) = self.shape(T);
        for (row, from) in self.data[usize::from(T)]
            .chunks_exact(64)
            .take(rows)
            .enumerate()
        {
            // SAFETY (the caller's): each configured row lies in writable memory.
            unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), at.add(row * stride), bytes) };
        }
    }

    unsafe fn release(&mut self) {
        self.shapes = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_a_nan_stays_in_its_row, for_each_bf16_product};

    /// 16 rows of 64 bytes from `values` (row-major, 32 `bfloat16` a row).
    fn bf16_tile(value: impl Fn(usize, usize) -> f32) -> Vec<u8> {
        (0..TILE * 32)
            .flat_map(|i| round_to_bf16(value(i / 32, i % 32)).to_le_bytes())
            .collect()
    }

    /// `C += A · B` on the definition's tiles 0, 4 and 6, `C` starting at `start`.
    fn dot_on_the_definition(a: &[u8], b: &[u8], start: f32) -> Vec<f32> {
        let mut tiles = Definition::new();
        let c: Vec<u8> = (0..TILE * TILE).flat_map(|_| start.to_le_bytes()).collect();
        let mut sums = vec![0u8; 64 * TILE];
        // SAFETY: each operand holds 16 rows of 64 bytes.
        unsafe {
            tiles.configure(&CONFIG);
            tiles.load::<0>(c.as_ptr(), 64);
            tiles.load::<4>(a.as_ptr(), 64);
            tiles.load::<6>(b.as_ptr(), 64);
            tiles.dot::<0, 4, 6>();
            tiles.store::<0>(sums.as_mut_ptr(), 64);
        }
        sums.chunks_exact(4)
            .map(|v| f32::from_le_bytes([v[0], v[1], v[2], v[3]]))
            .collect()
    }

    #[test]
    fn the_definition_multiplies_pairs_row_by_column_and_adds_to_the_sums() {
        // A[m] holds pairs (m + 1, k + 1), B[k] pairs (1, n): C[m, n] = Σ_k (m + 1) + (k + 1)·n
        // = 16(m + 1) + 136 n, added to the 0.5 that C held.
        let a = bf16_tile(|m, i| {
            if i % 2 == 0 {
                m as f32 + 1.0
            } else {
                (i / 2) as f32 + 1.0
            }
        });
        let b = bf16_tile(|_, i| if i % 2 == 0 { 1.0 } else { (i / 2) as f32 });
        let sums = dot_on_the_definition(&a, &b, 0.5);
        for (i, &sum) in sums.iter().enumerate() {
            let (m, n) = (i / TILE, i % TILE);
            assert_eq!(
                sum,
                16.0 * (m as f32 + 1.0) + 136.0 * n as f32 + 0.5,
                "C[{m}, {n}]"
            );
        }
    }

    #[test]
    fn the_definition_reads_a_denormal_input_as_zero() {
        // bf16 0x0001 is 2^-133; times 2^100 it would be 2^-33, a normal f32.
        let mut a = vec![0u8; 64 * TILE];
        a[..2].copy_from_slice(&0x0001u16.to_le_bytes());
        let mut b = vec![0u8; 64 * TILE];
        b[..2].copy_from_slice(&round_to_bf16(2f32.powi(100)).to_le_bytes());
        assert_eq!(dot_on_the_definition(&a, &b, 0.0)[0].to_bits(), 0);
        a[..2].copy_from_slice(&round_to_bf16(2f32.powi(-30)).to_le_bytes());
        assert_eq!(dot_on_the_definition(&a, &b, 0.0)[0], 2f32.powi(70));
    }

    #[test]
    fn the_definition_faults_where_the_cpu_would() {
        let faults = |run: fn(&mut Definition)| {
            let mut tiles = Definition::new();
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&mut tiles))).is_err()
        };
        // SAFETY, in each: no memory is read or written.
        assert!(
            faults(|t| unsafe { t.zero::<0>() }),
            "a tile used before ldtilecfg"
        );
        assert!(faults(|t| unsafe {
            t.configure(&CONFIG);
            t.dot::<0, 4, 0>();
        }));
        assert!(faults(|t| unsafe {
            let mut config = Config(CONFIG.0);
            config.0[48 + 6] = 8; // tmm6 of 8 rows: 16 pairs of tmm4 do not chain with it
            t.configure(&config);
            t.dot::<0, 4, 6>();
        }));
        assert!(faults(|t| unsafe {
            let mut config = Config(CONFIG.0);
            config.0[48 + 9] = 16; // tmm9 in palette 1
            t.configure(&config);
        }));
        assert!(!faults(|t| unsafe {
            t.configure(&CONFIG);
            t.dot::<0, 4, 6>();
            t.release();
        }));
    }

    /// The definition, but `tdpbf16ps` adds every product twice: tiles that are wrong.
    struct Twice(Definition);

    impl Tiles for Twice {
        unsafe fn configure(&mut self, config: &Config) {
            unsafe { self.0.configure(config) }
        }
        unsafe fn zero<const T: u8>(&mut self) {
            unsafe { self.0.zero::<T>() }
        }
        unsafe fn load<const T: u8>(&mut self, at: *const u8, stride: usize) {
            unsafe { self.0.load::<T>(at, stride) }
        }
        unsafe fn dot<const C: u8, const A: u8, const B: u8>(&mut self) {
            unsafe {
                self.0.dot::<C, A, B>();
                self.0.dot::<C, A, B>();
            }
        }
        unsafe fn store<const T: u8>(&mut self, at: *mut u8, stride: usize) {
            unsafe { self.0.store::<T>(at, stride) }
        }
        unsafe fn release(&mut self) {
            unsafe { self.0.release() }
        }
    }

    #[test]
    fn tiles_that_are_wrong_fail_the_check_before_first_use() {
        assert!(agrees_with_the_definition(Definition::new));
        assert!(!agrees_with_the_definition(|| Twice(Definition::new())));
    }

    #[test]
    fn equals_the_sums_of_the_rounded_inputs_on_the_definition_and_on_the_cpus_tiles() {
        // Rows around a tile (16) and a block (32), outputs around a tile (16), a panel (32)
        // and a task's stripe (128), inputs around a tile of pairs (32 inputs); odd inputs
        // leave the last pair half empty.
        let shapes = [
            (16, 1, 1),
            (17, 7, 33),
            (32, 32, 32),
            (33, 33, 129),
            (31, 64, 16),
            (47, 0, 5),
            (70, 301, 300),
            (45, 600, 40),
        ];
        for_each_bf16_product(11, &shapes, |product, bias| {
            let (x, rows, w) = (&product.x, product.rows, product.w());
            let defined = linear(&Definition::new, x, rows, &w, bias);
            product.assert_sums(&defined, bias, "the definition");
            if let Some(amx) = Amx::usable() {
                product.assert_sums(&linear(&|| amx, x, rows, &w, bias), bias, "AMX");
            }
        });
    }

    #[test]
    fn a_nan_input_reaches_every_output_of_its_row_and_no_other() {
        // Rows 13 and 37: one in each block of 32 rows.
        assert_a_nan_stays_in_its_row(40, &[13, 37], |x, w| {
            linear(&Definition::new, x, 40, w, None)
        });
    }
}
