//! Typed configurations read straight from the line-aware tree: any `Deserialize`
//! type (with `deny_unknown_fields` and serde defaults) is filled from a [`Node`]
//! without printing or re-parsing text, and an error names the line of the value it
//! is about.

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};

use crate::yaml::{Node, Yaml};

/// Why a typed configuration could not be read from a node: serde's message and the
/// line of the innermost value it concerns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}{}", crate::at_line(*line))]
pub struct DeError {
    /// serde's message (`unknown field `n_mesages`, expected one of ...`).
    pub message: String,
    /// The line (0 when unknown).
    pub line: u64,
}

impl de::Error for DeError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        DeError {
            message: msg.to_string(),
            line: 0,
        }
    }
}

/// Reads a `T` from `node`.
pub fn from_node<T: DeserializeOwned>(node: &Node) -> Result<T, DeError> {
    T::deserialize(NodeDe(node))
}

/// A [`Node`] as a serde deserializer.
struct NodeDe<'a>(&'a Node);

impl NodeDe<'_> {
    fn locate(&self, mut e: DeError) -> DeError {
        if e.line == 0 {
            e.line = self.0.line;
        }
        e
    }
}

impl<'de, 'a> de::Deserializer<'de> for NodeDe<'a> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let r = match &self.0.value {
            Yaml::Null => visitor.visit_unit(),
            Yaml::Bool(b) => visitor.visit_bool(*b),
            Yaml::Int(i) => match (i64::try_from(*i), u64::try_from(*i)) {
                (Ok(v), _) => visitor.visit_i64(v),
                (_, Ok(v)) => visitor.visit_u64(v),
                _ => visitor.visit_i128(*i),
            },
            Yaml::Float(f) => visitor.visit_f64(*f),
            Yaml::Str(s) => visitor.visit_str(s),
            Yaml::Seq(items) => visitor.visit_seq(Seq(items.iter())),
            Yaml::Map(entries) => visitor.visit_map(Map {
                entries: entries.iter(),
                value: None,
            }),
        };
        r.map_err(|e| self.locate(e))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0.value {
            Yaml::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let r = match &self.0.value {
            Yaml::Str(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            Yaml::Map(entries) if entries.len() == 1 => {
                let (variant, _, value) = &entries[0];
                visitor.visit_enum(Enum { variant, value })
            }
            _ => Err(de::Error::invalid_type(
                de::Unexpected::Other(&self.0.value.show()),
                &"a variant name, or a one-key mapping",
            )),
        };
        r.map_err(|e| self.locate(e))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

struct Seq<'a>(std::slice::Iter<'a, Node>);

impl<'de> de::SeqAccess<'de> for Seq<'_> {
    type Error = DeError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        self.0
            .next()
            .map(|n| seed.deserialize(NodeDe(n)))
            .transpose()
    }
}

struct Map<'a> {
    entries: std::slice::Iter<'a, (String, u64, Node)>,
    value: Option<&'a Node>,
}

impl<'de> de::MapAccess<'de> for Map<'_> {
    type Error = DeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, line, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize(key.as_str().into_deserializer())
            .map(Some)
            .map_err(|e: DeError| DeError { line: *line, ..e })
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let node = self
            .value
            .take()
            .ok_or_else(|| <DeError as de::Error>::custom("a value without its key"))?;
        seed.deserialize(NodeDe(node))
    }
}

struct Enum<'a> {
    variant: &'a str,
    value: &'a Node,
}

impl<'de, 'a> de::EnumAccess<'de> for Enum<'a> {
    type Error = DeError;
    type Variant = NodeDe<'a>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, NodeDe<'a>), DeError> {
        let v = seed.deserialize(self.variant.into_deserializer())?;
        Ok((v, NodeDe(self.value)))
    }
}

impl<'de> de::VariantAccess<'de> for NodeDe<'_> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        de::Deserialize::deserialize(self)
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_any(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        de::Deserializer::deserialize_any(self, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Settings {
        #[serde(default)]
        n: usize,
        #[serde(default)]
        keys: Vec<String>,
        #[serde(default)]
        mode: Option<Mode>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        Fast,
        Slow,
    }

    fn node(text: &str) -> Node {
        crate::yaml::parse(text).unwrap()
    }

    #[test]
    fn reads_typed_settings_and_names_the_line_of_a_bad_one() {
        let s: Settings = from_node(&node("n: 3\nkeys: [a, b]\nmode: slow\n")).unwrap();
        assert_eq!(
            s,
            Settings {
                n: 3,
                keys: vec!["a".into(), "b".into()],
                mode: Some(Mode::Slow)
            }
        );
        let e = from_node::<Settings>(&node("n: 3\n\nnn: 4\n")).unwrap_err();
        assert!(e.message.contains("unknown field `nn`"), "{e}");
        assert_eq!(e.line, 3);
        let e = from_node::<Settings>(&node("n: 3\nkeys:\n  - a\n  - 7\n")).unwrap_err();
        assert_eq!(e.line, 4, "{e}");
        let e = from_node::<Settings>(&node("n: -1\n")).unwrap_err();
        assert_eq!(e.line, 1, "{e}");
        let e = from_node::<Settings>(&node("mode: quick\n")).unwrap_err();
        assert!(e.to_string().ends_with("(line 1)"), "{e}");
        let f: Settings = from_node(&node("mode: fast\n")).unwrap();
        assert_eq!(f.mode, Some(Mode::Fast));
    }
}
