//! Typed reads out of the line-aware YAML tree, each failing with a [`ConfigError`]
//! that names the key, the value, the allowed range and the line.

use crate::error::{ConfigError, at_line};
use crate::yaml::{Node, Yaml};

/// One value and the key path it sits at.
#[derive(Clone, Debug)]
pub struct At<'a> {
    /// The key path (`middleware[0].pii.strategy`).
    pub key: String,
    /// The value.
    pub node: &'a Node,
}

impl<'a> At<'a> {
    /// The value `node` at `key`.
    pub fn new(key: impl Into<String>, node: &'a Node) -> Self {
        At {
            key: key.into(),
            node,
        }
    }

    /// The value refused: `problem`, and what is `allowed`, at its line.
    pub fn invalid(&self, problem: &str, allowed: &str) -> ConfigError {
        ConfigError::at(
            self.key.clone(),
            self.node.value.show(),
            problem,
            allowed,
            self.node.line,
        )
    }

    /// Whether the value is null (`~`, `null` or nothing).
    pub fn is_null(&self) -> bool {
        matches!(self.node.value, Yaml::Null)
    }

    /// A string.
    pub fn string(&self) -> Result<String, ConfigError> {
        match &self.node.value {
            Yaml::Str(s) => Ok(s.clone()),
            _ => Err(self.invalid("is not a string", "a string")),
        }
    }

    /// `true` or `false`.
    pub fn bool(&self) -> Result<bool, ConfigError> {
        match self.node.value {
            Yaml::Bool(b) => Ok(b),
            _ => Err(self.invalid("is not true or false", "true or false")),
        }
    }

    /// A whole number in `[0, max]`.
    pub fn count(&self, max: u64) -> Result<u64, ConfigError> {
        let allowed = format!("a whole number in [0, {max}]");
        match self.node.value {
            Yaml::Int(i) if (0..=i128::from(max)).contains(&i) => Ok(i as u64),
            Yaml::Int(_) => Err(self.invalid("is out of range", &allowed)),
            _ => Err(self.invalid("is not a whole number", &allowed)),
        }
    }

    /// A whole number in `[0, max]`, or null for none.
    pub fn opt_count(&self, max: u64) -> Result<Option<u64>, ConfigError> {
        if self.is_null() {
            return Ok(None);
        }
        self.count(max).map(Some)
    }

    /// A finite number (whole or not).
    pub fn number(&self) -> Result<f64, ConfigError> {
        match self.node.value {
            Yaml::Int(i) => Ok(i as f64),
            Yaml::Float(f) if f.is_finite() => Ok(f),
            _ => Err(self.invalid("is not a finite number", "a number")),
        }
    }

    /// One of `choices`.
    pub fn choice(&self, choices: &[&'static str]) -> Result<&'static str, ConfigError> {
        let allowed = choices.join(", ");
        let Yaml::Str(s) = &self.node.value else {
            return Err(self.invalid("is not a string", &format!("one of {allowed}")));
        };
        choices
            .iter()
            .find(|c| **c == s.as_str())
            .copied()
            .ok_or_else(|| self.invalid("is not a known value", &format!("one of {allowed}")))
    }

    /// A list of strings (a single string counts as a list of one).
    pub fn strings(&self) -> Result<Vec<String>, ConfigError> {
        match &self.node.value {
            Yaml::Str(s) => Ok(vec![s.clone()]),
            Yaml::Seq(items) => items
                .iter()
                .enumerate()
                .map(|(i, n)| At::new(format!("{}[{i}]", self.key), n).string())
                .collect(),
            _ => Err(self.invalid("is not a list of strings", "a list of strings")),
        }
    }

    /// The entries of a mapping (null reads as an empty mapping).
    pub fn map(&self) -> Result<&'a [(String, u64, Node)], ConfigError> {
        match &self.node.value {
            Yaml::Map(entries) => Ok(entries),
            Yaml::Null => Ok(&[]),
            _ => Err(self.invalid("is not a mapping", "a mapping of settings")),
        }
    }
}

/// A key the schema does not have, with the nearest known key when it looks like a
/// typo. Reads `unknown key KEY (line N) (did you mean `NEAREST`?)`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown key {key}{}{}", at_line(*line), suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
pub struct UnknownKey {
    /// The key path.
    pub key: String,
    /// The nearest known key.
    pub suggestion: Option<String>,
    /// The line.
    pub line: u64,
}

/// Checks that every key of `entries` is in `known`, suggesting the nearest; the error's
/// key is `prefix.key` (or `key` alone when `prefix` is empty).
pub fn known_keys(
    prefix: &str,
    entries: &[(String, u64, Node)],
    known: &[&str],
) -> Result<(), UnknownKey> {
    for (key, line, _) in entries {
        if !known.contains(&key.as_str()) {
            return Err(UnknownKey {
                key: if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                },
                suggestion: nearest(key, known),
                line: *line,
            });
        }
    }
    Ok(())
}

/// The known name closest to `name`, when close enough to be a typo.
pub fn nearest(name: &str, known: &[&str]) -> Option<String> {
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(name, k), *k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.to_owned())
}
