//! The documentation's links and code paths point at files that exist.
//!
//! Walks `README.md`, `ARCHITECTURE.md`, `docs/**/*.md` and `crates/*/README.md`, and names
//! every relative markdown link `](path)` whose target is missing (web links and pure
//! `#anchor` links are skipped, a path's `#anchor` is dropped), and every code path quoted in
//! backticks, `crates/.../*.rs` or `src/....rs`, that is missing. Fenced code blocks are
//! skipped: they hold commands and code, not links.

use std::path::{Path, PathBuf};

/// The workspace root, where this facade's `Cargo.toml` is.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every markdown file the check covers, sorted so failures read in a stable order.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    collect_markdown(&root.join("docs"), &mut files);
    let crates = std::fs::read_dir(root.join("crates")).expect("crates/ is readable");
    for entry in crates {
        let readme = entry.expect("a crates/ entry").path().join("README.md");
        if readme.is_file() {
            files.push(readme);
        }
    }
    files.sort();
    files
}

/// Adds every `*.md` under `dir`, at any depth.
fn collect_markdown(dir: &Path, files: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect_markdown(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "md") {
            files.push(path);
        }
    }
}

/// One reference found in a markdown text: a link target or a quoted code path.
#[derive(Debug, PartialEq)]
enum Reference {
    /// The target of `](target)`, anchor already dropped.
    Link(String),
    /// A `crates/.../*.rs` or `src/....rs` path quoted in backticks.
    CodePath(String),
}

/// The relative links and code paths of a markdown text, in order, outside fenced blocks.
fn references(text: &str) -> Vec<Reference> {
    let mut found = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Split on backticks: even pieces are prose, odd pieces are inline code.
        for (i, piece) in line.split('`').enumerate() {
            if i % 2 == 1 {
                if is_code_path(piece) {
                    found.push(Reference::CodePath(piece.to_string()));
                }
            } else {
                found.extend(link_targets(piece).into_iter().map(Reference::Link));
            }
        }
    }
    found
}

/// The relative targets of the `](target)` links in a piece of prose.
fn link_targets(prose: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = prose;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else { break };
        // A title after the path (`](path "title")`) is not part of it.
        let target = after[..end].split_whitespace().next().unwrap_or("");
        let target = target.trim_start_matches('<').trim_end_matches('>');
        let path = target.split('#').next().unwrap_or("");
        let external = target.starts_with("http://")
            || target.starts_with("https://")
            || target.starts_with("mailto:");
        if !external && !path.is_empty() {
            targets.push(path.to_string());
        }
        rest = &after[end + 1..];
    }
    targets
}

/// Whether an inline code span is a Rust source path this check resolves.
fn is_code_path(code: &str) -> bool {
    let plain = !code.contains(char::is_whitespace) && !code.contains(['*', '{', '}', '<', '>']);
    plain && code.ends_with(".rs") && (code.starts_with("crates/") || code.starts_with("src/"))
}

/// The crate folder a markdown file belongs to: the nearest folder above it with a
/// `Cargo.toml`, which is where a `src/...` path in it is read from.
fn crate_dir(file: &Path) -> PathBuf {
    let mut dir = file.parent().expect("a file has a folder").to_path_buf();
    loop {
        if dir.join("Cargo.toml").is_file() {
            return dir;
        }
        if !dir.pop() {
            return root();
        }
    }
}

/// Each broken reference of one file's text, as `file: what`.
fn problems(file: &Path, text: &str, root: &Path) -> Vec<String> {
    let folder = file.parent().expect("a file has a folder");
    let shown = file
        .strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string();
    references(text)
        .into_iter()
        .filter_map(|reference| match reference {
            Reference::Link(target) => (!folder.join(&target).exists())
                .then(|| format!("{shown}: link `{target}` points at nothing")),
            Reference::CodePath(path) => {
                let base = if path.starts_with("crates/") {
                    root.to_path_buf()
                } else {
                    crate_dir(file)
                };
                (!base.join(&path).is_file())
                    .then(|| format!("{shown}: code path `{path}` does not exist"))
            }
        })
        .collect()
}

#[test]
fn every_relative_link_and_code_path_in_the_docs_resolves() {
    let root = root();
    let files = markdown_files(&root);
    assert!(
        files.len() > 10,
        "expected the READMEs and docs/, found {files:?}"
    );
    let broken: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text =
                std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            problems(file, &text, &root)
        })
        .collect();
    assert!(
        broken.is_empty(),
        "{} broken references:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_parser_finds_links_and_code_paths_and_skips_web_links_anchors_and_fences() {
    let text = "\
See [the index](index.md#top), [the web](https://burn.dev), [a section](#shapes),
![a picture](img/missing.png \"title\") and [`sdpa.rs`](../crates/attn-core/src/sdpa.rs).
The op lives in `crates/attn-core/src/sdpa.rs`, the glob `crates/attn-core/src/*.rs` is skipped,
and `src/lib.rs` is the facade's; `cargo test` is not a path.
```rust
let not_a_link = v[0](x); // `crates/nowhere.rs`
```
";
    assert_eq!(
        references(text),
        [
            Reference::Link("index.md".into()),
            Reference::Link("img/missing.png".into()),
            Reference::Link("../crates/attn-core/src/sdpa.rs".into()),
            Reference::CodePath("crates/attn-core/src/sdpa.rs".into()),
            Reference::CodePath("src/lib.rs".into()),
        ]
    );
}

#[test]
fn a_broken_link_and_a_missing_code_path_are_named_with_their_file() {
    let root = root();
    let file = root.join("docs/example.md");
    let text = "\
Good: [index](index.md), [benchmarks](benchmarks.md#machines), [home](../README.md),
`crates/attn-core/src/lib.rs` and [the web](https://example.com/missing.md).
Bad: [gone](no-such-page.md#anchor) and `crates/attn-core/src/no_such_file.rs`.
";
    assert_eq!(
        problems(&file, text, &root),
        [
            "docs/example.md: link `no-such-page.md` points at nothing",
            "docs/example.md: code path `crates/attn-core/src/no_such_file.rs` does not exist",
        ]
    );
}
