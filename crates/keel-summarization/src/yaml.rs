//! A YAML value tree that remembers the line of every node, so configuration errors
//! can point at the offending line even when the YAML itself is valid.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// A YAML node with its line (1-based; 0 when unknown).
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub value: Yaml,
    pub line: u64,
}

/// YAML values, as written.
#[derive(Debug, Clone)]
pub(crate) enum Yaml {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
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

/// Parses a YAML document into a line-aware tree. Errors carry the line.
pub(crate) fn parse(text: &str) -> Result<Node, (String, Option<u64>)> {
    if text.trim().is_empty() {
        return Ok(Node {
            value: Yaml::Null,
            line: 1,
        });
    }
    serde_saphyr::from_str::<Node>(text).map_err(|e| {
        let line = e.location().map(|l| l.line());
        (e.to_string(), line)
    })
}
