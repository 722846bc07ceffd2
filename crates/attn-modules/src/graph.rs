//! The module graph of one crate root: its module files, and each import of one by another
//! with the lines that make it.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::tree::{Lines, Tree};

/// The module graph of one crate root: its module files and the imports between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleGraph {
    /// The `src` folder the files are relative to.
    pub src: PathBuf,
    /// The module files, relative to `src`, the crate root (`lib.rs`, `main.rs`, ..) first.
    pub modules: Vec<PathBuf>,
    /// Every import from one module file to another, in the order of `(from, to)`.
    pub edges: Vec<Edge>,
    /// Every re-export by a module of its own descendant that the module's code does not use
    /// (`pub use child::X;` in `mod.rs`), in the order of `(from, to)`: no import, so in no
    /// circle.
    pub reexports: Vec<Edge>,
}

impl ModuleGraph {
    /// Reads the crate whose root is `root` (relative to `src`) and the module files it
    /// declares, down its `mod` declarations.
    ///
    /// # Errors
    ///
    /// [`Error::Read`] when a file cannot be read; [`Error::MissingModule`] when a declared
    /// module has no file.
    pub fn read(src: &Path, root: &Path) -> Result<ModuleGraph, Error> {
        let tree = Tree::read(src, root)?;
        let (imports, reexports) = tree.edges();
        let edges = |lines: Lines| {
            lines
                .into_iter()
                .map(|((from, to), lines)| Edge {
                    from: tree.files[from].clone(),
                    to: tree.files[to].clone(),
                    lines: lines.into_iter().collect(),
                })
                .collect()
        };
        Ok(ModuleGraph {
            src: src.to_path_buf(),
            edges: edges(imports),
            reexports: edges(reexports),
            modules: tree.files,
        })
    }

    /// The import from `from` to `to`, if `from` imports `to`.
    pub fn edge(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Option<&Edge> {
        find(&self.edges, from.as_ref(), to.as_ref())
    }

    /// The re-exports by `from` of its descendant `to` that are no imports, if there are any.
    pub fn reexport(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Option<&Edge> {
        find(&self.reexports, from.as_ref(), to.as_ref())
    }
}

fn find<'a>(edges: &'a [Edge], from: &Path, to: &Path) -> Option<&'a Edge> {
    edges.iter().find(|e| e.from == from && e.to == to)
}

/// An import of one module file by another (or a re-export of it), with every line of `from`
/// that makes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The importing module file, relative to `src`.
    pub from: PathBuf,
    /// The imported module file, relative to `src`.
    pub to: PathBuf,
    /// The lines of `from` that name `to` (a `use` leaf or a path in code), ascending.
    pub lines: Vec<usize>,
}

impl fmt::Display for Edge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let from = self.from.display();
        let lines: Vec<String> = self.lines.iter().map(|l| format!("{from}:{l}")).collect();
        write!(f, "{from} -> {} ({})", self.to.display(), lines.join(", "))
    }
}
