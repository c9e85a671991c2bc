//! The `- recall:` entry of a stack file, and the one reader of [`RecallSettings`] from
//! a parsed file ([`settings_from_node`], also used for a `recall:` section elsewhere):
//! the settings read from their part of the parsed file (unknown keys refused with the
//! nearest known one, every error at its line) and checked with
//! [`RecallSettings::validate`] before they are used.
//!
//! ```
//! use keel_config::stack::StackEntry;
//! use keel_recall::RecallEntry;
//!
//! assert_eq!(RecallEntry.name(), "recall");
//! ```

use std::sync::Arc;

use keel_config::stack::{BuildContext, CheckedEntry, EntrySource, StackEntry, StackError};
use keel_config::yaml::Node;
use keel_config::yaml::Yaml;
use keel_config::{At, ConfigError, UnknownKey, at_line, from_node, known_keys};
use keel_core::middleware::Middleware;

use crate::{RecallMiddleware, RecallSettings, RecallSettingsError};

/// The stack entry `recall`: a [`RecallMiddleware`] on an in-memory index, with the
/// entry's settings.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecallEntry;

/// Why [`settings_from_node`] refused a node: every variant names the key path it was
/// given and the line.
#[derive(Debug, thiserror::Error)]
pub enum ReadSettingsError {
    /// The value is not a mapping (nor empty).
    #[error(transparent)]
    NotAMapping(ConfigError),
    /// A key [`RecallSettings`] does not have, with the nearest known one.
    #[error(transparent)]
    UnknownKey(#[from] UnknownKey),
    /// A value of the wrong type (serde's message), at the line of the value.
    #[error("{key}{}: {message}", at_line(*line))]
    Type {
        /// The key path of the settings (`recall`).
        key: String,
        /// serde's message.
        message: String,
        /// The line.
        line: u64,
    },
    /// A value [`RecallSettings::validate`] refused.
    #[error("{error}")]
    OutOfRange {
        /// The refused setting: its full key, value, allowed range and line.
        error: Box<ConfigError>,
        /// The check's own error.
        source: RecallSettingsError,
    },
}

/// Reads and checks [`RecallSettings`] from `node`, naming them `key` in errors
/// (`recall`, `middleware[1].recall`): unknown keys are refused with the nearest known
/// one, a value of the wrong type with serde's message, and a value out of range with
/// its key, value and allowed range; every error names its line. An empty value reads
/// as the defaults.
///
/// ```
/// use keel_config::yaml;
///
/// let root = yaml::parse("recall:\n  max_tokens: 10\n").unwrap();
/// let yaml::Yaml::Map(top) = &root.value else { unreachable!() };
/// let e = keel_recall::stack::settings_from_node("recall", &top[0].2).unwrap_err();
/// assert_eq!(
///     e.to_string(),
///     "recall.max_tokens = 10 (line 2): is out of range; allowed: a whole number in [20, 20000]"
/// );
/// ```
pub fn settings_from_node(key: &str, node: &Node) -> Result<RecallSettings, ReadSettingsError> {
    let entries = At::new(key, node)
        .map()
        .map_err(ReadSettingsError::NotAMapping)?;
    known_keys(key, entries, &RecallSettings::KEYS)?;
    let settings: RecallSettings = match node.value {
        Yaml::Null => RecallSettings::default(),
        _ => from_node(node).map_err(|e| ReadSettingsError::Type {
            key: key.to_owned(),
            message: e.message,
            line: e.line,
        })?,
    };
    settings.validate().map_err(|source| {
        // The line of the refused value (the settings' own line when it is a default).
        let line = entries
            .iter()
            .find(|(k, _, _)| k == source.field)
            .map_or(node.line, |(_, _, v)| v.line);
        ReadSettingsError::OutOfRange {
            error: Box::new(ConfigError::at(
                format!("{key}.{}", source.field),
                &source.value,
                "is out of range",
                &source.range,
                line,
            )),
            source,
        }
    })?;
    Ok(settings)
}

/// Reads and checks the settings of a `recall` entry with [`settings_from_node`], under
/// the key `middleware[i].recall`; a value out of range is reported at the entry's line.
pub fn read_settings(source: &EntrySource<'_>) -> Result<RecallSettings, StackError> {
    let prefix = format!("middleware[{}].{}", source.index, source.name);
    settings_from_node(&prefix, source.node).map_err(|e| match e {
        ReadSettingsError::NotAMapping(e) => StackError::Invalid(e),
        ReadSettingsError::UnknownKey(e) => StackError::UnknownKey(e),
        ReadSettingsError::Type { key, message, line } => {
            StackError::Settings { key, message, line }
        }
        ReadSettingsError::OutOfRange { source: e, .. } => out_of_range(source, e),
    })
}

/// A setting [`RecallSettings::validate`] refused, at the entry's position and line.
fn out_of_range(source: &EntrySource<'_>, e: RecallSettingsError) -> StackError {
    StackError::Middleware {
        index: source.index,
        line: source.line,
        source: Box::new(ConfigError::new(
            "recall",
            e.field,
            e.value,
            "is out of range",
            e.range,
        )),
    }
}

/// A checked `recall` entry: the middleware, built at read time (it needs no model).
struct Checked(Arc<RecallMiddleware>);

impl StackEntry for RecallEntry {
    fn name(&self) -> &'static str {
        "recall"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let settings = read_settings(source)?;
        let m = RecallMiddleware::builder(settings)
            .build()
            .map_err(|e| out_of_range(source, e))?;
        Ok(Arc::new(Checked(Arc::new(m))))
    }
}

impl CheckedEntry for Checked {
    fn build(&self, _: &BuildContext<'_>) -> Result<Option<Arc<dyn Middleware>>, StackError> {
        Ok(Some(self.0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_config::yaml::{self, Node};

    fn settings(text: &str) -> Result<RecallSettings, String> {
        let root = yaml::parse(text).unwrap();
        let Yaml::Map(top) = &root.value else {
            unreachable!()
        };
        let (name, line, node): &(String, u64, Node) = &top[0];
        read_settings(&EntrySource {
            index: 1,
            name,
            line: *line,
            node,
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn every_key_is_a_field_of_the_settings() {
        let value = serde_json::to_value(RecallSettings::default()).unwrap();
        let fields: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut keys = RecallSettings::KEYS.to_vec();
        keys.sort_unstable();
        let mut fields = fields;
        fields.sort_unstable();
        assert_eq!(keys, fields);
    }

    #[test]
    fn reads_typed_settings_and_names_key_value_range_and_line() {
        let s = settings("recall:\n  max_excerpts: 2\n  min_score: 1\n  flow_id: f\n").unwrap();
        assert_eq!(
            (s.max_excerpts, s.min_score, s.flow_id.as_str()),
            (2, 1.0, "f")
        );
        assert_eq!(settings("recall:\n").unwrap(), RecallSettings::default());
        assert_eq!(
            settings("recall:\n  max_tokens: 10\n").unwrap_err(),
            "middleware[1].recall.max_tokens = 10: is out of range; allowed: a whole number in [20, 20000] (line 1)"
        );
        assert_eq!(
            settings("recall:\n  max_token: 10\n").unwrap_err(),
            "unknown key middleware[1].recall.max_token (line 2) (did you mean `max_tokens`?)"
        );
        let e = settings("recall:\n  flow_id: f\n  max_excerpts: many\n").unwrap_err();
        assert!(
            e.starts_with("middleware[1].recall (line 3): invalid type: string \"many\""),
            "{e}"
        );
        assert_eq!(
            settings("recall: [1]\n").unwrap_err(),
            "middleware[1].recall = a list (line 1): is not a mapping; allowed: a mapping of settings"
        );
    }

    fn section(text: &str) -> Result<RecallSettings, String> {
        let root = yaml::parse(text).unwrap();
        let Yaml::Map(top) = &root.value else {
            unreachable!()
        };
        settings_from_node("recall", &top[0].2).map_err(|e| e.to_string())
    }

    #[test]
    fn a_section_names_its_own_key_and_the_line_of_the_value() {
        assert_eq!(
            section("recall:\n  max_excerpts: 2\n")
                .unwrap()
                .max_excerpts,
            2
        );
        assert_eq!(section("recall: {}\n").unwrap(), RecallSettings::default());
        assert_eq!(
            section("recall:\n  flow_id: f\n  max_tokens: 10\n").unwrap_err(),
            "recall.max_tokens = 10 (line 3): is out of range; allowed: a whole number in [20, 20000]"
        );
        assert_eq!(
            section("recall:\n  max_token: 10\n").unwrap_err(),
            "unknown key recall.max_token (line 2) (did you mean `max_tokens`?)"
        );
        let e = section("recall:\n  max_excerpts: many\n").unwrap_err();
        assert!(
            e.starts_with("recall (line 2): invalid type: string \"many\""),
            "{e}"
        );
        assert_eq!(
            section("recall: 3\n").unwrap_err(),
            "recall = 3 (line 1): is not a mapping; allowed: a mapping of settings"
        );
    }
}
