//! Test support shared by the workspace: the compiled-in devices every test body runs on,
//! the reference vectors and their closeness checks (from `attn_reference`, re-exported here
//! with assertions that print the largest difference), a seeded generator of random inputs, and
//! the mutations of valid files that the fuzz tests feed to the file readers ([`mutate`]).
//!
//! This crate is a dev-dependency only. It turns on every burn backend so that one test
//! binary covers flex, ndarray and wgpu; `ATTN_TEST_DEVICES=flex,ndarray` narrows the list.

use std::path::PathBuf;
use std::sync::OnceLock;

pub mod mutate;

use burn::tensor::{Bool, Device, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::de::DeserializeOwned;

pub use attn_reference::{
    self as reference, ATOL, AttentionWeights, Closeness, EncoderLayerCase, EncoderLayerFile,
    MhaCase, MhaFile, PositionalFile, RTOL, RefTensor, ReferenceFile, SdpaCase, SdpaFile,
    Tolerance,
};

/// One backend compiled into the test binary.
#[derive(Clone, Debug)]
pub struct TestDevice {
    /// Short backend name: `flex`, `ndarray` or `wgpu`.
    pub name: &'static str,
    /// The device itself, without autodiff.
    pub device: Device,
}

impl TestDevice {
    /// Whether two processes given the same work on this backend compute the same bits.
    ///
    /// The CPU backends do. wgpu does not: CubeCL's autotune chooses the kernel of each matrix
    /// product and reduction by timing the candidates in every new process, a loaded machine
    /// can time them in another order, and kernels that sum in another order round
    /// differently. Three 400-step runs of one seed, started together on lavapipe, wrote
    /// metrics that differ from step 180 on, by at most 3e-7 relative; two more, with
    /// CubeCL's autotune log on, chose different reduction and matrix-product kernels.
    pub fn repeats_bit_for_bit(&self) -> bool {
        self.name != "wgpu"
    }
}

/// Every backend name this crate can build, in the order tests visit them.
pub const ALL_BACKENDS: [&str; 3] = ["flex", "ndarray", "wgpu"];

/// Builds the device for a backend name, or `None` for a name that is not a backend (through
/// the workspace's one name table, [`attn_core::backend`]).
pub fn device_for(name: &str) -> Option<Device> {
    attn_core::backend::device(name).ok()
}

/// The devices the tests run on: all of [`ALL_BACKENDS`], or the list in `ATTN_TEST_DEVICES`.
///
/// # Panics
///
/// Panics when `ATTN_TEST_DEVICES` names an unknown backend, or when a listed backend cannot
/// start (wgpu without a Vulkan, Metal or DX12 adapter): a silent skip would hide a broken
/// backend. Narrow the list on purpose to run without one.
pub fn devices() -> Vec<TestDevice> {
    static DEVICES: OnceLock<Vec<TestDevice>> = OnceLock::new();
    DEVICES
        .get_or_init(|| {
            let wanted = std::env::var("ATTN_TEST_DEVICES").unwrap_or_default();
            let names: Vec<&'static str> = if wanted.trim().is_empty() {
                ALL_BACKENDS.to_vec()
            } else {
                wanted
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(|n| {
                        ALL_BACKENDS.iter().copied().find(|b| *b == n).unwrap_or_else(|| {
                            panic!("ATTN_TEST_DEVICES names `{n}`; known backends: {ALL_BACKENDS:?}")
                        })
                    })
                    .collect()
            };
            names
                .into_iter()
                .map(|name| {
                    let device = device_for(name).expect("name comes from ALL_BACKENDS");
                    probe(name, &device);
                    TestDevice { name, device }
                })
                .collect()
        })
        .clone()
}

/// Runs one tiny op on `device` so that a backend that cannot start fails loudly, once.
fn probe(name: &str, device: &Device) {
    let started = std::panic::catch_unwind(|| {
        let t = Tensor::<1>::from_floats([1.0, 2.0], device);
        t.sum().into_scalar::<f32>()
    });
    match started {
        Ok(sum) if (sum - 3.0).abs() < 1e-6 => {}
        Ok(sum) => panic!("backend `{name}` started but computed 1 + 2 = {sum}"),
        Err(_) => panic!(
            "backend `{name}` is compiled in but cannot start on this machine \
             (for wgpu: install a Vulkan driver, e.g. `apt-get install mesa-vulkan-drivers libvulkan1`), \
             or narrow the list on purpose with ATTN_TEST_DEVICES=flex,ndarray"
        ),
    }
}

/// Runs `body` once per test device, naming the backend if the body panics.
pub fn for_each_device(mut body: impl FnMut(&TestDevice)) {
    for d in devices() {
        eprintln!("-- on {}", d.name);
        body(&d);
    }
}

/// The largest absolute difference between two slices and where it is (NaN counts as
/// infinite).
///
/// # Panics
///
/// Panics when the lengths differ.
pub fn max_abs_diff(actual: &[f32], expected: &[f32]) -> (f32, usize) {
    assert_eq!(actual.len(), expected.len(), "lengths differ");
    let mut closeness = Closeness::default();
    closeness.values(actual, expected);
    let index = closeness.worst().map_or(0, |w| w.index);
    (closeness.max_abs_err(), index)
}

/// Whether every element satisfies `|a - e| <= atol + rtol * |e|` (NaN never does) and the
/// lengths agree.
pub fn all_close(actual: &[f32], expected: &[f32], atol: f32, rtol: f32) -> bool {
    Closeness::new(Tolerance::new(atol, rtol))
        .values(actual, expected)
        .is_within()
}

/// Panics with `what` and the largest difference unless `closeness` passed.
#[track_caller]
fn assert_within(closeness: &Closeness, what: &str) {
    assert!(closeness.is_within(), "{what}: {closeness}");
}

/// Asserts two slices agree within `atol + rtol * |expected|`, printing the largest difference.
#[track_caller]
pub fn assert_close_slices(actual: &[f32], expected: &[f32], atol: f32, rtol: f32, what: &str) {
    assert_within(
        Closeness::new(Tolerance::new(atol, rtol)).values(actual, expected),
        what,
    );
}

/// Asserts a tensor equals `expected` (shape and values) within the given tolerance.
#[track_caller]
pub fn assert_close<const D: usize>(
    actual: Tensor<D>,
    expected: &RefTensor,
    atol: f32,
    rtol: f32,
    what: &str,
) {
    assert_within(
        Closeness::new(Tolerance::new(atol, rtol)).tensor(actual, expected),
        what,
    );
}

/// Asserts two tensors agree (shape and values) within the given tolerance.
#[track_caller]
pub fn assert_tensors_close<const D: usize>(
    actual: Tensor<D>,
    expected: Tensor<D>,
    atol: f32,
    rtol: f32,
    what: &str,
) {
    assert_within(
        Closeness::new(Tolerance::new(atol, rtol)).tensors(actual, expected),
        what,
    );
}

/// Reads a float tensor back as a flat `Vec<f32>`.
pub fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("float tensor converts to f32")
}

/// The folder that holds the reference files copied into the repository.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// Parses one reference file from [`data_dir`] with the layout `T`.
///
/// # Panics
///
/// Panics with the path and what is wrong when the file is missing or malformed.
pub fn load_reference<T: DeserializeOwned>(file: &str) -> T {
    attn_reference::read(&data_dir().join(file)).unwrap_or_else(|e| panic!("{e}"))
}

/// Reads one of the known reference files from [`data_dir`]:
/// `let sdpa: SdpaFile = reference_file();`.
///
/// # Panics
///
/// Panics with the path and what is wrong when the file is missing or malformed.
pub fn reference_file<F: ReferenceFile>() -> F {
    F::read_from(&data_dir()).unwrap_or_else(|e| panic!("{e}"))
}

/// A seeded generator for property tests: ChaCha8 from the `rand` family, the same numbers on
/// every platform, with helpers that make random tensors.
#[derive(Clone, Debug)]
pub struct SeededRng(ChaCha8Rng);

impl SeededRng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.random()
    }

    /// A uniform integer in `lo..=hi`.
    ///
    /// # Panics
    ///
    /// Panics when `lo > hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        self.0.random_range(lo..=hi)
    }

    /// A uniform float in `[-1, 1)`.
    pub fn unit(&mut self) -> f32 {
        self.0.random_range(-1.0..1.0)
    }

    /// A coin that comes up true with probability `p`.
    ///
    /// # Panics
    ///
    /// Panics when `p` is outside `[0, 1]`.
    pub fn bernoulli(&mut self, p: f64) -> bool {
        self.0.random_bool(p)
    }

    /// `n` uniform values in `[-1, 1)`.
    pub fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.unit()).collect()
    }

    /// A tensor of uniform values in `[-1, 1)` on `device`.
    pub fn tensor<const D: usize>(&mut self, shape: [usize; D], device: &Device) -> Tensor<D> {
        let data = self.values(shape.iter().product());
        Tensor::from_data(TensorData::new(data, shape.to_vec()), device)
    }

    /// A boolean tensor with each element true with probability `p`.
    pub fn bool_tensor<const D: usize>(
        &mut self,
        shape: [usize; D],
        p: f64,
        device: &Device,
    ) -> Tensor<D, Bool> {
        let n = shape.iter().product();
        let data: Vec<bool> = (0..n).map(|_| self.bernoulli(p)).collect();
        Tensor::from_data(TensorData::new(data, shape.to_vec()), device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_fixes_the_numbers_and_two_seeds_differ() {
        let draw = |seed| {
            let mut rng = SeededRng::new(seed);
            (0..8).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn draws_stay_in_their_ranges_and_reach_both_ends() {
        let mut rng = SeededRng::new(3);
        let ints: Vec<usize> = (0..400).map(|_| rng.range(2, 5)).collect();
        assert!(ints.iter().all(|i| (2..=5).contains(i)));
        assert!(ints.contains(&2) && ints.contains(&5));
        let floats = rng.values(1000);
        assert!(floats.iter().all(|x| (-1.0..1.0).contains(x)));
        assert!(floats.iter().any(|&x| x < -0.9) && floats.iter().any(|&x| x > 0.9));
        let heads = (0..1000).filter(|_| rng.bernoulli(0.3)).count();
        assert!((200..400).contains(&heads), "{heads} of 1000 at p = 0.3");
        assert!(!(0..100).any(|_| rng.bernoulli(0.0)));
    }

    #[test]
    fn reference_tensors_build_on_every_device() {
        let t: RefTensor = serde_json::from_str(r#"{"shape": [2, 2], "data": [1, 0, true, 3]}"#)
            .expect("valid tensor");
        for_each_device(|d| {
            assert_eq!(to_vec(t.tensor::<2>(&d.device)), [1.0, 0.0, 1.0, 3.0]);
            let mask = t.bool_tensor::<2>(&d.device).into_data();
            assert_eq!(
                mask.try_into_vec_as::<bool>().expect("bools"),
                [true, false, true, true]
            );
            let ids = t.int_tensor::<2>(&d.device).into_data();
            assert_eq!(ids.try_into_vec_as::<i64>().expect("ints"), [1, 0, 1, 3]);
            let err = t.try_tensor::<3>(&d.device).expect_err("rank 2");
            assert_eq!(
                err.to_string(),
                "expected a rank-3 tensor, got shape [2, 2]"
            );
            let half = RefTensor::new(vec![2], vec![1.0, 0.5]).expect("fills its shape");
            let err = half
                .try_int_tensor::<1>(&d.device)
                .expect_err("0.5 is no id");
            assert_eq!(
                err.to_string(),
                "value 0.5 at flat index 1 is not an integer"
            );
        });
    }

    #[test]
    fn a_tensor_of_another_shape_is_not_close() {
        let expected = RefTensor::new(vec![2, 3], vec![0.0; 6]).expect("fills its shape");
        for_each_device(|d| {
            let mut c = Closeness::default();
            c.tensor(Tensor::<2>::zeros([3, 2], &d.device), &expected);
            assert!(!c.is_within());
            assert_eq!(c.to_string(), "shape [3, 2], expected [2, 3]");
            let mut c = Closeness::default();
            c.tensor(Tensor::<2>::zeros([2, 3], &d.device), &expected);
            assert!(c.is_within(), "{c}");
        });
    }

    #[test]
    #[should_panic(expected = "spoiled: largest difference 1e-3 at flat index 2")]
    fn assertions_name_the_largest_difference() {
        assert_close_slices(&[0.0, 0.0, 1e-3], &[0.0; 3], ATOL, RTOL, "spoiled");
    }

    #[test]
    fn every_known_reference_file_reads_from_the_data_folder() {
        let sdpa: SdpaFile = reference_file();
        assert_eq!(sdpa.cases.len(), 8);
        let mha: MhaFile = reference_file();
        assert!(mha.cases.iter().any(MhaCase::is_self_attention));
        let encoder: EncoderLayerFile = reference_file();
        assert!(
            encoder
                .cases
                .iter()
                .all(|c| c.self_attn.d_context() == Some(c.d_model))
        );
        let positional: PositionalFile = reference_file();
        assert!(positional.sinusoidal.is_some() && positional.rope.is_some());
    }
}
