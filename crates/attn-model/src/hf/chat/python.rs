//! What transformers adds to Jinja2, written as Python writes it: `raise_exception`,
//! `strftime_now`, values printed as Python prints them (`None`, `True`), and `tojson` as
//! Python's `json.dumps` (floats as Python's `repr`).

use std::fmt;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Output, State, Value};

use super::limits::CHAT_PROMPT_MAX_BYTES;

/// The error `raise_exception` fails a rendering with, found again in
/// [`render_error`](super::error::render_error) to tell it from the engine's own errors.
#[derive(Debug)]
pub(super) struct RaisedByTemplate(pub(super) String);

impl fmt::Display for RaisedByTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedByTemplate {}

/// transformers' `raise_exception(message)`: fails the rendering with `message`.
pub(super) fn raise_exception(message: Value) -> Result<Value, Error> {
    let message = message.to_string();
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(RaisedByTemplate(message)))
}

/// transformers' `strftime_now(format)`: the local time through Python's `strftime`
/// (chrono's specifiers are Python's on Linux, `%-d` included).
pub(super) fn strftime_now(format: &str) -> Result<String, Error> {
    use std::fmt::Write;
    let mut text = String::new();
    write!(text, "{}", chrono::Local::now().format(format)).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: {format:?} is not a valid time format"),
        )
    })?;
    Ok(text)
}

/// Prints values as Jinja2 prints Python's: `None`, `True` and `False` (minijinja's own
/// formatter writes `none`, `true`, `false`); everything else as minijinja does.
pub(super) fn python_formatter(
    out: &mut Output,
    state: &State,
    value: &Value,
) -> Result<(), Error> {
    let text = match value.kind() {
        ValueKind::None => "None",
        ValueKind::Bool if value.is_true() => "True",
        ValueKind::Bool => "False",
        _ => return minijinja::escape_formatter(out, state, value),
    };
    fmt::Write::write_str(out, text).map_err(Error::from)
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`: Python's `json.dumps` with those arguments.
pub(super) fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let indent: Option<Value> = kwargs.get("indent")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(indent) if indent.is_none() => None,
        Some(indent) => Some(match indent.as_str() {
            Some(text) => text.to_string(),
            None => {
                let width = i64::try_from(indent)?;
                if width > TOJSON_MAX_INDENT {
                    return Err(invalid(&format!(
                        "tojson: indent {width} is wider than the {TOJSON_MAX_INDENT} spaces \
                         this filter writes"
                    )));
                }
                " ".repeat(usize::try_from(width.max(0)).unwrap_or(0))
            }
        }),
    };
    let (item_separator, key_separator) = match separators {
        Some(pair) if !pair.is_none() => {
            let parts: Vec<String> = pair
                .try_iter()?
                .map(|part| part.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| invalid("tojson: separators must be two strings"))?;
            match <[String; 2]>::try_from(parts) {
                Ok([item, key]) => (item, key),
                Err(_) => return Err(invalid("tojson: separators must be two strings")),
            }
        }
        _ if indent.is_some() => (",".to_string(), ": ".to_string()),
        _ => (", ".to_string(), ": ".to_string()),
    };
    let style = JsonStyle {
        ensure_ascii: ensure_ascii.unwrap_or(false),
        indent,
        item_separator,
        key_separator,
        sort_keys: sort_keys.unwrap_or(false),
    };
    let mut out = String::new();
    style.write(value, 0, &mut out)?;
    Ok(Value::from(out))
}

/// The widest `indent` `tojson` takes as a number of spaces.
const TOJSON_MAX_INDENT: i64 = 1024;

/// Refuses a `tojson` output that has grown past [`CHAT_PROMPT_MAX_BYTES`] (a long indent or
/// separator repeated for every item and level).
fn check_tojson_length(out: &str) -> Result<(), Error> {
    if out.len() as u64 > CHAT_PROMPT_MAX_BYTES {
        return Err(invalid(&format!(
            "tojson: the JSON text passed {CHAT_PROMPT_MAX_BYTES} bytes"
        )));
    }
    Ok(())
}

fn invalid(message: &str) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.to_string())
}

/// The arguments of Python's `json.dumps` that transformers' `tojson` passes on.
struct JsonStyle {
    ensure_ascii: bool,
    indent: Option<String>,
    item_separator: String,
    key_separator: String,
    sort_keys: bool,
}

impl JsonStyle {
    /// Writes `value`, `level` containers deep, as `json.dumps` writes it.
    fn write(&self, value: &Value, level: usize, out: &mut String) -> Result<(), Error> {
        match value.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => out.push_str(&python_number(value)?),
            ValueKind::String => self.write_string(value.as_str().unwrap_or_default(), out),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.write_container(('[', ']'), items.len(), level, out, |i, out| {
                    self.write(&items[i], level + 1, out)
                })?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = value.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort();
                }
                self.write_container(('{', '}'), keys.len(), level, out, |i, out| {
                    self.write_string(&python_key(&keys[i])?, out);
                    out.push_str(&self.key_separator);
                    self.write(&value.get_item(&keys[i])?, level + 1, out)
                })?;
            }
            kind => {
                return Err(invalid(&format!(
                    "tojson: Object of type {kind} is not JSON serializable"
                )));
            }
        }
        Ok(())
    }

    /// `open`, the `count` items `write_item` writes with separators and indentation,
    /// `close`.
    fn write_container(
        &self,
        (open, close): (char, char),
        count: usize,
        level: usize,
        out: &mut String,
        mut write_item: impl FnMut(usize, &mut String) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        if count > 0 {
            for i in 0..count {
                if i > 0 {
                    out.push_str(&self.item_separator);
                }
                self.newline(level + 1, out)?;
                write_item(i, out)?;
                check_tojson_length(out)?;
            }
            self.newline(level, out)?;
        }
        out.push(close);
        Ok(())
    }

    /// With an indent, a new line indented `level` times.
    fn newline(&self, level: usize, out: &mut String) -> Result<(), Error> {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(indent);
                check_tojson_length(out)?;
            }
        }
        Ok(())
    }

    /// A JSON string as Python escapes it: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, other
    /// control characters as `\u00xx`, and with `ensure_ascii` everything outside ASCII's
    /// printable range as `\uxxxx` (UTF-16 surrogate pairs above U+FFFF).
    fn write_string(&self, text: &str, out: &mut String) {
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if c < ' ' || (self.ensure_ascii && !(' '..='~').contains(&c)) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A map key as `json.dumps` turns it into a string: strings as they are, numbers as
/// Python prints them, `true`, `false`, `null`.
fn python_key(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_string()),
        ValueKind::Number => python_number(key),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.into()),
        ValueKind::None => Ok("null".into()),
        kind => Err(invalid(&format!(
            "tojson: keys must be str, int, float, bool or None, not {kind}"
        ))),
    }
}

/// A number as `json.dumps` writes it: integers in full, floats as Python's `repr`.
fn python_number(value: &Value) -> Result<String, Error> {
    if value.is_integer() {
        return Ok(value.to_string());
    }
    Ok(python_float(f64::try_from(value.clone())?))
}

/// Python's `repr` of a float (as `json.dumps` writes it): the shortest digits that read
/// back to `x`, in positional notation from `1e-4` to below `1e16` (`0.0001`, `2.0`), else
/// in scientific notation with a signed exponent of at least two digits (`1e-05`, `1e+16`);
/// `NaN`, `Infinity` and `-Infinity` as `json.dumps` writes them.
fn python_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the same shortest digits: `-1.2345e-7`.
    let scientific = format!("{:e}", x.abs());
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` always writes an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` writes an integer exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if x < 0.0 { "-" } else { "" };
    if !(-4..16).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exponent_sign = if exponent < 0 { '-' } else { '+' };
        return format!(
            "{sign}{first}{fraction}e{exponent_sign}{:02}",
            exponent.abs()
        );
    }
    // The decimal point falls after `point` digits (before them all when it is <= 0).
    let point = exponent + 1;
    let positional = if point <= 0 {
        format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
    } else {
        let point = point as usize;
        if point >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point - digits.len()))
        } else {
            format!("{}.{}", &digits[..point], &digits[point..])
        }
    };
    format!("{sign}{positional}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_repr_matches_python() {
        // `repr(x)` in CPython 3.11.
        for (x, python) in [
            (1.0, "1.0"),
            (-2.5, "-2.5"),
            (0.1, "0.1"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456789.0, "123456789.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345e20, "1.2345e+20"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (-0.0, "-0.0"),
            (f64::INFINITY, "Infinity"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(python_float(x), python, "{x:e}");
        }
    }
}
