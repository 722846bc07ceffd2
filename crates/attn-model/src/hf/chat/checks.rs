//! Checks of a template's source before minijinja parses it: chains of operators and of
//! `elif` branches that its parser would build into trees too deep for the stack.
//!
//! minijinja parses a chain of operators (`a ~ b ~ c ...`, `x|f|g`, `not not x`) into a tree
//! as deep as the chain is long, and compiles and drops that tree by recursion; it bounds the
//! nesting of brackets and blocks (150 levels) but not these chains. [`check_chains`] counts
//! each tag's operators without parsing: it finds where a tag ends as minijinja's lexer does,
//! at the first `}}` (or `%}`) outside string literals where every bracket opened in the tag
//! has closed, so that `{{ {"a": {"b": 1}}.a ~ ... }}` is one tag, and it counts the operators
//! inside brackets and literals' neighbours alike. `{% raw %}` blocks, which minijinja does not
//! parse, are skipped as it skips them, and so are comments.

use super::error::ChatError;
use super::limits::CHAT_MAX_CHAIN;

/// Refuses a template with a tag that holds more than [`CHAT_MAX_CHAIN`] operators, or with
/// more than [`CHAT_MAX_CHAIN`] `elif` branches, before minijinja parses it into a tree too
/// deep for the stack. Tags are `{{ ... }}` and `{% ... %}`; comments, raw blocks and the
/// insides of string literals are skipped.
pub(super) fn check_chains(source: &str) -> Result<(), ChatError> {
    let bytes = source.as_bytes();
    let too_deep = |at: usize, reason: String| ChatError::Template {
        line: Some(1 + bytes[..at].iter().filter(|&&b| b == b'\n').count()),
        reason,
    };
    let mut elifs = 0;
    let mut at = 0;
    while let Some(open) = memchr(b'{', bytes, at) {
        let close: &[u8] = match bytes.get(open + 1) {
            Some(b'{') => b"}}",
            Some(b'%') => match raw_block_end(bytes, open) {
                Some(end) => {
                    at = end;
                    continue;
                }
                None => b"%}",
            },
            Some(b'#') => {
                at = find(bytes, open + 2, b"#}").map_or(bytes.len(), |end| end + 2);
                continue;
            }
            _ => {
                at = open + 1;
                continue;
            }
        };
        let tag = scan_tag(bytes, open + 2, close);
        if tag.operators > CHAT_MAX_CHAIN {
            return Err(too_deep(
                open,
                format!(
                    "a tag chains {} operators, more than the {CHAT_MAX_CHAIN} this crate \
                     compiles in one tag",
                    tag.operators
                ),
            ));
        }
        if close == b"%}" && tag.first_word == Some(b"elif") {
            elifs += 1;
            if elifs > CHAT_MAX_CHAIN {
                return Err(too_deep(
                    open,
                    format!(
                        "more than {CHAT_MAX_CHAIN} elif branches, the most this crate \
                         compiles in one template"
                    ),
                ));
            }
        }
        at = tag.end;
    }
    Ok(())
}

/// What [`scan_tag`] found in one tag.
struct Tag<'a> {
    /// Operators (`+`, `~`, `|`, `.`, `(`, `[`, `and`, `if`, ...), those inside brackets too.
    operators: usize,
    /// The first word, which names a block tag's statement (`elif`).
    first_word: Option<&'a [u8]>,
    /// Where the source goes on after the tag (its end when the tag never closes).
    end: usize,
}

/// Scans the tag whose inside starts at `from` up to its `close`, found as minijinja's lexer
/// finds it: outside string literals, where as many brackets have closed as opened (`(`, `[`
/// and `{` alike, as its one balance counts them). Counts the operators on the way.
fn scan_tag<'a>(bytes: &'a [u8], from: usize, close: &[u8]) -> Tag<'a> {
    let mut operators = 0;
    let mut first_word = None;
    let mut balance = 0isize;
    let mut i = from;
    while i < bytes.len() {
        if balance == 0 && bytes[i..].starts_with(close) {
            return Tag {
                operators,
                first_word,
                end: i + close.len(),
            };
        }
        match bytes[i] {
            quote @ (b'\'' | b'"') => {
                // A backslash escapes the byte after it; the closing quote ends the literal.
                i += 1;
                while i < bytes.len() && bytes[i] != quote {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'(' | b'[' => {
                balance += 1;
                operators += 1;
            }
            b'{' => balance += 1,
            b')' | b']' | b'}' => balance -= 1,
            b'+' | b'-' | b'*' | b'/' | b'%' | b'~' | b'|' | b'.' | b'<' | b'>' | b'=' | b'!' => {
                operators += 1;
            }
            b if b.is_ascii_alphabetic() || b == b'_' => {
                let start = i;
                while i + 1 < bytes.len()
                    && (bytes[i + 1].is_ascii_alphanumeric() || bytes[i + 1] == b'_')
                {
                    i += 1;
                }
                let word = &bytes[start..=i];
                first_word.get_or_insert(word);
                if matches!(
                    word,
                    b"and" | b"or" | b"not" | b"in" | b"is" | b"if" | b"else"
                ) {
                    operators += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Tag {
        operators,
        first_word,
        end: bytes.len(),
    }
}

/// Where the `{% raw %}` block whose tag opens at `open` ends, after its `{% endraw %}` (the
/// source's end when it has none, where minijinja stops with an error); `None` when the tag
/// at `open` is not `{% raw %}`. minijinja's own test: `{%`, an optional `-` or `+`,
/// whitespace, `raw`, whitespace, an optional `-` or `+`, `%}`; then the first `{%` followed
/// by such a tag naming `endraw`.
fn raw_block_end(bytes: &[u8], open: usize) -> Option<usize> {
    let mut at = open + 2;
    if matches!(bytes.get(at), Some(b'-' | b'+')) {
        at += 1;
    }
    let mut from = basic_tag(bytes, at, b"raw", false)?;
    while let Some(start) = find(bytes, from, b"{%") {
        if let Some(end) = basic_tag(bytes, start + 2, b"endraw", true) {
            return Some(end);
        }
        from = start + 2;
    }
    Some(bytes.len())
}

/// minijinja's `skip_basic_tag`: from `at`, an optional `-` or `+` when `ws_control`,
/// whitespace, `name`, whitespace, an optional `-` or `+`, and `%}`; where the tag ends.
fn basic_tag(bytes: &[u8], mut at: usize, name: &[u8], ws_control: bool) -> Option<usize> {
    if ws_control && matches!(bytes.get(at), Some(b'-' | b'+')) {
        at += 1;
    }
    while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    if !bytes.get(at..)?.starts_with(name) {
        return None;
    }
    at += name.len();
    while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    if matches!(bytes.get(at), Some(b'-' | b'+')) {
        at += 1;
    }
    bytes.get(at..)?.starts_with(b"%}").then_some(at + 2)
}

/// The first `byte` of `bytes` at or after `from`.
fn memchr(byte: u8, bytes: &[u8], from: usize) -> Option<usize> {
    bytes
        .get(from..)?
        .iter()
        .position(|&b| b == byte)
        .map(|i| from + i)
}

/// The first `needle` in `bytes` at or after `from`.
fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| from + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The operators `check_chains` finds in the one tag of `source`.
    fn operators(source: &str) -> usize {
        let close: &[u8] = if source.starts_with("{{") {
            b"}}"
        } else {
            b"%}"
        };
        scan_tag(source.as_bytes(), 2, close).operators
    }

    #[test]
    fn a_chain_after_a_dict_literal_is_counted_to_the_tag_end() {
        // The first `}}` closes the inner dict, not the tag: minijinja reads the whole chain
        // as one expression.
        let source = format!(
            "{{{{ {{\"a\": {{\"b\": 1}}}}.a.b{} }}}}",
            " ~ \"x\"".repeat(100_000)
        );
        let err = check_chains(&source).expect_err("a chain of 100002 operators");
        assert!(
            err.to_string().contains("a tag chains 100002 operators"),
            "{err}"
        );
        assert!(matches!(err, ChatError::Template { line: Some(1), .. }));
    }

    #[test]
    fn tag_ends_and_operators_are_found_as_minijinja_finds_them() {
        // A `}}` or `%}` inside a string, a dict or a list does not end the tag.
        assert_eq!(operators("{{ '}}' ~ a }}"), 1);
        assert_eq!(operators("{{ {'k': {'j': 1}}.k.j ~ 1 }}"), 3);
        assert_eq!(operators("{{ [[1]] | length }}"), 3);
        assert_eq!(operators("{% set x = '%}' ~ \"\\\"%}\" %}"), 2);
        assert_eq!(operators("{% if a and not b %}"), 3);
        // A close that is not this tag's kind does not end it.
        assert_eq!(operators("{{ a %} ~ b }}"), 2);
        // What follows the tag is not counted.
        assert_eq!(operators("{{ a }} + b + c"), 0);
    }

    #[test]
    fn raw_blocks_and_comments_are_skipped_and_nothing_hides_in_them() {
        let chain = format!("{{{{ 1{} }}}}", " + 1".repeat(CHAT_MAX_CHAIN + 1));
        for wrapper in [
            "{% raw %}{{ \" {% endraw %}",
            "{%- raw -%} {{ ' {%+ endraw +%}",
            "{# {{ \" #}",
            "{{ '#}' }}",
        ] {
            let source = format!("{wrapper}{chain}");
            let err = check_chains(&source).expect_err(wrapper);
            assert!(
                err.to_string().contains("chains 501 operators"),
                "{wrapper}: {err}"
            );
        }
        // Inside a raw block, nothing is a tag.
        let raw = format!("{{% raw %}}{chain}{{% endraw %}}");
        check_chains(&raw).expect("raw text");
        let unclosed = format!("{{% raw %}}{chain}");
        check_chains(&unclosed).expect("raw to the end");
        // `{% rawx %}` is no raw block.
        let not_raw = format!("{{% rawx %}}{chain}");
        assert!(check_chains(&not_raw).is_err());
    }

    #[test]
    fn elif_branches_are_counted_across_the_template() {
        let at_bound = format!(
            "{{% if 0 %}}{}{{% endif %}}",
            "{% elif 0 %}".repeat(CHAT_MAX_CHAIN)
        );
        check_chains(&at_bound).expect("500 branches");
        let over = format!(
            "{{% if 0 %}}{}{{% endif %}}",
            "{%- elif 0 -%}".repeat(CHAT_MAX_CHAIN + 1)
        );
        let err = check_chains(&over).expect_err("501 branches");
        assert!(
            err.to_string().contains("more than 500 elif branches"),
            "{err}"
        );
    }
}
