//! Checks of a template's source before minijinja parses it: chains of operators and of
//! `elif` branches that its parser would build into trees too deep for the stack.

use super::{CHAT_MAX_CHAIN, ChatError};

/// Refuses a template with a tag that chains more than [`CHAT_MAX_CHAIN`] operators, or with
/// more than [`CHAT_MAX_CHAIN`] `elif` branches, before minijinja parses it into a tree too
/// deep for the stack. Tags are `{{ ... }}` and `{% ... %}`; comments and the insides of string
/// literals are skipped.
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
            Some(b'%') => b"%}",
            Some(b'#') => {
                at = find(bytes, open + 2, b"#}").map_or(bytes.len(), |end| end + 2);
                continue;
            }
            _ => {
                at = open + 1;
                continue;
            }
        };
        let mut operators = 0;
        let mut first_word = None;
        let mut i = open + 2;
        while i < bytes.len() && !bytes[i..].starts_with(close) {
            match bytes[i] {
                quote @ (b'\'' | b'"') => {
                    i += 1;
                    while i < bytes.len() && bytes[i] != quote {
                        i += if bytes[i] == b'\\' { 2 } else { 1 };
                    }
                }
                b'+' | b'-' | b'*' | b'/' | b'%' | b'~' | b'|' | b'(' | b'[' | b'.' | b'<'
                | b'>' | b'=' | b'!' => operators += 1,
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
        if operators > CHAT_MAX_CHAIN {
            return Err(too_deep(
                open,
                format!(
                    "a tag chains {operators} operators, more than the {CHAT_MAX_CHAIN} this \
                     crate compiles in one tag"
                ),
            ));
        }
        if close == b"%}" && first_word == Some(b"elif") {
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
        at = i + 2;
    }
    Ok(())
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
