//! The `- summarization:` entry of a stack file (`keel run --config`, `keel serve`),
//! registered with a stack loader: DeerFlow's schema, checked on the entry's part of
//! the parsed file, so errors name the file's lines.
//!
//! ```
//! use keel_config::stack::StackEntry;
//! use keel_summarization::stack::SummarizationEntry;
//!
//! assert_eq!(SummarizationEntry.name(), "summarization");
//! ```

use std::sync::Arc;

use keel_config::stack::{BuildContext, CheckedEntry, EntrySource, StackEntry, StackError};
use keel_config::yaml::{Node, Yaml};
use keel_core::middleware::Middleware;

use crate::config::{LoadedConfig, SummarizationConfig};
use crate::middleware::SummarizationMiddleware;

/// The stack entry `summarization`. Listing it in a stack is asking for it: only an
/// explicit `enabled: false` turns it off (DeerFlow's default of false is for its
/// shared config.yaml). Summary models (`model_name`) resolve through the
/// application's models.
#[derive(Clone, Copy, Debug, Default)]
pub struct SummarizationEntry;

/// Reads and checks the settings of a `summarization` entry (at position `index` of
/// the `middleware` list) with DeerFlow's defaults, for applications that build the
/// middleware themselves (`keel serve` does, on its database).
pub fn read_section(index: usize, node: &Node) -> Result<LoadedConfig, StackError> {
    SummarizationConfig::from_node(node).map_err(|source| StackError::Entry {
        index,
        source: Box::new(source),
    })
}

struct Checked(SummarizationConfig);

impl StackEntry for SummarizationEntry {
    fn name(&self) -> &'static str {
        "summarization"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let mut config = read_section(source.index, source.node)?.config;
        let explicit =
            matches!(&source.node.value, Yaml::Map(e) if e.iter().any(|(k, _, _)| k == "enabled"));
        if !explicit {
            config.enabled = true;
        }
        Ok(Arc::new(Checked(config)))
    }
}

impl CheckedEntry for Checked {
    fn build(&self, ctx: &BuildContext<'_>) -> Result<Option<Arc<dyn Middleware>>, StackError> {
        if !self.0.enabled {
            return Ok(None);
        }
        let registry = ctx.models.clone();
        let m = SummarizationMiddleware::builder(self.0.clone())
            .model_registry(move |n: &str| registry.resolve(n))
            .build()
            .map_err(|source| StackError::Build {
                index: ctx.index,
                line: ctx.line,
                source: Box::new(source),
            })?;
        Ok(Some(Arc::new(m)))
    }
}
