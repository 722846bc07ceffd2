//! Checks the implementation against reference vectors: JSON files of the form
//! `{"cases": [{"name": .., "<tensor>": {"shape": [..], "data": [..]}, ..}]}` made by an
//! independent implementation (PyTorch for the files shipped in `crates/attn-testing/data`).
//!
//! Every case found is run on every device given and, for attention, every strategy; each run
//! yields one [`CaseReport`]. Shapes and values come from the files, so files made with other
//! shapes or seeds are checked the same way.

mod encoder_layer;
mod mha;
mod positional;
mod sdpa;

use std::path::Path;

use anyhow::{Context, Result};
use attn_core::Strategy;
use burn::tensor::{Bool, Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

/// Absolute tolerance against float32 references.
pub const ATOL: f32 = 1e-5;
/// Relative tolerance against float32 references.
pub const RTOL: f32 = 1e-4;

/// Every attention strategy, each checked on its own.
pub const STRATEGIES: [Strategy; 5] = [
    Strategy::Explicit,
    Strategy::Chunked { block: 64 },
    Strategy::Fused,
    Strategy::Native,
    Strategy::Auto,
];

/// The outcome of one case on one backend with one strategy.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CaseReport {
    /// The file the case came from.
    pub file: String,
    /// The case's name.
    pub case: String,
    /// The backend it ran on.
    pub backend: String,
    /// The computation path (an attention strategy, or `module` for layers).
    pub strategy: String,
    /// The largest absolute difference over every compared tensor.
    pub max_abs_err: f32,
    /// Whether every compared value was within `ATOL + RTOL · |expected|`.
    pub pass: bool,
}

/// A tensor as stored in the files: shape and row-major float32 data.
#[derive(Clone, Debug, Deserialize)]
pub struct RefTensor {
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Values, row-major (booleans in mask tensors read as 1 and 0).
    #[serde(deserialize_with = "numbers_or_booleans")]
    pub data: Vec<f32>,
}

impl RefTensor {
    /// The tensor on `device`, checking its rank.
    pub fn tensor<const D: usize>(&self, device: &Device) -> Result<Tensor<D>> {
        self.check(D)?;
        Ok(Tensor::from_data(
            TensorData::new(self.data.clone(), self.shape.clone()),
            device,
        ))
    }

    /// The tensor as booleans (`value != 0`) on `device`.
    pub fn bool_tensor<const D: usize>(&self, device: &Device) -> Result<Tensor<D, Bool>> {
        self.check(D)?;
        let data: Vec<bool> = self.data.iter().map(|&x| x != 0.0).collect();
        Ok(Tensor::from_data(
            TensorData::new(data, self.shape.clone()),
            device,
        ))
    }

    fn check(&self, rank: usize) -> Result<()> {
        anyhow::ensure!(
            self.shape.len() == rank,
            "expected a rank-{rank} tensor, got shape {:?}",
            self.shape
        );
        let n: usize = self.shape.iter().product();
        anyhow::ensure!(
            n == self.data.len(),
            "shape {:?} needs {n} values, the file has {}",
            self.shape,
            self.data.len()
        );
        Ok(())
    }
}

/// Running comparison of computed tensors with expected ones.
#[derive(Clone, Debug)]
pub struct Comparison {
    max_abs_err: f32,
    pass: bool,
    atol: f32,
    rtol: f32,
}

impl Default for Comparison {
    /// Within [`ATOL`] + [`RTOL`] · |expected|.
    fn default() -> Self {
        Self::within(ATOL, RTOL)
    }
}

impl Comparison {
    /// A comparison that passes values within `atol + rtol · |expected|`.
    pub fn within(atol: f32, rtol: f32) -> Self {
        Self {
            max_abs_err: 0.0,
            pass: true,
            atol,
            rtol,
        }
    }

    /// Compares `actual` with `expected`; a shape mismatch fails with an infinite error.
    pub fn add<const D: usize>(&mut self, actual: Tensor<D>, expected: &RefTensor) -> Result<()> {
        if actual.dims().as_slice() != expected.shape.as_slice() {
            self.max_abs_err = f32::INFINITY;
            self.pass = false;
            return Ok(());
        }
        let actual = actual
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .map_err(|e| anyhow::anyhow!("reading a result back: {e:?}"))?;
        for (a, e) in actual.iter().zip(&expected.data) {
            let d = (a - e).abs();
            let d = if d.is_nan() { f32::INFINITY } else { d };
            self.max_abs_err = self.max_abs_err.max(d);
            self.pass &= d <= self.atol + self.rtol * e.abs();
        }
        Ok(())
    }

    /// The report line for this comparison.
    pub fn report(self, file: &str, case: &str, backend: &str, strategy: &str) -> CaseReport {
        CaseReport {
            file: file.to_string(),
            case: case.to_string(),
            backend: backend.to_string(),
            strategy: strategy.to_string(),
            max_abs_err: self.max_abs_err,
            pass: self.pass,
        }
    }
}

/// The reference files this checker understands, with the function that runs each.
type Checker = fn(&str, &[(String, Device)]) -> Result<Vec<CaseReport>>;
const FILES: [(&str, Checker); 4] = [
    ("sdpa.json", sdpa::check),
    ("positional.json", positional::check),
    ("mha.json", mha::check),
    ("encoder_layer.json", encoder_layer::check),
];

/// Runs every known reference file present in `dir` on every device.
///
/// # Errors
/// When `dir` holds none of the known files, or a file cannot be read or parsed.
pub fn check_dir(dir: &Path, devices: &[(String, Device)]) -> Result<Vec<CaseReport>> {
    let mut reports = Vec::new();
    let mut found = 0;
    for (name, check) in FILES {
        let path = dir.join(name);
        if !path.exists() {
            continue;
        }
        found += 1;
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        reports
            .extend(check(&text, devices).with_context(|| format!("checking {}", path.display()))?);
    }
    anyhow::ensure!(
        found > 0,
        "{} holds none of the reference files {:?}",
        dir.display(),
        FILES.map(|(n, _)| n)
    );
    Ok(reports)
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

/// A file whose cases all have one layout: `{"cases": [..]}`.
#[derive(Deserialize)]
struct Cases<T> {
    cases: Vec<T>,
}

/// A boolean reference tensor stored as JSON booleans (`true` = masked).
#[derive(Clone, Debug, Deserialize)]
struct BoolRef {
    shape: Vec<usize>,
    data: Vec<bool>,
}

impl BoolRef {
    fn tensor(&self, device: &Device) -> Tensor<2, Bool> {
        Tensor::from_data(
            TensorData::new(self.data.clone(), self.shape.clone()),
            device,
        )
    }
}

/// `nn.MultiheadAttention`'s four projections as the files store them, PyTorch layout.
#[derive(Deserialize)]
struct AttentionWeights {
    w_q: RefTensor,
    b_q: RefTensor,
    w_k: RefTensor,
    b_k: RefTensor,
    w_v: RefTensor,
    b_v: RefTensor,
    w_o: RefTensor,
    b_o: RefTensor,
}

impl AttentionWeights {
    /// The projections as the model's PyTorch loader takes them, on `device`.
    fn torch(&self, device: &Device) -> Result<attn_model::TorchMultiheadAttention> {
        Ok(attn_model::TorchMultiheadAttention {
            q: torch_linear(&self.w_q, &self.b_q, device)?,
            k: torch_linear(&self.w_k, &self.b_k, device)?,
            v: torch_linear(&self.w_v, &self.b_v, device)?,
            out_proj: torch_linear(&self.w_o, &self.b_o, device)?,
        })
    }
}

/// PyTorch's `Linear` weight `[out, in]` and bias `[out]` as the model's loader takes them.
fn torch_linear(
    weight: &RefTensor,
    bias: &RefTensor,
    device: &Device,
) -> Result<attn_model::TorchLinear> {
    Ok(attn_model::TorchLinear {
        weight: weight.tensor(device)?,
        bias: Some(bias.tensor(device)?),
    })
}
