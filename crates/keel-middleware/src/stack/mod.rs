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
//! `model` may also be a mapping naming its provider, `{provider: openai | anthropic,
//! model: NAME, base_url: URL, ...}` (keel.yaml's keys, see `keel serve`): its `model` is
//! the name, and the mapping is kept in [`Stack::model_spec`] for the application to
//! build the model from (`keel run` without `--script` does).
//!
//! An `mcp_servers:` list (tools from MCP servers) may stand beside these keys: the
//! stack loader leaves it to the application, which reads it with keel-mcp
//! (`keel run` and `keel serve` do).
//!
//! Each `middleware` entry is a one-key mapping from LangChain's class name in snake
//! case without `_middleware` to that class's constructor arguments under LangChain's
//! names (see [`NAMES`] and `docs/middleware.md`). Every error names the key,
//! the value, what is allowed and the line. Model names (the `model` key, fallback
//! models, a summary `model_name`) are resolved by the application through a
//! [`ModelRegistry`], so one file serves `keel run`, tests and a server.
//!
//! The entries a file may hold are a [`StackLoader`]'s registry: [`Stack::from_yaml_str`]
//! knows the built-in ones; an application adds its own [`StackEntry`] kinds with
//! [`StackLoader::with`]. `summarization` (DeerFlow's schema) is keel-summarization's
//! entry, `keel_summarization::stack::SummarizationEntry`; `keel::stack_loader()` and
//! `keel run` register it, and `keel serve` adds `session_memory` too.
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

mod loader;
pub(crate) mod value;

use std::path::Path;
use std::sync::Arc;

use keel_agent::{Agent, AgentBuilder};
use keel_config::yaml::{self, Yaml};
use keel_core::middleware::Middleware;
use keel_core::model::ChatModel;

pub use keel_config::stack::{BuildContext, CheckedEntry, EntrySource, StackEntry, StackError};
pub use keel_core::model::ModelRegistry;
pub use loader::{LoadedEntry, NAMES, StackLoader};

use value::{At, Refuse, known_keys};

pub use keel_config::MAX_STACK_BYTES;

/// The text of a stack file of at most [`MAX_STACK_BYTES`], read once.
pub fn read_stack_file(path: &Path) -> Result<String, StackError> {
    use keel_config::ReadError;
    let io = |message: &str| StackError::Io {
        path: path.display().to_string(),
        message: message.to_owned(),
    };
    keel_config::read_capped(path, MAX_STACK_BYTES).map_err(|e| match e {
        ReadError::Directory => io("it is a directory; name a YAML file"),
        ReadError::Io { message, .. } => io(&message),
        ReadError::NotUtf8 { .. } => io("it is not UTF-8 text"),
        ReadError::TooLarge => StackError::TooLarge {
            path: path.display().to_string(),
            cap: MAX_STACK_BYTES,
        },
    })
}

/// A loaded stack file. See the [module docs](self).
#[derive(Clone, Debug, Default)]
pub struct Stack {
    /// The `model` key: a name the application resolves (for a mapping such as
    /// `{provider: anthropic, model: claude-sonnet-4-5}`, its `model`).
    pub model: Option<String>,
    /// The `model` key when it is a mapping naming the provider (`provider`, `model`,
    /// `base_url`, ...), as parsed, left to the application to build the model from
    /// (`keel run` without `--script`, `keel serve`).
    pub model_spec: Option<yaml::Node>,
    /// The `system_prompt` key.
    pub system_prompt: Option<String>,
    /// The `middleware` list, outermost first.
    pub middleware: Vec<LoadedEntry>,
    /// The `mcp_servers` list as parsed (with its lines), left to the application:
    /// `keel_mcp::servers_from_node` reads it without parsing the file again.
    pub mcp_servers: Option<yaml::Node>,
    /// The line of the `model` key (0 when absent).
    model_line: u64,
}

impl Stack {
    /// Reads and checks a stack file of at most [`MAX_STACK_BYTES`] with the built-in
    /// entries.
    pub fn from_yaml_file(path: impl AsRef<Path>) -> Result<Stack, StackError> {
        StackLoader::builtin().load_file(path)
    }

    /// Parses and checks a stack document with the built-in entries.
    pub fn from_yaml_str(text: &str) -> Result<Stack, StackError> {
        StackLoader::builtin().load_str(text)
    }
}

impl Stack {
    /// The middleware, built with the application's models (outermost first). An entry
    /// its settings turn off (`summarization` with `enabled: false`) builds nothing.
    pub fn middleware(
        &self,
        models: Arc<dyn ModelRegistry>,
    ) -> Result<Vec<Arc<dyn Middleware>>, StackError> {
        let mut out = Vec::new();
        for (index, e) in self.middleware.iter().enumerate() {
            if let Some(m) = e.build(index, &models)? {
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
            return Err(keel_config::ConfigError::at(
                "model",
                "(missing)",
                "the stack names no model",
                "a model name the application resolves",
                1,
            )
            .into());
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

impl StackLoader {
    /// Reads and checks a stack file of at most [`MAX_STACK_BYTES`].
    pub fn load_file(&self, path: impl AsRef<Path>) -> Result<Stack, StackError> {
        self.load_str(&read_stack_file(path.as_ref())?)
    }

    /// Parses and checks a stack document.
    pub fn load_str(&self, text: &str) -> Result<Stack, StackError> {
        let root =
            yaml::parse(text).map_err(|(message, line)| StackError::Syntax { message, line })?;
        let top = match &root.value {
            Yaml::Map(entries) => entries.as_slice(),
            Yaml::Null => &[],
            _ => {
                return Err(At::new("(document)", &root).refuse(
                    "is not a mapping",
                    "a mapping with `model`, `system_prompt` and `middleware`",
                ));
            }
        };
        known_keys(
            "",
            top,
            &["model", "system_prompt", "middleware", "mcp_servers"],
        )?;
        let mut stack = Stack::default();
        for (key, _, node) in top {
            let v = At::new(key.clone(), node);
            match key.as_str() {
                "model" => {
                    stack.model = if let Yaml::Map(_) = &node.value {
                        let name = v
                            .map()?
                            .iter()
                            .find(|(k, _, _)| k == "model")
                            .map(|(_, _, n)| At::new("model.model", n))
                            .ok_or_else(|| {
                                v.refuse(
                                    "names no model",
                                    "a model name, or a mapping with `provider` and `model`",
                                )
                            })?;
                        stack.model_spec = Some(node.clone());
                        Some(name.string()?)
                    } else {
                        (!v.is_null()).then(|| v.string()).transpose()?
                    };
                    stack.model_line = node.line;
                }
                "system_prompt" => {
                    stack.system_prompt = (!v.is_null()).then(|| v.string()).transpose()?
                }
                // Tools, not middleware: read by the application with
                // `keel_mcp::servers_from_node`, which checks every key of it.
                "mcp_servers" => stack.mcp_servers = Some(node.clone()),
                _ => stack.middleware = self.read_list(node)?,
            }
        }
        Ok(stack)
    }
}

#[cfg(test)]
pub(crate) mod tests;
