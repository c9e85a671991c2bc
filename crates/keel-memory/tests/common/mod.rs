//! Shared test helpers: seeding history, a deterministic fold model, a store wrapper
//! that records every save, and event capture.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud
#![allow(dead_code)]

pub mod backends;

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::message::Message;
use keel_core::model::{ChatModel, ModelProfile};
use keel_core::store::{
    ChatHistoryStore, Cursor, SaveOutcome, SessionMemoryState, SessionMemoryStore, SessionScope,
    StoreError, StoredMessage,
};
use keel_core::stream::{StreamEvent, StreamWriter};
use keel_testkit::{RecordedRequest, ScriptedModel};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::mpsc;

pub fn scope(user: &str, session: &str) -> SessionScope {
    SessionScope::new("flow-test", user, session, "")
}

/// Message `i` of a seeded session: even = user, odd = assistant; id `m00042`.
pub fn message(i: usize) -> Message {
    let text = if i == 0 {
        "I'm working on project PRJ-123 on the EU cluster.".to_owned()
    } else {
        format!("message {i}")
    };
    let m = if i.is_multiple_of(2) {
        Message::human(text)
    } else {
        Message::ai(text)
    };
    m.with_id(format!("m{i:05}"))
}

pub fn stored(i: usize) -> StoredMessage {
    StoredMessage {
        timestamp_ms: 1_700_000_000_000 + i as i64,
        message: message(i),
    }
}

/// Appends messages `range` of the seeded session.
pub async fn seed(
    store: &dyn ChatHistoryStore,
    scope: &SessionScope,
    range: std::ops::Range<usize>,
) {
    let rows: Vec<StoredMessage> = range.map(stored).collect();
    store.append(scope, &rows).await.unwrap();
}

/// The cursor of seeded message `i`.
pub fn cursor(i: usize) -> Cursor {
    stored(i).cursor()
}

/// The numbers `N` of every `message N` in the fold prompt's new messages block (one
/// JSON record per line).
pub fn batch_numbers(prompt: &str) -> Vec<usize> {
    let block = prompt
        .rsplit("<new_messages>")
        .next()
        .and_then(|s| s.split("</new_messages>").next())
        .unwrap_or("");
    let mut out = Vec::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let record: serde_json::Value =
            serde_json::from_str(line).expect("one JSON record per line");
        let role = record["role"].as_str().unwrap_or("");
        let content = record["content"].as_str().unwrap_or("");
        if matches!(role, "user" | "assistant")
            && let Some(n) = content
                .strip_prefix("message ")
                .and_then(|r| r.trim().parse().ok())
        {
            out.push(n);
        }
        if role == "user" && content.contains("PRJ-123") {
            out.push(0);
        }
    }
    out
}

/// The previous summary in a fold prompt's `<existing_summary>` record ("" before the
/// first fold).
pub fn previous_summary(prompt: &str) -> String {
    prompt
        .split("<existing_summary>\n")
        .nth(1)
        .and_then(|s| s.split("\n</existing_summary>").next())
        .and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .and_then(|v| v["summary"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A deterministic fold answer: a function of the prompt only, so a concurrent run and a
/// sequential run produce the same chain of states.
pub fn fold_answer(request: &RecordedRequest) -> String {
    let prompt = request.messages[0].text();
    let nums = batch_numbers(&prompt);
    let first = nums.iter().min().copied().unwrap_or(0);
    let last = nums.iter().max().copied().unwrap_or(0);
    let previous = previous_summary(&prompt);
    let mut summary = previous;
    if !summary.is_empty() {
        summary.push('\n');
    }
    summary.push_str(&format!("- messages {first} to {last}"));
    let mut pinned = serde_json::Map::new();
    if nums.contains(&0) {
        pinned.insert("project_id".into(), json!("PRJ-123"));
        pinned.insert("cluster".into(), json!("EU"));
    }
    json!({"pinned": pinned, "summary": summary}).to_string()
}

/// A scripted model that answers internal (fold) calls with [`fold_answer`] and user
/// calls with "ok".
pub fn fold_model() -> Arc<ScriptedModel> {
    Arc::new(
        ScriptedModel::from_fn(|r| {
            if r.internal {
                Ok(Message::ai(fold_answer(r)))
            } else {
                Ok(Message::ai("ok"))
            }
        })
        .with_profile(ModelProfile::new("fold-model", "scripted")),
    )
}

pub fn dyn_model(m: &Arc<ScriptedModel>) -> Arc<dyn ChatModel> {
    m.clone()
}

/// A writer whose custom events can be read back.
pub struct Events {
    rx: Mutex<mpsc::UnboundedReceiver<StreamEvent>>,
    pub writer: StreamWriter,
}

impl Events {
    pub fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Events {
            rx: Mutex::new(rx),
            writer: StreamWriter::new(tx),
        }
    }

    /// Custom payloads received so far.
    pub fn custom(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let mut rx = self.rx.lock();
        while let Ok(e) = rx.try_recv() {
            if let StreamEvent::Custom { payload, .. } = e {
                out.push(payload);
            }
        }
        out
    }
}

pub fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// One `save_state` call as the wrapped store answered it.
#[derive(Clone, Debug, PartialEq)]
pub struct SaveRecord {
    pub expected_version: u64,
    pub outcome: SaveOutcome,
    pub cursor: Option<Cursor>,
}

/// Wraps a session-memory store and records every save (for the concurrency checks).
pub struct RecordingStore<S> {
    pub inner: Arc<S>,
    pub saves: Mutex<Vec<SaveRecord>>,
}

impl<S> RecordingStore<S> {
    pub fn new(inner: Arc<S>) -> Self {
        RecordingStore {
            inner,
            saves: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl<S: SessionMemoryStore> SessionMemoryStore for RecordingStore<S> {
    async fn get_state(
        &self,
        scope: &SessionScope,
    ) -> Result<Option<SessionMemoryState>, StoreError> {
        self.inner.get_state(scope).await
    }

    async fn save_state(
        &self,
        scope: &SessionScope,
        state: &SessionMemoryState,
        expected_version: u64,
    ) -> Result<SaveOutcome, StoreError> {
        let outcome = self
            .inner
            .save_state(scope, state, expected_version)
            .await?;
        self.saves.lock().push(SaveRecord {
            expected_version,
            outcome: outcome.clone(),
            cursor: state.covered_until.clone(),
        });
        Ok(outcome)
    }

    async fn delete_session_states(&self, f: &str, u: &str, s: &str) -> Result<u64, StoreError> {
        self.inner.delete_session_states(f, u, s).await
    }
}

/// The parts of a state that a fold decides (timestamps excluded).
pub fn essence(s: &SessionMemoryState) -> (String, Value, Option<Cursor>, u64, u64) {
    (
        s.summary.clone(),
        Value::Object(s.pinned.clone()),
        s.covered_until.clone(),
        s.absorbed_count,
        s.version,
    )
}

/// The standard current input of a turn.
pub fn input() -> Vec<Message> {
    vec![Message::human("Which cluster were we on again?").with_id("current")]
}

/// One turn with the standard current input, folding with `model`, events dropped.
pub async fn prepare_turn(
    c: &keel_memory::SessionCompressor,
    s: &SessionScope,
    model: &Arc<ScriptedModel>,
) -> keel_memory::TurnMemory {
    c.prepare(
        s,
        &input(),
        &dyn_model(model),
        &StreamWriter::disconnected(),
    )
    .await
    .unwrap()
}
