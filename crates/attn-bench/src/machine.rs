//! The machine a figure comes from: the CPU model, the x86 instruction sets this process can
//! use that the kernels here pick between, the worker threads and the L2 cache per core.
//! Every JSON line carries them, so a speed ratio always names its processor.

use std::sync::OnceLock;

/// The CPU model of lines written before lines named their machine.
pub const UNKNOWN_MACHINE: &str = "unknown machine";

/// The CPU model where `/proc/cpuinfo` has none (another system, another architecture).
pub const UNKNOWN_CPU: &str = "unknown";

/// The instruction sets recorded, by `is_x86_feature_detected!` name: the AVX2 + FMA and
/// AVX-512 (`x86-v4`: F, CD, BW, DQ, VL) levels the native kernels and flex's matrix products
/// choose between, and the bf16/fp16 and AMX extensions PyTorch's CPU kernels use.
pub const X86_FEATURES: &[&str] = &[
    "avx2",
    "fma",
    "avx512f",
    "avx512cd",
    "avx512bw",
    "avx512dq",
    "avx512vl",
    "avx512bf16",
    "avx512fp16",
    "amx-tile",
    "amx-bf16",
];

/// Where this process runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// `model name` of `/proc/cpuinfo`, or [`UNKNOWN_CPU`].
    pub cpu: String,
    /// The members of [`X86_FEATURES`] this process can use; empty off x86.
    pub cpu_features: Vec<String>,
    /// Worker threads of the CPU backends.
    pub threads: usize,
    /// The L2 cache of one core in KiB, where the processor says (the native kernels' block
    /// sizes follow it: `attn_core::CpuCaches`).
    pub l2_kib: Option<usize>,
}

impl Machine {
    /// This machine, detected once per process.
    pub fn current() -> &'static Machine {
        static CURRENT: OnceLock<Machine> = OnceLock::new();
        CURRENT.get_or_init(|| {
            let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            Machine {
                cpu: cpu_model(&cpuinfo).unwrap_or_else(|| UNKNOWN_CPU.to_string()),
                cpu_features: cpu_features(&cpuinfo),
                threads: threads(),
                l2_kib: attn_core::CpuCaches::detected().map(|c| c.l2 >> 10),
            }
        })
    }
}

/// Bytes a [`ReadBuffer`] holds and each of its passes reads: 256 MiB, far past any cache, as
/// STREAM asks (four times the last level at least).
pub const BANDWIDTH_BYTES: usize = 256 << 20;

/// [`BANDWIDTH_BYTES`] of `f32` to read: a STREAM-like read, the sum of every value, split
/// across the CPU backends' worker threads (rayon's, [`Machine::threads`]).
pub struct ReadBuffer {
    values: Vec<f32>,
}

impl ReadBuffer {
    /// The buffer, read once to fault its pages in.
    pub fn new() -> Self {
        let buffer = Self {
            values: vec![1.0f32; BANDWIDTH_BYTES / size_of::<f32>()],
        };
        buffer.pass();
        buffer
    }

    /// One timed read of the whole buffer, in GB/s (10⁹ bytes a second).
    pub fn pass(&self) -> f64 {
        use rayon::prelude::*;
        let chunk = self
            .values
            .len()
            .div_ceil(rayon::current_num_threads().max(1) * 8);
        let started = std::time::Instant::now();
        let sum: f32 = self
            .values
            .par_chunks(chunk)
            .map(|c| {
                // Eight running sums: the additions of one do not wait on another's.
                let mut acc = [0f32; 8];
                for block in c.chunks_exact(8) {
                    for (a, v) in acc.iter_mut().zip(block) {
                        *a += v;
                    }
                }
                acc.iter().sum::<f32>()
            })
            .sum();
        std::hint::black_box(sum);
        BANDWIDTH_BYTES as f64 / started.elapsed().as_secs_f64() / 1e9
    }
}

impl Default for ReadBuffer {
    fn default() -> Self {
        Self::new()
    }
}

/// The first `model name` of a `/proc/cpuinfo` text.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.trim() == "model name")
        .map(|(_, value)| value.trim().to_string())
        .filter(|model| !model.is_empty())
}

/// The members of [`X86_FEATURES`] this process can use.
///
/// AMX has no stable run-time detection in Rust; it is read from the `flags` of `/proc/cpuinfo`
/// (`amx_tile`, `amx_bf16`), which the kernel lists only where it supports the tile state.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
pub fn cpu_features(cpuinfo: &str) -> Vec<String> {
    let flags: Vec<&str> = cpuinfo
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| key.trim() == "flags")
        .map(|(_, value)| value.split_whitespace().collect())
        .unwrap_or_default();
    let has = |name: &str| match name {
        "avx2" => is_x86_feature_detected!("avx2"),
        "fma" => is_x86_feature_detected!("fma"),
        "avx512f" => is_x86_feature_detected!("avx512f"),
        "avx512cd" => is_x86_feature_detected!("avx512cd"),
        "avx512bw" => is_x86_feature_detected!("avx512bw"),
        "avx512dq" => is_x86_feature_detected!("avx512dq"),
        "avx512vl" => is_x86_feature_detected!("avx512vl"),
        "avx512bf16" => is_x86_feature_detected!("avx512bf16"),
        "avx512fp16" => is_x86_feature_detected!("avx512fp16"),
        amx => flags.contains(&amx.replace('-', "_").as_str()),
    };
    X86_FEATURES
        .iter()
        .filter(|name| has(name))
        .map(|name| name.to_string())
        .collect()
}

/// No x86 instruction sets off x86.
#[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
pub fn cpu_features(_cpuinfo: &str) -> Vec<String> {
    Vec::new()
}

/// Worker threads of the CPU backends: rayon's `RAYON_NUM_THREADS`, else one per core.
pub fn threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// This process's resident memory now (`VmRSS` of `/proc/self/status`), in bytes.
///
/// # Errors
/// Where `/proc/self/status` cannot be read or has no such line (not Linux).
pub fn resident_bytes() -> anyhow::Result<u64> {
    status_bytes(&self_status()?, "VmRSS:")
}

/// This process's resident-memory high-water mark (`VmHWM`), in bytes.
///
/// # Errors
/// As [`resident_bytes`].
pub fn peak_resident_bytes() -> anyhow::Result<u64> {
    status_bytes(&self_status()?, "VmHWM:")
}

fn self_status() -> anyhow::Result<String> {
    use anyhow::Context;
    std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")
}

/// The line of a `/proc/<pid>/status` text that starts with `key` (`VmHWM:`, in kB), in bytes.
///
/// # Errors
/// When there is no such line, or its value is not a number of kB.
pub fn status_bytes(status: &str, key: &str) -> anyhow::Result<u64> {
    use anyhow::Context;
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .with_context(|| format!("/proc/self/status has no {key} line"))?;
    let kib: u64 = line
        .trim_start_matches(key)
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .with_context(|| format!("cannot read `{line}`"))?;
    Ok(kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\n\
        model name\t: AMD EPYC 9B45 128-Core Processor\nflags\t\t: fpu avx2 amx_tile\n\n\
        processor\t: 1\nmodel name\t: AMD EPYC 9B45 128-Core Processor\n";

    #[test]
    fn the_model_is_the_first_model_name() {
        assert_eq!(
            cpu_model(CPUINFO).as_deref(),
            Some("AMD EPYC 9B45 128-Core Processor")
        );
        assert_eq!(cpu_model("processor\t: 0\nCPU part\t: 0xd0c\n"), None);
        assert_eq!(cpu_model(""), None);
    }

    #[test]
    fn features_are_known_names_in_table_order() {
        let features = cpu_features(CPUINFO);
        let positions: Vec<usize> = features
            .iter()
            .map(|f| {
                X86_FEATURES
                    .iter()
                    .position(|known| known == f)
                    .unwrap_or_else(|| panic!("`{f}` is not in X86_FEATURES"))
            })
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{features:?}");
        // AMX comes from the kernel's flags.
        let amx = |cpuinfo| cpu_features(cpuinfo).contains(&"amx-tile".to_string());
        assert!(!amx("flags\t: avx2"));
        assert_eq!(
            amx(CPUINFO),
            cfg!(any(target_arch = "x86", target_arch = "x86_64"))
        );
    }

    #[test]
    fn this_machine_has_a_model_and_threads() {
        let machine = Machine::current();
        assert!(!machine.cpu.is_empty());
        assert!(machine.threads >= 1);
    }
}
