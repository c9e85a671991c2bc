//! Tolerant parsing of the fold answer `{"pinned": {...}, "summary": "..."}`.
//!
//! Real models wrap JSON in a ```json fence, add a sentence before or after it, leave a
//! trailing comma, or drop a field. All of that is accepted. What is not accepted (no
//! JSON object carrying `pinned` or `summary`, or a field of the wrong type) is a
//! [`FoldParseError`], and the caller treats the fold as failed: nothing is saved.

use serde_json::{Map, Value};

/// Candidate `{` positions tried per text, so adversarial output cannot make parsing
/// quadratic in its length.
const MAX_CANDIDATES: usize = 64;

/// What a fold answer said. A `None` field was missing (or `null`, or blank): the
/// previous value is kept.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FoldOutput {
    /// The pinned-key updates, as sent (merge rules are applied later).
    pub pinned: Option<Map<String, Value>>,
    /// The new summary, trimmed.
    pub summary: Option<String>,
}

/// Why a fold answer could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FoldParseError {
    /// No JSON object with a `pinned` or `summary` field was found.
    #[error("the fold answer holds no JSON object with a \"pinned\" or \"summary\" field")]
    NoObject,
    /// A field had a type that cannot be used.
    #[error("the fold answer's \"{field}\" is {found}; expected {expected}")]
    BadField {
        /// `pinned` or `summary`.
        field: &'static str,
        /// The JSON type found.
        found: &'static str,
        /// What was expected.
        expected: &'static str,
    },
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Parses a fold answer. See the [module docs](self) for what is tolerated.
pub fn parse_fold_output(text: &str) -> Result<FoldOutput, FoldParseError> {
    let object = fenced_blocks(text)
        .into_iter()
        .chain(std::iter::once(text))
        .find_map(find_object)
        .ok_or(FoldParseError::NoObject)?;
    let pinned = match object.get("pinned") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m.clone()),
        Some(other) => {
            return Err(FoldParseError::BadField {
                field: "pinned",
                found: type_name(other),
                expected: "an object of key: value (or null to clear a key)",
            });
        }
    };
    let summary = match object.get("summary") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.trim().to_owned()),
        // Some models answer with a list of bullets instead of one string.
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => Some(
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| {
                    if s.starts_with("- ") || s.starts_with("* ") {
                        s.to_owned()
                    } else {
                        format!("- {s}")
                    }
                })
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        Some(other) => {
            return Err(FoldParseError::BadField {
                field: "summary",
                found: type_name(other),
                expected: "a string (or a list of strings)",
            });
        }
    };
    Ok(FoldOutput {
        pinned,
        summary: summary.filter(|s| !s.is_empty()),
    })
}

/// The bodies of Markdown code fences (```json ... ``` or ``` ... ```), in order.
fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after_ticks = &rest[open + 3..];
        // The info string (`json`, `JSON`) runs to the end of the line.
        let body_start = after_ticks.find('\n').map_or(after_ticks.len(), |i| i + 1);
        let body = &after_ticks[body_start..];
        match body.find("```") {
            Some(close) => {
                out.push(&body[..close]);
                rest = &body[close + 3..];
            }
            None => {
                // An unclosed fence (the answer was cut off): still worth a try.
                out.push(body);
                break;
            }
        }
    }
    out
}

/// The first balanced `{...}` in `text` that parses (after trailing-comma repair) as an
/// object with a `pinned` or `summary` field.
fn find_object(text: &str) -> Option<Map<String, Value>> {
    text.match_indices('{')
        .take(MAX_CANDIDATES)
        .filter_map(|(start, _)| balanced_end(&text[start..]).map(|end| &text[start..start + end]))
        .find_map(|slice| {
            let repaired = strip_trailing_commas(slice);
            match serde_json::from_str::<Value>(&repaired) {
                Ok(Value::Object(m)) if m.contains_key("pinned") || m.contains_key("summary") => {
                    Some(m)
                }
                _ => None,
            }
        })
}

/// Tells, character by character, whether JSON-like text is inside a string literal,
/// so the scanners below ignore brackets and commas in strings.
#[derive(Default)]
struct StringTracker {
    in_string: bool,
    escaped: bool,
}

impl StringTracker {
    /// Feeds the next character; true when it belongs to a string literal (its quotes
    /// included).
    fn feed(&mut self, c: char) -> bool {
        if self.in_string {
            match c {
                _ if self.escaped => self.escaped = false,
                '\\' => self.escaped = true,
                '"' => self.in_string = false,
                _ => {}
            }
            return true;
        }
        if c == '"' {
            self.in_string = true;
            return true;
        }
        false
    }
}

/// Length of the balanced object starting at `text[0] == '{'`, honouring strings.
fn balanced_end(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut strings = StringTracker::default();
    for (i, c) in text.char_indices() {
        if strings.feed(c) {
            continue;
        }
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Removes commas that directly precede `}` or `]` (outside strings).
fn strip_trailing_commas(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut strings = StringTracker::default();
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if strings.feed(c) {
            out.push(c);
            continue;
        }
        if c == ',' {
            let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
            if matches!(next, Some('}') | Some(']')) {
                continue;
            }
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_fenced_prose_and_trailing_commas() {
        let plain = r#"{"pinned": {"project": "PRJ-123"}, "summary": "- on EU"}"#;
        let fenced = "Sure! Here it is:\n```json\n{\"pinned\": {\"project\": \"PRJ-123\"},\n \"summary\": \"- on EU\",\n}\n```\nDone.";
        let prose = "I updated the memory {as asked}: {\"pinned\": {\"project\": \"PRJ-123\",}, \"summary\": \"- on EU\"} hope that helps";
        for text in [plain, fenced, prose] {
            let out = parse_fold_output(text).unwrap();
            assert_eq!(out.pinned.unwrap()["project"], json!("PRJ-123"), "{text}");
            assert_eq!(out.summary.as_deref(), Some("- on EU"), "{text}");
        }
    }

    #[test]
    fn missing_fields_are_none() {
        let out = parse_fold_output(r#"{"summary": "- x"}"#).unwrap();
        assert_eq!(out.pinned, None);
        let out = parse_fold_output(r#"{"pinned": {}}"#).unwrap();
        assert_eq!(out.summary, None);
        let out = parse_fold_output(r#"{"pinned": {}, "summary": "   "}"#).unwrap();
        assert_eq!(out.summary, None, "a blank summary keeps the previous one");
    }

    #[test]
    fn braces_inside_strings_do_not_confuse_the_scanner() {
        let out =
            parse_fold_output(r#"{"pinned": {"k": "a } b,]"}, "summary": "- {weird} \"q\""}"#)
                .unwrap();
        assert_eq!(out.pinned.unwrap()["k"], json!("a } b,]"));
        assert_eq!(out.summary.as_deref(), Some("- {weird} \"q\""));
    }

    #[test]
    fn list_summary_becomes_bullets() {
        let out = parse_fold_output(r#"{"summary": ["a", "- b"]}"#).unwrap();
        assert_eq!(out.summary.as_deref(), Some("- a\n- b"));
    }

    #[test]
    fn unusable_output_is_an_error() {
        for text in [
            "I could not summarize this.",
            "{\"answer\": 42}",
            "{\"summary\": \"unterminated",
            "",
        ] {
            assert_eq!(
                parse_fold_output(text),
                Err(FoldParseError::NoObject),
                "{text}"
            );
        }
        assert!(matches!(
            parse_fold_output(r#"{"pinned": "PRJ-123", "summary": "x"}"#),
            Err(FoldParseError::BadField {
                field: "pinned",
                ..
            })
        ));
        assert!(matches!(
            parse_fold_output(r#"{"summary": 7}"#),
            Err(FoldParseError::BadField {
                field: "summary",
                ..
            })
        ));
    }
}
