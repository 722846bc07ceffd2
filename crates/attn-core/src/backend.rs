//! Backend names: the one table in the workspace that turns a string such as `"flex"` into a
//! burn [`Device`]. It names devices; choosing one stays with the caller (a program's command
//! line, the test harness).
//!
//! Which backends exist is decided at compile time by this crate's cargo features (`flex`,
//! `ndarray`, `wgpu`, `vulkan`, `metal`, `cuda`), which `attn-model`, `attn-train` and the facade
//! forward one to one under the same names. Asking for a backend that was not compiled in is an
//! error that names the feature that would enable it.

use burn::tensor::Device;
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "metal"))]
use burn::tensor::DeviceKind;
use thiserror::Error;

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
/// GPU backends pick their default adapter; the device itself starts lazily, on first use.
///
/// # Errors
///
/// [`BackendError::Unknown`] for a name this crate does not know, and
/// [`BackendError::NotCompiled`] for a known backend whose cargo feature is off, naming the
/// feature to turn on.
pub fn device(name: &str) -> Result<Device, BackendError> {
    let compiled = COMPILED.join(", ");
    let Some(&(_, feature)) = KNOWN.iter().find(|(known, _)| *known == name) else {
        let known = KNOWN.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
        return Err(BackendError::Unknown {
            name: name.to_string(),
            known,
            compiled,
        });
    };
    compiled_device(name).ok_or_else(|| BackendError::NotCompiled {
        name: name.to_string(),
        feature: feature.to_string(),
        compiled,
    })
}

/// The device for a known backend name, or `None` when its feature is off.
fn compiled_device(name: &str) -> Option<Device> {
    match name {
        #[cfg(feature = "flex")]
        "flex" => Some(Device::flex()),
        #[cfg(feature = "ndarray")]
        #[allow(deprecated)]
        // burn 0.22 deprecates ndarray in favour of flex; it still works.
        "ndarray" => Some(Device::ndarray()),
        #[cfg(feature = "wgpu")]
        "wgpu" => Some(Device::wgpu(DeviceKind::DefaultDevice)),
        #[cfg(feature = "vulkan")]
        "vulkan" => Some(Device::vulkan(DeviceKind::DefaultDevice)),
        #[cfg(feature = "metal")]
        "metal" => Some(Device::metal(DeviceKind::DefaultDevice)),
        #[cfg(feature = "cuda")]
        "cuda" => Some(Device::cuda(0)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_compiled_backend_is_known_and_builds_a_device() {
        for name in COMPILED {
            assert!(
                KNOWN.iter().any(|(k, _)| k == name),
                "{name} missing from KNOWN"
            );
            assert!(
                device(name).is_ok(),
                "{name} is compiled in but device() refused it"
            );
        }
    }

    #[test]
    fn default_backend_is_compiled_in() {
        assert!(COMPILED.contains(&default_backend()));
    }

    #[test]
    fn unknown_name_lists_the_known_backends() {
        let err = device("tpu").expect_err("tpu is not a backend");
        assert!(matches!(err, BackendError::Unknown { .. }));
        let message = err.to_string();
        assert!(
            message.contains("tpu") && message.contains("flex"),
            "{message}"
        );
    }

    #[test]
    fn missing_feature_names_the_feature() {
        // Some known backend is always absent from a normal build (cuda needs a toolkit).
        let Some(&(name, feature)) = KNOWN.iter().find(|(n, _)| !COMPILED.contains(n)) else {
            return;
        };
        let err = device(name).expect_err("backend is not compiled in");
        assert_eq!(
            err,
            BackendError::NotCompiled {
                name: name.to_string(),
                feature: feature.to_string(),
                compiled: COMPILED.join(", "),
            }
        );
        assert!(err.to_string().contains(&format!("--features {feature}")));
    }
}
