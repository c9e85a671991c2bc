//! The shared typed reads (keel-config), as the stack loader uses them.

pub(crate) use keel_config::{At, known_keys, nearest};

use keel_config::stack::StackError;

/// [`At::invalid`] as a stack error.
pub(crate) trait Refuse {
    /// The value refused: `problem`, and what is `allowed`, at its line.
    fn refuse(&self, problem: &str, allowed: &str) -> StackError;
}

impl Refuse for At<'_> {
    fn refuse(&self, problem: &str, allowed: &str) -> StackError {
        self.invalid(problem, allowed).into()
    }
}

use std::sync::Arc;

use keel_config::stack::{BuildContext, CheckedEntry, EntrySource};
use keel_config::yaml::Node;
use keel_core::middleware::Middleware;

/// One entry's settings mapping, its keys checked against what the entry knows: what a
/// middleware folder's entry reads its settings from.
pub(crate) struct Settings<'a> {
    index: usize,
    name: &'a str,
    line: u64,
    entries: &'a [(String, u64, Node)],
}

impl<'a> Settings<'a> {
    /// The settings of `source`, refusing a key not in `known`.
    pub fn read(source: &EntrySource<'a>, known: &[&str]) -> Result<Self, StackError> {
        let prefix = format!("middleware[{}].{}", source.index, source.name);
        let entries = At::new(prefix.clone(), source.node).map()?;
        known_keys(&prefix, entries, known)?;
        Ok(Settings {
            index: source.index,
            name: source.name,
            line: source.line,
            entries,
        })
    }

    /// The value of `key`, when given.
    pub fn get(&self, key: &str) -> Option<At<'a>> {
        self.entries
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, _, n)| At::new(format!("middleware[{}].{}.{key}", self.index, self.name), n))
    }

    /// The middleware's own check refused a setting: the error with the entry's
    /// position and line.
    pub fn refused(&self, source: keel_config::ConfigError) -> StackError {
        StackError::Middleware {
            index: self.index,
            line: self.line,
            source: Box::new(source),
        }
    }
}

/// An entry built at read time: it needs no model.
pub(crate) struct Ready(pub Arc<dyn Middleware>);

impl CheckedEntry for Ready {
    fn build(&self, _: &BuildContext<'_>) -> Result<Option<Arc<dyn Middleware>>, StackError> {
        Ok(Some(self.0.clone()))
    }
}
