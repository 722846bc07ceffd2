//! The programs' allocator, mimalloc, told to keep the memory it frees.
//!
//! A training step allocates and frees the same buffers at every step: activations, gradients,
//! each matrix product's output. mimalloc returns a freed range to the kernel once it has been
//! free for a second (its `purge_delay`, 1000 ms). A step that takes longer than that finds its
//! buffers of the step before returned, and the kernel zeroes every page again on first touch,
//! 2 MiB at a time with transparent huge pages. [`keep_freed_memory`] turns the returning off:
//! freed memory stays mapped and is handed out again.
//!
//! Measured with `attn-bench --cases attn/train_mid` on 2 cores of an Intel Xeon (family 6,
//! model 167): 54 356 page faults in the run without it, 624 with it (the first touches of the
//! high-water mark), and 766 against 807 ms per update (docs/benchmarks.md). The resident
//! memory then stays at the run's high-water mark until the program exits, which the peak
//! (`VmHWM`) already was.
//!
//! Only the programs call this (`attn-train`, `attn-bench`), as only they choose mimalloc;
//! the library crates leave the allocator to their user. The environment still decides where it
//! speaks: with `MIMALLOC_PURGE_DELAY` set (`1000` is mimalloc's default), that value stands.

/// mimalloc's `mi_option_purge_delay` (`mimalloc.h`, version 3): milliseconds a freed range
/// waits before it is returned to the kernel; `-1` never returns it.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps the memory mimalloc frees mapped for reuse, unless `MIMALLOC_PURGE_DELAY` is set.
///
/// Call it first thing in `main`, before any other thread starts: mimalloc's options are not
/// safe to set while other threads allocate.
#[allow(unsafe_code)]
pub fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: `mi_option_set` writes one entry of mimalloc's option table; the caller runs
    // before any other thread exists, so nothing reads the table at the same time.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The option number is mimalloc's own: after the call, mimalloc reads back `-1` for it
    /// (a wrong number would set some other option). The test binary's allocator is the
    /// system's, so the setting changes nothing else here.
    #[test]
    #[allow(unsafe_code)]
    fn purge_delay_is_the_option_set() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: reads one entry of mimalloc's option table.
        let before = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        assert_eq!(before, 1000, "mimalloc's documented default purge delay");
        keep_freed_memory();
        // SAFETY: as above.
        let after = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        assert_eq!(after, -1);
    }
}
