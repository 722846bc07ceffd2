//! Sizes that matter, kept by tests rather than by memory.
//!
//! `attn-core`'s source, which a reader follows from the formula to the fast paths, stays under
//! 4,000 lines; `docs/benchmarks.md`, a reference with the current figures of each machine,
//! stays under 300 (how the figures came about goes to `docs/performance-log.md`). Lines are
//! counted as `wc -l` counts them: one per newline.

use std::path::{Path, PathBuf};

/// `crates/attn-core/src` stays under this many lines, all its files together.
const CORE_SOURCE_LIMIT: usize = 4000;

/// `docs/benchmarks.md` stays under this many lines.
const BENCHMARKS_LIMIT: usize = 300;

/// The workspace root, where this facade's `Cargo.toml` is.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The lines of a text as `wc -l` counts them: its newlines.
fn lines(text: &str) -> usize {
    text.bytes().filter(|&b| b == b'\n').count()
}

/// The lines of the file at `path`.
fn file_lines(path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    lines(&text)
}

/// Adds every `*.rs` file under `dir`, at any depth.
fn collect_rust(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect_rust(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
}

#[test]
fn attn_core_source_stays_under_4000_lines() {
    let src = root().join("crates/attn-core/src");
    let mut files = Vec::new();
    collect_rust(&src, &mut files);
    assert!(
        files.len() > 10,
        "expected attn-core's modules, found {files:?}"
    );
    let mut counted: Vec<(usize, String)> = files
        .iter()
        .map(|file| {
            let shown = file.strip_prefix(root()).unwrap_or(file).display();
            (file_lines(file), shown.to_string())
        })
        .collect();
    let total: usize = counted.iter().map(|(n, _)| n).sum();
    counted.sort_by(|a, b| b.cmp(a));
    let largest: Vec<String> = counted
        .iter()
        .take(5)
        .map(|(n, file)| format!("{file}: {n}"))
        .collect();
    assert!(
        total < CORE_SOURCE_LIMIT,
        "crates/attn-core/src holds {total} lines of Rust in {} files, and must stay under \
         {CORE_SOURCE_LIMIT}; tests that need only the public API belong in \
         crates/attn-core/tests/. The largest files: {}",
        files.len(),
        largest.join(", ")
    );
}

#[test]
fn the_benchmarks_page_stays_under_300_lines() {
    let page = root().join("docs/benchmarks.md");
    let n = file_lines(&page);
    assert!(
        n < BENCHMARKS_LIMIT,
        "docs/benchmarks.md has {n} lines, and must stay under {BENCHMARKS_LIMIT}: it keeps the \
         current figures of each machine, and older ones go to docs/performance-log.md"
    );
}

#[test]
fn lines_are_counted_as_wc_counts_them() {
    assert_eq!(lines(""), 0);
    assert_eq!(lines("one\ntwo\n"), 2);
    // A last line without its newline is not counted, as `wc -l` does not count it.
    assert_eq!(lines("one\ntwo"), 1);
    assert_eq!(lines("\n\n\n"), 3);
}
