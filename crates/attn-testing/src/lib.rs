//! Test support shared by the workspace: the compiled-in devices every test body runs on,
//! the PyTorch reference vectors, and a closeness check that reports the largest difference.
//!
//! This crate is a dev-dependency only. It turns on every burn backend so that one test
//! binary covers flex, ndarray and wgpu; `ATTN_TEST_DEVICES=flex,ndarray` narrows the list.

use std::path::PathBuf;
use std::sync::OnceLock;

use burn::tensor::{Bool, Device, Tensor, TensorData};
use serde::Deserialize;

/// Absolute tolerance used against the float32 reference vectors.
pub const ATOL: f32 = 1e-5;
/// Relative tolerance used against the float32 reference vectors.
pub const RTOL: f32 = 1e-4;

/// One backend compiled into the test binary.
#[derive(Clone, Debug)]
pub struct TestDevice {
    /// Short backend name: `flex`, `ndarray` or `wgpu`.
    pub name: &'static str,
    /// The device itself, without autodiff.
    pub device: Device,
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

/// The largest absolute difference between two slices and where it is.
pub fn max_abs_diff(actual: &[f32], expected: &[f32]) -> (f32, usize) {
    assert_eq!(actual.len(), expected.len(), "lengths differ");
    actual
        .iter()
        .zip(expected)
        .enumerate()
        .map(|(i, (a, e))| {
            let d = (a - e).abs();
            (if d.is_nan() { f32::INFINITY } else { d }, i)
        })
        .fold((0.0, 0), |best, x| if x.0 > best.0 { x } else { best })
}

/// Whether every element satisfies `|a - e| <= atol + rtol * |e|` (NaN never does).
pub fn all_close(actual: &[f32], expected: &[f32], atol: f32, rtol: f32) -> bool {
    actual.len() == expected.len()
        && actual
            .iter()
            .zip(expected)
            .all(|(a, e)| (a - e).abs() <= atol + rtol * e.abs())
}

/// Asserts two slices agree within `atol + rtol * |expected|`, printing the largest difference.
#[track_caller]
pub fn assert_close_slices(actual: &[f32], expected: &[f32], atol: f32, rtol: f32, what: &str) {
    assert_eq!(
        actual.len(),
        expected.len(),
        "{what}: {} values, expected {}",
        actual.len(),
        expected.len()
    );
    if !all_close(actual, expected, atol, rtol) {
        let (d, i) = max_abs_diff(actual, expected);
        panic!(
            "{what}: largest difference {d:e} at flat index {i} (got {}, expected {}); \
             tolerance {atol:e} + {rtol:e} * |expected|",
            actual[i], expected[i]
        );
    }
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
    assert_eq!(
        actual.dims().to_vec(),
        expected.shape,
        "{what}: shape {:?}, expected {:?}",
        actual.dims(),
        expected.shape
    );
    assert_close_slices(&to_vec(actual), &expected.data, atol, rtol, what);
}

/// Asserts two tensors agree within the given tolerance.
#[track_caller]
pub fn assert_tensors_close<const D: usize>(
    actual: Tensor<D>,
    expected: Tensor<D>,
    atol: f32,
    rtol: f32,
    what: &str,
) {
    assert_eq!(actual.dims(), expected.dims(), "{what}: shapes differ");
    assert_close_slices(&to_vec(actual), &to_vec(expected), atol, rtol, what);
}

/// Reads a float tensor back as a flat `Vec<f32>`.
pub fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("float tensor converts to f32")
}

/// A tensor as the reference files store it: shape and row-major float32 data.
#[derive(Clone, Debug, Deserialize)]
pub struct RefTensor {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Values in row-major order (booleans in mask tensors read as 1 and 0).
    #[serde(deserialize_with = "numbers_or_booleans")]
    pub data: Vec<f32>,
}

impl RefTensor {
    /// The tensor on `device`.
    ///
    /// # Panics
    ///
    /// Panics when the rank is not `D` or the data does not fill the shape.
    pub fn tensor<const D: usize>(&self, device: &Device) -> Tensor<D> {
        self.check_rank(D);
        Tensor::from_data(
            TensorData::new(self.data.clone(), self.shape.clone()),
            device,
        )
    }

    /// The tensor as booleans (`value != 0`) on `device`.
    pub fn bool_tensor<const D: usize>(&self, device: &Device) -> Tensor<D, Bool> {
        self.check_rank(D);
        let data: Vec<bool> = self.data.iter().map(|&x| x != 0.0).collect();
        Tensor::from_data(TensorData::new(data, self.shape.clone()), device)
    }

    fn check_rank(&self, rank: usize) {
        assert_eq!(
            self.shape.len(),
            rank,
            "reference tensor rank {:?}",
            self.shape
        );
        assert_eq!(
            self.shape.iter().product::<usize>(),
            self.data.len(),
            "reference tensor shape {:?} holds {} values",
            self.shape,
            self.data.len()
        );
    }
}

/// The folder that holds the reference files copied into the repository.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data")
}

/// Parses one reference file from [`data_dir`].
///
/// # Panics
///
/// Panics with the path when the file is missing or malformed.
pub fn load_reference<T: for<'de> Deserialize<'de>>(file: &str) -> T {
    let path = data_dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("cannot parse {}: {e}", path.display()))
}

/// A small seeded generator (SplitMix64) for property tests: no extra dependency, and the same
/// numbers on every platform.
#[derive(Clone, Debug)]
pub struct SeededRng(u64);

impl SeededRng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as usize
    }

    /// A uniform float in `[-1, 1)`.
    pub fn unit(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// A coin that comes up true with probability `p`.
    pub fn bernoulli(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// A tensor of uniform values in `[-1, 1)` on `device`.
    pub fn tensor<const D: usize>(&mut self, shape: [usize; D], device: &Device) -> Tensor<D> {
        let n = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|_| self.unit()).collect();
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

/// Reads a JSON array whose elements are numbers or booleans (masks) as `f32`.
fn numbers_or_booleans<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Value {
        Number(f32),
        Bool(bool),
    }
    let values = Vec::<Value>::deserialize(d)?;
    Ok(values
        .into_iter()
        .map(|v| match v {
            Value::Number(x) => x,
            Value::Bool(b) => f32::from(u8::from(b)),
        })
        .collect())
}
