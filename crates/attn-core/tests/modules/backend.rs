//! The backend table: every name maps to a device or to an error naming the known backends,
//! the bad entry of a list, or the feature that would compile it in.

use attn_core::backend::{BackendError, COMPILED, KNOWN, default_backend, device, devices};

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
fn lists_name_devices_in_order_and_bad_entries_are_named() {
    let name = default_backend();
    let two = devices(&format!("{name}, {name}")).expect("a repeated backend is allowed");
    assert_eq!(two.len(), 2);
    assert_eq!(two[0], two[1]);
    for (spec, says) in [
        ("flex:1", "CPU backend"),
        ("wgpu:x", "`x` is not a whole number"),
        ("flex,,flex", "empty entry"),
    ] {
        let err = devices(spec).expect_err(spec);
        assert!(matches!(err, BackendError::BadSpec { .. }), "{spec}: {err}");
        assert!(err.to_string().contains(says), "{spec}: {err}");
    }
    assert!(matches!(
        devices("flex,tpu"),
        Err(BackendError::Unknown { name, .. }) if name == "tpu"
    ));
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
