//! What the SQL backends share: the queries both dialects accept, encoding of rows, and
//! [`SqlStore`], which implements every storage trait once for any [`Dialect`] (a sqlx
//! database plus the little that differs). Only statements that write JSON differ between
//! SQLite and PostgreSQL; each dialect passes those in its [`Queries`].
//!
//! The trait implementations live in [`checkpoint`] (the [`Checkpointer`]) and
//! [`session`] (chat history, session memory and the summary cache).
//!
//! [`Checkpointer`]: keel_core::store::Checkpointer

use keel_core::message::Message;
use keel_core::store::{
    Checkpoint, Cursor, SessionMemoryState, SessionScope, StoreError, StoredMessage,
};
use serde_json::{Map, Value};
use sqlx::database::HasStatementCache;
use sqlx::query::QueryAs;
use sqlx::{
    ColumnIndex, Database, Decode, Encode, Executor, FromRow, IntoArguments, Pool, Transaction,
    Type,
};

use crate::check;

mod checkpoint;
mod session;

/// The statements whose text differs between dialects (all write JSON columns, which
/// PostgreSQL types as `JSON` and SQLite keeps as `TEXT`).
pub struct Queries {
    /// `$1..$4` scope, `$5` message id, `$6` timestamp, `$7` role, `$8` body JSON.
    pub append: &'static str,
    /// As `append`, skipping an id already stored in the scope.
    pub append_new: &'static str,
    /// Session memory's record in one statement: `$1..$4` scope, `$5` the earliest
    /// timestamp, then `(message id, offset, role, body JSON)` per row in place of
    /// `{rows}` (see [`stamped`]); stamps the rows after the newest stored one, skips
    /// stored ids and returns `(message_id, timestamp_ms)` of the rows stored.
    pub append_stamped: &'static str,
    /// `$1..$4` scope, `$5` summary, `$6` pinned JSON, `$7` cursor id, `$8` cursor
    /// timestamp, `$9` absorbed, `$10` model, `$11` version, `$12` created, `$13` updated.
    pub insert_state: &'static str,
    /// As `insert_state` for `$1..$11`, `$12` updated, `$13` expected version.
    pub update_state: &'static str,
    /// `$1` key, `$2` value JSON, `$3` updated.
    pub put_summary: &'static str,
    /// The live entry of a message: `$1` thread, `$2` message id; returns `(position,
    /// added_seq)`. It must use the `checkpoint_entries_live` index: a checkpoint write
    /// runs it once per message, so walking the thread's entries instead makes a step of
    /// `n` new messages cost `n` times the thread's length.
    pub entry_live: &'static str,
}

/// A statement filtered by the full scope `$1..$4`, the only way chat history is read.
macro_rules! scoped {
    ($head:literal, $tail:literal) => {
        concat!(
            $head,
            " WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4",
            $tail
        )
    };
}

/// The newest rows of a scope, newest first; the caller appends the row count. The
/// count is written into the statement rather than bound: SQLite treats a bound
/// `LIMIT` as a constant of the prepared plan, so a statement stepped with another
/// limit than last time's is parsed and planned again (`sqlite3Reprepare`), and session
/// memory asks for a different number of rows from one call to the next (the newest
/// one when recording, a window that depends on the turn's length). One statement per
/// distinct count stays in the connection's statement cache instead.
pub(crate) const LAST_N_UNLIMITED: &str = scoped!(
    "SELECT timestamp_ms, CAST(body AS TEXT) AS body FROM chat_messages",
    " ORDER BY timestamp_ms DESC, message_id DESC LIMIT "
);
pub(crate) const AFTER_START: &str = scoped!(
    "SELECT timestamp_ms, CAST(body AS TEXT) AS body FROM chat_messages",
    " ORDER BY timestamp_ms, message_id LIMIT $5"
);
pub(crate) const AFTER_CURSOR: &str = scoped!(
    "SELECT timestamp_ms, CAST(body AS TEXT) AS body FROM chat_messages",
    " AND (timestamp_ms, message_id) > ($5, $6) ORDER BY timestamp_ms, message_id LIMIT $7"
);
pub(crate) const MESSAGE_EXISTS: &str = scoped!(
    "SELECT timestamp_ms FROM chat_messages",
    " AND message_id = $5"
);

/// Rows per chat-history INSERT: 8 parameters each, well under SQLite's limit of 32,766
/// parameters a statement (and PostgreSQL's 65,535).
pub(crate) const APPEND_ROWS_PER_STATEMENT: usize = 500;

/// `query` (an `INSERT ... VALUES (<one row with $1..$k>) [rest]`) for `rows` rows: the
/// row tuple repeated with its parameters renumbered (`$1..$k`, `$k+1..$2k`, ...).
pub fn multi_row(query: &str, rows: usize) -> String {
    let Some(start) = query.find("VALUES (").map(|i| i + "VALUES ".len()) else {
        return query.to_owned();
    };
    // The tuple ends at the parenthesis that closes the one it opens with.
    let mut depth = 0usize;
    let mut end = start;
    for (i, c) in query[start..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    end = start + i + 1;
                    break;
                }
            }
            _ => {}
        }
    }
    let tuple = &query[start..end];
    let params = tuple.matches('$').count();
    let mut out = String::with_capacity(query.len() + rows * (tuple.len() + 16));
    out.push_str(&query[..start]);
    for row in 0..rows {
        if row > 0 {
            out.push_str(", ");
        }
        let mut rest = tuple;
        while let Some(d) = rest.find('$') {
            out.push_str(&rest[..=d]);
            rest = &rest[d + 1..];
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            let n: usize = rest[..digits].parse().unwrap_or(0);
            out.push_str(&(n + row * params).to_string());
            rest = &rest[digits..];
        }
        out.push_str(rest);
    }
    out.push_str(&query[end..]);
    out
}

/// `query` (an [`Queries::append_stamped`]) for `rows` rows: `{rows}` becomes the row
/// tuples `($6, $7, $8, $9), ($10, ...)`.
pub(crate) fn stamped(query: &str, rows: usize) -> String {
    let mut tuples = String::with_capacity(rows * 24);
    for row in 0..rows {
        if row > 0 {
            tuples.push_str(", ");
        }
        let p = 6 + 4 * row;
        tuples.push_str(&format!("(${}, ${}, ${}, ${})", p, p + 1, p + 2, p + 3));
    }
    query.replacen("{rows}", &tuples, 1)
}

/// The part of [`Queries::append_stamped`] both dialects share, around the dialect's
/// greatest-of-two function (`$greatest`) and its JSON cast of `v.column4` (`$body`).
/// The newest timestamp is a subquery of its own: SQLite answers a bare `MAX` from the
/// end of the index, but walks every row of the session for `MAX` inside an expression.
macro_rules! append_stamped {
    ($greatest:literal, $body:literal) => {
        concat!(
            "INSERT INTO chat_messages (flow_id, user_id, session_id, context_id, message_id, \
             timestamp_ms, role, body) \
             SELECT $1, $2, $3, $4, v.column1, b.t + v.column2, v.column3, ",
            $body,
            " FROM (SELECT ",
            $greatest,
            "($5, COALESCE((SELECT MAX(timestamp_ms) FROM chat_messages \
             WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4) \
             + 1, $5)) AS t) AS b, \
             (VALUES {rows}) AS v WHERE true \
             ON CONFLICT (flow_id, user_id, session_id, context_id, message_id) DO NOTHING \
             RETURNING message_id, timestamp_ms"
        )
    };
}
pub(crate) use append_stamped;

pub(crate) const COUNT_START: &str = scoped!("SELECT COUNT(*) AS n FROM chat_messages", "");
pub(crate) const NEWEST_TIMESTAMP: &str =
    scoped!("SELECT MAX(timestamp_ms) AS t FROM chat_messages", "");
pub(crate) const COUNT_CURSOR: &str = scoped!(
    "SELECT COUNT(*) AS n FROM chat_messages",
    " AND (timestamp_ms, message_id) > ($5, $6)"
);
pub(crate) const GET_STATE: &str = scoped!(
    "SELECT summary, CAST(pinned AS TEXT) AS pinned, covered_until_message_id, \
     covered_until_timestamp, absorbed_count, summary_model, version, created_at_ms, \
     updated_at_ms FROM session_memory_state",
    ""
);
pub(crate) const DELETE_STATES: &str =
    "DELETE FROM session_memory_state WHERE flow_id = $1 AND user_id = $2 AND session_id = $3";
pub(crate) const GET_SUMMARY: &str =
    "SELECT CAST(value AS TEXT) AS value FROM summary_cache WHERE key = $1";
pub(crate) const DELETE_HISTORY: &str =
    "DELETE FROM chat_messages WHERE flow_id = $1 AND user_id = $2 AND session_id = $3";
pub(crate) const DELETE_SUMMARIES: &str = "DELETE FROM summary_cache \
     WHERE substr(key, 1, length(CAST($1 AS TEXT))) = CAST($1 AS TEXT)";
/// Takes or renews a lease (migration 0005): `$1` key, `$2` holder, `$3` expiry, `$4`
/// now. A row is written only when the key is free, expired or already `$2`'s.
pub(crate) const TAKE_LEASE: &str = "INSERT INTO summary_leases (key, holder, expires_at_ms) \
     VALUES ($1, $2, $3) ON CONFLICT (key) DO UPDATE \
     SET holder = excluded.holder, expires_at_ms = excluded.expires_at_ms \
     WHERE summary_leases.expires_at_ms < $4 OR summary_leases.holder = excluded.holder";
pub(crate) const RELEASE_LEASE: &str = "DELETE FROM summary_leases WHERE key = $1 AND holder = $2";
pub(crate) const DELETE_LEASES: &str = "DELETE FROM summary_leases \
     WHERE substr(key, 1, length(CAST($1 AS TEXT))) = CAST($1 AS TEXT)";

// Checkpoints (migrations 0002 and 0003): the same statements on both dialects.
pub(crate) const HEAD_CREATE: &str = "INSERT INTO checkpoint_heads \
     (thread_id, head_seq, next_position, state_values) VALUES ($1, 0, 0, '{}') \
     ON CONFLICT (thread_id) DO NOTHING";
pub(crate) const HEAD_ADVANCE: &str = "UPDATE checkpoint_heads SET head_seq = $2 \
     WHERE thread_id = $1 AND head_seq = $3 RETURNING next_position, state_values, branch";
/// A fork's compare-and-swap: `$2` the new head, which also names its new branch.
pub(crate) const HEAD_FORK: &str = "UPDATE checkpoint_heads SET head_seq = $2, branch = $2 \
     WHERE thread_id = $1 AND head_seq = $3 RETURNING next_position";
pub(crate) const HEAD_SEQ: &str = "SELECT head_seq FROM checkpoint_heads WHERE thread_id = $1";
pub(crate) const HEAD_ROW: &str =
    "SELECT head_seq, branch FROM checkpoint_heads WHERE thread_id = $1";
pub(crate) const HEAD_SET: &str =
    "UPDATE checkpoint_heads SET next_position = $2, state_values = $3 WHERE thread_id = $1";
pub(crate) const STEP_INSERT: &str = "INSERT INTO checkpoint_steps \
     (thread_id, seq, run_id, node, values_set, created_at_ms, parent_seq, branch, depth) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)";
/// The branch and depth of step `$2`.
pub(crate) const STEP_AT: &str = "SELECT branch, COALESCE(depth, seq) FROM checkpoint_steps \
     WHERE thread_id = $1 AND seq = $2";
/// The seq and branch of every step below `$2`, newest first, at most `$3`.
pub(crate) const TREE_SEQS: &str = "SELECT seq, branch FROM checkpoint_steps \
     WHERE thread_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3";
/// The parent of branch `$2`'s first step: the checkpoint the branch forked from.
pub(crate) const BRANCH_FROM: &str = "SELECT parent_seq FROM checkpoint_steps \
     WHERE thread_id = $1 AND branch = $2 ORDER BY seq LIMIT 1";
pub(crate) const ENTRY_INSERT: &str = "INSERT INTO checkpoint_entries \
     (thread_id, position, added_seq, removed_seq, message_id, body, branch) \
     VALUES ($1, $2, $3, NULL, $4, $5, $6)";
pub(crate) const ENTRY_REWRITE: &str = "UPDATE checkpoint_entries SET body = $4 \
     WHERE thread_id = $1 AND position = $2 AND added_seq = $3";
pub(crate) const ENTRY_RETIRE: &str = "UPDATE checkpoint_entries SET removed_seq = $4 \
     WHERE thread_id = $1 AND position = $2 AND added_seq = $3";
pub(crate) const ENTRY_RETIRE_ALL: &str = "UPDATE checkpoint_entries SET removed_seq = $2 \
     WHERE thread_id = $1 AND removed_seq IS NULL AND branch = $3";
/// A fork's first step: the messages of checkpoint `$4` (on branch `$3`) as entries of
/// the new branch `$2`, added by its first step `$2`. One statement, run by the server.
pub(crate) const ENTRY_FORK: &str = "INSERT INTO checkpoint_entries \
     (thread_id, position, added_seq, removed_seq, message_id, body, branch) \
     SELECT thread_id, position, $2, CAST(NULL AS BIGINT), message_id, body, $2 \
     FROM checkpoint_entries \
     WHERE thread_id = $1 AND branch = $3 AND added_seq <= $4 \
     AND (removed_seq IS NULL OR removed_seq > $4)";
/// A position after every entry of the thread, on any branch.
pub(crate) const NEXT_POSITION: &str =
    "SELECT COALESCE(MAX(position), -1) + 1 FROM checkpoint_entries WHERE thread_id = $1";
pub(crate) const LATEST_STEP: &str = "SELECT h.head_seq, h.state_values, s.run_id, s.node, \
     s.created_at_ms, s.parent_seq, COALESCE(s.depth, s.seq), h.branch \
     FROM checkpoint_heads h JOIN checkpoint_steps s \
     ON s.thread_id = h.thread_id AND s.seq = h.head_seq WHERE h.thread_id = $1";
pub(crate) const ENTRIES_AT: &str = "SELECT body FROM checkpoint_entries \
     WHERE thread_id = $1 AND branch = $3 AND added_seq <= $2 \
     AND (removed_seq IS NULL OR removed_seq > $2) ORDER BY position";
/// A page of one branch's steps, newest first: `$3` the highest seq, `$4` the row count.
pub(crate) const PAGE_STEPS: &str = "SELECT seq, run_id, node, values_set, created_at_ms, \
     parent_seq, COALESCE(depth, seq) FROM checkpoint_steps \
     WHERE thread_id = $1 AND branch = $2 AND seq <= $3 ORDER BY seq DESC LIMIT $4";
/// The values set by the steps of branch `$3` up to `$2` (steps that set none are
/// skipped). A branch's first step holds every value of the state it forked from.
pub(crate) const VALUES_UPTO: &str = "SELECT values_set FROM checkpoint_steps \
     WHERE thread_id = $1 AND branch = $3 AND seq <= $2 AND values_set <> '{}' ORDER BY seq";
/// The entries of branch `$4` in the state of some seq in `[$3, $2]`.
pub(crate) const PAGE_ENTRIES: &str = "SELECT added_seq, removed_seq, body \
     FROM checkpoint_entries WHERE thread_id = $1 AND branch = $4 AND added_seq <= $2 \
     AND (removed_seq IS NULL OR removed_seq > $3) ORDER BY position, added_seq";
/// Copying a thread (`$1`) to a new id (`$2`): every branch, as stored.
pub(crate) const COPY_THREAD: [&str; 3] = [
    "INSERT INTO checkpoint_heads (thread_id, head_seq, next_position, state_values, branch) \
     SELECT CAST($2 AS TEXT), head_seq, next_position, state_values, branch \
     FROM checkpoint_heads WHERE thread_id = $1",
    "INSERT INTO checkpoint_entries \
     (thread_id, position, added_seq, removed_seq, message_id, body, branch) \
     SELECT CAST($2 AS TEXT), position, added_seq, removed_seq, message_id, body, branch \
     FROM checkpoint_entries WHERE thread_id = $1",
    "INSERT INTO checkpoint_steps \
     (thread_id, seq, run_id, node, values_set, created_at_ms, parent_seq, branch, depth) \
     SELECT CAST($2 AS TEXT), seq, run_id, node, values_set, created_at_ms, parent_seq, \
     branch, depth FROM checkpoint_steps WHERE thread_id = $1",
];
/// Deleting a thread: every checkpoint table, the ones of migration 0001 included.
pub(crate) const DELETE_THREAD: [&str; 5] = [
    "DELETE FROM checkpoint_entries WHERE thread_id = $1",
    "DELETE FROM checkpoint_heads WHERE thread_id = $1",
    "DELETE FROM checkpoints WHERE thread_id = $1",
    "DELETE FROM checkpoint_messages WHERE thread_id = $1",
    "DELETE FROM checkpoint_steps WHERE thread_id = $1",
];

/// A driver error as a store error.
pub(crate) fn backend(e: sqlx::Error) -> StoreError {
    let detail = e.to_string();
    if detail.contains("readonly") {
        return StoreError::Backend(format!(
            "{detail} (the database is read-only: make the file and its folder writable)"
        ));
    }
    StoreError::Backend(crate::error::with_hint(&detail))
}

/// True when `e` is a unique-key violation.
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

/// The JSON of a message, as stored.
pub(crate) fn encode_message(m: &Message) -> Result<String, StoreError> {
    serde_json::to_string(m)
        .map_err(|e| StoreError::Invalid(format!("message {:?} cannot be serialized: {e}", m.id())))
}

fn decode_json<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// A chat-history row.
pub(crate) fn stored_message(timestamp_ms: i64, body: &str) -> Result<StoredMessage, StoreError> {
    Ok(StoredMessage {
        timestamp_ms,
        message: decode_json("chat_messages.body", body)?,
    })
}

/// A JSON object as stored text.
pub(crate) fn encode_values(values: &Map<String, Value>) -> Result<String, StoreError> {
    serde_json::to_string(values)
        .map_err(|e| StoreError::Invalid(format!("checkpoint values cannot be serialized: {e}")))
}

/// Stored values merged with the ones a step sets.
pub(crate) fn merge_values(stored: &str, set: &Map<String, Value>) -> Result<String, StoreError> {
    let mut values: Map<String, Value> = decode_json("checkpoint_heads.state_values", stored)?;
    values.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
    encode_values(&values)
}

/// The seq after `parent`.
pub(crate) fn next_seq(parent: Option<u64>) -> Result<i64, StoreError> {
    match parent {
        None => Ok(0),
        Some(p) => check::to_i64("checkpoint parent + 1", p.saturating_add(1)),
    }
}

/// Checks what a checkpoint write names before any statement runs.
pub(crate) fn check_write(
    thread_id: &str,
    write: &keel_core::store::CheckpointWrite,
) -> Result<(), StoreError> {
    check::text("thread_id", thread_id)?;
    check::text("checkpoint.run_id", &write.run_id)?;
    check::text("checkpoint.node", &write.node)?;
    for (i, op) in write.update.messages.iter().enumerate() {
        match op {
            keel_core::state::MessageOp::Upsert { message } if message.id().is_empty() => {
                return Err(StoreError::Invalid(format!(
                    "update.messages[{i}] has an empty id; a checkpoint needs an id per message"
                )));
            }
            keel_core::state::MessageOp::Upsert { message } => {
                check::text(&format!("update.messages[{i}].id"), message.id())?
            }
            keel_core::state::MessageOp::Remove { id } => {
                check::text(&format!("update.messages[{i}].id"), id)?
            }
            keel_core::state::MessageOp::RemoveAll => {}
        }
    }
    Ok(())
}

/// A `checkpoint_steps` row.
pub(crate) struct StepRow {
    pub seq: i64,
    pub run_id: String,
    pub node: String,
    pub values_set: String,
    pub created_at_ms: i64,
    pub parent_seq: Option<i64>,
    pub depth: i64,
}

/// A step row as the page query selects it.
pub(crate) type StepTuple = (i64, String, String, String, i64, Option<i64>, i64);

/// A `checkpoint_entries` row, in `(position, added_seq)` order.
pub(crate) struct EntryRow {
    pub added_seq: i64,
    pub removed_seq: Option<i64>,
    pub body: String,
}

impl From<StepTuple> for StepRow {
    /// A row as the step queries select it: seq, run id, node, values set, created at,
    /// parent, depth.
    fn from((seq, run_id, node, values_set, created_at_ms, parent_seq, depth): StepTuple) -> Self {
        StepRow {
            seq,
            run_id,
            node,
            values_set,
            created_at_ms,
            parent_seq,
            depth,
        }
    }
}

impl From<(i64, Option<i64>, String)> for EntryRow {
    /// A row as the entry queries select it: added at, removed at, body.
    fn from((added_seq, removed_seq, body): (i64, Option<i64>, String)) -> Self {
        EntryRow {
            added_seq,
            removed_seq,
            body,
        }
    }
}

/// The row [`LATEST_STEP`] selects.
pub(crate) type LatestRow = (i64, String, String, String, i64, Option<i64>, i64, i64);

/// The latest checkpoint from its step, the head's values and its entries' bodies.
pub(crate) fn decode_latest(
    (seq, values, run_id, node, created_at_ms, parent_seq, depth, _branch): LatestRow,
    bodies: &[(String,)],
) -> Result<Checkpoint, StoreError> {
    let values = values.as_str();
    Ok(Checkpoint {
        seq: check::to_u64("checkpoint_heads.head_seq", seq)?,
        parent: parent_seq
            .map(|p| check::to_u64("checkpoint_steps.parent_seq", p))
            .transpose()?,
        depth: check::to_u64("checkpoint_steps.depth", depth)?,
        run_id,
        node,
        messages: bodies
            .iter()
            .map(|(b,)| decode_json("checkpoint_entries.body", b))
            .collect::<Result<_, _>>()?,
        values: decode_json("checkpoint_heads.state_values", values)?,
        created_at_ms,
    })
}

/// The values the steps before a page set, folded in seq order.
pub(crate) fn fold_values(rows: &[(String,)]) -> Result<Map<String, Value>, StoreError> {
    let mut values = Map::new();
    for (set,) in rows {
        let set: Map<String, Value> = decode_json("checkpoint_steps.values_set", set)?;
        values.extend(set);
    }
    Ok(values)
}

/// The full state of consecutive steps of one branch (oldest first) after the state
/// whose values are `prior`: a step's messages are the branch's entries whose range
/// `[added_seq, removed_seq)` holds its seq, by position; its values fold every
/// `values_set` up to it. `entries` must hold every entry in the state of one of them;
/// entries written after the last step read are ignored, so a concurrent writer cannot
/// tear the result.
pub(crate) fn decode_steps(
    prior: Map<String, Value>,
    steps: Vec<StepRow>,
    entries: Vec<EntryRow>,
) -> Result<Vec<Checkpoint>, StoreError> {
    let messages: Vec<Message> = entries
        .iter()
        .map(|e| decode_json("checkpoint_entries.body", &e.body))
        .collect::<Result<_, _>>()?;
    let mut values = prior;
    steps
        .into_iter()
        .map(|step| {
            let set: Map<String, Value> =
                decode_json("checkpoint_steps.values_set", &step.values_set)?;
            values.extend(set);
            let s = step.seq;
            Ok(Checkpoint {
                seq: check::to_u64("checkpoint_steps.seq", s)?,
                parent: step
                    .parent_seq
                    .map(|p| check::to_u64("checkpoint_steps.parent_seq", p))
                    .transpose()?,
                depth: check::to_u64("checkpoint_steps.depth", step.depth)?,
                run_id: step.run_id,
                node: step.node,
                messages: entries
                    .iter()
                    .zip(&messages)
                    .filter(|(e, _)| e.added_seq <= s && e.removed_seq.is_none_or(|r| r > s))
                    .map(|(_, m)| m.clone())
                    .collect(),
                values: values.clone(),
                created_at_ms: step.created_at_ms,
            })
        })
        .collect()
}

/// The columns of a `session_memory_state` row.
pub(crate) struct StateRow {
    pub summary: String,
    pub pinned: String,
    pub covered_until_message_id: Option<String>,
    pub covered_until_timestamp: Option<i64>,
    pub absorbed_count: i64,
    pub summary_model: Option<String>,
    pub version: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

pub(crate) fn decode_state(row: StateRow) -> Result<SessionMemoryState, StoreError> {
    let covered_until = match (row.covered_until_timestamp, row.covered_until_message_id) {
        (Some(timestamp_ms), Some(message_id)) => Some(Cursor {
            timestamp_ms,
            message_id,
        }),
        (None, None) => None,
        (ts, id) => {
            return Err(StoreError::Corrupt(format!(
                "session_memory_state cursor is half set: timestamp {ts:?}, message id {id:?}"
            )));
        }
    };
    Ok(SessionMemoryState {
        summary: row.summary,
        pinned: decode_json("session_memory_state.pinned", &row.pinned)?,
        covered_until,
        absorbed_count: check::to_u64("session_memory_state.absorbed_count", row.absorbed_count)?,
        summary_model: row.summary_model,
        version: check::to_u64("session_memory_state.version", row.version)?,
        created_at_ms: row.created_at_ms,
        updated_at_ms: row.updated_at_ms,
    })
}

/// A state's columns as bound values.
pub(crate) struct EncodedState {
    pub pinned: String,
    pub cursor_id: Option<String>,
    pub cursor_ts: Option<i64>,
    pub absorbed: i64,
    pub version: i64,
    pub expected: i64,
}

pub(crate) fn encode_state(
    state: &SessionMemoryState,
    expected_version: u64,
) -> Result<EncodedState, StoreError> {
    check::state_fields(state)?;
    let version = check::next_version(expected_version)?;
    Ok(EncodedState {
        pinned: serde_json::to_string(&state.pinned)
            .map_err(|e| StoreError::Invalid(format!("state.pinned cannot be serialized: {e}")))?,
        cursor_id: state.covered_until.as_ref().map(|c| c.message_id.clone()),
        cursor_ts: state.covered_until.as_ref().map(|c| c.timestamp_ms),
        absorbed: check::to_i64("state.absorbed_count", state.absorbed_count)?,
        version: check::to_i64("version", version)?,
        expected: check::to_i64("expected_version", expected_version)?,
    })
}

/// A database a [`SqlStore`] runs on: sqlx's [`Database`] plus what differs between the
/// dialects. Implemented for `sqlx::Sqlite` (in `sqlite.rs`) and `sqlx::Postgres` (in
/// `postgres.rs`).
///
/// The generic code also needs sqlx's executor, argument and column-type bounds. Rust
/// does not imply those from a trait's where-clause, so every `impl` over a dialect (here,
/// in `checkpoint.rs` and in `session.rs`) states them again: keep the lists the same.
pub trait Dialect: Database + HasStatementCache {
    /// The store's type name, as `Debug` prints it.
    const STORE_NAME: &'static str;
    /// The statements whose text differs between dialects.
    const QUERIES: Queries;
    /// Whether one query may hold several statements, bound by parameter number
    /// (sqlx's SQLite driver runs them in one call to its worker; PostgreSQL's
    /// extended protocol takes one statement a query).
    const MULTI_STATEMENT: bool;
    /// How many rows a statement wrote (sqlx has no trait for it).
    fn rows_affected(done: &Self::QueryResult) -> u64;
}

/// A store on a SQL database: every storage trait, written once for any [`Dialect`].
/// Cheap to clone (clones share the pool).
pub struct SqlStore<DB: Database> {
    pub(crate) pool: Pool<DB>,
}

impl<DB: Database> Clone for SqlStore<DB> {
    fn clone(&self) -> Self {
        SqlStore {
            pool: self.pool.clone(),
        }
    }
}

impl<DB: Dialect> std::fmt::Debug for SqlStore<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(DB::STORE_NAME)
            .field("pool", &self.pool)
            .finish()
    }
}

/// Chat-history rows as messages.
pub(crate) fn stored_messages(rows: Vec<(i64, String)>) -> Result<Vec<StoredMessage>, StoreError> {
    rows.iter()
        .map(|(ts, body)| stored_message(*ts, body))
        .collect()
}

/// The query for messages of `scope` after `cursor` (`start` when there is none), with
/// the scope and cursor bound; `after` and `count_after` differ only in the SQL and the
/// row type.
pub(crate) fn bind_scope_cursor<'q, DB, O>(
    start: &'static str,
    after_cursor: &'static str,
    scope: &'q SessionScope,
    cursor: Option<&'q Cursor>,
) -> QueryAs<'q, DB, O, DB::Arguments>
where
    DB: Database,
    O: for<'r> FromRow<'r, DB::Row>,
    for<'q2> String: Encode<'q2, DB> + Type<DB>,
    for<'q2> i64: Encode<'q2, DB> + Type<DB>,
{
    let q = match cursor {
        None => sqlx::query_as(start),
        Some(_) => sqlx::query_as(after_cursor),
    }
    .bind(&scope.flow_id)
    .bind(&scope.user_id)
    .bind(&scope.session_id)
    .bind(&scope.context_id);
    match cursor {
        None => q,
        Some(c) => q.bind(c.timestamp_ms).bind(&c.message_id),
    }
}

impl<DB: Dialect> SqlStore<DB>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'a, 'q> &'a str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB>,
    for<'q> Option<String>: Encode<'q, DB>,
    usize: ColumnIndex<DB::Row>,
    for<'a> &'a str: ColumnIndex<DB::Row>,
{
    /// The thread's head seq, if it has checkpoints.
    pub(crate) async fn head_seq(&self, thread_id: &str) -> Result<Option<u64>, StoreError> {
        let row: Option<(i64,)> = sqlx::query_as(HEAD_SEQ)
            .bind(thread_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?;
        row.map(|(s,)| check::to_u64("checkpoint_heads.head_seq", s))
            .transpose()
    }

    /// A transaction for a batch written in `statements` statements, when it takes more
    /// than one (a single statement is atomic by itself).
    pub(crate) async fn batch_transaction(
        &self,
        statements: usize,
    ) -> Result<Option<Transaction<'static, DB>>, StoreError> {
        if statements > 1 {
            Ok(Some(self.pool.begin().await.map_err(backend)?))
        } else {
            Ok(None)
        }
    }

    /// Runs `query` (a DELETE bound to a session's flow, user and session ids) and
    /// returns how many rows went.
    pub(crate) async fn delete_session_rows(
        &self,
        query: &'static str,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        check::session(flow_id, user_id, session_id)?;
        let done = sqlx::query(query)
            .bind(flow_id)
            .bind(user_id)
            .bind(session_id)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(DB::rows_affected(&done))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn multi_row_renumbers_each_tuple() {
        let q = "INSERT INTO t (a, b) VALUES ($1, CAST($2 AS JSON)) ON CONFLICT DO NOTHING";
        assert_eq!(super::multi_row(q, 1), q);
        assert_eq!(
            super::multi_row(q, 3),
            "INSERT INTO t (a, b) VALUES ($1, CAST($2 AS JSON)), ($3, CAST($4 AS JSON)), ($5, CAST($6 AS JSON)) ON CONFLICT DO NOTHING"
        );
    }
}
