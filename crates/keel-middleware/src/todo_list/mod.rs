//! `TodoList`: gives the model a `write_todos` tool and keeps its plan in the `todos`
//! state key (LangChain's `TodoListMiddleware`).
//!
//! - Every model call gets the tool and, appended to the system message as a new text
//!   part, the planning instructions (LangChain's `WRITE_TODOS_SYSTEM_PROMPT` and tool
//!   description, used verbatim so the model reads the same words).
//! - A `write_todos` call replaces `todos` with its list and is answered
//!   `Updated todo list to [{'content': ..., 'status': ...}]` (Python's rendering of the
//!   list, as LangChain's tool answers).
//! - Two or more `write_todos` calls in one AI message are all refused with an error
//!   result, and the plan is left as it was.
//!
//! Keel tools cannot write state, so the state change happens in `after_model`, when
//! the call is seen (the same step LangChain uses to refuse parallel calls), and the
//! tool's answer is given by `wrap_tool_call`. A list that does not fit the schema is
//! answered with an error result and changes nothing.

use std::sync::{Arc, Mutex};

use keel_core::access::StateAccess;
use keel_core::message::{Content, ContentPart, Message, TextPart, ToolCall};
use keel_core::middleware::{
    HookOutcome, Middleware, MiddlewareError, ModelRequest, ModelResponse, Next, Runtime,
    ToolCallRequest, ToolNext,
};
use keel_core::model::ModelError;
use keel_core::state::{AgentState, StateUpdate};
use keel_core::tool::{ToolError, ToolSpec};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::common::last_ai_index;
use crate::events;
use crate::stack::value::{Ready, Settings};
use crate::stack::{CheckedEntry, EntrySource, StackEntry, StackError};

/// The state key holding the plan.
pub const TODOS_KEY: &str = "todos";
/// The tool's name.
pub const TOOL_NAME: &str = "write_todos";
/// LangChain's system-prompt block (`WRITE_TODOS_SYSTEM_PROMPT`).
pub const DEFAULT_SYSTEM_PROMPT: &str = include_str!("system_prompt.txt");
/// LangChain's tool description (`WRITE_TODOS_TOOL_DESCRIPTION`).
pub const DEFAULT_TOOL_DESCRIPTION: &str = include_str!("tool_description.txt");
/// The error result of parallel calls (LangChain's words).
pub const PARALLEL_ERROR: &str = "Error: The `write_todos` tool should never be called multiple times in parallel. Please call it only once per model invocation to update the todo list.";

/// A todo's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on.
    InProgress,
    /// Done.
    Completed,
}

/// One item of the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Todo {
    /// What to do.
    pub content: String,
    /// Where it stands.
    pub status: TodoStatus,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteTodos {
    todos: Vec<Todo>,
}

/// The plan in `args`, or why it does not fit the schema.
fn parse(args: &Value) -> Result<Vec<Todo>, String> {
    serde_json::from_value::<WriteTodos>(args.clone())
        .map(|w| w.todos)
        .map_err(|e| e.to_string())
}

/// Keeps a plan. See the [module docs](self).
#[derive(Debug)]
pub struct TodoList {
    system_prompt: String,
    spec: ToolSpec,
    /// The last (agent tools, tools with `write_todos`) and (system message fingerprint,
    /// system message with the block): every call of an agent sends the same ones, and
    /// building them (a 4 KB description, a JSON schema, a 3 KB prompt) costs more than
    /// the rest of the middleware.
    cache: Mutex<Cache>,
}

type Cache = (
    Option<(Arc<Vec<ToolSpec>>, Arc<Vec<ToolSpec>>)>,
    Option<(Option<u64>, Message)>,
);

impl Clone for TodoList {
    fn clone(&self) -> Self {
        TodoList {
            system_prompt: self.system_prompt.clone(),
            spec: self.spec.clone(),
            cache: Mutex::new((None, None)),
        }
    }
}

impl Default for TodoList {
    fn default() -> Self {
        Self::new(DEFAULT_SYSTEM_PROMPT, DEFAULT_TOOL_DESCRIPTION)
    }
}

impl TodoList {
    /// A todo list with these instructions and tool description.
    pub fn new(system_prompt: impl Into<String>, tool_description: impl Into<String>) -> Self {
        TodoList {
            system_prompt: system_prompt.into(),
            spec: ToolSpec::new(
                TOOL_NAME,
                tool_description,
                json!({
                    "type": "object",
                    "properties": {"todos": {"type": "array", "items": {
                        "description": "A single todo item with content and status.",
                        "type": "object",
                        "properties": {
                            "content": {"type": "string"},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
                        },
                        "required": ["content", "status"]
                    }}},
                    "required": ["todos"]
                }),
            ),
            cache: Mutex::new((None, None)),
        }
    }

    /// The `write_todos` tool as the model sees it.
    pub fn tool_spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn system_with_block(&self, system: Option<&Message>) -> Message {
        let mut parts: Vec<ContentPart> = match system.map(Message::content) {
            Some(Content::Text(t)) if !t.is_empty() => {
                vec![ContentPart::Text(TextPart::new(t.clone()))]
            }
            Some(Content::Parts(p)) => p.clone(),
            _ => Vec::new(),
        };
        let text = if parts.is_empty() {
            self.system_prompt.clone()
        } else {
            format!("\n\n{}", self.system_prompt)
        };
        parts.push(ContentPart::Text(TextPart::new(text)));
        let mut message = Message::system(Content::Parts(parts));
        if let Some(id) = system.map(Message::id) {
            message.set_id(id);
        }
        message
    }
}

impl TodoList {
    fn tools_with_spec(&self, tools: &Arc<Vec<ToolSpec>>) -> Arc<Vec<ToolSpec>> {
        if tools.iter().any(|t| t.name == TOOL_NAME) {
            return tools.clone();
        }
        let mut list = tools.to_vec();
        list.push(self.spec.clone());
        Arc::new(list)
    }
}

fn todo_calls(calls: &[ToolCall]) -> Vec<&ToolCall> {
    calls.iter().filter(|c| c.name == TOOL_NAME).collect()
}

#[keel_core::middleware]
impl Middleware for TodoList {
    fn name(&self) -> &str {
        "TodoListMiddleware"
    }

    fn state_access(&self) -> StateAccess {
        StateAccess::default().write(TODOS_KEY)
    }

    async fn wrap_model_call(
        &self,
        mut request: ModelRequest,
        next: Next<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let key = request.system.as_ref().map(Message::fingerprint);
        if let Ok(mut cache) = self.cache.lock() {
            let (tools, system) = &mut *cache;
            match tools {
                Some((from, to)) if Arc::ptr_eq(from, &request.tools) => request.tools = to.clone(),
                _ => {
                    let with = self.tools_with_spec(&request.tools);
                    *tools = Some((request.tools.clone(), with.clone()));
                    request.tools = with;
                }
            }
            match system {
                Some((k, message)) if *k == key => request.system = Some(message.clone()),
                _ => {
                    let with = self.system_with_block(request.system.as_ref());
                    *system = Some((key, with.clone()));
                    request.system = Some(with);
                }
            }
        } else {
            request.tools = self.tools_with_spec(&request.tools);
            request.system = Some(self.system_with_block(request.system.as_ref()));
        }
        next.run(request).await
    }

    async fn after_model(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        let Some(i) = last_ai_index(&state.messages) else {
            return Ok(HookOutcome::proceed());
        };
        let calls = todo_calls(state.messages[i].tool_calls());
        match calls[..] {
            [] => Ok(HookOutcome::proceed()),
            [call] => {
                let Ok(todos) = parse(&call.args) else {
                    // wrap_tool_call answers with the reason.
                    return Ok(HookOutcome::proceed());
                };
                events::counter(
                    &runtime.writer,
                    self.name(),
                    "todos",
                    todos.len() as u64,
                    json!({
                        "completed": todos.iter().filter(|t| t.status == TodoStatus::Completed).count(),
                        "in_progress": todos.iter().filter(|t| t.status == TodoStatus::InProgress).count(),
                    }),
                );
                let value = serde_json::to_value(&todos).unwrap_or(Value::Null);
                Ok(HookOutcome::update(StateUpdate::value(TODOS_KEY, value)))
            }
            _ => Ok(HookOutcome::update(StateUpdate::messages(
                calls
                    .iter()
                    .map(|c| Message::tool_error(c.id.clone(), PARALLEL_ERROR)),
            ))),
        }
    }

    async fn wrap_tool_call(
        &self,
        request: ToolCallRequest,
        next: ToolNext<'_>,
    ) -> Result<Message, ToolError> {
        if request.call.name != TOOL_NAME {
            return next.run(request).await;
        }
        match parse(&request.call.args) {
            Ok(todos) => {
                let value = serde_json::to_value(&todos).unwrap_or(Value::Null);
                Ok(Message::tool(
                    request.call.id.clone(),
                    format!(
                        "Updated todo list to {}",
                        keel_tokens::pyrepr::py_repr(&value)
                    ),
                )
                .with_name(TOOL_NAME))
            }
            Err(reason) => Err(ToolError::InvalidArguments {
                tool: TOOL_NAME.into(),
                message: format!(
                    "{reason}; expected {{\"todos\": [{{\"content\": string, \"status\": \"pending\" | \"in_progress\" | \"completed\"}}]}}"
                ),
            }),
        }
    }
}

/// The `todo_list` entry of a stack file: LangChain's constructor arguments, read
/// here with the middleware they build.
pub(crate) struct Entry;

impl StackEntry for Entry {
    fn name(&self) -> &'static str {
        "todo_list"
    }

    fn read(&self, source: &EntrySource<'_>) -> Result<Arc<dyn CheckedEntry>, StackError> {
        let args = Settings::read(source, &["system_prompt", "tool_description"])?;
        let prompt = match args.get("system_prompt") {
            Some(v) => v.string()?,
            None => DEFAULT_SYSTEM_PROMPT.into(),
        };
        let description = match args.get("tool_description") {
            Some(v) => v.string()?,
            None => DEFAULT_TOOL_DESCRIPTION.into(),
        };
        Ok(Arc::new(Ready(Arc::new(TodoList::new(
            prompt,
            description,
        )))))
    }
}

#[cfg(test)]
mod tests;
