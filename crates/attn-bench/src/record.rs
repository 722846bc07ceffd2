//! The JSON line: one object per case, printed by this program and by
//! `benches/peers/torch_sdpa.py`, read back by `report`.
//!
//! Lines written before lines named their machine have no `cpu` and `cpu_features`; they load
//! as [`UNKNOWN_MACHINE`] with no instruction sets.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::cases::{Case, Pass};
use crate::machine::{Machine, UNKNOWN_MACHINE};

/// One output line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `attn`, `burn` or `torch`.
    #[serde(rename = "impl")]
    pub implementation: String,
    /// The case within the implementation (`chunked`, `module_attention`, `sdpa`, ...).
    pub case: String,
    /// `forward` or `forward_backward`.
    pub pass: String,
    /// Backend (`flex`, `ndarray`, `wgpu`; `cpu` for PyTorch).
    pub device: String,
    /// `batch` of the inputs.
    pub batch: usize,
    /// `n_heads` of the inputs.
    pub n_heads: usize,
    /// `seq_len` of the inputs.
    pub seq_len: usize,
    /// `d_head` of the inputs.
    pub d_head: usize,
    /// Worker threads the backend may use.
    pub threads: usize,
    /// CPU model of the machine (`model name` of `/proc/cpuinfo`, `unknown` where there is none).
    #[serde(default = "unknown_machine")]
    pub cpu: String,
    /// x86 instruction sets the process could use, of [`crate::machine::X86_FEATURES`].
    #[serde(default)]
    pub cpu_features: Vec<String>,
    /// The L2 cache of one core in KiB, where known (lines from before it was recorded have
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_kib: Option<usize>,
    /// Timed runs after the warm-up.
    pub reps: usize,
    /// Median time of the timed runs.
    pub median_ms: Option<f64>,
    /// Shortest time of the timed runs.
    pub min_ms: Option<f64>,
    /// Matrix-product FLOPs per second at the median time, in units of 10⁹.
    pub gflops: Option<f64>,
    /// Peak resident memory of the whole process (`VmHWM`), in MiB, where measured.
    pub peak_rss_mib: Option<f64>,
    /// Resident memory high-water mark just before the case ran (binary, runtime, inputs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_rss_mib: Option<f64>,
    /// Why the case has no numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The native kernels' block sizes the line was measured with (`ATTN_NATIVE_TILING`, or
    /// `chosen`), on the lines of `attn-bench tiling`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiling: Option<String>,
    /// How the bfloat16 products of a bfloat16 folder's line ran
    /// (`attn_model::ops::bf16_products`): `amx-bf16`, `avx512bf16`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16_products: Option<String>,
}

fn unknown_machine() -> String {
    UNKNOWN_MACHINE.to_string()
}

impl Record {
    /// The line of a case on this machine, before it has numbers.
    pub fn new(case: &Case, pass: Pass, device: &str, seq_len: usize) -> Self {
        Self::named(
            case.implementation,
            case.name,
            pass,
            device,
            case.dims(seq_len),
        )
    }

    /// The line of a computation outside the catalogue (such as a model folder's), with its
    /// `[batch, n_heads, seq_len, d_head]`.
    pub fn named(
        implementation: &str,
        case: &str,
        pass: Pass,
        device: &str,
        [batch, n_heads, seq_len, d_head]: [usize; 4],
    ) -> Self {
        let machine = Machine::current();
        Record {
            implementation: implementation.to_string(),
            case: case.to_string(),
            pass: pass.name().to_string(),
            device: device.to_string(),
            batch,
            n_heads,
            seq_len,
            d_head,
            threads: machine.threads,
            cpu: machine.cpu.clone(),
            cpu_features: machine.cpu_features.clone(),
            l2_kib: machine.l2_kib,
            reps: 0,
            median_ms: None,
            min_ms: None,
            gflops: None,
            peak_rss_mib: None,
            baseline_rss_mib: None,
            error: None,
            tiling: None,
            bf16_products: None,
        }
    }

    /// The line with the times of its runs, in milliseconds, and the GFLOP/s of the median.
    pub fn with_times(self, case: &Case, pass: Pass, times_ms: &[f64]) -> Self {
        let mut record = self.with_times_only(times_ms);
        record.gflops = record
            .median_ms
            .zip(case.flops(pass, record.seq_len))
            .map(|(ms, flops)| flops / (ms * 1e6));
        record
    }

    /// The line with the times of its runs, in milliseconds, and no FLOP count.
    pub fn with_times_only(mut self, times_ms: &[f64]) -> Self {
        self.reps = times_ms.len();
        self.median_ms = median(times_ms);
        self.min_ms = times_ms.iter().copied().reduce(f64::min);
        self
    }

    /// `impl/case/pass`.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.implementation, self.case, self.pass)
    }

    /// The JSON line.
    ///
    /// # Errors
    /// Never in practice: every field serialises.
    pub fn to_json(&self) -> Result<String> {
        Ok(serde_json::to_string(self)?)
    }

    /// One line for a person: id, device, size, time, GFLOP/s, memory, error.
    pub fn to_text(&self) -> String {
        let id = self.id();
        let mut line = format!("{id:<40} {:<8} s={:<6}", self.device, self.seq_len);
        if let Some(ms) = self.median_ms {
            line += &format!(" {ms:>10.3} ms ({} runs)", self.reps);
        }
        if let Some(gflops) = self.gflops {
            line += &format!(" {gflops:>7.1} GFLOP/s");
        }
        if let Some(peak) = self.peak_rss_mib {
            line += &format!(" peak {peak:>8.1} MiB");
        }
        if let Some(products) = &self.bf16_products {
            line += &format!(" bf16 on {products}");
        }
        if let Some(error) = &self.error {
            line += &format!(" error: {error}");
        }
        line
    }
}

/// The median, the mean of the middle two for an even count; `None` for no values.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_no_values() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    /// A line of `benches/results/run5.jsonl`, written before lines named their machine.
    const OLD: &str = r#"{"impl":"attn","case":"explicit","pass":"forward","device":"flex","batch":1,"n_heads":8,"seq_len":128,"d_head":64,"threads":2,"reps":200,"median_ms":0.975494,"min_ms":0.936105,"gflops":34.39737404843085,"peak_rss_mib":null}"#;

    #[test]
    fn an_old_line_loads_as_an_unknown_machine() {
        let record: Record = serde_json::from_str(OLD).expect("old lines load");
        assert_eq!(record.cpu, UNKNOWN_MACHINE);
        assert!(record.cpu_features.is_empty());
        assert_eq!(record.id(), "attn/explicit/forward");
        assert_eq!(record.median_ms, Some(0.975494));
        assert_eq!(record.error, None);
    }

    #[test]
    fn a_new_line_names_its_machine_and_reads_back_the_same() {
        let (case, pass) = Case::by_id("attn/chunked/forward").expect("listed");
        let record = Record::new(&case, pass, "flex", 5).with_times(&case, pass, &[2.0, 1.0, 4.0]);
        let line = record.to_json().expect("serialises");
        let value: serde_json::Value = serde_json::from_str(&line).expect("is JSON");
        for field in [
            "impl",
            "case",
            "pass",
            "device",
            "batch",
            "n_heads",
            "seq_len",
            "d_head",
            "threads",
            "cpu",
            "cpu_features",
            "reps",
            "median_ms",
            "min_ms",
            "gflops",
            "peak_rss_mib",
        ] {
            assert!(value.get(field).is_some(), "no `{field}` in {line}");
        }
        assert_eq!(value["cpu"], Machine::current().cpu.as_str());
        let back: Record = serde_json::from_str(&line).expect("reads back");
        assert_eq!(back, record);
        assert_eq!(
            (back.reps, back.median_ms, back.min_ms),
            (3, Some(2.0), Some(1.0))
        );
        // 4 · 8 heads · 5² · 64 flops in 2 ms.
        assert_eq!(back.gflops, Some(51_200.0 / 2e6));
    }
}
