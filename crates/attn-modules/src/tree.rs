//! A crate's module tree, from its root file down its `mod` declarations, and the paths of
//! each module resolved to the module file they reach.
//!
//! A path resolves to the most specific module that exists: `crate::a::b::C` reaches `a/b.rs`
//! (or `a/b/mod.rs`) where `a` declares `b`, and `a.rs` otherwise.
//! A name a module imports is followed to where it comes from, so `crate::Config`, re-exported
//! by `lib.rs` from `config.rs`, reaches `config.rs`, not the crate root.
//!
//! A module's re-export of its own descendant (`pub use child::X;` in `mod.rs`, where the
//! module's own code never uses `X`) is kept apart from its imports: it presents the child,
//! it does not depend on it.

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
    /// Every path it names, from `use` leaves and from code.
    named: Vec<Named>,
}

/// One path a scope names.
struct Named {
    path: Vec<String>,
    line: usize,
    /// A re-export leaf whose name the scope's own code does not use: where it reaches a
    /// descendant of the scope, it presents that module and is no import of it.
    presents: bool,
}

/// The lines of each pair of module files `(from, to)`, as indices into [`Tree::files`].
pub(crate) type Lines = BTreeMap<(usize, usize), BTreeSet<usize>>;

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
            // A glob re-export (no binding) may bring in any name the code then uses: an import.
            let presents = leaf.reexport
                && leaf
                    .binding
                    .as_ref()
                    .is_some_and(|name| !items.words.contains(name));
            if let Some(name) = leaf.binding {
                bindings.entry(name).or_insert_with(|| leaf.path.clone());
            }
            named.push(Named {
                path: leaf.path,
                line: leaf.line,
                presents,
            });
        }
        named.extend(items.paths.into_iter().map(|(path, line)| Named {
            path,
            line,
            presents: false,
        }));
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

    /// Every path from one module file to another, with the lines of `from` that name `to`,
    /// in two parts: the imports, and the re-exports of a module's own descendants that its
    /// code does not use (which are no imports).
    pub(crate) fn edges(&self) -> (Lines, Lines) {
        let mut imports = Lines::new();
        let mut reexports = Lines::new();
        for (index, scope) in self.scopes.iter().enumerate() {
            for named in &scope.named {
                let Some(target) = self.resolve(index, &named.path, false, 0) else {
                    continue;
                };
                let to = self.scopes[target].file;
                if to == scope.file {
                    continue;
                }
                let kind = if named.presents && self.descends_from(target, index) {
                    &mut reexports
                } else {
                    &mut imports
                };
                kind.entry((scope.file, to)).or_default().insert(named.line);
            }
        }
        (imports, reexports)
    }

    /// Whether scope `scope` lies below `ancestor` in the module tree.
    fn descends_from(&self, mut scope: usize, ancestor: usize) -> bool {
        while let Some(parent) = self.scopes[scope].parent {
            if parent == ancestor {
                return true;
            }
            scope = parent;
        }
        false
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
