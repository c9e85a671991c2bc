//! The four strategies, worded as LangChain words them.

use sha2::{Digest, Sha256};

use super::detect::PiiMatch;

/// What to do with a detected value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Strategy {
    /// Fail the run (LangChain raises `PIIDetectionError`).
    Block,
    /// Replace with `[REDACTED_EMAIL]` (the default).
    #[default]
    Redact,
    /// Keep a recognisable tail: `ada@****.com`, `****-****-****-0366`, `*.*.*.1`.
    Mask,
    /// Replace with `<email_hash:1a2b3c4d>` (the first 8 hex digits of SHA-256).
    Hash,
}

impl Strategy {
    /// The stack-file name.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Block => "block",
            Strategy::Redact => "redact",
            Strategy::Mask => "mask",
            Strategy::Hash => "hash",
        }
    }
}

fn last_chars(s: &str, n: usize) -> String {
    let count = s.chars().count();
    s.chars().skip(count.saturating_sub(n)).collect()
}

fn mask(m: &PiiMatch) -> String {
    let value = m.value.as_str();
    match m.pii_type.as_str() {
        "email" => match value.split('@').collect::<Vec<_>>()[..] {
            [local, domain] => {
                let parts: Vec<&str> = domain.split('.').collect();
                match parts.last() {
                    Some(tld) if parts.len() > 1 => format!("{local}@****.{tld}"),
                    _ => format!("{local}@****"),
                }
            }
            _ => "****".into(),
        },
        "credit_card" => {
            let digits: String = value.chars().filter(char::is_ascii_digit).collect();
            let tail = last_chars(&digits, 4);
            let sep = if value.contains('-') {
                "-"
            } else if value.contains(' ') {
                " "
            } else {
                ""
            };
            if sep.is_empty() {
                format!("************{tail}")
            } else {
                format!("****{sep}****{sep}****{sep}{tail}")
            }
        }
        "ip" => {
            let octets: Vec<&str> = value.split('.').collect();
            match (octets.len(), octets.last()) {
                (4, Some(last)) => format!("*.*.*.{last}"),
                _ => "****".into(),
            }
        }
        "mac_address" => {
            let sep = if value.contains(':') { ':' } else { '-' };
            format!(
                "**{sep}**{sep}**{sep}**{sep}**{sep}{}",
                last_chars(value, 2)
            )
        }
        "url" => "[MASKED_URL]".into(),
        _ => {
            if value.chars().count() > 4 {
                format!("****{}", last_chars(value, 4))
            } else {
                "****".into()
            }
        }
    }
}

fn hash(m: &PiiMatch) -> String {
    let digest = Sha256::digest(m.value.as_bytes());
    let hex: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("<{}_hash:{hex}>", m.pii_type)
}

/// `text` with every match replaced (matches in order, not overlapping). `Block` is
/// handled by the caller and leaves the text as is here.
pub fn apply(text: &str, matches: &[PiiMatch], strategy: Strategy) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut sorted: Vec<&PiiMatch> = matches.iter().collect();
    sorted.sort_by_key(|m| m.start);
    for m in sorted {
        if m.start < at {
            continue;
        }
        out.push_str(&text[at..m.start]);
        match strategy {
            Strategy::Block => out.push_str(&m.value),
            Strategy::Redact => out.push_str(&format!("[REDACTED_{}]", m.pii_type.to_uppercase())),
            Strategy::Mask => out.push_str(&mask(m)),
            Strategy::Hash => out.push_str(&hash(m)),
        }
        at = m.end;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pii::detect::Detector;

    fn run(t: &str, text: &str, s: Strategy) -> String {
        let matches = Detector::builtin(t).unwrap().find(t, text);
        apply(text, &matches, s)
    }

    #[test]
    fn each_strategy_reads_as_langchains() {
        let text = "write to ada@example.com";
        assert_eq!(
            run("email", text, Strategy::Redact),
            "write to [REDACTED_EMAIL]"
        );
        assert_eq!(run("email", text, Strategy::Mask), "write to ada@****.com");
        assert_eq!(
            run("email", text, Strategy::Hash),
            format!(
                "write to <email_hash:{}>",
                &format!("{:x}", Sha256::digest(b"ada@example.com"))[..8]
            )
        );
        assert_eq!(
            run("credit_card", "4111 1111 1111 1111", Strategy::Mask),
            "**** **** **** 1111"
        );
        assert_eq!(
            run("credit_card", "4111111111111111", Strategy::Mask),
            "************1111"
        );
        assert_eq!(
            run("ip", "from 192.168.1.20", Strategy::Mask),
            "from *.*.*.20"
        );
        assert_eq!(
            run("mac_address", "00-1A-2B-3C-4D-5E", Strategy::Mask),
            "**-**-**-**-**-5E"
        );
        assert_eq!(run("url", "https://x.io/a", Strategy::Mask), "[MASKED_URL]");
        let custom = PiiMatch {
            pii_type: "ssn".into(),
            value: "123-45-6789".into(),
            start: 0,
            end: 11,
        };
        assert_eq!(apply("123-45-6789", &[custom], Strategy::Mask), "****6789");
    }
}
