//! `keel.yaml`: an agent described in YAML, in the stack format of `keel run` (top-level
//! `model` and `system_prompt` keys, a `middleware:` list of one-key mappings, outermost
//! first, `- summarization: {...}` in DeerFlow's schema).
//!
//! Beside the stack file's keys, a server reads: the model (`offline`, Keel's
//! deterministic model, an OpenAI-compatible server, or Claude through Anthropic's
//! Messages API), built-in tools, the graph name
//! and description, and a `session_memory` entry (Keel's rolling session memory, on
//! the server's database). `summarization` is built on the server's database too, so
//! processes sharing it share summaries. The `middleware` list is read once, by
//! `keel_middleware::stack::StackLoader` with these two entries added to its built-in
//! ones (`human_in_the_loop`, `pii`, `model_call_limit`, ...), on the file's own parsed
//! tree, so every error names its line in keel.yaml. Model names inside entries (a
//! fallback model, a router's choices) resolve to the agent's own model when they name
//! it or `offline`.
//!
//! ```yaml
//! name: agent                      # the graph id the assistant is listed under
//! model: offline                   # or {provider: openai, model: NAME, base_url: URL,
//!                                  #     api_key_env: VAR, context_window: N}
//!                                  # or {provider: anthropic, model: claude-sonnet-4-5,
//!                                  #     base_url, api_key_env, context_window,
//!                                  #     max_tokens: N, cache_ttl: 5m | 1h | off}
//! system_prompt: You are a support assistant.
//! tools: [echo]                    # built-in tools
//! mcp_servers:                     # tools from MCP servers (keel_mcp::config)
//!   - {name: time, command: uvx, args: [mcp-server-time], prefix: time_}
//! middleware:
//!   - session_memory: {n_messages: 40, fold_batch: 10, pinned_keys: [project_id]}
//!   - summarization: {enabled: true, trigger: [{type: tokens, value: 3500}],
//!                     keep: {type: tokens, value: 1200}}
//!   - human_in_the_loop: {interrupt_on: {echo: true}}   # runs pause before `echo`
//! ```

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use keel_agent::Agent;
use keel_agent::offline::OfflineModel;
use keel_config::yaml::{Node, Yaml};
use keel_config::{ConfigError, ReadError};
use keel_core::Content;
use keel_core::middleware::Middleware;
use keel_core::model::{ChatModel, ModelProfile};
use keel_core::store::SessionScope;
use keel_core::tool::{Tool, ToolError, ToolSpec, Toolset};
use keel_mcp::{McpError, McpServerConfig, McpToolset};
use keel_memory::{FoldEngine, SessionMemoryMiddleware, SessionMemorySettings};
use keel_middleware::stack::{
    BuildContext, CheckedEntry, EntrySource, ModelRegistry, StackEntry, StackError, StackLoader,
};
use keel_store::Store;
use keel_summarization::cache::SummaryCache;
use keel_summarization::middleware::SummarizationMiddleware;
use keel_summarization::stack::read_section;
use serde::Deserialize;
use serde_json::{Value, json};

pub use keel_config::MAX_STACK_BYTES;

/// The graph id used when the YAML names none.
pub const DEFAULT_GRAPH_ID: &str = "agent";

/// What is wrong with a keel.yaml: the key, the value, what is allowed, and the line.
/// Its middleware list's errors are the stack loader's [`StackError`] (with their
/// lines). The message does not name the file: [`in_file`](Self::in_file) prefixes the
/// path it was read from.
#[derive(Debug, thiserror::Error)]
pub enum KeelYamlError {
    /// The file could not be read.
    #[error("cannot read {path}: {message}")]
    Io {
        /// The path.
        path: String,
        /// Why.
        message: String,
    },
    /// Not YAML, or a key of the wrong type (serde-saphyr's message has the line).
    #[error("{0}")]
    Syntax(String),
    /// A middleware entry the stack loader refused (its message names the key, the
    /// value, what is allowed and the line).
    #[error("{0}")]
    Middleware(#[from] StackError),
    /// An `mcp_servers` entry that is wrong, or a server that did not start.
    #[error("{0}")]
    Mcp(#[from] McpError),
    /// A key with a value outside what is allowed.
    #[error("{key}{}: {problem}", keel_config::at_line(*line))]
    Invalid {
        /// The key, dotted (`middleware[1].summarization`).
        key: String,
        /// What is wrong and what is allowed.
        problem: String,
        /// The line, when the key was read from keel.yaml's line-remembering tree.
        line: Option<u64>,
    },
}

/// A parsed keel.yaml, before it is built into an [`Agent`].
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackConfig {
    /// The graph id (and assistant name) the agent is served under.
    #[serde(default = "default_name")]
    pub name: String,
    /// A description shown by `assistants.get`.
    #[serde(default)]
    pub description: Option<String>,
    /// `offline` or a mapping (see the module docs).
    #[serde(default)]
    pub model: Option<Value>,
    /// Sent first on every model call.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// Built-in tools by name: `echo` (returns its arguments).
    #[serde(default)]
    pub tools: Vec<String>,
    /// The `middleware` list as parsed (one-key mappings, outermost first), with the
    /// file's lines; read by the stack loader when the agent is built.
    #[serde(default)]
    pub middleware: Option<Node>,
    /// Model calls per run.
    #[serde(default)]
    pub recursion_limit: Option<usize>,
    /// MCP servers whose tools the agent gets (see `keel_mcp::config`), connected by
    /// [`connect_mcp`](Self::connect_mcp).
    #[serde(default)]
    pub mcp_servers: Vec<McpServerConfig>,
    /// The line of each top-level key and of each key under `model`
    /// (`model.provider`), for errors found after parsing.
    #[serde(skip)]
    lines: std::collections::BTreeMap<String, u64>,
}

fn default_name() -> String {
    DEFAULT_GRAPH_ID.to_owned()
}

/// The model section, once read.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelChoice {
    /// `keel_agent::offline::OfflineModel`.
    Offline,
    /// An OpenAI-compatible server.
    OpenAi {
        /// Model name sent to the server.
        model: String,
        /// `http://host:port/v1`; `OPENAI_BASE_URL` when absent.
        base_url: Option<String>,
        /// The environment variable holding the API key (`OPENAI_API_KEY` by default).
        api_key_env: Option<String>,
        /// Tokens, when the server's model is unknown to Keel.
        context_window: Option<u64>,
    },
    /// Claude through Anthropic's Messages API (or a server speaking it).
    Anthropic {
        /// Model name sent to the server (`claude-sonnet-4-5`).
        model: String,
        /// `https://api.anthropic.com` (the default); `ANTHROPIC_BASE_URL` when absent.
        base_url: Option<String>,
        /// The environment variable holding the API key (`ANTHROPIC_API_KEY` by default).
        api_key_env: Option<String>,
        /// Tokens, when the model is unknown to Keel.
        context_window: Option<u64>,
        /// `max_tokens` for calls that set none.
        max_tokens: Option<u32>,
        /// Prompt-cache lifetime: `5m` (the default), `1h`, or `off` (`None` here).
        cache_ttl: Option<keel_anthropic::CacheTtl>,
    },
}

/// The keys a `model:` mapping may have, per provider.
const OPENAI_KEYS: &[&str] = &[
    "provider",
    "model",
    "base_url",
    "api_key_env",
    "context_window",
];
const ANTHROPIC_KEYS: &[&str] = &[
    "provider",
    "model",
    "base_url",
    "api_key_env",
    "context_window",
    "max_tokens",
    "cache_ttl",
];

impl ModelChoice {
    /// Reads a `model:` value: `offline`, or a mapping with `provider` (`offline`,
    /// `openai` or `anthropic`) and that provider's keys. The error names the key.
    pub fn from_json(value: Option<&Value>) -> Result<ModelChoice, KeelYamlError> {
        match value {
            None | Some(Value::Null) => Ok(ModelChoice::Offline),
            Some(Value::String(s)) if s == "offline" => Ok(ModelChoice::Offline),
            Some(Value::Object(m)) => {
                let get = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
                let provider = get("provider");
                let allowed = match provider.as_deref() {
                    Some("anthropic") => ANTHROPIC_KEYS,
                    _ => OPENAI_KEYS,
                };
                for key in m.keys() {
                    if !allowed.contains(&key.as_str()) {
                        return Err(invalid(
                            &format!("model.{key}"),
                            &format!(
                                "unknown key for provider {}; allowed: {}",
                                provider.as_deref().unwrap_or("openai"),
                                allowed.join(", ")
                            ),
                        ));
                    }
                }
                let count = |k: &str| -> Result<Option<u64>, KeelYamlError> {
                    match m.get(k) {
                        None | Some(Value::Null) => Ok(None),
                        Some(v) => v.as_u64().filter(|n| *n > 0).map(Some).ok_or_else(|| {
                            invalid(
                                &format!("model.{k}"),
                                &format!("{v} is not a positive whole number of tokens"),
                            )
                        }),
                    }
                };
                let name = |p: &str| {
                    get("model").ok_or_else(|| {
                        invalid(
                            "model.model",
                            &format!("the model name is required for provider {p}"),
                        )
                    })
                };
                match provider.as_deref() {
                    Some("offline") => Ok(ModelChoice::Offline),
                    Some("openai") => Ok(ModelChoice::OpenAi {
                        model: name("openai")?,
                        base_url: get("base_url"),
                        api_key_env: get("api_key_env"),
                        context_window: count("context_window")?,
                    }),
                    Some("anthropic") => Ok(ModelChoice::Anthropic {
                        model: name("anthropic")?,
                        base_url: get("base_url"),
                        api_key_env: get("api_key_env"),
                        context_window: count("context_window")?,
                        max_tokens: count("max_tokens")?
                            .map(|n| {
                                u32::try_from(n).map_err(|_| {
                                    invalid(
                                        "model.max_tokens",
                                        &format!("{n} is over {}", u32::MAX),
                                    )
                                })
                            })
                            .transpose()?,
                        cache_ttl: match m.get("cache_ttl") {
                            None | Some(Value::Null) => Some(keel_anthropic::CacheTtl::default()),
                            Some(Value::String(s)) if s == "off" => None,
                            Some(Value::Bool(false)) => None,
                            Some(v) => Some(
                                v.as_str()
                                    .and_then(keel_anthropic::CacheTtl::parse)
                                    .ok_or_else(|| {
                                        invalid(
                                            "model.cache_ttl",
                                            &format!("{v} is not a lifetime; use 5m, 1h or off"),
                                        )
                                    })?,
                            ),
                        },
                    }),
                    None => Err(invalid(
                        "model.provider",
                        "is missing; allowed: offline, openai, anthropic",
                    )),
                    Some(other) => Err(invalid(
                        &format!("model.provider = {other:?}"),
                        "is not a provider; allowed: offline, openai, anthropic",
                    )),
                }
            }
            Some(other) => Err(invalid(
                &format!("model = {other}"),
                "is not a model; allowed: `offline`, or a mapping with `provider` (openai or anthropic) and `model`",
            )),
        }
    }

    /// Reads a `model:` mapping as the stack loader left it (`keel run`'s stack file).
    pub fn from_node(node: &Node) -> Result<ModelChoice, KeelYamlError> {
        Self::from_json(Some(&node_to_json(node)))
    }

    /// True for a model on a server (not the offline one).
    pub fn is_online(&self) -> bool {
        !matches!(self, ModelChoice::Offline)
    }

    /// Builds the model. Settings the mapping leaves out come from the provider's
    /// environment variables (`OPENAI_*` or `ANTHROPIC_*`, `KEEL_*`).
    pub fn build(&self) -> Result<Arc<dyn ChatModel>, KeelYamlError> {
        Ok(match self.clone() {
            ModelChoice::Offline => Arc::new(OfflineModel::new()) as Arc<dyn ChatModel>,
            ModelChoice::OpenAi {
                model,
                base_url,
                api_key_env,
                context_window,
            } => {
                let mut config = keel_openai::OpenAiConfig::from_env()
                    .unwrap_or_else(|_| keel_openai::OpenAiConfig::new(model.clone()))
                    .with_model(model);
                if let Some(url) = base_url {
                    config = config.with_base_url(url);
                }
                if let Some(var) = api_key_env
                    && let Ok(key) = std::env::var(&var)
                {
                    config = config.with_api_key(key);
                }
                if let Some(window) = context_window {
                    config = config.with_context_window(window);
                }
                Arc::new(
                    config
                        .build()
                        .map_err(|e| invalid("model", &e.to_string()))?,
                )
            }
            ModelChoice::Anthropic {
                model,
                base_url,
                api_key_env,
                context_window,
                max_tokens,
                cache_ttl,
            } => {
                let mut config = keel_anthropic::AnthropicConfig::from_env()
                    .map_err(|e| invalid("model", &e.to_string()))?
                    .with_model(model)
                    .with_cache_ttl(cache_ttl);
                if let Some(url) = base_url {
                    config = config.with_base_url(url);
                }
                if let Some(var) = api_key_env {
                    let key = std::env::var(&var).map_err(|_| {
                        invalid(
                            "model.api_key_env",
                            &format!("the environment variable {var} is not set"),
                        )
                    })?;
                    config = config.with_api_key(key);
                }
                if let Some(window) = context_window {
                    config = config.with_context_window(window);
                }
                if let Some(n) = max_tokens {
                    config = config.with_max_tokens(n);
                }
                Arc::new(
                    config
                        .build()
                        .map_err(|e| invalid("model", &e.to_string()))?,
                )
            }
        })
    }
}

/// A parsed YAML value as JSON (numbers as numbers, mappings in document order).
fn node_to_json(node: &Node) -> Value {
    match &node.value {
        Yaml::Null => Value::Null,
        Yaml::Bool(b) => Value::Bool(*b),
        Yaml::Int(i) => i64::try_from(*i)
            .map(Value::from)
            .or_else(|_| u64::try_from(*i).map(Value::from))
            .unwrap_or_else(|_| Value::String(i.to_string())),
        Yaml::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Yaml::Str(s) => Value::String(s.clone()),
        Yaml::Seq(items) => Value::Array(items.iter().map(node_to_json).collect()),
        Yaml::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|(k, _, v)| (k.clone(), node_to_json(v)))
                .collect(),
        ),
    }
}

impl KeelYamlError {
    /// The message prefixed with the file it is about (`examples/keel.yaml: model.provider
    /// = "openia" (line 3): ...`); an I/O error names its path already.
    pub fn in_file(&self, path: &Path) -> String {
        match self {
            KeelYamlError::Io { .. } => self.to_string(),
            other => format!("{}: {other}", path.display()),
        }
    }
}

impl StackConfig {
    /// Reads and parses a file of at most [`MAX_STACK_BYTES`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<StackConfig, KeelYamlError> {
        let path = path.as_ref();
        let text =
            keel_config::read_capped(path, MAX_STACK_BYTES).map_err(|e| KeelYamlError::Io {
                path: path.display().to_string(),
                message: match e {
                    ReadError::Directory => "it is a directory; name a YAML file".into(),
                    ReadError::Io { message, .. } => message,
                    ReadError::TooLarge => format!("larger than {MAX_STACK_BYTES} bytes"),
                    ReadError::NotUtf8 { .. } => "not UTF-8".into(),
                },
            })?;
        Self::from_yaml_str(&text)
    }

    /// Parses YAML text.
    pub fn from_yaml_str(text: &str) -> Result<StackConfig, KeelYamlError> {
        // The first line of the parser's message names the line and the problem; the
        // rest is a source snippet.
        let mut stack: StackConfig = serde_saphyr::from_str(text).map_err(|e| {
            KeelYamlError::Syntax(e.to_string().lines().next().unwrap_or_default().to_owned())
        })?;
        stack.lines = key_lines(text);
        if stack.name.trim().is_empty() {
            return Err(stack.invalid("name", "must not be empty"));
        }
        stack.model_choice()?;
        keel_mcp::validate_servers(&stack.mcp_servers).map_err(McpError::from)?;
        let items: &[Node] = match stack.middleware.as_ref().map(|n| &n.value) {
            None | Some(Yaml::Null) => &[],
            Some(Yaml::Seq(items)) => items,
            Some(_) => {
                return Err(KeelYamlError::Invalid {
                    key: "middleware".into(),
                    problem: "is not a list; each entry is a one-key mapping, e.g. \
                              `- summarization: {...}`"
                        .into(),
                    line: stack.middleware.as_ref().map(|n| n.line),
                });
            }
        };
        for (i, entry) in items.iter().enumerate() {
            if !matches!(&entry.value, Yaml::Map(m) if m.len() == 1) {
                return Err(KeelYamlError::Invalid {
                    key: format!("middleware[{i}]"),
                    problem: "each entry is a one-key mapping, e.g. `- summarization: {...}`"
                        .into(),
                    line: Some(entry.line),
                });
            }
        }
        Ok(stack)
    }

    /// The model section, checked.
    pub fn model_choice(&self) -> Result<ModelChoice, KeelYamlError> {
        ModelChoice::from_json(self.model.as_ref()).map_err(|e| self.locate(e))
    }

    /// Builds the agent on `store` (checkpoints, session memory, the summary cache's
    /// second level). A file with `mcp_servers` needs [`build_connected`](Self::build_connected).
    pub fn build(&self, store: Arc<Store>) -> Result<Agent, KeelYamlError> {
        let (model, online) = self.model()?;
        self.build_with_model(store, model, online)
    }

    /// Connects the `mcp_servers` (spawning or dialling each, listing its tools), then
    /// builds the agent on `store` with their tools.
    pub async fn build_connected(&self, store: Arc<Store>) -> Result<Agent, KeelYamlError> {
        let mcp = self.connect_mcp().await?;
        let (model, online) = self.model()?;
        self.build_with_tools(store, model, online, mcp)
    }

    /// The `mcp_servers`, connected; `None` when the file lists none.
    pub async fn connect_mcp(&self) -> Result<Option<McpToolset>, KeelYamlError> {
        if self.mcp_servers.is_empty() {
            return Ok(None);
        }
        Ok(Some(McpToolset::connect(self.mcp_servers.clone()).await?))
    }

    /// The model the `model` key describes, and whether it is a server (`true`) rather
    /// than the offline model.
    pub fn model(&self) -> Result<(Arc<dyn ChatModel>, bool), KeelYamlError> {
        let choice = self.model_choice()?;
        Ok((choice.build()?, choice.is_online()))
    }

    /// Builds the stack around a model of the caller's (the `model` key is ignored).
    /// `online` picks how session memory folds: with the model, or extractively. A
    /// file with `mcp_servers` needs [`build_with_tools`](Self::build_with_tools).
    pub fn build_with_model(
        &self,
        store: Arc<Store>,
        model: Arc<dyn ChatModel>,
        online: bool,
    ) -> Result<Agent, KeelYamlError> {
        self.build_with_tools(store, model, online, None)
    }

    /// [`build_with_model`](Self::build_with_model) with the MCP servers' tools
    /// ([`connect_mcp`](Self::connect_mcp)).
    pub fn build_with_tools(
        &self,
        store: Arc<Store>,
        model: Arc<dyn ChatModel>,
        online: bool,
        mcp: Option<McpToolset>,
    ) -> Result<Agent, KeelYamlError> {
        if !self.mcp_servers.is_empty() && mcp.is_none() {
            return Err(self.invalid(
                "mcp_servers",
                "the servers are not connected: build with StackConfig::build_connected (as `keel serve` does)",
            ));
        }
        let profile = model.profile().clone();
        let mut builder = Agent::builder()
            .model(model.clone())
            .checkpointer(store.clone());
        if let Some(prompt) = &self.system_prompt {
            builder = builder.system_prompt(prompt.clone());
        }
        if let Some(limit) = self.recursion_limit {
            builder = builder.recursion_limit(limit);
        }
        if let Some(mcp) = mcp {
            builder = builder.toolset_shared(Arc::new(mcp) as Arc<dyn Toolset>);
        }
        for (i, name) in self.tools.iter().enumerate() {
            match name.as_str() {
                "echo" => builder = builder.tool(Echo::new()),
                other => {
                    return Err(self.invalid(
                        &format!("tools[{i}]"),
                        &format!("{other:?} is not a built-in tool; available: echo"),
                    ));
                }
            }
        }
        // One loader for every entry: LangChain's middleware as `keel run` builds it,
        // and the server's own `summarization` (on the database) and `session_memory`.
        let loader = StackLoader::builtin()
            .with(ServerSummarization {
                store: store.clone(),
                profile: profile.clone(),
            })
            .with(SessionMemory {
                store: store.clone(),
                online,
                graph: self.name.clone(),
            });
        let entries = match &self.middleware {
            Some(list) => loader.read_list(list)?,
            None => Vec::new(),
        };
        // Model names inside entries resolve to the agent's own model when they name it
        // or `offline`.
        let main = model.clone();
        let main_name = profile.name.clone();
        let models: Arc<dyn ModelRegistry> = Arc::new(move |name: &str| {
            (name == main_name || name == "offline").then(|| main.clone())
        });
        for (index, entry) in entries.iter().enumerate() {
            if let Some(m) = entry.build(index, &models)? {
                builder = builder.middleware_shared(m);
            }
        }
        builder
            .build()
            .map_err(|e| self.invalid("middleware", &e.to_string()))
    }

    /// An error about `key`, at its line in the file (`model.provider`'s own line, else
    /// the line of its top-level key).
    /// `error` with the line of its key, when it has none yet.
    fn locate(&self, error: KeelYamlError) -> KeelYamlError {
        match error {
            KeelYamlError::Invalid {
                key,
                problem,
                line: None,
            } => self.invalid(&key, &problem),
            other => other,
        }
    }

    fn invalid(&self, key: &str, problem: &str) -> KeelYamlError {
        let path = key.split(" = ").next().unwrap_or(key);
        let top = path.split(['.', '[']).next().unwrap_or(path);
        KeelYamlError::Invalid {
            key: key.to_owned(),
            problem: problem.to_owned(),
            line: self
                .lines
                .get(path)
                .or_else(|| self.lines.get(top))
                .copied(),
        }
    }
}

/// The lines of the top-level keys and of the keys one level under them.
fn key_lines(text: &str) -> std::collections::BTreeMap<String, u64> {
    let mut lines = std::collections::BTreeMap::new();
    if let Ok(Node {
        value: Yaml::Map(entries),
        ..
    }) = keel_config::yaml::parse(text)
    {
        for (key, line, node) in entries {
            if let Yaml::Map(inner) = &node.value {
                for (sub, sub_line, _) in inner {
                    lines.insert(format!("{key}.{sub}"), *sub_line);
                }
            }
            lines.insert(key, line);
        }
    }
    lines
}

/// An entry read and built already: it needs nothing more.
struct Built(Arc<dyn Middleware>);

impl CheckedEntry for Built {
    fn build(&self, _: &BuildContext<'_>) -> Result<Option<Arc<dyn Middleware>>, StackError> {
        Ok(Some(self.0.clone()))
    }
}

/// `summarization` on the server: DeerFlow's schema, summaries written by the agent's
/// model, and a cache whose second level is the server's database, so a summary written
/// by one server process is reused by the others sharing it.
struct ServerSummarization {
    store: Arc<Store>,
    profile: ModelProfile,
}

impl StackEntry for ServerSummarization {
    fn name(&self) -> &'static str {
        "summarization"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let loaded = read_section(source.index, source.node)?;
        for warning in &loaded.warnings {
            tracing::warn!("middleware[{}].{}: {warning}", source.index, source.name);
        }
        if loaded.config.model_name.is_some() {
            let (value, line) = setting(source.node, "model_name").unwrap_or_default();
            return Err(ConfigError::at(
                source.key("model_name"),
                value,
                "must be null here: summaries are written by the agent's model",
                "null",
                line,
            )
            .into());
        }
        let cache =
            SummaryCache::new(loaded.config.cache_capacity.max(1)).with_store(self.store.clone());
        let middleware = SummarizationMiddleware::builder(loaded.config)
            .model_profile(self.profile.clone())
            .cache(Arc::new(cache))
            .build()
            .map_err(|source_error| StackError::Build {
                index: source.index,
                line: source.line,
                source: Box::new(source_error),
            })?;
        Ok(Arc::new(Built(Arc::new(middleware))))
    }
}

/// `session_memory`: Keel's rolling session memory on the server's database, scoped to
/// the graph unless the entry names a scope.
struct SessionMemory {
    store: Arc<Store>,
    online: bool,
    graph: String,
}

impl StackEntry for SessionMemory {
    fn name(&self) -> &'static str {
        "session_memory"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let key = format!("middleware[{}].{}", source.index, source.name);
        let refused = |message: String, line: u64| StackError::Settings {
            key: key.clone(),
            message,
            line: if line > 0 { line } else { source.line },
        };
        let mut settings: SessionMemorySettings =
            keel_config::from_node(source.node).map_err(|e| refused(e.message, e.line))?;
        if settings.scope == SessionMemorySettings::default().scope {
            settings.scope = SessionScope::new(self.graph.clone(), "", "", "");
        }
        let middleware = SessionMemoryMiddleware::builder(settings)
            .store(self.store.clone())
            .fold_engine(if self.online {
                FoldEngine::Model
            } else {
                FoldEngine::Extractive
            })
            .build()
            .map_err(|e| refused(e.to_string(), source.line))?;
        Ok(Arc::new(Built(Arc::new(middleware))))
    }
}

/// The value (as an error shows it) and line of `key` in a settings mapping.
fn setting(node: &Node, key: &str) -> Option<(String, u64)> {
    match &node.value {
        Yaml::Map(entries) => entries
            .iter()
            .find(|(k, _, _)| k == key)
            .map(|(_, _, v)| (v.value.show(), v.line)),
        _ => None,
    }
}

/// The built-in `echo` tool: returns its arguments as JSON text, so a stack can be tried
/// with tool calls before real tools are wired in.
struct Echo(ToolSpec);

impl Echo {
    fn new() -> Self {
        Echo(ToolSpec::new(
            "echo",
            "Returns its arguments unchanged.",
            json!({
                "type": "object",
                "properties": {"query": {"type": "string", "description": "text to echo"}},
            }),
        ))
    }
}

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    async fn call(&self, args: Value) -> Result<Content, ToolError> {
        Ok(Content::Text(args.to_string()))
    }
}

/// An error about `key` without its line (a [`StackConfig`] adds the line when it knows
/// the key's).
fn invalid(key: &str, problem: &str) -> KeelYamlError {
    KeelYamlError::Invalid {
        key: key.to_owned(),
        problem: problem.to_owned(),
        line: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_documented_keel_yaml_shape_and_names_bad_keys() {
        let stack = StackConfig::from_yaml_str(
            "name: support\nmodel: offline\nsystem_prompt: hi\nmiddleware:\n  - summarization: {enabled: true, trigger: [{type: tokens, value: 100}]}\n",
        )
        .unwrap();
        assert_eq!(stack.name, "support");
        assert_eq!(stack.model_choice().unwrap(), ModelChoice::Offline);
        let err = StackConfig::from_yaml_str("model: {provider: claude}\n").unwrap_err();
        assert!(err.to_string().contains("model.provider"), "{err}");
        let err = StackConfig::from_yaml_str("model: {provider: anthropic}\n").unwrap_err();
        assert!(err.to_string().contains("model.model"), "{err}");
        let err = StackConfig::from_yaml_str("middleware:\n  - {a: 1, b: 2}\n").unwrap_err();
        assert!(err.to_string().contains("middleware[0]"), "{err}");
        // Entries that are not one-key mappings are named with their line.
        let err = StackConfig::from_yaml_str("name: s\nmiddleware:\n  - pii: {}\n  - [1, 2]\n")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "middleware[1] (line 4): each entry is a one-key mapping, e.g. `- summarization: {...}`"
        );
        let err = StackConfig::from_yaml_str("name: s\n\nmiddleware: 5\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("middleware (line 3): is not a list"),
            "{err}"
        );
        let err = StackConfig::from_yaml_str("modle: offline\n").unwrap_err();
        assert!(err.to_string().contains("modle"), "{err}");
    }

    #[test]
    fn the_provider_is_one_key() {
        let openai = StackConfig::from_yaml_str(
            "model: {provider: openai, model: m, base_url: 'http://127.0.0.1:4000/v1'}\n",
        )
        .unwrap();
        let anthropic = StackConfig::from_yaml_str(
            "model: {provider: anthropic, model: m, base_url: 'http://127.0.0.1:4000/v1'}\n",
        )
        .unwrap();
        let (m, online) = openai.model().unwrap();
        assert!(online);
        assert_eq!(m.profile().provider, "openai-compatible");
        let (m, _) = anthropic.model().unwrap();
        assert_eq!(m.profile().provider, "anthropic");
        assert_eq!(
            anthropic.model_choice().unwrap(),
            ModelChoice::Anthropic {
                model: "m".into(),
                base_url: Some("http://127.0.0.1:4000/v1".into()),
                api_key_env: None,
                context_window: None,
                max_tokens: None,
                cache_ttl: Some(keel_anthropic::CacheTtl::FiveMinutes),
            }
        );
        let c = StackConfig::from_yaml_str(
            "model: {provider: anthropic, model: claude-sonnet-4-5, cache_ttl: 1h, max_tokens: 2048, context_window: 1000000}\n",
        )
        .unwrap();
        let (m, _) = c.model().unwrap();
        assert_eq!(m.profile().max_input_tokens, Some(1_000_000));
        assert_eq!(m.profile().max_output_tokens, Some(2048));
        for (yaml, key) in [
            (
                "model: {provider: anthropic, model: m, cache_ttl: 10m}\n",
                "model.cache_ttl",
            ),
            (
                "model: {provider: anthropic, model: m, max_tokens: 0}\n",
                "model.max_tokens",
            ),
            (
                "model: {provider: openai, model: m, cache_ttl: 1h}\n",
                "model.cache_ttl",
            ),
            (
                "model: {provider: anthropic, model: m, api_key_env: KEEL_TEST_UNSET_VARIABLE}\n",
                "model.api_key_env",
            ),
        ] {
            let err = StackConfig::from_yaml_str(yaml)
                .and_then(|c| c.model().map(|_| ()))
                .unwrap_err();
            assert!(err.to_string().contains(key), "{yaml}: {err}");
        }
    }

    #[test]
    fn a_bad_value_reports_its_line_in_keel_yaml() {
        let store = Arc::new(Store::memory());
        let build = |text: &str| {
            StackConfig::from_yaml_str(text)
                .unwrap()
                .build(store.clone())
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        // LangChain's middleware, read by the shared loader on keel.yaml's own tree.
        let err = build(
            "name: support\nmodel: offline\nmiddleware:\n  - session_memory: {n_messages: 4}\n  - pii:\n      pii_type: email\n      strategy: shout\n",
        );
        assert_eq!(
            err,
            "middleware[1].pii.strategy = \"shout\" (line 7): is not a known value; allowed: one of block, redact, mask, hash"
        );
        // summarization, in DeerFlow's schema.
        let err = build(
            "middleware:\n  - summarization:\n      enabled: true\n      trigger:\n        - type: tokens\n          value: -5\n",
        );
        assert!(err.contains("middleware[0].summarization.trigger"), "{err}");
        assert!(err.contains("(line 6)"), "{err}");
        let err = build("middleware:\n  - summarization:\n      model_name: gpt-4o\n");
        assert!(
            err.contains(
                "middleware[0].summarization.model_name = \"gpt-4o\" (line 3): must be null here"
            ),
            "{err}"
        );
        // session_memory: a typed configuration, an unknown field and a range.
        let err =
            build("middleware:\n  - session_memory:\n      n_messages: 4\n      n_mesages: 5\n");
        assert!(
            err.contains("middleware[0].session_memory (line 4)"),
            "{err}"
        );
        assert!(err.contains("n_mesages"), "{err}");
        let err = build("middleware:\n  - session_memory:\n      fold_batch: 0\n");
        assert!(
            err.contains("middleware[0].session_memory (line 2)"),
            "{err}"
        );
        assert!(err.contains("fold_batch"), "{err}");
        // An unknown entry, with the nearest name the server knows.
        let err = build("middleware:\n  - session_memroy: {}\n");
        assert_eq!(
            err,
            "unknown key middleware[0].session_memroy (line 2) (did you mean `session_memory`?)"
        );
    }

    #[tokio::test]
    async fn mcp_servers_are_checked_and_connected_before_the_build() {
        let err = StackConfig::from_yaml_str(
            "mcp_servers:\n  - {name: t, command: a, timeout_seconds: 9000}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("mcp_servers[0].timeout_seconds = 9000.0"),
            "{err}"
        );
        assert!(err.contains("at most 3600"), "{err}");
        let err = StackConfig::from_yaml_str("mcp_servers:\n  - {name: t, cmd: a}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cmd"), "{err}");
        let stack = StackConfig::from_yaml_str(
            "mcp_servers:\n  - {name: ghost, command: /nonexistent/keel-mcp-server}\n",
        )
        .unwrap();
        let store = Arc::new(Store::memory());
        let err = stack.build(store.clone()).unwrap_err().to_string();
        assert!(err.contains("build_connected"), "{err}");
        let err = stack.build_connected(store).await.unwrap_err().to_string();
        assert!(err.contains("\"ghost\" could not be connected"), "{err}");
    }

    #[tokio::test]
    async fn builds_the_example_and_refuses_unknown_middleware() {
        let store = Arc::new(Store::memory());
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/keel.yaml");
        let agent = StackConfig::from_file(path)
            .unwrap()
            .build(store.clone())
            .unwrap();
        assert_eq!(
            agent.middleware_names(),
            ["SessionMemoryMiddleware", "SummarizationMiddleware"]
        );
        let stack = StackConfig::from_yaml_str(
            "middleware:\n  - pii: {pii_type: email}\n  - human_in_the_loop: {interrupt_on: {echo: true}}\n",
        )
        .unwrap();
        let agent = stack.build(store.clone()).unwrap();
        assert_eq!(
            agent.middleware_names(),
            ["PIIMiddleware[email]", "HumanInTheLoopMiddleware"]
        );
        let stack = StackConfig::from_yaml_str(
            "middleware:\n  - summarization: {}\n  - pii: {pii_type: email, strategy: shout}\n",
        )
        .unwrap();
        let err = stack.build(store.clone()).unwrap_err().to_string();
        assert!(err.contains("middleware[1].pii.strategy"), "{err}");
        assert!(err.contains("shout"), "{err}");
        let stack = StackConfig::from_yaml_str("middleware:\n  - pi: {}\n").unwrap();
        let err = stack.build(store).unwrap_err().to_string();
        assert!(err.contains("middleware[0].pi"), "{err}");
    }
}
