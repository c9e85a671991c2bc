//! Runs: create (in the background, streamed over SSE, or waited for), get, list,
//! cancel, join, delete, and reconnecting to a run's stream with `Last-Event-ID`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::Stream;
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::auth::{Owner, public_thread_id};
use crate::error::ApiError;
use crate::extract::{Ids, JsonBody, QueryPairs};
use crate::registry::{RunRecord, RunStatus, Strategy, ThreadRecord};
use crate::routes::assistants;
use crate::routes::threads::{
    checkpoint_id, current_values, delete_thread, find_owned, new_thread, owned,
    parse_checkpoint_id,
};
use crate::runs::{CancelAction, LiveRun, ModeSet, NewRun, Next, RunCommand, SseEvent, WireMode};
use crate::state::AppState;
use crate::wire::{kind, messages_from_input};
use keel_core::interrupt::Pause;
use keel_core::message::Message;
use keel_core::state::AgentState;

/// The body of the run-creating endpoints (the SDKs' `runs.create/stream/wait`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RunBody {
    assistant_id: Option<String>,
    input: Option<Value>,
    command: Option<Value>,
    stream_mode: Option<Value>,
    metadata: Option<Value>,
    config: Option<Value>,
    context: Option<Value>,
    multitask_strategy: Option<String>,
    if_not_exists: Option<String>,
    on_disconnect: Option<String>,
    on_completion: Option<String>,
    interrupt_before: Option<Value>,
    interrupt_after: Option<Value>,
    webhook: Option<Value>,
    checkpoint: Option<Value>,
    checkpoint_id: Option<Value>,
    after_seconds: Option<Value>,
}

/// A validated run request.
struct Parsed {
    run: NewRun,
    /// The checkpoint the run is asked to start from (`checkpoint` or `checkpoint_id`).
    from_checkpoint: Option<String>,
    cancel_on_disconnect: bool,
    create_thread: bool,
    delete_on_completion: bool,
    /// `command: {goto: "model"}`: the model runs on the thread's state (after the
    /// command's `update` messages, the run's input), with or without new messages.
    goto_model: bool,
}

/// What a run's `command` asks for.
enum Commanded {
    /// Something for the thread's pending review, or messages written without a run.
    Review(RunCommand),
    /// `goto: "model"`: call the model now, after these messages (`command.update`).
    Model(Vec<Message>),
}

/// Where `command.goto` sends the run: LangGraph's node names, one or a list of one.
enum Goto {
    End,
    Model,
}

fn goto_of(goto: &Value) -> Result<Goto, ApiError> {
    let node = match goto {
        Value::String(node) => Some(node.as_str()),
        Value::Array(nodes) if nodes.len() == 1 => nodes[0].as_str(),
        _ => None,
    };
    match node {
        Some("__end__") => Ok(Goto::End),
        Some("model") => Ok(Goto::Model),
        Some("tools") => Err(ApiError::Invalid(
            "command.goto \"tools\" is not supported: it would run the paused tool calls without their review; approve them with command.resume {\"decisions\": [{\"type\": \"approve\"}]}, one per call".into(),
        )),
        _ => Err(ApiError::Invalid(format!(
            "command.goto {goto} is not supported: a Keel agent's steps are model and tools; goto takes \"model\" (call the model on the thread's state) or \"__end__\" (end the pending review without running anything)"
        ))),
    }
}

fn present(v: &Option<Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Number(n)) => n.as_f64().is_some_and(|n| n != 0.0),
        Some(_) => true,
    }
}

/// True when `input` carries something to add: not absent, `null`, `{}` or
/// `{"messages": []}` (what clients send beside a `command`).
fn has_input(input: &Option<Value>) -> bool {
    match input {
        None | Some(Value::Null) => false,
        Some(Value::Object(fields)) => fields.iter().any(|(k, v)| {
            k != "messages" || !(v.is_null() || v.as_array().is_some_and(Vec::is_empty))
        }),
        Some(_) => true,
    }
}

/// What a `command` asks: of the thread's pending review, `{resume: ...}` (decisions:
/// LangChain's `{"decisions": [...]}`, a bare list, or either keyed by the interrupt's
/// id, LangGraph's form for several interrupts) or `{goto: "__end__"}` (end the review
/// without running anything); `{update: {messages}}` writes messages; `{goto: "model"}`
/// (with or without an update) calls the model. Whether it fits the thread's pending
/// interrupt is checked once the thread is known.
fn command_of(
    app: &AppState,
    command: &Value,
    input: &Option<Value>,
    stateless: bool,
) -> Result<Commanded, ApiError> {
    let Value::Object(fields) = command else {
        return Err(ApiError::Invalid(format!(
            "command must be an object like {{\"resume\": ...}}, not {}",
            kind(command)
        )));
    };
    if let Some(key) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "resume" | "goto" | "update"))
    {
        return Err(ApiError::Invalid(format!(
            "command.{key} is not supported; command supports resume, goto (\"model\" or \"__end__\") and update"
        )));
    }
    let resume = fields.get("resume").filter(|v| !v.is_null());
    let goto = fields.get("goto").filter(|v| !v.is_null());
    let goto_model = match goto {
        Some(goto) => matches!(goto_of(goto)?, Goto::Model),
        None => false,
    };
    if goto_model {
        if resume.is_some() {
            return Err(ApiError::Invalid(
                "send command.resume or command.goto, not both".into(),
            ));
        }
        no_input(input, "command.update or in a run of their own")?;
        if stateless {
            return Err(ApiError::Invalid(
                "command.goto \"model\" needs a thread: send input for a stateless run".into(),
            ));
        }
    }
    if let Some(messages) = update_of(fields)? {
        return update_command(messages, resume.is_some(), goto_model, input, stateless);
    }
    if goto_model {
        return Ok(Commanded::Model(Vec::new()));
    }
    review_command(app, resume, goto, input, stateless)
}

/// Messages would be lost: LangGraph ignores input beside a command, and clients send
/// `{}` there, so empty input passes and anything else is refused (`what` says where
/// the messages belong).
fn no_input(input: &Option<Value>, what: &str) -> Result<(), ApiError> {
    if has_input(input) {
        return Err(ApiError::Invalid(format!(
            "input beside command: a command run takes no input (LangGraph ignores it); send the messages in {what}"
        )));
    }
    Ok(())
}

/// The messages of `command.update` (`{messages: [...]}`), or `None` without one.
fn update_of(fields: &Map<String, Value>) -> Result<Option<Vec<Message>>, ApiError> {
    match fields.get("update") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(update)) => {
            if let Some(key) = update.keys().find(|k| k.as_str() != "messages") {
                return Err(ApiError::Invalid(format!(
                    "command.update.{key}: this agent's state takes only messages"
                )));
            }
            let messages = match update.get("messages") {
                None | Some(Value::Null) => Vec::new(),
                Some(value) => messages_from_input(value, "command.update.messages")
                    .map_err(ApiError::Invalid)?,
            };
            Ok(Some(messages))
        }
        Some(other) => Err(ApiError::Invalid(format!(
            "command.update must be an object like {{\"messages\": [...]}}, not {}",
            kind(other)
        ))),
    }
}

/// `{update: {messages: [...]}}`, alone or with `goto: "__end__"`: messages written
/// without running anything; with `goto: "model"`, LangGraph's
/// `Command(update=..., goto="model")`: the messages, then a model call, which is a run
/// with the messages as its input.
fn update_command(
    messages: Vec<Message>,
    resume: bool,
    goto_model: bool,
    input: &Option<Value>,
    stateless: bool,
) -> Result<Commanded, ApiError> {
    if resume {
        return Err(ApiError::Invalid(
            "send command.update or command.resume, not both".into(),
        ));
    }
    if goto_model {
        return Ok(Commanded::Model(messages));
    }
    no_input(input, "command.update or in a run of their own")?;
    if messages.is_empty() {
        return Err(ApiError::Invalid(
            "command.update.messages is empty: there is nothing to update".into(),
        ));
    }
    if stateless {
        return Err(ApiError::Invalid(
            "command.update needs a thread: send the messages as input for a stateless run".into(),
        ));
    }
    Ok(Commanded::Review(RunCommand::Update(messages)))
}

/// `{resume: ...}` or `{goto: "__end__"}` (LangGraph's `Command(goto=END)`): the answer
/// to the thread's pending interrupt, or the end of its review.
fn review_command(
    app: &AppState,
    resume: Option<&Value>,
    goto: Option<&Value>,
    input: &Option<Value>,
    stateless: bool,
) -> Result<Commanded, ApiError> {
    let answer = match (resume, goto) {
        (Some(_), Some(_)) => {
            return Err(ApiError::Invalid(
                "send command.resume or command.goto, not both".into(),
            ));
        }
        (None, None) => {
            return Err(ApiError::Invalid(
                "command needs resume (the answer to the thread's pending interrupt) or goto \"__end__\"".into(),
            ));
        }
        (None, Some(_)) => None,
        (Some(value), None) => Some(value),
    };
    no_input(input, "a run of their own")?;
    let what = if answer.is_some() {
        "command.resume"
    } else {
        "command.goto"
    };
    if stateless {
        return Err(ApiError::Invalid(format!(
            "{what} needs a thread: a stateless run has no interrupt to answer"
        )));
    }
    if !has_review_middleware(app) {
        return Err(ApiError::BadRequest(format!(
            "{what}: this agent has no human_in_the_loop middleware (none of its middleware pauses runs), so no thread can be waiting for a decision"
        )));
    }
    // What the answer must look like is the pausing middleware's to say, once the
    // thread's pause is known (human in the loop: `{"decisions": [...]}`, or that keyed
    // by the interrupt's id).
    Ok(Commanded::Review(match answer {
        Some(value) => RunCommand::Resume(value.clone()),
        None => RunCommand::Resolve,
    }))
}

/// The checkpoint id a run names to start from: `checkpoint_id`, or the `checkpoint`
/// object's (LangGraph's `{checkpoint_id, checkpoint_ns, checkpoint_map}`, what
/// agent-chat-ui's `useStream` sends with every message). `None`: the thread's head.
pub(crate) fn checkpoint_of(
    checkpoint: &Option<Value>,
    checkpoint_id: &Option<Value>,
) -> Result<Option<String>, ApiError> {
    let id_of = |field: &str, v: &Value| match v {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        other => Err(ApiError::Invalid(format!(
            "{field} must be a checkpoint id string, not {}",
            kind(other)
        ))),
    };
    let from_object = match checkpoint {
        None | Some(Value::Null) => None,
        Some(Value::Object(fields)) => {
            match fields.get("checkpoint_ns") {
                None | Some(Value::Null) => {}
                Some(Value::String(ns)) if ns.is_empty() => {}
                Some(other) => {
                    return Err(ApiError::Invalid(format!(
                        "checkpoint.checkpoint_ns {other} is not supported: this agent has no subgraphs, so its only namespace is \"\""
                    )));
                }
            }
            match fields.get("checkpoint_id") {
                None => None,
                Some(v) => id_of("checkpoint.checkpoint_id", v)?,
            }
        }
        Some(other) => {
            return Err(ApiError::Invalid(format!(
                "checkpoint must be an object like {{\"checkpoint_id\": ...}}, not {}",
                kind(other)
            )));
        }
    };
    let from_field = match checkpoint_id {
        None => None,
        Some(v) => id_of("checkpoint_id", v)?,
    };
    match (from_object, from_field) {
        (Some(a), Some(b)) if a != b => Err(ApiError::Invalid(format!(
            "checkpoint.checkpoint_id {a:?} and checkpoint_id {b:?} name different checkpoints"
        ))),
        (a, b) => Ok(a.or(b)),
    }
}

/// The checkpoint a run starts from: `None` for the thread's head (what LangGraph
/// clients name with every message, the same as naming none), its seq for an earlier
/// checkpoint of the thread (the run forks: a new branch whose parent it is). An id the
/// thread does not hold is a 422 naming it.
pub(crate) async fn fork_point(
    app: &AppState,
    thread_id: &str,
    id: &str,
) -> Result<Option<u64>, ApiError> {
    let wanted = parse_checkpoint_id(id)?;
    let checkpointer = app.manager.agent().checkpointer();
    let head = checkpointer
        .latest(thread_id)
        .await
        .map_err(|e| ApiError::storage("reading the thread", e))?
        .map(|cp| cp.seq);
    if head == Some(wanted) {
        return Ok(None);
    }
    let held = checkpointer
        .checkpoint_at(thread_id, wanted)
        .await
        .map_err(|e| ApiError::storage("reading the thread's history", e))?
        .is_some();
    if held {
        Ok(Some(wanted))
    } else {
        Err(ApiError::Invalid(format!(
            "checkpoint_id {id:?} is not a checkpoint of thread {}; runs start from one of the thread's checkpoints (its head: {})",
            public_thread_id(thread_id),
            head.map_or_else(
                || "none yet".to_owned(),
                |seq| format!("{:?}", checkpoint_id(seq))
            )
        )))
    }
}

/// Refuses an `input.messages` list longer than the server's cap before any message is
/// read, so an oversized input costs a length check.
fn check_input_count(value: &Value, limit: usize) -> Result<(), ApiError> {
    match value {
        Value::Array(items) if items.len() > limit => Err(ApiError::Invalid(format!(
            "input.messages holds {} messages; one input may carry at most {limit} \
             (the server's --max-input-messages)",
            items.len()
        ))),
        _ => Ok(()),
    }
}

fn parse(app: &AppState, mut body: RunBody, stateless: bool) -> Result<Parsed, ApiError> {
    check_assistant(app, body.assistant_id.clone())?;
    refuse_unsupported(&body)?;
    let from_checkpoint = checkpoint_of(&body.checkpoint, &body.checkpoint_id)?;
    if from_checkpoint.is_some() && stateless {
        return Err(ApiError::Invalid(
            "checkpoint: a stateless run has a fresh thread, with no checkpoint to start from"
                .into(),
        ));
    }
    if present(&body.after_seconds) {
        return Err(ApiError::Invalid(
            "after_seconds is not supported by this server".into(),
        ));
    }
    let (resume, goto_model) = match &body.command {
        None | Some(Value::Null) => (None, None),
        Some(command) => match command_of(app, command, &body.input, stateless)? {
            Commanded::Review(command) => (Some(command), None),
            Commanded::Model(messages) => (None, Some(messages)),
        },
    };
    let input = match goto_model.clone() {
        // The model call's messages, the command's update.
        Some(messages) => messages,
        None => input_of(app, &body.input, resume.is_some())?,
    };
    let modes = ModeSet::from_json(body.stream_mode.as_ref()).map_err(ApiError::Invalid)?;
    let metadata = match body.metadata.take() {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(ApiError::Invalid(format!(
                "metadata must be an object, not {}",
                kind(&other)
            )));
        }
    };
    let strategy = match body.multitask_strategy.as_deref() {
        None => Strategy::Enqueue,
        Some(s) => Strategy::parse(s).map_err(ApiError::Invalid)?,
    };
    let choices = Choices::of(&body, stateless)?;
    let kwargs = json!({
        "input": body.input,
        "command": body.command,
        "config": body.config.unwrap_or_else(|| json!({})),
        "context": body.context.unwrap_or_else(|| json!({})),
        "stream_mode": modes.names(),
        "multitask_strategy": strategy.as_str(),
        "on_disconnect": if choices.cancel_on_disconnect { "cancel" } else { "continue" },
    });
    Ok(Parsed {
        from_checkpoint,
        run: NewRun {
            input,
            from_checkpoint: None,
            resume,
            modes,
            metadata,
            strategy,
            kwargs,
        },
        cancel_on_disconnect: choices.cancel_on_disconnect,
        create_thread: choices.create_thread,
        delete_on_completion: choices.delete_on_completion && stateless,
        goto_model: goto_model.is_some(),
    })
}

/// The run's `assistant_id` names this server's assistant. As langgraph-api does, one
/// that is neither a UUID nor the graph id is a 422, and a UUID no assistant has a 404.
fn check_assistant(app: &AppState, assistant: Option<String>) -> Result<(), ApiError> {
    let assistant =
        assistant.ok_or_else(|| ApiError::Invalid("assistant_id is required".into()))?;
    if assistants::matches(app.manager.assistant(), &assistant) {
        return Ok(());
    }
    if uuid::Uuid::parse_str(&assistant).is_err() {
        return Err(ApiError::Invalid(format!(
            "invalid assistant {assistant:?}: neither an assistant UUID nor the graph {:?}",
            app.manager.assistant().graph_id
        )));
    }
    Err(ApiError::NotFound {
        what: "Assistant",
        id: assistant,
    })
}

/// Fields langgraph-api takes that a Keel server refuses rather than ignore.
fn refuse_unsupported(body: &RunBody) -> Result<(), ApiError> {
    for (field, value) in [
        ("interrupt_before", &body.interrupt_before),
        ("interrupt_after", &body.interrupt_after),
    ] {
        if present(value) {
            return Err(ApiError::Invalid(format!(
                "{field} is not supported: a Keel agent interrupts through middleware"
            )));
        }
    }
    if present(&body.webhook) {
        return Err(ApiError::Invalid(
            "webhook is not supported by this server".into(),
        ));
    }
    Ok(())
}

/// The messages of a run's `input` (`{messages: [...]}`); empty without input, and
/// beside a command (which carries nothing there, checked before).
fn input_of(
    app: &AppState,
    input: &Option<Value>,
    command: bool,
) -> Result<Vec<Message>, ApiError> {
    match input {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(_) if command => Ok(Vec::new()),
        Some(Value::Object(fields)) => {
            let mut messages = Vec::new();
            for (key, value) in fields {
                if key == "messages" {
                    check_input_count(value, app.max_input_messages)?;
                    messages =
                        messages_from_input(value, "input.messages").map_err(ApiError::Invalid)?;
                } else {
                    return Err(ApiError::Invalid(format!(
                        "input.{key}: this agent's state takes only messages"
                    )));
                }
            }
            Ok(messages)
        }
        Some(other) => Err(ApiError::Invalid(format!(
            "input must be an object like {{\"messages\": [...]}}, not {}",
            kind(other)
        ))),
    }
}

/// A run's three lifecycle choices, read from their protocol names.
struct Choices {
    /// `on_disconnect: cancel`.
    cancel_on_disconnect: bool,
    /// `if_not_exists: create`.
    create_thread: bool,
    /// `on_completion: delete` (the default of a stateless run).
    delete_on_completion: bool,
}

impl Choices {
    fn of(body: &RunBody, stateless: bool) -> Result<Choices, ApiError> {
        let refuse = |field: &str, value: &str, allowed: &str| {
            ApiError::Invalid(format!("{field} {value:?} is not {allowed}"))
        };
        let cancel_on_disconnect = match body.on_disconnect.as_deref() {
            None | Some("continue") => false,
            Some("cancel") => true,
            Some(other) => return Err(refuse("on_disconnect", other, "cancel or continue")),
        };
        let create_thread = match body.if_not_exists.as_deref() {
            None | Some("reject") => false,
            Some("create") => true,
            Some(other) => return Err(refuse("if_not_exists", other, "create or reject")),
        };
        let delete_on_completion = match body.on_completion.as_deref() {
            None => stateless,
            Some("delete") => true,
            Some("keep") => false,
            Some(other) => return Err(refuse("on_completion", other, "delete or keep")),
        };
        Ok(Choices {
            cancel_on_disconnect,
            create_thread,
            delete_on_completion,
        })
    }
}

/// The thread a run goes on, and the metadata it gives the run: a new thread for a
/// stateless run, the caller's own thread, or one created under the id when the run
/// asks (`if_not_exists: create`).
async fn run_thread(
    app: &AppState,
    owner: &Owner,
    thread_id: Option<String>,
    parsed: &Parsed,
) -> Result<(String, Map<String, Value>), ApiError> {
    Ok(match thread_id {
        None => {
            let t = new_thread(app, owner, None, run_metadata(app)).await?;
            (t.thread_id, t.metadata)
        }
        Some(id) => match find_owned(app, owner, &id).await? {
            Some(thread) => {
                // Another process sharing the database may be running it.
                if parsed.run.strategy == Strategy::Reject
                    && app.registry.is_shared()
                    && app.manager.is_busy(&thread.thread_id).await?
                {
                    return Err(ApiError::Conflict(format!(
                        "thread {id} is already running a run; wait for it, or use multitask_strategy enqueue"
                    )));
                }
                tag_thread(app, owner, &thread).await;
                let mut meta = thread.metadata;
                meta.extend(run_metadata(app));
                (thread.thread_id, meta)
            }
            // The id is looked up in the caller's own namespace only: whether another
            // owner uses it is neither checked nor told.
            None if parsed.create_thread => {
                let t = new_thread(app, owner, Some(id), run_metadata(app)).await?;
                (t.thread_id, t.metadata)
            }
            None => return Err(ApiError::thread(&id)),
        },
    })
}

/// Deletes a stateless run's thread once the run ends and the caller has read what it
/// answers with (the returned sender dropped): everything the run stored goes with its
/// thread, as a DELETE would do it.
fn delete_when_done(
    app: &AppState,
    owner: &Owner,
    live: &Arc<LiveRun>,
) -> tokio::sync::oneshot::Sender<()> {
    let (app, owner, live) = (app.clone(), owner.clone(), live.clone());
    let (keep_tx, kept) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        live.log.closed().await;
        let _ = kept.await;
        if let Err(e) = delete_thread(&app, &owner, &live.thread_id).await {
            tracing::error!("deleting a stateless run's thread: {e}");
        }
    });
    keep_tx
}

/// Validates the request, resolves (or creates) the thread, and starts the run. For a
/// run whose thread is deleted when it ends (stateless), also returns a sender: the
/// thread stays until it is dropped, so the caller can read the run's values first.
async fn start_keeping(
    app: &AppState,
    owner: &Owner,
    thread_id: Option<String>,
    body: RunBody,
) -> Result<
    (
        RunRecord,
        Arc<LiveRun>,
        bool,
        Option<tokio::sync::oneshot::Sender<()>>,
    ),
    ApiError,
> {
    let stateless = thread_id.is_none();
    let mut parsed = parse(app, body, stateless)?;
    let (thread_id, thread_meta) = run_thread(app, owner, thread_id, &parsed).await?;
    // A run's metadata as langgraph-api fills it: the assistant's (`created_by`), the
    // thread's, the graph and assistant it runs, then the request's own on top.
    let mut metadata = Map::new();
    metadata.insert("created_by".into(), Value::String("system".into()));
    metadata.extend(thread_meta);
    metadata.extend(std::mem::take(&mut parsed.run.metadata));
    parsed.run.metadata = metadata;
    if let Some(id) = &parsed.from_checkpoint {
        parsed.run.from_checkpoint = fork_point(app, &thread_id, id).await?;
    }
    if parsed.run.from_checkpoint.is_some() && parsed.run.resume.is_some() {
        return Err(ApiError::Invalid(
            "command with an earlier checkpoint: a command applies to the thread's head; a run from an earlier checkpoint (a fork) takes input only".into(),
        ));
    }
    match &parsed.run.resume {
        Some(RunCommand::Resume(value)) => check_resume(app, &thread_id, Some(value)).await?,
        Some(RunCommand::Resolve) => check_resume(app, &thread_id, None).await?,
        Some(RunCommand::Update(_)) => check_update(app, &thread_id, &mut parsed.run).await?,
        // A fork starts from its own checkpoint: the head's pending review is not its.
        None if parsed.run.from_checkpoint.is_some() => {}
        None => {
            let input = std::mem::take(&mut parsed.run.input);
            parsed.run.input = answer_pending(app, &thread_id, input, parsed.goto_model).await?;
        }
    }
    if parsed.goto_model && parsed.run.input.is_empty() && parsed.run.from_checkpoint.is_none() {
        check_has_messages(app, &thread_id).await?;
    }
    let (record, live) = app.manager.create(&thread_id, parsed.run).await?;
    let keep = parsed
        .delete_on_completion
        .then(|| delete_when_done(app, owner, &live));
    Ok((record, live, parsed.cancel_on_disconnect, keep))
}

/// [`start_keeping`], for callers that read nothing of a stateless run's thread once
/// it ends.
async fn start(
    app: &AppState,
    owner: &Owner,
    thread_id: Option<String>,
    body: RunBody,
) -> Result<(RunRecord, Arc<LiveRun>, bool), ApiError> {
    let (record, live, cancel, _) = start_keeping(app, owner, thread_id, body).await?;
    Ok((record, live, cancel))
}

/// The metadata a run writes on its thread, as LangGraph's Agent Server does: the
/// assistant's `graph_id` and `assistant_id` (replacing any the thread had). Clients list
/// an assistant's threads by searching on them (agent-chat-ui's thread list).
fn run_metadata(app: &AppState) -> Map<String, Value> {
    let info = app.manager.assistant();
    let mut metadata = Map::new();
    metadata.insert("graph_id".into(), Value::String(info.graph_id.clone()));
    metadata.insert(
        "assistant_id".into(),
        Value::String(info.assistant_id.clone()),
    );
    metadata
}

/// Writes [`run_metadata`] on the thread, when it does not hold it yet. Best effort, as
/// the thread's status is: a failed write is logged and the run goes on (the next run
/// tries again).
async fn tag_thread(app: &AppState, owner: &Owner, thread: &ThreadRecord) {
    let tags = run_metadata(app);
    if tags.iter().all(|(k, v)| thread.metadata.get(k) == Some(v)) {
        return;
    }
    if let Err(e) = app
        .registry
        .update_thread(&owner.0, &thread.thread_id, |t| t.metadata.extend(tags))
        .await
    {
        tracing::warn!(
            thread_id = %public_thread_id(&thread.thread_id),
            "could not write graph_id and assistant_id into the thread's metadata: {e}"
        );
    }
}

/// What a thread waits for, as far as a new run is concerned.
enum Review {
    /// A run is executing or queued: the next run waits its turn, and the middleware
    /// checks the review when it starts.
    Busy,
    /// Idle and paused, with the thread's state.
    Pending(Pause, AgentState),
    /// Idle, nothing to review.
    None,
}

async fn review(app: &AppState, thread_id: &str) -> Result<Review, ApiError> {
    if app.manager.is_busy(thread_id).await? {
        return Ok(Review::Busy);
    }
    let state = app
        .manager
        .agent()
        .state(thread_id)
        .await
        .map_err(|e| ApiError::storage("reading the thread", e))?
        .unwrap_or_default();
    let pause = app
        .manager
        .agent()
        .resumable()
        .and_then(|(_, resumable)| resumable.pause(&state));
    Ok(match pause {
        Some(pause) => Review::Pending(pause, state),
        None => Review::None,
    })
}

/// A resume on an idle thread must answer its pending interrupt as the middleware that
/// paused it reads answers (human in the loop: one allowed decision per paused call).
/// A `goto "__end__"` (`resume: None`) needs one pending too.
async fn check_resume(
    app: &AppState,
    thread_id: &str,
    resume: Option<&Value>,
) -> Result<(), ApiError> {
    let what = if resume.is_some() {
        "command.resume"
    } else {
        "command.goto"
    };
    match review(app, thread_id).await? {
        Review::Busy => Ok(()),
        Review::Pending(_, state) => match (resume, app.manager.agent().resumable()) {
            (Some(value), Some((_, resumable))) => resumable
                .resume_update(&state, value)
                .map(|_| ())
                .map_err(|e| ApiError::Invalid(format!("{what}: {e}"))),
            _ => Ok(()),
        },
        Review::None => Err(ApiError::BadRequest(format!(
            "{what}: thread {} has no pending interrupt to resume",
            public_thread_id(thread_id)
        ))),
    }
}

/// A `command.update` on an idle thread: refused while a review is pending (LangGraph
/// would append the messages after the paused calls, leaving them without results,
/// which providers reject); on a thread that never ran, the messages are the run's
/// input, as LangGraph then runs the graph from its start.
async fn check_update(app: &AppState, thread_id: &str, run: &mut NewRun) -> Result<(), ApiError> {
    let head = app
        .manager
        .agent()
        .checkpointer()
        .latest(thread_id)
        .await
        .map_err(|e| ApiError::storage("reading the thread", e))?;
    if head.is_none() && !app.manager.is_busy(thread_id).await? {
        if let Some(RunCommand::Update(messages)) = run.resume.take() {
            run.input = messages;
        }
        return Ok(());
    }
    if has_review_middleware(app)
        && let Review::Pending(pause, _) = review(app, thread_id).await?
    {
        return Err(ApiError::Conflict(format!(
            "command.update: thread {} is waiting for {}; answer it (command.resume or goto \"__end__\") before updating its messages",
            public_thread_id(thread_id),
            pause.asks
        )));
    }
    Ok(())
}

/// New input on an idle thread that waits for a review ends the review, as LangGraph
/// takes it: the input's leading tool messages answer paused calls (agent-chat-ui sends
/// one per call, then the user's message), and every call left open gets Keel's
/// "cancelled" result ([`keel_core::dangling::cancelled_result`]) before the new
/// messages, so no call without a result reaches the model. A run without input is
/// refused, saying how to answer the review, unless it is a `goto "model"`
/// (`model_call`), which closes every paused call that way and calls the model, as
/// LangGraph's `Command(goto="model")` abandons the paused task. Returns the input to
/// run.
async fn answer_pending(
    app: &AppState,
    thread_id: &str,
    input: Vec<Message>,
    model_call: bool,
) -> Result<Vec<Message>, ApiError> {
    if !has_review_middleware(app) {
        return Ok(input);
    }
    let Review::Pending(pause, _) = review(app, thread_id).await? else {
        return Ok(input);
    };
    if input.is_empty() && !model_call {
        return Err(ApiError::Conflict(format!(
            "thread {} is waiting for {}; answer it with command: {{resume: ...}} (for a review, {{\"decisions\": [...]}}, one decision per call), or send new input",
            public_thread_id(thread_id),
            pause.asks
        )));
    }
    let open = pause.open_calls;
    let lead = input.iter().take_while(|m| m.is_tool()).count();
    for (i, message) in input.iter().enumerate() {
        let Some(call_id) = message.tool_call_id() else {
            continue;
        };
        if i >= lead {
            return Err(ApiError::Invalid(format!(
                "input.messages[{i}]: a tool result comes before the new messages, right after the paused call it answers"
            )));
        }
        if !open.iter().any(|(id, _)| id == call_id) {
            return Err(ApiError::Invalid(format!(
                "input.messages[{i}]: tool call {call_id:?} is not a paused call waiting for a result"
            )));
        }
    }
    let answered: Vec<&str> = input[..lead]
        .iter()
        .filter_map(Message::tool_call_id)
        .collect();
    let cancelled: Vec<Message> = open
        .iter()
        .filter(|(id, _)| !answered.contains(&id.as_str()))
        .map(|(id, name)| {
            keel_core::dangling::cancelled_result(&keel_core::dangling::DanglingCall {
                ai_index: 0,
                insert_at: 0,
                call_id: id.clone(),
                tool_name: name.clone(),
            })
        })
        .collect();
    let mut input = input;
    let rest = input.split_off(lead);
    input.extend(cancelled);
    input.extend(rest);
    Ok(input)
}

/// A `goto "model"` with nothing to add needs messages for the model to read: a thread
/// that never ran (or is busy with its first run) has none yet.
async fn check_has_messages(app: &AppState, thread_id: &str) -> Result<(), ApiError> {
    if app.manager.is_busy(thread_id).await? {
        return Ok(());
    }
    let head = app
        .manager
        .agent()
        .checkpointer()
        .latest(thread_id)
        .await
        .map_err(|e| ApiError::storage("reading the thread", e))?;
    if head.is_none_or(|cp| cp.messages.is_empty()) {
        return Err(ApiError::BadRequest(format!(
            "command.goto \"model\": thread {} has no messages for the model to read; send input, or command.update with messages",
            public_thread_id(thread_id)
        )));
    }
    Ok(())
}

/// Whether a middleware of the agent pauses runs for an answer (human in the loop does),
/// so a thread can be waiting for one.
fn has_review_middleware(app: &AppState) -> bool {
    app.manager.agent().resumable().is_some()
}

fn run_location(record: &RunRecord) -> String {
    format!(
        "/threads/{}/runs/{}",
        public_thread_id(&record.thread_id),
        record.run_id
    )
}

fn with_location(mut response: Response, record: &RunRecord) -> Response {
    if let Ok(value) = HeaderValue::from_str(&run_location(record)) {
        response
            .headers_mut()
            .insert(header::CONTENT_LOCATION, value);
    }
    response
}

/// `POST /threads/{thread_id}/runs`: starts a run in the background.
pub async fn create(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
    JsonBody(body): JsonBody<RunBody>,
) -> Result<Response, ApiError> {
    let (record, _, _) = start(&app, &owner, Some(thread_id), body).await?;
    Ok(with_location(
        Json(record.to_json()).into_response(),
        &record,
    ))
}

/// `POST /runs`: a background run on a fresh thread.
pub async fn stateless_create(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    JsonBody(body): JsonBody<RunBody>,
) -> Result<Response, ApiError> {
    let (record, _, _) = start(&app, &owner, None, body).await?;
    Ok(with_location(
        Json(record.to_json()).into_response(),
        &record,
    ))
}

/// `POST /threads/{thread_id}/runs/stream`: starts a run and streams its events.
pub async fn create_stream(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
    JsonBody(body): JsonBody<RunBody>,
) -> Result<Response, ApiError> {
    let (record, live, cancel) = start(&app, &owner, Some(thread_id), body).await?;
    Ok(stream_response(
        &app,
        &record,
        live,
        Start::After(0),
        None,
        cancel,
    ))
}

/// `POST /runs/stream`: a streamed run on a fresh thread.
pub async fn stateless_stream(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    JsonBody(body): JsonBody<RunBody>,
) -> Result<Response, ApiError> {
    let (record, live, cancel) = start(&app, &owner, None, body).await?;
    Ok(stream_response(
        &app,
        &record,
        live,
        Start::After(0),
        None,
        cancel,
    ))
}

/// What `wait` and `join` answer: the thread's values, or the run's error.
async fn outcome(
    app: &AppState,
    live: Option<Arc<LiveRun>>,
    thread_id: &str,
    run_id: &str,
) -> Result<Value, ApiError> {
    if let Some(live) = live {
        live.log.closed().await;
    }
    let record = app
        .registry
        .run(thread_id, run_id)
        .await
        .map_err(|e| ApiError::storage("reading the run", e))?
        .map(|r| app.manager.overlay(r));
    if let Some(RunRecord {
        status: RunStatus::Error,
        error,
        ..
    }) = &record
    {
        return Ok(json!({"__error__": {"error": "RunError", "message": error}}));
    }
    current_values(app, thread_id).await
}

/// `POST /threads/{thread_id}/runs/wait`: starts a run and answers with the thread's
/// values once it ends.
pub async fn create_wait(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
    JsonBody(body): JsonBody<RunBody>,
) -> Result<Response, ApiError> {
    let (record, live, _) = start(&app, &owner, Some(thread_id), body).await?;
    let values = outcome(&app, Some(live), &record.thread_id, &record.run_id).await?;
    Ok(with_location(Json(values).into_response(), &record))
}

/// `POST /runs/wait`: a run on a fresh thread, waited for.
pub async fn stateless_wait(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    JsonBody(body): JsonBody<RunBody>,
) -> Result<Response, ApiError> {
    // The thread goes once its values are read (dropping `_keep`), not before.
    let (record, live, _, _keep) = start_keeping(&app, &owner, None, body).await?;
    let values = outcome(&app, Some(live.clone()), &record.thread_id, &record.run_id).await?;
    Ok(with_location(Json(values).into_response(), &record))
}

/// `GET /threads/{thread_id}/runs?limit=&offset=&status=`: newest first.
pub async fn list(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
    query: QueryPairs,
) -> Result<Json<Value>, ApiError> {
    let thread = owned(&app, &owner, &thread_id).await?;
    let status = match query.get("status") {
        None => None,
        Some(s) => Some(
            [
                RunStatus::Pending,
                RunStatus::Running,
                RunStatus::Error,
                RunStatus::Success,
                RunStatus::Interrupted,
            ]
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| ApiError::Invalid(format!("status {s:?} is not a run status")))?,
        ),
    };
    let runs = app
        .registry
        .runs(
            &thread.thread_id,
            status,
            query.usize_or("offset", 0)?,
            query.usize_or("limit", 10)?.min(1000),
        )
        .await
        .map_err(|e| ApiError::storage("listing runs", e))?;
    Ok(Json(Value::Array(
        runs.into_iter()
            .map(|r| app.manager.overlay(r).to_json())
            .collect(),
    )))
}

async fn owned_run(
    app: &AppState,
    owner: &Owner,
    thread_id: &str,
    run_id: &str,
) -> Result<RunRecord, ApiError> {
    let thread = owned(app, owner, thread_id).await?;
    app.registry
        .run(&thread.thread_id, run_id)
        .await
        .map_err(|e| ApiError::storage("reading the run", e))?
        .map(|r| app.manager.overlay(r))
        .ok_or_else(|| ApiError::run(run_id))
}

/// `GET /threads/{thread_id}/runs/{run_id}`.
pub async fn get_one(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids((thread_id, run_id)): Ids<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(
        owned_run(&app, &owner, &thread_id, &run_id)
            .await?
            .to_json(),
    ))
}

/// `DELETE /threads/{thread_id}/runs/{run_id}`: only a finished run.
pub async fn delete(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids((thread_id, run_id)): Ids<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let record = owned_run(&app, &owner, &thread_id, &run_id).await?;
    if !record.status.is_final() {
        return Err(ApiError::Conflict(format!(
            "run {run_id} is {}; cancel it before deleting it",
            record.status.as_str()
        )));
    }
    app.registry
        .delete_run(&record.thread_id, &run_id)
        .await
        .map_err(|e| ApiError::storage("deleting the run", e))?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /threads/{thread_id}/runs/{run_id}/cancel?wait=&action=`.
pub async fn cancel(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids((thread_id, run_id)): Ids<(String, String)>,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let record = owned_run(&app, &owner, &thread_id, &run_id).await?;
    let action = CancelAction::parse(query.get("action").unwrap_or("interrupt"))
        .map_err(ApiError::Invalid)?;
    let wait = query.bool_or("wait", false)?;
    app.manager.cancel(&record.thread_id, &run_id, action).await;
    if !wait {
        return Ok(StatusCode::ACCEPTED.into_response());
    }
    if let Some(live) = app.manager.find(&record).await {
        live.log.closed().await;
    }
    // With `wait`, langgraph-api answers as a join does, with the values the run
    // streamed after the cancel: none, for a run stopped mid-step, so `{}`.
    Ok(with_location(Json(json!({})).into_response(), &record))
}

/// `GET /threads/{thread_id}/runs/{run_id}/join`: waits for the run, then answers with
/// the thread's values.
pub async fn join(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids((thread_id, run_id)): Ids<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let record = owned_run(&app, &owner, &thread_id, &run_id).await?;
    let live = app.manager.find(&record).await;
    Ok(Json(outcome(&app, live, &record.thread_id, &run_id).await?))
}

/// `GET /threads/{thread_id}/runs/{run_id}/stream`: (re)joins a run's stream. With
/// `Last-Event-ID`, only the events after that id are sent.
pub async fn join_stream(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids((thread_id, run_id)): Ids<(String, String)>,
    headers: HeaderMap,
    query: QueryPairs,
) -> Result<Response, ApiError> {
    let record = owned_run(&app, &owner, &thread_id, &run_id).await?;
    // Without an id, from the oldest event still kept.
    let from = match headers.get("last-event-id") {
        None => Start::Oldest,
        Some(v) => {
            let text = v.to_str().unwrap_or_default().trim();
            // `-1` (what useStream's joinStream sends by default) asks for the run from
            // its start: the oldest event still kept.
            if text.is_empty() || text == "-1" {
                Start::Oldest
            } else {
                // The largest id has no successor: refused, rather than wrapping to 0
                // and replaying the whole stream.
                Start::After(
                    text.parse::<u64>()
                        .ok()
                        .and_then(|id| id.checked_add(1))
                        .ok_or_else(|| {
                            ApiError::Invalid(format!(
                                "Last-Event-ID {text:?} is not an event id of this server"
                            ))
                        })?,
                )
            }
        }
    };
    let filter = stream_mode_filter(&query)?;
    let cancel = query.bool_or("cancel_on_disconnect", false)?;
    match app.manager.find(&record).await {
        Some(live) => Ok(stream_response(&app, &record, live, from, filter, cancel)),
        // The run ended long enough ago that its events are gone: say how it ended.
        None => {
            let end = Event::default()
                .event("end")
                .data(json!({"run_id": run_id, "status": record.status.as_str()}).to_string());
            let events = futures::stream::iter([Ok::<_, Infallible>(end)]);
            Ok(with_location(Sse::new(events).into_response(), &record))
        }
    }
}

/// The `stream_mode` query of a join: `None` for the run's own modes (the SDKs send
/// `stream_mode=`, empty, for that); modes that send no events are dropped.
pub(crate) fn stream_mode_filter(query: &QueryPairs) -> Result<Option<ModeSet>, ApiError> {
    let names: Vec<&str> = query
        .all("stream_mode")
        .into_iter()
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return Ok(None);
    }
    let modes: Result<Vec<WireMode>, String> = names.into_iter().map(WireMode::parse).collect();
    Ok(Some(ModeSet::of(&modes.map_err(ApiError::Invalid)?)))
}

/// Cancels the run when the client goes away before it ends (`on_disconnect=cancel`).
/// A queued run so cancelled ends as soon as its turn comes, before its first step.
struct DisconnectGuard {
    live: Arc<LiveRun>,
}

impl Drop for DisconnectGuard {
    fn drop(&mut self) {
        if !self.live.log.is_closed() {
            self.live.cancel(CancelAction::Interrupt);
        }
    }
}

/// Where a subscriber starts in the run's log.
#[derive(Clone, Copy, Debug)]
enum Start {
    /// At this id (`Last-Event-ID` plus one): when it was dropped, the stream says so.
    After(u64),
    /// At the oldest event still kept (a join without `Last-Event-ID`).
    Oldest,
}

/// Events a connection takes from the run's log at a time: its backlog beyond what the
/// connection is writing. They are references to the log's frames, not copies.
const BACKLOG_EVENTS: usize = 64;

/// The most of a frame handed to the connection at once: a big event goes out in
/// pieces (of the shared buffer, not copies), so a client still reading it shows
/// progress well within the write timeout.
const WRITE_PIECE: usize = 64 * 1024;

/// How often an idle stream sends a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

struct Subscription {
    live: Arc<LiveRun>,
    cursor: u64,
    /// True until the first event is sent when the stream starts at the oldest kept
    /// event: events dropped before then move the start instead of ending the stream.
    from_oldest: bool,
    buffer: VecDeque<SseEvent>,
    /// What is left to send of the current frame.
    rest: Bytes,
    filter: Option<ModeSet>,
    done: bool,
    _guard: Option<DisconnectGuard>,
}

impl Subscription {
    /// The next bytes to send: (a piece of) an event, a keep-alive comment, or `None` at
    /// the end.
    async fn next_frame(&mut self) -> Option<Bytes> {
        loop {
            if !self.rest.is_empty() {
                let piece = self.rest.len().min(WRITE_PIECE);
                return Some(self.rest.split_to(piece));
            }
            if let Some(event) = self.buffer.pop_front() {
                let wanted = match (event.mode, self.filter) {
                    (Some(mode), Some(filter)) => filter.has(mode),
                    _ => true,
                };
                if wanted {
                    self.from_oldest = false;
                    self.rest = event.frame;
                }
                continue;
            }
            if self.done {
                return None;
            }
            let next = tokio::select! {
                next = self.live.log.next(self.cursor, BACKLOG_EVENTS) => next,
                () = tokio::time::sleep(KEEP_ALIVE) => return Some(Bytes::from_static(b":\n\n")),
            };
            match next {
                Next::Events(events) => {
                    if let Some(last) = events.last() {
                        self.cursor = last.id + 1;
                    }
                    self.buffer.extend(events);
                }
                Next::Lost { first_kept } if self.from_oldest => self.cursor = first_kept,
                Next::Lost { first_kept } => {
                    self.done = true;
                    let error = json!({
                        "error": "EventsLost",
                        "message": format!("events before id {first_kept} are no longer kept; join the run again without Last-Event-ID to continue from the oldest kept event"),
                    });
                    return Some(Bytes::from(format!("event: error\ndata: {error}\n\n")));
                }
                Next::Closed => self.done = true,
            }
        }
    }
}

/// A streaming response's subscription while the connection writes what it was given;
/// a watchdog drops it when the connection takes nothing more for the write timeout.
#[derive(Default)]
struct Parked {
    sub: Option<Subscription>,
    /// When the last frame was handed to the connection, while it has not asked for
    /// the next one.
    handed: Option<Instant>,
    /// The watchdog dropped the subscription.
    dropped: bool,
}

/// The response body: the frames of the log, shared with every other subscriber, pulled
/// as the connection asks for them.
fn frames(
    sub: Subscription,
    write_timeout: Duration,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send {
    let parked = Arc::new(Mutex::new(Parked {
        sub: Some(sub),
        ..Parked::default()
    }));
    tokio::spawn(watchdog(Arc::downgrade(&parked), write_timeout));
    futures::stream::unfold(parked, |parked| async move {
        let taken = {
            let mut slot = parked.lock();
            slot.handed = None;
            if std::mem::take(&mut slot.dropped) {
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the client took nothing of the stream for the write timeout",
                ))
            } else {
                Ok(slot.sub.take())
            }
        };
        let mut sub = match taken {
            Ok(Some(sub)) => sub,
            Ok(None) => return None,
            Err(e) => return Some((Err(e), parked)),
        };
        let frame = sub.next_frame().await?;
        {
            let mut slot = parked.lock();
            slot.handed = Some(Instant::now());
            slot.sub = Some(sub);
        }
        Some((Ok(frame), parked))
    })
}

/// Drops a response's subscription (its place in the log, its backlog and, with
/// `on_disconnect=cancel`, the run) once its connection has taken nothing for
/// `timeout` after being handed a frame. The run goes on; the connection ends with an
/// error when it next asks for more.
async fn watchdog(parked: Weak<Mutex<Parked>>, timeout: Duration) {
    loop {
        let Some(slot) = parked.upgrade() else {
            return;
        };
        let wait = {
            let mut slot = slot.lock();
            match slot.handed {
                Some(at) if at.elapsed() >= timeout => {
                    let sub = slot.sub.take();
                    slot.dropped = true;
                    slot.handed = None;
                    drop(slot);
                    if let Some(sub) = sub {
                        tracing::info!(run_id = %sub.live.run_id, "dropping a stream whose client stopped reading");
                    }
                    return;
                }
                Some(at) => timeout.saturating_sub(at.elapsed()),
                None => timeout,
            }
        };
        drop(slot);
        tokio::time::sleep(wait).await;
    }
}

fn stream_response(
    app: &AppState,
    record: &RunRecord,
    live: Arc<LiveRun>,
    from: Start,
    filter: Option<ModeSet>,
    cancel_on_disconnect: bool,
) -> Response {
    let guard = cancel_on_disconnect.then(|| DisconnectGuard { live: live.clone() });
    let (cursor, from_oldest) = match from {
        Start::After(id) => (id, false),
        Start::Oldest => (live.log.first_kept(), true),
    };
    let sub = Subscription {
        live,
        cursor,
        from_oldest,
        buffer: VecDeque::new(),
        rest: Bytes::new(),
        filter,
        done: false,
        _guard: guard,
    };
    let mut response =
        Body::from_stream(frames(sub, app.manager.limits().write_timeout)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    let stream_path = format!("{}/stream", run_location(record));
    if let Ok(value) = HeaderValue::from_str(&stream_path) {
        headers.insert(header::LOCATION, value);
    }
    with_location(response, record)
}

/// Runs the assistant on one user message and answers with the thread's values once
/// the run ends, as `runs.wait` does: on the caller's thread `thread_id` (created when
/// the caller has none of that id), or on a fresh thread deleted after the run. The
/// MCP endpoint's tool call ([`crate::mcp`]).
pub(crate) async fn wait_for_message(
    app: &AppState,
    owner: &Owner,
    thread_id: Option<String>,
    message: String,
) -> Result<Value, ApiError> {
    let body = RunBody {
        assistant_id: Some(app.manager.assistant().assistant_id.clone()),
        input: Some(json!({"messages": [{"role": "user", "content": message}]})),
        if_not_exists: thread_id.is_some().then(|| "create".to_owned()),
        ..RunBody::default()
    };
    // A stateless run's thread stays until its values are read (`_keep` dropped).
    let (record, live, _, _keep) = start_keeping(app, owner, thread_id, body).await?;
    outcome(app, Some(live), &record.thread_id, &record.run_id).await
}
