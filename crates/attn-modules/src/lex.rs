//! A Rust source file as the tokens that paths are made of: identifiers, `::`, and single
//! punctuation characters, each with its line.
//! Comments, string and character literals, lifetimes and numbers leave nothing behind (a
//! literal leaves one [`Token::Literal`]), so a path written in a doc comment or a string
//! is never read as an import.

/// One token and the line (counted from 1) where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Spanned {
    pub(crate) token: Token,
    pub(crate) line: usize,
}

/// What the module scanner needs to tell apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Token {
    /// An identifier or keyword; a raw identifier `r#type` is `type`.
    Ident(String),
    /// `::`.
    PathSep,
    /// Any other punctuation character, one at a time (`{`, `#`, `;`, `*`, `$`, ...).
    Punct(char),
    /// A string, character or number literal.
    Literal,
}

impl Spanned {
    /// The identifier, if this is one.
    pub(crate) fn ident(&self) -> Option<&str> {
        match &self.token {
            Token::Ident(name) => Some(name),
            _ => None,
        }
    }

    /// Whether this is the punctuation character `c`.
    pub(crate) fn is(&self, c: char) -> bool {
        self.token == Token::Punct(c)
    }

    /// Whether this is the identifier or keyword `name`.
    pub(crate) fn is_ident(&self, name: &str) -> bool {
        self.ident() == Some(name)
    }
}

/// The tokens of `source`, in order.
pub(crate) fn tokens(source: &str) -> Vec<Spanned> {
    let chars: Vec<char> = source.chars().collect();
    let mut lexer = Lexer {
        chars: &chars,
        at: 0,
        line: 1,
        out: Vec::new(),
    };
    lexer.run();
    lexer.out
}

struct Lexer<'a> {
    chars: &'a [char],
    at: usize,
    line: usize,
    out: Vec<Spanned>,
}

impl Lexer<'_> {
    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.at + ahead).copied()
    }

    /// Moves one character on, counting lines.
    fn bump(&mut self) {
        if self.peek(0) == Some('\n') {
            self.line += 1;
        }
        self.at += 1;
    }

    fn push(&mut self, token: Token, line: usize) {
        self.out.push(Spanned { token, line });
    }

    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            let line = self.line;
            match c {
                c if c.is_whitespace() => self.bump(),
                '/' if self.peek(1) == Some('/') => self.line_comment(),
                '/' if self.peek(1) == Some('*') => self.block_comment(),
                '"' => {
                    self.quoted('"');
                    self.push(Token::Literal, line);
                }
                '\'' => self.quote_or_lifetime(line),
                ':' if self.peek(1) == Some(':') => {
                    self.at += 2;
                    self.push(Token::PathSep, line);
                }
                c if c.is_ascii_digit() => {
                    self.word();
                    self.push(Token::Literal, line);
                }
                c if c == '_' || c.is_alphabetic() => self.ident_or_prefixed_literal(line),
                c => {
                    self.bump();
                    self.push(Token::Punct(c), line);
                }
            }
        }
    }

    fn line_comment(&mut self) {
        while let Some(c) = self.peek(0) {
            if c == '\n' {
                return;
            }
            self.bump();
        }
    }

    /// A block comment, nested ones included.
    fn block_comment(&mut self) {
        let mut depth = 0usize;
        while let Some(c) = self.peek(0) {
            if c == '/' && self.peek(1) == Some('*') {
                depth += 1;
                self.at += 2;
            } else if c == '*' && self.peek(1) == Some('/') {
                self.at += 2;
                depth -= 1;
                if depth == 0 {
                    return;
                }
            } else {
                self.bump();
            }
        }
    }

    /// From an opening `quote` to its closing one, past backslash escapes.
    fn quoted(&mut self, quote: char) {
        self.bump();
        while let Some(c) = self.peek(0) {
            self.bump();
            if c == '\\' {
                self.bump();
            } else if c == quote {
                return;
            }
        }
    }

    /// `r"..."`, `r#"..."#` and so on, from the first `#` or `"`.
    fn raw_string(&mut self) {
        let mut hashes = 0;
        while self.peek(0) == Some('#') {
            hashes += 1;
            self.bump();
        }
        self.bump(); // the opening `"`
        while let Some(c) = self.peek(0) {
            self.bump();
            if c == '"' && (0..hashes).all(|k| self.peek(k) == Some('#')) {
                self.at += hashes;
                return;
            }
        }
    }

    /// `'a'`, `'\n'` and `'\u{1F600}'` are literals; `'a` and `'static` are lifetimes (or
    /// loop labels), and leave nothing.
    fn quote_or_lifetime(&mut self, line: usize) {
        if self.peek(1) == Some('\\') || self.peek(2) == Some('\'') {
            self.quoted('\'');
            self.push(Token::Literal, line);
        } else {
            self.bump();
            self.word();
        }
    }

    fn word(&mut self) -> String {
        let mut word = String::new();
        while let Some(c) = self.peek(0) {
            if c == '_' || c.is_alphanumeric() {
                word.push(c);
                self.bump();
            } else {
                break;
            }
        }
        word
    }

    /// An identifier, or the prefix of a literal: `b"..."`, `b'x'`, `c"..."`, `r"..."`,
    /// `br#"..."#`, `cr"..."`; `r#ident` is the raw identifier `ident`.
    fn ident_or_prefixed_literal(&mut self, line: usize) {
        let word = self.word();
        let next = self.peek(0);
        let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
        let after_hashes = {
            let mut k = 0;
            while self.peek(k) == Some('#') {
                k += 1;
            }
            self.peek(k)
        };
        if raw_prefix && (next == Some('"') || (next == Some('#') && after_hashes == Some('"'))) {
            self.raw_string();
            self.push(Token::Literal, line);
        } else if word == "r" && next == Some('#') {
            self.bump();
            let name = self.word();
            self.push(Token::Ident(name), line);
        } else if matches!(word.as_str(), "b" | "c") && next == Some('"') {
            self.quoted('"');
            self.push(Token::Literal, line);
        } else if word == "b" && next == Some('\'') {
            self.quoted('\'');
            self.push(Token::Literal, line);
        } else {
            self.push(Token::Ident(word), line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(source: &str) -> Vec<String> {
        tokens(source)
            .into_iter()
            .filter_map(|t| t.ident().map(str::to_owned))
            .collect()
    }

    #[test]
    fn comments_and_strings_leave_no_identifiers() {
        let source = r####"
            // use crate::a;
            /* crate::b /* nested crate::c */ crate::d */
            /// [`x`](crate::e)
            let s = "crate::f \" crate::g";
            let r = r#"crate::h " crate::i"#;
            let b = br##"crate::j"#"##;
            let c = 'c';
            let q = '\'';
            let u = '\u{7f}';
            kept
        "####;
        assert_eq!(
            idents(source),
            [
                "let", "s", "let", "r", "let", "b", "let", "c", "let", "q", "let", "u", "kept"
            ]
        );
    }

    #[test]
    fn lifetimes_are_not_character_literals() {
        let source = "fn f<'a>(x: &'a str) -> &'static str { 'outer: loop { break 'outer; } x }";
        let kinds: Vec<Token> = tokens(source).into_iter().map(|t| t.token).collect();
        assert!(!kinds.contains(&Token::Literal), "{kinds:?}");
        assert!(kinds.contains(&Token::Ident("x".into())));
    }

    #[test]
    fn paths_lines_and_raw_identifiers() {
        let spanned = tokens("use crate::a;\n\nr#type::b");
        let lines: Vec<(Token, usize)> = spanned.into_iter().map(|t| (t.token, t.line)).collect();
        assert_eq!(
            lines,
            [
                (Token::Ident("use".into()), 1),
                (Token::Ident("crate".into()), 1),
                (Token::PathSep, 1),
                (Token::Ident("a".into()), 1),
                (Token::Punct(';'), 1),
                (Token::Ident("type".into()), 3),
                (Token::PathSep, 3),
                (Token::Ident("b".into()), 3),
            ]
        );
    }

    #[test]
    fn lines_count_inside_comments_and_strings() {
        let spanned = tokens("/*\n\n*/ \"\n\" x");
        assert_eq!(spanned.last().map(|t| t.line), Some(4));
    }
}
