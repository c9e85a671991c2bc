//! The stack loader: an open registry of entry kinds. Keel's built-in entries are
//! registered by [`StackLoader::builtin`]; an application adds its own (or replaces a
//! built-in one) with [`StackLoader::with`], and every entry is read from the one
//! parsed tree, so errors keep the file's line numbers.

use std::sync::Arc;

use keel_config::stack::{BuildContext, CheckedEntry, EntrySource, StackEntry, StackError};
use keel_config::yaml::{Node, Yaml};
use keel_core::middleware::Middleware;
use keel_core::model::ModelRegistry;

use super::value::{At, Refuse, nearest};

/// The middleware names a stack file accepts (LangChain's class names in snake case,
/// without `_middleware`), in the order [`StackLoader::builtin`] registers them.
pub const NAMES: &[&str] = &[
    "model_call_limit",
    "tool_call_limit",
    "model_retry",
    "tool_retry",
    "tool_error",
    "model_fallback",
    "context_editing",
    "pii",
    "todo_list",
    "llm_tool_selector",
    "llm_tool_emulator",
    "model_router",
    "model_refusal",
    "human_in_the_loop",
    "recall",
];

/// One middleware entry of a loaded stack file.
#[derive(Clone)]
pub struct LoadedEntry {
    /// Its name in the file (`pii`).
    pub name: String,
    /// The line of its name.
    pub line: u64,
    entry: Arc<dyn CheckedEntry>,
}

impl std::fmt::Debug for LoadedEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedEntry")
            .field("name", &self.name)
            .field("line", &self.line)
            .finish_non_exhaustive()
    }
}

impl LoadedEntry {
    /// Builds the entry (its position is `index`) with the application's models.
    pub fn build(
        &self,
        index: usize,
        models: &Arc<dyn ModelRegistry>,
    ) -> Result<Option<Arc<dyn Middleware>>, StackError> {
        self.entry.build(&BuildContext {
            index,
            name: &self.name,
            line: self.line,
            models,
        })
    }
}

/// The registry of entry kinds a stack file's `middleware` list may hold.
#[derive(Clone, Default)]
pub struct StackLoader {
    entries: Vec<Arc<dyn StackEntry>>,
}

impl std::fmt::Debug for StackLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackLoader")
            .field("entries", &self.names())
            .finish()
    }
}

impl StackLoader {
    /// A loader that knows no entry.
    pub fn empty() -> Self {
        Self::default()
    }

    /// A loader that knows Keel's built-in entries ([`NAMES`]), each read by its
    /// middleware's folder (`recall` by keel-recall).
    pub fn builtin() -> Self {
        Self::empty()
            .with(crate::model_call_limit::Entry)
            .with(crate::tool_call_limit::Entry)
            .with(crate::model_retry::Entry)
            .with(crate::tool_retry::Entry)
            .with(crate::tool_error::Entry)
            .with(crate::model_fallback::Entry)
            .with(crate::context_editing::Entry)
            .with(crate::pii::Entry)
            .with(crate::todo_list::Entry)
            .with(crate::llm_tool_selector::Entry)
            .with(crate::llm_tool_emulator::Entry)
            .with(crate::model_router::Entry)
            .with(crate::model_refusal::Entry)
            .with(crate::human_in_the_loop::Entry)
            .with(keel_recall::RecallEntry)
    }

    /// Adds an entry kind; one of the same name is replaced.
    pub fn with(mut self, entry: impl StackEntry + 'static) -> Self {
        self.entries.retain(|e| e.name() != entry.name());
        self.entries.push(Arc::new(entry));
        self
    }

    /// The entry names known, in registration order.
    pub fn names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.name()).collect()
    }

    /// Reads a `middleware` list (the value of the `middleware` key), checking every
    /// entry.
    pub fn read_list(&self, list: &Node) -> Result<Vec<LoadedEntry>, StackError> {
        let list = At::new("middleware", list);
        let items: &[Node] = match &list.node.value {
            Yaml::Seq(items) => items,
            Yaml::Null => &[],
            _ => {
                return Err(list.refuse(
                    "is not a list",
                    "a list of one-key mappings, outermost first",
                ));
            }
        };
        let names = self.names();
        let mut heads = Vec::new();
        for (index, item) in items.iter().enumerate() {
            let at = At::new(format!("middleware[{index}]"), item);
            let Yaml::Map(map) = &item.value else {
                return Err(at.refuse(
                    "is not a one-key mapping",
                    "`- name: {settings}`, e.g. `- pii: {pii_type: email}`",
                ));
            };
            let [(name, line, settings)] = map.as_slice() else {
                return Err(at.refuse(
                    "is not a one-key mapping (one middleware per list item)",
                    "`- name: {settings}`, e.g. `- pii: {pii_type: email}`",
                ));
            };
            let Some(kind) = self.entries.iter().find(|e| e.name() == name.as_str()) else {
                return Err(keel_config::UnknownKey {
                    key: format!("middleware[{index}].{name}"),
                    suggestion: nearest(name, &names),
                    line: *line,
                }
                .into());
            };
            heads.push((kind, name, *line, settings));
        }
        let mut out = Vec::new();
        for (index, (kind, name, line, node)) in heads.into_iter().enumerate() {
            let source = EntrySource {
                index,
                name,
                line,
                node,
            };
            out.push(LoadedEntry {
                name: name.clone(),
                line,
                entry: kind.read(&source)?,
            });
        }
        Ok(out)
    }
}
