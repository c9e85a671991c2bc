//! The stack file: one YAML document describing an agent's model, system prompt and
//! middleware stack, so a stack can change without recompiling.
//!
//! ```yaml
//! model: gpt-4o-mini                # resolved by the application
//! system_prompt: You are a support agent.
//! middleware:                       # outermost first
//!   - pii: {pii_type: email, strategy: redact, apply_to_input: true}
//!   - model_call_limit: {run_limit: 2, exit_behavior: end}
//!   - context_editing: {edits: [{clear_tool_uses: {trigger: 1000, keep: 1}}]}
//!   - summarization: {trigger: {type: tokens, value: 4000}, keep: {type: messages, value: 20}}
//! ```
//!
//! An `mcp_servers:` list (tools from MCP servers) may stand beside these keys: the
//! stack loader leaves it to the application, which reads it with keel-mcp
//! (`keel run` and `keel serve` do).
//!
//! Each `middleware` entry is a one-key mapping from LangChain's class name in snake
//! case without `_middleware` to that class's constructor arguments under LangChain's
//! names (see [`entries::NAMES`] and `docs/middleware.md`); `summarization` takes
//! DeerFlow's schema and is loaded by keel-summarization. Every error names the key,
//! the value, what is allowed and the line. Model names (the `model` key, fallback
//! models, a summary `model_name`) are resolved by the application through a
//! [`ModelRegistry`], so one file serves `keel run`, tests and a server.
//!
//! ```
//! use std::sync::Arc;
//! use keel_core::message::Message;
//! use keel_core::model::ChatModel;
//! use keel_middleware::stack::Stack;
//! use keel_testkit::ScriptedModel;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let stack = Stack::from_yaml_str(
//!     "system_prompt: Be brief.\nmiddleware:\n  - pii: {pii_type: email}\n",
//! )?;
//! let model = Arc::new(ScriptedModel::new([Message::ai("ok")]));
//! let m: Arc<dyn ChatModel> = model.clone();
//! let agent = stack.agent_builder(m.clone(), Arc::new(move |_: &str| Some(m.clone())))?.build()?;
//! agent.invoke("t", vec![Message::human("mail me at a@b.io")]).await?;
//! assert_eq!(model.requests()[0].messages[0].text(), "mail me at [REDACTED_EMAIL]");
//! # Ok(())
//! # }
//! ```

pub mod entries;
mod error;
mod value;

use std::path::Path;
use std::sync::Arc;

use keel_agent::{Agent, AgentBuilder};
use keel_core::middleware::Middleware;
use keel_core::model::ChatModel;
use keel_summarization::yaml::{self, Node, Yaml};

pub use error::StackError;
pub use keel_summarization::middleware::ModelRegistry;

use entries::{Entry, EntryAt, NAMES};
use value::{At, known_keys, nearest};

/// The largest stack file read: 1 MiB.
pub const MAX_STACK_BYTES: u64 = 1024 * 1024;

/// One middleware entry of a stack file.
#[derive(Clone)]
pub struct StackEntry {
    /// Its name in the file (`pii`).
    pub name: String,
    /// The line of its name.
    pub line: u64,
    entry: Entry,
}

impl std::fmt::Debug for StackEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackEntry")
            .field("name", &self.name)
            .field("line", &self.line)
            .finish_non_exhaustive()
    }
}

/// A loaded stack file. See the [module docs](self).
#[derive(Clone, Debug, Default)]
pub struct Stack {
    /// The `model` key: a name the application resolves.
    pub model: Option<String>,
    /// The `system_prompt` key.
    pub system_prompt: Option<String>,
    /// The `middleware` list, outermost first.
    pub middleware: Vec<StackEntry>,
    /// The line of the `model` key (0 when absent).
    model_line: u64,
}

impl Stack {
    /// Reads and checks a stack file of at most [`MAX_STACK_BYTES`].
    pub fn from_yaml_file(path: impl AsRef<Path>) -> Result<Stack, StackError> {
        use std::io::Read as _;
        let path = path.as_ref();
        let io = |message: String| StackError::Io {
            path: path.display().to_string(),
            message,
        };
        if path.is_dir() {
            return Err(io("it is a directory; name a YAML file".into()));
        }
        let file = std::fs::File::open(path).map_err(|e| io(e.to_string()))?;
        let mut bytes = Vec::new();
        file.take(MAX_STACK_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io(e.to_string()))?;
        if bytes.len() as u64 > MAX_STACK_BYTES {
            return Err(StackError::TooLarge {
                path: path.display().to_string(),
                cap: MAX_STACK_BYTES,
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| io("it is not UTF-8 text".into()))?;
        Self::from_yaml_str(&text)
    }

    /// Parses and checks a stack document.
    pub fn from_yaml_str(text: &str) -> Result<Stack, StackError> {
        let root =
            yaml::parse(text).map_err(|(message, line)| StackError::Syntax { message, line })?;
        let top = match &root.value {
            Yaml::Map(entries) => entries.as_slice(),
            Yaml::Null => &[],
            _ => {
                return Err(At::new("(document)", &root).invalid(
                    "is not a mapping",
                    "a mapping with `model`, `system_prompt` and `middleware`",
                ));
            }
        };
        known_keys(
            "(document)",
            top,
            &["model", "system_prompt", "middleware", "mcp_servers"],
        )
        .map_err(|e| match e {
            StackError::UnknownKey {
                key,
                suggestion,
                line,
            } => StackError::UnknownKey {
                key: key.trim_start_matches("(document).").to_owned(),
                suggestion,
                line,
            },
            other => other,
        })?;
        let mut stack = Stack::default();
        for (i, (key, _, node)) in top.iter().enumerate() {
            let v = At::new(key.clone(), node);
            match key.as_str() {
                "model" => {
                    stack.model = (!v.is_null()).then(|| v.string()).transpose()?;
                    stack.model_line = node.line;
                }
                "system_prompt" => {
                    stack.system_prompt = (!v.is_null()).then(|| v.string()).transpose()?
                }
                // Tools, not middleware: read by the application with
                // `keel_mcp::servers_from_yaml`, which checks every key of it.
                "mcp_servers" => {}
                _ => {
                    // The line before the next top-level key ends the list.
                    let after = top
                        .get(i + 1)
                        .map_or(u64::MAX, |(_, line, _)| line.saturating_sub(1));
                    stack.middleware = read_list(&v, text, after)?;
                }
            }
        }
        Ok(stack)
    }

    /// The middleware, built with the application's models (outermost first). A
    /// `summarization` entry with `enabled: false` builds nothing.
    pub fn middleware(
        &self,
        models: Arc<dyn ModelRegistry>,
    ) -> Result<Vec<Arc<dyn Middleware>>, StackError> {
        let mut out = Vec::new();
        for (index, e) in self.middleware.iter().enumerate() {
            if let Some(m) = entries::build(&e.entry, index, &e.name, e.line, &models)? {
                out.push(m);
            }
        }
        Ok(out)
    }

    /// An agent builder for the file's `model` (resolved by `models`), with the system
    /// prompt and the middleware; add tools and a checkpointer, then build. A file
    /// without a `model` key, or naming a model `models` does not know, is an error
    /// naming the line.
    pub fn builder(&self, models: Arc<dyn ModelRegistry>) -> Result<AgentBuilder, StackError> {
        let Some(name) = &self.model else {
            return Err(StackError::Invalid {
                key: "model".into(),
                value: "(missing)".into(),
                problem: "the stack names no model".into(),
                allowed: "a model name the application resolves".into(),
                line: 1,
            });
        };
        let model = models
            .resolve(name)
            .ok_or_else(|| StackError::UnknownModel {
                key: "model".into(),
                name: name.clone(),
                line: self.model_line,
            })?;
        self.agent_builder(model, models)
    }

    /// An agent builder with `model`, the system prompt and the middleware; add tools
    /// and a checkpointer, then build (which checks the stack's state keys and jumps).
    pub fn agent_builder(
        &self,
        model: Arc<dyn ChatModel>,
        models: Arc<dyn ModelRegistry>,
    ) -> Result<AgentBuilder, StackError> {
        let mut builder = Agent::builder().model(model);
        if let Some(prompt) = &self.system_prompt {
            builder = builder.system_prompt(prompt.clone());
        }
        for m in self.middleware(models)? {
            builder = builder.middleware_shared(m);
        }
        Ok(builder)
    }
}

fn read_list(list: &At<'_>, text: &str, last_line: u64) -> Result<Vec<StackEntry>, StackError> {
    let items: &[Node] = match &list.node.value {
        Yaml::Seq(items) => items,
        Yaml::Null => &[],
        _ => {
            return Err(list.invalid(
                "is not a list",
                "a list of one-key mappings, outermost first",
            ));
        }
    };
    // Each entry's name line, to know where each entry's text ends.
    let mut heads = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let at = At::new(format!("middleware[{index}]"), item);
        let Yaml::Map(map) = &item.value else {
            return Err(at.invalid(
                "is not a one-key mapping",
                "`- name: {settings}`, e.g. `- pii: {pii_type: email}`",
            ));
        };
        let [(name, line, settings)] = map.as_slice() else {
            return Err(at.invalid(
                "is not a one-key mapping (one middleware per list item)",
                "`- name: {settings}`, e.g. `- pii: {pii_type: email}`",
            ));
        };
        if !NAMES.contains(&name.as_str()) {
            return Err(StackError::UnknownKey {
                key: format!("middleware[{index}].{name}"),
                suggestion: nearest(name, NAMES),
                line: *line,
            });
        }
        heads.push((name, *line, settings));
    }
    let mut out = Vec::new();
    for (index, (name, line, settings)) in heads.iter().enumerate() {
        let end = heads
            .get(index + 1)
            .map_or(last_line, |(_, next, _)| next.saturating_sub(1));
        let at = EntryAt {
            index,
            name,
            line: *line,
        };
        let entry = entries::read(&at, settings, text, end)?;
        out.push(StackEntry {
            name: (*name).clone(),
            line: *line,
            entry,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
