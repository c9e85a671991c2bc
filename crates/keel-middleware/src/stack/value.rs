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
use keel_core::model::ChatModel;

/// The largest call limit or tool count accepted.
pub(crate) const MAX_LIMIT: u64 = 1_000_000_000;

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
            .map(|(_, _, n)| At::new(self.key(key), n))
    }

    /// The key path of one setting (`middleware[1].pii.strategy`).
    pub fn key(&self, field: &str) -> String {
        format!("middleware[{}].{}.{field}", self.index, self.name)
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

/// The middleware's own check refused a setting at build time: the error with the
/// entry's position and line.
pub(crate) fn build_refused(
    ctx: &BuildContext<'_>,
    source: keel_config::ConfigError,
) -> StackError {
    StackError::Middleware {
        index: ctx.index,
        line: ctx.line,
        source: Box::new(source),
    }
}

/// A model name read from the entry's `field` (`models[0]`, `classifier`), written at
/// `line`, resolved with the application's models.
pub(crate) fn resolve_model(
    ctx: &BuildContext<'_>,
    field: &str,
    name: &str,
    line: u64,
) -> Result<Arc<dyn ChatModel>, StackError> {
    ctx.models
        .resolve(name)
        .ok_or_else(|| StackError::UnknownModel {
            key: format!("middleware[{}].{}.{field}", ctx.index, ctx.name),
            name: name.to_owned(),
            line,
        })
}

/// A model name and the line it is written at, resolved when the entry builds.
#[derive(Clone, Debug)]
pub(crate) struct ModelName {
    /// The name.
    pub name: String,
    /// Its line.
    pub line: u64,
}

impl ModelName {
    /// The model name at `v`.
    pub fn read(v: &At<'_>) -> Result<Self, StackError> {
        Ok(ModelName {
            name: v.string()?,
            line: v.node.line,
        })
    }

    /// The model, resolved with the application's models; `field` names it in errors.
    pub fn resolve(
        &self,
        ctx: &BuildContext<'_>,
        field: &str,
    ) -> Result<Arc<dyn ChatModel>, StackError> {
        resolve_model(ctx, field, &self.name, self.line)
    }
}
