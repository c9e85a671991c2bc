//! Python's text forms of JSON values: `repr()` and `json.dumps()`.
//!
//! LangChain's approximate counter measures some parts of a message by the length of
//! their Python text form: tool calls and unknown content blocks by `repr(...)`, tool
//! schemas by `json.dumps(...)`. Parity with it means producing the same number of
//! characters (Python `len`, i.e. code points), so these writers follow CPython's
//! formatting rules: quote choice and escapes of `str.__repr__`, `True`/`False`/`None`,
//! the shortest round-trip float repr with its exponent style, and `json.dumps`'s
//! default `", "` / `": "` separators with `ensure_ascii`.
//!
//! ```
//! use keel_tokens::pyrepr::{py_json_dumps, py_repr};
//! use serde_json::json;
//!
//! let v = json!({"ok": true, "n": 1e20, "s": "it's"});
//! assert_eq!(py_repr(&v), r#"{'n': 1e+20, 'ok': True, 's': "it's"}"#);
//! assert_eq!(py_json_dumps(&json!({"k": "é"})), r#"{"k": "\u00e9"}"#);
//! ```
//!
//! Limitation: CPython escapes every code point that is not printable in its Unicode
//! database. This module knows the control, format, separator, private-use and
//! non-character code points; other code points unassigned in Unicode are treated as
//! printable (they do not occur in real text).

use std::fmt::Write as _;

use serde_json::{Number, Value};

/// `repr(value)` as CPython prints the equivalent `dict`/`list`/`str`/`int`/`float`.
pub fn py_repr(value: &Value) -> String {
    let mut out = String::new();
    write_repr(value, &mut out);
    out
}

/// `json.dumps(value)` with Python's defaults (`ensure_ascii=True`, `", "` and `": "`
/// separators, keys in the map's order).
pub fn py_json_dumps(value: &Value) -> String {
    let mut out = String::new();
    write_json_dumps(value, &mut out);
    out
}

/// Appends `repr(value)` to `out`.
pub fn write_repr(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_str_repr(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => write_map_repr(map, out),
    }
}

/// Appends `repr(dict)` for a JSON object.
pub fn write_map_repr(map: &serde_json::Map<String, Value>, out: &mut String) {
    out.push('{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_str_repr(k, out);
        out.push_str(": ");
        write_repr(v, out);
    }
    out.push('}');
}

/// Appends `json.dumps(value)` to `out`.
pub fn write_json_dumps(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_json_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_json_dumps(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_json_str(k, out);
                out.push_str(": ");
                write_json_dumps(v, out);
            }
            out.push('}');
        }
    }
}

/// Integers print as written; other numbers are Python floats (`json.loads` makes a
/// float of anything with a fraction or exponent, and so does serde_json).
fn write_number(n: &Number, out: &mut String) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(f) = n.as_f64() {
        write_float_repr(f, out);
    } else {
        let _ = write!(out, "{n}");
    }
}

/// CPython's `float.__repr__`: the shortest digits that round-trip, in fixed notation
/// when the decimal exponent is in [-4, 16), else `d.ddde+XX`.
pub fn write_float_repr(f: f64, out: &mut String) {
    if f.is_nan() {
        out.push_str("nan");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f < 0.0 { "-inf" } else { "inf" });
        return;
    }
    // Rust's `{:e}` is also shortest-round-trip: "-1.2345e-5", "1e20", "0e0".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        if point <= 0 {
            out.push_str("0.");
            for _ in 0..(-point) {
                out.push('0');
            }
            out.push_str(&digits);
        } else {
            let point = point as usize;
            if digits.len() <= point {
                out.push_str(&digits);
                for _ in digits.len()..point {
                    out.push('0');
                }
                out.push_str(".0");
            } else {
                out.push_str(&digits[..point]);
                out.push('.');
                out.push_str(&digits[point..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exp.abs());
    }
}

/// CPython's `str.__repr__`.
pub fn write_str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x7f => out.push(c),
            c if is_printable(c) => out.push(c),
            c => {
                let cp = c as u32;
                if cp <= 0xff {
                    let _ = write!(out, "\\x{cp:02x}");
                } else if cp <= 0xffff {
                    let _ = write!(out, "\\u{cp:04x}");
                } else {
                    let _ = write!(out, "\\U{cp:08x}");
                }
            }
        }
    }
    out.push(quote);
}

/// `json.dumps` of a string with `ensure_ascii=True`.
fn write_json_str(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Non-ASCII code points CPython's `str.isprintable()` rejects: categories Cc, Cf, Zs,
/// Zl, Zp, Co and the non-characters (Cn). Sorted, inclusive ranges.
const NON_PRINTABLE: &[(u32, u32)] = &[
    (0x80, 0xa0),
    (0xad, 0xad),
    (0x600, 0x605),
    (0x61c, 0x61c),
    (0x6dd, 0x6dd),
    (0x70f, 0x70f),
    (0x890, 0x891),
    (0x8e2, 0x8e2),
    (0x1680, 0x1680),
    (0x180e, 0x180e),
    (0x2000, 0x200f),
    (0x2028, 0x202f),
    (0x205f, 0x2064),
    (0x2066, 0x206f),
    (0x3000, 0x3000),
    (0xe000, 0xf8ff),
    (0xfdd0, 0xfdef),
    (0xfeff, 0xfeff),
    (0xfff9, 0xfffb),
    (0xfffe, 0xffff),
    (0x110bd, 0x110bd),
    (0x110cd, 0x110cd),
    (0x13430, 0x1343f),
    (0x1bca0, 0x1bca3),
    (0x1d173, 0x1d17a),
    (0xe0001, 0xe0001),
    (0xe0020, 0xe007f),
    (0xf0000, 0x10ffff),
];

fn is_printable(c: char) -> bool {
    let cp = c as u32;
    // Every plane ends with two non-characters.
    if cp & 0xfffe == 0xfffe {
        return false;
    }
    let idx = NON_PRINTABLE.partition_point(|&(_, hi)| hi < cp);
    !NON_PRINTABLE
        .get(idx)
        .is_some_and(|&(lo, hi)| lo <= cp && cp <= hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn float(f: f64) -> String {
        let mut s = String::new();
        write_float_repr(f, &mut s);
        s
    }

    #[test]
    fn floats_follow_cpython() {
        assert_eq!(float(1.5), "1.5");
        assert_eq!(float(100.0), "100.0");
        assert_eq!(float(1e16), "1e+16");
        assert_eq!(float(1e15), "1000000000000000.0");
        assert_eq!(float(0.0001), "0.0001");
        assert_eq!(float(0.00001), "1e-05");
        assert_eq!(float(-0.0), "-0.0");
        assert_eq!(float(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(float(1.5e300), "1.5e+300");
        assert_eq!(float(123.456), "123.456");
    }

    #[test]
    fn strings_follow_cpython() {
        assert_eq!(py_repr(&json!("a'b")), r#""a'b""#);
        assert_eq!(py_repr(&json!("a'b\"c")), r#"'a\'b"c'"#);
        assert_eq!(py_repr(&json!("t\tn\n\u{1}\u{7f}")), r"'t\tn\n\x01\x7f'");
        assert_eq!(
            py_repr(&json!("é中😀\u{a0}\u{200b}")),
            "'é中😀\\xa0\\u200b'"
        );
        assert_eq!(py_repr(&json!("\\")), r"'\\'");
    }

    #[test]
    fn json_dumps_escapes_non_ascii() {
        assert_eq!(
            py_json_dumps(&json!(["😀", 1, null])),
            r#"["\ud83d\ude00", 1, null]"#
        );
    }
}
