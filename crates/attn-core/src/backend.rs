//! Backends: the one table in the workspace that turns a string such as `"flex"` into a burn
//! [`Device`], and the one place that decides which fast path serves a device
//! ([`BackendKind`]). It names devices; choosing one stays with the caller (a program's command
//! line, the test harness).
//!
//! Which backends exist is decided at compile time by this crate's cargo features (`flex`,
//! `ndarray`, `wgpu`, `vulkan`, `metal`, `cuda`), which `attn-model`, `attn-train` and the facade
//! forward one to one under the same names. Asking for a backend that was not compiled in is an
//! error that names the feature that would enable it.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

use burn::backend::DispatchDevice;
use burn::tensor::Device;
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "metal"))]
use burn::tensor::DeviceKind;
use thiserror::Error;

/// A flex tensor's values as `f32`, read in place when its storage is contiguous `f32` and
/// copied otherwise: how the flex implementations of the workspace's backend operations read
/// their inputs.
#[cfg(feature = "flex")]
pub use crate::native::host::flex_floats;

/// Every backend name this crate knows, with the cargo feature that compiles it in.
pub const KNOWN: &[(&str, &str)] = &[
    ("flex", "flex"),
    ("ndarray", "ndarray"),
    ("wgpu", "wgpu"),
    ("vulkan", "vulkan"),
    ("metal", "metal"),
    ("cuda", "cuda"),
];

/// The backend names compiled into this build, in order of preference for a CPU-only machine.
pub const COMPILED: &[&str] = &[
    #[cfg(feature = "flex")]
    "flex",
    #[cfg(feature = "ndarray")]
    "ndarray",
    #[cfg(feature = "wgpu")]
    "wgpu",
    #[cfg(feature = "vulkan")]
    "vulkan",
    #[cfg(feature = "metal")]
    "metal",
    #[cfg(feature = "cuda")]
    "cuda",
];

/// Why a backend name could not become a device.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BackendError {
    /// The name is not one of the backends this crate knows.
    #[error(
        "unknown backend `{name}`; known backends: {known}; compiled into this build: {compiled}"
    )]
    Unknown {
        /// The name asked for.
        name: String,
        /// Every known backend name, comma separated.
        known: String,
        /// The backends compiled into this build, comma separated.
        compiled: String,
    },
    /// The backend exists but this build was compiled without it.
    #[error(
        "backend `{name}` is not compiled into this build; rebuild with `--features {feature}` \
         (compiled in: {compiled})"
    )]
    NotCompiled {
        /// The name asked for.
        name: String,
        /// The cargo feature that enables it (the same name on every crate of the workspace).
        feature: String,
        /// The backends compiled into this build, comma separated.
        compiled: String,
    },
    /// A `name:index` whose index is not a number, or names a CPU backend (which has one
    /// device), or a list with an empty entry.
    #[error("bad device `{spec}`: {reason}")]
    BadSpec {
        /// What was asked for.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The backend a run uses when none is named: `flex` when compiled in (the pure-Rust CPU
/// backend), otherwise the first compiled-in one.
///
/// Returns `"flex"` when no backend at all is compiled in, so that [`device`] then reports the
/// feature to enable.
pub fn default_backend() -> &'static str {
    COMPILED.first().copied().unwrap_or("flex")
}

/// The device for a backend name (`flex`, `ndarray`, `wgpu`, `vulkan`, `metal`, `cuda`), without
/// autodiff; call `.autodiff()` on it to train.
///
/// GPU backends pick their default adapter, or with `name:index` (`wgpu:1`, `cuda:0`) the
/// GPU of that index (for wgpu, vulkan and metal the index-th discrete GPU); the device itself
/// starts lazily, on first use. A CPU backend has one device and takes no index.
///
/// # Errors
///
/// [`BackendError::Unknown`] for a name this crate does not know,
/// [`BackendError::NotCompiled`] for a known backend whose cargo feature is off, naming the
/// feature to turn on, and [`BackendError::BadSpec`] for an index that is not a number or is
/// given to a CPU backend.
pub fn device(spec: &str) -> Result<Device, BackendError> {
    let (name, index) = match spec.split_once(':') {
        None => (spec, None),
        Some((name, index)) => {
            let bad = |reason: String| BackendError::BadSpec {
                spec: spec.to_string(),
                reason,
            };
            let index = index.parse::<usize>().map_err(|_| {
                bad(format!(
                    "the index `{index}` is not a whole number (write e.g. `{name}:0`)"
                ))
            })?;
            if matches!(name, "flex" | "ndarray") {
                return Err(bad(format!(
                    "`{name}` is a CPU backend with one device; name it without an index \
                     (repeat it to train several replicas on it)"
                )));
            }
            (name, Some(index))
        }
    };
    let compiled = COMPILED.join(", ");
    let Some(&(_, feature)) = KNOWN.iter().find(|(known, _)| *known == name) else {
        let known = KNOWN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
        return Err(BackendError::Unknown {
            name: name.to_string(),
            known,
            compiled,
        });
    };
    compiled_device(name, index).ok_or_else(|| BackendError::NotCompiled {
        name: name.to_string(),
        feature: feature.to_string(),
        compiled,
    })
}

/// The devices of a comma-separated list of [`device`] specs (`flex,flex`, `wgpu:0,wgpu:1`), in
/// order: the devices of a data-parallel run, one replica each. A name may repeat.
///
/// # Errors
///
/// As [`device`] for the first entry that fails; [`BackendError::BadSpec`] for an empty entry.
pub fn devices(list: &str) -> Result<Vec<Device>, BackendError> {
    list.split(',')
        .map(|spec| {
            let spec = spec.trim();
            if spec.is_empty() {
                return Err(BackendError::BadSpec {
                    spec: list.to_string(),
                    reason: "the list has an empty entry".into(),
                });
            }
            device(spec)
        })
        .collect()
}

/// The device for a known backend name (with a GPU index where given), or `None` when its
/// feature is off.
#[cfg_attr(
    not(any(
        feature = "wgpu",
        feature = "vulkan",
        feature = "metal",
        feature = "cuda"
    )),
    allow(unused_variables)
)]
fn compiled_device(name: &str, index: Option<usize>) -> Option<Device> {
    #[cfg(any(feature = "wgpu", feature = "vulkan", feature = "metal"))]
    let kind = index.map_or(DeviceKind::DefaultDevice, DeviceKind::DiscreteGpu);
    match name {
        #[cfg(feature = "flex")]
        "flex" => Some(Device::flex()),
        #[cfg(feature = "ndarray")]
        #[allow(deprecated)]
        // burn 0.22 deprecates ndarray in favour of flex; it still works.
        "ndarray" => Some(Device::ndarray()),
        #[cfg(feature = "wgpu")]
        "wgpu" => Some(Device::wgpu(kind)),
        #[cfg(feature = "vulkan")]
        "vulkan" => Some(Device::vulkan(kind)),
        #[cfg(feature = "metal")]
        "metal" => Some(Device::metal(kind)),
        #[cfg(feature = "cuda")]
        "cuda" => Some(Device::cuda(index.unwrap_or(0))),
        _ => None,
    }
}

/// Which of burn's backends holds a device's tensors, as far as this crate's fast paths care:
/// the one typed decision behind [`native_serves`](crate::native_serves),
/// [`flash_serves`](crate::flash_serves) and the flex-only operations.
///
/// A backend counts only when this crate's feature of that name is on: with the feature off,
/// no fast path is built for it, and its devices are [`BackendKind::Other`].
///
/// ```
/// use attn_core::backend::BackendKind;
/// use burn::tensor::Device;
///
/// assert_eq!(BackendKind::of(&Device::flex()), BackendKind::Flex);
/// assert_eq!(BackendKind::of(&Device::flex().autodiff()), BackendKind::Flex);
/// assert!(BackendKind::Flex.is_host());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// burn's flex, the pure-Rust CPU backend.
    Flex,
    /// burn's ndarray CPU backend.
    NdArray,
    /// A CubeCL runtime: wgpu, Vulkan, Metal or CUDA.
    Cube,
    /// Any other backend, or one this crate was built without.
    Other,
}

impl BackendKind {
    /// The backend of `device`, looking through autodiff to the device it wraps.
    pub fn of(device: &Device) -> Self {
        // The dispatch enum's variants exist only for the backends burn was built with, so each
        // arm is compiled with the feature that builds its backend; `_` takes the rest.
        #[allow(unreachable_patterns)]
        match device.clone().inner().as_dispatch() {
            #[cfg(feature = "flex")]
            DispatchDevice::Flex(_) => Self::Flex,
            #[cfg(feature = "ndarray")]
            DispatchDevice::NdArray(_) => Self::NdArray,
            #[cfg(any(
                feature = "wgpu",
                feature = "vulkan",
                feature = "metal",
                feature = "cuda"
            ))]
            DispatchDevice::Cube(_) => Self::Cube,
            _ => Self::Other,
        }
    }

    /// Whether the backend keeps its tensors in host memory, where the native kernels read
    /// them without moving data between devices.
    pub fn is_host(self) -> bool {
        matches!(self, Self::Flex | Self::NdArray)
    }
}

/// `f()`, run on one of rayon's threads when `device` keeps its tensors in host memory, with
/// the pool's other threads kept awake until it returns.
///
/// The CPU backends and the native kernels split each operation across rayon's pool. Called
/// from a thread outside the pool, every such operation hands its work to the pool and sleeps
/// until the pool wakes it: two thread switches per operation. A decoding step of a 30-layer
/// model runs hundreds of operations of a few microseconds each, so the switches can cost as
/// much as the arithmetic. Run from a thread of the pool, an operation splits its work there
/// and the caller takes its own share.
///
/// Between two split operations the caller runs the small ones (norms, rotations, cache
/// writes) alone. A rayon thread that finds no work for about 15 µs goes to sleep, and waking
/// it again takes a system call and, under a hypervisor, 10 to 40 µs more before it takes its
/// share. So while `f` runs, each other thread of the pool polls for work
/// ([`rayon::yield_now`]) instead of sleeping, as OpenMP's threads spin between parallel
/// regions (PyTorch's CPU operators). They go back to rayon's own waiting when `f` returns or
/// panics.
///
/// On a device elsewhere (a GPU), or on a thread already in the pool, `f` runs where it is
/// called.
pub fn on_cpu_pool<R: Send>(device: &Device, f: impl FnOnce() -> R + Send) -> R {
    if BackendKind::of(device).is_host() && rayon::current_thread_index().is_none() {
        let done = AtomicBool::new(false);
        rayon::scope(|scope| with_pool_awake(scope, &done, f))
    } else {
        f()
    }
}

/// `f()` on this thread of a pool, while every other thread of the pool polls for work until
/// `f` returns or panics (see [`on_cpu_pool`]); `done` is the pollers' stop flag.
fn with_pool_awake<'scope, R>(
    scope: &rayon::Scope<'scope>,
    done: &'scope AtomicBool,
    f: impl FnOnce() -> R,
) -> R {
    for _ in 1..rayon::current_num_threads() {
        scope.spawn(move |_| poll_until(done));
    }
    // Set on return and on unwinding alike, so that the scope's wait for the pollers ends
    // either way.
    let _release = SetOnDrop(done);
    let _busy = Busy::enter();
    f()
}

thread_local! {
    /// Whether this thread is running a pass of [`with_pool_awake`] or a poller, perhaps
    /// suspended below the job it runs now.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread [`BUSY`] until dropped, then restores what it was.
struct Busy(bool);

impl Busy {
    fn enter() -> Self {
        Self(BUSY.with(|busy| busy.replace(true)))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.with(|busy| busy.set(self.0));
    }
}

/// Runs the pool's pending work on this thread until `done` is set.
///
/// Returns at once on a thread that is running a pass or a poller already. A thread waiting
/// inside a pass (for the half of a split another thread took) runs other jobs meanwhile, and
/// may take a poller: polling there would hold the suspended pass until the poller's own pass
/// ended, and two passes on two threads could each wait for the other. So a poller never polls
/// above a suspended pass.
fn poll_until(done: &AtomicBool) {
    if BUSY.with(Cell::get) {
        return;
    }
    let _busy = Busy::enter();
    while !done.load(Ordering::Acquire) {
        if rayon::yield_now() != Some(rayon::Yield::Executed) {
            std::hint::spin_loop();
        }
    }
}

/// Sets its flag when dropped.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// What a device's memory pools hold, from the CubeCL client's memory report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    /// Bytes the pools hold from the driver. Pools keep what they reserve until
    /// [`release_device_memory`] asks for it back, so after a computation this is the most the
    /// computation needed at once, padding and the pools' page rounding included.
    pub reserved: u64,
    /// Bytes of the allocations alive now.
    pub in_use: u64,
    /// The largest single allocation any pool served since it was made.
    pub largest_allocation: u64,
}

/// The memory of a CubeCL device's pools (every stream of it), or `None` on a backend that
/// keeps its tensors in host memory or was built without CubeCL.
///
/// Waits for the device to finish the work it was given.
pub fn device_memory(device: &Device) -> Option<DeviceMemory> {
    #[allow(unreachable_patterns)]
    match device.clone().inner().as_dispatch() {
        #[cfg(feature = "cube")]
        DispatchDevice::Cube(cube) => {
            use burn_cubecl::cubecl::MemoryScope;
            let report = cube.client().memory_report(MemoryScope::Device);
            let usage = report.usage();
            let largest_allocation = report
                .streams
                .iter()
                .flat_map(|s| {
                    let pools = &s.pools;
                    pools
                        .dynamic
                        .iter()
                        .chain([&pools.persistent, &pools.dedicated])
                })
                .map(|pool| pool.largest_alloc)
                .max()
                .unwrap_or(0);
            Some(DeviceMemory {
                reserved: usage.bytes_reserved,
                in_use: usage.bytes_in_use,
                largest_allocation,
            })
        }
        _ => None,
    }
}

/// Asks a CubeCL device's pools to give back to the driver what no live tensor uses, so that
/// [`device_memory`]'s `reserved` after the next computation is that computation's own. Does
/// nothing on other backends.
pub fn release_device_memory(device: &Device) {
    #[allow(unreachable_patterns)]
    match device.clone().inner().as_dispatch() {
        #[cfg(feature = "cube")]
        DispatchDevice::Cube(cube) => {
            // Refused only while a stream records a graph, which nothing here does.
            let _ = cube.client().memory_cleanup();
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `f` on a thread of its own, on a watchdog: a pool whose pollers never stopped would hang
    /// it, and fails the test after `seconds` instead.
    fn on_watchdog<R: Send + 'static>(seconds: u64, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(f());
        });
        receiver
            .recv_timeout(std::time::Duration::from_secs(seconds))
            .expect("the work ends in time, without a panic")
    }

    /// `f` inside a pool of `threads` threads whose other threads are kept awake, on a
    /// watchdog.
    fn awake_in_pool<R: Send + 'static>(
        threads: usize,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> std::thread::Result<R> {
        on_watchdog(60, move || {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a pool of a few threads");
            let done = AtomicBool::new(false);
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.scope(|scope| with_pool_awake(scope, &done, f))
            }))
        })
    }

    #[test]
    fn work_split_while_the_pool_is_kept_awake_is_all_done_and_the_pollers_stop() {
        use rayon::prelude::*;
        for threads in [1, 2, 3] {
            let sums = awake_in_pool(threads, || {
                // Gaps longer than an idle thread's spinning, then split work.
                (0..20)
                    .map(|round| {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                        (0..10_000u64)
                            .into_par_iter()
                            .map(|i| i * round)
                            .sum::<u64>()
                    })
                    .collect::<Vec<_>>()
            })
            .expect("nothing panics");
            // Σ i for i < 10 000 is 49 995 000.
            let expected: Vec<u64> = (0..20).map(|round| 49_995_000 * round).collect();
            assert_eq!(sums, expected, "{threads} threads");
        }
    }

    #[test]
    fn passes_from_two_threads_on_one_kept_awake_pool_both_finish() {
        use rayon::prelude::*;
        // Two callers' passes interleave on two threads: a thread waiting inside one pass may
        // take the other's jobs and pollers. Both must finish, with their own sums.
        let sums = on_watchdog(120, || {
            let pool = std::sync::Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(2)
                    .build()
                    .expect("a pool of two threads"),
            );
            let callers: Vec<_> = (0..2u64)
                .map(|caller| {
                    let pool = std::sync::Arc::clone(&pool);
                    std::thread::spawn(move || {
                        (0..300u64)
                            .map(|pass| {
                                let done = AtomicBool::new(false);
                                pool.scope(|scope| {
                                    with_pool_awake(scope, &done, || {
                                        (0..8)
                                            .map(|_| {
                                                (0..4096u64)
                                                    .into_par_iter()
                                                    .map(|i| i + caller + pass)
                                                    .sum::<u64>()
                                            })
                                            .sum::<u64>()
                                    })
                                })
                            })
                            .collect::<Vec<u64>>()
                    })
                })
                .collect();
            callers
                .into_iter()
                .map(|c| c.join().expect("no caller panics"))
                .collect::<Vec<Vec<u64>>>()
        });
        for (caller, sums) in sums.iter().enumerate() {
            for (pass, &sum) in sums.iter().enumerate() {
                // 8 × Σ_{i<4096} (i + caller + pass) = 8 × (8 386 560 + 4096 · (caller + pass))
                let expected = 8 * (8_386_560 + 4096 * (caller + pass) as u64);
                assert_eq!(sum, expected, "caller {caller}, pass {pass}");
            }
        }
    }

    #[test]
    fn a_panic_while_the_pool_is_kept_awake_reaches_the_caller() {
        let in_f = awake_in_pool(3, || -> u32 { panic!("in f") });
        assert!(in_f.is_err(), "a panic in f is the caller's");
        let in_split = awake_in_pool(3, || {
            rayon::join(
                || std::thread::sleep(std::time::Duration::from_millis(20)),
                || panic!("in a split half"),
            )
        });
        assert!(in_split.is_err(), "a panic in a half another thread took");
        let after = awake_in_pool(3, || rayon::join(|| 2, || 3));
        assert_eq!(
            after.ok(),
            Some((2, 3)),
            "a pool that polled before works again"
        );
    }
}
