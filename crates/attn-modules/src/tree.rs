//! A crate's module tree, from its root file down its `mod` declarations, and the paths of
//! each module resolved to the module file they reach.
//!
//! A path resolves to the most specific module that exists: `crate::a::b::C` reaches `a/b.rs`
//! (or `a/b/mod.rs`) where `a` declares `b`, and `a.rs` otherwise.
//! A name a module imports is followed to where it comes from, so `crate::Config`, re-exported
//! by `lib.rs` from `config.rs`, reaches `config.rs`, not the crate root.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::scan::{Items, scan};

/// How many re-exports a path is followed through before resolution stops where it is.
const MAX_HOPS: usize = 16;

/// One module body: a file, or an inline `mod x { .. }` within one.
struct Scope {
    /// Index into [`Tree::files`].
    file: usize,
    parent: Option<usize>,
    children: BTreeMap<String, usize>,
    /// Names its `use` declarations bring in, and the paths they stand for.
    bindings: BTreeMap<String, Vec<String>>,
    /// Every path it names, from `use` leaves and from code, with the line.
    named: Vec<(Vec<String>, usize)>,
}

/// The modules of one crate root (`lib.rs`, `main.rs` or a `bin/` file) and what each names.
pub(crate) struct Tree {
    /// The module files, relative to `src`; the root is first.
    pub(crate) files: Vec<PathBuf>,
    scopes: Vec<Scope>,
}

impl Tree {
    /// Reads the root `file` (relative to `src`) and every module file it declares.
    pub(crate) fn read(src: &Path, file: &Path) -> Result<Tree, Error> {
        let mut tree = Tree {
            files: Vec::new(),
            scopes: Vec::new(),
        };
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
        tree.add_file(src, file, None, dir)?;
        Ok(tree)
    }

    fn add_file(
        &mut self,
        src: &Path,
        file: &Path,
        parent: Option<usize>,
        dir: PathBuf,
    ) -> Result<usize, Error> {
        let full = src.join(file);
        let source = fs::read_to_string(&full).map_err(|source| Error::Read {
            path: full.clone(),
            source,
        })?;
        self.files.push(file.to_path_buf());
        let index = self.files.len() - 1;
        self.add_scope(src, scan(&source), index, parent, dir)
    }

    fn add_scope(
        &mut self,
        src: &Path,
        items: Items,
        file: usize,
        parent: Option<usize>,
        dir: PathBuf,
    ) -> Result<usize, Error> {
        let mut bindings = BTreeMap::new();
        let mut named = Vec::new();
        for leaf in items.uses {
            if let Some(name) = leaf.binding {
                bindings.entry(name).or_insert_with(|| leaf.path.clone());
            }
            named.push((leaf.path, leaf.line));
        }
        named.extend(items.paths);
        self.scopes.push(Scope {
            file,
            parent,
            children: BTreeMap::new(),
            bindings,
            named,
        });
        let scope = self.scopes.len() - 1;
        for (name, line) in items.declared {
            let flat = dir.join(format!("{name}.rs"));
            let nested = dir.join(&name).join("mod.rs");
            let child_file = if src.join(&flat).is_file() {
                flat
            } else if src.join(&nested).is_file() {
                nested
            } else {
                return Err(Error::MissingModule {
                    declared_in: src.join(&self.files[file]),
                    line,
                    name,
                });
            };
            let child = self.add_file(src, &child_file, Some(scope), dir.join(&name))?;
            self.scopes[scope].children.insert(name, child);
        }
        for (name, body) in items.inline {
            let child = self.add_scope(src, body, file, Some(scope), dir.join(&name))?;
            self.scopes[scope].children.insert(name, child);
        }
        Ok(scope)
    }

    /// Every import between two different module files: `(from, to)` as indices into
    /// [`Tree::files`], with the lines of `from` that make it.
    pub(crate) fn edges(&self) -> BTreeMap<(usize, usize), BTreeSet<usize>> {
        let mut edges: BTreeMap<(usize, usize), BTreeSet<usize>> = BTreeMap::new();
        for (index, scope) in self.scopes.iter().enumerate() {
            for (path, line) in &scope.named {
                let Some(target) = self.resolve(index, path, false, 0) else {
                    continue;
                };
                let to = self.scopes[target].file;
                if to != scope.file {
                    edges.entry((scope.file, to)).or_default().insert(*line);
                }
            }
        }
        edges
    }

    /// The scope that `path`, written in scope `from`, reaches; `None` for a path outside the
    /// crate (`std::..`, another crate, a local name).
    /// A bare first segment is a child module of `from`, or, when following a re-export
    /// (`via_import`), also a name that `from` imports.
    fn resolve(
        &self,
        from: usize,
        path: &[String],
        via_import: bool,
        hops: usize,
    ) -> Option<usize> {
        let (first, rest) = path.split_first()?;
        let mut at = match first.as_str() {
            "crate" => self.root_of(from),
            "self" => from,
            "super" => self.scopes[from].parent?,
            name => match self.scopes[from].children.get(name) {
                Some(&child) => child,
                None if via_import => return self.follow(from, name, rest, hops).flatten(),
                None => return None,
            },
        };
        for (k, segment) in rest.iter().enumerate() {
            if segment == "super" {
                at = self.scopes[at].parent?;
            } else if segment == "self" {
                continue;
            } else if let Some(&child) = self.scopes[at].children.get(segment) {
                at = child;
            } else {
                // An item of `at`, or a name it imports from elsewhere.
                return self
                    .follow(at, segment, &rest[k + 1..], hops)
                    .unwrap_or(Some(at));
            }
        }
        Some(at)
    }

    /// Where `name`, imported in scope `at`, leads when `rest` follows it: `None` when `at`
    /// does not import `name` (or the re-exports go on too long), `Some(None)` when it comes
    /// from outside the crate.
    fn follow(&self, at: usize, name: &str, rest: &[String], hops: usize) -> Option<Option<usize>> {
        if hops >= MAX_HOPS {
            return None;
        }
        let imported = self.scopes[at].bindings.get(name)?;
        let path: Vec<String> = imported.iter().chain(rest).cloned().collect();
        Some(self.resolve(at, &path, true, hops + 1))
    }

    fn root_of(&self, mut scope: usize) -> usize {
        while let Some(parent) = self.scopes[scope].parent {
            scope = parent;
        }
        scope
    }
}
