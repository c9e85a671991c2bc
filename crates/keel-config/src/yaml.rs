//! A YAML value tree that remembers the line of every node, so configuration errors
//! can point at the offending line even when the YAML itself is valid. Every Keel
//! configuration file (summarization.yaml, the stack file, keel.yaml) parses the same
//! way, with the same limits and error wording.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// A YAML node with its line (1-based; 0 when unknown).
#[derive(Debug, Clone)]
pub struct Node {
    /// The value.
    pub value: Yaml,
    /// Its line.
    pub line: u64,
}

/// YAML values, as written.
#[derive(Debug, Clone)]
pub enum Yaml {
    /// `null`, `~` or nothing.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A whole number.
    Int(i128),
    /// A number with a fraction or exponent (`.inf`, `.nan` too).
    Float(f64),
    /// A string.
    Str(String),
    /// A list.
    Seq(Vec<Node>),
    /// A mapping: key, the key's line, value; in document order.
    Map(Vec<(String, u64, Node)>),
}

impl Yaml {
    /// How the value reads in an error message.
    pub fn show(&self) -> String {
        match self {
            Yaml::Null => "null".into(),
            Yaml::Bool(b) => b.to_string(),
            Yaml::Int(i) => i.to_string(),
            Yaml::Float(f) => {
                if f.is_nan() {
                    ".nan".into()
                } else if f.is_infinite() {
                    if *f > 0.0 {
                        ".inf".into()
                    } else {
                        "-.inf".into()
                    }
                } else {
                    f.to_string()
                }
            }
            Yaml::Str(s) => format!("{s:?}"),
            Yaml::Seq(_) => "a list".into(),
            Yaml::Map(_) => "a mapping".into(),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Spanned::<Yaml>::deserialize(d)?;
        Ok(Node {
            value: s.value,
            line: s.referenced.line(),
        })
    }
}

struct YamlVisitor;

impl<'de> Visitor<'de> for YamlVisitor {
    type Value = Yaml;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Yaml, E> {
        Ok(Yaml::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Yaml, E> {
        Ok(Yaml::Int(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Yaml, E> {
        Ok(Yaml::Int(v.into()))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Yaml, E> {
        Ok(Yaml::Int(v))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Yaml, E> {
        Ok(Yaml::Int(i128::try_from(v).unwrap_or(i128::MAX)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Yaml, E> {
        Ok(Yaml::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Yaml, E> {
        Ok(Yaml::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Yaml, E> {
        Ok(Yaml::Str(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Yaml, E> {
        Ok(Yaml::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Yaml, D::Error> {
        Yaml::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Yaml, A::Error> {
        let mut out = Vec::new();
        while let Some(n) = seq.next_element::<Node>()? {
            out.push(n);
        }
        Ok(Yaml::Seq(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Yaml, A::Error> {
        let mut out = Vec::new();
        while let Some(k) = map.next_key::<Spanned<String>>()? {
            let v = map.next_value::<Node>()?;
            out.push((k.value, k.referenced.line(), v));
        }
        Ok(Yaml::Map(out))
    }
}

impl<'de> Deserialize<'de> for Yaml {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(YamlVisitor)
    }
}

/// The deepest nesting a configuration may have.
const MAX_DEPTH: usize = 16;
/// The most values (mappings, lists, scalars) a configuration may have.
const MAX_NODES: usize = 20_000;

/// Parses a YAML document into a line-aware tree. Errors carry the line and are said in
/// words a person editing the file can act on, not in the parser's API terms.
pub fn parse(text: &str) -> Result<Node, (String, Option<u64>)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Ok(Node {
            value: Yaml::Null,
            line: 1,
        });
    }
    // A configuration is a few levels deep and a few dozen values long. Tight limits keep
    // a hostile or mistaken file from exhausting the stack (the tree is built
    // recursively) or memory, and turn it into an error instead.
    // Non-finite floats reach the key's own check, which names the key and its range.
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: MAX_DEPTH,
            max_nodes: MAX_NODES,
        },
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
    };
    serde_saphyr::from_str_with_options::<Node>(text, options).map_err(|e| {
        let line = e.location().map(|l| l.line()).filter(|l| *l > 0);
        (human(&e), line)
    })
}

/// The parser's error for people.
fn human(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::Error;
    use serde_saphyr::budget::BudgetBreach;
    match e.without_snippet() {
        Error::DuplicateMappingKey { key: Some(k), .. } => {
            format!("the key `{k}` appears twice in one mapping; keep one")
        }
        Error::DuplicateMappingKey { key: None, .. } => {
            "a key appears twice in one mapping; keep one".to_owned()
        }
        Error::MultipleDocuments { .. } => {
            "the file holds more than one YAML document (a second `---`); a configuration \
             is one document"
                .to_owned()
        }
        Error::RecursiveReferencesRequireWeakTypes { .. } => {
            "an alias refers to the anchor it is inside (`&a [*a]`); a configuration cannot \
             contain itself"
                .to_owned()
        }
        Error::Budget { breach, .. } => match breach {
            BudgetBreach::Depth { .. } => format!(
                "the document is nested more than {MAX_DEPTH} levels deep, too deep for a \
                 configuration file"
            ),
            BudgetBreach::Aliases { .. } | BudgetBreach::Anchors { .. } => {
                "the document uses too many anchors or aliases for a configuration file".to_owned()
            }
            _ => format!(
                "the document has more than {MAX_NODES} values, too many for a \
                 configuration file; is it the right file?"
            ),
        },
        other => {
            // The remaining messages are the YAML grammar's own ("did not find expected
            // key"); keep the message, drop the position prefix and the snippet (the line
            // is reported separately).
            let text = other.to_string();
            let first = text.lines().next().unwrap_or_default();
            let first = first.strip_prefix("error: ").unwrap_or(first);
            let first = match first.find(": ") {
                Some(at) if first.starts_with("line ") => &first[at + 2..],
                _ => first,
            };
            if first.contains("Options") || first.contains("from_str") || first.contains("weak") {
                "the file is not a valid configuration document".to_owned()
            } else {
                first.to_owned()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        match parse(text) {
            Ok(_) => "ok".to_owned(),
            Err((m, _)) => m,
        }
    }

    #[test]
    fn parser_errors_are_said_in_plain_words() {
        assert_eq!(
            err("enabled: true\nenabled: false\n"),
            "the key `enabled` appears twice in one mapping; keep one"
        );
        assert!(err("a: 1\n---\nb: 2\n").starts_with("the file holds more than one YAML document"));
        assert!(err("a: &a [*a]\n").starts_with("an alias refers to the anchor"));
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let m = err(&deep);
        assert!(!m.contains("budget") && !m.contains("Depth"), "{m}");
        for m in [err("a: [1, 2\n"), err("a: b: c\n"), err("\t- x\n")] {
            assert!(!m.contains("-->") && !m.contains("Options"), "{m}");
        }
        assert_eq!(err("\u{feff}a: 1\n"), "ok");
    }
}
