//! Threads: create, get, update metadata, delete, search, state and history. A thread's
//! state is its latest checkpoint; history lists checkpoints newest first.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use keel_core::message::Message;
use keel_core::state::AgentState;
use keel_core::store::Checkpoint;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::auth::{Owner, check_thread_id, public_thread_id};
use crate::error::ApiError;
use crate::extract::{Ids, JsonBody, QueryPairs};
use crate::registry::{ThreadFilter, ThreadRecord, ThreadStatus, check_metadata};
use crate::runs::CancelAction;
use crate::state::AppState;
use crate::time::{now_ms, rfc3339};
use crate::wire::state_to_values;

/// The most threads or checkpoints one page returns.
const MAX_PAGE: usize = 1000;

/// The node of a checkpoint written by `POST /threads/{id}/state` (`update:<as_node>`
/// when the request names one).
const UPDATE_NODE: &str = "update";

/// The nodes `as_node` may name.
const AS_NODES: [&str; 3] = ["model", "tools", "input"];

/// A checkpoint's id: a UUID-shaped string carrying its position, so ids sort like the
/// checkpoints and read back without a lookup table.
pub fn checkpoint_id(seq: u64) -> String {
    format!("00000000-0000-4000-8000-{seq:012x}")
}

/// The position a checkpoint id stands for (also accepts a plain number).
pub fn parse_checkpoint_id(id: &str) -> Result<u64, ApiError> {
    let parsed = match id.rsplit_once('-') {
        Some((_, hex)) => u64::from_str_radix(hex, 16).ok(),
        None => id.parse().ok(),
    };
    parsed.ok_or_else(|| {
        ApiError::Invalid(format!(
            "checkpoint_id {id:?} is not one this server issued"
        ))
    })
}

fn checkpoint_ref(thread_key: &str, seq: u64) -> Value {
    json!({
        "thread_id": public_thread_id(thread_key),
        "checkpoint_ns": "",
        "checkpoint_id": checkpoint_id(seq),
        "checkpoint_map": null,
    })
}

fn values_of(cp: &Checkpoint) -> Value {
    state_to_values(&AgentState {
        messages: std::sync::Arc::new(cp.messages.clone()),
        values: cp.values.clone(),
        lineage: Default::default(),
    })
}

/// The protocol's `ThreadState` for a checkpoint (`None`: a thread that never ran) of
/// the thread stored under `thread_id` (its key), whose metadata is `thread_meta`.
/// Besides the `checkpoint` and `parent_checkpoint` references it carries their ids at
/// the top level (`checkpoint_id`, `parent_checkpoint_id`), as langgraph-api does.
pub fn state_json(
    thread_id: &str,
    thread_meta: &Map<String, Value>,
    cp: Option<&Checkpoint>,
) -> Value {
    match cp {
        None => json!({
            "values": {},
            "next": [],
            "tasks": [],
            "checkpoint": {"thread_id": public_thread_id(thread_id), "checkpoint_ns": "", "checkpoint_id": null, "checkpoint_map": null},
            "metadata": {},
            "created_at": null,
            "parent_checkpoint": null,
            "interrupts": [],
            "checkpoint_id": null,
            "parent_checkpoint_id": null,
        }),
        Some(cp) => {
            let (next, tasks, interrupts) = pending_tasks(
                cp.seq,
                &cp.node,
                cp.parent.is_none(),
                &cp.messages,
                &cp.values,
            );
            json!({
            "values": values_of(cp),
            "next": next,
            "tasks": tasks,
            "checkpoint": checkpoint_ref(thread_id, cp.seq),
            "metadata": metadata_of(thread_id, thread_meta, cp),
            "created_at": rfc3339(cp.created_at_ms),
            "parent_checkpoint": cp.parent.map(|p| checkpoint_ref(thread_id, p)),
            "interrupts": interrupts,
            "checkpoint_id": checkpoint_id(cp.seq),
            "parent_checkpoint_id": cp.parent.map(checkpoint_id),
            })
        }
    }
}

/// A checkpoint's `metadata` (what `POST /history` filters on): from the step's header,
/// never its messages. As langgraph-api copies a run's metadata into the checkpoints it
/// writes, the thread's metadata (which a run tags with `graph_id` and `assistant_id`)
/// comes first, and the checkpoint's own keys override it.
fn metadata_of(thread_id: &str, thread_meta: &Map<String, Value>, cp: &Checkpoint) -> Value {
    let source = match cp.node.as_str() {
        "input" => "input",
        UPDATE_NODE => "update",
        node if node.starts_with(UPDATE_NODE) && node[UPDATE_NODE.len()..].starts_with(':') => {
            "update"
        }
        _ => "loop",
    };
    let own = json!({
        "source": source,
        // LangGraph numbers a thread's first, empty checkpoint -1.
        "step": i64::try_from(cp.depth).map_or(i64::MAX, |d| d - 1),
        "writes": null,
        "node": cp.node,
        "run_id": cp.run_id,
        "thread_id": public_thread_id(thread_id),
    });
    let mut out = thread_meta.clone();
    if let Value::Object(own) = own {
        out.extend(own);
    }
    Value::Object(out)
}

/// The step that runs after a checkpoint nothing paused, as LangGraph's `next` names it:
/// `__start__` after a thread's first, empty checkpoint; `model` after an input (the
/// checkpoint a regenerate starts from) or a tool step's results; `tools` after a model
/// step that called tools; nothing after an answer, an update, or a review ended
/// without a run. `first`: the checkpoint has no parent.
fn next_step(node: &str, first: bool, messages: &[Message]) -> Option<&'static str> {
    use keel_agent::{INPUT_NODE, MODEL_NODE, TOOLS_NODE};
    match node {
        INPUT_NODE if first && messages.is_empty() => Some("__start__"),
        INPUT_NODE if messages.last().is_some_and(|m| !m.is_ai()) => Some(MODEL_NODE),
        MODEL_NODE if !keel_core::pairs::pending_calls(messages).is_empty() => Some(TOOLS_NODE),
        TOOLS_NODE => Some(MODEL_NODE),
        _ => None,
    }
}

/// A thread's `next`, `tasks` and `interrupts` at checkpoint `seq`, written by `node`
/// (`first`: it has no parent) with these messages and values. Paused: LangGraph shows
/// the waiting node as a task holding its interrupts; the waiting node is the one that
/// paused, the head checkpoint's (`HumanInTheLoopMiddleware.after_model`, or
/// `.before_agent` for the next call of a per-call review). Otherwise the [`next_step`]
/// as a task with no result yet, whose id is derived from the checkpoint's.
pub(crate) fn pending_tasks(
    seq: u64,
    node: &str,
    first: bool,
    messages: &[Message],
    values: &Map<String, Value>,
) -> (Value, Value, Value) {
    let task = |id: Value, node: &str, interrupts: Value| {
        json!({
            "id": id,
            "name": node,
            "path": ["__pregel_pull", node],
            "error": null,
            "interrupts": interrupts,
            "checkpoint": null,
            "state": null,
            "result": null,
        })
    };
    let pending = values
        .get(keel_core::state::INTERRUPT_KEY)
        .and_then(crate::wire::interrupts_to_lg);
    match pending {
        None => match next_step(node, first, messages) {
            None => (json!([]), json!([]), json!([])),
            Some(next) => (
                json!([next]),
                json!([task(
                    json!(format!("00000000-0000-4000-9000-{seq:012x}")),
                    next,
                    json!([])
                )]),
                json!([]),
            ),
        },
        Some(list) => (
            json!([node]),
            json!([task(
                json!(crate::wire::interrupt_task_id(
                    list[0]["id"].as_str().unwrap_or_default()
                )),
                node,
                list.clone()
            )]),
            list,
        ),
    }
}

/// The thread `thread_id` of `owner`, if it has one. Ids are looked up in the owner's
/// namespace ([`Owner::thread_key`]); a thread recorded before namespaces existed
/// (stored under its bare id, with this owner) is found too.
pub async fn find_owned(
    app: &AppState,
    owner: &Owner,
    thread_id: &str,
) -> Result<Option<ThreadRecord>, ApiError> {
    check_thread_id(thread_id).map_err(ApiError::Invalid)?;
    let read = |e| ApiError::storage("reading the thread", e);
    let key = owner.thread_key(thread_id);
    let found = app.registry.thread(&owner.0, &key).await.map_err(read)?;
    if found.is_some() || key == thread_id {
        return Ok(found);
    }
    app.registry.thread(&owner.0, thread_id).await.map_err(read)
}

/// The thread of `owner`, or 404. Its record's `thread_id` is the key everything of
/// the thread is stored under.
pub async fn owned(
    app: &AppState,
    owner: &Owner,
    thread_id: &str,
) -> Result<ThreadRecord, ApiError> {
    find_owned(app, owner, thread_id)
        .await?
        .ok_or_else(|| ApiError::thread(thread_id))
}

/// A thread as the protocol's `Thread` object: its current values (null before its
/// first run) and when they last changed.
pub async fn thread_json(app: &AppState, record: &ThreadRecord) -> Result<Value, ApiError> {
    let latest = app
        .manager
        .agent()
        .checkpointer()
        .latest(&record.thread_id)
        .await
        .map_err(|e| ApiError::storage("reading the thread's state", e))?;
    Ok(record.to_json(
        latest.as_ref().map_or(Value::Null, values_of),
        latest.as_ref().map(|cp| cp.created_at_ms),
    ))
}

/// A thread's current values (`{}` before its first run).
pub async fn current_values(app: &AppState, thread_id: &str) -> Result<Value, ApiError> {
    let latest = app
        .manager
        .agent()
        .checkpointer()
        .latest(thread_id)
        .await
        .map_err(|e| ApiError::storage("reading the thread's state", e))?;
    Ok(latest.as_ref().map_or_else(|| json!({}), values_of))
}

/// Creates a thread record for `owner` (a fresh UUID when no id is given).
pub async fn new_thread(
    app: &AppState,
    owner: &Owner,
    thread_id: Option<String>,
    metadata: Map<String, Value>,
) -> Result<ThreadRecord, ApiError> {
    let thread_id = thread_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    check_thread_id(&thread_id).map_err(ApiError::Invalid)?;
    check_metadata("metadata", &metadata).map_err(ApiError::Invalid)?;
    let exists = || ApiError::Conflict(format!("thread {thread_id} already exists"));
    let key = owner.thread_key(&thread_id);
    if key != thread_id && find_owned(app, owner, &thread_id).await?.is_some() {
        return Err(exists());
    }
    let now = now_ms();
    let record = ThreadRecord {
        thread_id: key,
        owner: owner.0.to_string(),
        created_at_ms: now,
        updated_at_ms: now,
        metadata,
        status: ThreadStatus::Idle,
    };
    let inserted = app
        .registry
        .insert_thread(record.clone())
        .await
        .map_err(|e| ApiError::storage("creating the thread", e))?;
    if !inserted {
        return Err(exists());
    }
    Ok(record)
}

/// Deletes the thread stored under `key`: cancels its runs, deletes everything the
/// agent keeps for it (every middleware's rows and caches, then its checkpoints), and
/// last its records. A failure leaves the thread listed, so deleting it again finishes
/// the job; once it answers, nothing of the thread is left for anyone, and an id
/// created again starts empty. Returns `false` when `owner` has no such thread.
pub async fn delete_thread(app: &AppState, owner: &Owner, key: &str) -> Result<bool, ApiError> {
    let runs = app
        .registry
        .runs(key, None, 0, usize::MAX)
        .await
        .map_err(|e| ApiError::storage("listing the thread's runs", e))?;
    for run in runs.into_iter().filter(|r| !r.status.is_final()) {
        app.manager
            .cancel(key, &run.run_id, CancelAction::Interrupt)
            .await;
    }
    app.manager
        .agent()
        .delete_thread(key)
        .await
        .map_err(|e| ApiError::storage("deleting the thread's data", e))?;
    app.registry
        .delete_thread(&owner.0, key)
        .await
        .map_err(|e| ApiError::storage("deleting the thread", e))
}

/// The body of `POST /threads`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CreateBody {
    thread_id: Option<String>,
    metadata: Option<Map<String, Value>>,
    if_exists: Option<String>,
    supersteps: Option<Value>,
    ttl: Option<Value>,
}

/// `POST /threads`.
pub async fn create(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    JsonBody(body): JsonBody<CreateBody>,
) -> Result<Json<Value>, ApiError> {
    if body.supersteps.as_ref().is_some_and(|s| !s.is_null()) {
        return Err(ApiError::Invalid(
            "supersteps is not supported: create the thread, then run it".into(),
        ));
    }
    if body.ttl.as_ref().is_some_and(|s| !s.is_null()) {
        return Err(ApiError::Invalid(
            "ttl is not supported by this server".into(),
        ));
    }
    let do_nothing = match body.if_exists.as_deref() {
        None | Some("raise") => false,
        Some("do_nothing") => true,
        Some(other) => {
            return Err(ApiError::Invalid(format!(
                "if_exists {other:?} is not raise or do_nothing"
            )));
        }
    };
    if do_nothing
        && let Some(id) = &body.thread_id
        && let Some(existing) = find_owned(&app, &owner, id).await?
    {
        return Ok(Json(thread_json(&app, &existing).await?));
    }
    let record = new_thread(
        &app,
        &owner,
        body.thread_id,
        body.metadata.unwrap_or_default(),
    )
    .await?;
    Ok(Json(record.to_json(Value::Null, None)))
}

/// `GET /threads/{thread_id}`.
pub async fn get_one(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
) -> Result<Json<Value>, ApiError> {
    let record = owned(&app, &owner, &thread_id).await?;
    Ok(Json(thread_json(&app, &record).await?))
}

/// The body of `PATCH /threads/{thread_id}`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PatchBody {
    metadata: Option<Map<String, Value>>,
}

/// `PATCH /threads/{thread_id}`: merges metadata.
pub async fn patch(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
    JsonBody(body): JsonBody<PatchBody>,
) -> Result<Json<Value>, ApiError> {
    let thread = owned(&app, &owner, &thread_id).await?;
    let mut merged = thread.metadata;
    merged.extend(body.metadata.unwrap_or_default());
    check_metadata("metadata", &merged).map_err(ApiError::Invalid)?;
    let record = app
        .registry
        .update_thread(&owner.0, &thread.thread_id, |t| t.metadata = merged)
        .await
        .map_err(|e| ApiError::storage("updating the thread", e))?
        .ok_or_else(|| ApiError::thread(&thread_id))?;
    Ok(Json(thread_json(&app, &record).await?))
}

/// `DELETE /threads/{thread_id}`: cancels its runs and deletes everything stored for
/// it ([`delete_thread`]).
pub async fn delete(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
) -> Result<StatusCode, ApiError> {
    let thread = owned(&app, &owner, &thread_id).await?;
    if !delete_thread(&app, &owner, &thread.thread_id).await? {
        return Err(ApiError::thread(&thread_id));
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The body of `POST /threads/search`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SearchBody {
    metadata: Option<Map<String, Value>>,
    values: Option<Map<String, Value>>,
    ids: Option<Vec<String>>,
    status: Option<String>,
    limit: Option<usize>,
    offset: Option<usize>,
    sort_by: Option<String>,
    sort_order: Option<String>,
}

/// The filter of `search` and `count` (`doing`: what the refusal of a values filter
/// says the caller was doing).
fn thread_filter(
    doing: &str,
    metadata: Option<Map<String, Value>>,
    values: Option<&Map<String, Value>>,
    ids: Option<Vec<String>>,
    status: Option<&str>,
) -> Result<ThreadFilter, ApiError> {
    if values.is_some_and(|v| !v.is_empty()) {
        return Err(ApiError::Invalid(format!(
            "{doing} by values is not supported; use metadata, ids or status"
        )));
    }
    let status = match status {
        None => None,
        Some(s) => Some(ThreadStatus::parse(s).ok_or_else(|| {
            ApiError::Invalid(format!(
                "status {s:?} is not idle, busy, interrupted or error"
            ))
        })?),
    };
    Ok(ThreadFilter {
        metadata: metadata.unwrap_or_default(),
        ids,
        status,
    })
}

/// `POST /threads/search`: the caller's threads only.
pub async fn search(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    JsonBody(body): JsonBody<SearchBody>,
) -> Result<Json<Value>, ApiError> {
    let filter = thread_filter(
        "searching",
        body.metadata,
        body.values.as_ref(),
        body.ids,
        body.status.as_deref(),
    )?;
    let sort_by = body.sort_by.as_deref().unwrap_or("created_at");
    if !matches!(sort_by, "thread_id" | "created_at" | "updated_at") {
        return Err(ApiError::Invalid(format!(
            "sort_by {sort_by:?} is not thread_id, created_at or updated_at"
        )));
    }
    let ascending = match body.sort_order.as_deref() {
        None | Some("desc") => false,
        Some("asc") => true,
        Some(other) => {
            return Err(ApiError::Invalid(format!(
                "sort_order {other:?} is not asc or desc"
            )));
        }
    };
    let found = app
        .registry
        .search_threads(
            &owner.0,
            &filter,
            sort_by,
            ascending,
            body.offset.unwrap_or(0),
            body.limit.unwrap_or(10).min(MAX_PAGE),
        )
        .await
        .map_err(|e| ApiError::storage("searching threads", e))?;
    let mut out = Vec::with_capacity(found.len());
    for record in found {
        out.push(thread_json(&app, &record).await?);
    }
    Ok(Json(Value::Array(out)))
}

/// The body of `POST /threads/count`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CountBody {
    metadata: Option<Map<String, Value>>,
    values: Option<Map<String, Value>>,
    status: Option<String>,
}

/// `POST /threads/count`: how many of the caller's threads match, as `search` filters.
/// Counted a page at a time, so no more than one page of records is held.
pub async fn count(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    JsonBody(body): JsonBody<CountBody>,
) -> Result<Json<Value>, ApiError> {
    let filter = thread_filter(
        "counting",
        body.metadata,
        body.values.as_ref(),
        None,
        body.status.as_deref(),
    )?;
    let mut total = 0usize;
    loop {
        let page = app
            .registry
            .search_threads(&owner.0, &filter, "thread_id", true, total, MAX_PAGE)
            .await
            .map_err(|e| ApiError::storage("counting threads", e))?;
        total += page.len();
        if page.len() < MAX_PAGE {
            break;
        }
    }
    Ok(Json(json!(total)))
}

/// The body of `POST /threads/prune`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PruneBody {
    thread_ids: Option<Vec<String>>,
    strategy: Option<String>,
}

/// `POST /threads/prune`: deletes the caller's listed threads (LangGraph's `delete`
/// strategy, its default) as `DELETE /threads/{id}` does; ids the caller has no thread
/// for are skipped. Answers `{"pruned_count": n}`.
pub async fn prune(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    JsonBody(body): JsonBody<PruneBody>,
) -> Result<Json<Value>, ApiError> {
    match body.strategy.as_deref() {
        None | Some("delete") => {}
        Some("keep_latest") => {
            return Err(ApiError::Invalid(
                "strategy \"keep_latest\" is not supported: checkpoints are append-only; use \"delete\"".into(),
            ));
        }
        Some(other) => {
            return Err(ApiError::Invalid(format!(
                "strategy {other:?} is not delete or keep_latest"
            )));
        }
    }
    let ids = body
        .thread_ids
        .ok_or_else(|| ApiError::Invalid("thread_ids is required".into()))?;
    if ids.len() > MAX_PAGE {
        return Err(ApiError::Invalid(format!(
            "thread_ids has {} ids; at most {MAX_PAGE} per call",
            ids.len()
        )));
    }
    let mut pruned = 0u64;
    for id in ids {
        if let Some(thread) = find_owned(&app, &owner, &id).await?
            && delete_thread(&app, &owner, &thread.thread_id).await?
        {
            pruned += 1;
        }
    }
    Ok(Json(json!({"pruned_count": pruned})))
}

/// `GET /threads/{thread_id}/state`.
pub async fn state(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
) -> Result<Json<Value>, ApiError> {
    let thread = owned(&app, &owner, &thread_id).await?;
    let latest = app
        .manager
        .agent()
        .checkpointer()
        .latest(&thread.thread_id)
        .await
        .map_err(|e| ApiError::storage("reading the thread's state", e))?;
    Ok(Json(state_json(
        &thread.thread_id,
        &thread.metadata,
        latest.as_ref(),
    )))
}

/// `GET /threads/{thread_id}/state/{checkpoint_id}`.
pub async fn state_at(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids((thread_id, checkpoint)): Ids<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let thread = owned(&app, &owner, &thread_id).await?;
    let thread_id = thread.thread_id;
    let seq = parse_checkpoint_id(&checkpoint)?;
    let cp = app
        .manager
        .agent()
        .checkpointer()
        .checkpoint_at(&thread_id, seq)
        .await
        .map_err(|e| ApiError::storage("reading the thread's history", e))?
        .ok_or(ApiError::NotFound {
            what: "Checkpoint",
            id: checkpoint,
        })?;
    Ok(Json(state_json(&thread_id, &thread.metadata, Some(&cp))))
}

/// Checkpoints read per page while a metadata filter looks for matches.
const FILTER_PAGE: usize = 32;

/// The body of `POST /threads/{thread_id}/history`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct HistoryBody {
    limit: Option<usize>,
    before: Option<Value>,
    metadata: Option<Map<String, Value>>,
    checkpoint: Option<Value>,
}

/// `POST /threads/{thread_id}/history`: states newest first.
pub async fn history_post(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
    JsonBody(body): JsonBody<HistoryBody>,
) -> Result<Json<Value>, ApiError> {
    let thread = owned(&app, &owner, &thread_id).await?;
    let before = match &body.before {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(parse_checkpoint_id(id)?),
        Some(Value::Object(m)) => match m.get("checkpoint_id").and_then(Value::as_str) {
            Some(id) => Some(parse_checkpoint_id(id)?),
            None => None,
        },
        Some(_) => {
            return Err(ApiError::Invalid(
                "before must be a checkpoint id or {\"checkpoint_id\": ...}".into(),
            ));
        }
    };
    // The branch ending at `checkpoint` (every branch when absent).
    let tip = crate::routes::runs::checkpoint_of(&body.checkpoint, &None)?
        .map(|id| parse_checkpoint_id(&id))
        .transpose()?;
    history(
        &app,
        &thread,
        body.limit.unwrap_or(10),
        (tip, before),
        body.metadata.unwrap_or_default(),
    )
    .await
}

/// `GET /threads/{thread_id}/history?limit=&before=`.
pub async fn history_get(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
    query: QueryPairs,
) -> Result<Json<Value>, ApiError> {
    let thread = owned(&app, &owner, &thread_id).await?;
    let before = query.get("before").map(parse_checkpoint_id).transpose()?;
    history(
        &app,
        &thread,
        query.usize_or("limit", 10)?,
        (None, before),
        Map::new(),
    )
    .await
}

/// Up to `limit` states newest first, below `before`, whose metadata holds every pair of
/// `metadata`: of the branch ending at `tip`, or of every branch when `None` (as
/// LangGraph lists a thread's history, each fork's branch beside the ones it left).
async fn history(
    app: &AppState,
    thread: &ThreadRecord,
    limit: usize,
    (tip, before): (Option<u64>, Option<u64>),
    metadata: Map<String, Value>,
) -> Result<Json<Value>, ApiError> {
    let limit = limit.min(MAX_PAGE);
    let thread_id = thread.thread_id.as_str();
    let checkpointer = app.manager.agent().checkpointer();
    // Without a filter the first page is the answer; with one, pages are read newest
    // first until enough match or the history ends, never the whole history at once.
    let page_size = if metadata.is_empty() {
        limit
    } else {
        limit.max(FILTER_PAGE)
    };
    let mut states = Vec::new();
    let mut before = before;
    while states.len() < limit {
        let page = match tip {
            Some(_) => checkpointer.branch_page(thread_id, tip, before, page_size),
            None => checkpointer.tree_page(thread_id, before, page_size),
        }
        .await
        .map_err(|e| ApiError::storage("reading the thread's history", e))?;
        for cp in &page {
            let meta = metadata_of(thread_id, &thread.metadata, cp);
            if metadata.iter().all(|(k, v)| meta.get(k) == Some(v)) {
                states.push(state_json(thread_id, &thread.metadata, Some(cp)));
                if states.len() == limit {
                    break;
                }
            }
        }
        match page.last() {
            Some(oldest) if page.len() == page_size && oldest.seq > 0 => {
                before = Some(oldest.seq);
            }
            _ => break,
        }
    }
    Ok(Json(Value::Array(states)))
}

/// The body of `POST /threads/{thread_id}/state`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UpdateStateBody {
    values: Option<Value>,
    as_node: Option<Value>,
    checkpoint: Option<Value>,
    checkpoint_id: Option<Value>,
}

/// The message ops of `values` in `POST /threads/{id}/state`: `{"messages": ...}` (a
/// list, one message or a string), applied with the add-messages reducer: a message
/// whose id the state holds replaces it, a LangChain `RemoveMessage` (`{"type":
/// "remove", "id"}`, id `__remove_all__` for every message) removes, others append.
fn update_ops(values: &Option<Value>) -> Result<Vec<keel_core::state::MessageOp>, ApiError> {
    use keel_core::state::MessageOp;
    let fields = match values {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(fields)) => fields,
        Some(other) => {
            return Err(ApiError::Invalid(format!(
                "values must be an object like {{\"messages\": [...]}}, not {}",
                crate::wire::kind(other)
            )));
        }
    };
    let mut ops = Vec::new();
    for (key, value) in fields {
        if key != "messages" {
            return Err(ApiError::Invalid(format!(
                "values.{key}: this agent's state takes only messages"
            )));
        }
        let items: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        };
        for (i, item) in items.into_iter().enumerate() {
            let path = format!("values.messages[{i}]");
            if item.get("type").and_then(Value::as_str) == Some("remove") {
                let id = item
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .ok_or_else(|| {
                        ApiError::Invalid(format!("{path}: a remove message needs an \"id\""))
                    })?;
                ops.push(if id == "__remove_all__" {
                    MessageOp::RemoveAll
                } else {
                    MessageOp::Remove { id: id.to_owned() }
                });
                continue;
            }
            let mut message = crate::wire::messages_from_input(item, &path)
                .map_err(ApiError::Invalid)?
                .into_iter()
                .next()
                .ok_or_else(|| ApiError::Invalid(format!("{path} holds no message")))?;
            if message.id().is_empty() {
                message.set_id(keel_core::message::new_id());
            }
            ops.push(MessageOp::Upsert { message });
        }
    }
    Ok(ops)
}

/// `POST /threads/{thread_id}/state`: writes `values` as a node would (LangGraph's
/// `update_state`), as a new checkpoint after the head, or after `checkpoint` (a fork,
/// whose branch becomes the head). Answers `{"checkpoint": {...}}` naming the new
/// checkpoint. Refused (409) while a run of the thread is active.
pub async fn update_state(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
    JsonBody(body): JsonBody<UpdateStateBody>,
) -> Result<Json<Value>, ApiError> {
    use keel_core::state::StateUpdate;
    use keel_core::store::{CheckpointWrite, PutOutcome};
    let thread = owned(&app, &owner, &thread_id).await?;
    let key = thread.thread_id.as_str();
    let node = update_node(&body.as_node)?;
    let ops = update_ops(&body.values)?;
    let from = match crate::routes::runs::checkpoint_of(&body.checkpoint, &body.checkpoint_id)? {
        Some(id) => crate::routes::runs::fork_point(&app, key, &id).await?,
        None => None,
    };
    if app.manager.is_busy(key).await? {
        return Err(ApiError::Conflict(format!(
            "thread {thread_id} is running a run; update its state once the run ends"
        )));
    }
    let checkpointer = app.manager.agent().checkpointer();
    let storage = |e| ApiError::storage("updating the thread's state", e);
    let mut head = checkpointer
        .latest(key)
        .await
        .map_err(storage)?
        .map(|cp| cp.seq);
    let write = |parent, node: &str, update| CheckpointWrite {
        parent,
        run_id: keel_core::message::new_id(),
        node: node.to_owned(),
        update,
        created_at_ms: now_ms(),
    };
    let conflict = || {
        ApiError::Conflict(format!(
            "thread {thread_id} changed while its state was updated; read it and try again"
        ))
    };
    if head.is_none() {
        // A thread's first checkpoint is empty, as a run writes it.
        match checkpointer
            .put(key, write(None, "input", StateUpdate::default()))
            .await
            .map_err(storage)?
        {
            PutOutcome::Saved { seq } => head = Some(seq),
            PutOutcome::Conflict { .. } => return Err(conflict()),
        }
    }
    let update = StateUpdate {
        messages: ops,
        ..Default::default()
    };
    let outcome = match from {
        Some(from) => {
            checkpointer
                .fork(key, from, write(head, &node, update))
                .await
        }
        None => checkpointer.put(key, write(head, &node, update)).await,
    };
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(keel_core::store::StoreError::Invalid(e)) => {
            return Err(ApiError::Invalid(format!("values: {e}")));
        }
        Err(e) => return Err(storage(e)),
    };
    match outcome {
        PutOutcome::Saved { seq } => Ok(Json(updated(key, seq))),
        PutOutcome::Conflict { .. } => Err(conflict()),
    }
}

/// The node an update is written as: `as_node` (one of the agent's nodes), recorded
/// under [`UPDATE_NODE`].
fn update_node(as_node: &Option<Value>) -> Result<String, ApiError> {
    match as_node {
        None | Some(Value::Null) => Ok(UPDATE_NODE.to_owned()),
        Some(Value::String(n)) if AS_NODES.contains(&n.as_str()) => {
            Ok(format!("{UPDATE_NODE}:{n}"))
        }
        Some(other) => Err(ApiError::Invalid(format!(
            "as_node {other} is not a node of this agent; use one of {}",
            AS_NODES.join(", ")
        ))),
    }
}

/// langgraph-api's answer to a state update: the reference, its id, and the config a
/// client runs from (the JS SDK types it as `Pick<Config, "configurable">`).
fn updated(key: &str, seq: u64) -> Value {
    json!({
        "checkpoint": checkpoint_ref(key, seq),
        "checkpoint_id": checkpoint_id(seq),
        "configurable": {
            "thread_id": public_thread_id(key),
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint_id(seq),
        },
    })
}

/// `POST /threads/{thread_id}/compact` (Keel's own route; the Agent Server has none):
/// compacts the thread now, as a user's `/compact` or a UI's button asks
/// (`Agent::compact`): transient summarization folds what left its kept window into the
/// thread's summary, and every later call sends `[summary, *recent]` even under the
/// triggers; the thread's messages are untouched. Answers `{"compacted", "reports",
/// "checkpoint"}`. Owner-scoped (404 for another owner's thread), refused (409) while a
/// run of the thread is active, 400 for a thread that has not run yet.
pub async fn compact(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
) -> Result<Json<Value>, ApiError> {
    let thread = owned(&app, &owner, &thread_id).await?;
    let key = thread.thread_id.as_str();
    if app.manager.is_busy(key).await? {
        return Err(ApiError::Conflict(format!(
            "thread {thread_id} is running a run; compact it once the run ends"
        )));
    }
    let done = match app.manager.agent().compact(key).await {
        Ok(done) => done,
        Err(keel_agent::AgentError::UnknownThread { .. }) => {
            return Err(ApiError::BadRequest(format!(
                "thread {thread_id} has no messages to compact: it has not run yet"
            )));
        }
        Err(keel_agent::AgentError::Conflict { .. }) => {
            return Err(ApiError::Conflict(format!(
                "thread {thread_id} changed while it was compacted; try again"
            )));
        }
        Err(e) => {
            tracing::error!(thread_id = %thread_id, error = %e, "compacting a thread failed");
            return Err(ApiError::Internal(
                "compacting the thread failed; see the server log".into(),
            ));
        }
    };
    Ok(Json(json!({
        "compacted": done.compacted,
        "reports": done.reports,
        "checkpoint": done.checkpoint.map(|seq| checkpoint_ref(key, seq)),
    })))
}

/// `POST /threads/{thread_id}/copy`: a new thread of the same owner with the source's
/// metadata, status and every checkpoint (all branches); answers the new thread. What
/// middleware keep per thread (session memory, cached summaries) is not copied: the
/// copy's middleware start afresh.
pub async fn copy(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    Ids(thread_id): Ids<String>,
) -> Result<Json<Value>, ApiError> {
    let source = owned(&app, &owner, &thread_id).await?;
    let record = new_thread(&app, &owner, None, source.metadata.clone()).await?;
    let copied = app
        .manager
        .agent()
        .checkpointer()
        .copy_thread(&source.thread_id, &record.thread_id)
        .await;
    if let Err(e) = copied {
        // Nothing of the copy is kept: its record goes with the failed copy.
        if let Err(undo) = app
            .registry
            .delete_thread(&owner.0, &record.thread_id)
            .await
        {
            tracing::error!("removing a failed copy's thread record: {undo}");
        }
        return Err(ApiError::storage("copying the thread's checkpoints", e));
    }
    let status = source.status;
    let record = app
        .registry
        .update_thread(&owner.0, &record.thread_id, |t| t.status = status)
        .await
        .map_err(|e| ApiError::storage("copying the thread", e))?
        .unwrap_or(record);
    Ok(Json(thread_json(&app, &record).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_ids_round_trip() {
        for seq in [0, 1, 255, 1 << 40] {
            assert_eq!(parse_checkpoint_id(&checkpoint_id(seq)).unwrap(), seq);
        }
        assert_eq!(parse_checkpoint_id("7").unwrap(), 7);
        assert!(parse_checkpoint_id("not-an-id").is_err());
    }
}
