//! Reading a `summarization:` section out of the line-remembering YAML tree: each key
//! the document sets fills its field through [`visit`], refused at its line when its
//! value is of the wrong type or outside its range.

use std::collections::HashMap;

use super::error::{invalid, suggest};
use super::fields::{Count, Fields, Real, SIZE_COUNT, SIZE_FRACTION, Whole, visit};
use super::{ConfigError, ContextSize, KEYS, LoadedConfig, SummarizationConfig, TokenCounterKind};
use crate::yaml::{Node, Yaml};

/// One value and the key it sits at (relative to the section).
#[derive(Clone, Copy)]
struct Value<'a> {
    key: &'a str,
    node: &'a Node,
}

impl Value<'_> {
    fn invalid(&self, problem: &str, allowed: &str) -> ConfigError {
        invalid(
            self.key.to_owned(),
            self.node.value.show(),
            problem.to_owned(),
            allowed.to_owned(),
            Some(self.node.line),
        )
    }

    fn is_null(&self) -> bool {
        matches!(self.node.value, Yaml::Null)
    }

    fn bool(&self) -> Result<bool, ConfigError> {
        match &self.node.value {
            Yaml::Bool(b) => Ok(*b),
            _ => Err(self.invalid("must be a boolean", "true or false")),
        }
    }

    /// A whole number in `range`; booleans, fractions and strings are refused.
    fn whole(&self, range: &Whole) -> Result<u64, ConfigError> {
        let allowed = range.allowed();
        let low = if range.min == 0 {
            "must not be negative"
        } else {
            "must be positive"
        };
        let refuse = |problem: &str| Err(self.invalid(problem, &allowed));
        match &self.node.value {
            Yaml::Int(i) if *i > i128::from(range.max) => refuse("is too large"),
            Yaml::Int(i) if *i <= 0 && *i < i128::from(range.min) => refuse(low),
            Yaml::Int(i) => match range.problem(*i as u64) {
                Some(problem) => refuse(problem),
                None => Ok(*i as u64),
            },
            Yaml::Bool(_) => refuse("is a boolean, not a number"),
            Yaml::Float(f) if !f.is_finite() => refuse("is not a finite number"),
            Yaml::Float(f) if *f > range.max as f64 => refuse("is too large"),
            Yaml::Float(f) if f.fract() == 0.0 && *f <= 0.0 => refuse(low),
            Yaml::Float(_) => refuse("must be a whole number"),
            Yaml::Str(_) => refuse("is a string, not a number"),
            _ => refuse("must be a number"),
        }
    }

    /// A number in `range`.
    fn real(&self, range: &Real) -> Result<f64, ConfigError> {
        let allowed = range.allowed();
        let refuse = |problem: &str| Err(self.invalid(problem, &allowed));
        let value = match &self.node.value {
            Yaml::Int(i) => *i as f64,
            Yaml::Float(f) if f.is_finite() => *f,
            Yaml::Float(_) => return refuse("is not a finite number"),
            Yaml::Bool(_) => return refuse("is a boolean, not a number"),
            Yaml::Str(_) => return refuse("is a string, not a number"),
            _ => return refuse("must be a number"),
        };
        if range.contains(value) {
            Ok(value)
        } else {
            refuse("is out of range")
        }
    }

    fn string(&self) -> Result<String, ConfigError> {
        match &self.node.value {
            Yaml::Str(s) => Ok(s.clone()),
            _ => Err(self.invalid("must be a string", "a string")),
        }
    }

    fn opt_string(&self) -> Result<Option<String>, ConfigError> {
        match &self.node.value {
            Yaml::Null => Ok(None),
            Yaml::Str(s) => Ok(Some(s.clone())),
            _ => Err(self.invalid("must be a string or null", "a string or null")),
        }
    }
}

/// A `{type, value}` size at `key`; the line of its value is remembered in `lines`.
fn context_size(
    key: &str,
    node: &Node,
    lines: &mut HashMap<String, u64>,
) -> Result<ContextSize, ConfigError> {
    let whole = Value { key, node };
    let Yaml::Map(entries) = &node.value else {
        return Err(whole.invalid(
            "must be a mapping with `type` and `value`",
            "{type: tokens|messages|fraction, value: ...}",
        ));
    };
    let mut kind: Option<(String, &Node)> = None;
    let mut value: Option<&Node> = None;
    for (k, line, v) in entries {
        match k.as_str() {
            "type" => {
                let key = format!("{key}.type");
                kind = Some((Value { key: &key, node: v }.string()?, v));
            }
            "value" => value = Some(v),
            other => {
                return Err(ConfigError::UnknownKey {
                    key: format!("{key}.{other}"),
                    suggestion: suggest(other, &["type", "value"]),
                    line: Some(*line),
                });
            }
        }
    }
    let Some((kind, kind_node)) = kind else {
        return Err(whole.invalid("has no `type`", "tokens, messages or fraction"));
    };
    let Some(value) = value else {
        return Err(whole.invalid("has no `value`", "a positive number"));
    };
    let vkey = format!("{key}.value");
    lines.insert(vkey.clone(), value.line);
    let value = Value {
        key: &vkey,
        node: value,
    };
    match kind.as_str() {
        "tokens" => Ok(ContextSize::Tokens(value.whole(&SIZE_COUNT)?)),
        "messages" => Ok(ContextSize::Messages(value.whole(&SIZE_COUNT)?)),
        "fraction" => Ok(ContextSize::Fraction(value.real(&SIZE_FRACTION)?)),
        other => Err(invalid(
            format!("{key}.type"),
            format!("{other:?}"),
            "is not a known kind".into(),
            "tokens, messages or fraction".into(),
            Some(kind_node.line),
        )),
    }
}

/// Fills the one field of `key` from `node`, if [`visit`] names it.
struct Read<'a> {
    key: &'a str,
    node: &'a Node,
    lines: &'a mut HashMap<String, u64>,
    found: bool,
}

impl<'a> Read<'a> {
    /// The value, when `key` is the one being read.
    fn take(&mut self, key: &str) -> Option<Value<'a>> {
        (key == self.key).then(|| {
            self.found = true;
            Value {
                key: self.key,
                node: self.node,
            }
        })
    }
}

impl Fields for Read<'_> {
    fn flag(&mut self, key: &'static str, field: &mut bool) -> Result<(), ConfigError> {
        if let Some(v) = self.take(key) {
            *field = v.bool()?;
        }
        Ok(())
    }

    fn whole<T: Count>(
        &mut self,
        key: &'static str,
        range: &Whole,
        field: &mut T,
    ) -> Result<(), ConfigError> {
        if let Some(v) = self.take(key) {
            *field = T::from_count(v.whole(range)?);
        }
        Ok(())
    }

    fn opt_whole<T: Count>(
        &mut self,
        key: &'static str,
        range: &Whole,
        field: &mut Option<T>,
    ) -> Result<(), ConfigError> {
        if let Some(v) = self.take(key) {
            *field = match v.is_null() {
                true => None,
                false => Some(T::from_count(v.whole(range)?)),
            };
        }
        Ok(())
    }

    fn real(
        &mut self,
        key: &'static str,
        range: &Real,
        field: &mut f64,
    ) -> Result<(), ConfigError> {
        if let Some(v) = self.take(key) {
            *field = v.real(range)?;
        }
        Ok(())
    }

    fn opt_real(
        &mut self,
        key: &'static str,
        range: &Real,
        field: &mut Option<f64>,
    ) -> Result<(), ConfigError> {
        if let Some(v) = self.take(key) {
            *field = match v.is_null() {
                true => None,
                false => Some(v.real(range)?),
            };
        }
        Ok(())
    }

    fn text(&mut self, key: &'static str, field: &mut String) -> Result<(), ConfigError> {
        if let Some(v) = self.take(key) {
            *field = v.string()?;
        }
        Ok(())
    }

    fn opt_text(
        &mut self,
        key: &'static str,
        field: &mut Option<String>,
    ) -> Result<(), ConfigError> {
        if let Some(v) = self.take(key) {
            *field = v.opt_string()?;
        }
        Ok(())
    }

    fn names(&mut self, key: &'static str, field: &mut Vec<String>) -> Result<(), ConfigError> {
        let Some(v) = self.take(key) else {
            return Ok(());
        };
        let Yaml::Seq(items) = &v.node.value else {
            return Err(v.invalid("must be a list of tool names", "a list of strings"));
        };
        *field = items
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let key = format!("{key}[{i}]");
                Value { key: &key, node }.string()
            })
            .collect::<Result<_, _>>()?;
        Ok(())
    }

    fn size(&mut self, key: &'static str, field: &mut ContextSize) -> Result<(), ConfigError> {
        if let Some(v) = self.take(key) {
            *field = context_size(key, v.node, self.lines)?;
        }
        Ok(())
    }

    fn sizes(
        &mut self,
        key: &'static str,
        field: &mut Vec<ContextSize>,
    ) -> Result<(), ConfigError> {
        let Some(v) = self.take(key) else {
            return Ok(());
        };
        *field = match &v.node.value {
            Yaml::Null => Vec::new(),
            Yaml::Seq(items) => items
                .iter()
                .enumerate()
                .map(|(i, n)| context_size(&format!("{key}[{i}]"), n, self.lines))
                .collect::<Result<_, _>>()?,
            _ => vec![context_size(key, v.node, self.lines)?],
        };
        Ok(())
    }

    fn counter(
        &mut self,
        key: &'static str,
        field: &mut TokenCounterKind,
    ) -> Result<(), ConfigError> {
        if let Some(v) = self.take(key) {
            *field = TokenCounterKind::parse(&v.string()?).ok_or_else(|| {
                v.invalid(
                    "is not a known token counter",
                    &TokenCounterKind::NAMES.join(", "),
                )
            })?;
        }
        Ok(())
    }
}

/// The `summarization` section of a document (the bare mapping, or a mapping with a
/// `summarization:` key), and DeerFlow's top-level `skills.container_path` when the
/// document has one.
fn section(root: &Node) -> Result<(Option<&Node>, Option<&Node>), ConfigError> {
    match &root.value {
        Yaml::Null => Ok((None, None)),
        Yaml::Map(entries) if entries.iter().any(|(k, _, _)| k == "summarization") => {
            let find = |name: &str| entries.iter().find(|(k, _, _)| k == name);
            let container = find("skills").and_then(|(_, _, skills)| match &skills.value {
                Yaml::Map(skills) => skills
                    .iter()
                    .find(|(k, _, _)| k == "container_path")
                    .map(|(_, _, p)| p),
                _ => None,
            });
            Ok((find("summarization").map(|(_, _, v)| v), container))
        }
        Yaml::Map(_) => Ok((Some(root), None)),
        _ => Err(invalid(
            "(root)".into(),
            root.value.show(),
            "the document must be a mapping".into(),
            "a mapping of summarization keys, or a mapping with a `summarization:` key".into(),
            Some(root.line),
        )),
    }
}

/// Reads and checks a document or section (see [`SummarizationConfig::from_node`]).
pub(crate) fn load(root: &Node) -> Result<LoadedConfig, ConfigError> {
    let (section, container) = section(root)?;
    let mut config = SummarizationConfig::default();
    let mut lines: HashMap<String, u64> = HashMap::new();
    if let Some(node) = container {
        let key = "skills.container_path";
        config.skills_container_path = Value { key, node }.string()?;
        lines.insert(key.into(), node.line);
    }
    let entries: &[(String, u64, Node)] = match section.map(|n| &n.value) {
        None | Some(Yaml::Null) => &[],
        Some(Yaml::Map(entries)) => entries,
        Some(other) => {
            return Err(invalid(
                "(section)".into(),
                other.show(),
                "must be a mapping".into(),
                "a mapping of summarization keys".into(),
                section.map(|n| n.line),
            ));
        }
    };
    for (key, key_line, node) in entries {
        lines.insert(key.clone(), node.line);
        if key == "skills_container_path" {
            // This key wins over DeerFlow's top-level one.
            lines.remove("skills.container_path");
        }
        let mut read = Read {
            key,
            node,
            lines: &mut lines,
            found: false,
        };
        visit(&mut config, &mut read)?;
        if !read.found {
            return Err(ConfigError::UnknownKey {
                key: key.clone(),
                suggestion: suggest(key, KEYS),
                line: Some(*key_line),
            });
        }
    }
    let warnings = super::check::consistency(&config, &lines)?;
    for w in &warnings {
        tracing::warn!("{w}");
    }
    Ok(LoadedConfig {
        config,
        warnings,
        empty: entries.is_empty(),
    })
}
