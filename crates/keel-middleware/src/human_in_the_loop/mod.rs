//! `HumanInTheLoop`: pauses the run before chosen tool calls until a person decides
//! (LangChain's `HumanInTheLoopMiddleware`).
//!
//! - `after_model`: when the last AI message calls a tool listed in `interrupt_on`, the
//!   run stops before any tool runs. The request for review (LangChain's `HITLRequest`:
//!   one action request and one review config per gated call, plus the call ids) is
//!   written to the `__interrupt__` state key, so it reaches `updates` stream consumers
//!   as LangGraph's `__interrupt__` update does, and it is checkpointed with the thread.
//! - [`HumanInTheLoop::resume`] takes one [`Decision`] per gated call (`approve`, `edit`,
//!   `reject`, `respond`), stores them in the thread's checkpoint and runs the thread
//!   again; `before_agent` applies them and jumps to the tools: approved and edited calls
//!   run (an edit replaces the call's name and arguments), rejected and answered ones get
//!   LangChain's tool results instead. The whole pause lives in the checkpointer, so a
//!   resume works from another process, after a restart, with a persistent store.
//! - New input whose tool messages answer every open call of the paused AI message ends
//!   the review (LangGraph takes new input on a paused thread): `before_agent` clears
//!   the interrupt and the model reads the new messages. [`HumanInTheLoop::resolve`]
//!   ends it with no tool and no model run (LangGraph's `Command(goto=END)`), answering
//!   the open calls with [`resolved_result`].
//!
//! With [`InterruptMode::PerCall`] the run pauses once per gated call, in order, each
//! pause holding one call; the calls run once the last one is decided.
//!
//! Put it first in the stack: its `after_model` then runs last (after-model hooks run
//! innermost first), so the interrupt skips no other middleware's `after_model`.

mod entry;

pub(crate) use entry::Entry;

use keel_agent::{Agent, AgentError, RunOutput};
use keel_core::access::StateAccess;
use keel_core::interrupt::{Pause, Resumable, ResumeRefused};
use keel_core::message::{Message, MessageBody, ToolStatus};
use keel_core::middleware::{HookOutcome, JumpTarget, Middleware, MiddlewareError, Runtime};
use keel_core::state::{AgentState, StateUpdate};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::common::last_ai_index;
use crate::error::ConfigError;
use crate::events;

/// The state key holding a pending interrupt (LangGraph's name for it).
pub const INTERRUPT_KEY: &str = keel_core::state::INTERRUPT_KEY;
/// The state key holding the decisions a resume brings.
pub const DECISIONS_KEY: &str = "hitl_decisions";
/// LangChain's default description prefix.
pub const DEFAULT_DESCRIPTION_PREFIX: &str = "Tool execution requires approval";

/// A kind of decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionType {
    /// Run the call as the model made it.
    Approve,
    /// Run it with other arguments (or another tool).
    Edit,
    /// Do not run it; tell the model why.
    Reject,
    /// Do not run it; answer it with a message (a successful result).
    Respond,
}

/// A person's decision on one gated call (LangChain's decision shapes).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Decision {
    /// `{"type": "approve"}`
    Approve,
    /// `{"type": "edit", "edited_action": {"name": ..., "args": {...}}}`
    Edit {
        /// The call to run instead.
        edited_action: Action,
    },
    /// `{"type": "reject", "message": "..."}` (message optional)
    Reject {
        /// Why, for the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// `{"type": "respond", "message": "..."}`
    Respond {
        /// The result the model reads.
        message: String,
    },
}

impl Decision {
    fn kind(&self) -> DecisionType {
        match self {
            Decision::Approve => DecisionType::Approve,
            Decision::Edit { .. } => DecisionType::Edit,
            Decision::Reject { .. } => DecisionType::Reject,
            Decision::Respond { .. } => DecisionType::Respond,
        }
    }
}

/// Reads the decisions of a resume value in LangChain's shape, `{"decisions": [...]}`
/// (what `Command(resume=...)` carries for `HumanInTheLoopMiddleware`), or a bare list of
/// decisions.
pub fn decisions_from_resume(value: &Value) -> Result<Vec<Decision>, ResumeError> {
    let list = match value {
        Value::Array(_) => value,
        Value::Object(fields) => fields.get("decisions").ok_or_else(|| {
            ResumeError::BadValue(
                "expected {\"decisions\": [...]}, one decision per pending tool call".into(),
            )
        })?,
        other => {
            return Err(ResumeError::BadValue(format!(
                "expected {{\"decisions\": [...]}}, not {other}"
            )));
        }
    };
    serde_json::from_value(list.clone()).map_err(|e| {
        ResumeError::BadValue(format!(
            "{e}; a decision is {{\"type\": \"approve\"}}, {{\"type\": \"edit\", \"edited_action\": {{\"name\": ..., \"args\": {{...}}}}}}, {{\"type\": \"reject\", \"message\": ...}} or {{\"type\": \"respond\", \"message\": ...}}"
        ))
    })
}

/// A tool call by name and arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Action {
    /// The tool.
    pub name: String,
    /// Its arguments.
    pub args: Value,
}

/// One call awaiting review.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActionRequest {
    /// The tool.
    pub name: String,
    /// The arguments the model gave.
    pub args: Value,
    /// What the reviewer is shown.
    pub description: String,
}

/// What a reviewer may decide about one call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReviewConfig {
    /// The tool.
    pub action_name: String,
    /// The decisions allowed.
    pub allowed_decisions: Vec<DecisionType>,
}

/// A pending interrupt: LangChain's `HITLRequest`, plus the ids of the gated calls (in
/// the same order) and of the AI message that made them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interrupt {
    /// One per gated call.
    pub action_requests: Vec<ActionRequest>,
    /// One per gated call.
    pub review_configs: Vec<ReviewConfig>,
    /// The gated calls' ids.
    pub tool_call_ids: Vec<String>,
    /// The AI message's id.
    pub message_id: String,
}

impl Interrupt {
    /// Checks that `decisions` answer this interrupt: one per gated call, in order, each
    /// of a kind the call's review config allows.
    pub fn check(&self, decisions: &[Decision]) -> Result<(), ResumeError> {
        if self.tool_call_ids.len() != decisions.len() {
            return Err(ResumeError::DecisionCount {
                expected: self.tool_call_ids.len(),
                given: decisions.len(),
            });
        }
        for (i, decision) in decisions.iter().enumerate() {
            let allowed = &self.review_configs[i].allowed_decisions;
            if !allowed.contains(&decision.kind()) {
                return Err(ResumeError::NotAllowed {
                    index: i,
                    tool: self.action_requests[i].name.clone(),
                    decision: decision.kind(),
                    allowed: allowed.clone(),
                });
            }
        }
        Ok(())
    }

    /// The calls of the paused AI message that have no result in `messages` yet, as
    /// `(call id, tool name)`, in order: the gated ones and any others of the same
    /// message (no tool of a paused message has run). Empty when the message is gone.
    pub fn open_calls(&self, messages: &[Message]) -> Vec<(String, String)> {
        let Some(ai) = messages.iter().rposition(|m| m.id() == self.message_id) else {
            return Vec::new();
        };
        let answered: Vec<&str> = messages[ai + 1..]
            .iter()
            .filter_map(Message::tool_call_id)
            .collect();
        messages[ai]
            .tool_calls()
            .iter()
            .filter(|c| !answered.contains(&c.id.as_str()))
            .map(|c| (c.id.clone(), c.name.clone()))
            .collect()
    }

    /// The pending interrupt of a state, if any.
    pub fn of(state: &AgentState) -> Option<Interrupt> {
        Self::in_values(&state.values)
    }

    /// The pending interrupt in a state's (or a checkpoint's) values, if any.
    pub fn in_values(values: &serde_json::Map<String, Value>) -> Option<Interrupt> {
        values
            .get(INTERRUPT_KEY)
            .filter(|v| !v.is_null())
            .and_then(|v| serde_json::from_value(v.clone()).ok())
    }
}

/// The review settings of one tool.
#[derive(Clone, Debug, PartialEq)]
pub struct InterruptOn {
    /// The decisions allowed (not empty).
    pub allowed_decisions: Vec<DecisionType>,
    /// A fixed description, instead of the prefix, tool and arguments.
    pub description: Option<String>,
}

impl InterruptOn {
    /// Every decision allowed (LangChain's `True`).
    pub fn all() -> Self {
        InterruptOn {
            allowed_decisions: vec![
                DecisionType::Approve,
                DecisionType::Edit,
                DecisionType::Reject,
                DecisionType::Respond,
            ],
            description: None,
        }
    }
}

/// A resume that cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The thread has no pending interrupt.
    #[error("thread {thread_id:?} has no pending interrupt to resume")]
    NothingPending {
        /// The thread.
        thread_id: String,
    },
    /// One decision per gated call is needed.
    #[error(
        "the interrupt has {expected} pending tool call(s) but {given} decision(s) were given; give one per call, in order"
    )]
    DecisionCount {
        /// Calls awaiting review.
        expected: usize,
        /// Decisions given.
        given: usize,
    },
    /// A decision of a kind the call's review config does not allow.
    #[error(
        "decision {index} ({decision:?}) is not allowed for tool '{tool}'; allowed: {allowed:?}"
    )]
    NotAllowed {
        /// The decision's position.
        index: usize,
        /// The gated call's tool.
        tool: String,
        /// What was decided.
        decision: DecisionType,
        /// What the review config allows.
        allowed: Vec<DecisionType>,
    },
    /// A resume value that is not LangChain's `{"decisions": [...]}`.
    #[error("resume value: {0}")]
    BadValue(String),
    /// Reading or writing the thread failed, or the resumed run failed.
    #[error(transparent)]
    Agent(#[from] AgentError),
}

impl ResumeError {
    /// An error of the agent's generic resume (`Agent::record_resume`,
    /// `Agent::resolve_pause`) as this middleware reports it.
    fn from_agent(error: AgentError, thread_id: &str) -> ResumeError {
        match error {
            AgentError::NotPaused { .. } => ResumeError::NothingPending {
                thread_id: thread_id.to_owned(),
            },
            AgentError::ResumeRefused { source, .. } => ResumeError::BadValue(source.0),
            other => ResumeError::Agent(other),
        }
    }
}

/// How the run pauses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InterruptMode {
    /// One pause per model turn, for every gated call of the AI message (the default).
    #[default]
    Batched,
    /// One pause per gated call, in order; the calls run once the last one is decided.
    PerCall,
}

/// The state key listing the gated calls already decided while a per-call review is
/// under way.
pub const REVIEWED_KEY: &str = "hitl_reviewed";

/// Pauses before chosen tool calls. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct HumanInTheLoop {
    interrupt_on: Vec<(String, InterruptOn)>,
    description_prefix: String,
    mode: InterruptMode,
}

impl HumanInTheLoop {
    /// Reviews calls of these tools.
    pub fn new(
        interrupt_on: Vec<(String, InterruptOn)>,
        description_prefix: impl Into<String>,
    ) -> Result<Self, ConfigError> {
        if let Some((tool, _)) = interrupt_on
            .iter()
            .find(|(_, c)| c.allowed_decisions.is_empty())
        {
            return Err(ConfigError::new(
                "human_in_the_loop",
                format!("interrupt_on.{tool}.allowed_decisions"),
                "[]",
                "no decision is allowed",
                "a non-empty list of approve, edit, reject, respond",
            ));
        }
        Ok(HumanInTheLoop {
            interrupt_on,
            description_prefix: description_prefix.into(),
            mode: InterruptMode::Batched,
        })
    }

    /// The same reviews, pausing per gated call instead of per model turn.
    pub fn with_mode(mut self, mode: InterruptMode) -> Self {
        self.mode = mode;
        self
    }

    /// The next interrupt for the AI message at `i`: its gated calls that have no result
    /// and are not in `reviewed`, all of them (batched) or the first (per call).
    fn next_interrupt(
        &self,
        messages: &[Message],
        i: usize,
        reviewed: &[String],
    ) -> Option<Interrupt> {
        let message = &messages[i];
        let answered: Vec<&str> = messages[i + 1..]
            .iter()
            .filter_map(Message::tool_call_id)
            .collect();
        let mut pending = Interrupt {
            action_requests: Vec::new(),
            review_configs: Vec::new(),
            tool_call_ids: Vec::new(),
            message_id: message.id().to_owned(),
        };
        for call in message.tool_calls() {
            let Some(config) = self.config(&call.name) else {
                continue;
            };
            if answered.contains(&call.id.as_str()) || reviewed.contains(&call.id) {
                continue;
            }
            let description = config.description.clone().unwrap_or_else(|| {
                format!(
                    "{}\n\nTool: {}\nArgs: {}",
                    self.description_prefix,
                    call.name,
                    keel_tokens::pyrepr::py_repr(&call.args)
                )
            });
            pending.action_requests.push(ActionRequest {
                name: call.name.clone(),
                args: call.args.clone(),
                description,
            });
            pending.review_configs.push(ReviewConfig {
                action_name: call.name.clone(),
                allowed_decisions: config.allowed_decisions.clone(),
            });
            pending.tool_call_ids.push(call.id.clone());
            if self.mode == InterruptMode::PerCall {
                break;
            }
        }
        (!pending.tool_call_ids.is_empty()).then_some(pending)
    }

    /// Pauses on `pending`: stores it and ends the run.
    fn pause(
        &self,
        runtime: &Runtime,
        mut update: StateUpdate,
        pending: &Interrupt,
    ) -> HookOutcome {
        let value = serde_json::to_value(pending).unwrap_or(Value::Null);
        events::counter(
            &runtime.writer,
            self.name(),
            "interrupts",
            1,
            json!({"__interrupt__": value}),
        );
        update.values.insert(INTERRUPT_KEY.into(), value);
        HookOutcome {
            update,
            jump: Some(JumpTarget::End),
        }
    }

    fn config(&self, tool: &str) -> Option<&InterruptOn> {
        self.interrupt_on
            .iter()
            .find(|(t, _)| t == tool)
            .map(|(_, c)| c)
    }

    /// Resumes a paused thread with one decision per gated call, in order: records the
    /// decisions ([`HumanInTheLoop::record_decisions`]) and runs the thread.
    pub async fn resume(
        agent: &Agent,
        thread_id: &str,
        decisions: Vec<Decision>,
    ) -> Result<RunOutput, ResumeError> {
        Self::record_decisions(agent, thread_id, decisions).await?;
        Ok(agent.invoke(thread_id, Vec::new()).await?)
    }

    /// Checks `decisions` against the thread's pending interrupt and stores them in its
    /// checkpoint (compare-and-swap on the head), without running it: the thread's next
    /// run, with no input, applies them. For callers that run the thread their own way,
    /// such as a server streaming the resumed run.
    pub async fn record_decisions(
        agent: &Agent,
        thread_id: &str,
        decisions: Vec<Decision>,
    ) -> Result<(), ResumeError> {
        // Checked here first, for the typed errors; the agent checks again on the head
        // it writes after.
        let head = agent
            .checkpointer()
            .latest(thread_id)
            .await
            .map_err(|source| AgentError::Checkpoint {
                thread_id: thread_id.to_owned(),
                source,
            })?;
        let Some(pending) = head.and_then(|cp| Interrupt::in_values(&cp.values)) else {
            return Err(ResumeError::NothingPending {
                thread_id: thread_id.to_owned(),
            });
        };
        pending.check(&decisions)?;
        agent
            .record_resume(thread_id, &json!({ "decisions": decisions }))
            .await
            .map_err(|e| ResumeError::from_agent(e, thread_id))
    }

    /// Ends the thread's pending review without running any tool or the model
    /// (LangGraph's `Command(goto=END)` on a paused thread; agent-chat-ui's "Mark as
    /// resolved"): every call of the paused AI message still without a result gets an
    /// error result saying it was not run ([`resolved_result`]), so no unanswered call
    /// ever reaches a model, and the interrupt is cleared. One checkpoint, written with
    /// compare-and-swap on the head by `run_id`; returns the update it wrote. The same
    /// as the agent's `resolve_pause`, with this middleware's errors.
    pub async fn resolve(
        agent: &Agent,
        thread_id: &str,
        run_id: &str,
    ) -> Result<StateUpdate, ResumeError> {
        agent
            .resolve_pause(thread_id, run_id)
            .await
            .map_err(|e| ResumeError::from_agent(e, thread_id))
    }

    fn fail(&self, hook: &'static str, message: String) -> MiddlewareError {
        MiddlewareError {
            middleware: "HumanInTheLoopMiddleware".into(),
            hook,
            message,
        }
    }
}

/// Human in the loop's side of [`Resumable`]: a pause is a pending review, an answer is
/// LangChain's `{"decisions": [...]}` (one allowed decision per gated call), and ending
/// the pause gives every open call a "not run" result.
impl Resumable for HumanInTheLoop {
    fn pause(&self, state: &AgentState) -> Option<Pause> {
        let pending = Interrupt::of(state)?;
        let names: Vec<&str> = pending
            .action_requests
            .iter()
            .map(|a| a.name.as_str())
            .collect();
        Some(Pause {
            open_calls: pending.open_calls(&state.messages),
            asks: format!(
                "a review of {} tool call(s) ({})",
                pending.tool_call_ids.len(),
                names.join(", ")
            ),
        })
    }

    fn resume_update(
        &self,
        state: &AgentState,
        resume: &Value,
    ) -> Result<StateUpdate, ResumeRefused> {
        let refused = |e: ResumeError| ResumeRefused(e.to_string());
        let pending = Interrupt::of(state)
            .ok_or_else(|| ResumeRefused("nothing is waiting for a review".into()))?;
        // `{"<interrupt id>": {"decisions": [...]}}`: LangGraph's form for several
        // interrupts, with one pending here.
        let value = match resume {
            Value::Object(m) if !m.contains_key("decisions") && m.len() == 1 => {
                m.values().next().unwrap_or(resume)
            }
            other => other,
        };
        let decisions = decisions_from_resume(value).map_err(refused)?;
        pending.check(&decisions).map_err(refused)?;
        let mut update = StateUpdate::default();
        update.values.insert(
            DECISIONS_KEY.into(),
            serde_json::to_value(&decisions).unwrap_or(Value::Null),
        );
        Ok(update)
    }

    fn resolve_update(&self, state: &AgentState) -> Option<StateUpdate> {
        let pending = Interrupt::of(state)?;
        let results = pending
            .open_calls(&state.messages)
            .into_iter()
            .map(|(id, name)| resolved_result(&id, &name));
        let mut update = StateUpdate::messages(results);
        for key in [INTERRUPT_KEY, DECISIONS_KEY, REVIEWED_KEY] {
            update.values.insert(key.into(), Value::Null);
        }
        Some(update)
    }
}

/// The result [`HumanInTheLoop::resolve`] gives a call it ends unrun: an error result
/// with a deterministic id (`resolved-` + the call id).
pub fn resolved_result(call_id: &str, tool: &str) -> Message {
    let mut m = Message::tool(
        call_id,
        format!(
            "Tool call {tool} with id {call_id} was not run: the reviewer marked the request as resolved without approving it. Do not retry it unless the user asks again."
        ),
    )
    .with_name(tool)
    .with_id(format!("resolved-{call_id}"));
    if let MessageBody::Tool(t) = m.body_mut() {
        t.status = ToolStatus::Error;
    }
    m
}

/// LangChain's result for a rejected or answered call.
fn answer(call_id: &str, tool: &str, decision: &Decision) -> Option<Message> {
    let (content, status) = match decision {
        Decision::Respond { message } => (message.clone(), ToolStatus::Success),
        Decision::Reject {
            message: Some(reason),
        } if !reason.is_empty() => (
            format!("User rejected the tool call for `{tool}` with reason: {reason}"),
            ToolStatus::Error,
        ),
        Decision::Reject { .. } => (
            format!(
                "User rejected the tool call for `{tool}` with id {call_id}. The tool was not executed. Do not retry this tool call unless the user explicitly requests it."
            ),
            ToolStatus::Error,
        ),
        _ => return None,
    };
    let mut m = Message::tool(call_id, content).with_name(tool);
    if let MessageBody::Tool(t) = m.body_mut() {
        t.status = status;
    }
    Some(m)
}

impl HumanInTheLoop {
    /// The decisions a resume stored for the pending review, or the outcome that ends
    /// the review without them (new input answered every open call).
    fn stored_decisions(
        &self,
        state: &AgentState,
        pending: &Interrupt,
    ) -> Result<Result<Vec<Decision>, HookOutcome>, MiddlewareError> {
        let Some(stored) = state.values.get(DECISIONS_KEY).filter(|v| !v.is_null()) else {
            // New input answered every open call with tool messages (LangGraph takes new
            // input on a paused thread; the review is then over): the model goes on.
            if pending.open_calls(&state.messages).is_empty() {
                let mut update = StateUpdate::default();
                for key in [INTERRUPT_KEY, DECISIONS_KEY, REVIEWED_KEY] {
                    update.values.insert(key.into(), Value::Null);
                }
                return Ok(Err(HookOutcome { update, jump: None }));
            }
            return Err(self.fail(
                "before_agent",
                format!(
                    "the thread is paused for review of {} tool call(s); resume it with one decision per call (HumanInTheLoop::resume, or over keel serve a run with command: {{resume: {{decisions: [...]}}}})",
                    pending.tool_call_ids.len()
                ),
            ));
        };
        serde_json::from_value(stored.clone()).map(Ok).map_err(|e| {
            self.fail(
                "before_agent",
                format!("the stored decisions are not valid: {e}"),
            )
        })
    }

    /// Applies one decision per pending call: an edit rewrites the call in
    /// `ai_message`, the others answer it; refuses a decision the call's review does
    /// not allow. The answers, in call order.
    fn apply_decisions(
        &self,
        pending: &Interrupt,
        decisions: &[Decision],
        ai_message: &mut Message,
    ) -> Result<Vec<Message>, MiddlewareError> {
        let mut answers = Vec::new();
        for (i, (call_id, decision)) in pending.tool_call_ids.iter().zip(decisions).enumerate() {
            let allowed = &pending.review_configs[i].allowed_decisions;
            let tool = &pending.action_requests[i].name;
            if !allowed.contains(&decision.kind()) {
                return Err(self.fail(
                    "before_agent",
                    format!(
                        "decision {:?} is not allowed for tool '{tool}'; expected one of {allowed:?}",
                        decision.kind()
                    ),
                ));
            }
            match decision {
                Decision::Edit { edited_action } => {
                    if let MessageBody::Ai(body) = ai_message.body_mut()
                        && let Some(call) = body.tool_calls.iter_mut().find(|c| &c.id == call_id)
                    {
                        call.name = edited_action.name.clone();
                        call.args = edited_action.args.clone();
                    }
                }
                other => answers.extend(answer(call_id, tool, other)),
            }
        }
        Ok(answers)
    }
}

#[keel_core::middleware]
impl Middleware for HumanInTheLoop {
    fn resumable(&self) -> Option<&dyn Resumable> {
        Some(self)
    }

    fn name(&self) -> &str {
        "HumanInTheLoopMiddleware"
    }

    fn jump_targets(&self) -> &[JumpTarget] {
        &[JumpTarget::End, JumpTarget::Tools]
    }

    fn state_access(&self) -> StateAccess {
        StateAccess::default()
            .write(INTERRUPT_KEY)
            .write(DECISIONS_KEY)
    }

    async fn before_agent(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        let Some(pending) = Interrupt::of(state) else {
            return Ok(HookOutcome::proceed());
        };
        let decisions = match self.stored_decisions(state, &pending)? {
            Ok(decisions) => decisions,
            Err(done) => return Ok(done),
        };
        let Some(ai) = state
            .messages
            .iter()
            .rposition(|m| m.id() == pending.message_id)
        else {
            return Err(self.fail(
                "before_agent",
                "the interrupted AI message is no longer in the thread".into(),
            ));
        };
        let mut ai_message = state.messages[ai].clone();
        let answers = self.apply_decisions(&pending, &decisions, &mut ai_message)?;
        events::counter(
            &runtime.writer,
            self.name(),
            "resumed",
            decisions.len() as u64,
            json!({"decisions": decisions.iter().map(Decision::kind).collect::<Vec<_>>()}),
        );
        let mut reviewed: Vec<String> = state
            .values
            .get(REVIEWED_KEY)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default();
        reviewed.extend(pending.tool_call_ids.iter().cloned());
        let mut messages = state.messages.to_vec();
        messages[ai] = ai_message.clone();
        let mut update =
            StateUpdate::messages(std::iter::once(ai_message).chain(answers.iter().cloned()));
        messages.extend(answers);
        update.values.insert(DECISIONS_KEY.into(), Value::Null);
        // Per call: the next gated call of the same message, until none is left.
        if let Some(next) = self.next_interrupt(&messages, ai, &reviewed) {
            update.values.insert(REVIEWED_KEY.into(), json!(reviewed));
            return Ok(self.pause(runtime, update, &next));
        }
        update.values.insert(INTERRUPT_KEY.into(), Value::Null);
        update.values.insert(REVIEWED_KEY.into(), Value::Null);
        Ok(HookOutcome {
            update,
            jump: Some(JumpTarget::Tools),
        })
    }

    async fn after_model(
        &self,
        state: &AgentState,
        runtime: &Runtime,
    ) -> Result<HookOutcome, MiddlewareError> {
        let Some(i) = last_ai_index(&state.messages) else {
            return Ok(HookOutcome::proceed());
        };
        match self.next_interrupt(&state.messages, i, &[]) {
            Some(pending) => Ok(self.pause(runtime, StateUpdate::default(), &pending)),
            None => Ok(HookOutcome::proceed()),
        }
    }
}

#[cfg(test)]
mod tests;
