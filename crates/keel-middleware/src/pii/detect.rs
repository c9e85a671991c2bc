//! Detectors: the built-in PII types and custom regexes, matching what LangChain's
//! `langchain.agents.middleware._redaction` detectors match.

use std::sync::OnceLock;

use regex::Regex;

/// One detected value: byte offsets into the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PiiMatch {
    /// The PII type (`email`, or a custom name).
    pub pii_type: String,
    /// The matched text.
    pub value: String,
    /// Start byte.
    pub start: usize,
    /// End byte (exclusive).
    pub end: usize,
}

/// The built-in PII types.
pub const BUILTIN_TYPES: [&str; 5] = ["email", "credit_card", "ip", "mac_address", "url"];

/// What finds values of one type.
#[derive(Clone, Debug)]
pub enum Detector {
    /// A built-in type (one of [`BUILTIN_TYPES`]).
    Builtin(&'static str),
    /// A custom regex (every match is a value).
    Regex(Regex),
}

fn compiled(cell: &'static OnceLock<Option<Regex>>, pattern: &str) -> Option<&'static Regex> {
    cell.get_or_init(|| Regex::new(pattern).ok()).as_ref()
}

macro_rules! pattern {
    ($name:ident, $re:expr) => {
        fn $name() -> Option<&'static Regex> {
            static CELL: OnceLock<Option<Regex>> = OnceLock::new();
            compiled(&CELL, $re)
        }
    };
}

pattern!(
    email_re,
    r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Z|a-z]{2,}\b"
);
pattern!(card_re, r"\b\d{4}[\s-]?\d{4}[\s-]?\d{4}[\s-]?\d{4}\b");
pattern!(ipv4_re, r"\b(?:[0-9]{1,3}\.){3}[0-9]{1,3}\b");
pattern!(mac_re, r"\b([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}\b");
pattern!(url_scheme_re, r#"https?://[^\s<>"{}|\\^`\[\]]+"#);
pattern!(
    url_bare_re,
    r"\b(?:www\.)?[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)+(?:/[^\s]*)?"
);

impl Detector {
    /// The detector of a built-in type, or `None` for an unknown name.
    pub fn builtin(pii_type: &str) -> Option<Self> {
        BUILTIN_TYPES
            .iter()
            .find(|t| **t == pii_type)
            .map(|t| Detector::Builtin(t))
    }

    /// Every value of `pii_type` in `text`, in order.
    pub fn find(&self, pii_type: &str, text: &str) -> Vec<PiiMatch> {
        let found: Vec<(usize, usize)> = match self {
            Detector::Regex(re) => re.find_iter(text).map(|m| (m.start(), m.end())).collect(),
            Detector::Builtin("email") => spans(email_re(), text, |_| true),
            Detector::Builtin("credit_card") => spans(card_re(), text, passes_luhn),
            Detector::Builtin("ip") => spans(ipv4_re(), text, is_ipv4),
            Detector::Builtin("mac_address") => spans(mac_re(), text, |_| true),
            Detector::Builtin("url") => urls(text),
            Detector::Builtin(_) => Vec::new(),
        };
        found
            .into_iter()
            .map(|(start, end)| PiiMatch {
                pii_type: pii_type.to_owned(),
                value: text[start..end].to_owned(),
                start,
                end,
            })
            .collect()
    }
}

fn spans(re: Option<&Regex>, text: &str, keep: impl Fn(&str) -> bool) -> Vec<(usize, usize)> {
    let Some(re) = re else { return Vec::new() };
    re.find_iter(text)
        .filter(|m| keep(m.as_str()))
        .map(|m| (m.start(), m.end()))
        .collect()
}

/// The Luhn checksum over 13 to 19 digits, as LangChain checks card numbers.
pub fn passes_luhn(number: &str) -> bool {
    let digits: Vec<u32> = number.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let v = d * 2;
                if v > 9 { v - 9 } else { v }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// What Python's `ipaddress.ip_address` accepts for a dotted quad: four decimal octets
/// of at most 255, without leading zeros.
fn is_ipv4(candidate: &str) -> bool {
    let octets: Vec<&str> = candidate.split('.').collect();
    octets.len() == 4
        && octets.iter().all(|o| {
            !o.is_empty()
                && o.len() <= 3
                && o.bytes().all(|b| b.is_ascii_digit())
                && (o.len() == 1 || !o.starts_with('0'))
                && o.parse::<u16>().is_ok_and(|v| v <= 255)
        })
}

/// The `netloc` Python's `urlparse` finds after `scheme://`: up to the first `/`, `?`
/// or `#`.
fn netloc(after_scheme: &str) -> &str {
    let end = after_scheme
        .find(['/', '?', '#'])
        .unwrap_or(after_scheme.len());
    &after_scheme[..end]
}

fn urls(text: &str) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    if let Some(re) = url_scheme_re() {
        for m in re.find_iter(text) {
            let s = m.as_str();
            let rest = s.split_once("://").map(|(_, r)| r).unwrap_or_default();
            if !netloc(rest).is_empty() {
                out.push((m.start(), m.end()));
            }
        }
    }
    let with_scheme = out.clone();
    if let Some(re) = url_bare_re() {
        for m in re.find_iter(text) {
            let (start, end) = (m.start(), m.end());
            if with_scheme
                .iter()
                .any(|(s, e)| (*s <= start && start < *e) || (*s < end && end <= *e))
            {
                continue;
            }
            let url = m.as_str();
            if (url.contains('/') || url.starts_with("www.")) && netloc(url).contains('.') {
                out.push((start, end));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(t: &str, text: &str) -> Vec<String> {
        Detector::builtin(t)
            .unwrap()
            .find(t, text)
            .into_iter()
            .map(|m| m.value)
            .collect()
    }

    #[test]
    fn builtins_find_what_langchain_finds() {
        assert_eq!(
            values("email", "mail ada@example.com or x@y"),
            ["ada@example.com"]
        );
        assert_eq!(
            values(
                "credit_card",
                "card 4532-0151-1283-0366, not 1234 5678 9012 3456"
            ),
            ["4532-0151-1283-0366"]
        );
        assert_eq!(
            values("ip", "at 10.0.0.1, not 999.1.1.1 or 01.2.3.4"),
            ["10.0.0.1"]
        );
        assert_eq!(
            values("mac_address", "nic 00:1A:2b:3c:4D:5e"),
            ["00:1A:2b:3c:4D:5e"]
        );
        assert_eq!(
            values(
                "url",
                "see https://example.com/a?b=1 and www.rust-lang.org and docs.rs/regex, not foo.bar"
            ),
            // As in LangChain, a bare URL's path runs to the next whitespace.
            [
                "https://example.com/a?b=1",
                "www.rust-lang.org",
                "docs.rs/regex,"
            ]
        );
    }

    #[test]
    fn luhn_checks_length_and_sum() {
        assert!(passes_luhn("4111111111111111"));
        assert!(!passes_luhn("4111111111111112"));
        assert!(!passes_luhn("411111111111"));
    }
}
