//! Pinned keys filled without a model, where the conversation states them recognisably:
//! `account ACME-1`, `region: eu-west-1`, `ticket is TCK-7`, `the EU cluster`.
//!
//! Only the user's and the assistant's own words are read: a tool result (a fetched page,
//! a file) is untrusted data and never sets a pinned value. The newest statement wins,
//! whatever its wording: besides `key value` forms, a correction that names no key
//! ("change of plan: eu-west-3 instead", "actually, TCK-9") replaces a key's value of the
//! same shape, and a region key is filled from any sentence naming a region ("we moved
//! to eu-west-1").

use keel_core::message::{Message, MessageBody};

/// What [`pinned_values`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PinnedValues {
    /// `(key, value)` for each key stated in the messages, in the order the keys were
    /// given; the value is the newest statement's.
    pub found: Vec<(String, String)>,
    /// The keys no message stated recognisably, in the order given.
    pub missing: Vec<String>,
}

/// Words allowed between a key and its value ("ticket for this is TCK-7").
const LINKS: &[&str] = &[
    "is", "was", "are", "=", ":", "-", "now", "to", "the", "our", "their", "this", "for", "number",
    "no", "id", "set", "changed", "becomes", "be", "will", "in", "on", "#", "name", "of",
];

/// The key's words as they may be written: `customer_id` is also `customer id` and
/// `customer-id`.
fn key_words(key: &str) -> Vec<String> {
    key.split(['_', '-', '.', ' '])
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn clean(token: &str) -> &str {
    let t = token.trim_matches(|c: char| {
        matches!(
            c,
            ',' | ';' | '!' | '?' | '(' | ')' | '"' | '\'' | '`' | '[' | ']' | '*'
        )
    });
    t.strip_suffix('.').unwrap_or(t).trim_end_matches(':')
}

/// A token that can be a value: it has a digit, a separator, or capitals.
fn is_value(token: &str) -> bool {
    let t = clean(token);
    if t.len() < 2 || !t.chars().any(char::is_alphanumeric) {
        return false;
    }
    t.chars().any(|c| c.is_ascii_digit())
        || t.contains(['-', '_', '.', '/', '@'])
        || (t.chars().filter(|c| c.is_uppercase()).count() >= 2
            && t.chars().all(|c| c.is_ascii_alphanumeric()))
}

/// A value that needs no `:` or `is` before it: it has a digit or a separator.
fn is_strong_value(token: &str) -> bool {
    let t = clean(token);
    t.chars().any(|c| c.is_ascii_digit()) || t.contains(['-', '_', '.', '/', '@'])
}

/// A capitalised word (`Northwind`).
fn is_name(token: &str) -> bool {
    let t = clean(token);
    let mut chars = t.chars();
    t.len() >= 2
        && chars.next().is_some_and(char::is_uppercase)
        && chars.all(|c| c.is_alphabetic() || c == '\'' || c == '-')
}

/// A value written before its key: `the EU cluster`, `on PRJ-123 project`.
fn is_prefix_value(token: &str) -> bool {
    let t = clean(token);
    t.len() >= 2
        && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && (t
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '-'))
}

/// The value stated for `key` in `text`, the last one if several.
fn stated(text: &str, key: &[String]) -> Option<String> {
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let lower: Vec<String> = tokens.iter().map(|t| clean(t).to_lowercase()).collect();
    let mut found = None;
    let n = key.len();
    if n == 0 || tokens.len() < n {
        return None;
    }
    for i in 0..=tokens.len() - n {
        if (0..n).any(|j| lower[i + j] != key[j]) {
            continue;
        }
        // `key: value` written as one token (`region:eu-west-1`) is not split here; the
        // usual forms are `key value`, `key: value`, `key is value`.
        let mut k = i + n;
        let mut skipped = 0;
        while k < tokens.len() && skipped < 4 && LINKS.contains(&lower[k].as_str()) {
            k += 1;
            skipped += 1;
        }
        // Right after the key (`customer SKU errors`) a word is a value only when it
        // looks like one (`account ACME-1`); after `:` or `is`, capitals are enough,
        // and a capitalised name is taken whole (`customer is Northwind Logistics`).
        let linked = skipped > 0 || tokens[i + n - 1].ends_with(':');
        if k < tokens.len() && is_value(tokens[k]) && (linked || is_strong_value(tokens[k])) {
            found = Some(clean(tokens[k]).to_owned());
            continue;
        }
        if linked && k < tokens.len() && is_name(tokens[k]) {
            let mut end = k + 1;
            while end < tokens.len()
                && end < k + 4
                && is_name(tokens[end])
                && !tokens[end - 1].ends_with([',', '.', ';', ':'])
            {
                end += 1;
            }
            let name: Vec<&str> = tokens[k..end].iter().map(|t| clean(t)).collect();
            found = Some(name.join(" "));
            continue;
        }
        if i > 0 && is_prefix_value(tokens[i - 1]) {
            found = Some(clean(tokens[i - 1]).to_owned());
        }
    }
    found
}

/// The values of `keys` stated in `messages` by the user or the assistant, newest first
/// wins; the keys that stay unfilled are listed in [`PinnedValues::missing`].
///
/// ```
/// use keel_core::message::Message;
/// use keel_summary::extractive::pinned_values;
///
/// let msgs = [
///     Message::human("I'm on account ACME-1, region: eu-west-1."),
///     Message::tool("c1", "account: EVIL-9"), // tool output never sets a value
///     Message::human("The ticket is TCK-7. Actually we moved: region: us-east-2."),
/// ];
/// let keys = ["account".to_owned(), "region".to_owned(), "ticket".to_owned(), "owner".to_owned()];
/// let v = pinned_values(&keys, &msgs);
/// assert_eq!(v.found, [
///     ("account".to_owned(), "ACME-1".to_owned()),
///     ("region".to_owned(), "us-east-2".to_owned()),
///     ("ticket".to_owned(), "TCK-7".to_owned()),
/// ]);
/// assert_eq!(v.missing, ["owner"]);
/// ```
pub fn pinned_values(keys: &[String], messages: &[Message]) -> PinnedValues {
    pinned_values_after(keys, &[], messages)
}

/// The shape of a value: digit runs as `#`, letter runs as `a` (`eu-west-1` and
/// `us-east-2` are values of one kind).
fn shape(value: &str) -> String {
    let mut out = String::new();
    for c in value.chars() {
        let class = if c.is_ascii_digit() {
            '#'
        } else if c.is_alphabetic() {
            'a'
        } else {
            c
        };
        if !((class == '#' || class == 'a') && out.ends_with(class)) {
            out.push(class);
        }
    }
    out
}

/// A cloud region (`eu-west-1`, `us-east-2`, `ap-south-1`).
fn is_region(token: &str) -> bool {
    let parts: Vec<&str> = token.split('-').collect();
    parts.len() == 3
        && parts[0].len() == 2
        && parts[0].chars().all(|c| c.is_ascii_lowercase())
        && parts[1].len() >= 4
        && parts[1].chars().all(|c| c.is_ascii_lowercase())
        && (1..=2).contains(&parts[2].len())
        && parts[2].chars().all(|c| c.is_ascii_digit())
}

/// [`pinned_values`] after `current` (`(key, value)` pairs already pinned): a
/// correction in `messages` that names no key replaces a current value of the same
/// shape.
///
/// ```
/// use keel_core::message::Message;
/// use keel_summary::extractive::pinned_values_after;
///
/// let keys = ["region".to_owned(), "ticket".to_owned()];
/// let current = [("region".to_owned(), "eu-west-1".to_owned())];
/// let msgs = [
///     Message::human("Change of plan: eu-central-1 instead."),
///     Message::human("The ticket for this is TCK-7."),
/// ];
/// let v = pinned_values_after(&keys, &current, &msgs);
/// assert_eq!(v.found, [
///     ("region".to_owned(), "eu-central-1".to_owned()),
///     ("ticket".to_owned(), "TCK-7".to_owned()),
/// ]);
/// // A region is read from an ordinary sentence too.
/// let v = pinned_values_after(&keys, &[], &[Message::human("We moved to eu-west-3 last week.")]);
/// assert_eq!(v.found[0], ("region".to_owned(), "eu-west-3".to_owned()));
/// ```
pub fn pinned_values_after(
    keys: &[String],
    current: &[(String, String)],
    messages: &[Message],
) -> PinnedValues {
    let mut out = PinnedValues::default();
    let forms = KeyForms::of(keys);
    let mut values: Vec<Option<String>> = vec![None; keys.len()];
    // What each key holds before these messages.
    let mut now: Vec<Option<String>> = keys
        .iter()
        .map(|k| {
            current
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        })
        .collect();
    for m in messages {
        if !matches!(m.body(), MessageBody::Human(_) | MessageBody::Ai(_)) {
            continue;
        }
        if m.name() == Some(crate::SUMMARY_NAME) {
            continue;
        }
        forms.read(&m.text(), &mut now, &mut values);
    }
    for (key, value) in keys.iter().zip(values) {
        match value {
            Some(v) => out.found.push((key.clone(), v)),
            None => out.missing.push(key.clone()),
        }
    }
    out
}

/// How the pinned keys are written in prose, one entry per key.
struct KeyForms {
    /// The key's words (`project_id` -> `project id`).
    words: Vec<Vec<String>>,
    /// The key without a trailing `id`, `name`, `number` or `code`: `project_id` is
    /// also stated as `project PRJ-123`.
    short: Vec<Option<Vec<String>>>,
    /// The key names a region (a region is read from an ordinary sentence too).
    region: Vec<bool>,
}

impl KeyForms {
    /// The forms of `keys`.
    fn of(keys: &[String]) -> KeyForms {
        let words: Vec<Vec<String>> = keys.iter().map(|k| key_words(k)).collect();
        let short: Vec<Option<Vec<String>>> = words
            .iter()
            .map(|w| match w.split_last() {
                Some((last, rest))
                    if !rest.is_empty()
                        && matches!(last.as_str(), "id" | "name" | "number" | "code") =>
                {
                    Some(rest.to_vec())
                }
                _ => None,
            })
            .collect();
        let region: Vec<bool> = words
            .iter()
            .map(|w| w.iter().any(|x| x == "region"))
            .collect();
        KeyForms {
            words,
            short,
            region,
        }
    }

    /// Reads one message's `text`: a value stated for a named key, else (in a
    /// correction) a new value of the shape the key holds, else a region for a region
    /// key. A found value becomes the key's current (`now`) and found (`values`) one.
    fn read(&self, text: &str, now: &mut [Option<String>], values: &mut [Option<String>]) {
        let spaced = super::scoring::cjk_spaced(text);
        let lower = text.to_lowercase();
        let corrects = super::corrects(text);
        let tokens: Vec<&str> = spaced
            .split_whitespace()
            .map(clean)
            .filter(|t| is_strong_value(t))
            .collect();
        // Values stated for a named key first; a value one key claims corrects no other.
        let explicit: Vec<Option<String>> = self
            .words
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let mentioned = w
                    .first()
                    .is_some_and(|first| lower.contains(first.as_str()));
                let short_form = || self.short[i].as_ref().and_then(|s| stated(&spaced, s));
                if mentioned {
                    stated(&spaced, w).or_else(short_form)
                } else {
                    None
                }
            })
            .collect();
        let claimed = |t: &str| explicit.iter().flatten().any(|v| v == t);
        for (i, stated_value) in explicit.iter().enumerate() {
            let found = stated_value.clone().or_else(|| {
                // A correction naming no key: a new value of the current one's shape.
                let old = now[i].as_deref().or(values[i].as_deref());
                let corrected = old.filter(|_| corrects).and_then(|old| {
                    let want = shape(old);
                    tokens
                        .iter()
                        .rev()
                        .find(|t| **t != old && shape(t) == want && !claimed(t))
                        .map(|t| (*t).to_owned())
                });
                corrected.or_else(|| {
                    self.region[i]
                        .then(|| tokens.iter().rev().find(|t| is_region(t) && !claimed(t)))
                        .flatten()
                        .map(|t| (*t).to_owned())
                })
            });
            if let Some(v) = found {
                now[i] = Some(v.clone());
                values[i] = Some(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(key: &str, text: &str) -> Option<String> {
        stated(text, &key_words(key))
    }

    #[test]
    fn forms() {
        assert_eq!(one("account", "account ACME-1").as_deref(), Some("ACME-1"));
        assert_eq!(
            one("region", "region: eu-west-1.").as_deref(),
            Some("eu-west-1")
        );
        assert_eq!(
            one("ticket", "The ticket for this is TCK-7.").as_deref(),
            Some("TCK-7")
        );
        assert_eq!(
            one("cluster", "on the EU cluster, please").as_deref(),
            Some("EU")
        );
        assert_eq!(
            one("project", "working on project PRJ-123 today").as_deref(),
            Some("PRJ-123")
        );
        assert_eq!(
            one("customer_id", "customer id is C-42").as_deref(),
            Some("C-42")
        );
        assert_eq!(one("ticket", "which ticket should I use?"), None);
        assert_eq!(one("customer", "37 items are customer SKU errors"), None);
        assert_eq!(
            one(
                "customer",
                "The customer is Northwind Logistics; their jobs fail."
            )
            .as_deref(),
            Some("Northwind Logistics")
        );
        assert_eq!(one("cluster", "cluster: EU").as_deref(), Some("EU"));
        assert_eq!(one("region", "the region is down"), None);
    }
}
