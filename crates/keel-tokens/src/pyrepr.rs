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
//! Each writer has a length twin (`repr_len`, `map_repr_len`, `str_repr_len`,
//! `json_dumps_len`, ...) that returns exactly Python's `len()` of the text the writer
//! produces, without building it: counters only need the length, and building the text
//! for every message of a long thread costs more than the rest of the counting. Writer
//! and twin share one per-character escape rule, so they cannot drift apart.
//!
//! ```
//! use keel_tokens::pyrepr::{json_dumps_len, py_json_dumps, py_repr, repr_len};
//! use serde_json::json;
//!
//! let v = json!({"path": "/tmp/a b", "n": -12, "ok": null, "s": "中\n"});
//! assert_eq!(repr_len(&v), py_repr(&v).chars().count());
//! assert_eq!(json_dumps_len(&v), py_json_dumps(&v).chars().count());
//! ```
//!
//! Limitation: CPython escapes every code point that is not printable in its Unicode
//! database. This module knows the control, format, separator, private-use and
//! non-character code points; other code points unassigned in Unicode are treated as
//! printable (they do not occur in real text).

use std::fmt::{self, Write as _};

use serde_json::{Map, Number, Value};

const PY_NONE: &str = "None";
const PY_TRUE: &str = "True";
const PY_FALSE: &str = "False";
const JSON_NULL: &str = "null";
const JSON_TRUE: &str = "true";
const JSON_FALSE: &str = "false";
/// Between the items of a list or dict, in both text forms.
const ITEM_SEP: &str = ", ";
/// Between a key and its value, in both text forms.
const KEY_SEP: &str = ": ";

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
        Value::Null => out.push_str(PY_NONE),
        Value::Bool(true) => out.push_str(PY_TRUE),
        Value::Bool(false) => out.push_str(PY_FALSE),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_str_repr(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(ITEM_SEP);
                }
                write_repr(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => write_map_repr(map, out),
    }
}

/// `len(repr(value))` in code points, without building the text: always equal to
/// `py_repr(value).chars().count()`.
pub fn repr_len(value: &Value) -> usize {
    repr_len_visiting(value, &mut |_| {})
}

/// [`repr_len`], also calling `on_non_ascii` with every non-ASCII code point the repr
/// copies unescaped, in order. Every other character of the repr is ASCII, so a caller
/// that weighs characters by script learns the whole text's composition.
pub fn repr_len_visiting<F: FnMut(char) + ?Sized>(value: &Value, on_non_ascii: &mut F) -> usize {
    match value {
        Value::Null => PY_NONE.len(),
        Value::Bool(true) => PY_TRUE.len(),
        Value::Bool(false) => PY_FALSE.len(),
        Value::Number(n) => number_len(n),
        Value::String(s) => str_repr_len_visiting(s, on_non_ascii),
        Value::Array(items) => {
            let mut len = 2 + separators_len(items.len());
            for item in items {
                len += repr_len_visiting(item, on_non_ascii);
            }
            len
        }
        Value::Object(map) => map_repr_len_visiting(map, on_non_ascii),
    }
}

/// Appends `repr(dict)` for a JSON object.
pub fn write_map_repr(map: &Map<String, Value>, out: &mut String) {
    out.push('{');
    for (i, (k, v)) in map.iter().enumerate() {
        if i > 0 {
            out.push_str(ITEM_SEP);
        }
        write_str_repr(k, out);
        out.push_str(KEY_SEP);
        write_repr(v, out);
    }
    out.push('}');
}

/// `len(repr(dict))` for a JSON object, without building the text.
pub fn map_repr_len(map: &Map<String, Value>) -> usize {
    map_repr_len_visiting(map, &mut |_| {})
}

/// [`map_repr_len`], calling `on_non_ascii` like [`repr_len_visiting`].
pub fn map_repr_len_visiting<F: FnMut(char) + ?Sized>(
    map: &Map<String, Value>,
    on_non_ascii: &mut F,
) -> usize {
    let mut len = 2 + separators_len(map.len()) + map.len() * KEY_SEP.len();
    for (k, v) in map {
        len += str_repr_len_visiting(k, on_non_ascii);
        len += repr_len_visiting(v, on_non_ascii);
    }
    len
}

/// Appends `json.dumps(value)` to `out`.
pub fn write_json_dumps(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str(JSON_NULL),
        Value::Bool(true) => out.push_str(JSON_TRUE),
        Value::Bool(false) => out.push_str(JSON_FALSE),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_json_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(ITEM_SEP);
                }
                write_json_dumps(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(ITEM_SEP);
                }
                write_json_str(k, out);
                out.push_str(KEY_SEP);
                write_json_dumps(v, out);
            }
            out.push('}');
        }
    }
}

/// `len(json.dumps(value))`, without building the text. The text is all ASCII
/// (`ensure_ascii`), so its length is also its byte count.
pub fn json_dumps_len(value: &Value) -> usize {
    match value {
        Value::Null => JSON_NULL.len(),
        Value::Bool(true) => JSON_TRUE.len(),
        Value::Bool(false) => JSON_FALSE.len(),
        Value::Number(n) => number_len(n),
        Value::String(s) => json_str_dumps_len(s),
        Value::Array(items) => {
            2 + separators_len(items.len()) + items.iter().map(json_dumps_len).sum::<usize>()
        }
        Value::Object(map) => {
            2 + separators_len(map.len())
                + map.len() * KEY_SEP.len()
                + map
                    .iter()
                    .map(|(k, v)| json_str_dumps_len(k) + json_dumps_len(v))
                    .sum::<usize>()
        }
    }
}

/// Characters of the `", "` separators between `items` items.
fn separators_len(items: usize) -> usize {
    items.saturating_sub(1) * ITEM_SEP.len()
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

/// The length of what [`write_number`] writes.
fn number_len(n: &Number) -> usize {
    if let Some(i) = n.as_i64() {
        // unsigned_abs: i64::MIN has no positive i64.
        usize::from(i < 0) + decimal_digits(i.unsigned_abs())
    } else if let Some(u) = n.as_u64() {
        decimal_digits(u)
    } else if let Some(f) = n.as_f64() {
        float_repr_len(f)
    } else {
        let mut count = CharCount(0);
        let _ = write!(count, "{n}");
        count.0
    }
}

fn decimal_digits(u: u64) -> usize {
    u.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Counts the characters written to it.
struct CharCount(usize);

impl fmt::Write for CharCount {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.chars().count();
        Ok(())
    }
}

/// A fixed buffer for the `{:e}` text of a float, so that measuring a float does not
/// allocate. 32 bytes hold the longest one ("2.2250738585072014e-308" is 23).
struct StackText {
    buf: [u8; 32],
    len: usize,
}

impl fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let dest = self.buf.get_mut(self.len..end).ok_or(fmt::Error)?;
        dest.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The text of a non-finite float.
fn special_float(f: f64) -> Option<&'static str> {
    if f.is_nan() {
        Some("nan")
    } else if f.is_infinite() {
        Some(if f < 0.0 { "-inf" } else { "inf" })
    } else {
        None
    }
}

/// A finite float as its shortest round-trip digits `d.ddd` times `10^exp`.
struct FloatDigits {
    negative: bool,
    digits: [u8; 24],
    len: usize,
    exp: i32,
}

/// Where the decimal point goes in CPython's repr.
enum FloatLayout {
    /// `0.` then `zeros` zeros then the digits.
    Leading { zeros: usize },
    /// The digits, `zeros` zeros, then `.0`.
    Trailing { zeros: usize },
    /// The digits with a point after the first `at`.
    Inside { at: usize },
    /// `d.ddde+XX`.
    Scientific,
}

impl FloatDigits {
    fn of(f: f64) -> FloatDigits {
        // Rust's `{:e}` is also shortest-round-trip: "1.2345e-5", "1e20", "0e0".
        let mut text = StackText {
            buf: [0; 32],
            len: 0,
        };
        let _ = write!(text, "{:e}", f.abs());
        let mut out = FloatDigits {
            negative: f.is_sign_negative(),
            digits: [0; 24],
            len: 0,
            exp: 0,
        };
        let mut bytes = text.buf.iter().take(text.len);
        for &b in bytes.by_ref() {
            match b {
                b'e' => break,
                b'0'..=b'9' => {
                    if let Some(slot) = out.digits.get_mut(out.len) {
                        *slot = b;
                        out.len += 1;
                    }
                }
                _ => {}
            }
        }
        let (mut exp, mut negative_exp) = (0i32, false);
        for &b in bytes {
            match b {
                b'-' => negative_exp = true,
                b'0'..=b'9' => exp = exp * 10 + i32::from(b - b'0'),
                _ => {}
            }
        }
        out.exp = if negative_exp { -exp } else { exp };
        out
    }

    fn digits(&self) -> &str {
        std::str::from_utf8(self.digits.get(..self.len).unwrap_or_default()).unwrap_or_default()
    }

    /// CPython: fixed notation when the decimal exponent is in [-4, 16).
    fn layout(&self) -> FloatLayout {
        if !(-4..16).contains(&self.exp) {
            return FloatLayout::Scientific;
        }
        let point = self.exp + 1; // digits before the decimal point
        if point <= 0 {
            FloatLayout::Leading {
                zeros: point.unsigned_abs() as usize,
            }
        } else if self.len <= point as usize {
            FloatLayout::Trailing {
                zeros: point as usize - self.len,
            }
        } else {
            FloatLayout::Inside { at: point as usize }
        }
    }

    fn write(&self, out: &mut String) {
        let digits = self.digits();
        if self.negative {
            out.push('-');
        }
        match self.layout() {
            FloatLayout::Leading { zeros } => {
                out.push_str("0.");
                out.extend(std::iter::repeat_n('0', zeros));
                out.push_str(digits);
            }
            FloatLayout::Trailing { zeros } => {
                out.push_str(digits);
                out.extend(std::iter::repeat_n('0', zeros));
                out.push_str(".0");
            }
            FloatLayout::Inside { at } => {
                let (int, frac) = digits.split_at(at);
                out.push_str(int);
                out.push('.');
                out.push_str(frac);
            }
            FloatLayout::Scientific => {
                let (first, rest) = digits.split_at(digits.len().min(1));
                out.push_str(first);
                if !rest.is_empty() {
                    out.push('.');
                    out.push_str(rest);
                }
                let sign = if self.exp < 0 { '-' } else { '+' };
                let _ = write!(out, "e{sign}{:02}", self.exp.unsigned_abs());
            }
        }
    }

    fn len(&self) -> usize {
        let body = match self.layout() {
            FloatLayout::Leading { zeros } => 2 + zeros + self.len,
            FloatLayout::Trailing { zeros } => self.len + zeros + 2,
            FloatLayout::Inside { .. } => self.len + 1,
            FloatLayout::Scientific => {
                let mantissa = if self.len > 1 { self.len + 1 } else { self.len };
                // "e", the sign, and at least two exponent digits.
                mantissa + 2 + decimal_digits(u64::from(self.exp.unsigned_abs())).max(2)
            }
        };
        usize::from(self.negative) + body
    }
}

/// CPython's `float.__repr__`: the shortest digits that round-trip, in fixed notation
/// when the decimal exponent is in [-4, 16), else `d.ddde+XX`.
pub fn write_float_repr(f: f64, out: &mut String) {
    match special_float(f) {
        Some(text) => out.push_str(text),
        None => FloatDigits::of(f).write(out),
    }
}

/// `len(repr(f))`, without allocating.
pub fn float_repr_len(f: f64) -> usize {
    match special_float(f) {
        Some(text) => text.len(),
        None => FloatDigits::of(f).len(),
    }
}

/// How `str.__repr__` writes one code point once the quote is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReprEscape {
    /// The code point itself.
    Verbatim,
    /// A backslash and this ASCII letter or symbol (`\n`, `\\`, `\'`).
    Backslash(u8),
    /// `\xNN`
    Hex2,
    /// `\uNNNN`
    Hex4,
    /// `\UNNNNNNNN`
    Hex8,
}

impl ReprEscape {
    const fn len(self) -> usize {
        match self {
            ReprEscape::Verbatim => 1,
            ReprEscape::Backslash(_) => 2,
            ReprEscape::Hex2 => 4,
            ReprEscape::Hex4 => 6,
            ReprEscape::Hex8 => 10,
        }
    }
}

/// The rule for ASCII other than the chosen quote (`'` and `"` are verbatim here).
const fn ascii_repr_escape(b: u8) -> ReprEscape {
    match b {
        b'\\' => ReprEscape::Backslash(b'\\'),
        b'\t' => ReprEscape::Backslash(b't'),
        b'\n' => ReprEscape::Backslash(b'n'),
        b'\r' => ReprEscape::Backslash(b'r'),
        0..=0x1f | 0x7f => ReprEscape::Hex2,
        _ => ReprEscape::Verbatim,
    }
}

/// The one rule for every code point, shared by the writer and the length.
fn repr_escape(c: char, quote: char) -> ReprEscape {
    if c == quote {
        ReprEscape::Backslash(quote as u8)
    } else if c.is_ascii() {
        ascii_repr_escape(c as u8)
    } else if is_printable(c) {
        ReprEscape::Verbatim
    } else {
        match c as u32 {
            ..=0xff => ReprEscape::Hex2,
            0x100..=0xffff => ReprEscape::Hex4,
            _ => ReprEscape::Hex8,
        }
    }
}

/// CPython's quote choice: `'` unless the text has a `'` and no `"`.
fn repr_quote(has_single: bool, has_double: bool) -> char {
    if has_single && !has_double { '"' } else { '\'' }
}

/// Characters the repr escape adds to one byte: 3 for `\xNN`, 1 for `\\`, `\t`, `\n`,
/// `\r`, 0 for the rest, including quotes (counted apart) and the bytes of non-ASCII
/// code points (measured one by one). Arithmetic rather than a table so that the scan
/// below vectorizes; the check after it proves it equal to [`ascii_repr_escape`].
const fn repr_extra(b: u8) -> u8 {
    let hex = (b < 0x20) as u8 | (b == 0x7f) as u8;
    let short = (b == b'\t') as u8 | (b == b'\n') as u8 | (b == b'\r') as u8;
    // A short escape is also a control character: 3 - 2 = 1.
    3 * hex - 2 * short + (b == b'\\') as u8
}

const _: () = {
    let mut b = 0u8;
    loop {
        let want = if b < 0x80 {
            ascii_repr_escape(b).len() - 1
        } else {
            0
        };
        assert!(repr_extra(b) as usize == want);
        if b == 0xff {
            break;
        }
        b += 1;
    }
};

/// Bytes per block of the scans: one SSE2/NEON vector. A fixed-size loop over a block
/// compiles to a few vector instructions, and the sums of one block fit in a `u8` (at
/// most 12 per byte).
const BLOCK: usize = 16;

/// Calls `per_block` on every block of `bytes`, the last one padded with `pad`, a byte
/// that must count for nothing in the caller's sums. Short strings, the common case,
/// are one padded block instead of a byte-by-byte loop.
fn for_each_block(bytes: &[u8], pad: u8, mut per_block: impl FnMut(&[u8; BLOCK])) {
    let (blocks, rest) = bytes.as_chunks::<BLOCK>();
    for block in blocks {
        per_block(block);
    }
    if !rest.is_empty() {
        per_block(&padded_block(rest, pad));
    }
}

/// `rest` (shorter than a block) followed by `pad` bytes, assembled from two
/// overlapping word reads in registers. Writing the bytes into a stack array and reading
/// it back as one vector stalls on store forwarding, which cost more than the scan.
fn padded_block(rest: &[u8], pad: u8) -> [u8; BLOCK] {
    let n = rest.len();
    let pads = u64::from_ne_bytes([pad; 8]);
    // `word` holds bytes from index `from` on; keep those before `n` and pad the rest.
    let fill = |word: u64, from: usize| {
        let keep = n.saturating_sub(from).min(8) as u32 * 8;
        let mask = 1u64.checked_shl(keep).map_or(u64::MAX, |bit| bit - 1);
        (word & mask) | (pads & !mask)
    };
    let (lo, hi) = if let (Some(a), Some(b)) = (rest.first_chunk::<8>(), rest.last_chunk::<8>()) {
        // b holds bytes n-8..n; shift so that byte 8 comes first.
        let b = u64::from_le_bytes(*b)
            .checked_shr((16 - n) as u32 * 8)
            .unwrap_or(0);
        (u64::from_le_bytes(*a), fill(b, 8))
    } else if let (Some(a), Some(b)) = (rest.first_chunk::<4>(), rest.last_chunk::<4>()) {
        let a = u64::from(u32::from_le_bytes(*a));
        let b = u64::from(u32::from_le_bytes(*b)) >> ((8 - n) as u32 * 8);
        (fill(a | (b << 32), 0), pads)
    } else {
        let word = rest
            .iter()
            .rev()
            .fold(0u64, |word, &b| (word << 8) | u64::from(b));
        (fill(word, 0), pads)
    };
    (u128::from(lo) | (u128::from(hi) << 64)).to_le_bytes()
}

/// What one pass over a string's bytes learns for its repr.
struct ReprScan {
    /// Characters the escapes of ASCII other than quotes add.
    extra: usize,
    singles: usize,
    doubles: usize,
    non_ascii: bool,
}

impl ReprScan {
    fn of(bytes: &[u8]) -> ReprScan {
        let mut scan = ReprScan {
            extra: 0,
            singles: 0,
            doubles: 0,
            non_ascii: false,
        };
        let mut high = 0u8;
        // 'a' adds no escape and is no quote.
        for_each_block(bytes, b'a', |block| {
            // Most blocks (keys, names, ids, paths) hold nothing to escape, no quote and
            // no multi-byte character: one OR over the block settles them.
            let plain = block.iter().fold(0u8, |acc, &b| {
                acc | repr_extra(b) | u8::from(b == b'\'' || b == b'"') | (b & 0x80)
            }) == 0;
            if plain {
                return;
            }
            let (mut extra, mut singles, mut doubles) = (0u8, 0u8, 0u8);
            for &b in block {
                extra += repr_extra(b);
                singles += u8::from(b == b'\'');
                doubles += u8::from(b == b'"');
                high |= b;
            }
            scan.extra += usize::from(extra);
            scan.singles += usize::from(singles);
            scan.doubles += usize::from(doubles);
        });
        scan.non_ascii = !high.is_ascii();
        scan
    }
}

/// CPython's `str.__repr__`.
pub fn write_str_repr(s: &str, out: &mut String) {
    let quote = repr_quote(s.contains('\''), s.contains('"'));
    out.push(quote);
    for ch in s.chars() {
        match repr_escape(ch, quote) {
            ReprEscape::Verbatim => out.push(ch),
            ReprEscape::Backslash(e) => {
                out.push('\\');
                out.push(char::from(e));
            }
            ReprEscape::Hex2 => {
                let _ = write!(out, "\\x{:02x}", ch as u32);
            }
            ReprEscape::Hex4 => {
                let _ = write!(out, "\\u{:04x}", ch as u32);
            }
            ReprEscape::Hex8 => {
                let _ = write!(out, "\\U{:08x}", ch as u32);
            }
        }
    }
    out.push(quote);
}

/// `len(repr(s))`, without building the text. ASCII text is measured from its bytes in
/// one pass; code points beyond ASCII are then classified one by one.
pub fn str_repr_len(s: &str) -> usize {
    str_repr_len_visiting(s, &mut |_| {})
}

/// [`str_repr_len`], calling `on_non_ascii` like [`repr_len_visiting`].
pub fn str_repr_len_visiting<F: FnMut(char) + ?Sized>(s: &str, on_non_ascii: &mut F) -> usize {
    let scan = ReprScan::of(s.as_bytes());
    let quote = repr_quote(scan.singles > 0, scan.doubles > 0);
    // Each occurrence of the chosen quote gets a backslash.
    let quoted = if quote == '\'' {
        scan.singles
    } else {
        scan.doubles
    };
    let mut len = 2 + s.len() + scan.extra + quoted;
    if scan.non_ascii {
        // So far each byte of a non-ASCII code point counted as one character.
        for c in s.chars().filter(|c| !c.is_ascii()) {
            let escape = repr_escape(c, quote);
            if escape == ReprEscape::Verbatim {
                on_non_ascii(c);
            }
            len = len - c.len_utf8() + escape.len();
        }
    }
    len
}

/// How `json.dumps` (`ensure_ascii=True`) writes one code point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JsonEscape {
    /// The character itself.
    Verbatim,
    /// A backslash and this ASCII letter or symbol.
    Backslash(u8),
    /// `\uNNNN` per UTF-16 unit.
    Unicode,
}

/// Length of one `\uNNNN` unit.
const JSON_UNIT_LEN: usize = 6;

impl JsonEscape {
    const fn len(self) -> usize {
        match self {
            JsonEscape::Verbatim => 1,
            JsonEscape::Backslash(_) => 2,
            JsonEscape::Unicode => JSON_UNIT_LEN,
        }
    }
}

/// The one rule for every code point, shared by the writer and the length.
const fn json_escape(c: char) -> JsonEscape {
    match c {
        '"' => JsonEscape::Backslash(b'"'),
        '\\' => JsonEscape::Backslash(b'\\'),
        '\n' => JsonEscape::Backslash(b'n'),
        '\r' => JsonEscape::Backslash(b'r'),
        '\t' => JsonEscape::Backslash(b't'),
        '\u{08}' => JsonEscape::Backslash(b'b'),
        '\u{0c}' => JsonEscape::Backslash(b'f'),
        '\u{0}'..='\u{1f}' | '\u{7f}'.. => JsonEscape::Unicode,
        _ => JsonEscape::Verbatim,
    }
}

/// Characters `json.dumps` writes for one byte of UTF-8: ASCII by [`json_escape`]; the
/// lead byte of a longer sequence by its UTF-16 units (a 4-byte sequence is outside the
/// BMP: a surrogate pair); continuation bytes nothing. Arithmetic rather than a table so
/// that the sum vectorizes; the check after it proves it equal to the rule.
const fn json_byte_len(b: u8) -> u8 {
    let ascii = (b < 0x80) as u8;
    let short = (b == b'"') as u8
        | (b == b'\\') as u8
        | (b == b'\n') as u8
        | (b == b'\r') as u8
        | (b == b'\t') as u8
        | (b == 0x08) as u8
        | (b == 0x0c) as u8;
    let unicode = ((b < 0x20) as u8 | (b == 0x7f) as u8) & !short;
    let unit = JSON_UNIT_LEN as u8;
    ascii * (1 + short + (unit - 1) * unicode) + unit * (b >= 0xc0) as u8 + unit * (b >= 0xf0) as u8
}

const _: () = {
    let mut b = 0u8;
    loop {
        let want = match b {
            0..=0x7f => json_escape(b as char).len(),
            0x80..=0xbf => 0,
            0xc0..=0xef => json_escape(char::MAX).len(),
            0xf0..=0xff => 2 * json_escape(char::MAX).len(),
        };
        assert!(json_byte_len(b) as usize == want);
        if b == 0xff {
            break;
        }
        b += 1;
    }
};

/// `json.dumps` of a string with `ensure_ascii=True`.
fn write_json_str(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match json_escape(ch) {
            JsonEscape::Verbatim => out.push(ch),
            JsonEscape::Backslash(e) => {
                out.push('\\');
                out.push(char::from(e));
            }
            JsonEscape::Unicode => {
                let mut buf = [0u16; 2];
                for unit in ch.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// `len(json.dumps(s))` for a string, from its bytes alone.
pub fn json_str_dumps_len(s: &str) -> usize {
    let mut len = 2;
    // A continuation byte writes nothing.
    for_each_block(s.as_bytes(), 0x80, |block| {
        len += usize::from(block.iter().map(|&b| json_byte_len(b)).sum::<u8>());
    });
    len
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
        assert_eq!(float(5e-324), "5e-324");
        assert_eq!(float(f64::MAX), "1.7976931348623157e+308");
        assert_eq!(float(-1.25e-7), "-1.25e-07");
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

    fn repr_chars(s: &str) -> usize {
        py_repr(&Value::String(s.to_owned())).chars().count()
    }

    fn dumps_chars(s: &str) -> usize {
        py_json_dumps(&Value::String(s.to_owned())).chars().count()
    }

    /// The byte-level fast paths against the writers, for every ASCII byte next to
    /// each mix of quotes (which decides the quote and so the escapes).
    #[test]
    fn every_ascii_byte_measures_like_the_writer() {
        for b in 0u8..0x80 {
            let c = char::from(b);
            for ctx in ["", "'", "\"", "'\"", "a"] {
                for s in [format!("{c}{ctx}"), format!("{ctx}{c}{c}")] {
                    assert_eq!(str_repr_len(&s), repr_chars(&s), "{s:?}");
                    assert_eq!(json_str_dumps_len(&s), dumps_chars(&s), "{s:?}");
                }
            }
        }
    }

    /// Code points at every edge of the non-printable table and of the escape widths.
    #[test]
    fn non_ascii_edges_measure_like_the_writer() {
        let mut cps: Vec<u32> = (0x80..0x100).collect();
        cps.extend([
            0x2ff, 0x4e2d, 0xd7ff, 0xe000, 0xfffd, 0x10000, 0x1f600, 0x10ffff,
        ]);
        for &(lo, hi) in NON_PRINTABLE {
            cps.extend([lo - 1, lo, hi, hi + 1]);
        }
        for cp in cps {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            for s in [c.to_string(), format!("'{c}a\\")] {
                assert_eq!(str_repr_len(&s), repr_chars(&s), "U+{cp:04X}");
                assert_eq!(json_str_dumps_len(&s), dumps_chars(&s), "U+{cp:04X}");
                let mut seen = String::new();
                str_repr_len_visiting(&s, &mut |c| seen.push(c));
                let expected: String = py_repr(&Value::String(s.clone()))
                    .chars()
                    .filter(|c| !c.is_ascii())
                    .collect();
                assert_eq!(seen, expected, "U+{cp:04X}");
            }
        }
    }

    #[test]
    fn padded_block_is_the_tail_then_padding() {
        let bytes: Vec<u8> = (1..=BLOCK as u8).collect();
        for n in 0..BLOCK {
            let mut want = [0xee; BLOCK];
            want[..n].copy_from_slice(&bytes[..n]);
            assert_eq!(padded_block(&bytes[..n], 0xee), want, "{n} bytes");
        }
    }

    #[test]
    fn float_and_int_lengths_follow_the_writer() {
        for f in [
            0.0,
            -0.0,
            1.5,
            100.0,
            1e16,
            1e15,
            0.0001,
            0.00001,
            0.1 + 0.2,
            1.5e300,
            -1.5e-300,
            5e-324,
            f64::MAX,
            f64::MIN_POSITIVE,
            123.456,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert_eq!(float_repr_len(f), float(f).chars().count(), "{f:e}");
        }
        for v in [
            json!(0),
            json!(9),
            json!(10),
            json!(-1),
            json!(i64::MIN),
            json!(i64::MAX),
            json!(u64::MAX),
        ] {
            assert_eq!(repr_len(&v), py_repr(&v).len(), "{v}");
            assert_eq!(json_dumps_len(&v), py_json_dumps(&v).len(), "{v}");
        }
    }

    #[test]
    fn json_dumps_escapes_non_ascii() {
        assert_eq!(
            py_json_dumps(&json!(["😀", 1, null])),
            r#"["\ud83d\ude00", 1, null]"#
        );
    }
}
