//! A cache of per-position rows (sinusoids, rotary cosines and sines): each row is computed once
//! on the host in `f64`, uploaded to every device that asks for it, and the table grows by
//! doubling when a longer sequence or a later offset arrives.
//!
//! Computing on the host in `f64` keeps the angles exact: `pos · ω` in `f32` loses about
//! `pos · 6e-8` radians, already `3e-6` at position 50, while the `f64` table rounds once, to the
//! nearest `f32`.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use burn::tensor::{Device, Tensor, TensorData};

/// Fewest rows computed at once, so that decoding one token at a time grows the table
/// `log2(positions)` times rather than at every step.
const MIN_ROWS: usize = 64;

/// Fills one row: `fill(position, row)` writes `width` values.
type RowFn = dyn Fn(usize, &mut [f64]) + Send + Sync;

/// A growable table of `width` values per position, one copy per device, shared by clones.
#[derive(Clone)]
pub(crate) struct PositionTable {
    width: usize,
    fill: Arc<RowFn>,
    /// One `[cached_len, width]` table per device, without autodiff: a constant. Keyed by the
    /// device as asked for, since a tensor may report a resolved device (a default wgpu device
    /// reports the adapter it picked) that compares unequal to the one it was created on.
    per_device: Arc<Mutex<Vec<(Device, Tensor<2>)>>>,
}

impl PositionTable {
    /// A table whose row for position `p` is written by `fill(p, row)`.
    pub(crate) fn new(
        width: usize,
        fill: impl Fn(usize, &mut [f64]) + Send + Sync + 'static,
    ) -> Self {
        Self {
            width,
            fill: Arc::new(fill),
            per_device: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Rows `offset..offset + seq_len` on `device`.
    ///
    /// # Shapes
    ///
    /// - output: `[seq_len, width]`
    ///
    /// # Panics
    ///
    /// Panics when `offset + seq_len` overflows `usize`.
    pub(crate) fn rows(&self, seq_len: usize, offset: usize, device: &Device) -> Tensor<2> {
        let end = offset
            .checked_add(seq_len)
            .expect("offset + seq_len must fit in usize");
        let table = self.covering(end, device);
        table.narrow(0, offset, seq_len) // [seq_len, width]
    }

    /// The cached table on `device`, grown to at least `end` rows.
    fn covering(&self, end: usize, device: &Device) -> Tensor<2> {
        // A panic elsewhere while the lock was held leaves either the old or the new table in
        // place; both are valid, so a poisoned lock is safe to reuse.
        let mut tables = self
            .per_device
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Device equality ignores autodiff, so a training and an inference device share a table.
        let found = tables.iter().position(|(d, _)| d == device);
        match found {
            Some(i) if tables[i].1.dims()[0] >= end => tables[i].1.clone(),
            Some(i) => {
                let [cached_len, _] = tables[i].1.dims();
                let new_len = capacity(end).max(2 * cached_len);
                let tail = self.compute(cached_len, new_len, device); // [new_len - cached_len, width]
                let grown = Tensor::cat(vec![tables[i].1.clone(), tail], 0); // [new_len, width]
                tables[i].1 = grown.clone();
                grown
            }
            None => {
                let table = self.compute(0, capacity(end), device); // [capacity, width]
                tables.push((device.clone(), table.clone()));
                table
            }
        }
    }

    /// Rows `start..end`, computed on the host and uploaded without autodiff.
    fn compute(&self, start: usize, end: usize, device: &Device) -> Tensor<2> {
        let mut row = vec![0.0f64; self.width];
        let mut data = Vec::with_capacity((end - start) * self.width);
        for position in start..end {
            (self.fill)(position, &mut row);
            data.extend(row.iter().map(|&v| v as f32));
        }
        let plain = device.clone().without_autodiff();
        Tensor::from_data(TensorData::new(data, [end - start, self.width]), &plain) // [end - start, width]
    }

    /// How many rows are cached on `device` (0 when none are).
    #[cfg(test)]
    pub(crate) fn cached_len(&self, device: &Device) -> usize {
        let tables = self
            .per_device
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        tables
            .iter()
            .find(|(d, _)| d == device)
            .map_or(0, |(_, t)| t.dims()[0])
    }
}

/// Rows to compute for a first request that needs `end` rows.
fn capacity(end: usize) -> usize {
    end.checked_next_power_of_two().unwrap_or(end).max(MIN_ROWS)
}

impl fmt::Debug for PositionTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tables = self
            .per_device
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let cached: Vec<usize> = tables.iter().map(|(_, t)| t.dims()[0]).collect();
        f.debug_struct("PositionTable")
            .field("width", &self.width)
            .field("cached_rows_per_device", &cached)
            .finish()
    }
}

/// Implements burn's `Module` for a type that holds no parameters and saves nothing, so that it
/// can sit as a plain field of a `#[derive(Module)]` struct. Its cached tables live on whichever
/// devices ask for them, so moving the module to a device has nothing to move.
macro_rules! constant_module {
    ($type:ty) => {
        impl burn::module::Module for $type {
            fn collect_devices(&self, devices: burn::module::Devices) -> burn::module::Devices {
                devices
            }

            fn fork(self, _device: &burn::tensor::Device) -> Self {
                self
            }

            fn to_device(self, _device: &burn::tensor::Device) -> Self {
                self
            }

            fn train(self) -> Self {
                self
            }

            fn valid(&self) -> Self {
                self.clone()
            }

            fn materialize(self) -> Self {
                self
            }

            fn visit<V: burn::module::ModuleVisitor>(&self, _visitor: &mut V) {}

            fn map<M: burn::module::ModuleMapper>(self, _mapper: &mut M) -> Self {
                self
            }
        }

        impl burn::module::ModuleDisplayDefault for $type {
            fn content(&self, content: burn::module::Content) -> Option<burn::module::Content> {
                content.add_formatted(&self).optional()
            }
        }

        impl burn::module::ModuleDisplay for $type {}
    };
}

pub(crate) use constant_module;

#[cfg(test)]
mod tests {
    use super::*;
    use attn_testing::{for_each_device, to_vec};

    fn counting_table() -> PositionTable {
        // Row p of width 3 is [p, 10p, 100p]: easy to recognise after slicing.
        PositionTable::new(3, |p, row| {
            for (k, v) in row.iter_mut().enumerate() {
                *v = p as f64 * 10f64.powi(k as i32);
            }
        })
    }

    #[test]
    fn rows_are_the_requested_positions() {
        for_each_device(|d| {
            let table = counting_table();
            let rows = table.rows(2, 5, &d.device);
            assert_eq!(rows.dims(), [2, 3], "{}", d.name);
            assert_eq!(
                to_vec(rows),
                vec![5.0, 50.0, 500.0, 6.0, 60.0, 600.0],
                "{}",
                d.name
            );
        });
    }

    #[test]
    fn grows_by_doubling_and_keeps_old_rows() {
        for_each_device(|d| {
            let table = counting_table();
            let _ = table.rows(3, 0, &d.device);
            assert_eq!(table.cached_len(&d.device), MIN_ROWS, "{}", d.name);
            // One past the cache: the table doubles instead of growing by one row.
            let rows = table.rows(1, MIN_ROWS, &d.device);
            assert_eq!(table.cached_len(&d.device), 2 * MIN_ROWS, "{}", d.name);
            assert_eq!(to_vec(rows), vec![64.0, 640.0, 6400.0], "{}", d.name);
            // A far request jumps straight to the power of two that covers it.
            let rows = table.rows(2, 299, &d.device);
            assert_eq!(table.cached_len(&d.device), 512, "{}", d.name);
            assert_eq!(
                to_vec(rows),
                vec![299.0, 2990.0, 29900.0, 300.0, 3000.0, 30000.0]
            );
            let early = table.rows(1, 7, &d.device);
            assert_eq!(to_vec(early), vec![7.0, 70.0, 700.0], "{}", d.name);
        });
    }

    #[test]
    fn repeated_requests_reuse_one_table_per_device() {
        for_each_device(|d| {
            let table = counting_table();
            for step in 0..5 {
                let _ = table.rows(1, step, &d.device);
                let _ = table.rows(1, step, &d.device.clone().autodiff());
            }
            let tables = table.per_device.lock().expect("no panic held the lock");
            assert_eq!(tables.len(), 1, "{}", d.name);
        });
    }

    #[test]
    fn clones_share_the_cache() {
        for_each_device(|d| {
            let table = counting_table();
            let twin = table.clone();
            let _ = twin.rows(5, 100, &d.device);
            assert_eq!(table.cached_len(&d.device), 128, "{}", d.name);
        });
    }

    #[test]
    fn capacity_is_a_power_of_two_at_least_min_rows() {
        assert_eq!(capacity(1), MIN_ROWS);
        assert_eq!(capacity(65), 128);
        assert_eq!(capacity(128), 128);
        assert_eq!(capacity(129), 256);
    }
}
