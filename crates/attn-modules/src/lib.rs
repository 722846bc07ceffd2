//! The module graph of a crate, read from its `src/` folder, and the circles in it.
//!
//! A module is a file: `foo.rs` or `foo/mod.rs` (an inline `mod x { .. }` belongs to its file).
//! There is an edge from `a.rs` to `b.rs` where the code of `a.rs` names a path into `b`:
//! `use crate::b::X`, `use crate::{b, c}`, `super::X` from a child, `self::b::X`, `b::X` from
//! the parent that declares `b`, or `crate::b::f(..)` in an expression.
//! Declaring `mod b;` is not naming it, and test code (`#[cfg(test)]`, `#[test]`, an inline
//! `mod tests`) names nothing: a test module's `use super::*` is not a circle of the design.
//! A path reaches the most specific module file that exists (`crate::a::b::C` is `a/b.rs` where
//! `a` declares `b`, else `a.rs`), and goes on through re-exports: `crate::Config`, that
//! `lib.rs` re-exports from `config.rs`, is an import of `config.rs`, not of the crate root.
//!
//! A module's re-export of its own descendant is no import: a folder's `mod.rs` is its front
//! door, and presenting its children (`pub use child::X;`, `pub(crate) use child::{X, Y};`,
//! `pub(super) use child::grandchild::Z;`) declares them, it does not depend on them, so a
//! child that uses `super::Item` of that `mod.rs` makes no circle with it.
//! Such lines are kept apart, in [`ModuleGraph::reexports`].
//! The re-export is an import again as soon as the module's own code uses what it names: a
//! path into the child (`child::f()`), a re-exported name written in its code (`X` in
//! `fn f() -> X`), a private `use child::X`, a glob `pub use child::*` (whose names cannot be
//! told apart), and a re-export of a module that is not its descendant (a sibling, the root).
//!
//! A circle is a strongly connected component of two or more modules (Tarjan's algorithm),
//! reported with one cycle through it and the `file:line` of every import along the cycle.
//!
//! ```
//! let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
//! let circles = attn_modules::circles(&src).expect("this crate's sources read");
//! assert!(circles.is_empty(), "{circles:?}");
//! ```

mod circle;
mod error;
mod graph;
mod lex;
mod scan;
mod tree;

use std::path::{Path, PathBuf};

pub use circle::Circle;
pub use error::Error;
pub use graph::{Edge, ModuleGraph};

/// The crate roots of a `src` folder, relative to it: `lib.rs`, `main.rs`, `bin/*.rs` and
/// `bin/*/main.rs`, those that exist.
///
/// # Errors
///
/// [`Error::Read`] when `src/bin` exists and cannot be listed.
pub fn crate_roots(src: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .into_iter()
        .map(PathBuf::from)
        .filter(|root| src.join(root).is_file())
        .collect();
    let bin = src.join("bin");
    if bin.is_dir() {
        let read = |source| Error::Read {
            path: bin.clone(),
            source,
        };
        let mut binaries = Vec::new();
        for entry in std::fs::read_dir(&bin).map_err(read)? {
            let path = entry.map_err(read)?.path();
            let name = PathBuf::from("bin").join(path.file_name().unwrap_or_default());
            if path.extension().is_some_and(|e| e == "rs") && path.is_file() {
                binaries.push(name);
            } else if path.join("main.rs").is_file() {
                binaries.push(name.join("main.rs"));
            }
        }
        binaries.sort();
        roots.extend(binaries);
    }
    Ok(roots)
}

/// The module graph of every crate root in `src` (a library and its binaries are separate
/// crates, each with its own tree).
///
/// # Errors
///
/// [`Error::NoCrateRoot`] when `src` has no root, and the errors of [`ModuleGraph::read`].
pub fn graphs(src: &Path) -> Result<Vec<ModuleGraph>, Error> {
    let roots = crate_roots(src)?;
    if roots.is_empty() {
        return Err(Error::NoCrateRoot {
            src: src.to_path_buf(),
        });
    }
    roots
        .iter()
        .map(|root| ModuleGraph::read(src, root))
        .collect()
}

/// Every circle among the modules of the crates in `src`; a circle that two roots share is
/// reported once.
///
/// # Errors
///
/// Those of [`graphs`].
pub fn circles(src: &Path) -> Result<Vec<Circle>, Error> {
    let mut found: Vec<Circle> = Vec::new();
    for graph in graphs(src)? {
        for circle in Circle::find(&graph) {
            if !found.iter().any(|c| c.modules == circle.modules) {
                found.push(circle);
            }
        }
    }
    Ok(found)
}
