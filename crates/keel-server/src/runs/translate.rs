//! [`Translator`]: Keel's stream events, as the Agent Server sends them for each
//! protocol mode (see LangGraph's "Streaming" docs for the event names and payloads).

use std::collections::HashMap;

use keel_core::message::MessageBody;
use keel_core::model::ChatChunk;
use keel_core::state::{AgentState, INTERRUPT_KEY, MessageOp, StateUpdate};
use keel_core::stream::StreamEvent;
use serde_json::{Map, Value, json};

use super::modes::{ModeSet, WireMode};
use crate::wire::{
    interrupts_to_lg, message_to_lc, state_to_values, tool_call_to_lc, update_to_lc, usage_to_lc,
    values_text,
};

/// A checkpoint's `metadata.source`, from the node that wrote it (as the thread's
/// history reports it).
fn checkpoint_source(node: &str) -> &'static str {
    match node {
        "input" => "input",
        n if n == "update" || n.starts_with("update:") => "update",
        _ => "loop",
    }
}

/// One SSE event to append to the run's log.
pub type Out = (Option<WireMode>, &'static str, Data);

/// What an event carries: JSON to serialize, or text serialized already (a `values`
/// event, built from each message's cached serialization by [`values_text`]).
#[derive(Debug)]
pub enum Data {
    /// To serialize.
    Json(Value),
    /// Serialized JSON.
    Text(String),
}

impl From<Value> for Data {
    fn from(value: Value) -> Self {
        Data::Json(value)
    }
}

impl Data {
    /// The JSON text of the event's data.
    pub fn to_text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Data::Json(value) => serde_json::to_string(value)
                .unwrap_or_else(|_| "null".into())
                .into(),
            Data::Text(text) => text.as_str().into(),
        }
    }

    /// The JSON value, when the data was not serialized already.
    pub fn json(&self) -> Option<&Value> {
        match self {
            Data::Json(value) => Some(value),
            Data::Text(_) => None,
        }
    }
}

/// Who is running: copied into every `messages` metadata and `events` record.
#[derive(Clone, Debug)]
pub struct RunContext {
    /// The server's run id.
    pub run_id: String,
    /// The thread.
    pub thread_id: String,
    /// The assistant.
    pub assistant_id: String,
    /// The graph id.
    pub graph_id: String,
    /// The model's name.
    pub model_name: String,
    /// The model's provider.
    pub provider: String,
}

/// A `messages/partial` event is sent once the message has grown by at least this
/// fraction (1/N) of its size since the last one: every chunk while the message is
/// short, then at sizes growing geometrically, so the partials of a message add up to
/// about `N + 1` times its size instead of growing with the square of its chunks.
/// `messages/complete` always follows with the whole message, and `messages-tuple`
/// sends every chunk.
const PARTIAL_GROWTH: usize = 32;

/// A message being streamed in `messages` mode, accumulated from its chunks.
#[derive(Default)]
struct Partial {
    text: String,
    /// Tool calls by index: id, name, argument text.
    calls: Vec<(String, String, String)>,
    usage: Value,
    response_metadata: Map<String, Value>,
    /// Its size when the last `messages/partial` was sent.
    sent: usize,
}

impl Partial {
    /// Bytes of text and tool calls so far.
    fn size(&self) -> usize {
        self.text.len()
            + self
                .calls
                .iter()
                .map(|(id, name, args)| id.len() + name.len() + args.len())
                .sum::<usize>()
    }

    /// True when a `messages/partial` is due (and then counts it as sent).
    fn due(&mut self) -> bool {
        let size = self.size();
        let due = self.sent == 0 && size > 0
            || size.saturating_sub(self.sent) >= (size / PARTIAL_GROWTH).max(1);
        if due {
            self.sent = size;
        }
        due
    }
}

/// Turns one run's Keel events into protocol events for the modes asked for.
pub struct Translator {
    modes: ModeSet,
    ctx: RunContext,
    partial: HashMap<u64, Partial>,
    /// Model calls whose chunks reached the stream since the last `model` update: their
    /// answer was streamed, so `messages-tuple` does not send it again whole.
    streamed: bool,
    step: u64,
    /// `tasks`: the id of each node's running task.
    tasks: HashMap<String, String>,
}

impl Translator {
    /// A translator for a run.
    pub fn new(modes: ModeSet, ctx: RunContext) -> Self {
        Translator {
            modes,
            ctx,
            partial: HashMap::new(),
            streamed: false,
            step: 0,
            tasks: HashMap::new(),
        }
    }

    fn metadata(&self, node: &str) -> Value {
        json!({
            "run_id": self.ctx.run_id,
            "thread_id": crate::auth::public_thread_id(&self.ctx.thread_id),
            "assistant_id": self.ctx.assistant_id,
            "graph_id": self.ctx.graph_id,
            "langgraph_node": node,
            "langgraph_step": self.step,
            "langgraph_checkpoint_ns": "",
            "ls_provider": self.ctx.provider,
            "ls_model_name": self.ctx.model_name,
        })
    }

    fn event(&self, event: &str, name: &str, node: &str, data: Value) -> Out {
        (
            Some(WireMode::Events),
            "events",
            json!({
                "event": event,
                "name": name,
                "run_id": self.ctx.run_id,
                "tags": [],
                "metadata": self.metadata(node),
                "data": data,
                "parent_ids": [],
            })
            .into(),
        )
    }

    /// The `events` mode's opening record.
    pub fn start(&self, input: Value, out: &mut Vec<Out>) {
        if self.modes.has(WireMode::Events) {
            out.push(self.event(
                "on_chain_start",
                &self.ctx.graph_id,
                "",
                json!({ "input": input }),
            ));
        }
    }

    /// The `events` mode's closing record.
    pub fn finish(&self, output: Value, out: &mut Vec<Out>) {
        if self.modes.has(WireMode::Events) {
            out.push(self.event(
                "on_chain_end",
                &self.ctx.graph_id,
                "",
                json!({ "output": output }),
            ));
        }
    }

    /// The protocol events for one Keel event.
    pub fn translate(&mut self, event: &StreamEvent, out: &mut Vec<Out>) {
        match event {
            StreamEvent::Values { state } if self.modes.has(WireMode::Values) => {
                out.push((
                    Some(WireMode::Values),
                    "values",
                    Data::Text(values_text(state)),
                ));
            }
            StreamEvent::Updates { node, update } => self.update(node, update, out),
            StreamEvent::Messages {
                chunk,
                node,
                call_index,
                message_id,
            } => self.chunk(chunk, node, *call_index, message_id, out),
            StreamEvent::TaskStart { node, input } => self.task_start(node, input, out),
            StreamEvent::TaskEnd { node, update } => self.task_end(node, update, out),
            StreamEvent::Checkpoint {
                seq,
                parent,
                node,
                state,
            } => self.checkpoint(*seq, *parent, node, state, out),
            StreamEvent::Custom { node, payload } => {
                if self.modes.has(WireMode::Custom) {
                    out.push((Some(WireMode::Custom), "custom", payload.clone().into()));
                }
                if self.modes.has(WireMode::Events) {
                    let name = payload
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or(node.as_str())
                        .to_owned();
                    out.push(self.event("on_custom_event", &name, node, payload.clone()));
                }
            }
            // A mode this server does not translate yet.
            _ => {}
        }
    }

    /// A node's update: its messages (`messages`, `messages-tuple`), its `updates`
    /// event (and the pause, when it paused the run), and its `on_chain_end`.
    fn update(&mut self, node: &str, update: &StateUpdate, out: &mut Vec<Out>) {
        self.step += 1;
        let lc = update_to_lc(update);
        if self.modes.has(WireMode::Messages) || self.modes.has(WireMode::MessagesTuple) {
            for op in &update.messages {
                let MessageOp::Upsert { message } = op else {
                    continue;
                };
                let from_model = matches!(message.body(), MessageBody::Ai(_));
                // Only what a node produced: the model's answer and tool results.
                if !(node == "model" && from_model || node == "tools") {
                    continue;
                }
                let whole = message_to_lc(message);
                if self.modes.has(WireMode::Messages) {
                    out.push((
                        Some(WireMode::Messages),
                        "messages/complete",
                        json!([whole.clone()]).into(),
                    ));
                }
                if self.modes.has(WireMode::MessagesTuple) && !(from_model && self.streamed) {
                    out.push((
                        Some(WireMode::MessagesTuple),
                        "messages",
                        json!([whole, self.metadata(node)]).into(),
                    ));
                }
            }
        }
        if node == "model" {
            self.streamed = false;
            self.partial.clear();
        }
        if self.modes.has(WireMode::Events) {
            out.push(self.event("on_chain_end", node, node, json!({ "output": lc })));
        }
        let interrupt = update.values.get(INTERRUPT_KEY).and_then(interrupts_to_lg);
        if self.modes.has(WireMode::Updates) {
            // A node that only paused the run has nothing else to report.
            if interrupt.is_none() || lc.as_object().is_some_and(|o| !o.is_empty()) {
                let mut data = Map::new();
                data.insert(node.to_owned(), lc);
                out.push((
                    Some(WireMode::Updates),
                    "updates",
                    Value::Object(data).into(),
                ));
            }
            if let Some(list) = interrupt {
                out.push((
                    Some(WireMode::Updates),
                    "updates",
                    json!({ INTERRUPT_KEY: list }).into(),
                ));
            }
        }
    }

    /// A node starts: its `task` (the tools node's input is the calls it runs, as
    /// LangGraph's `tools` task).
    fn task_start(&mut self, node: &str, input: &AgentState, out: &mut Vec<Out>) {
        let id = keel_core::message::new_id();
        self.tasks.insert(node.to_owned(), id.clone());
        // The tools node's input is the calls it runs, as LangGraph's `tools` task.
        let input = if node == "tools" {
            let calls = input
                .messages
                .iter()
                .rev()
                .find(|m| m.is_ai())
                .map(|m| m.tool_calls().iter().map(tool_call_to_lc).collect())
                .unwrap_or_default();
            Value::Array(calls)
        } else {
            state_to_values(input)
        };
        let payload = json!({
            "id": id, "name": node, "input": input,
            "triggers": [format!("branch:to:{node}")],
        });
        self.graph_event("task", payload, out);
    }

    /// A node ends: its `task_result`, with the update it made and any pause.
    fn task_end(&mut self, node: &str, update: &StateUpdate, out: &mut Vec<Out>) {
        let id = self
            .tasks
            .remove(node)
            .unwrap_or_else(keel_core::message::new_id);
        let interrupts = update
            .values
            .get(INTERRUPT_KEY)
            .and_then(interrupts_to_lg)
            .unwrap_or_else(|| json!([]));
        let payload = json!({
            "id": id, "name": node, "error": null,
            "result": update_to_lc(update), "interrupts": interrupts,
        });
        self.graph_event("task_result", payload, out);
    }

    /// A `tasks` event, and its `debug` form (`task` or `task_result`).
    fn graph_event(&self, kind: &str, payload: Value, out: &mut Vec<Out>) {
        if self.modes.has(WireMode::Tasks) {
            out.push((Some(WireMode::Tasks), "tasks", payload.clone().into()));
        }
        if self.modes.has(WireMode::Debug) {
            out.push((
                Some(WireMode::Debug),
                "debug",
                json!({
                    "type": kind,
                    "timestamp": crate::time::rfc3339(crate::time::now_ms()),
                    "step": self.step,
                    "payload": payload,
                })
                .into(),
            ));
        }
    }

    /// A `checkpoints` event, and its `debug` form (with `checkpoint` and
    /// `parent_checkpoint` references). `metadata.step` counts from the thread's empty
    /// root (-1) along the seqs, which is LangGraph's step on a thread never forked.
    fn checkpoint(
        &self,
        seq: u64,
        parent: Option<u64>,
        node: &str,
        state: &keel_core::state::AgentState,
        out: &mut Vec<Out>,
    ) {
        if !(self.modes.has(WireMode::Checkpoints) || self.modes.has(WireMode::Debug)) {
            return;
        }
        let thread_id = crate::auth::public_thread_id(&self.ctx.thread_id);
        let reference = |seq: u64| {
            json!({
                "thread_id": thread_id,
                "checkpoint_ns": "",
                "checkpoint_id": crate::routes::threads::checkpoint_id(seq),
            })
        };
        let config = |seq: u64| json!({ "configurable": reference(seq) });
        // The thread's empty root is seq 0 and LangGraph's step -1.
        let step = i64::try_from(seq).map_or(i64::MAX, |s| s - 1);
        let (next, tasks, _) = crate::routes::threads::pending_tasks(
            seq,
            node,
            parent.is_none(),
            &state.messages,
            &state.values,
        );
        let payload = json!({
            "config": config(seq),
            "parent_config": parent.map(config),
            "values": state_to_values(state),
            "metadata": {"source": checkpoint_source(node), "step": step, "parents": {}},
            "next": next,
            "tasks": tasks,
        });
        if self.modes.has(WireMode::Checkpoints) {
            out.push((
                Some(WireMode::Checkpoints),
                "checkpoints",
                payload.clone().into(),
            ));
        }
        if self.modes.has(WireMode::Debug) {
            let mut debug = payload;
            debug["checkpoint"] = reference(seq);
            debug["parent_checkpoint"] = parent.map_or(Value::Null, reference);
            out.push((
                Some(WireMode::Debug),
                "debug",
                json!({
                    "type": "checkpoint",
                    "timestamp": crate::time::rfc3339(crate::time::now_ms()),
                    "step": step,
                    "payload": debug,
                })
                .into(),
            ));
        }
    }

    fn chunk(
        &mut self,
        chunk: &ChatChunk,
        node: &str,
        call_index: u64,
        message_id: &str,
        out: &mut Vec<Out>,
    ) {
        // The id the answer is stored under, so a client merges chunks and state by id.
        let id = message_id.to_owned();
        let mut lc = json!({
            "type": "AIMessageChunk", "id": id, "content": "", "name": null,
            "tool_calls": [], "invalid_tool_calls": [], "tool_call_chunks": [],
            "additional_kwargs": {}, "response_metadata": {}, "usage_metadata": null,
            "example": false,
        });
        let partial = self.partial.entry(call_index).or_default();
        let first = partial.text.is_empty()
            && partial.calls.is_empty()
            && partial.usage.is_null()
            && partial.response_metadata.is_empty();
        match chunk {
            ChatChunk::Text { text } => {
                lc["content"] = Value::String(text.clone());
                partial.text.push_str(text);
            }
            ChatChunk::ToolCall {
                index,
                id: call_id,
                name,
                args,
            } => tool_call_chunk(&mut lc, partial, *index, call_id, name, args),
            ChatChunk::Usage { usage } => {
                let usage = usage_to_lc(usage);
                lc["usage_metadata"] = usage.clone();
                partial.usage = usage;
            }
            ChatChunk::Metadata { metadata } => {
                lc["response_metadata"] = Value::Object(metadata.clone());
                partial.response_metadata.extend(metadata.clone());
            }
            // The agent never forwards the closing whole message to the stream.
            ChatChunk::Complete { .. } => return,
        }
        self.streamed = true;
        let messages = self.modes.has(WireMode::Messages);
        let so_far = self
            .partial
            .get_mut(&call_index)
            .and_then(|p| (messages && p.due()).then(|| partial_to_lc(&id, p)));
        if self.modes.has(WireMode::MessagesTuple) {
            out.push((
                Some(WireMode::MessagesTuple),
                "messages",
                json!([lc.clone(), self.metadata(node)]).into(),
            ));
        }
        if self.modes.has(WireMode::Messages) {
            if first {
                let mut meta = Map::new();
                meta.insert(id.clone(), json!({ "metadata": self.metadata(node) }));
                out.push((
                    Some(WireMode::Messages),
                    "messages/metadata",
                    Value::Object(meta).into(),
                ));
            }
            if let Some(so_far) = so_far {
                out.push((
                    Some(WireMode::Messages),
                    "messages/partial",
                    json!([so_far]).into(),
                ));
            }
        }
        if self.modes.has(WireMode::Events) {
            let name = self.ctx.model_name.clone();
            out.push(self.event("on_chat_model_stream", &name, node, json!({ "chunk": lc })));
        }
    }
}

/// One tool-call chunk: its `tool_call_chunks` entry, and, as LangChain's
/// AIMessageChunk parses its chunks, the call the arguments read so far make (or an
/// invalid one); the call's name, id and arguments are added to the message so far.
fn tool_call_chunk(
    lc: &mut Value,
    partial: &mut Partial,
    index: usize,
    call_id: &Option<String>,
    name: &Option<String>,
    args: &str,
) {
    lc["tool_call_chunks"] = json!([{
        "name": name, "args": args, "id": call_id, "index": index,
        "type": "tool_call_chunk",
    }]);
    // As LangChain's AIMessageChunk parses its chunks: arguments read so far
    // make a tool call, anything else an invalid one.
    match chunk_args(args) {
        Some(parsed) => {
            lc["tool_calls"] = json!([{
                "name": name.as_deref().unwrap_or(""), "args": parsed,
                "id": call_id, "type": "tool_call",
            }]);
        }
        None => {
            lc["invalid_tool_calls"] = json!([{
                "name": name, "args": args, "id": call_id, "error": null,
                "type": "invalid_tool_call",
            }]);
        }
    }
    if partial.calls.len() <= index {
        partial.calls.resize(index + 1, Default::default());
    }
    if let Some(slot) = partial.calls.get_mut(index) {
        if let Some(call_id) = call_id {
            slot.0.clone_from(call_id);
        }
        if let Some(name) = name {
            slot.1.push_str(name);
        }
        slot.2.push_str(args);
    }
}

/// A tool-call chunk's arguments as an object: `{}` when empty, else the JSON read so far
/// with open strings, arrays and objects closed (dropping a trailing fragment that
/// cannot be completed, as LangChain's `parse_partial_json` does). `None` when they are
/// not an object, or not the start of one.
fn chunk_args(args: &str) -> Option<Value> {
    if args.is_empty() {
        return Some(json!({}));
    }
    let object = |v: Value| v.is_object().then_some(v);
    if let Ok(v) = serde_json::from_str::<Value>(args) {
        return object(v);
    }
    let mut text = String::with_capacity(args.len() + 8);
    let mut closers = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    for c in args.chars() {
        if in_string {
            match c {
                '"' if !escaped => in_string = false,
                '\n' if !escaped => {
                    text.push_str("\\n");
                    continue;
                }
                '\\' => {
                    escaped = !escaped;
                    text.push(c);
                    continue;
                }
                _ => {}
            }
            escaped = false;
        } else {
            match c {
                '"' => (in_string, escaped) = (true, false),
                '{' => closers.push('}'),
                '[' => closers.push(']'),
                '}' | ']' if closers.last() == Some(&c) => {
                    closers.pop();
                }
                '}' | ']' => return None,
                _ => {}
            }
        }
        text.push(c);
    }
    if in_string {
        if escaped {
            text.pop();
        }
        text.push('"');
    }
    let tail: String = closers.iter().rev().collect();
    while !text.is_empty() {
        if let Ok(v) = serde_json::from_str::<Value>(&format!("{text}{tail}")) {
            return object(v);
        }
        text.pop();
    }
    None
}

/// The message so far, as `messages/partial` sends it: tool calls whose arguments parse
/// are `tool_calls`, the others `invalid_tool_calls` until more arrives.
fn partial_to_lc(id: &str, p: &Partial) -> Value {
    let mut calls = Vec::new();
    let mut invalid = Vec::new();
    for (call_id, name, args) in &p.calls {
        let text = if args.trim().is_empty() { "{}" } else { args };
        match serde_json::from_str::<Value>(text) {
            Ok(parsed) => calls.push(json!({
                "name": name, "args": parsed, "id": call_id, "type": "tool_call",
            })),
            Err(_) => invalid.push(json!({
                "name": name, "args": args, "id": call_id, "error": null,
                "type": "invalid_tool_call",
            })),
        }
    }
    json!({
        "type": "ai", "id": id, "content": p.text, "name": null,
        "tool_calls": calls, "invalid_tool_calls": invalid,
        "additional_kwargs": {}, "response_metadata": p.response_metadata,
        "usage_metadata": p.usage, "example": false,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tool_call_chunk_reads_its_arguments_as_langchain_does() {
        use super::chunk_args;
        use serde_json::json;
        for (args, want) in [
            ("", Some(json!({}))),
            (r#"{"query": "hi"}"#, Some(json!({"query": "hi"}))),
            (r#"{"query": "h"#, Some(json!({"query": "h"}))),
            (r#"{"a": [1, {"b": tru"#, Some(json!({"a": [1, {}]}))),
            (r#"{"text": "line\"#, Some(json!({"text": "line"}))),
            (r#"{"qu"#, Some(json!({}))),
            ("{\"s\": \"a\nb", Some(json!({"s": "a\nb"}))),
            ("[1, 2", None),
            ("\"just text\"", None),
            ("}", None),
        ] {
            assert_eq!(chunk_args(args), want, "{args}");
        }
    }

    use std::sync::Arc;

    use keel_core::message::Message;
    use keel_core::state::{AgentState, StateUpdate};

    use super::*;

    fn ctx() -> RunContext {
        RunContext {
            run_id: "r1".into(),
            thread_id: "t1".into(),
            assistant_id: "a1".into(),
            graph_id: "agent".into(),
            model_name: "m".into(),
            provider: "p".into(),
        }
    }

    fn names(out: &[Out]) -> Vec<&str> {
        out.iter().map(|(_, name, _)| *name).collect()
    }

    #[test]
    fn each_mode_gets_its_events() {
        let all = ModeSet::of(&super::super::modes::ALL_MODES);
        let mut t = Translator::new(all, ctx());
        let mut out = Vec::new();
        let text = |s: &str| StreamEvent::Messages {
            chunk: ChatChunk::Text { text: s.into() },
            node: "model".into(),
            call_index: 0,
            message_id: "answer-1".into(),
        };
        t.translate(&text("Hel"), &mut out);
        t.translate(&text("lo"), &mut out);
        assert_eq!(
            names(&out),
            [
                "messages",
                "messages/metadata",
                "messages/partial",
                "events",
                "messages",
                "messages/partial",
                "events"
            ]
        );
        assert_eq!(
            out[5].2.json().unwrap()[0]["content"],
            "Hello",
            "partial accumulates"
        );
        assert_eq!(
            out[4].2.json().unwrap()[0]["content"],
            "lo",
            "tuple carries the delta"
        );
        assert_eq!(out[4].2.json().unwrap()[1]["langgraph_node"], "model");

        out.clear();
        let answer = Message::ai("Hello").with_id("m1");
        t.translate(
            &StreamEvent::Updates {
                node: "model".into(),
                update: StateUpdate::messages([answer.clone()]),
            },
            &mut out,
        );
        // The streamed answer is not repeated in messages-tuple.
        assert_eq!(names(&out), ["messages/complete", "events", "updates"]);
        assert_eq!(
            out[2].2.json().unwrap()["model"]["messages"][0]["content"],
            "Hello"
        );

        out.clear();
        t.translate(
            &StreamEvent::Values {
                state: Arc::new(AgentState::with_messages(vec![answer])),
            },
            &mut out,
        );
        t.translate(
            &StreamEvent::Custom {
                node: "SummarizationMiddleware.before_model".into(),
                payload: json!({"type": "context_compacting"}),
            },
            &mut out,
        );
        assert_eq!(names(&out), ["values", "custom", "events"]);
        assert_eq!(out[2].2.json().unwrap()["event"], "on_custom_event");
        assert_eq!(out[2].2.json().unwrap()["name"], "context_compacting");
    }

    /// Bytes of `messages/partial` and of `messages` events for an answer of `n` chunks.
    fn streamed_bytes(n: usize) -> (usize, usize) {
        let modes = ModeSet::of(&[WireMode::Messages, WireMode::MessagesTuple]);
        let mut t = Translator::new(modes, ctx());
        let mut out = Vec::new();
        let (mut partial, mut tuple) = (0, 0);
        for _ in 0..n {
            t.translate(
                &StreamEvent::Messages {
                    chunk: ChatChunk::Text {
                        text: "word ".repeat(20),
                    },
                    node: "model".into(),
                    call_index: 0,
                    message_id: "answer-1".into(),
                },
                &mut out,
            );
            for (_, name, data) in out.drain(..) {
                let bytes = data.to_text().len();
                match name {
                    "messages/partial" => partial += bytes,
                    "messages" => tuple += bytes,
                    _ => {}
                }
            }
        }
        (partial, tuple)
    }

    #[test]
    fn streamed_bytes_grow_linearly_with_the_answer() {
        let (p1, t1) = streamed_bytes(500);
        let (p2, t2) = streamed_bytes(1000);
        // Twice the chunks: twice the bytes, give or take a step of the partials (the
        // square would be four times).
        assert!(p2 * 10 < p1 * 25, "partials: {p1} then {p2} bytes");
        assert!(t2 * 10 < t1 * 21, "tuples: {t1} then {t2} bytes");
        // And about PARTIAL_GROWTH + 1 times the answer at most, plus each event's frame.
        let answer = 1000 * 100;
        assert!(
            p2 < (PARTIAL_GROWTH + 2) * answer,
            "{p2} bytes for {answer}"
        );
    }

    #[test]
    fn tool_results_reach_messages_tuple_whole() {
        let mut t = Translator::new(ModeSet::of(&[WireMode::MessagesTuple]), ctx());
        let mut out = Vec::new();
        t.translate(
            &StreamEvent::Updates {
                node: "tools".into(),
                update: StateUpdate::messages([Message::tool("c1", "42")]),
            },
            &mut out,
        );
        assert_eq!(names(&out), ["messages"]);
        assert_eq!(out[0].2.json().unwrap()[0]["type"], "tool");
    }
}
