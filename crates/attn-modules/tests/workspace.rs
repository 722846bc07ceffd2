//! The check that CI runs: no circle among the modules of any crate of the workspace.

use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The `src` folders of the workspace's crates: `crates/*/src`, and the facade's own `src`.
fn sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root exists");
    let crates = root.join("crates");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("the workspace has a crates folder")
        .map(|entry| entry.expect("a crates entry reads").path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    sources.sort();
    sources.push(root.join("src"));
    sources
}

#[test]
fn no_crate_of_the_workspace_has_a_module_circle() {
    let sources = sources();
    assert!(
        sources.iter().any(|s| s.ends_with("attn-modules/src")),
        "the crates were not found: {sources:?}"
    );
    let mut report = String::new();
    for src in &sources {
        let circles = attn_modules::circles(src).unwrap_or_else(|e| panic!("{e}"));
        for circle in circles {
            writeln!(report, "{circle}").expect("writing to a String");
        }
    }
    assert!(
        report.is_empty(),
        "module circles (remove one import of each to break it):\n{report}"
    );
}
