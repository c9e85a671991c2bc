//! The thread-centric streaming protocol ("protocol v2", specified as CDDL and types in
//! the `@langchain/protocol` npm package and the `langchain-protocol` PyPI package; used
//! by `client.threads.stream(...)` of `langgraph-sdk` and the JS SDK's transport):
//!
//! - `POST /threads/{thread_id}/commands`: one command `{id, method, params}`, answered
//!   with `{"type": "success", id, result, meta}` or `{"type": "error", id, error,
//!   message}`. `run.start` starts a run on the thread (creating the thread if needed;
//!   on a thread paused for a review, its `input` is the resume value) and
//!   `input.respond` answers the pending interrupt (human in the loop). Every other
//!   method of the specification answers the error `not_supported`; names outside it
//!   answer `unknown_command`. A malformed envelope is a 400.
//! - `POST /threads/{thread_id}/stream/events`: an SSE stream of the thread's events,
//!   filtered by `channels` (and `namespaces`/`depth`), which follows the thread's
//!   latest run (replayed from its start) and every run after it until the client
//!   closes it. Each event carries `seq`, its position on the connection, counted from
//!   1 at the replayed run's first event; `since` skips the events up to it.
//!
//! The runs' events are read from their logs ([`crate::runs::EventLog`], the same
//! events `runs/stream` sends) and mapped onto the channels: `lifecycle` (running,
//! completed, failed, interrupted), `values` (without `__interrupt__`), `updates`,
//! `messages` (message-start, content-block-start/delta/finish, message-finish),
//! `tools` (tool-started, tool-finished, tool-error), `input` (`input.requested`) and
//! `custom`. Keel has no subgraphs: every event is in the root namespace `[]`; the
//! `tasks` and `checkpoints` channels are accepted and carry nothing.

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::Stream;
use serde_json::{Map, Value, json};

use crate::auth::{Owner, check_thread_id};
use crate::error::ApiError;
use crate::extract::{Ids, JsonBody};
use crate::registry::RunRecord;
use crate::routes::runs::{self as run_routes, RunBody};
use crate::routes::threads::{current_values, find_owned};
use crate::runs::{LiveRun, Next, SseEvent};
use crate::state::AppState;
use crate::time::now_ms;

/// The stream modes a `run.start` run is created with: what the channels are made of.
const RUN_MODES: [&str; 4] = ["values", "updates", "messages-tuple", "custom"];

/// Methods the specification defines that this server does not implement, with why.
const NOT_SUPPORTED: [(&str, &str); 8] = [
    (
        "subscription.subscribe",
        "subscriptions are commands of the WebSocket transport; over HTTP, open POST /threads/{thread_id}/stream/events with the filter",
    ),
    (
        "subscription.unsubscribe",
        "subscriptions are commands of the WebSocket transport; over HTTP, close the event stream",
    ),
    (
        "subscription.reconnect",
        "subscriptions are commands of the WebSocket transport; over HTTP, reopen the event stream with since",
    ),
    (
        "agent.getTree",
        "a Keel agent has no subgraphs: its tree is the root namespace alone",
    ),
    (
        "input.inject",
        "a running Keel agent cannot take new input; start a run after it ends",
    ),
    (
        "state.get",
        "read the thread's state with GET /threads/{thread_id}/state",
    ),
    (
        "state.listCheckpoints",
        "read the thread's checkpoints with POST /threads/{thread_id}/history",
    ),
    (
        "state.fork",
        "fork with a run that names the checkpoint (POST /threads/{thread_id}/runs, checkpoint_id) or with POST /threads/{thread_id}/state",
    ),
];

/// The channels of the specification.
const CHANNELS: [&str; 9] = [
    "values",
    "updates",
    "messages",
    "tools",
    "lifecycle",
    "input",
    "checkpoints",
    "tasks",
    "custom",
];

/// How often an event stream looks for the thread's next run.
const POLL: Duration = Duration::from_millis(200);

fn success(id: &Value, result: Value) -> Response {
    Json(json!({
        "type": "success",
        "id": id,
        "result": result,
        "meta": {"applied_through_seq": 0},
    }))
    .into_response()
}

fn error(status: StatusCode, id: &Value, code: &str, message: impl Into<String>) -> Response {
    let message: String = message.into();
    (
        status,
        Json(json!({"type": "error", "id": id, "error": code, "message": message})),
    )
        .into_response()
}

/// A refused request's protocol error code.
fn code_of(e: &ApiError) -> &'static str {
    match e {
        ApiError::Unauthorized(_) | ApiError::Forbidden(_) => "permission_denied",
        ApiError::Busy(_) | ApiError::Internal(_) => "unknown_error",
        _ => "invalid_argument",
    }
}

/// `POST /threads/{thread_id}/commands`.
pub async fn command(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Response {
    let id = body.get("id").cloned().unwrap_or(Value::Null);
    let (Some(_), Some(method)) = (id.as_u64(), body.get("method").and_then(Value::as_str)) else {
        return error(
            StatusCode::BAD_REQUEST,
            &id,
            "invalid_argument",
            "a protocol command needs id, a whole number from 0, and method, a string",
        );
    };
    if let Err(e) = check_thread_id(&thread_id) {
        return error(StatusCode::OK, &id, "invalid_argument", e);
    }
    let params = match body.get("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p.clone(),
        Some(_) => {
            return error(
                StatusCode::OK,
                &id,
                "invalid_argument",
                "params must be an object",
            );
        }
    };
    match method {
        "run.start" => run_start(&app, &owner, &thread_id, &id, params).await,
        "input.respond" => input_respond(&app, &owner, &thread_id, &id, params).await,
        other => match NOT_SUPPORTED.iter().find(|(m, _)| *m == other) {
            Some((_, why)) => error(
                StatusCode::OK,
                &id,
                "not_supported",
                format!("{other} is not supported by this server: {why}"),
            ),
            None => error(
                StatusCode::OK,
                &id,
                "unknown_command",
                format!("Unknown protocol command: {other}"),
            ),
        },
    }
}

/// Starts a run through `POST /threads/{thread_id}/runs` (the same checks and
/// records); answers its `run_id`.
async fn start_run(
    app: &AppState,
    owner: &Owner,
    thread_id: &str,
    body: Value,
) -> Result<String, ApiError> {
    let body: RunBody = serde_json::from_value(body)
        .map_err(|e| ApiError::Invalid(format!("params are not valid: {e}")))?;
    let response = run_routes::create(
        State(app.clone()),
        Extension(owner.clone()),
        Ids(thread_id.to_owned()),
        JsonBody(body),
    )
    .await?;
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .map_err(|e| ApiError::Internal(format!("reading the new run: {e}")))?;
    let run: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::Internal(format!("reading the new run: {e}")))?;
    Ok(run["run_id"].as_str().unwrap_or_default().to_owned())
}

/// The id of the interrupt the thread waits on, if any.
async fn pending_interrupt(
    app: &AppState,
    owner: &Owner,
    thread_id: &str,
) -> Result<Option<String>, ApiError> {
    let Some(thread) = find_owned(app, owner, thread_id).await? else {
        return Ok(None);
    };
    if app.manager.is_busy(&thread.thread_id).await? {
        return Ok(None);
    }
    let values = current_values(app, &thread.thread_id).await?;
    Ok(values
        .get(keel_core::state::INTERRUPT_KEY)
        .and_then(|list| list.get(0))
        .and_then(|i| i.get("id"))
        .and_then(Value::as_str)
        .map(str::to_owned))
}

fn copy(from: &Map<String, Value>, to: &mut Map<String, Value>, keys: &[&str]) {
    for key in keys {
        if let Some(v) = from.get(*key).filter(|v| !v.is_null()) {
            to.insert((*key).to_owned(), v.clone());
        }
    }
}

async fn run_start(
    app: &AppState,
    owner: &Owner,
    thread_id: &str,
    id: &Value,
    params: Map<String, Value>,
) -> Response {
    let Some(assistant) = params
        .get("assistant_id")
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
    else {
        return error(
            StatusCode::OK,
            id,
            "invalid_argument",
            "run.start requires an assistant_id.",
        );
    };
    let mut body = Map::new();
    body.insert("assistant_id".into(), json!(assistant));
    body.insert("if_not_exists".into(), json!("create"));
    body.insert("stream_mode".into(), json!(RUN_MODES));
    copy(
        &params,
        &mut body,
        &["config", "metadata", "multitask_strategy"],
    );
    // On a thread paused for a review, the input is the answer (the specification's
    // "run interrupted → resumes with the input as the resume value").
    let pending = match pending_interrupt(app, owner, thread_id).await {
        Ok(p) => p,
        Err(e) => return error(StatusCode::OK, id, code_of(&e), e.to_string()),
    };
    match (pending, params.get("input").filter(|v| !v.is_null())) {
        (Some(_), Some(input)) => {
            body.insert("command".into(), json!({ "resume": input }));
        }
        (_, input) => {
            if let Some(input) = input {
                body.insert("input".into(), input.clone());
            }
        }
    }
    match start_run(app, owner, thread_id, Value::Object(body)).await {
        Ok(run_id) => success(id, json!({ "run_id": run_id })),
        Err(e) => error(StatusCode::OK, id, code_of(&e), e.to_string()),
    }
}

/// The one response of an `input.respond` (its `responses` list, or the params
/// themselves) and its interrupt id, checked: no `update`/`goto`, one entry, an
/// interrupt id, the root namespace. `Err` is
/// the answer refusing it.
// The refusal is the response sent, built at most once per request: boxing buys nothing.
#[allow(clippy::result_large_err)]
fn response_entry(
    id: &Value,
    params: &Map<String, Value>,
) -> Result<(Map<String, Value>, String), Response> {
    let invalid = |m: String| error(StatusCode::OK, id, "invalid_argument", m);
    for key in ["update", "goto"] {
        if params.get(key).is_some_and(|v| !v.is_null()) {
            return Err(error(
                StatusCode::OK,
                id,
                "not_supported",
                format!(
                    "input.respond: {key} is not supported; a Keel agent's state changes through its runs"
                ),
            ));
        }
    }
    let mut entries: Vec<Map<String, Value>> = match params.get("responses") {
        Some(Value::Array(list)) => {
            let mut entries = Vec::new();
            for entry in list {
                match entry {
                    Value::Object(e) => entries.push(e.clone()),
                    _ => {
                        return Err(invalid(
                            "input.respond responses entries must be objects.".into(),
                        ));
                    }
                }
            }
            entries
        }
        Some(_) => return Err(invalid("input.respond responses must be a list.".into())),
        None => vec![params.clone()],
    };
    if entries.is_empty() {
        return Err(invalid(
            "input.respond requires at least one response.".into(),
        ));
    }
    if entries.len() > 1 {
        return Err(error(
            StatusCode::OK,
            id,
            "no_such_interrupt",
            "a Keel thread waits on one interrupt at a time; send one response",
        ));
    }
    let entry = entries.swap_remove(0);
    let Some(interrupt_id) = entry.get("interrupt_id").and_then(Value::as_str) else {
        return Err(invalid("input.respond requires an interrupt_id.".into()));
    };
    let interrupt_id = interrupt_id.to_owned();
    match entry.get("namespace") {
        None | Some(Value::Null) => {}
        Some(Value::Array(ns)) if ns.is_empty() => {}
        Some(Value::Array(ns)) if ns.iter().all(Value::is_string) => {
            return Err(error(
                StatusCode::OK,
                id,
                "no_such_interrupt",
                "Interrupt namespace does not match the pending interrupt: a Keel agent's interrupts are in the root namespace []",
            ));
        }
        Some(_) => {
            return Err(invalid(
                "input.respond requires namespace to be a list of strings.".into(),
            ));
        }
    }
    Ok((entry, interrupt_id))
}

async fn input_respond(
    app: &AppState,
    owner: &Owner,
    thread_id: &str,
    id: &Value,
    params: Map<String, Value>,
) -> Response {
    let (entry, interrupt_id) = match response_entry(id, &params) {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let interrupt_id = interrupt_id.as_str();
    let pending = match find_owned(app, owner, thread_id).await {
        Ok(Some(_)) => match pending_interrupt(app, owner, thread_id).await {
            Ok(p) => p,
            Err(e) => return error(StatusCode::OK, id, code_of(&e), e.to_string()),
        },
        Ok(None) => {
            return error(
                StatusCode::OK,
                id,
                "no_such_run",
                "No interrupted run is bound to this thread.",
            );
        }
        Err(e) => return error(StatusCode::OK, id, code_of(&e), e.to_string()),
    };
    if pending.as_deref() != Some(interrupt_id) {
        return error(
            StatusCode::OK,
            id,
            "no_such_interrupt",
            format!("Unknown or already-consumed interrupt: {interrupt_id}"),
        );
    }
    let response = entry.get("response").cloned().unwrap_or(Value::Null);
    let mut body = Map::new();
    body.insert(
        "assistant_id".into(),
        json!(app.manager.assistant().assistant_id),
    );
    body.insert("stream_mode".into(), json!(RUN_MODES));
    body.insert(
        "command".into(),
        json!({ "resume": { interrupt_id: response } }),
    );
    copy(&params, &mut body, &["config", "metadata"]);
    match start_run(app, owner, thread_id, Value::Object(body)).await {
        Ok(_) => success(id, json!({})),
        Err(e) => error(StatusCode::OK, id, code_of(&e), e.to_string()),
    }
}

/// What an event stream passes on.
#[derive(Clone, Debug)]
struct Filter {
    channels: HashSet<String>,
    namespaces: Option<Vec<Vec<String>>>,
    depth: Option<usize>,
}

impl Filter {
    fn keeps(&self, method: &str, data: &Value, namespace: &[String]) -> bool {
        let channel = match method {
            "input.requested" | "input.answered" => "input",
            other => other,
        };
        let by_channel = self.channels.contains(channel)
            || (channel == "custom"
                && data
                    .get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| self.channels.contains(&format!("custom:{n}"))));
        let by_namespace = self.namespaces.as_ref().is_none_or(|prefixes| {
            prefixes.iter().any(|p| {
                namespace.starts_with(p)
                    && self.depth.is_none_or(|d| namespace.len() - p.len() <= d)
            })
        });
        by_channel && by_namespace
    }
}

fn bad(message: String) -> ApiError {
    ApiError::BadRequest(message)
}

fn parse_filter(body: &Map<String, Value>) -> Result<(Filter, Option<u64>), ApiError> {
    let Some(Value::Array(list)) = body
        .get("channels")
        .filter(|c| c.as_array().is_some_and(|a| !a.is_empty()))
    else {
        return Err(bad(
            "channels is required and must be a non-empty array".into()
        ));
    };
    let mut channels = HashSet::new();
    for c in list {
        match c.as_str() {
            Some(name)
                if CHANNELS.contains(&name)
                    || name.strip_prefix("custom:").is_some_and(|n| !n.is_empty()) =>
            {
                channels.insert(name.to_owned());
            }
            _ => {
                return Err(bad(format!(
                    "channels contains the unsupported entry {c}; allowed: {}, or any custom:<name>",
                    CHANNELS.join(", ")
                )));
            }
        }
    }
    let namespaces = match body.get("namespaces") {
        None | Some(Value::Null) => None,
        Some(Value::Array(list)) => {
            let mut out = Vec::new();
            for ns in list {
                let labels: Option<Vec<String>> = ns
                    .as_array()
                    .and_then(|l| l.iter().map(|s| s.as_str().map(str::to_owned)).collect());
                out.push(labels.ok_or_else(|| {
                    bad(format!("namespaces entry {ns} is not a list of strings"))
                })?);
            }
            Some(out)
        }
        Some(other) => {
            return Err(bad(format!(
                "namespaces must be a list of lists of strings, not {other}"
            )));
        }
    };
    let whole = |key: &str| -> Result<Option<u64>, ApiError> {
        match body.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| bad(format!("{key} must be a whole number from 0, not {v}"))),
        }
    };
    let depth = whole("depth")?.map(|d| usize::try_from(d).unwrap_or(usize::MAX));
    let since = whole("since")?;
    Ok((
        Filter {
            channels,
            namespaces,
            depth,
        },
        since,
    ))
}

/// `POST /threads/{thread_id}/stream/events`.
pub async fn stream_events(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
    JsonBody(body): JsonBody<Map<String, Value>>,
) -> Result<Response, ApiError> {
    check_thread_id(&thread_id).map_err(ApiError::Invalid)?;
    let (filter, since) = parse_filter(&body)?;
    let follow = Follow {
        app,
        owner,
        thread_id,
        filter,
        since,
        seq: 0,
        current: None,
        cursor: 0,
        mapper: Mapper::default(),
        last_run: None,
        pending: VecDeque::new(),
    };
    Ok(Sse::new(events(follow))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// One event stream's position.
struct Follow {
    app: AppState,
    owner: Owner,
    thread_id: String,
    filter: Filter,
    since: Option<u64>,
    seq: u64,
    current: Option<Arc<LiveRun>>,
    cursor: u64,
    mapper: Mapper,
    /// The last run followed: (created_at_ms, run_id).
    last_run: Option<(i64, String)>,
    pending: VecDeque<Event>,
}

impl Follow {
    fn emit(&mut self, run_id: &str, method: &str, data: Value, node: Option<&str>) {
        self.seq += 1;
        if self.since.is_some_and(|s| self.seq <= s) || !self.filter.keeps(method, &data, &[]) {
            return;
        }
        let mut params = json!({"namespace": [], "timestamp": now_ms(), "data": data});
        if let (Some(node), Some(p)) = (node, params.as_object_mut()) {
            p.insert("node".into(), json!(node));
        }
        let envelope = json!({
            "type": "event",
            "event_id": format!("{run_id}:{}", self.seq),
            "seq": self.seq,
            "method": method,
            "params": params,
        });
        self.pending.push_back(
            Event::default()
                .event(method)
                .id(self.seq.to_string())
                .data(envelope.to_string()),
        );
    }

    /// The run to follow next: the thread's newest at first, then the oldest newer than
    /// the last one.
    async fn next_run(&self) -> Result<Option<RunRecord>, ApiError> {
        let Some(thread) = find_owned(&self.app, &self.owner, &self.thread_id).await? else {
            return Ok(None);
        };
        let runs = self
            .app
            .registry
            .runs(&thread.thread_id, None, 0, 100)
            .await
            .map_err(|e| ApiError::storage("listing the thread's runs", e))?;
        Ok(match &self.last_run {
            None => runs.into_iter().next(),
            Some(last) => runs
                .into_iter()
                .rev()
                .find(|r| (r.created_at_ms, &r.run_id) > (last.0, &last.1)),
        })
    }
}

fn events(follow: Follow) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    futures::stream::unfold(follow, |mut f| async move {
        loop {
            if let Some(event) = f.pending.pop_front() {
                return Some((Ok(event), f));
            }
            if let Some(live) = f.current.clone() {
                match live.log.next(f.cursor, 64).await {
                    Next::Events(list) => {
                        for event in list {
                            f.cursor = event.id + 1;
                            let mut out = Vec::new();
                            f.mapper
                                .map(&event, &f.app.manager.assistant().graph_id, &mut out);
                            for (method, data, node) in out {
                                f.emit(&live.run_id, method, data, node);
                            }
                        }
                    }
                    Next::Lost { first_kept } => f.cursor = first_kept,
                    Next::Closed => f.current = None,
                }
                continue;
            }
            match f.next_run().await {
                Ok(Some(record)) => {
                    f.last_run = Some((record.created_at_ms, record.run_id.clone()));
                    if let Some(live) = f.app.manager.find(&record).await {
                        f.current = Some(live);
                        f.cursor = 0;
                        f.mapper = Mapper::default();
                    }
                }
                Ok(None) => tokio::time::sleep(POLL).await,
                Err(e) => {
                    tracing::warn!("event stream of thread {}: {e}", f.thread_id);
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    })
}

/// A content block of the message being streamed.
#[derive(Debug)]
enum Block {
    Text(String),
    Tool {
        index: u64,
        id: Value,
        name: Value,
        args: String,
    },
}

impl Block {
    fn finished(&self) -> Value {
        match self {
            Block::Text(text) => json!({"type": "text", "text": text}),
            Block::Tool { id, name, args, .. } => {
                let text = if args.trim().is_empty() { "{}" } else { args };
                match serde_json::from_str::<Value>(text) {
                    Ok(parsed) => {
                        json!({"type": "tool_call", "id": id, "name": name, "args": parsed})
                    }
                    Err(e) => {
                        json!({"type": "invalid_tool_call", "id": id, "name": name, "args": args, "error": e.to_string()})
                    }
                }
            }
        }
    }
}

#[derive(Debug, Default)]
struct OpenMessage {
    id: String,
    blocks: Vec<Block>,
    usage: Value,
}

/// One mapped event: method, data, graph node.
type Mapped = (&'static str, Value, Option<&'static str>);

/// Maps one run's logged events (the `runs/stream` events of [`RUN_MODES`]) onto the
/// protocol's channels.
#[derive(Debug, Default)]
struct Mapper {
    open: Option<OpenMessage>,
    interrupts: HashSet<String>,
    terminal: bool,
    /// Tool calls the model asked for, by id: name and arguments (a resumed run runs
    /// the calls of a message an earlier run wrote).
    calls: HashMap<String, (Value, Value)>,
    /// Tool messages waiting for the tools node's update, which the run logs after them:
    /// LangGraph's server sends a call's tool events before its message.
    held: Vec<Value>,
}

impl Mapper {
    fn map(&mut self, event: &SseEvent, graph: &str, out: &mut Vec<Mapped>) {
        let data: Value = serde_json::from_str(event.data()).unwrap_or(Value::Null);
        match &*event.event {
            "metadata" => out.push((
                "lifecycle",
                json!({"event": "running", "graph_name": graph}),
                None,
            )),
            "values" => {
                let mut values = data;
                self.remember_calls(&values);
                if let Some(list) = values
                    .as_object_mut()
                    .and_then(|o| o.remove(keel_core::state::INTERRUPT_KEY))
                {
                    self.input_requested(&list, out);
                }
                out.push(("values", values, None));
            }
            "updates" => self.updates(data, out),
            "messages" => {
                let chunk = &data[0];
                match chunk["type"].as_str() {
                    Some("AIMessageChunk") => self.chunk(chunk, out),
                    Some("ai") => {
                        self.finish_message(out);
                        whole_message(chunk, "ai", out);
                    }
                    // Tool results, whole, as LangGraph's server sends them (role "tool").
                    Some("tool") => {
                        self.finish_message(out);
                        self.held.push(chunk.clone());
                    }
                    _ => {}
                }
            }
            "custom" => {
                // Keel's middleware names its payloads by `type` (`context_compacting`).
                let mut custom = json!({ "payload": data });
                if let Some(name) = data["type"].as_str() {
                    custom["name"] = json!(name);
                }
                out.push(("custom", custom, None));
            }
            "error" => {
                self.finish_message(out);
                self.terminal = true;
                let message = data["message"].as_str().unwrap_or("the run failed");
                out.push((
                    "lifecycle",
                    json!({"event": "failed", "graph_name": graph, "error": message}),
                    None,
                ));
            }
            "end" => self.end(&data, graph, out),
            _ => {}
        }
    }

    /// A run's `updates` event: each node's delta (a model step closes the message it
    /// streamed; the tools node releases the tool messages held for it), and a pause
    /// as `input.requested`.
    fn updates(&mut self, data: Value, out: &mut Vec<Mapped>) {
        let Value::Object(nodes) = data else { return };
        for (node, delta) in nodes {
            if node == keel_core::state::INTERRUPT_KEY {
                self.input_requested(&delta, out);
                continue;
            }
            if node == "model" {
                self.finish_message(out);
            }
            self.remember_calls(&delta);
            if node == "tools" {
                self.tools_of(&delta, out);
                for message in std::mem::take(&mut self.held) {
                    whole_message(&message, "tool", out);
                }
            }
            out.push(("updates", json!({"node": node, "values": delta}), None));
        }
    }

    /// A run's `end`: what is still open or held, then the lifecycle's last phase
    /// (unless an error already ended it).
    fn end(&mut self, data: &Value, graph: &str, out: &mut Vec<Mapped>) {
        self.finish_message(out);
        for message in std::mem::take(&mut self.held) {
            whole_message(&message, "tool", out);
        }
        if self.terminal {
            return;
        }
        self.terminal = true;
        let phase = match data["status"].as_str() {
            Some("error") => "failed",
            Some("interrupted") => "interrupted",
            _ if !self.interrupts.is_empty() => "interrupted",
            _ => "completed",
        };
        out.push((
            "lifecycle",
            json!({"event": phase, "graph_name": graph}),
            None,
        ));
    }

    /// Notes the tool calls of the AI messages in a state or an update.
    fn remember_calls(&mut self, values: &Value) {
        for message in values["messages"].as_array().into_iter().flatten() {
            for call in message["tool_calls"].as_array().into_iter().flatten() {
                if let Some(id) = call["id"].as_str() {
                    self.calls
                        .insert(id.to_owned(), (call["name"].clone(), call["args"].clone()));
                }
            }
        }
    }

    /// The `tools` channel's events for the tools node's update: each call's start and
    /// its end (Keel reports a tool call once it has run, so both come together), its
    /// output the whole tool message, as LangGraph's server sends it.
    fn tools_of(&self, delta: &Value, out: &mut Vec<Mapped>) {
        for message in delta["messages"].as_array().into_iter().flatten() {
            if message["type"].as_str() != Some("tool") {
                continue;
            }
            let id = &message["tool_call_id"];
            let (name, input) = id
                .as_str()
                .and_then(|i| self.calls.get(i))
                .cloned()
                .unwrap_or((message["name"].clone(), Value::Null));
            out.push((
                "tools",
                json!({"event": "tool-started", "tool_call_id": id, "tool_name": name, "input": input}),
                Some("tools"),
            ));
            if message["status"].as_str() == Some("error") {
                out.push((
                    "tools",
                    json!({"event": "tool-error", "tool_call_id": id, "message": text_of(&message["content"])}),
                    Some("tools"),
                ));
            } else {
                out.push((
                    "tools",
                    json!({"event": "tool-finished", "tool_call_id": id, "output": message}),
                    Some("tools"),
                ));
            }
        }
    }

    fn input_requested(&mut self, list: &Value, out: &mut Vec<Mapped>) {
        for entry in list.as_array().into_iter().flatten() {
            let Some(id) = entry["id"].as_str() else {
                continue;
            };
            if self.interrupts.insert(id.to_owned()) {
                // `payload` as the specification names it; `value` as langgraph-sdk
                // 0.4's `thread.interrupts` reads it.
                out.push((
                    "input.requested",
                    json!({"interrupt_id": id, "payload": entry["value"], "value": entry["value"]}),
                    None,
                ));
            }
        }
    }

    fn finish_block(&mut self, out: &mut Vec<Mapped>) {
        if let Some(open) = &self.open
            && let Some(block) = open.blocks.last()
        {
            out.push((
                "messages",
                json!({"event": "content-block-finish", "index": open.blocks.len() - 1, "content": block.finished()}),
                None,
            ));
        }
    }

    fn finish_message(&mut self, out: &mut Vec<Mapped>) {
        self.finish_block(out);
        if let Some(open) = self.open.take() {
            let mut data = json!({"event": "message-finish"});
            if !open.usage.is_null() {
                data["usage"] = open.usage;
            }
            out.push(("messages", data, None));
        }
    }

    fn start_block(&mut self, block: Block, out: &mut Vec<Mapped>) {
        self.finish_block(out);
        let content = match &block {
            Block::Text(_) => json!({"type": "text", "text": ""}),
            Block::Tool { id, name, .. } => {
                json!({"type": "tool_call_chunk", "id": id, "name": name, "args": ""})
            }
        };
        if let Some(open) = &mut self.open {
            open.blocks.push(block);
            out.push((
                "messages",
                json!({"event": "content-block-start", "index": open.blocks.len() - 1, "content": content}),
                None,
            ));
        }
    }

    fn chunk(&mut self, chunk: &Value, out: &mut Vec<Mapped>) {
        let id = chunk["id"].as_str().unwrap_or_default();
        if self.open.as_ref().is_none_or(|o| o.id != id) {
            self.finish_message(out);
            self.open = Some(OpenMessage {
                id: id.to_owned(),
                ..OpenMessage::default()
            });
            out.push((
                "messages",
                json!({"event": "message-start", "role": "ai", "id": id}),
                None,
            ));
        }
        if let Some(text) = chunk["content"].as_str().filter(|t| !t.is_empty()) {
            let in_text = self
                .open
                .as_ref()
                .is_some_and(|o| matches!(o.blocks.last(), Some(Block::Text(_))));
            if !in_text {
                self.start_block(Block::Text(String::new()), out);
            }
            if let Some(open) = &mut self.open
                && let Some(Block::Text(so_far)) = open.blocks.last_mut()
            {
                so_far.push_str(text);
                out.push((
                    "messages",
                    json!({"event": "content-block-delta", "index": open.blocks.len() - 1, "delta": {"type": "text-delta", "text": text}}),
                    None,
                ));
            }
        }
        for call in chunk["tool_call_chunks"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap_or(0);
            let same = self.open.as_ref().is_some_and(
                |o| matches!(o.blocks.last(), Some(Block::Tool { index: i, .. }) if *i == index),
            );
            if !same {
                self.start_block(
                    Block::Tool {
                        index,
                        id: call["id"].clone(),
                        name: call["name"].clone(),
                        args: String::new(),
                    },
                    out,
                );
            }
            let args = call["args"].as_str().unwrap_or_default();
            if let Some(open) = &mut self.open
                && let Some(Block::Tool {
                    args: so_far,
                    id,
                    name,
                    ..
                }) = open.blocks.last_mut()
            {
                if id.is_null() {
                    *id = call["id"].clone();
                }
                if name.is_null() {
                    *name = call["name"].clone();
                }
                if !args.is_empty() {
                    so_far.push_str(args);
                    out.push((
                        "messages",
                        json!({"event": "content-block-delta", "index": open.blocks.len() - 1, "delta": {"type": "tool-call-delta", "args": args}}),
                        None,
                    ));
                }
            }
        }
        if !chunk["usage_metadata"].is_null()
            && let Some(open) = &mut self.open
        {
            open.usage = chunk["usage_metadata"].clone();
        }
    }
}

/// The text of a LangChain message's content (a string or a list of blocks).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.as_str().or_else(|| b["text"].as_str()))
            .collect(),
        _ => String::new(),
    }
}

/// A message sent whole (not streamed): the same events, one delta per block.
fn whole_message(message: &Value, role: &str, out: &mut Vec<Mapped>) {
    let mut m = Mapper {
        open: Some(OpenMessage {
            id: message["id"].as_str().unwrap_or_default().to_owned(),
            blocks: Vec::new(),
            usage: message["usage_metadata"].clone(),
        }),
        ..Mapper::default()
    };
    let mut start = json!({"event": "message-start", "role": role, "id": message["id"]});
    if role == "tool" {
        start["tool_call_id"] = message["tool_call_id"].clone();
    }
    out.push(("messages", start, None));
    let mut chunk = json!({"id": message["id"], "content": text_of(&message["content"]), "tool_call_chunks": []});
    let calls: Vec<Value> = message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| json!({"index": i, "id": c["id"], "name": c["name"], "args": c["args"].to_string()}))
        .collect();
    chunk["tool_call_chunks"] = Value::Array(calls);
    m.chunk(&chunk, out);
    m.finish_message(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: Value) -> SseEvent {
        SseEvent::new(0, event, &data.to_string(), None)
    }

    fn names(out: &[Mapped]) -> Vec<String> {
        out.iter()
            .map(|(m, d, _)| match d["event"].as_str() {
                Some(e) => format!("{m}:{e}"),
                None => (*m).to_owned(),
            })
            .collect()
    }

    #[test]
    fn streamed_text_and_tool_calls_become_content_blocks() {
        let mut m = Mapper::default();
        let mut out = Vec::new();
        let chunk = |content: &str, calls: Value| {
            ev(
                "messages",
                json!([{"type": "AIMessageChunk", "id": "c1", "content": content, "tool_call_chunks": calls, "usage_metadata": null}, {}]),
            )
        };
        m.map(&ev("metadata", json!({"run_id": "r"})), "agent", &mut out);
        m.map(&chunk("Hel", json!([])), "agent", &mut out);
        m.map(&chunk("lo", json!([])), "agent", &mut out);
        m.map(
            &chunk(
                "",
                json!([{"index": 0, "id": "t1", "name": "echo", "args": "{\"q\":"}]),
            ),
            "agent",
            &mut out,
        );
        m.map(
            &chunk(
                "",
                json!([{"index": 0, "id": null, "name": null, "args": "1}"}]),
            ),
            "agent",
            &mut out,
        );
        m.map(
            &ev("updates", json!({"model": {"messages": [{"type": "ai", "content": "Hello", "tool_calls": [{"id": "t1", "name": "echo", "args": {"q": 1}}]}]}})),
            "agent",
            &mut out,
        );
        m.map(
            &ev("updates", json!({"tools": {"messages": [{"type": "tool", "tool_call_id": "t1", "content": "1", "status": "success"}]}})),
            "agent",
            &mut out,
        );
        m.map(&ev("end", json!({"status": "success"})), "agent", &mut out);
        assert_eq!(
            names(&out),
            [
                "lifecycle:running",
                "messages:message-start",
                "messages:content-block-start",
                "messages:content-block-delta",
                "messages:content-block-delta",
                "messages:content-block-finish",
                "messages:content-block-start",
                "messages:content-block-delta",
                "messages:content-block-delta",
                "messages:content-block-finish",
                "messages:message-finish",
                "updates",
                "tools:tool-started",
                "tools:tool-finished",
                "updates",
                "lifecycle:completed",
            ]
        );
        assert_eq!(
            out[5].1["content"],
            json!({"type": "text", "text": "Hello"})
        );
        assert_eq!(
            out[9].1["content"],
            json!({"type": "tool_call", "id": "t1", "name": "echo", "args": {"q": 1}})
        );
        assert_eq!(out[11].1["node"], "model");
        // A call starts when the tools node reports it, named as the model asked.
        assert_eq!(
            out[12].1,
            json!({"event": "tool-started", "tool_call_id": "t1", "tool_name": "echo", "input": {"q": 1}})
        );
    }

    #[test]
    fn an_interrupt_is_requested_once_and_ends_the_run_interrupted() {
        let mut m = Mapper::default();
        let mut out = Vec::new();
        let list = json!([{"id": "i1", "value": {"action_requests": []}}]);
        m.map(
            &ev("updates", json!({ "__interrupt__": list.clone() })),
            "agent",
            &mut out,
        );
        m.map(
            &ev("values", json!({"messages": [], "__interrupt__": list})),
            "agent",
            &mut out,
        );
        m.map(&ev("end", json!({"status": "success"})), "agent", &mut out);
        assert_eq!(
            names(&out),
            ["input.requested", "values", "lifecycle:interrupted"]
        );
        assert_eq!(out[0].1["interrupt_id"], "i1");
        assert_eq!(out[1].1, json!({"messages": []}));
    }

    #[test]
    fn filters_by_channel_and_namespace() {
        let f = Filter {
            channels: ["input".to_owned(), "custom:progress".to_owned()].into(),
            namespaces: Some(vec![vec![]]),
            depth: Some(0),
        };
        assert!(f.keeps("input.requested", &json!({}), &[]));
        assert!(!f.keeps("values", &json!({}), &[]));
        assert!(f.keeps("custom", &json!({"name": "progress"}), &[]));
        assert!(!f.keeps("custom", &json!({"name": "other"}), &[]));
        assert!(!f.keeps("input.requested", &json!({}), &["sub".to_owned()]));
    }
}
