//! How the native passes cut a problem into blocks and tasks, chosen from the machine they run
//! on: the caches of one core and the worker threads.
//!
//! - **Block sizes** are chosen so that the data a pass reuses across one block stays in the
//!   core's L2 cache, with half of it left for the operands that stream through:
//!   - the forward keeps one block of keys and values (packed) and that block's scores:
//!     `4 · keys · (d_head + d_value + queries)` bytes;
//!   - the backward keeps one block pair's four `[queries, keys]` buffers (`S`, `dP` and their
//!     packed copies) and one key block's keys, values and gradient accumulators:
//!     `4 · (4 · queries · keys + 2 · keys · (d_head + d_value))` bytes.
//!
//!   The largest candidate that fits is taken, the smallest where none does. At
//!   `d_head = d_value = 64` that is, forward, 128 keys on a 256 KiB L2, 256 on 512 KiB (AMD
//!   Zen 3), 512 on 1 MiB (Zen 4, Zen 5) and 1024 on 2 MiB (Intel Sapphire Rapids); backward,
//!   96 × 96 up to 512 KiB and 192 × 96 from 1 MiB on.
//! - **Tasks** are cut so that every thread has work: the forward shortens its query blocks, and
//!   the backward splits each head's keys into groups (each group adds its share of `dq`), when
//!   `batch · n_heads` alone would leave threads idle: one head on two cores, eight heads on
//!   sixteen.
//!
//! The forward's query block and the number of tasks do not change a single floating-point
//! operation of the forward (each row is computed the same way in any block); the key blocks and
//! the backward's blocks and key groups change the order of some sums, so results can differ in
//! the last bits between machines, as they do between instruction sets.
//!
//! `ATTN_NATIVE_TILING=fq,fk,bq,bk` (forward queries and keys, backward queries and keys per
//! block), with an optional fifth value `kb` (key blocks per backward task), replaces the
//! chosen sizes, to measure others on a machine.

use std::sync::OnceLock;

use crate::problem::Problem;
use crate::simd::{MR, NR};

/// The caches of one core, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuCaches {
    /// Level-1 data cache.
    pub l1d: usize,
    /// Level-2 cache (unified).
    pub l2: usize,
}

impl CpuCaches {
    /// The sizes assumed where none can be read: the smallest of the x86 processors these
    /// kernels are measured on (AMD Zen 3).
    pub const FALLBACK: CpuCaches = CpuCaches {
        l1d: 32 << 10,
        l2: 512 << 10,
    };

    /// This machine's caches, read once per process from the processor (`cpuid`), `None`
    /// where it does not say (another architecture, a hypervisor that hides them).
    pub fn detected() -> Option<CpuCaches> {
        static DETECTED: OnceLock<Option<CpuCaches>> = OnceLock::new();
        *DETECTED.get_or_init(detect)
    }

    /// [`detected`](Self::detected), or [`FALLBACK`](Self::FALLBACK).
    pub fn of_this_machine() -> CpuCaches {
        Self::detected().unwrap_or(Self::FALLBACK)
    }
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
fn detect() -> Option<CpuCaches> {
    use raw_cpuid::{CacheType, CpuId};
    let mut l1d = None;
    let mut l2 = None;
    for cache in CpuId::new().get_cache_parameters()? {
        let bytes = cache.associativity()
            * cache.physical_line_partitions()
            * cache.coherency_line_size()
            * cache.sets();
        match (cache.level(), cache.cache_type()) {
            (1, CacheType::Data) => l1d = Some(bytes),
            (2, CacheType::Unified) => l2 = Some(bytes),
            _ => {}
        }
    }
    Some(CpuCaches {
        l1d: l1d.filter(|&b| b > 0)?,
        l2: l2.filter(|&b| b > 0)?,
    })
}

#[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
fn detect() -> Option<CpuCaches> {
    None
}

/// The forward's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ForwardBlocks {
    /// Queries per task: a multiple of [`MR`].
    pub queries: usize,
    /// Keys per block: a multiple of [`NR`].
    pub keys: usize,
}

/// The backward's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BackwardBlocks {
    /// Queries per block: a multiple of [`MR`] (rows of the `S`, `dP` and `dQ` products).
    pub queries: usize,
    /// Keys per block: a multiple of [`KEY_STEP`] (columns of `S` and `dP`).
    pub keys: usize,
    /// Key blocks per task: each (batch, head) is cut into tasks of this many key blocks.
    pub key_blocks_per_task: usize,
}

/// The backward pads keys to a multiple of this, [`NR`]: keys are columns of the `S` and `dP`
/// products and of the transposed `dK` and `dV` ones, and a reduction dimension of `dQ`'s,
/// which takes any length, so a last, shorter block of keys need only fill whole panels.
/// (Padding to a multiple of [`MR`] as well, 48, cost 12.5% more work at 128 or 256 keys and
/// three times the work at 16.)
pub(crate) const KEY_STEP: usize = NR;

/// The forward's key-block candidates, largest first.
const FORWARD_KEYS: [usize; 4] = [1024, 512, 256, 128];
/// The forward's queries per task where the threads have enough tasks.
const FORWARD_QUERIES: usize = 16 * MR;
/// The backward's `(queries, keys)` candidates, largest first. 192 × 192 is not among them:
/// on the AMD Zen 5 (1 MiB L2) it was about a tenth slower than both of these, which were
/// even there.
const BACKWARD_BLOCKS: [(usize, usize); 2] = [(32 * MR, 6 * KEY_STEP), (16 * MR, 6 * KEY_STEP)];
/// Tasks per thread a pass aims for, so that uneven tasks (causal rows, the last block) still
/// end close together.
pub(crate) const TASKS_PER_THREAD: usize = 4;

/// The shape facts block sizes are chosen from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// `batch · n_heads`.
    pub heads: usize,
    pub seq_len_q: usize,
    pub seq_len_kv: usize,
    pub d_head: usize,
    pub d_value: usize,
}

impl Shape {
    pub fn of(p: &Problem) -> Shape {
        Shape {
            heads: p.batch * p.n_heads,
            seq_len_q: p.seq_len_q,
            seq_len_kv: p.seq_len_kv,
            d_head: p.d_head,
            d_value: p.d_value,
        }
    }
}

/// The machine facts block sizes are chosen from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Machine {
    pub caches: CpuCaches,
    pub threads: usize,
}

impl Machine {
    /// This process: its caches and rayon's worker threads.
    pub fn current() -> Machine {
        Machine {
            caches: CpuCaches::of_this_machine(),
            threads: rayon::current_num_threads(),
        }
    }
}

impl ForwardBlocks {
    /// The blocks for `p` on this machine (or `ATTN_NATIVE_TILING`'s).
    pub fn for_problem(p: &Problem) -> ForwardBlocks {
        let mut blocks = Self::choose(Shape::of(p), Machine::current());
        if let Some(o) = overridden() {
            blocks.queries = o.forward_queries;
            blocks.keys = o.forward_keys;
        }
        blocks
    }

    /// The blocks for `shape` on `machine`: see the module's text.
    pub fn choose(shape: Shape, machine: Machine) -> ForwardBlocks {
        let dv = shape.d_value.next_multiple_of(NR);
        let queries = query_block(shape, machine.threads);
        let bytes = |keys: usize| 4 * keys * (shape.d_head + dv + queries);
        let keys = FORWARD_KEYS
            .into_iter()
            .find(|&keys| bytes(keys) <= machine.caches.l2 / 2)
            .unwrap_or(FORWARD_KEYS[FORWARD_KEYS.len() - 1]);
        ForwardBlocks { queries, keys }
    }
}

/// [`FORWARD_QUERIES`], or fewer (a multiple of [`MR`]) where that would give the threads fewer
/// than [`TASKS_PER_THREAD`] tasks each.
fn query_block(shape: Shape, threads: usize) -> usize {
    let wanted_tasks = TASKS_PER_THREAD * threads;
    let per_head = wanted_tasks.div_ceil(shape.heads.max(1));
    shape
        .seq_len_q
        .div_ceil(per_head)
        .next_multiple_of(MR)
        .clamp(MR, FORWARD_QUERIES)
}

impl BackwardBlocks {
    /// The blocks for `p` on this machine (or `ATTN_NATIVE_TILING`'s).
    pub fn for_problem(p: &Problem) -> BackwardBlocks {
        let (shape, machine) = (Shape::of(p), Machine::current());
        let mut blocks = Self::choose(shape, machine);
        if let Some(o) = overridden() {
            blocks.queries = o.backward_queries;
            blocks.keys = o.backward_keys;
            blocks.key_blocks_per_task = o
                .key_blocks_per_task
                .unwrap_or_else(|| key_blocks_per_task(shape, blocks.keys, machine.threads));
        }
        blocks
    }

    /// The blocks for `shape` on `machine`: see the module's text.
    pub fn choose(shape: Shape, machine: Machine) -> BackwardBlocks {
        let width = shape.d_head + shape.d_value;
        let bytes = |(queries, keys): (usize, usize)| 4 * (4 * queries * keys + 2 * keys * width);
        let (queries, keys) = BACKWARD_BLOCKS
            .into_iter()
            .find(|&blocks| bytes(blocks) <= machine.caches.l2 / 2)
            .unwrap_or(BACKWARD_BLOCKS[BACKWARD_BLOCKS.len() - 1]);
        BackwardBlocks {
            queries,
            keys,
            key_blocks_per_task: key_blocks_per_task(shape, keys, machine.threads),
        }
    }

    /// The key ranges of one head's tasks: `[start, end)` in keys, each but the last a whole
    /// number of blocks.
    pub fn key_ranges(&self, seq_len_kv: usize) -> impl Iterator<Item = (usize, usize)> {
        let step = self.keys * self.key_blocks_per_task;
        (0..seq_len_kv.max(1))
            .step_by(step)
            .map(move |start| (start, (start + step).min(seq_len_kv)))
    }
}

/// All of a head's key blocks in one task, or fewer where `batch · n_heads` tasks would give
/// the threads fewer than [`TASKS_PER_THREAD`] each.
fn key_blocks_per_task(shape: Shape, keys: usize, threads: usize) -> usize {
    let key_blocks = shape.seq_len_kv.div_ceil(keys).max(1);
    let heads = shape.heads.max(1);
    if heads >= TASKS_PER_THREAD * threads {
        return key_blocks;
    }
    let tasks_per_head = (TASKS_PER_THREAD * threads).div_ceil(heads);
    key_blocks.div_ceil(tasks_per_head).max(1)
}

/// The block sizes `ATTN_NATIVE_TILING` sets, read once.
struct Override {
    forward_queries: usize,
    forward_keys: usize,
    backward_queries: usize,
    backward_keys: usize,
    key_blocks_per_task: Option<usize>,
}

fn overridden() -> Option<&'static Override> {
    static OVERRIDE: OnceLock<Option<Override>> = OnceLock::new();
    OVERRIDE
        .get_or_init(|| {
            let text = std::env::var("ATTN_NATIVE_TILING").ok()?;
            match parse_override(&text) {
                Ok(o) => Some(o),
                Err(why) => panic!("ATTN_NATIVE_TILING={text:?}: {why}"),
            }
        })
        .as_ref()
}

fn parse_override(text: &str) -> Result<Override, String> {
    let values: Vec<usize> = text
        .split(',')
        .map(|x| x.trim().parse::<usize>().map_err(|e| format!("{x:?}: {e}")))
        .collect::<Result<_, _>>()?;
    let (sizes, key_blocks_per_task) = match values[..] {
        [a, b, c, d] => ([a, b, c, d], None),
        [a, b, c, d, e] => ([a, b, c, d], Some(e)),
        _ => {
            return Err(format!(
                "four block sizes wanted (forward queries, forward keys, backward queries, \
                 backward keys) and optionally key blocks per backward task, {} values given",
                values.len()
            ));
        }
    };
    let [
        forward_queries,
        forward_keys,
        backward_queries,
        backward_keys,
    ] = sizes;
    if key_blocks_per_task == Some(0) {
        return Err("key blocks per backward task is 0, which is not positive".to_string());
    }
    for (name, value, multiple) in [
        ("forward queries", forward_queries, MR),
        ("forward keys", forward_keys, NR),
        ("backward queries", backward_queries, MR),
        ("backward keys", backward_keys, KEY_STEP),
    ] {
        if value == 0 || !value.is_multiple_of(multiple) {
            return Err(format!(
                "{name} is {value}, which is not a positive multiple of {multiple}"
            ));
        }
    }
    Ok(Override {
        forward_queries,
        forward_keys,
        backward_queries,
        backward_keys,
        key_blocks_per_task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1 << 10;

    fn machine(l2_kib: usize, threads: usize) -> Machine {
        Machine {
            caches: CpuCaches {
                l1d: 32 * KIB,
                l2: l2_kib * KIB,
            },
            threads,
        }
    }

    fn shape(heads: usize, seq_len: usize, d: usize) -> Shape {
        Shape {
            heads,
            seq_len_q: seq_len,
            seq_len_kv: seq_len,
            d_head: d,
            d_value: d,
        }
    }

    #[test]
    fn larger_caches_get_larger_blocks_that_fit_half_of_l2() {
        let s = shape(8, 4096, 64);
        let cases = [
            (256, 128, (96, 96)),
            (512, 256, (96, 96)),
            (1024, 512, (192, 96)),
            (2048, 1024, (192, 96)),
        ];
        for (l2_kib, forward_keys, backward) in cases {
            let m = machine(l2_kib, 2);
            let f = ForwardBlocks::choose(s, m);
            assert_eq!((f.queries, f.keys), (96, forward_keys), "L2 {l2_kib} KiB");
            let b = BackwardBlocks::choose(s, m);
            assert_eq!((b.queries, b.keys), backward, "L2 {l2_kib} KiB");
            // What the blocks keep fits half the L2, except the backward's smallest candidate,
            // taken where none fits.
            assert!(4 * f.keys * (64 + 64 + 96) <= l2_kib * KIB / 2);
            let backward_bytes = 4 * (4 * b.queries * b.keys + 2 * b.keys * 128);
            assert!(
                backward_bytes <= l2_kib * KIB / 2 || b.queries == 96,
                "L2 {l2_kib} KiB"
            );
        }
        // Wider heads take smaller key blocks on the same cache.
        assert_eq!(
            ForwardBlocks::choose(shape(8, 4096, 128), machine(1024, 2)).keys,
            256
        );
        // A cache too small for any candidate still gets the smallest.
        let tiny = machine(64, 2);
        assert_eq!(ForwardBlocks::choose(s, tiny).keys, 128);
        assert_eq!(
            (
                BackwardBlocks::choose(s, tiny).queries,
                BackwardBlocks::choose(s, tiny).keys
            ),
            (96, 96)
        );
    }

    #[test]
    fn few_heads_are_cut_into_more_tasks_so_every_thread_has_work() {
        // Eight heads on two threads: whole heads, whole query blocks.
        let m = machine(1024, 2);
        assert_eq!(ForwardBlocks::choose(shape(8, 4096, 64), m).queries, 96);
        let b = BackwardBlocks::choose(shape(8, 4096, 64), m);
        assert_eq!(b.key_ranges(4096).count(), 1);
        // One head on two threads: eight backward tasks of 576 keys, and the forward keeps its
        // 96 queries (4096 / 96 blocks are already enough tasks).
        let b = BackwardBlocks::choose(shape(1, 4096, 64), m);
        let ranges: Vec<_> = b.key_ranges(4096).collect();
        assert_eq!(ranges.len(), 8);
        assert_eq!(ranges[0], (0, 576));
        assert_eq!(ranges.last(), Some(&(4032, 4096)));
        // Eight heads of 128 queries on sixteen threads: 64 tasks want blocks of 18 queries.
        let m = machine(2048, 16);
        assert_eq!(ForwardBlocks::choose(shape(8, 128, 64), m).queries, 18);
        // The backward cuts eight heads of 128 keys into two tasks each, and cannot cut a head
        // shorter than one block of keys.
        let b = BackwardBlocks::choose(shape(8, 128, 64), m);
        assert_eq!(b.key_ranges(128).collect::<Vec<_>>(), [(0, 96), (96, 128)]);
        let b = BackwardBlocks::choose(shape(8, 90, 64), m);
        assert_eq!(b.key_ranges(90).collect::<Vec<_>>(), [(0, 90)]);
        let b = BackwardBlocks::choose(shape(8, 1000, 64), m);
        assert_eq!(b.keys, 96);
        assert_eq!(b.key_ranges(1000).count(), 6);
        // The ranges cover the keys once, in order, whatever the cut.
        for threads in [1, 2, 3, 16, 64] {
            for seq_len in [1, 47, 48, 97, 1000] {
                let b = BackwardBlocks::choose(shape(1, seq_len, 64), machine(1024, threads));
                let ranges: Vec<_> = b.key_ranges(seq_len).collect();
                assert_eq!(ranges[0].0, 0);
                assert_eq!(ranges.last().map(|r| r.1), Some(seq_len));
                assert!(ranges.windows(2).all(|w| w[0].1 == w[1].0));
                assert!(ranges.iter().all(|r| r.0.is_multiple_of(b.keys)));
            }
        }
    }

    #[test]
    fn overrides_must_be_four_multiples_of_the_register_block() {
        let o = parse_override("48, 512,192,96").expect("valid");
        assert_eq!(
            (
                o.forward_queries,
                o.forward_keys,
                o.backward_queries,
                o.backward_keys
            ),
            (48, 512, 192, 96)
        );
        assert_eq!(o.key_blocks_per_task, None);
        let o = parse_override("96,256,96,96,1000").expect("valid");
        assert_eq!(o.key_blocks_per_task, Some(1000));
        let err = |text: &str| parse_override(text).err().expect("refused");
        assert!(err("96,256,96").contains("3 values given"));
        assert!(err("96,256,96,96,0").contains("is 0"));
        assert!(err("96,250,96,96").contains("forward keys is 250"));
        assert!(
            err("96,256,96,40")
                .contains("backward keys is 40, which is not a positive multiple of 16")
        );
        assert!(err("96,x,96,96").contains("\"x\""));
    }

    #[test]
    fn the_detected_caches_are_plausible_where_there_are_any() {
        if let Some(c) = CpuCaches::detected() {
            assert!((4 * KIB..=1024 * KIB).contains(&c.l1d), "{c:?}");
            assert!(c.l2 >= c.l1d && c.l2 <= 64 << 20, "{c:?}");
        }
    }
}
