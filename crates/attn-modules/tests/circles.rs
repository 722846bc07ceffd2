//! The circle check on crates planted under `tests/fixtures`: one with a circle, a parent and
//! child that make none, a parent and child that make one, grouped imports, and a parent's
//! re-exports of its children, which are no imports until its own code uses them.

use std::path::{Path, PathBuf};

use attn_modules::{Circle, Edge, ModuleGraph, circles};

fn src(fixture: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture)
        .join("src")
}

fn graph(fixture: &str) -> ModuleGraph {
    ModuleGraph::read(&src(fixture), Path::new("lib.rs")).expect("the fixture reads")
}

fn found(fixture: &str) -> Vec<Circle> {
    circles(&src(fixture)).expect("the fixture reads")
}

fn edge(from: &str, to: &str, lines: &[usize]) -> Edge {
    Edge {
        from: from.into(),
        to: to.into(),
        lines: lines.to_vec(),
    }
}

fn files(names: &[&str]) -> Vec<PathBuf> {
    names.iter().map(PathBuf::from).collect()
}

#[test]
fn the_planted_circle_is_reported_with_its_imports() {
    let found = found("circle");
    assert_eq!(found.len(), 1, "{found:#?}");
    let circle = &found[0];
    assert_eq!(circle.modules, files(&["a.rs", "b.rs"]));
    let expected = [edge("a.rs", "b.rs", &[2]), edge("b.rs", "a.rs", &[2])];
    assert_eq!(circle.cycle, expected);
    assert_eq!(circle.edges, expected);
    let shown = circle.to_string();
    assert!(shown.contains("a.rs -> b.rs (a.rs:2)"), "{shown}");
    assert!(shown.contains("b.rs -> a.rs (b.rs:2)"), "{shown}");
}

#[test]
fn the_clean_module_imports_but_its_tests_do_not() {
    let graph = graph("circle");
    assert_eq!(
        graph.modules,
        files(&["lib.rs", "a.rs", "b.rs", "clean.rs"])
    );
    assert_eq!(
        graph.edge("clean.rs", "a.rs"),
        Some(&edge("clean.rs", "a.rs", &[2]))
    );
    assert_eq!(graph.edge("clean.rs", "b.rs"), None);
    // Declaring a module is not importing it.
    assert_eq!(graph.edge("lib.rs", "a.rs"), None);
}

#[test]
fn a_child_naming_its_parent_is_no_circle() {
    assert_eq!(found("parent_child"), []);
    let graph = graph("parent_child");
    let (parent, child) = ("parent/mod.rs", "parent/child.rs");
    // `super::Thing`, and `crate::Thing` followed through the root's re-export to the parent.
    assert_eq!(
        graph.edge(child, parent),
        Some(&edge(child, parent, &[2, 3]))
    );
    assert_eq!(graph.edge(child, "lib.rs"), None);
    // The parent declares the child, and names it only in a doc comment, a string and tests.
    assert_eq!(graph.edge(parent, child), None);
    assert_eq!(graph.reexport(parent, child), None);
    // The root only re-exports its descendants: no imports.
    assert_eq!(graph.edge("lib.rs", parent), None);
    assert_eq!(graph.edge("lib.rs", child), None);
    assert_eq!(
        graph.reexport("lib.rs", parent),
        Some(&edge("lib.rs", parent, &[7]))
    );
    assert_eq!(
        graph.reexport("lib.rs", child),
        Some(&edge("lib.rs", child, &[8]))
    );
}

#[test]
fn a_parent_that_only_re_exports_its_children_is_no_circle_with_them() {
    assert_eq!(found("reexport_child"), []);
    let graph = graph("reexport_child");
    let (parent, child, grandchild) = (
        "parent/mod.rs",
        "parent/child/mod.rs",
        "parent/child/grandchild.rs",
    );
    // `pub use`, `pub(crate) use`, and `pub(super) use` of a grandchild with an `as`.
    assert_eq!(graph.edge(parent, child), None);
    assert_eq!(graph.edge(parent, grandchild), None);
    assert_eq!(
        graph.reexport(parent, child),
        Some(&edge(parent, child, &[5, 6]))
    );
    assert_eq!(
        graph.reexport(parent, grandchild),
        Some(&edge(parent, grandchild, &[7]))
    );
    // The children's imports of the parent stay imports.
    assert_eq!(
        graph.edge(child, parent),
        Some(&edge(child, parent, &[5, 10]))
    );
    assert_eq!(
        graph.edge(grandchild, parent),
        Some(&edge(grandchild, parent, &[3]))
    );
    // The root presents its descendants too.
    assert_eq!(graph.edge("lib.rs", parent), None);
    assert_eq!(
        graph.reexport("lib.rs", parent),
        Some(&edge("lib.rs", parent, &[7]))
    );
    assert_eq!(
        graph.reexport("lib.rs", child),
        Some(&edge("lib.rs", child, &[7]))
    );
}

#[test]
fn a_parent_whose_code_uses_its_child_is_a_circle_despite_its_re_exports() {
    let found = found("reexport_used");
    assert_eq!(found.len(), 2, "{found:#?}");
    // `calls/mod.rs` calls `child::make()`: that line is the import; the re-export is not.
    let (parent, child) = ("calls/mod.rs", "calls/child.rs");
    assert_eq!(found[0].modules, files(&[child, parent]));
    assert_eq!(
        found[0].cycle,
        [edge(child, parent, &[3]), edge(parent, child, &[10])]
    );
    let graph = graph("reexport_used");
    assert_eq!(
        graph.reexport(parent, child),
        Some(&edge(parent, child, &[5]))
    );
    // `uses/mod.rs` writes `Kid`, the name it re-exports, in its code: the re-export imports.
    let (parent, child) = ("uses/mod.rs", "uses/child.rs");
    assert_eq!(found[1].modules, files(&[child, parent]));
    assert_eq!(
        found[1].cycle,
        [edge(child, parent, &[3]), edge(parent, child, &[5])]
    );
    assert_eq!(graph.reexport(parent, child), None);
}

#[test]
fn a_parent_calling_into_its_child_that_names_it_is_a_circle() {
    let found = found("parent_names_child");
    assert_eq!(found.len(), 1, "{found:#?}");
    let (parent, child) = ("parent/mod.rs", "parent/child.rs");
    assert_eq!(found[0].modules, files(&[child, parent]));
    assert_eq!(
        found[0].cycle,
        [edge(child, parent, &[3]), edge(parent, child, &[7])]
    );
}

#[test]
fn grouped_imports_reach_the_most_specific_module() {
    let graph = graph("grouped");
    assert_eq!(
        graph.edge("w.rs", "x/mod.rs"),
        Some(&edge("w.rs", "x/mod.rs", &[3]))
    );
    assert_eq!(
        graph.edge("w.rs", "x/y.rs"),
        Some(&edge("w.rs", "x/y.rs", &[3]))
    );
    assert_eq!(
        graph.edge("w.rs", "z.rs"),
        Some(&edge("w.rs", "z.rs", &[4]))
    );
    let found = found("grouped");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].modules, files(&["w.rs", "x/y.rs"]));
    assert_eq!(
        found[0].cycle,
        [edge("w.rs", "x/y.rs", &[3]), edge("x/y.rs", "w.rs", &[5])]
    );
}

#[test]
fn a_declared_module_without_a_file_is_an_error() {
    let missing = std::env::temp_dir().join(format!("attn-modules-missing-{}", std::process::id()));
    std::fs::create_dir_all(&missing).expect("a temporary folder");
    std::fs::write(missing.join("lib.rs"), "mod nowhere;\n").expect("a temporary file");
    let error = circles(&missing).expect_err("nowhere.rs does not exist");
    std::fs::remove_dir_all(&missing).expect("the temporary folder goes");
    assert!(
        error.to_string().contains("lib.rs:1: `mod nowhere;`"),
        "{error}"
    );
}
