//! The per-turn work of session memory, independent of any agent and of any backend.
//!
//! [`SessionCompressor::prepare`] runs once per turn:
//!
//! 1. load the state and the last `n_messages` stored messages (excluding the current
//!    input): the first of them is the boundary between "recent" and "older". The
//!    newest rows of each session are kept between turns and checked with one count
//!    before use (see `tail.rs`), so a turn does not read and decode them again. When
//!    this compressor recorded the turn's input, the statement that stored it also
//!    counted the rows (one round trip): if the count shows that no other writer stored
//!    rows in the session since, neither the count nor the state is read again, and the
//!    state this compressor last read or saved is used. A state another writer saved
//!    without storing rows in the session is then seen at the next turn that finds
//!    rows it did not write; a fold over a state that moved on still loses its
//!    compare-and-swap and takes the winner's state;
//! 2. count the unfolded messages older than the boundary; while there are at least
//!    `fold_batch` of them (and at most `max_folds_per_turn` times), fold up to
//!    `max_batch_messages` of them with one internal model call (a batch never ends
//!    inside a tool run);
//! 3. merge the answer, save with compare-and-swap; on a lost race, reload and use the
//!    winner's state and stop folding for this turn (no second model call);
//! 4. return `[summary message, *recent]` for the model, where `recent` is every stored
//!    message after the fold cursor: the last N plus the older messages not folded yet
//!    (fewer than `fold_batch` when folds succeed). Summary and window together cover
//!    the whole session, as the Langflow feature request (#15799) asks: no message is
//!    in neither. Dangling tool calls in the window get a synthetic cancelled result.
//!
//! A failed fold (model error, unparseable answer, storage error while saving) is an
//! event, never an error: the turn runs with the previous state.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use keel_core::message::{Message, Role};
use keel_core::model::{ChatModel, ModelErrorKind};
use keel_core::store::{
    ChatHistoryStore, Cursor, SaveOutcome, SessionMemoryState, SessionMemoryStore, SessionScope,
    StoreError, StoredMessage,
};
use keel_core::stream::StreamWriter;
use keel_core::telemetry::{self, CallPurpose, Counter};
use keel_summary::extractive::{self, ExtractiveOptions};
use keel_summary::summary_call::{
    ResponseSchema, SummaryCallError, SummaryCallOptions, SummaryCaller, SummaryModels,
};
use keel_summary::transcript::cap_chars;
use keel_summary::writer::{ModelCall, SummaryWriter, WriteError, Written};
use keel_summary::{SUMMARY_NAME, summary_message};

use crate::events::{FOLDING_MESSAGE, FoldFailed, FoldFailure, FoldSuperseded, Folded};
use crate::fold::merge::{count_words, merge};
use crate::fold::parse::{FoldOutput, parse_fold_output};
use crate::fold::{fold_prompt, fold_schema, fold_template};
use crate::settings::{SessionMemorySettings, SettingsError};
use crate::tail::TailCache;
use crate::window::provider_safe_rows;
use lru::LruCache;
use parking_lot::Mutex;

/// Sessions whose last known state is kept (as many as `tail.rs` keeps tails of).
const KNOWN_STATES: usize = 1024;

/// What one fold attempt did.
#[derive(Clone, Debug, PartialEq)]
pub enum FoldOutcome {
    /// The fold was saved.
    Folded {
        /// Messages absorbed.
        messages: usize,
        /// The version saved.
        version: u64,
    },
    /// Another run saved first; its state is used and folding stops for this turn.
    Superseded {
        /// The version this run tried to replace.
        expected_version: u64,
        /// The winner's version.
        winner_version: u64,
    },
    /// The fold failed; the previous state stays.
    Failed {
        /// What failed.
        reason: FoldFailure,
        /// The error.
        error: String,
        /// Messages the fold tried to absorb.
        messages: usize,
    },
}

/// The memory of one turn: the state and the recent window, ready to send.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnMemory {
    /// The state after this turn's folds (or the winner's, after a lost race).
    pub state: SessionMemoryState,
    /// The recent window, oldest first, provider-safe, without the current input: every
    /// stored message after the fold cursor (at most [`window_cap`] of them), with a
    /// synthetic "cancelled" result (sent, never stored) after each dangling tool call.
    pub recent: Vec<StoredMessage>,
    /// What each fold attempt of this turn did, in order.
    pub folds: Vec<FoldOutcome>,
    summary: Option<Message>,
}

impl TurnMemory {
    /// Memory that sends nothing (memory off, or nothing stored yet).
    pub fn empty() -> Self {
        TurnMemory {
            state: SessionMemoryState::default(),
            recent: Vec::new(),
            folds: Vec::new(),
            summary: None,
        }
    }

    /// The summary message, when the state holds a summary or a pinned value.
    pub fn summary_message(&self) -> Option<&Message> {
        self.summary.as_ref()
    }

    /// What the model sees before the current input: `[summary message, *recent]`.
    pub fn messages(&self) -> Vec<Message> {
        self.summary
            .iter()
            .cloned()
            .chain(self.recent.iter().map(|m| m.message.clone()))
            .collect()
    }
}

/// The text after the summary prefix: the configured pinned keys that hold a value (in
/// configured order), then the summary. `None` when there is nothing to say. Depends on
/// the state alone, so it is byte-identical on every call between two folds.
pub fn render_memory(state: &SessionMemoryState, pinned_keys: &[String]) -> Option<String> {
    let mut pinned = String::new();
    for key in pinned_keys {
        if let Some(value) = state.pinned.get(key) {
            let value = match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            // One line per key: a value cannot add lines (or fake entries) of its own.
            let value: String = value
                .split(|c: char| c.is_control())
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            pinned.push_str(&format!("- {key}: {value}\n"));
        }
    }
    let summary = state.summary.trim();
    match (pinned.is_empty(), summary.is_empty()) {
        (true, true) => None,
        (false, true) => Some(format!("Pinned:\n{}", pinned.trim_end())),
        (true, false) => Some(summary.to_owned()),
        (false, false) => Some(format!("Pinned:\n{pinned}\nSummary:\n{summary}")),
    }
}

/// The message with its text cut to `max_chars` (head and tail kept), as the model fold's
/// transcript would show it; tool calls and ids are unchanged.
fn cap_message(message: &Message, max_chars: usize) -> Message {
    let text = message.text();
    if text.chars().count() <= max_chars {
        return message.clone();
    }
    let mut out = message.clone();
    let capped = cap_chars(&text, max_chars);
    match out.body_mut() {
        keel_core::message::MessageBody::System(m) => m.content = capped.into(),
        keel_core::message::MessageBody::Human(m) => m.content = capped.into(),
        keel_core::message::MessageBody::Ai(m) => m.content = capped.into(),
        keel_core::message::MessageBody::Tool(m) => m.content = capped.into(),
    }
    out
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The most messages the recent window holds: `n_messages` plus the unfolded older
/// messages, which stay below `fold_batch` while folds succeed (one turn may add up to
/// `max_batch_messages` more before its folds run). Past this, folds have been failing
/// for a while: the oldest unfolded messages are left out, with a warning.
pub fn window_cap(settings: &SessionMemorySettings) -> usize {
    settings
        .n_messages
        .saturating_add(settings.fold_batch)
        .saturating_add(settings.max_batch_messages)
}

/// The stored messages after the fold cursor (without the current input), the boundary
/// (older than it may be folded), and whether the window holds every stored message
/// after the cursor.
struct RecentWindow {
    window: Vec<StoredMessage>,
    boundary: Option<Cursor>,
    complete: bool,
}

/// A failed fold of `count` messages over the state at `version`: reported as an event
/// and a warning; the turn uses the previous state.
fn fold_failed(
    reason: FoldFailure,
    error: String,
    count: usize,
    version: u64,
    writer: &StreamWriter,
) -> Step {
    FoldFailed::new(reason, error.clone(), count, version).emit(writer);
    tracing::warn!(?reason, %error, messages = count, "session memory fold failed; the turn uses the previous state");
    Step::Failed(reason, error, count)
}

/// The output token cap of a fold call: the word budget at two tokens a word, plus room
/// for the pinned keys and the JSON around them. A small local model without a cap can
/// generate past every timeout.
pub fn fold_output_cap(settings: &SessionMemorySettings) -> u32 {
    let tokens = settings
        .summary_word_budget
        .saturating_mul(2)
        .saturating_add(settings.pinned_keys.len().saturating_mul(48))
        .saturating_add(128);
    u32::try_from(tokens).unwrap_or(u32::MAX)
}

/// The storage-agnostic session compressor. See the [module docs](self).
pub struct SessionCompressor {
    settings: Arc<SessionMemorySettings>,
    history: Arc<dyn ChatHistoryStore>,
    states: Arc<dyn SessionMemoryStore>,
    summary_model: Option<Arc<dyn ChatModel>>,
    caller: Arc<SummaryCaller>,
    template: String,
    /// The fold answer's JSON schema, sent where the provider takes `response_format`.
    schema: ResponseSchema,
    engine: FoldEngine,
    /// The newest rows of recent sessions (checked against the store before use).
    tails: Arc<TailCache>,
    /// The state each recent session had when this compressor last read or saved it.
    known: Arc<Mutex<LruCache<SessionScope, SessionMemoryState>>>,
}

/// What writes the summary of a fold; with the summary model, it says which
/// [`SummaryWriter`] folds go through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FoldEngine {
    /// One internal model call per fold (the summary model, else the run's model).
    #[default]
    Model,
    /// keel-summary's deterministic extractive summarizer (the one transient
    /// summarization uses offline): no model, no network, same input same output.
    /// Pinned keys keep their values (no model extracts them). For offline use
    /// (`keel replay`, examples, tests of the surrounding system).
    Extractive,
}

/// The `summary_model` recorded for extractive folds.
pub const EXTRACTIVE_MODEL_NAME: &str = "extractive";

impl std::fmt::Debug for SessionCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCompressor")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

enum Step {
    Folded(SessionMemoryState, usize),
    Superseded(SessionMemoryState, u64),
    Failed(FoldFailure, String, usize),
}

impl SessionCompressor {
    /// A compressor over these stores. Validates the settings.
    pub fn new(
        settings: SessionMemorySettings,
        history: Arc<dyn ChatHistoryStore>,
        states: Arc<dyn SessionMemoryStore>,
    ) -> Result<Self, SettingsError> {
        settings.validate()?;
        let template = fold_template(&settings.pinned_keys, settings.summary_word_budget);
        let schema = fold_schema(&settings.pinned_keys);
        // Room for the whole window plus a turn's own messages.
        let tail_rows = window_cap(&settings).saturating_add(64);
        Ok(SessionCompressor {
            settings: Arc::new(settings),
            history,
            states,
            summary_model: None,
            caller: Arc::new(SummaryCaller::new(SummaryCallOptions::default())),
            template,
            schema,
            engine: FoldEngine::Model,
            tails: Arc::new(TailCache::new(tail_rows)),
            known: Arc::new(Mutex::new(LruCache::new(
                NonZeroUsize::new(KNOWN_STATES).unwrap_or(NonZeroUsize::MIN),
            ))),
        })
    }

    /// Folds with this model first, falling back to the run's model when it fails.
    pub fn with_summary_model(mut self, model: Arc<dyn ChatModel>) -> Self {
        self.summary_model = Some(model);
        self
    }

    /// Uses this summary caller (retries, timeout, circuit breaker); share one per
    /// process with the summarization middleware so a failing model is paused for both.
    pub fn with_summary_caller(mut self, caller: Arc<SummaryCaller>) -> Self {
        self.caller = caller;
        self
    }

    /// Chooses what writes fold summaries (default [`FoldEngine::Model`]).
    pub fn with_engine(mut self, engine: FoldEngine) -> Self {
        self.engine = engine;
        self
    }

    /// The settings.
    pub fn settings(&self) -> &SessionMemorySettings {
        &self.settings
    }

    /// The state store.
    pub fn states(&self) -> &Arc<dyn SessionMemoryStore> {
        &self.states
    }

    /// The chat history store.
    pub fn history(&self) -> &Arc<dyn ChatHistoryStore> {
        &self.history
    }

    /// Runs one turn's memory work for `scope`. `current` is the current input (and any
    /// messages of this turn so far): it is excluded from the recent window even when it
    /// is already stored. `run_model` folds when no summary model is set, and is the
    /// fallback when it is. Fold events go to `writer`.
    ///
    /// Errors only when the history or the state cannot be read; a failed fold is
    /// reported in [`TurnMemory::folds`] and as an event.
    pub async fn prepare(
        &self,
        scope: &SessionScope,
        current: &[Message],
        run_model: &Arc<dyn ChatModel>,
        writer: &StreamWriter,
    ) -> Result<TurnMemory, StoreError> {
        let n = self.settings.n_messages;
        if n == 0 {
            return Ok(TurnMemory::empty());
        }
        let current_ids: HashSet<&str> = current.iter().map(Message::id).collect();
        // The record of this turn's input proved that only this compressor wrote to
        // the session since its last turn: the kept tail and state are current.
        let confirmed = self.tails.take_confirmed(scope, &current_ids);
        let known = if confirmed {
            self.known.lock().get(scope).cloned()
        } else {
            None
        };
        let turn = self
            .turn(scope, known, confirmed, &current_ids, run_model, writer)
            .await;
        match &turn {
            Ok((state, _, _)) => {
                self.known.lock().put(scope.clone(), state.clone());
            }
            Err(_) => {
                self.known.lock().pop(scope);
            }
        }
        let (state, recent, folds) = turn?;
        let recent = self.unfolded(recent.window, &state);
        let summary =
            render_memory(&state, &self.settings.pinned_keys).map(|t| summary_message(&t));
        Ok(TurnMemory {
            state,
            recent,
            folds,
            summary,
        })
    }

    /// The state (`known`, else read), the recent window and the folds of a turn.
    async fn turn(
        &self,
        scope: &SessionScope,
        known: Option<SessionMemoryState>,
        confirmed: bool,
        current_ids: &HashSet<&str>,
        run_model: &Arc<dyn ChatModel>,
        writer: &StreamWriter,
    ) -> Result<(SessionMemoryState, RecentWindow, Vec<FoldOutcome>), StoreError> {
        // Read one after the other: reading both at once on two pool connections was
        // measured no faster (docs/benchmarks.md, session-memory replay).
        let usual = self.usual_window(current_ids);
        let mut state = match known {
            Some(state) => state,
            None => self.states.get_state(scope).await?.unwrap_or_default(),
        };
        let fetched = self.newest(scope, usual, confirmed).await?;
        let recent = self
            .recent_window(
                scope,
                fetched,
                current_ids,
                state.covered_until.as_ref(),
                confirmed,
            )
            .await?;
        let folds = self
            .fold_turn(scope, &mut state, &recent, current_ids, run_model, writer)
            .await?;
        Ok((state, recent, folds))
    }

    /// This turn's folds: up to `max_folds_per_turn`, each of a batch of at least
    /// `fold_batch` messages before the window's boundary, moving `state` on. Stops at
    /// the first fold that is superseded (then `state` is the winner's) or fails.
    async fn fold_turn(
        &self,
        scope: &SessionScope,
        state: &mut SessionMemoryState,
        recent: &RecentWindow,
        current_ids: &HashSet<&str>,
        run_model: &Arc<dyn ChatModel>,
        writer: &StreamWriter,
    ) -> Result<Vec<FoldOutcome>, StoreError> {
        let RecentWindow {
            window: fetched,
            boundary,
            complete,
        } = recent;
        let mut folds = Vec::new();
        for _ in 0..self.settings.max_folds_per_turn {
            let cursor = state.covered_until.as_ref();
            let eligible = if *complete {
                fetched
                    .iter()
                    .filter(|m| cursor.is_none_or(|c| m.cursor() > *c))
                    .filter(|m| boundary.as_ref().is_some_and(|b| m.cursor() < *b))
                    .count() as u64
            } else {
                self.eligible(scope, cursor, boundary.as_ref()).await?
            };
            if eligible < self.settings.fold_batch as u64 {
                break;
            }
            let limit = usize::try_from(eligible)
                .unwrap_or(usize::MAX)
                .min(self.settings.max_batch_messages);
            let batch = self
                .batch(
                    scope,
                    state.covered_until.as_ref(),
                    boundary.as_ref(),
                    current_ids,
                    limit,
                )
                .await?;
            if batch.len() < self.settings.fold_batch {
                break;
            }
            // Its summary calls are `chat` spans labelled `fold`.
            let fold = self.fold(scope, state, &batch, run_model, writer);
            match telemetry::with_purpose(CallPurpose::Fold, fold).await {
                Step::Folded(next, messages) => {
                    telemetry::count(Counter::Folds, 1);
                    folds.push(FoldOutcome::Folded {
                        messages,
                        version: next.version,
                    });
                    *state = next;
                }
                Step::Superseded(winner, expected_version) => {
                    folds.push(FoldOutcome::Superseded {
                        expected_version,
                        winner_version: winner.version,
                    });
                    *state = winner;
                    break;
                }
                Step::Failed(reason, error, messages) => {
                    folds.push(FoldOutcome::Failed {
                        reason,
                        error,
                        messages,
                    });
                    break;
                }
            }
        }
        Ok(folds)
    }

    /// The rows sent verbatim: everything in `fetched` after the (possibly moved)
    /// cursor, since what this turn or a winner with other settings folded is not; at
    /// most [`window_cap`] of them (the newest), made safe for a provider.
    fn unfolded(
        &self,
        fetched: Vec<StoredMessage>,
        state: &SessionMemoryState,
    ) -> Vec<StoredMessage> {
        let mut window: Vec<StoredMessage> = fetched
            .into_iter()
            .filter(|m| state.covered_until.as_ref().is_none_or(|c| m.cursor() > *c))
            .collect();
        let cap = window_cap(&self.settings);
        if window.len() > cap {
            tracing::warn!(
                left_out = window.len() - cap,
                cap,
                "session memory: more unfolded messages than the window holds (are folds failing?); the oldest are left out until a fold absorbs them"
            );
            window.drain(..window.len() - cap);
        }
        provider_safe_rows(window)
    }

    /// The newest `n` stored messages of the scope, oldest first, as `last_n` reads
    /// them: from the kept tail when it is `confirmed` (see [`TailCache::take_confirmed`])
    /// or one count query proves it current, else from the store (and then kept).
    async fn newest(
        &self,
        scope: &SessionScope,
        n: usize,
        confirmed: bool,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        if confirmed
            && n <= self.tails.max_rows()
            && let Some(rows) = self.tails.confirmed_newest(scope, n)
        {
            return Ok(rows);
        }
        if n <= self.tails.max_rows()
            && let Some(check) = self.tails.check(scope, n)
        {
            let count = self
                .history
                .count_after(scope, check.after.as_ref())
                .await?;
            if count == check.expected
                && let Some(rows) = self.tails.newest(scope, &check, n)
            {
                return Ok(rows);
            }
        }
        let rows = self.history.last_n(scope, n).await?;
        self.tails.put(scope, &rows, n);
        Ok(rows)
    }

    /// The most rows the window reads: the cap, one more (to tell whether the cap cut
    /// anything) and the current messages, which may be stored already.
    fn whole_window(&self, current_ids: &HashSet<&str>) -> usize {
        window_cap(&self.settings).saturating_add(1 + current_ids.len())
    }

    /// The rows the window reads first. Folds usually keep up, leaving at most
    /// n + fold_batch messages after the cursor: read that many (each row is parsed,
    /// every turn) and the whole window only when every row read lies after the cursor.
    fn usual_window(&self, current_ids: &HashSet<&str>) -> usize {
        self.settings
            .n_messages
            .saturating_add(self.settings.fold_batch)
            .saturating_add(1 + current_ids.len())
            .min(self.whole_window(current_ids))
    }

    /// The stored messages after the cursor, without the current input (the newest
    /// [`window_cap`] + 1 of them: the extra one tells whether the cap cut anything),
    /// and the boundary: the first of the last `n_messages` of them (else the first
    /// stored current message). Older than the boundary means eligible for folding.
    /// `fetched` holds the newest [`Self::usual_window`] rows, read by the caller.
    async fn recent_window(
        &self,
        scope: &SessionScope,
        mut fetched: Vec<StoredMessage>,
        current_ids: &HashSet<&str>,
        covered_until: Option<&Cursor>,
        confirmed: bool,
    ) -> Result<RecentWindow, StoreError> {
        let n = self.settings.n_messages;
        let want = self.whole_window(current_ids);
        let usual = self.usual_window(current_ids);
        let complete = fetched.len() < usual
            || covered_until.is_some_and(|c| {
                fetched
                    .iter()
                    .find(|m| !current_ids.contains(m.message.id()))
                    .is_some_and(|m| m.cursor() <= *c)
            });
        if !complete && usual < want {
            fetched = self.newest(scope, want, confirmed).await?;
        }
        // Holding every stored message after the cursor, the window can count what a
        // fold may take itself (no COUNT queries per turn).
        let complete = complete
            || fetched.len() < want
            || covered_until.is_some_and(|c| {
                fetched
                    .iter()
                    .find(|m| !current_ids.contains(m.message.id()))
                    .is_some_and(|m| m.cursor() <= *c)
            });
        let first_current = fetched
            .iter()
            .find(|m| current_ids.contains(m.message.id()))
            .map(StoredMessage::cursor);
        let window: Vec<StoredMessage> = fetched
            .into_iter()
            .filter(|m| !current_ids.contains(m.message.id()))
            .filter(|m| covered_until.is_none_or(|c| m.cursor() > *c))
            .collect();
        let boundary = window
            .get(window.len().saturating_sub(n))
            .map(StoredMessage::cursor)
            .or(first_current);
        Ok(RecentWindow {
            window,
            boundary,
            complete,
        })
    }

    /// Up to `limit` messages after the cursor and before the boundary, oldest first,
    /// never ending inside a tool run: a batch that would end between an AI message's
    /// calls and their results ends before that AI message instead (or, when the batch
    /// is all one run, takes the rest of the run).
    async fn batch(
        &self,
        scope: &SessionScope,
        cursor: Option<&Cursor>,
        boundary: Option<&Cursor>,
        current_ids: &HashSet<&str>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let mut fetched = self
            .history
            .after(scope, cursor, limit.saturating_add(1))
            .await?
            .into_iter();
        let mut batch: Vec<StoredMessage> = Vec::with_capacity(limit);
        let mut next = None;
        for m in fetched.by_ref() {
            if batch.len() < limit
                && boundary.is_none_or(|b| m.cursor() < *b)
                && !current_ids.contains(m.message.id())
            {
                batch.push(m);
            } else {
                next = Some(m);
                break;
            }
        }
        if !next.as_ref().is_some_and(|m| m.message.is_tool()) {
            return Ok(batch);
        }
        // The message after the batch continues a tool run opened inside the batch.
        let mut k = batch.len();
        while k > 0 && batch[k - 1].message.is_tool() {
            k -= 1;
        }
        if k > 0 && batch[k - 1].message.tool_calls().is_empty() {
            // Results without their call (an old, split history): nothing to keep together.
            return Ok(batch);
        }
        let run_start = k.saturating_sub(1);
        if run_start > 0 {
            batch.truncate(run_start);
            return Ok(batch);
        }
        // All one run: take the rest of it, past the boundary if need be, but only once
        // it is closed (a later message that is not a result): results still to come
        // would otherwise land after the cursor without their call.
        let mut pending = next;
        while let Some(m) = pending.take() {
            if !m.message.is_tool() {
                return Ok(batch);
            }
            let from = m.cursor();
            batch.push(m);
            pending = fetched.next();
            if pending.is_none() {
                fetched = self
                    .history
                    .after(scope, Some(&from), 64)
                    .await?
                    .into_iter();
                pending = fetched.next();
            }
        }
        Ok(Vec::new())
    }

    /// Unfolded messages strictly between the cursor and the boundary.
    async fn eligible(
        &self,
        scope: &SessionScope,
        cursor: Option<&Cursor>,
        boundary: Option<&Cursor>,
    ) -> Result<u64, StoreError> {
        match boundary {
            None => self.history.count_after(scope, cursor).await,
            Some(b) if cursor.is_some_and(|c| c >= b) => Ok(0),
            Some(b) => {
                let after_cursor = self.history.count_after(scope, cursor).await?;
                let from_boundary = self.history.count_after(scope, Some(b)).await? + 1;
                Ok(after_cursor.saturating_sub(from_boundary))
            }
        }
    }

    /// Forgets the kept tails and states of every context of the scope's session.
    fn forget_session(&self, scope: &SessionScope) {
        self.tails
            .forget_session(&scope.flow_id, &scope.user_id, &scope.session_id);
        let mut known = self.known.lock();
        let doomed: Vec<SessionScope> = known
            .iter()
            .map(|(s, _)| s)
            .filter(|s| {
                s.flow_id == scope.flow_id
                    && s.user_id == scope.user_id
                    && s.session_id == scope.session_id
            })
            .cloned()
            .collect();
        for s in doomed {
            known.pop(&s);
        }
    }

    fn breaker_key(scope: &SessionScope) -> String {
        format!(
            "session-memory\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{}",
            scope.flow_id, scope.user_id, scope.session_id, scope.context_id
        )
    }

    async fn fold(
        &self,
        scope: &SessionScope,
        state: &SessionMemoryState,
        batch: &[StoredMessage],
        run_model: &Arc<dyn ChatModel>,
        writer: &StreamWriter,
    ) -> Step {
        let summarizer = self.writer();
        let batch = match summarizer.models(run_model) {
            Some(models) => self.fit_batch(state, batch, &models),
            None => batch,
        };
        let count = batch.len();
        let Some(last) = batch.last().map(StoredMessage::cursor) else {
            return Step::Failed(FoldFailure::Model, "empty batch".into(), 0);
        };
        let messages: Vec<Message> = batch.iter().map(|m| m.message.clone()).collect();
        let written = self
            .write_fold(&summarizer, scope, state, &messages, run_model, writer)
            .await;
        let (parsed, model_name) = match written {
            Ok(done) => done,
            Err((reason, error)) => {
                return fold_failed(reason, error, count, state.version, writer);
            }
        };
        let (pinned, summary) = merge(
            &state.pinned,
            &state.summary,
            &parsed,
            &self.settings.pinned_keys,
            self.settings.summary_word_budget,
        );
        let next = SessionMemoryState {
            summary,
            pinned,
            covered_until: Some(last),
            absorbed_count: state.absorbed_count + count as u64,
            summary_model: Some(model_name.clone()),
            version: state.version,
            created_at_ms: state.created_at_ms,
            updated_at_ms: now_ms(),
        };
        self.save_fold(scope, state, next, count, model_name, writer)
            .await
    }

    /// The extractive fold of `messages` over `state`: the summary with the previous
    /// one folded in, and the pinned values the messages state recognisably. The error
    /// when there is nothing to keep and no previous summary.
    fn extractive_fold(
        &self,
        state: &SessionMemoryState,
        messages: &[Message],
    ) -> Result<FoldOutput, String> {
        let options = ExtractiveOptions {
            word_budget: self.settings.summary_word_budget,
            ..ExtractiveOptions::default()
        };
        let previous = Some(state.summary.as_str()).filter(|p| !p.trim().is_empty());
        let capped: Vec<Message> = messages
            .iter()
            .map(|m| cap_message(m, self.settings.max_message_chars))
            .collect();
        let summary = extractive::summarize(previous, &capped, &options);
        // Pinned keys the batch states recognisably (`ticket TCK-7`, `we moved
        // to eu-west-1`), newest wins; the ones still empty are reported, a model fills them when
        // configured.
        // A correction naming no key ("eu-central-1 instead") replaces a pinned
        // value of the same shape, so the current values are passed in.
        let current: Vec<(String, String)> = state
            .pinned
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
            .collect();
        let values = extractive::pinned_values_after(&self.settings.pinned_keys, &current, &capped);
        let unfilled: Vec<&String> = values
            .missing
            .iter()
            .filter(|k| !state.pinned.contains_key(*k))
            .collect();
        if !unfilled.is_empty() {
            tracing::info!(keys = ?unfilled, "the extractive fold found no value for these pinned keys; a summary model fills them when configured");
        }
        let pinned: serde_json::Map<String, serde_json::Value> = values
            .found
            .into_iter()
            .map(|(k, v)| (k, serde_json::Value::String(v)))
            .collect();
        let output = FoldOutput {
            pinned: Some(pinned).filter(|p| !p.is_empty()),
            summary: Some(summary).filter(|s| !s.trim().is_empty()),
        };
        if output.summary.is_none() && previous.is_none() {
            return Err("the extractive summarizer found nothing to keep".into());
        }
        Ok(output)
    }

    /// Saves the folded state `next` (of `count` messages, written by `model_name`)
    /// over `state`, and reports it: folded, superseded by a concurrent fold that saved
    /// first, or failed.
    async fn save_fold(
        &self,
        scope: &SessionScope,
        state: &SessionMemoryState,
        mut next: SessionMemoryState,
        count: usize,
        model_name: String,
        writer: &StreamWriter,
    ) -> Step {
        let failed = |reason: FoldFailure, error: String| {
            fold_failed(reason, error, count, state.version, writer)
        };
        match self.states.save_state(scope, &next, state.version).await {
            Ok(SaveOutcome::Saved { version }) => {
                next.version = version;
                Folded {
                    kind: crate::events::EVENT_FOLDED.to_owned(),
                    messages: count,
                    absorbed_count: next.absorbed_count,
                    version,
                    summary_words: count_words(&next.summary),
                    pinned_keys: self
                        .settings
                        .pinned_keys
                        .iter()
                        .filter(|k| next.pinned.contains_key(*k))
                        .cloned()
                        .collect(),
                    summary_model: model_name,
                    current_values: keel_summary::extractive::current_values(&next.summary),
                }
                .emit(writer);
                Step::Folded(next, count)
            }
            Ok(SaveOutcome::Conflict) => match self.states.get_state(scope).await {
                Ok(Some(winner)) => {
                    FoldSuperseded {
                        kind: crate::events::EVENT_FOLD_SUPERSEDED.to_owned(),
                        expected_version: state.version,
                        winner_version: winner.version,
                    }
                    .emit(writer);
                    Step::Superseded(winner, state.version)
                }
                Ok(None) => failed(
                    FoldFailure::Store,
                    "the save lost a race, then the state was gone (session deleted?)".into(),
                ),
                Err(e) => failed(FoldFailure::Store, e.to_string()),
            },
            Err(e) => failed(FoldFailure::Store, e.to_string()),
        }
    }

    /// The longest prefix of `batch` whose fold prompt fits the summary model's context
    /// window (when its profile knows it), ending before a message that is not a tool
    /// result so no tool run is split. What is left out is folded by a later fold:
    /// cutting messages out of the prompt instead would advance the cursor past
    /// messages no summary ever read.
    fn fit_batch<'b>(
        &self,
        state: &SessionMemoryState,
        batch: &'b [StoredMessage],
        models: &SummaryModels,
    ) -> &'b [StoredMessage] {
        let Some(window) = models.primary.profile().max_input_tokens else {
            return batch;
        };
        let budget_chars =
            usize::try_from(window.saturating_sub(u64::from(fold_output_cap(&self.settings))))
                .unwrap_or(usize::MAX)
                .saturating_mul(3);
        let fits = |len: usize| {
            let messages: Vec<Message> = batch[..len]
                .iter()
                .map(|m| cap_message(&m.message, self.settings.max_message_chars))
                .collect();
            fold_prompt(
                &self.template,
                state,
                &messages,
                self.settings.max_message_chars,
            )
            .is_ok_and(|p| p.render().len() <= budget_chars)
        };
        let mut len = batch.len();
        while len > 1 && !fits(len) {
            let mut next = len - len.div_ceil(4);
            while next > 1 && batch[next].message.is_tool() {
                next -= 1;
            }
            len = next.max(1);
        }
        if len < batch.len() {
            tracing::warn!(
                window,
                folded = len,
                of = batch.len(),
                "session memory: fold batch shortened to fit the summary model's context window"
            );
        }
        &batch[..len]
    }

    /// Who writes this compressor's folds.
    fn writer(&self) -> SummaryWriter {
        match self.engine {
            FoldEngine::Model => SummaryWriter::Model(self.summary_model.clone()),
            FoldEngine::Extractive => SummaryWriter::Extractive,
        }
    }

    /// The fold's summary, written by `summarizer`, with the name recorded for who
    /// wrote it. A model answer goes through the shared summary caller with a check
    /// that it parses, so an unparseable answer counts as a failed attempt (and the
    /// fallback model gets its turn).
    async fn write_fold(
        &self,
        summarizer: &SummaryWriter,
        scope: &SessionScope,
        state: &SessionMemoryState,
        messages: &[Message],
        run_model: &Arc<dyn ChatModel>,
        writer: &StreamWriter,
    ) -> Result<(FoldOutput, String), (FoldFailure, String)> {
        let has_previous_summary = !state.summary.trim().is_empty();
        let unparseable = AtomicBool::new(false);
        let check = |text: &str| -> Result<(), String> {
            let result = match parse_fold_output(text) {
                Err(e) => Err(e.to_string()),
                Ok(out) if out.summary.is_none() && !has_previous_summary => {
                    Err("the answer has no summary and there is no previous summary to keep".into())
                }
                Ok(_) => Ok(()),
            };
            if result.is_err() {
                unparseable.store(true, Ordering::Relaxed);
            }
            result
        };
        let key = Self::breaker_key(scope);
        let call = ModelCall {
            check: Some(&check),
            max_output_tokens: Some(fold_output_cap(&self.settings)),
            schema: Some(&self.schema),
            announce: Some((FOLDING_MESSAGE, writer)),
            ..ModelCall::new(&self.caller, &key, run_model)
        };
        let prompt = || {
            fold_prompt(
                &self.template,
                state,
                messages,
                self.settings.max_message_chars,
            )
        };
        let extract = || self.extractive_fold(state, messages);
        match summarizer.write(call, prompt, extract).await {
            Ok(Written::Extracted(Ok(output))) => Ok((output, EXTRACTIVE_MODEL_NAME.to_owned())),
            Ok(Written::Extracted(Err(error))) => Err((FoldFailure::Model, error)),
            Ok(Written::Model(output)) => {
                let parsed = parse_fold_output(&output.text)
                    .map_err(|e| (FoldFailure::Unparseable, e.to_string()))?;
                Ok((parsed, output.model))
            }
            Err(WriteError::Prompt(e)) => Err((FoldFailure::Model, e.to_string())),
            Err(WriteError::Call(e)) => {
                let reason = match &e {
                    SummaryCallError::Failed {
                        kind: Some(ModelErrorKind::MalformedResponse),
                        ..
                    } if unparseable.load(Ordering::Relaxed) => FoldFailure::Unparseable,
                    _ => FoldFailure::Model,
                };
                Err((reason, e.to_string()))
            }
        }
    }

    /// Appends the messages of a turn to the chat history, skipping those already stored
    /// (by id, with [`ChatHistoryStore::append_new`], so a retried or concurrent turn is
    /// a no-op rather than an error), system messages, summary messages and messages
    /// without an id. Stored timestamps are strictly increasing in list order (never
    /// earlier than the newest stored message), so `(timestamp, id)` order is the
    /// conversation order even when ids do not sort. Returns how many were appended.
    pub async fn record(
        &self,
        scope: &SessionScope,
        messages: &[Message],
    ) -> Result<usize, StoreError> {
        let candidates: Vec<&Message> = messages
            .iter()
            .filter(|m| m.role() != Role::System && m.name() != Some(SUMMARY_NAME))
            .filter(|m| !m.id().is_empty())
            .collect();
        if candidates.is_empty() {
            return Ok(0);
        }
        let mut seen = HashSet::new();
        // A list may hold one id twice (a message replaced in place is still one).
        let rows: Vec<Message> = candidates
            .into_iter()
            .filter(|m| seen.insert(m.id()))
            .cloned()
            .collect();
        let recorded: HashSet<String> = seen.into_iter().map(str::to_owned).collect();
        // Stamped after the newest stored row by the store, in the same statement. With
        // a kept tail, the rows after its oldest are counted in the same round trip.
        let check = self.tails.check(scope, 0);
        let (stored, counted) = match &check {
            Some(check) => {
                let (stored, n) = self
                    .history
                    .append_stamped_counting(scope, &rows, now_ms(), check.after.as_ref())
                    .await?;
                (stored, Some(n))
            }
            None => (
                self.history.append_stamped(scope, &rows, now_ms()).await?,
                None,
            ),
        };
        let count = stored.len();
        // The positions come back oldest first, which is list order: the stored rows are
        // the messages of the list whose id comes next, moved rather than copied.
        let mut positions = stored.into_iter().peekable();
        let stored: Vec<StoredMessage> = rows
            .into_iter()
            .filter_map(|message| {
                let at = positions.next_if(|c| c.message_id == message.id())?;
                Some(StoredMessage {
                    timestamp_ms: at.timestamp_ms,
                    message,
                })
            })
            .collect();
        match (check, counted) {
            (Some(check), Some(n)) => {
                self.tails
                    .append_counted(scope, stored, recorded, &check, n);
            }
            _ => self.tails.append(scope, stored),
        }
        Ok(count)
    }

    /// Deletes everything session memory stored for the scope's session, in every
    /// context: its chat history and its state (summary, pinned keys). Call it wherever
    /// a session is deleted; returns how many rows went.
    pub async fn delete_session(&self, scope: &SessionScope) -> Result<u64, StoreError> {
        self.forget_session(scope);
        let history = self
            .history
            .delete_session_history(&scope.flow_id, &scope.user_id, &scope.session_id)
            .await?;
        // Again: a turn may have read the session back in meanwhile.
        self.forget_session(scope);
        let states = self
            .states
            .delete_session_states(&scope.flow_id, &scope.user_id, &scope.session_id)
            .await?;
        Ok(history + states)
    }
}
