//! Reading typed values out of the line-aware YAML tree, with errors naming the key,
//! the value, the allowed range and the line.

use keel_summarization::yaml::{Node, Yaml};

use super::error::StackError;

/// One value and the key path it sits at.
pub(crate) struct At<'a> {
    pub key: String,
    pub node: &'a Node,
}

impl<'a> At<'a> {
    pub fn new(key: impl Into<String>, node: &'a Node) -> Self {
        At {
            key: key.into(),
            node,
        }
    }

    pub fn invalid(&self, problem: &str, allowed: &str) -> StackError {
        StackError::Invalid {
            key: self.key.clone(),
            value: self.node.value.show(),
            problem: problem.into(),
            allowed: allowed.into(),
            line: self.node.line,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self.node.value, Yaml::Null)
    }

    pub fn string(&self) -> Result<String, StackError> {
        match &self.node.value {
            Yaml::Str(s) => Ok(s.clone()),
            _ => Err(self.invalid("is not a string", "a string")),
        }
    }

    pub fn bool(&self) -> Result<bool, StackError> {
        match self.node.value {
            Yaml::Bool(b) => Ok(b),
            _ => Err(self.invalid("is not true or false", "true or false")),
        }
    }

    /// A whole number in `[0, max]`.
    pub fn count(&self, max: u64) -> Result<u64, StackError> {
        let allowed = format!("a whole number in [0, {max}]");
        match self.node.value {
            Yaml::Int(i) if (0..=i128::from(max)).contains(&i) => Ok(i as u64),
            Yaml::Int(_) => Err(self.invalid("is out of range", &allowed)),
            _ => Err(self.invalid("is not a whole number", &allowed)),
        }
    }

    /// A whole number in `[0, max]`, or null for none.
    pub fn opt_count(&self, max: u64) -> Result<Option<u64>, StackError> {
        if self.is_null() {
            return Ok(None);
        }
        self.count(max).map(Some)
    }

    /// A finite number (whole or not).
    pub fn number(&self) -> Result<f64, StackError> {
        match self.node.value {
            Yaml::Int(i) => Ok(i as f64),
            Yaml::Float(f) if f.is_finite() => Ok(f),
            _ => Err(self.invalid("is not a finite number", "a number")),
        }
    }

    /// One of `choices`.
    pub fn choice(&self, choices: &[&'static str]) -> Result<&'static str, StackError> {
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
    pub fn strings(&self) -> Result<Vec<String>, StackError> {
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
    pub fn map(&self) -> Result<&'a [(String, u64, Node)], StackError> {
        match &self.node.value {
            Yaml::Map(entries) => Ok(entries),
            Yaml::Null => Ok(&[]),
            _ => Err(self.invalid("is not a mapping", "a mapping of settings")),
        }
    }
}

/// Checks that every key of `entries` is in `known`, suggesting the nearest.
pub(crate) fn known_keys(
    prefix: &str,
    entries: &[(String, u64, Node)],
    known: &[&str],
) -> Result<(), StackError> {
    for (key, line, _) in entries {
        if !known.contains(&key.as_str()) {
            return Err(StackError::UnknownKey {
                key: format!("{prefix}.{key}"),
                suggestion: nearest(key, known),
                line: *line,
            });
        }
    }
    Ok(())
}

/// The known name closest to `name`, when close enough to be a typo.
pub(crate) fn nearest(name: &str, known: &[&str]) -> Option<String> {
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(name, k), *k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.to_owned())
}
