//! The replay loop: every AI message of a transcript is one model call, driven through
//! the middleware stack the way the agent drives a live one.
//!
//! For each call the history before the AI message is in agent state; `before_agent`
//! runs when a turn starts, `before_model` before each call, then the `wrap_model_call`
//! chain through [`Next`] down to a [`TranscriptAnswer`] that records the request and
//! answers with the transcript's message; `after_model` follows, and `after_agent` when
//! the turn's final answer (an AI message without tool calls) is in. State updates from
//! hooks are applied as the agent applies them, so a middleware that rewrites state sees
//! the consequences on the next call, exactly as it would live.

use std::collections::HashSet;
use std::sync::Arc;

use keel_core::message::{HIDE_FROM_UI, Message};
use keel_core::middleware::{
    HookOutcome, Middleware, MiddlewareError, ModelRequest, Next, Runtime,
};
use keel_core::model::{ModelError, ModelProfile, ModelSettings};
use keel_core::pairs::check_pairs;
use keel_core::state::{AgentState, MessageOp, StateError, StateUpdate};
use keel_core::stream::{StreamEvent, StreamWriter};
use keel_core::tokens::TokenCounter;
use keel_core::tool::ToolSpec;
use keel_memory::events::{EVENT_FOLD_FAILED, EVENT_FOLDED};
use keel_summarization::events::EVENT_COMPACTED;
use keel_summarization::{SUMMARY_NAME, SUMMARY_PREFIX};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::answer::{TranscriptAnswer, TranscriptModel};
use crate::report::{CallReport, ReplayReport};
use crate::transcript::Transcript;

/// How many trailing messages the baseline sends verbatim: Langflow's default
/// `n_messages = 100`, the behaviour Langflow feature request #15799 sets out to improve.
pub const BASELINE_WINDOW: usize = 100;

/// The message id of every question [`ReplayEngine::run_with_questions`] asks.
pub const QUESTION_ID: &str = "keel-eval-question";

/// Node name of the model step, as the agent names it in events.
const MODEL_NODE: &str = "model";

/// The node hooks, so a hook name can never be misspelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NodeHook {
    BeforeAgent,
    BeforeModel,
    AfterModel,
    AfterAgent,
}

impl NodeHook {
    fn name(self) -> &'static str {
        match self {
            NodeHook::BeforeAgent => "before_agent",
            NodeHook::BeforeModel => "before_model",
            NodeHook::AfterModel => "after_model",
            NodeHook::AfterAgent => "after_agent",
        }
    }

    fn implemented_by(self, m: &dyn Middleware) -> bool {
        let h = m.hooks();
        match self {
            NodeHook::BeforeAgent => h.before_agent(),
            NodeHook::BeforeModel => h.before_model(),
            NodeHook::AfterModel => h.after_model(),
            NodeHook::AfterAgent => h.after_agent(),
        }
    }
}

/// A replay that stopped. Each variant names the model call and transcript line.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A node hook failed.
    #[error("model call {call} (transcript line {line}): {source}")]
    Hook {
        /// 1-based model call.
        call: usize,
        /// Transcript line of the AI message.
        line: usize,
        /// The hook's error.
        source: MiddlewareError,
    },
    /// A node hook asked for a jump it did not declare.
    #[error(
        "model call {call} (transcript line {line}): middleware {middleware} jumped to \
         {target} from {hook} without declaring it in jump_targets"
    )]
    UndeclaredJump {
        /// 1-based model call.
        call: usize,
        /// Transcript line of the AI message.
        line: usize,
        /// The middleware.
        middleware: String,
        /// The hook.
        hook: &'static str,
        /// The requested target.
        target: String,
    },
    /// The `wrap_model_call` chain failed.
    #[error("model call {call} (transcript line {line}): {source}")]
    Model {
        /// 1-based model call.
        call: usize,
        /// Transcript line of the AI message.
        line: usize,
        /// The error the chain returned.
        source: ModelError,
    },
    /// A hook's state update could not be applied.
    #[error("model call {call} (transcript line {line}): state update from {node}: {source}")]
    State {
        /// 1-based model call.
        call: usize,
        /// Transcript line of the AI message.
        line: usize,
        /// The node whose update failed.
        node: String,
        /// The reducer's error.
        source: StateError,
    },
}

/// A request exactly as the middleware stack handed it to the model.
#[derive(Clone, Debug)]
pub struct SentRequest {
    /// 1-based model call.
    pub index: usize,
    /// The answering model's name.
    pub model: String,
    /// The system message.
    pub system: Option<Message>,
    /// The conversation sent.
    pub messages: Arc<Vec<Message>>,
    /// Tool schemas sent.
    pub tools: Arc<Vec<ToolSpec>>,
    /// Sampling settings.
    pub settings: ModelSettings,
}

impl SentRequest {
    /// The request in the OpenAI chat-completions body shape, messages with their ids,
    /// roles and tool calls (the system message first, as it goes on the wire).
    pub fn to_json(&self) -> Value {
        let mut messages: Vec<Value> = Vec::with_capacity(self.messages.len() + 1);
        for m in self.system.iter().chain(self.messages.iter()) {
            messages.push(serde_json::to_value(m).unwrap_or(Value::Null));
        }
        let mut body = json!({ "model": self.model, "messages": messages });
        if !self.tools.is_empty() {
            body["tools"] = self
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
        }
        if let (Some(obj), Ok(Value::Object(settings))) =
            (body.as_object_mut(), serde_json::to_value(&self.settings))
        {
            obj.extend(settings);
        }
        body
    }
}

/// Watches a replay as it runs (a progress bar, a request dump).
pub trait ReplayObserver: Send {
    /// The replay is about to make `calls` model calls.
    fn started(&mut self, _calls: usize) {}
    /// One call is done.
    fn call_done(&mut self, _call: &CallReport, _request: Option<&SentRequest>) {}
    /// Whether `call_done` needs the request's messages. When it does not and the
    /// engine keeps no requests, a request the stack left untouched (the whole history)
    /// is not held past its counting, so appending the answer never copies the history.
    fn wants_requests(&self) -> bool {
        true
    }
}

/// An observer that ignores everything.
pub struct Quiet;

impl ReplayObserver for Quiet {}

/// What a replay returns: the report and every request as sent.
#[derive(Clone, Debug)]
pub struct Replay {
    /// Figures per call and in total.
    pub report: ReplayReport,
    /// The request of each call, in order (`None` where a middleware answered without
    /// calling the model).
    pub requests: Vec<Option<SentRequest>>,
}

/// Replays transcripts through a middleware stack. See the [module docs](self).
pub struct ReplayEngine {
    middleware: Vec<Arc<dyn Middleware>>,
    counter: Arc<dyn TokenCounter>,
    thread_id: String,
    profile: ModelProfile,
    tools: Arc<Vec<ToolSpec>>,
    keep_requests: bool,
}

impl ReplayEngine {
    /// An engine running `middleware` (outermost first, as an agent lists them) and
    /// counting tokens with `counter`.
    pub fn new(middleware: Vec<Arc<dyn Middleware>>, counter: Arc<dyn TokenCounter>) -> Self {
        ReplayEngine {
            middleware,
            counter,
            thread_id: "replay".to_owned(),
            profile: ModelProfile::new("transcript", "replay"),
            tools: Arc::new(Vec::new()),
            keep_requests: true,
        }
    }

    /// Whether [`Replay::requests`] keeps every request (default) or stays empty: the
    /// observer sees each request either way.
    pub fn with_kept_requests(mut self, keep: bool) -> Self {
        self.keep_requests = keep;
        self
    }

    /// The thread id middleware see (summary caches key on it).
    pub fn with_thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = thread_id.into();
        self
    }

    /// The answering model's profile (its context window drives fraction triggers).
    pub fn with_model_profile(mut self, profile: ModelProfile) -> Self {
        self.profile = profile;
        self
    }

    /// The token counter the figures use (the one the middleware count with).
    pub fn counter(&self) -> &Arc<dyn TokenCounter> {
        &self.counter
    }

    /// The tool schemas offered on every request.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// Tool schemas offered on every request (the transcript does not record them).
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = Arc::new(tools);
        self
    }

    /// Replays `transcript`, reporting progress to `observer`.
    pub async fn run(
        &self,
        transcript: &Transcript,
        observer: &mut dyn ReplayObserver,
    ) -> Result<Replay, ReplayError> {
        let mut run = Run::new(self, transcript);
        run.replay_all(observer).await?;
        Ok(run.into_replay())
    }

    /// Replays `transcript`, then asks each of `questions` as the next user message
    /// after the whole transcript and returns the request the model would receive for
    /// each (`None` where a middleware answered without calling the model), in order.
    ///
    /// Each question is asked on its own: it runs `before_agent`, `before_model` and the
    /// `wrap_model_call` chain like the first call of a new turn, and then the history
    /// goes back to the end of the transcript, so no question sees another. Every
    /// question is the same message, [`QUESTION_ID`], asked anew: middleware that record
    /// the turn's messages by id (session memory records a turn when it starts) hold at
    /// most that one message, which is the current turn of every later question and so
    /// never sent as history. The transcript's own calls are replayed and reported as by
    /// [`run`](Self::run). Each returned request's `index` is the question's 1-based
    /// position.
    pub async fn run_with_questions(
        &self,
        transcript: &Transcript,
        questions: &[String],
        observer: &mut dyn ReplayObserver,
    ) -> Result<(Replay, Vec<Option<SentRequest>>), ReplayError> {
        let mut run = Run::new(self, transcript);
        run.replay_all(observer).await?;
        let end = transcript.messages().len();
        if run.in_turn {
            // The transcript ends inside a turn (waiting on tools, or a user message
            // without an answer): the question starts a new one, as a new user message
            // would live.
            run.end_turn(end).await?;
        }
        let mut sent = Vec::with_capacity(questions.len());
        for (i, question) in questions.iter().enumerate() {
            sent.push(run.question_call(i + 1, question).await?);
        }
        Ok((run.into_replay(), sent))
    }
}

/// The mutable side of one replay.
struct Run<'a> {
    engine: &'a ReplayEngine,
    transcript: &'a Transcript,
    system: Option<Message>,
    state: Arc<AgentState>,
    wrap_chain: Vec<Arc<dyn Middleware>>,
    model: Arc<TranscriptModel>,
    events: mpsc::UnboundedReceiver<StreamEvent>,
    writer: StreamWriter,
    in_turn: bool,
    turns: u64,
    calls_in_turn: u64,
    call_index: usize,
    /// `prefix_tokens[i]`: tokens of the first `i` transcript messages, each counted
    /// once, so a call's history and baseline cost O(1) instead of a sum over the
    /// history (which made a replay quadratic).
    prefix_tokens: Vec<u64>,
    system_tokens: u64,
    /// Ids that hooks upserted into state. A transcript message with one of these ids
    /// replaces it (as `MessageOp::Upsert` does); any other transcript message is new
    /// (the shared check makes transcript ids unique) and is appended without the scan
    /// by id that `AgentState::apply` does for an upsert.
    hook_ids: HashSet<String>,
    /// See [`ReplayObserver::wants_requests`].
    observer_wants_requests: bool,
    report: ReplayReport,
    requests: Vec<Option<SentRequest>>,
}

impl<'a> Run<'a> {
    fn new(engine: &'a ReplayEngine, transcript: &'a Transcript) -> Self {
        let (tx, events) = mpsc::unbounded_channel();
        let counter = &engine.counter;
        let system = transcript.system().cloned();
        Run {
            engine,
            transcript,
            system_tokens: system.as_ref().map_or(0, |s| counter.count_message(s))
                + counter.count_tools(&engine.tools),
            system,
            state: Arc::new(AgentState::default()),
            wrap_chain: engine
                .middleware
                .iter()
                .filter(|m| m.hooks().wrap_model_call())
                .cloned()
                .collect(),
            model: TranscriptModel::new(engine.profile.clone()),
            events,
            writer: StreamWriter::new(tx),
            in_turn: false,
            turns: 0,
            calls_in_turn: 0,
            call_index: 0,
            prefix_tokens: std::iter::once(0)
                .chain(transcript.messages().iter().scan(0u64, |sum, m| {
                    *sum += counter.count_message(m);
                    Some(*sum)
                }))
                .collect(),
            hook_ids: HashSet::new(),
            observer_wants_requests: true,
            report: ReplayReport {
                counter: counter.name().to_owned(),
                ..Default::default()
            },
            requests: Vec::new(),
        }
    }

    /// Replays every message of the transcript.
    async fn replay_all(&mut self, observer: &mut dyn ReplayObserver) -> Result<(), ReplayError> {
        self.observer_wants_requests = observer.wants_requests();
        observer.started(self.transcript.model_calls());
        for position in 0..self.transcript.messages().len() {
            if !self.transcript.messages()[position].is_ai() {
                self.observe_input(position).await?;
                continue;
            }
            let (call, request) = self.model_call(position).await?;
            observer.call_done(&call, request.as_ref());
            self.finish_call(call, request);
        }
        Ok(())
    }

    /// The request of the model call that would answer `question` asked after the whole
    /// transcript; the history is left as it was (see
    /// [`ReplayEngine::run_with_questions`]).
    async fn question_call(
        &mut self,
        index: usize,
        question: &str,
    ) -> Result<Option<SentRequest>, ReplayError> {
        let position = self.transcript.messages().len();
        let saved_state = self.state.clone();
        let saved_hook_ids = self.hook_ids.clone();
        let saved_calls = self.calls_in_turn;
        let asked = Message::human(question).with_id(QUESTION_ID);
        Arc::make_mut(&mut Arc::make_mut(&mut self.state).messages).push(asked);
        self.in_turn = true;
        self.turns += 1;
        self.calls_in_turn = 0;
        let result = self.question_request(position, index).await;
        // Back to the end of the transcript, whatever happened.
        while self.events.try_recv().is_ok() {}
        self.state = saved_state;
        self.hook_ids = saved_hook_ids;
        self.calls_in_turn = saved_calls;
        self.in_turn = false;
        result
    }

    async fn question_request(
        &mut self,
        position: usize,
        index: usize,
    ) -> Result<Option<SentRequest>, ReplayError> {
        let call = self.call_index + 1;
        let line = self.line(position);
        self.node_hooks(position, NodeHook::BeforeAgent).await?;
        self.node_hooks(position, NodeHook::BeforeModel).await?;
        let terminal = TranscriptAnswer::new(Message::ai("").with_id("keel-question-answer"));
        Next::new(&self.wrap_chain, &terminal)
            .run(self.request())
            .await
            .map_err(|source| ReplayError::Model { call, line, source })?;
        Ok(sent_request(&terminal, index))
    }

    /// The request the model node hands to the `wrap_model_call` chain.
    fn request(&self) -> ModelRequest {
        ModelRequest {
            messages: self.state.messages.clone(),
            system: self.system.clone(),
            tools: self.engine.tools.clone(),
            tool_choice: None,
            settings: ModelSettings::default(),
            model: self.model.clone(),
            state: self.state.clone(),
            runtime: self.runtime(MODEL_NODE),
        }
    }

    fn runtime(&self, node: &str) -> Runtime {
        Runtime {
            thread_id: Arc::from(self.engine.thread_id.as_str()),
            run_id: Arc::from(format!("{}-turn-{}", self.engine.thread_id, self.turns).as_str()),
            writer: self.writer.for_node(node),
            model_call_index: self.calls_in_turn,
        }
    }

    fn line(&self, position: usize) -> usize {
        self.transcript.line(position)
    }

    /// A human or tool message enters the history.
    async fn observe_input(&mut self, position: usize) -> Result<(), ReplayError> {
        let message = self.transcript.messages()[position].clone();
        if message.is_human() && self.in_turn {
            // A new user message while the last turn still waited on tools: that turn
            // ended without a final answer.
            self.end_turn(position).await?;
        }
        self.append_transcript_message(position, "input", message)
    }

    /// Appends a transcript message to the history, in O(1) unless a hook put a message
    /// with its id there first.
    fn append_transcript_message(
        &mut self,
        position: usize,
        node: &str,
        message: Message,
    ) -> Result<(), ReplayError> {
        if self.hook_ids.contains(message.id()) {
            return self.apply(position, node, StateUpdate::messages([message]));
        }
        Arc::make_mut(&mut Arc::make_mut(&mut self.state).messages).push(message);
        Ok(())
    }

    fn apply(
        &mut self,
        position: usize,
        node: &str,
        update: StateUpdate,
    ) -> Result<(), ReplayError> {
        if update.is_empty() {
            return Ok(());
        }
        for op in &update.messages {
            if let MessageOp::Upsert { message } = op {
                self.hook_ids.insert(message.id().to_owned());
            }
        }
        Arc::make_mut(&mut self.state)
            .apply(update)
            .map_err(|source| ReplayError::State {
                call: self.call_index + 1,
                line: self.line(position),
                node: node.to_owned(),
                source,
            })
    }

    /// Runs one node hook of every middleware that implements it (reverse order for the
    /// `after_*` hooks). Jumps cannot change what the transcript says happened next, so
    /// a declared jump is recorded as an event and otherwise ignored.
    async fn node_hooks(&mut self, position: usize, hook: NodeHook) -> Result<(), ReplayError> {
        let mut list: Vec<Arc<dyn Middleware>> = self
            .engine
            .middleware
            .iter()
            .filter(|m| hook.implemented_by(m.as_ref()))
            .cloned()
            .collect();
        if matches!(hook, NodeHook::AfterModel | NodeHook::AfterAgent) {
            list.reverse();
        }
        for m in list {
            let node = format!("{}.{}", m.name(), hook.name());
            let runtime = self.runtime(&node);
            let state = self.state.clone();
            let outcome: Result<HookOutcome, MiddlewareError> = match hook {
                NodeHook::BeforeAgent => m.before_agent(&state, &runtime).await,
                NodeHook::BeforeModel => m.before_model(&state, &runtime).await,
                NodeHook::AfterModel => m.after_model(&state, &runtime).await,
                NodeHook::AfterAgent => m.after_agent(&state, &runtime).await,
            };
            let HookOutcome { update, jump } = outcome.map_err(|source| ReplayError::Hook {
                call: self.call_index + 1,
                line: self.line(position),
                source,
            })?;
            self.apply(position, &node, update)?;
            if let Some(target) = jump {
                let target_name = format!("{target:?}").to_lowercase();
                if !m.jump_targets().contains(&target) {
                    return Err(ReplayError::UndeclaredJump {
                        call: self.call_index + 1,
                        line: self.line(position),
                        middleware: m.name().to_owned(),
                        hook: hook.name(),
                        target: target_name,
                    });
                }
                self.writer.for_node(&node).custom(json!({
                    "type": "replay_jump_ignored",
                    "target": target_name,
                }));
            }
        }
        Ok(())
    }

    async fn end_turn(&mut self, position: usize) -> Result<(), ReplayError> {
        self.node_hooks(position, NodeHook::AfterAgent).await?;
        self.in_turn = false;
        Ok(())
    }

    /// One model call: the AI message at `position` is the answer.
    async fn model_call(
        &mut self,
        position: usize,
    ) -> Result<(CallReport, Option<SentRequest>), ReplayError> {
        let line = self.line(position);
        let call = self.call_index + 1;
        self.before_model(position).await?;

        let answer = self.transcript.messages()[position].clone();
        let terminal = TranscriptAnswer::new(answer.clone());
        let response = Next::new(&self.wrap_chain, &terminal)
            .run(self.request())
            .await
            .map_err(|source| ReplayError::Model { call, line, source })?;
        let sent = sent_request(&terminal, call);
        self.calls_in_turn += 1;
        let (measured, sent) = self.measure(position, sent);

        // As the agent does: the wrap hooks' update first, then the answer, which is the
        // transcript's message (the history must stay the recorded one).
        self.apply(position, MODEL_NODE, response.update)?;
        self.append_transcript_message(position, MODEL_NODE, answer)?;
        self.after_model(position).await?;

        let events = self.drain_custom_events();
        let (summary_runs, cache_event) = classify(&events);
        let (request_messages, carries_summary) = match &sent {
            Some(_) if measured.untouched => (position, false),
            Some(s) => (s.messages.len(), s.messages.iter().any(is_summary)),
            None => (0, false),
        };
        let summary_runs = self.note_summary(sent.as_ref(), &events, summary_runs);
        self.report.totals.summary_calls += summary_runs;
        let report = CallReport {
            index: call,
            line,
            history_messages: position,
            history_tokens: measured.history_tokens,
            request_messages,
            request_tokens: measured.request_tokens,
            summary_call: summary_runs > 0,
            cache_hit: cache_event || (carries_summary && summary_runs == 0),
            events,
            pair_violation: measured.pair_violation,
        };
        Ok((report, sent))
    }

    /// The hooks before a model call: `before_agent` when the call starts a turn, then
    /// `before_model`.
    async fn before_model(&mut self, position: usize) -> Result<(), ReplayError> {
        if !self.in_turn {
            self.in_turn = true;
            self.turns += 1;
            self.calls_in_turn = 0;
            self.node_hooks(position, NodeHook::BeforeAgent).await?;
        }
        self.node_hooks(position, NodeHook::BeforeModel).await
    }

    /// The hooks after a model call's answer is in the history: `after_model`, then
    /// `after_agent` when the answer ends the turn (it calls no tool).
    async fn after_model(&mut self, position: usize) -> Result<(), ReplayError> {
        self.node_hooks(position, NodeHook::AfterModel).await?;
        if self.transcript.messages()[position].tool_calls().is_empty() {
            self.end_turn(position).await?;
        }
        Ok(())
    }

    /// Counts the history and the request the stack sent (checking its tool pairs), and
    /// drops an untouched request's copy of the history when nobody keeps it. Runs
    /// before the answer is applied: an untouched request is recognised by sharing the
    /// state's history.
    fn measure(
        &self,
        position: usize,
        sent: Option<SentRequest>,
    ) -> (Measured, Option<SentRequest>) {
        let history_tokens = self.system_tokens + self.prefix_tokens[position];
        // A request the stack left untouched is the history itself: its count is known.
        let untouched = sent.as_ref().is_some_and(|s| {
            Arc::ptr_eq(&s.messages, &self.state.messages)
                && Arc::ptr_eq(&s.tools, &self.engine.tools)
                && s.system == self.system
        });
        let request_tokens = match &sent {
            Some(_) if untouched => history_tokens,
            Some(s) => self
                .engine
                .counter
                .count_request(s.system.as_ref(), &s.messages, &s.tools),
            None => 0,
        };
        let pair_violation = match &sent {
            // The history passed the shared check, so its pairs are sound.
            Some(_) if untouched => None,
            Some(s) => check_pairs(&s.messages).err().map(|v| v.to_string()),
            None => None,
        };
        // Once counted, an untouched request shares nothing the state needs: give the
        // history back so appending the answer does not copy it.
        let sent = sent.map(|mut s| {
            if untouched && !self.engine.keep_requests && !self.observer_wants_requests {
                s.messages = Arc::new(Vec::new());
            }
            s
        });
        let measured = Measured {
            history_tokens,
            request_tokens,
            pair_violation,
            untouched,
        };
        (measured, sent)
    }

    /// The payloads of the custom stream events emitted since the last call.
    fn drain_custom_events(&mut self) -> Vec<Value> {
        let mut events = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            if let StreamEvent::Custom { payload, .. } = event {
                events.push(payload);
            }
        }
        events
    }

    /// Records the summary a request carries in the report, and returns the summary runs
    /// the call cost: `summary_runs` from its events, or one for a summary written ahead
    /// (`precompute_at`), which is served as a cache hit and counted on the first call
    /// that sends it.
    fn note_summary(
        &mut self,
        sent: Option<&SentRequest>,
        events: &[Value],
        mut summary_runs: u64,
    ) -> u64 {
        if let Some(s) = sent
            && let Some(summary) = s.messages.iter().find(|m| is_summary(m))
        {
            let text = summary.text();
            let body = text
                .strip_prefix(SUMMARY_PREFIX)
                .unwrap_or(&text)
                .trim_start();
            if summary_runs == 0
                && precomputed(events)
                && self.report.summary.as_deref() != Some(body)
            {
                summary_runs = 1;
            }
            self.report.summary = Some(body.to_owned());
        }
        summary_runs
    }

    fn finish_call(&mut self, call: CallReport, request: Option<SentRequest>) {
        let h = call.history_messages;
        let baseline = self.system_tokens + self.prefix_tokens[h]
            - self.prefix_tokens[h.saturating_sub(BASELINE_WINDOW)];
        self.report.push(call, baseline);
        if self.engine.keep_requests {
            self.requests.push(request);
        }
        self.call_index += 1;
    }

    fn into_replay(self) -> Replay {
        Replay {
            report: self.report,
            requests: self.requests,
        }
    }
}

/// A model call's figures, measured before its answer is applied.
struct Measured {
    /// Tokens of the history before the call (system prompt included).
    history_tokens: u64,
    /// Tokens of the request as sent.
    request_tokens: u64,
    /// Why the request's tool calls and results do not pair, if they do not.
    pair_violation: Option<String>,
    /// The stack sent the history itself, unchanged.
    untouched: bool,
}

/// What reached `terminal`, as call `index`.
fn sent_request(terminal: &TranscriptAnswer, index: usize) -> Option<SentRequest> {
    terminal.take_sent().map(|r| SentRequest {
        index,
        model: r.model.profile().name.clone(),
        system: r.system,
        messages: r.messages,
        tools: r.tools,
        settings: r.settings,
    })
}

/// True for the summary message a compacting middleware puts in a request: a user-role
/// message named `summary` or flagged `hide_from_ui` (the convention summarization and
/// session memory share, so a UI can hide it).
pub fn is_summary(message: &Message) -> bool {
    message.is_human() && (message.name() == Some(SUMMARY_NAME) || message.flag(HIDE_FROM_UI))
}

/// True when a `context_compacted` event says its summary was written ahead.
fn precomputed(events: &[Value]) -> bool {
    events.iter().any(|e| {
        e.get("type").and_then(Value::as_str) == Some(EVENT_COMPACTED)
            && e.get("precomputed").and_then(Value::as_bool) == Some(true)
    })
}

/// Reads the events of one call: how many summaries were produced (or attempted: a
/// failed summary call still costs a call), and whether a compaction said it reused a
/// cached summary. These events are the public contract of compaction (a UI sees the
/// same ones), so the replay needs no access to the middleware's internals.
pub fn classify(events: &[Value]) -> (u64, bool) {
    let mut runs = 0;
    let mut cache_hit = false;
    for e in events {
        match e.get("type").and_then(Value::as_str) {
            Some(EVENT_COMPACTED) => {
                if e.get("cache_hit").and_then(Value::as_bool) == Some(true) {
                    cache_hit = true;
                } else if matches!(
                    e.get("source").and_then(Value::as_str),
                    Some("model" | "extractive")
                ) || e.get("error").is_some()
                {
                    runs += 1;
                }
            }
            Some(EVENT_FOLDED) => runs += 1,
            // A fold that failed at the model cost a call; one that failed saving did not.
            Some(EVENT_FOLD_FAILED) => {
                runs += u64::from(e.get("reason").and_then(Value::as_str) != Some("store"));
            }
            _ => {}
        }
    }
    (runs, cache_hit)
}
