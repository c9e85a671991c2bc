//! The `- recall:` entry of a stack file: [`RecallSettings`] read from the entry's part
//! of the parsed file (unknown keys refused with the nearest known one, every error at
//! its line) and checked with [`RecallSettings::validate`] before the stack is used.
//!
//! ```
//! use keel_config::stack::StackEntry;
//! use keel_recall::RecallEntry;
//!
//! assert_eq!(RecallEntry.name(), "recall");
//! ```

use std::sync::Arc;

use keel_config::stack::{BuildContext, CheckedEntry, EntrySource, StackEntry, StackError};
use keel_config::yaml::Yaml;
use keel_config::{At, ConfigError, from_node, known_keys};
use keel_core::middleware::Middleware;

use crate::{RecallMiddleware, RecallSettings};

/// The stack entry `recall`: a [`RecallMiddleware`] on an in-memory index, with the
/// entry's settings.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecallEntry;

/// Reads and checks the settings of a `recall` entry: unknown keys are refused with the
/// nearest known one, a value of the wrong type with serde's message, and a value out of
/// range with its key, value and allowed range; every error names its line.
pub fn read_settings(source: &EntrySource<'_>) -> Result<RecallSettings, StackError> {
    let prefix = format!("middleware[{}].{}", source.index, source.name);
    let entries = At::new(prefix.clone(), source.node).map()?;
    known_keys(&prefix, entries, &RecallSettings::KEYS)?;
    let settings: RecallSettings = match source.node.value {
        Yaml::Null => RecallSettings::default(),
        _ => from_node(source.node).map_err(|e| StackError::Settings {
            key: prefix,
            message: e.message,
            line: e.line,
        })?,
    };
    settings.validate().map_err(|e| out_of_range(source, e))?;
    Ok(settings)
}

/// A setting [`RecallSettings::validate`] refused, at the entry's position and line.
fn out_of_range(source: &EntrySource<'_>, e: crate::RecallSettingsError) -> StackError {
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
}
