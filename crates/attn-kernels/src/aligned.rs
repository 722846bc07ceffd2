//! Buffers whose first float starts a 64-byte cache line.
//!
//! The micro-kernels load and store whole rows of [`NR`](super::simd::NR) floats, 64 bytes:
//! one AVX-512 register, two AVX2 ones. A `Vec<f32>` starts wherever the allocator puts it
//! (16-byte aligned with mimalloc or glibc), so every such row can straddle two cache lines,
//! and whether it does changes from one allocation to the next. Every row stride of the
//! packed panels and block buffers is a multiple of `NR`, so a buffer that starts a line
//! keeps all its rows on lines, whatever the allocator does.
//!
//! Alignment alone did not make the native forward steady from process to process: on a
//! Zen 4 at s = 512 it still took either about 2.95 or about 3.45 ms per call depending on
//! the process. What did was keeping the packed keys and values between calls (see
//! `forward.rs`), which removed a 2 MiB allocation, its zeroing and its page faults from
//! every call.

use std::ops::{Deref, DerefMut};

/// Floats in one cache line.
const LINE: usize = 16;

/// A `[f32]` that starts a cache line: a `Vec<f32>` one line longer than needed, read from
/// its first aligned float.
#[derive(Clone, Debug, Default)]
pub(crate) struct AlignedBuf {
    storage: Vec<f32>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// Sets the buffer to `len` zeros, keeping its allocation where it is large enough.
    pub(crate) fn zeroed(&mut self, len: usize) -> &mut [f32] {
        self.storage.clear();
        self.storage.resize(len + LINE - 1, 0.0);
        self.place(len);
        self
    }

    /// Sizes the buffer to `len` floats without setting them, keeping its allocation where it
    /// is large enough: for buffers that are written before they are read. Where the
    /// allocation is kept, so are the values.
    pub(crate) fn fit(&mut self, len: usize) -> &mut [f32] {
        if self.storage.len() < len + LINE - 1 {
            self.storage.resize(len + LINE - 1, 0.0);
        }
        self.place(len);
        self
    }

    /// Floats held by the allocation.
    pub(crate) fn capacity(&self) -> usize {
        self.storage.capacity()
    }

    fn place(&mut self, len: usize) {
        // `align_offset` may decline (`usize::MAX`); the buffer is then used where it starts,
        // which is only slower.
        let offset = self.storage.as_ptr().align_offset(LINE * size_of::<f32>());
        self.start = if offset < LINE { offset } else { 0 };
        self.len = len;
    }
}

impl Deref for AlignedBuf {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        &self.storage[self.start..][..self.len]
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.storage[self.start..][..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_starts_a_line_and_holds_its_length() {
        let mut buffer = AlignedBuf::default();
        for len in [0, 1, 15, 16, 17, 1000, 3, 4096] {
            for filled in [buffer.zeroed(len).to_vec(), buffer.fit(len).to_vec()] {
                assert_eq!(filled.len(), len);
            }
            assert_eq!(buffer.len(), len);
            assert_eq!(buffer.as_ptr() as usize % 64, 0, "len {len}");
            assert!(buffer.zeroed(len).iter().all(|&x| x == 0.0));
        }
    }

    #[test]
    fn fit_keeps_what_was_written_when_it_does_not_grow() {
        let mut buffer = AlignedBuf::default();
        buffer.zeroed(32);
        buffer
            .iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = i as f32);
        let kept: Vec<f32> = buffer.fit(20).to_vec();
        assert_eq!(kept, (0..20).map(|i| i as f32).collect::<Vec<_>>());
    }
}
