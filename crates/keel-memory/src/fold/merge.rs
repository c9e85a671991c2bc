//! Merging a fold answer into the previous state.
//!
//! Pinned keys: an omitted key keeps its value, `null` clears it, a blank string says
//! nothing (keeps the value), keys that were not configured are ignored, and nothing
//! else ever drops a key. The summary is clipped to the word budget; a missing summary
//! keeps the previous one.

use serde_json::{Map, Value};

use super::parse::FoldOutput;

/// Applies the pinned-key rules to `previous` and returns the new map.
pub fn merge_pinned(
    previous: &Map<String, Value>,
    update: Option<&Map<String, Value>>,
    configured: &[String],
) -> Map<String, Value> {
    let mut out = previous.clone();
    let Some(update) = update else {
        return out;
    };
    for key in configured {
        match update.get(key) {
            None => {}
            Some(Value::Null) => {
                out.remove(key);
            }
            Some(Value::String(s)) if s.trim().is_empty() => {}
            Some(Value::String(s)) => {
                out.insert(key.clone(), Value::String(s.trim().to_owned()));
            }
            Some(other) => {
                out.insert(key.clone(), other.clone());
            }
        }
    }
    out
}

/// True for a whitespace-separated token that counts as a word: one with a letter or a
/// digit. Bullet markers (`-`, `*`, `•`) and lone punctuation are free.
fn is_word(token: &str) -> bool {
    token.chars().any(char::is_alphanumeric)
}

/// Words in `text`, counted as [`clip_words`] counts them.
pub fn count_words(text: &str) -> usize {
    text.split_whitespace().filter(|t| is_word(t)).count()
}

/// Cuts `text` after `budget` words, keeping the line breaks and bullets of the part that
/// stays. Trailing whitespace (and a bullet marker left without its words) is removed.
pub fn clip_words(text: &str, budget: usize) -> String {
    let mut words = 0usize;
    let mut offset = 0usize;
    for token in text.split_whitespace() {
        // split_whitespace yields tokens in order; find each one's byte offset.
        let start = offset + text[offset..].find(token).unwrap_or(0);
        offset = start + token.len();
        if is_word(token) {
            words += 1;
            if words > budget {
                let kept = text[..start].trim_end();
                let kept = kept
                    .strip_suffix(['-', '*', '•'])
                    .map_or(kept, str::trim_end);
                return kept.to_owned();
            }
        }
    }
    text.trim_end().to_owned()
}

/// The merged `(pinned, summary)` of a fold.
pub fn merge(
    previous_pinned: &Map<String, Value>,
    previous_summary: &str,
    output: &FoldOutput,
    configured: &[String],
    word_budget: usize,
) -> (Map<String, Value>, String) {
    let pinned = merge_pinned(previous_pinned, output.pinned.as_ref(), configured);
    let summary = match &output.summary {
        Some(s) => clip_words(s, word_budget),
        None => previous_summary.to_owned(),
    };
    (pinned, summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn pinned_rules() {
        let keys = vec![
            "project".to_owned(),
            "cluster".to_owned(),
            "customer".to_owned(),
        ];
        let prev = map(json!({"project": "PRJ-123", "cluster": "EU", "customer": "ACME"}));
        let update =
            map(json!({"cluster": null, "customer": "  ", "invented": "x", "project": " PRJ-9 "}));
        let out = merge_pinned(&prev, Some(&update), &keys);
        assert_eq!(out, map(json!({"project": "PRJ-9", "customer": "ACME"})));
        assert_eq!(merge_pinned(&prev, None, &keys), prev);
    }

    #[test]
    fn clipping_keeps_structure() {
        assert_eq!(clip_words("- a b\n- c d\n- e", 3), "- a b\n- c");
        assert_eq!(clip_words("- a b\n- c d\n- e", 2), "- a b");
        assert_eq!(clip_words("- a b\n- c d\n", 100), "- a b\n- c d");
        assert_eq!(clip_words("one  two three", 2), "one  two");
        let long = "w ".repeat(400);
        assert_eq!(count_words(&clip_words(&long, 300)), 300);
        assert_eq!(count_words("- a, b\n* c -"), 3);
    }
}
