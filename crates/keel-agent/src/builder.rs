//! [`AgentBuilder`]: model, tools, system prompt, middleware, checkpointer, limits.

use std::collections::HashMap;
use std::sync::Arc;

use keel_core::layer::{AgentFacts, AgentStore, Layer};
use keel_core::message::Message;
use keel_core::middleware::Middleware;
use keel_core::model::{ChatModel, ModelSettings, ToolChoice};
use keel_core::store::Checkpointer;
use keel_core::tool::{Tool, Toolset};

use crate::agent::Agent;
use crate::checkpointer::InMemoryCheckpointer;
use crate::error::BuildError;
use crate::pipeline::Pipeline;
use crate::run::Inner;
use crate::stack::check_stack;
use crate::strategy::MultitaskStrategy;

/// Model calls a run may make before it fails with
/// [`AgentError::RecursionLimit`](crate::AgentError::RecursionLimit).
pub const DEFAULT_RECURSION_LIMIT: usize = 25;

impl Agent {
    /// A builder.
    pub fn builder() -> AgentBuilder {
        AgentBuilder::new()
    }
}

/// A middleware of the stack: built, or a [`Layer`] built with the agent.
enum Entry {
    Built(Arc<dyn Middleware>),
    Layer(Box<dyn Layer>),
}

/// Builds an [`Agent`]. Middleware are listed outermost first, so the order in code is
/// the order in which `before_*` hooks run (and the nesting of `wrap_*` hooks).
#[derive(Default)]
pub struct AgentBuilder {
    model: Option<Arc<dyn ChatModel>>,
    tools: Vec<Arc<dyn Tool>>,
    toolsets: Vec<Arc<dyn Toolset>>,
    system: Option<Message>,
    middleware: Vec<Entry>,
    checkpointer: Option<Arc<dyn Checkpointer>>,
    store: Option<Arc<dyn AgentStore>>,
    recursion_limit: Option<usize>,
    multitask: MultitaskStrategy,
    settings: ModelSettings,
    tool_choice: Option<ToolChoice>,
}

impl AgentBuilder {
    /// An empty builder (a model is required before [`build`](Self::build)).
    pub fn new() -> Self {
        Self::default()
    }

    /// The model that answers every user-facing call.
    pub fn model(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.model = Some(model);
        self
    }

    /// Adds a tool the model may call.
    pub fn tool(self, tool: impl Tool + 'static) -> Self {
        self.tool_shared(Arc::new(tool))
    }

    /// Adds a shared tool.
    pub fn tool_shared(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds a set of tools that may change while the agent runs (an MCP server's
    /// tools, `keel_mcp::McpToolset`). Its tools are offered and called like any
    /// other, through the same `wrap_tool_call` middleware; one whose name a tool
    /// added before already has is left out.
    pub fn toolset(self, toolset: impl Toolset + 'static) -> Self {
        self.toolset_shared(Arc::new(toolset))
    }

    /// Adds a shared toolset (see [`toolset`](Self::toolset)).
    pub fn toolset_shared(mut self, toolset: Arc<dyn Toolset>) -> Self {
        self.toolsets.push(toolset);
        self
    }

    /// The system prompt, sent first on every model call (never stored in state).
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system = Some(Message::system(prompt.into()));
        self
    }

    /// Appends a middleware (inside the ones added before it).
    pub fn middleware(self, middleware: impl Middleware + 'static) -> Self {
        self.middleware_shared(Arc::new(middleware))
    }

    /// Appends a shared middleware.
    pub fn middleware_shared(mut self, middleware: Arc<dyn Middleware>) -> Self {
        self.middleware.push(Entry::Built(middleware));
        self
    }

    /// Appends a middleware built when the agent is, from what the agent knows (its
    /// model's profile, its [`store`](Self::store)): the builders of summarization and
    /// session memory are layers, so the profile and the store are given once, here.
    pub fn layer(mut self, layer: impl Layer + 'static) -> Self {
        self.middleware.push(Entry::Layer(Box::new(layer)));
        self
    }

    /// The agent's one store: its checkpoints, and the chat history, session memory and
    /// cached summaries of the middleware added as [layers](Self::layer) that keep
    /// them. Sets the [checkpointer](Self::checkpointer) too.
    pub fn store<S: AgentStore + 'static>(mut self, store: Arc<S>) -> Self {
        self.checkpointer = Some(store.clone());
        self.store = Some(store);
        self
    }

    /// Where checkpoints go; the default is a fresh [`InMemoryCheckpointer`].
    pub fn checkpointer(mut self, checkpointer: Arc<dyn Checkpointer>) -> Self {
        self.checkpointer = Some(checkpointer);
        self
    }

    /// Model calls one run may make (default [`DEFAULT_RECURSION_LIMIT`]); at least 1.
    pub fn recursion_limit(mut self, limit: usize) -> Self {
        self.recursion_limit = Some(limit);
        self
    }

    /// What a run does when another run of this agent is active on its thread
    /// (default [`MultitaskStrategy::Enqueue`]).
    pub fn multitask_strategy(mut self, strategy: MultitaskStrategy) -> Self {
        self.multitask = strategy;
        self
    }

    /// Model settings sent with every call (middleware may override per call).
    pub fn settings(mut self, settings: ModelSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Tool policy sent with every call.
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// Checks the configuration and builds the agent.
    pub fn build(mut self) -> Result<Agent, BuildError> {
        let model = self.model.ok_or(BuildError::MissingModel)?;
        let facts = AgentFacts {
            model_profile: model.profile().clone(),
            store: self.store.take(),
        };
        let middleware: Vec<Arc<dyn Middleware>> = std::mem::take(&mut self.middleware)
            .into_iter()
            .map(|entry| match entry {
                Entry::Built(m) => Ok(m),
                Entry::Layer(layer) => layer.layer(&facts),
            })
            .collect::<Result<_, _>>()?;
        let recursion_limit = self.recursion_limit.unwrap_or(DEFAULT_RECURSION_LIMIT);
        if recursion_limit == 0 {
            return Err(BuildError::InvalidRecursionLimit {
                value: recursion_limit,
            });
        }

        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, m) in middleware.iter().enumerate() {
            if let Some(first) = seen.insert(m.name(), i) {
                return Err(BuildError::DuplicateMiddleware {
                    name: m.name().to_owned(),
                    first,
                    second: i,
                });
            }
        }

        // Declared state keys and jumps, across the stack: a conflict fails here, naming
        // the middleware, instead of mid-run.
        check_stack(&middleware)?;

        let mut tools = HashMap::new();
        for t in &self.tools {
            let name = t.spec().name.clone();
            if tools.insert(name.clone(), t.clone()).is_some() {
                return Err(BuildError::DuplicateTool { name });
            }
        }
        let tool_specs = Arc::new(self.tools.iter().map(|t| t.spec().clone()).collect());
        let tool_names = self
            .tools
            .iter()
            .map(|t| t.spec().name.as_str())
            .collect::<Vec<_>>()
            .join(", ");

        let pipeline = Pipeline::new(&middleware);
        Ok(Agent::from_inner(Inner {
            model,
            tools,
            tool_specs,
            tool_names,
            toolsets: self.toolsets,
            system: self.system,
            settings: self.settings,
            tool_choice: self.tool_choice,
            pipeline,
            middleware,
            checkpointer: self
                .checkpointer
                .unwrap_or_else(|| Arc::new(InMemoryCheckpointer::new())),
            recursion_limit,
            multitask: self.multitask,
            registry: Default::default(),
            lineages: parking_lot::Mutex::new(lru::LruCache::new(crate::run::LINEAGE_THREADS)),
        }))
    }
}
