//! Mutations of valid files, for the fuzz tests of the workspace's file readers: a real file
//! goes in, a malformed or hostile variant of it comes out, and the reader must answer it with
//! `Ok` or a typed error, never a panic, an abort or an allocation without bound.
//!
//! - [`bytes`]: bit flips, overwritten bytes, truncation, deleted, copied and repeated ranges,
//!   and hostile tokens (huge, negative and overflowing numbers, NUL, invalid UTF-8) inserted
//!   anywhere.
//! - [`json`]: one edit of the parsed document, written back as text: a value replaced by a
//!   hostile one (`1e308`, `2^64`, `-1`, `1e12`, a wrong type, `..` and absolute paths), a key
//!   removed, a key duplicated, a key added, a value nested hundreds of levels deep, a huge
//!   list or string; now and then followed by a byte mutation of the text.
//! - [`config`]: the `ProptestConfig` of a fuzz test, its case count from `ATTN_FUZZ_CASES`.
//!
//! Each mutated value carries a one-line description of what was done ([`Mutated::what`]),
//! which the tests print when a case fails.

use std::fmt;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config as ProptestConfig, RngSeed};
use serde_json::Value;

/// Cases a fast reader's fuzz test runs unless `ATTN_FUZZ_CASES` says otherwise.
pub const DEFAULT_CASES: u32 = 3000;

/// The seed of every fuzz test unless `ATTN_FUZZ_SEED` says otherwise: the same cases on every
/// run, so that a failure repeats.
pub const DEFAULT_SEED: u64 = 0x5eed_f022;

/// `ATTN_FUZZ_CASES` (else [`DEFAULT_CASES`]) divided by `share`: a reader that costs `share`
/// times a fast one's time per case runs that many times fewer cases, at least one.
///
/// # Panics
///
/// Panics when `ATTN_FUZZ_CASES` or `ATTN_FUZZ_SEED` is set but not a whole number.
pub fn cases(share: u32) -> u32 {
    let total = env_number("ATTN_FUZZ_CASES").map_or(DEFAULT_CASES, |n| {
        u32::try_from(n).unwrap_or_else(|_| panic!("ATTN_FUZZ_CASES={n} is more than 2^32"))
    });
    (total / share.max(1)).max(1)
}

/// The proptest settings of a fuzz test that costs `share` fast cases per case ([`cases`]):
/// seeded by `ATTN_FUZZ_SEED` (else [`DEFAULT_SEED`]), and with no regression files written
/// into the source tree (a failing case is printed, with its seed, instead).
pub fn config(share: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(share),
        rng_seed: RngSeed::Fixed(env_number("ATTN_FUZZ_SEED").unwrap_or(DEFAULT_SEED)),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn env_number(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a whole number")),
    )
}

/// A mutated file and what was done to it.
#[derive(Clone)]
pub struct Mutated<T> {
    /// The mutated contents.
    pub value: T,
    /// The mutations, in the order they were made.
    pub what: String,
}

impl<T: AsRef<[u8]>> fmt::Debug for Mutated<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.value.as_ref();
        let head = String::from_utf8_lossy(&bytes[..bytes.len().min(160)]);
        write!(
            f,
            "{} ({} bytes, starting {head:?})",
            self.what,
            bytes.len()
        )
    }
}

/// Numbers that overflow, underflow or mean nothing as a size: `1e308`, `2^64`, `-1`, `1e12`,
/// `2^63`, `2^32`, `u64::MAX`, `0`, a fraction, `1e-400`, and a 400-digit integer.
pub const HOSTILE_NUMBERS: [&str; 16] = [
    "1e308",
    "-1e308",
    "18446744073709551616",
    "18446744073709551615",
    "-1",
    "1e12",
    "1000000000000",
    "9223372036854775808",
    "-9223372036854775809",
    "4294967296",
    "0",
    "-0",
    "1.5",
    "1e-400",
    "340282366920938463463374607431768211456",
    "1e400",
];

/// Values of the wrong type, and strings a reader must not act on: paths that leave a folder,
/// NUL, a lone surrogate, an empty string.
pub const HOSTILE_VALUES: [&str; 17] = [
    "\"../../../../etc/passwd\"",
    "\"/etc/passwd\"",
    "\"..\"",
    "\".\"",
    "\"\"",
    "\"a\\u0000b\"",
    "\"\\ud800\"",
    "\"\\\\\"",
    "\"1e308\"",
    "true",
    "false",
    "null",
    "[]",
    "{}",
    "[1e308, -1, 18446744073709551616]",
    "{\"\": null}",
    "\"{{ x }}{% for i in range(99) %}\"",
];

/// Byte strings inserted into a file: the hostile JSON values, and bytes no text reader
/// expects.
const HOSTILE_BYTES: [&[u8]; 9] = [
    b"\0",
    b"\xff\xfe",
    b"\xc3",
    b"\xed\xa0\x80",
    b"{",
    b"]",
    b"\"",
    b",",
    b"\r\n",
];

/// One edit of a byte string.
#[derive(Clone, Debug)]
enum ByteEdit {
    Flip {
        at: Index,
        mask: u8,
    },
    Set {
        at: Index,
        byte: u8,
    },
    Truncate {
        at: Index,
    },
    Delete {
        at: Index,
        len: usize,
    },
    Insert {
        at: Index,
        token: Index,
    },
    Copy {
        from: Index,
        len: usize,
        to: Index,
    },
    Repeat {
        from: Index,
        len: usize,
        times: usize,
    },
    Overwrite {
        at: Index,
        bytes: Vec<u8>,
    },
}

fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        3 => (any::<Index>(), 1..=255u8).prop_map(|(at, mask)| ByteEdit::Flip { at, mask }),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| ByteEdit::Set { at, byte }),
        1 => any::<Index>().prop_map(|at| ByteEdit::Truncate { at }),
        1 => (any::<Index>(), 1..64usize).prop_map(|(at, len)| ByteEdit::Delete { at, len }),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(at, token)| ByteEdit::Insert { at, token }),
        1 => (any::<Index>(), 1..256usize, any::<Index>())
            .prop_map(|(from, len, to)| ByteEdit::Copy { from, len, to }),
        1 => (any::<Index>(), 1..64usize, 2..2000usize)
            .prop_map(|(from, len, times)| ByteEdit::Repeat { from, len, times }),
        1 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| ByteEdit::Overwrite { at, bytes }),
    ]
}

/// The tokens [`ByteEdit::Insert`] chooses from.
fn insert_tokens() -> Vec<&'static [u8]> {
    HOSTILE_NUMBERS
        .iter()
        .chain(HOSTILE_VALUES.iter())
        .map(|s| s.as_bytes())
        .chain(HOSTILE_BYTES)
        .collect()
}

/// A position in `0..=len` (an insertion point) or, for `len > 0`, in `0..len`.
fn position(index: &Index, len: usize, inclusive: bool) -> usize {
    let size = if inclusive { len + 1 } else { len.max(1) };
    index.index(size).min(len)
}

/// Applies one edit; returns its description.
fn apply_byte_edit(bytes: &mut Vec<u8>, edit: &ByteEdit) -> String {
    let len = bytes.len();
    match edit {
        ByteEdit::Flip { at, mask } if len > 0 => {
            let at = position(at, len, false);
            bytes[at] ^= mask;
            format!("flip {mask:#04x} at byte {at}")
        }
        ByteEdit::Set { at, byte } if len > 0 => {
            let at = position(at, len, false);
            bytes[at] = *byte;
            format!("set byte {at} to {byte:#04x}")
        }
        ByteEdit::Truncate { at } => {
            let at = position(at, len, false);
            bytes.truncate(at);
            format!("truncate to {at} bytes")
        }
        ByteEdit::Delete { at, len: n } => {
            let at = position(at, len, true);
            let end = (at + n).min(len);
            bytes.drain(at..end);
            format!("delete bytes {at}..{end}")
        }
        ByteEdit::Insert { at, token } => {
            let tokens = insert_tokens();
            let token = tokens[token.index(tokens.len())];
            let at = position(at, len, true);
            bytes.splice(at..at, token.iter().copied());
            format!("insert {:?} at byte {at}", String::from_utf8_lossy(token))
        }
        ByteEdit::Copy { from, len: n, to } => {
            let from = position(from, len, true);
            let end = (from + n).min(len);
            let piece = bytes[from..end].to_vec();
            let to = position(to, len, true);
            bytes.splice(to..to, piece);
            format!("copy bytes {from}..{end} to byte {to}")
        }
        ByteEdit::Repeat {
            from,
            len: n,
            times,
        } => {
            let from = position(from, len, true);
            let end = (from + n).min(len);
            let piece = bytes[from..end].repeat(*times);
            bytes.splice(end..end, piece);
            format!("repeat bytes {from}..{end} {times} more times")
        }
        ByteEdit::Overwrite { at, bytes: new } => {
            let at = position(at, len, true);
            let end = (at + new.len()).min(len);
            bytes.splice(at..end, new.iter().copied());
            format!("overwrite bytes {at}..{end} with {new:02x?}")
        }
        ByteEdit::Flip { .. } | ByteEdit::Set { .. } => "no edit (empty file)".into(),
    }
}

/// One to four byte edits of `original`.
pub fn bytes(original: Vec<u8>) -> impl Strategy<Value = Mutated<Vec<u8>>> {
    let original = Arc::new(original);
    prop::collection::vec(byte_edit(), 1..=4).prop_map(move |edits| {
        let mut value = original.as_ref().clone();
        let what: Vec<String> = edits
            .iter()
            .map(|edit| apply_byte_edit(&mut value, edit))
            .collect();
        Mutated {
            value,
            what: what.join("; "),
        }
    })
}

/// One edit of a JSON document, at the node of pre-order index `node` (the root is 0).
#[derive(Clone, Debug)]
enum JsonEdit {
    /// The node becomes a hostile number or value.
    Replace { node: Index, with: Index },
    /// The node is left out (a key of its object, an element of its list; the root: an empty
    /// file).
    Remove { node: Index },
    /// A key is written twice, the second time with a hostile value.
    Duplicate { node: Index, with: Index },
    /// An object gains a key (a list, an element), with a hostile value.
    Add { node: Index, with: Index },
    /// The node is wrapped in `depth` lists.
    Nest { node: Index, depth: usize },
    /// The node becomes a list of `count` copies of itself (of a number when it is large).
    Widen { node: Index, count: usize },
    /// The node becomes a string of `len` characters.
    LongString { node: Index, len: usize },
}

fn json_edit() -> impl Strategy<Value = JsonEdit> {
    prop_oneof![
        6 => (any::<Index>(), any::<Index>()).prop_map(|(node, with)| JsonEdit::Replace { node, with }),
        2 => any::<Index>().prop_map(|node| JsonEdit::Remove { node }),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(node, with)| JsonEdit::Duplicate { node, with }),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(node, with)| JsonEdit::Add { node, with }),
        1 => (any::<Index>(), prop_oneof![1..8usize, 100..400usize])
            .prop_map(|(node, depth)| JsonEdit::Nest { node, depth }),
        1 => (any::<Index>(), 2..50_000usize).prop_map(|(node, count)| JsonEdit::Widen { node, count }),
        1 => (any::<Index>(), prop_oneof![0..4usize, 100_000..300_000usize])
            .prop_map(|(node, len)| JsonEdit::LongString { node, len }),
    ]
}

/// A hostile value as JSON text: one of [`HOSTILE_NUMBERS`] and [`HOSTILE_VALUES`].
fn hostile(with: &Index) -> &'static str {
    let all = HOSTILE_NUMBERS.len() + HOSTILE_VALUES.len();
    let i = with.index(all);
    HOSTILE_NUMBERS
        .get(i)
        .copied()
        .unwrap_or_else(|| HOSTILE_VALUES[i - HOSTILE_NUMBERS.len()])
}

/// Writes `value` as JSON, applying `edit` at the node whose pre-order index is `target`.
struct JsonWriter<'a> {
    edit: &'a JsonEdit,
    target: usize,
    next: usize,
    out: String,
}

impl JsonWriter<'_> {
    /// Writes the node `value`; its pre-order index is the writer's next.
    fn node(&mut self, value: &Value) {
        let index = self.next;
        self.next += 1;
        if index != self.target {
            return self.plain(value);
        }
        match self.edit {
            JsonEdit::Replace { with, .. } => self.out.push_str(hostile(with)),
            JsonEdit::Nest { depth, .. } => {
                self.out.push_str(&"[".repeat(*depth));
                self.plain(value);
                self.out.push_str(&"]".repeat(*depth));
            }
            JsonEdit::Widen { count, .. } => {
                let text = value.to_string();
                let item = if text.len() > 64 { "1e308" } else { &text };
                self.out.push('[');
                self.out.push_str(&vec![item; *count].join(","));
                self.out.push(']');
            }
            JsonEdit::LongString { len, .. } => {
                self.out.push('"');
                self.out.push_str(&"a".repeat(*len));
                self.out.push('"');
            }
            JsonEdit::Add { with, .. } => match value {
                Value::Object(map) => {
                    self.out.push_str("{\"__added\": ");
                    self.out.push_str(hostile(with));
                    for (key, item) in map {
                        self.out.push(',');
                        self.key(key);
                        self.plain(item);
                    }
                    self.out.push('}');
                }
                Value::Array(items) => {
                    self.out.push('[');
                    for item in items {
                        self.plain(item);
                        self.out.push(',');
                    }
                    self.out.push_str(hostile(with));
                    self.out.push(']');
                }
                _ => self.out.push_str(hostile(with)),
            },
            // At the root: an empty file, or the value once more after itself.
            JsonEdit::Remove { .. } => {}
            JsonEdit::Duplicate { .. } => {
                let text = value.to_string();
                self.out.push_str(&text);
                self.out.push_str(&text);
            }
        }
    }

    /// Writes `value`'s children through [`node`](Self::node), removing or duplicating the
    /// target where it is a child.
    fn plain(&mut self, value: &Value) {
        match value {
            Value::Object(map) => {
                self.out.push('{');
                let mut first = true;
                for (key, item) in map {
                    let is_target = self.next == self.target;
                    match self.edit {
                        JsonEdit::Remove { .. } if is_target => {
                            self.skip(item);
                            continue;
                        }
                        JsonEdit::Duplicate { with, .. } if is_target => {
                            self.comma(&mut first);
                            self.key(key);
                            self.skip(item);
                            self.out.push_str(&item.to_string());
                            self.out.push(',');
                            self.key(key);
                            self.out.push_str(hostile(with));
                            continue;
                        }
                        _ => {}
                    }
                    self.comma(&mut first);
                    self.key(key);
                    self.node(item);
                }
                self.out.push('}');
            }
            Value::Array(items) => {
                self.out.push('[');
                let mut first = true;
                for item in items {
                    if matches!(self.edit, JsonEdit::Remove { .. }) && self.next == self.target {
                        self.skip(item);
                        continue;
                    }
                    self.comma(&mut first);
                    self.node(item);
                }
                self.out.push(']');
            }
            scalar => self.out.push_str(&scalar.to_string()),
        }
    }

    fn comma(&mut self, first: &mut bool) {
        if !*first {
            self.out.push(',');
        }
        *first = false;
    }

    fn key(&mut self, key: &str) {
        self.out.push_str(&Value::from(key).to_string());
        self.out.push(':');
    }

    /// Counts the nodes of `value` without writing them.
    fn skip(&mut self, value: &Value) {
        self.next += nodes(value);
    }
}

/// The number of nodes of `value`, itself included.
fn nodes(value: &Value) -> usize {
    1 + match value {
        Value::Object(map) => map.values().map(nodes).sum(),
        Value::Array(items) => items.iter().map(nodes).sum(),
        _ => 0,
    }
}

/// Writes `value` with `edit` made; returns the text and a description.
fn apply_json_edit(value: &Value, edit: &JsonEdit) -> (String, String) {
    let node = match edit {
        JsonEdit::Replace { node, .. }
        | JsonEdit::Remove { node }
        | JsonEdit::Duplicate { node, .. }
        | JsonEdit::Add { node, .. }
        | JsonEdit::Nest { node, .. }
        | JsonEdit::Widen { node, .. }
        | JsonEdit::LongString { node, .. } => node,
    };
    let target = node.index(nodes(value));
    let mut writer = JsonWriter {
        edit,
        target,
        next: 0,
        out: String::new(),
    };
    writer.node(value);
    let what = match edit {
        JsonEdit::Replace { with, .. } => format!("node {target} replaced by {}", hostile(with)),
        JsonEdit::Remove { .. } => format!("node {target} removed"),
        JsonEdit::Duplicate { with, .. } => {
            format!("node {target}'s key duplicated with {}", hostile(with))
        }
        JsonEdit::Add { with, .. } => format!("node {target} given an entry {}", hostile(with)),
        JsonEdit::Nest { depth, .. } => format!("node {target} nested {depth} lists deep"),
        JsonEdit::Widen { count, .. } => format!("node {target} repeated {count} times in a list"),
        JsonEdit::LongString { len, .. } => {
            format!("node {target} replaced by a string of {len} characters")
        }
    };
    (writer.out, what)
}

/// One edit of the JSON document `original` (see the module's documentation), followed one
/// time in five by byte edits of the text.
///
/// # Panics
///
/// Panics when `original` is not JSON.
pub fn json(original: &str) -> impl Strategy<Value = Mutated<String>> + use<> {
    let value: Arc<Value> = Arc::new(serde_json::from_str(original).expect("a JSON document"));
    (
        json_edit(),
        prop::option::weighted(0.2, prop::collection::vec(byte_edit(), 1..=2)),
    )
        .prop_map(move |(edit, byte_edits)| {
            let (text, mut what) = apply_json_edit(&value, &edit);
            let text = match byte_edits {
                None => text,
                Some(edits) => {
                    let mut bytes = text.into_bytes();
                    for edit in &edits {
                        what.push_str("; ");
                        what.push_str(&apply_byte_edit(&mut bytes, edit));
                    }
                    // The readers take bytes; a text reader sees invalid UTF-8 as U+FFFD here,
                    // and the byte strategy gives it raw bytes.
                    String::from_utf8_lossy(&bytes).into_owned()
                }
            };
            Mutated { value: text, what }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    fn draw<T>(strategy: impl Strategy<Value = T>, n: usize) -> Vec<T> {
        let mut runner = TestRunner::deterministic();
        (0..n)
            .map(|_| strategy.new_tree(&mut runner).expect("a value").current())
            .collect()
    }

    #[test]
    fn json_edits_change_the_document_and_mostly_keep_it_json() {
        let original = r#"{"a": 1, "b": [2, 3, {"c": "d"}], "e": null}"#;
        let cases = draw(json(original), 400);
        let reparsed = serde_json::from_str::<Value>(original).expect("json");
        let changed = cases
            .iter()
            .filter(|m| serde_json::from_str::<Value>(&m.value).ok() != Some(reparsed.clone()))
            .count();
        assert!(changed > 300, "only {changed} of 400 changed");
        let still_json = cases
            .iter()
            .filter(|m| serde_json::from_str::<Value>(&m.value).is_ok())
            .count();
        assert!(still_json > 150, "only {still_json} of 400 still parse");
        assert!(cases.iter().all(|m| !m.what.is_empty()));
    }

    #[test]
    fn a_duplicated_key_appears_twice_and_a_removed_one_not_at_all() {
        let value: Value = serde_json::from_str(r#"{"a": 1, "b": 2}"#).expect("json");
        // Node 0 is the object, 1 is "a", 2 is "b".
        let (text, _) = apply_json_edit(
            &value,
            &JsonEdit::Remove {
                node: node_index(1, 3),
            },
        );
        assert_eq!(text, r#"{"b":2}"#);
        let (text, _) = apply_json_edit(
            &value,
            &JsonEdit::Duplicate {
                node: node_index(2, 3),
                with: node_index(4, HOSTILE_NUMBERS.len() + HOSTILE_VALUES.len()),
            },
        );
        assert_eq!(text, r#"{"a":1,"b":2,"b":-1}"#);
    }

    /// The `Index` that selects `i` of `n`.
    fn node_index(i: usize, n: usize) -> Index {
        let mut runner = TestRunner::deterministic();
        loop {
            let index = any::<Index>()
                .new_tree(&mut runner)
                .expect("an index")
                .current();
            if index.index(n) == i {
                return index;
            }
        }
    }

    #[test]
    fn byte_edits_stay_within_the_file_and_say_what_they_did() {
        for mutated in draw(bytes(b"0123456789".to_vec()), 500) {
            assert!(!mutated.what.is_empty());
            assert!(mutated.value.len() <= 10 + 64 * 2000 * 4 + 1000);
        }
        for mutated in draw(bytes(Vec::new()), 50) {
            assert!(!mutated.what.is_empty());
        }
    }

    #[test]
    fn cases_divide_by_the_share_and_never_reach_zero() {
        // ATTN_FUZZ_CASES may be set for the whole run; the division holds either way.
        let total = cases(1);
        assert_eq!(cases(10), (total / 10).max(1));
        assert_eq!(cases(u32::MAX), 1);
    }
}
