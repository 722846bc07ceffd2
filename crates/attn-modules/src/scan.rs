//! One source file read for what its modules declare and name: `mod x;` declarations, inline
//! `mod x { .. }` bodies, the leaves of every `use` tree (and whether the `use` is a
//! re-export), every other path of two or more segments (`crate::text::read_bounded(..)`),
//! each with its line, and the first word of every path in code, so that a re-exported name
//! the module's own code goes on to use can be told from one it only presents.
//! Test code leaves nothing: an item under `#[cfg(test)]` (or any `cfg` that is false when
//! `test` is), a `#[test]` function, and an inline `mod tests { .. }`.

use std::collections::BTreeSet;

use crate::lex::{Spanned, Token, tokens};

/// What one module body (a file, or an inline `mod x { .. }` within one) declares and names.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Items {
    /// `mod name;`: a module in its own file, with the line of the declaration.
    pub(crate) declared: Vec<(String, usize)>,
    /// `mod name { .. }`, outside tests.
    pub(crate) inline: Vec<(String, Items)>,
    /// The leaves of the `use` trees.
    pub(crate) uses: Vec<UseLeaf>,
    /// Paths written outside `use`, with their line: `crate::a::f`, `super::B`, `child::C`.
    pub(crate) paths: Vec<(Vec<String>, usize)>,
    /// The first word of every path written outside `use`, one-word paths included (`X` in
    /// `fn f() -> X`, `child` in `child::f()`): the names the module's code uses.
    pub(crate) words: BTreeSet<String>,
}

/// One leaf of a `use` tree: `use crate::{a::{self, B as C}, d::*};` has three.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UseLeaf {
    /// The full path, group prefixes included; a `self` leaf ends at the module it names, a
    /// glob at the module whose items it takes.
    pub(crate) path: Vec<String>,
    /// The name the leaf brings into scope: its last segment, or its `as` alias; none for a
    /// glob or `as _`.
    pub(crate) binding: Option<String>,
    /// The line of the leaf's last segment, so that each leaf of a group spread over lines
    /// has its own.
    pub(crate) line: usize,
    /// Whether the `use` is seen outside its module, a re-export: `pub use`, `pub(crate) use`,
    /// `pub(super) use` or `pub(in path) use` (not `pub(self) use`).
    pub(crate) reexport: bool,
}

/// The items of one file's source.
pub(crate) fn scan(source: &str) -> Items {
    let tokens = tokens(source);
    let mut scanner = Scanner {
        t: &tokens,
        stack: vec![Open {
            name: String::new(),
            items: Items::default(),
            depth: 0,
            test_only: false,
        }],
        depth: 0,
    };
    scanner.run();
    let Some(file) = scanner.stack.into_iter().next() else {
        return Items::default();
    };
    if file.test_only {
        Items::default()
    } else {
        file.items
    }
}

/// A module body being read: the file's own, or an inline `mod name {` whose `}` closes it
/// when the brace depth comes back to `depth`.
struct Open {
    name: String,
    items: Items,
    depth: usize,
    test_only: bool,
}

struct Scanner<'a> {
    t: &'a [Spanned],
    stack: Vec<Open>,
    depth: usize,
}

impl Scanner<'_> {
    fn top(&mut self) -> &mut Open {
        let last = self.stack.len() - 1;
        &mut self.stack[last]
    }

    fn run(&mut self) {
        let mut i = 0;
        while i < self.t.len() {
            i = self.step(i);
        }
        // A file that ends inside an unclosed inline module: keep what was read.
        while self.stack.len() > 1 {
            self.close();
        }
    }

    /// Reads from token `i` and returns where to go on.
    fn step(&mut self, i: usize) -> usize {
        let t = self.t;
        let token = &t[i];
        match &token.token {
            Token::Punct('#') => self.attribute(i),
            Token::Punct('{') => {
                self.depth += 1;
                i + 1
            }
            Token::Punct('}') => {
                self.depth = self.depth.saturating_sub(1);
                if self.stack.len() > 1 && self.top().depth == self.depth {
                    self.close();
                }
                i + 1
            }
            Token::Ident(word) if word == "mod" => self.module(i),
            Token::Ident(word) if word == "use" => {
                let mut leaves = Vec::new();
                let end = use_tree(t, i + 1, &[], true, &mut leaves);
                let reexport = visible_outside(&t[..i]);
                for leaf in &mut leaves {
                    leaf.reexport = reexport;
                }
                self.top().items.uses.extend(leaves);
                end
            }
            Token::Ident(_) => self.path(i),
            _ => i + 1,
        }
    }

    /// `#[..]` or `#![..]` at `i`.
    fn attribute(&mut self, i: usize) -> usize {
        let t = self.t;
        let inner = t.get(i + 1).is_some_and(|n| n.is('!'));
        let open = if inner { i + 2 } else { i + 1 };
        if !t.get(open).is_some_and(|n| n.is('[')) {
            return i + 1;
        }
        let close = matching(t, open);
        if !test_only(&t[open + 1..close.min(t.len())]) {
            return close + 1;
        }
        if inner {
            // `#![cfg(test)]`: the whole body it opens is test code.
            self.top().test_only = true;
            close + 1
        } else {
            skip_item(t, close + 1)
        }
    }

    /// `mod name;`, `mod name { .. }`, or `mod tests { .. }` (skipped).
    fn module(&mut self, i: usize) -> usize {
        let t = self.t;
        let (Some(name), Some(next)) = (t.get(i + 1).and_then(Spanned::ident), t.get(i + 2)) else {
            return i + 1;
        };
        if next.is(';') {
            let line = t[i + 1].line;
            self.top().items.declared.push((name.to_owned(), line));
            i + 3
        } else if next.is('{') && name == "tests" {
            matching(t, i + 2) + 1
        } else if next.is('{') {
            self.stack.push(Open {
                name: name.to_owned(),
                items: Items::default(),
                depth: self.depth,
                test_only: false,
            });
            self.depth += 1;
            i + 3
        } else {
            i + 1
        }
    }

    /// Ends the innermost inline module and files it under its parent.
    fn close(&mut self) {
        if let Some(open) = self.stack.pop()
            && !open.test_only
        {
            self.top().items.inline.push((open.name, open.items));
        }
    }

    /// An identifier at `i`: the start of a path of two or more segments unless it continues
    /// one (`a::b`), names a field or method (`x.b::<T>()`), or is a macro fragment (`$x::y`,
    /// where `$crate` is kept).
    fn path(&mut self, i: usize) -> usize {
        let t = self.t;
        let continues = i > 0 && {
            let before = &t[i - 1];
            before.token == Token::PathSep
                || before.is('.')
                || (before.is('$') && !t[i].is_ident("crate"))
        };
        let mut segments = Vec::new();
        let mut end = i;
        while let Some(name) = t.get(end).and_then(Spanned::ident) {
            segments.push(name.to_owned());
            let joined = t.get(end + 1).is_some_and(|n| n.token == Token::PathSep)
                && t.get(end + 2).and_then(Spanned::ident).is_some();
            if !joined {
                break;
            }
            end += 2;
        }
        if !continues {
            self.top().items.words.insert(segments[0].clone());
            if segments.len() > 1 {
                let line = t[i].line;
                self.top().items.paths.push((segments, line));
            }
        }
        end + 1
    }
}

/// Whether the tokens `before` a `use` end in a visibility that reaches outside the module:
/// `pub`, or `pub(..)` with anything but `self` inside.
fn visible_outside(before: &[Spanned]) -> bool {
    match before {
        [.., last] if last.is_ident("pub") => true,
        [.., last] if last.is(')') => {
            let Some(open) = before.iter().rposition(|n| n.is('(')) else {
                return false;
            };
            let inside = &before[open + 1..before.len() - 1];
            let only_self = matches!(inside, [word] if word.is_ident("self"));
            open > 0 && before[open - 1].is_ident("pub") && !only_self && !inside.is_empty()
        }
        _ => false,
    }
}

/// The index of the bracket that closes the one at `open` (any of `(`, `[`, `{`), or the end of
/// the tokens when it is never closed.
fn matching(t: &[Spanned], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, token) in t.iter().enumerate().skip(open) {
        match token.token {
            Token::Punct('(' | '[' | '{') => depth += 1,
            Token::Punct(')' | ']' | '}') => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    t.len()
}

/// Where the thing after a test-only attribute ends.
/// An item (`fn`, `impl`, `mod`, `struct` ...) ends at its `;` or at the `}` of its body; a
/// `const`, `static`, `let`, `use` or `type` at its `;`; anything else (a field, a match arm,
/// a statement) also at a `,`. Nothing ends past the bracket that closes the one it sits in.
fn skip_item(t: &[Spanned], start: usize) -> usize {
    let mut i = start;
    // Further attributes of the same item.
    while t.get(i).is_some_and(|n| n.is('#')) && t.get(i + 1).is_some_and(|n| n.is('[')) {
        i = matching(t, i + 1) + 1;
    }
    // The item's keyword: the first word past its visibility and qualifiers.
    let mut words = t[i.min(t.len())..]
        .iter()
        .filter_map(Spanned::ident)
        .skip_while(|w| matches!(*w, "pub" | "crate" | "super" | "in" | "unsafe" | "async"));
    let first_word = words.next();
    // `const X: T = ..;` ends at its `;` even past braces in its value; `const fn` has a body.
    let ends_at_semicolon_only = matches!(
        first_word,
        Some("const" | "static" | "let" | "use" | "type")
    ) && words.next() != Some("fn");
    let item = matches!(
        first_word,
        Some(
            "fn" | "impl"
                | "struct"
                | "enum"
                | "trait"
                | "mod"
                | "union"
                | "macro_rules"
                | "const"
                | "static"
                | "let"
                | "use"
                | "type"
                | "extern"
        )
    );
    let mut depth = 0usize;
    while let Some(token) = t.get(i) {
        match token.token {
            Token::Punct('(' | '[' | '{') => depth += 1,
            Token::Punct(')' | ']' | '}') => {
                if depth == 0 {
                    return i;
                }
                depth -= 1;
                if depth == 0 && token.is('}') && !ends_at_semicolon_only {
                    return i + 1;
                }
            }
            Token::Punct(';') if depth == 0 => return i + 1,
            Token::Punct(',') if depth == 0 && !item => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

/// Reads one use tree from `i` (after `use`, or inside a group) with the segments of the
/// groups around it in `prefix`; returns the index after the tree (after the `;` at the top).
fn use_tree(
    t: &[Spanned],
    mut i: usize,
    prefix: &[String],
    top: bool,
    leaves: &mut Vec<UseLeaf>,
) -> usize {
    let mut path = prefix.to_vec();
    let mut line = t.get(i).map_or(0, |n| n.line);
    let mut leaf = false;
    while let Some(token) = t.get(i) {
        match &token.token {
            Token::Ident(name) => {
                path.push(name.clone());
                line = token.line;
                leaf = true;
                i += 1;
                if t.get(i).is_some_and(|n| n.token == Token::PathSep) {
                    i += 1;
                    leaf = false;
                } else {
                    break;
                }
            }
            // A leading `::` (an extern crate) or a macro's `$crate`.
            Token::PathSep | Token::Punct('$') => i += 1,
            Token::Punct('*') => {
                leaves.push(UseLeaf {
                    path: path.clone(),
                    binding: None,
                    line: token.line,
                    reexport: false,
                });
                i += 1;
                break;
            }
            Token::Punct('{') => {
                i += 1;
                while let Some(inner) = t.get(i) {
                    if inner.is('}') {
                        i += 1;
                        break;
                    }
                    if inner.is(';') {
                        // Unbalanced: leave the `;` to end the declaration.
                        break;
                    }
                    if inner.is(',') {
                        i += 1;
                        continue;
                    }
                    let next = use_tree(t, i, &path, false, leaves);
                    i = next.max(i + 1);
                }
                break;
            }
            _ => break,
        }
    }
    if leaf {
        let mut binding = path.last().cloned();
        if t.get(i).is_some_and(|n| n.is_ident("as")) {
            binding = t.get(i + 1).and_then(Spanned::ident).map(str::to_owned);
            i += 2;
        }
        if path.last().is_some_and(|s| s == "self") {
            path.pop();
            if binding.as_deref() == Some("self") {
                binding = path.last().cloned();
            }
        }
        if binding.as_deref() == Some("_") {
            binding = None;
        }
        leaves.push(UseLeaf {
            path,
            binding,
            line,
            reexport: false,
        });
    }
    if top {
        // To the end of the declaration, past anything not understood.
        while let Some(token) = t.get(i) {
            i += 1;
            if token.is(';') {
                break;
            }
        }
    }
    i
}

/// Whether an attribute's tokens (between `[` and `]`) make what follows test code: `test`,
/// or a `cfg` that is false whenever `test` is.
fn test_only(attr: &[Spanned]) -> bool {
    match attr {
        [only] => only.is_ident("test"),
        [cfg, open, predicate @ .., close]
            if cfg.is_ident("cfg") && open.is('(') && close.is(')') =>
        {
            cfg_value(predicate) == Some(false)
        }
        _ => false,
    }
}

/// A `cfg` predicate's value in a build without `test`: `Some` where it is known from that
/// alone, `None` where it depends on other settings (features, target).
fn cfg_value(predicate: &[Spanned]) -> Option<bool> {
    let [head, rest @ ..] = predicate else {
        return None;
    };
    match (head.ident(), rest) {
        (Some("test"), []) => Some(false),
        (Some(op @ ("all" | "any" | "not")), [open, inner @ .., close])
            if open.is('(') && close.is(')') =>
        {
            let values: Vec<Option<bool>> =
                split_commas(inner).into_iter().map(cfg_value).collect();
            match op {
                "not" => values.first().copied().flatten().map(|v| !v),
                "all" if values.contains(&Some(false)) => Some(false),
                "all" if values.iter().all(|v| *v == Some(true)) => Some(true),
                "any" if values.contains(&Some(true)) => Some(true),
                "any" if values.iter().all(|v| *v == Some(false)) => Some(false),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The comma-separated parts of `tokens` at bracket depth 0.
fn split_commas(tokens: &[Spanned]) -> Vec<&[Spanned]> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (k, token) in tokens.iter().enumerate() {
        match token.token {
            Token::Punct('(' | '[' | '{') => depth += 1,
            Token::Punct(')' | ']' | '}') => depth = depth.saturating_sub(1),
            Token::Punct(',') if depth == 0 => {
                parts.push(&tokens[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    if start < tokens.len() {
        parts.push(&tokens[start..]);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(s: &str) -> Vec<String> {
        s.split("::").map(str::to_owned).collect()
    }

    fn leaves(source: &str) -> Vec<(String, Option<String>, usize)> {
        scan(source)
            .uses
            .into_iter()
            .map(|l| (l.path.join("::"), l.binding, l.line))
            .collect()
    }

    #[test]
    fn grouped_use_trees_give_one_leaf_each() {
        let source = "use crate::{x::{self, Y as Z},\n  w::*, v as _};\npub(crate) use super::u;";
        assert_eq!(
            leaves(source),
            [
                ("crate::x".into(), Some("x".into()), 1),
                ("crate::x::Y".into(), Some("Z".into()), 1),
                ("crate::w".into(), None, 2),
                ("crate::v".into(), None, 2),
                ("super::u".into(), Some("u".into()), 3),
            ]
        );
    }

    #[test]
    fn re_exports_are_told_from_private_uses() {
        let source = "pub use a::A;\npub(crate) use b::{B, C};\npub(super) use c::D;\n\
                      pub(in crate::x) use d::E;\npub(self) use e::F;\nuse f::G;\n\
                      #[cfg(feature = \"x\")]\nuse g::H;\nfn f() -> Result<(), u8> { Ok(()) }\nuse h::I;";
        let reexports: Vec<(String, bool)> = scan(source)
            .uses
            .into_iter()
            .map(|l| (l.path.join("::"), l.reexport))
            .collect();
        assert_eq!(
            reexports,
            [
                ("a::A".into(), true),
                ("b::B".into(), true),
                ("b::C".into(), true),
                ("c::D".into(), true),
                ("d::E".into(), true),
                ("e::F".into(), false),
                ("f::G".into(), false),
                ("g::H".into(), false),
                ("h::I".into(), false),
            ]
        );
    }

    #[test]
    fn the_words_of_code_are_the_first_segments_of_its_paths() {
        let items = scan("use a::Kept;\nfn f(x: Kid) -> child::G { x.method(); other::Toy }");
        let words: Vec<&str> = items.words.iter().map(String::as_str).collect();
        assert_eq!(words, ["Kid", "child", "f", "fn", "other", "x"]);
    }

    #[test]
    fn paths_outside_use_are_read_whole() {
        let items =
            scan("fn f() { let n = crate::text::read(x.b::<u8>()); child::G::<T>::new(); }");
        let paths: Vec<Vec<String>> = items.paths.into_iter().map(|(p, _)| p).collect();
        assert_eq!(paths, [path("crate::text::read"), path("child::G")]);
    }

    #[test]
    fn test_code_is_left_out() {
        let source = "
            mod kept;
            #[cfg(test)]
            mod testing;
            #[cfg(all(test, feature = \"x\"))]
            use crate::a;
            #[cfg(any(test, feature = \"y\"))]
            use crate::maybe;
            #[cfg(not(test))]
            use crate::release;
            #[test]
            fn t() { crate::b::f(); }
            mod tests { use crate::c; }
            #[cfg(test)]
            impl Foo { fn g() { crate::d::h(); } }
            struct S {
                #[cfg(test)]
                field: crate::e::E<A, B>,
                other: crate::f::F,
            }
        ";
        let items = scan(source);
        assert_eq!(items.declared, [("kept".to_owned(), 2)]);
        let used: Vec<String> = items.uses.iter().map(|l| l.path.join("::")).collect();
        assert_eq!(used, ["crate::maybe", "crate::release"]);
        let named: Vec<String> = items.paths.iter().map(|(p, _)| p.join("::")).collect();
        assert_eq!(named, ["crate::f::F"]);
    }

    #[test]
    fn inline_modules_nest_and_an_inner_cfg_test_empties_one() {
        let source = "
            mod outer {
                use super::a;
                mod inner { fn f() { super::b(); } }
            }
            mod only_in_tests {
                #![cfg(test)]
                use crate::c;
            }
            use crate::d;
        ";
        let items = scan(source);
        assert_eq!(items.inline.len(), 1);
        let (name, outer) = &items.inline[0];
        assert_eq!(name, "outer");
        assert_eq!(outer.uses[0].path, path("super::a"));
        assert_eq!(outer.inline[0].0, "inner");
        assert_eq!(outer.inline[0].1.paths[0].0, path("super::b"));
        assert_eq!(items.uses.len(), 1);
        assert_eq!(items.uses[0].path, path("crate::d"));
    }

    #[test]
    fn a_file_that_opens_with_cfg_test_is_empty() {
        assert_eq!(
            scan("#![cfg(test)]\nuse crate::a;\nmod b;"),
            Items::default()
        );
    }
}
