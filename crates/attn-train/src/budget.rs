//! What a run will hold in memory, estimated from its configuration before anything is built,
//! and refused when the machine does not have it.
//!
//! Every size comes from a flag or a file, so every product is formed in `u128` with
//! saturation: no setting, however large, overflows into a small number.
//!
//! ```text
//! parameters   P = layers · (4d² + 2d·d_ff)  (+ 4d² per decoder layer with cross-attention)
//!                + d · (vocabulary + classes + positions)
//!              held 5 times: weights, gradients, Adam's two moments, a checkpoint's copy
//! activations  batch · seq · layers · (16d + 4·d_ff) + batch · heads · seq² · layers · 2
//!                + batch · seq · classes · 3
//! evaluation   eval_sequences · seq · 3 ids, and one batch of them through the model
//! ```
//!
//! The estimate is of the order of what a run takes, not a bound on it: it is there to refuse
//! settings that cannot fit (a `--d-model` of 10⁸, `--eval-sequences` of 10⁹) with the numbers,
//! instead of an abort part-way through an allocation.

use crate::config::TrainConfig;
use crate::error::TrainError;
use crate::tasks::Architecture;
use attn_pos::PositionalScheme;

/// One part of a run's memory, and the settings it grows with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// What it holds.
    pub what: &'static str,
    /// Its bytes.
    pub bytes: u128,
    /// The settings that size it, as the flags that change them.
    pub settings: String,
}

/// The memory a run takes, part by part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Estimate {
    /// Parameters with their gradients and optimizer state; one batch's activations; the
    /// evaluation set.
    pub parts: Vec<Part>,
}

impl Estimate {
    /// All the parts together.
    pub fn total(&self) -> u128 {
        self.parts
            .iter()
            .fold(0u128, |sum, part| sum.saturating_add(part.bytes))
    }

    /// The largest part.
    pub fn largest(&self) -> &Part {
        self.parts
            .iter()
            .max_by_key(|part| part.bytes)
            .expect("an estimate has parts")
    }
}

/// `a · b · ...` in `u128`, saturating.
fn product(factors: &[usize]) -> u128 {
    factors
        .iter()
        .fold(1u128, |p, &f| p.saturating_mul(f as u128))
}

/// Sums of products, saturating.
fn sum(terms: &[u128]) -> u128 {
    terms.iter().fold(0u128, |s, &t| s.saturating_add(t))
}

const FLOAT: usize = 4;

/// The memory `config` takes when it trains.
pub fn estimate(config: &TrainConfig) -> Estimate {
    let m = &config.model;
    let t = &config.task;
    let (d, f, heads) = (m.d_model, m.d_ff, m.n_heads);
    let seq = t.model_seq_len().max(t.seq_len);
    let classes = t.n_classes();
    let vocab = t.model_vocab().saturating_add(t.source_vocab());
    let (encoder_layers, decoder_layers, cross) = match t.kind.architecture() {
        Architecture::Encoder => (m.n_layers, 0, false),
        Architecture::Decoder => (0, m.n_layers, false),
        Architecture::EncoderDecoder => (m.n_layers, m.n_layers, true),
    };
    let layers = encoder_layers.saturating_add(decoder_layers);
    let positions = match m.pos {
        PositionalScheme::Learned { max_len } => max_len,
        _ => 0,
    };
    let per_layer = sum(&[product(&[4, d, d]), product(&[2, d, f])]);
    let parameters = sum(&[
        per_layer.saturating_mul(layers as u128),
        if cross {
            product(&[4, d, d, decoder_layers])
        } else {
            0
        },
        product(&[d, vocab]),
        product(&[d, classes]),
        product(&[d, positions]),
    ]);
    let activations = sum(&[
        product(&[config.batch_size, seq, layers])
            .saturating_mul(sum(&[product(&[16, d]), product(&[4, f])])),
        product(&[config.batch_size, heads, seq, seq, layers, 2]),
        product(&[config.batch_size, seq, classes, 3]),
    ]);
    let evaluation = sum(&[
        product(&[config.eval_sequences, seq, 3, 8]),
        product(&[config.batch_size, seq, classes]).saturating_mul(FLOAT as u128),
    ]);
    Estimate {
        parts: vec![
            Part {
                what: "parameters, their gradients, Adam's moments and a checkpoint's copy",
                bytes: parameters.saturating_mul(5 * FLOAT as u128),
                settings: format!(
                    "--d-model {d}, --n-layers {}, --d-ff {f}, a vocabulary of {vocab}, {classes} \
                     classes{}",
                    m.n_layers,
                    if positions > 0 {
                        format!(", a learned table of {positions} positions")
                    } else {
                        String::new()
                    }
                ),
            },
            Part {
                what: "one batch's activations",
                bytes: activations.saturating_mul(FLOAT as u128),
                settings: format!(
                    "--batch-size {}, sequences of {seq}, --n-layers {}, --n-heads {heads}, \
                     --d-model {d}, --d-ff {f}, {classes} classes",
                    config.batch_size, m.n_layers
                ),
            },
            Part {
                what: "the held-out set",
                bytes: evaluation,
                settings: format!("--eval-sequences {}", config.eval_sequences),
            },
        ],
    }
}

/// Bytes as a person reads them: `1.5 GB`, `3.2 TB`, `2.1e21 bytes`.
pub fn human(bytes: u128) -> String {
    const UNITS: [&str; 5] = ["bytes", "kB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    for unit in UNITS {
        if value < 1000.0 {
            return if unit == "bytes" {
                format!("{bytes} bytes")
            } else {
                format!("{value:.1} {unit}")
            };
        }
        value /= 1000.0;
    }
    format!("{:.1e} bytes", bytes as f64)
}

/// The memory available to a new allocation, in bytes: the least of the system's
/// `MemAvailable` (`/proc/meminfo`), the room the process's own limits leave it
/// (`RLIMIT_AS` against its address space, `RLIMIT_DATA` against its data, from
/// `/proc/self/limits` and `/proc/self/status`), and the room its cgroup leaves
/// (`memory.max` less `memory.current`); `None` where none of them is known.
pub fn available() -> Option<u64> {
    let read = |path: &str| {
        crate::files::read_bounded(std::path::Path::new(path), 1 << 20)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
    };
    let meminfo = read("/proc/meminfo");
    let limits = read("/proc/self/limits");
    let status = read("/proc/self/status");
    let cgroup = read("/proc/self/cgroup")
        .and_then(|text| cgroup_folder(&text))
        .map(|folder| {
            (
                read(&format!("{folder}/memory.max")),
                read(&format!("{folder}/memory.current")),
            )
        });
    let (max, current) = cgroup.unwrap_or((None, None));
    least_room(
        meminfo.as_deref(),
        limits.as_deref(),
        status.as_deref(),
        max.as_deref(),
        current.as_deref(),
    )
}

/// The least of the rooms the texts of [`available`]'s files give.
fn least_room(
    meminfo: Option<&str>,
    limits: Option<&str>,
    status: Option<&str>,
    cgroup_max: Option<&str>,
    cgroup_current: Option<&str>,
) -> Option<u64> {
    let system = meminfo.and_then(|text| kib_field(text, "MemAvailable:"));
    let room = |limit: &str, used: &str| {
        let limit = limits.and_then(|text| soft_limit(text, limit))?;
        let used = status.and_then(|text| kib_field(text, used)).unwrap_or(0);
        Some(limit.saturating_sub(used))
    };
    let address_space = room("Max address space", "VmSize:");
    let data = room("Max data size", "VmData:");
    let cgroup = cgroup_max
        .and_then(|max| max.trim().parse::<u64>().ok())
        .map(|max| {
            let current = cgroup_current
                .and_then(|c| c.trim().parse::<u64>().ok())
                .unwrap_or(0);
            max.saturating_sub(current)
        });
    [system, address_space, data, cgroup]
        .into_iter()
        .flatten()
        .min()
}

/// A `Name:   1234 kB` field of `/proc/meminfo` or `/proc/self/status`, in bytes.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb.saturating_mul(1024))
}

/// The soft limit, in bytes, of a `/proc/self/limits` row (`Max address space  6144000000
/// unlimited  bytes`); `None` when it is unlimited or absent.
fn soft_limit(text: &str, name: &str) -> Option<u64> {
    let rest = text.lines().find_map(|line| line.strip_prefix(name))?;
    rest.split_whitespace().next()?.parse::<u64>().ok()
}

/// The folder of the process's cgroup (version 2: the line `0::/path` of `/proc/self/cgroup`).
fn cgroup_folder(text: &str) -> Option<String> {
    let path = text.lines().find_map(|line| line.strip_prefix("0::"))?;
    Some(format!("/sys/fs/cgroup{}", path.trim()))
}

/// Refuses `config` when its [`estimate`] exceeds `available` bytes (no check where that is
/// unknown).
///
/// # Errors
///
/// [`TrainError::TooLarge`] with the estimate, what is available, and the part and settings
/// to change.
pub fn check(config: &TrainConfig, available: Option<u64>) -> Result<(), TrainError> {
    let estimate = estimate(config);
    let Some(available) = available else {
        return Ok(());
    };
    if estimate.total() <= available as u128 {
        return Ok(());
    }
    let largest = estimate.largest();
    Err(TrainError::TooLarge {
        need: human(estimate.total()),
        available: human(available as u128),
        part: format!(
            "{}: {} ({})",
            largest.what,
            human(largest.bytes),
            largest.settings
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::TaskKind;

    #[test]
    fn the_default_run_is_small_and_a_huge_width_is_refused_with_its_numbers() {
        let config = TrainConfig::default();
        let small = estimate(&config).total();
        assert!(small < 100_000_000, "{}", human(small));
        check(&config, Some(1 << 30)).expect("fits in a GiB");

        let mut wide = config.clone();
        wide.model.d_model = 100_000_000;
        let err = check(&wide, Some(8 << 30)).expect_err("too large");
        let message = err.to_string();
        assert!(message.contains("--d-model 100000000"), "{message}");
        assert!(message.contains("8.6 GB is available"), "{message}");
        assert!(message.contains("parameters"), "{message}");
    }

    #[test]
    fn each_size_alone_can_make_a_run_too_large_and_is_named() {
        for (what, set) in [
            (
                "--n-layers 100000000",
                (|c: &mut TrainConfig| c.model.n_layers = 100_000_000) as fn(&mut TrainConfig),
            ),
            ("--d-ff 10000000000", |c| c.model.d_ff = 10_000_000_000),
            ("--batch-size 100000000", |c| c.batch_size = 100_000_000),
            ("--eval-sequences 1000000000", |c| {
                c.eval_sequences = 1_000_000_000
            }),
            ("100000000 classes", |c| {
                c.task.kind = TaskKind::Copy;
                c.task.vocab = 100_000_000;
            }),
            ("a learned table of 1000000000000 positions", |c| {
                c.model.pos = PositionalScheme::Learned {
                    max_len: 1_000_000_000_000,
                }
            }),
        ] {
            let mut config = TrainConfig::default();
            set(&mut config);
            let err = check(&config, Some(16 << 30)).expect_err(what);
            assert!(err.to_string().contains(what), "{what}: {err}");
        }
    }

    #[test]
    fn sizes_that_overflow_64_bits_saturate_instead_of_wrapping() {
        let mut config = TrainConfig::default();
        config.model.d_model = usize::MAX;
        config.model.d_ff = usize::MAX;
        assert_eq!(estimate(&config).total(), u128::MAX);
        assert!(check(&config, Some(u64::MAX)).is_err());
        assert_eq!(human(u128::MAX), "3.4e38 bytes");
        assert_eq!(human(1_500_000_000), "1.5 GB");
        assert_eq!(human(12), "12 bytes");
    }

    #[test]
    fn the_room_is_the_least_of_the_system_the_process_limits_and_the_cgroup() {
        let meminfo = "MemTotal: 24000000 kB\nMemAvailable:   20000000 kB\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max data size             unlimited            unlimited            bytes\n\
                      Max address space         6000000000           unlimited            bytes\n";
        let status = "VmSize:\t 1000000 kB\nVmData:\t  500000 kB\n";
        // The system alone.
        assert_eq!(
            least_room(Some(meminfo), None, None, None, None),
            Some(20_000_000 * 1024)
        );
        // `ulimit -v`: the limit less the address space already reserved.
        assert_eq!(
            least_room(Some(meminfo), Some(limits), Some(status), None, None),
            Some(6_000_000_000 - 1_000_000 * 1024)
        );
        // A cgroup's memory.max less what it holds; `max` means no limit.
        assert_eq!(
            least_room(
                Some(meminfo),
                None,
                None,
                Some("4000000000\n"),
                Some("1000\n")
            ),
            Some(4_000_000_000 - 1000)
        );
        assert_eq!(
            least_room(Some(meminfo), None, None, Some("max\n"), Some("1000\n")),
            Some(20_000_000 * 1024)
        );
        assert_eq!(least_room(None, None, None, None, None), None);
        assert_eq!(
            cgroup_folder("0::/user.slice/run.scope\n").as_deref(),
            Some("/sys/fs/cgroup/user.slice/run.scope")
        );
    }
}
