//! What the SQL backends share: the queries both dialects accept, encoding of rows, and
//! [`impl_sql_store!`], which writes every storage trait once for any sqlx database.
//! Only statements that write JSON differ between SQLite and PostgreSQL; each backend
//! passes those in its [`Queries`].

use keel_core::message::Message;
use keel_core::store::{Checkpoint, Cursor, SessionMemoryState, StoreError, StoredMessage};
use serde_json::{Map, Value};

use crate::check;

/// The statements whose text differs between dialects (all write JSON columns, which
/// PostgreSQL types as `JSON` and SQLite keeps as `TEXT`).
pub(crate) struct Queries {
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

/// Implements every storage trait for `$store`, a struct with a `pool: sqlx::Pool<$db>`
/// field, using the shared queries above and the dialect's `$q: &Queries`.
/// The query for messages of `scope` after `cursor` (`start` when there is none), with
/// the scope and cursor bound; `after` and `count_after` differ only in the SQL and the
/// row type.
macro_rules! bind_scope_cursor {
    ($start:expr, $after_cursor:expr, $scope:expr, $cursor:expr) => {{
        let q = match $cursor {
            None => sqlx::query_as($start),
            Some(_) => sqlx::query_as($after_cursor),
        }
        .bind(&$scope.flow_id)
        .bind(&$scope.user_id)
        .bind(&$scope.session_id)
        .bind(&$scope.context_id);
        match $cursor {
            None => q,
            Some(c) => q.bind(c.timestamp_ms).bind(&c.message_id),
        }
    }};
}
pub(crate) use bind_scope_cursor;

macro_rules! impl_sql_store {
    ($store:ty, $db:ty, $q:expr) => {
        impl $store {
            fn messages(
                rows: Vec<(i64, String)>,
            ) -> Result<Vec<keel_core::store::StoredMessage>, StoreError> {
                rows.iter()
                    .map(|(ts, body)| $crate::sql::stored_message(*ts, body))
                    .collect()
            }

            async fn head_seq(&self, thread_id: &str) -> Result<Option<u64>, StoreError> {
                let row: Option<(i64,)> = sqlx::query_as($crate::sql::HEAD_SEQ)
                    .bind(thread_id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                row.map(|(s,)| $crate::check::to_u64("checkpoint_heads.head_seq", s))
                    .transpose()
            }

            /// A transaction for a batch written in `statements` statements, when it takes
            /// more than one (a single statement is atomic by itself).
            async fn batch_transaction(
                &self,
                statements: usize,
            ) -> Result<Option<sqlx::Transaction<'static, $db>>, StoreError> {
                if statements > 1 {
                    Ok(Some(self.pool.begin().await.map_err($crate::sql::backend)?))
                } else {
                    Ok(None)
                }
            }

            /// Appends a chat-history batch in one transaction with `query` (`append`:
            /// fail on a stored id; `append_new`: skip it); returns the rows stored.
            async fn append_with(
                &self,
                query: &'static str,
                scope: &keel_core::store::SessionScope,
                messages: &[keel_core::store::StoredMessage],
            ) -> Result<u64, StoreError> {
                $crate::check::scope(scope)?;
                $crate::check::append_batch(messages)?;
                if messages.is_empty() {
                    return Ok(0);
                }
                let bodies = messages
                    .iter()
                    .map(|m| $crate::sql::encode_message(&m.message))
                    .collect::<Result<Vec<_>, _>>()?;
                // One statement for the batch (one round trip, atomic by itself) while it
                // fits the parameter limit; larger batches go in one transaction.
                let rows: Vec<_> = messages.iter().zip(&bodies).collect();
                let chunks: Vec<_> = rows.chunks($crate::sql::APPEND_ROWS_PER_STATEMENT).collect();
                let mut tx = self.batch_transaction(chunks.len()).await?;
                let mut stored = 0;
                for chunk in &chunks {
                    let sql = $crate::sql::multi_row(query, chunk.len());
                    // Built from a constant statement and a row count only: no input text.
                    // Persistent: a statement per row count, prepared once per connection.
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).persistent(true);
                    for (m, body) in chunk.iter() {
                        q = q
                            .bind(&scope.flow_id)
                            .bind(&scope.user_id)
                            .bind(&scope.session_id)
                            .bind(&scope.context_id)
                            .bind(m.message.id())
                            .bind(m.timestamp_ms)
                            .bind(m.message.role().as_str())
                            .bind(*body);
                    }
                    let r = match tx.as_mut() {
                        Some(tx) => q.execute(&mut **tx).await,
                        None => q.execute(&self.pool).await,
                    };
                    match r {
                        Ok(done) => stored += done.rows_affected(),
                        Err(e) if $crate::sql::is_unique_violation(&e) => {
                            // Name the id: the first of the chunk already stored.
                            let id = self
                                .first_stored(scope, chunk.iter().map(|(m, _)| m.message.id()))
                                .await
                                .unwrap_or_else(|| chunk[0].0.message.id().to_owned());
                            return Err($crate::check::duplicate_id(&id));
                        }
                        Err(e) => return Err($crate::sql::backend(e)),
                    }
                }
                if let Some(tx) = tx {
                    tx.commit().await.map_err($crate::sql::backend)?;
                }
                Ok(stored)
            }

            /// Runs `query` (a DELETE bound to a session's flow, user and session ids) and
            /// returns how many rows went.
            async fn delete_session_rows(
                &self,
                query: &'static str,
                flow_id: &str,
                user_id: &str,
                session_id: &str,
            ) -> Result<u64, StoreError> {
                $crate::check::session(flow_id, user_id, session_id)?;
                let done = sqlx::query(query)
                    .bind(flow_id)
                    .bind(user_id)
                    .bind(session_id)
                    .execute(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                Ok(done.rows_affected())
            }

            /// The first of `ids` already stored in the scope (to name a duplicate).
            async fn first_stored<'i>(
                &self,
                scope: &keel_core::store::SessionScope,
                ids: impl Iterator<Item = &'i str>,
            ) -> Option<String> {
                for id in ids {
                    let found: Option<(i64,)> = sqlx::query_as($crate::sql::MESSAGE_EXISTS)
                        .bind(&scope.flow_id)
                        .bind(&scope.user_id)
                        .bind(&scope.session_id)
                        .bind(&scope.context_id)
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await
                        .ok()
                        .flatten();
                    if found.is_some() {
                        return Some(id.to_owned());
                    }
                }
                None
            }
        }

        impl $store {
            /// Applies a checked write's message ops to branch `branch` as step `seq`,
            /// inside the step's transaction; returns the branch's next free position.
            async fn write_ops(
                tx: &mut sqlx::Transaction<'static, $db>,
                thread_id: &str,
                branch: i64,
                seq: i64,
                mut next_position: i64,
                write: &keel_core::store::CheckpointWrite,
                bodies: &[Option<String>],
            ) -> Result<i64, StoreError> {
                use keel_core::state::MessageOp;
                for ((i, op), body) in write.update.messages.iter().enumerate().zip(bodies) {
                    let id = match op {
                        MessageOp::Upsert { message } => message.id(),
                        MessageOp::Remove { id } => id.as_str(),
                        MessageOp::RemoveAll => {
                            sqlx::query($crate::sql::ENTRY_RETIRE_ALL)
                                .bind(thread_id)
                                .bind(seq)
                                .bind(branch)
                                .execute(&mut **tx)
                                .await
                                .map_err($crate::sql::backend)?;
                            continue;
                        }
                    };
                    let live: Option<(i64, i64)> = sqlx::query_as($q.entry_live)
                        .bind(thread_id)
                        .bind(id)
                        .bind(branch)
                        .fetch_optional(&mut **tx)
                        .await
                        .map_err($crate::sql::backend)?;
                    match (body, live) {
                        // A version written by this same step was never visible: rewrite it.
                        (Some(body), Some((position, added))) if added == seq => {
                            sqlx::query($crate::sql::ENTRY_REWRITE)
                                .bind(thread_id)
                                .bind(position)
                                .bind(added)
                                .bind(body)
                                .execute(&mut **tx)
                                .await
                                .map_err($crate::sql::backend)?;
                        }
                        (_, Some((position, added))) => {
                            sqlx::query($crate::sql::ENTRY_RETIRE)
                                .bind(thread_id)
                                .bind(position)
                                .bind(added)
                                .bind(seq)
                                .execute(&mut **tx)
                                .await
                                .map_err($crate::sql::backend)?;
                            if let Some(body) = body {
                                sqlx::query($crate::sql::ENTRY_INSERT)
                                    .bind(thread_id)
                                    .bind(position)
                                    .bind(seq)
                                    .bind(id)
                                    .bind(body)
                                    .bind(branch)
                                    .execute(&mut **tx)
                                    .await
                                    .map_err($crate::sql::backend)?;
                            }
                        }
                        (Some(body), None) => {
                            sqlx::query($crate::sql::ENTRY_INSERT)
                                .bind(thread_id)
                                .bind(next_position)
                                .bind(seq)
                                .bind(id)
                                .bind(body)
                                .bind(branch)
                                .execute(&mut **tx)
                                .await
                                .map_err($crate::sql::backend)?;
                            next_position += 1;
                        }
                        (None, None) => {
                            // Dropping the transaction rolls the whole step back.
                            return Err(StoreError::Invalid(format!(
                                "update.messages[{i}] removes message {id:?}, which is not in the state"
                            )));
                        }
                    }
                }
                Ok(next_position)
            }

            /// The branch and depth of step `seq`, if the thread holds it.
            async fn step_at(
                &self,
                thread_id: &str,
                seq: i64,
            ) -> Result<Option<(i64, i64)>, StoreError> {
                sqlx::query_as($crate::sql::STEP_AT)
                    .bind(thread_id)
                    .bind(seq)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err($crate::sql::backend)
            }

            /// Up to `limit` checkpoints of branch `branch` with a seq up to `upto`,
            /// newest first, each with its full state.
            async fn segment(
                &self,
                thread_id: &str,
                branch: i64,
                upto: i64,
                limit: usize,
            ) -> Result<Vec<keel_core::store::Checkpoint>, StoreError> {
                let mut steps: Vec<$crate::sql::StepTuple> =
                    sqlx::query_as($crate::sql::PAGE_STEPS)
                        .bind(thread_id)
                        .bind(branch)
                        .bind(upto)
                        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                        .fetch_all(&self.pool)
                        .await
                        .map_err($crate::sql::backend)?;
                steps.reverse();
                let (Some(lo), Some(hi)) = (steps.first().map(|s| s.0), steps.last().map(|s| s.0))
                else {
                    return Ok(Vec::new());
                };
                let prior: Vec<(String,)> = sqlx::query_as($crate::sql::VALUES_UPTO)
                    .bind(thread_id)
                    .bind(lo - 1)
                    .bind(branch)
                    .fetch_all(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                // Read after the steps: every entry a listed step needs is committed, and
                // a later writer's entries start after `hi`.
                let entries: Vec<(i64, Option<i64>, String)> =
                    sqlx::query_as($crate::sql::PAGE_ENTRIES)
                        .bind(thread_id)
                        .bind(hi)
                        .bind(lo)
                        .bind(branch)
                        .fetch_all(&self.pool)
                        .await
                        .map_err($crate::sql::backend)?;
                let mut page = $crate::sql::decode_steps(
                    $crate::sql::fold_values(&prior)?,
                    steps.into_iter().map(Into::into).collect(),
                    entries.into_iter().map(Into::into).collect(),
                )?;
                page.reverse();
                Ok(page)
            }
        }

        #[async_trait::async_trait]
        impl keel_core::store::Checkpointer for $store {
            async fn put(
                &self,
                thread_id: &str,
                write: keel_core::store::CheckpointWrite,
            ) -> Result<keel_core::store::PutOutcome, StoreError> {
                use keel_core::state::MessageOp;
                use keel_core::store::PutOutcome;
                $crate::sql::check_write(thread_id, &write)?;
                let seq = $crate::sql::next_seq(write.parent)?;
                let values_set = $crate::sql::encode_values(&write.update.values)?;
                let bodies = write
                    .update
                    .messages
                    .iter()
                    .map(|op| match op {
                        MessageOp::Upsert { message } => {
                            $crate::sql::encode_message(message).map(Some)
                        }
                        _ => Ok(None),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let parent = write
                    .parent
                    .map(|p| $crate::check::to_i64("checkpoint parent", p))
                    .transpose()?;
                let depth = match parent {
                    None => 0,
                    // Read before the swap: a step, once written, never changes.
                    Some(p) => self.step_at(thread_id, p).await?.map_or(p + 1, |(_, d)| d + 1),
                };
                let mut tx = self.pool.begin().await.map_err($crate::sql::backend)?;
                // Compare-and-swap on the head row: under concurrent writers exactly one
                // moves it from `parent`; the others change nothing and report a conflict.
                let head: Option<(i64, String, i64)> = match parent {
                    None => {
                        let done = sqlx::query($crate::sql::HEAD_CREATE)
                            .bind(thread_id)
                            .execute(&mut *tx)
                            .await
                            .map_err($crate::sql::backend)?;
                        (done.rows_affected() == 1).then(|| (0, "{}".to_owned(), 0))
                    }
                    Some(parent) => sqlx::query_as($crate::sql::HEAD_ADVANCE)
                        .bind(thread_id)
                        .bind(seq)
                        .bind(parent)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err($crate::sql::backend)?,
                };
                let Some((start_position, stored_values, branch)) = head else {
                    drop(tx);
                    return Ok(PutOutcome::Conflict {
                        head: self.head_seq(thread_id).await?,
                    });
                };
                sqlx::query($crate::sql::STEP_INSERT)
                    .bind(thread_id)
                    .bind(seq)
                    .bind(&write.run_id)
                    .bind(&write.node)
                    .bind(&values_set)
                    .bind(write.created_at_ms)
                    .bind(parent)
                    .bind(branch)
                    .bind(depth)
                    .execute(&mut *tx)
                    .await
                    .map_err($crate::sql::backend)?;
                let next_position = Self::write_ops(
                    &mut tx,
                    thread_id,
                    branch,
                    seq,
                    start_position,
                    &write,
                    &bodies,
                )
                .await?;
                if next_position != start_position || !write.update.values.is_empty() {
                    let values = $crate::sql::merge_values(&stored_values, &write.update.values)?;
                    sqlx::query($crate::sql::HEAD_SET)
                        .bind(thread_id)
                        .bind(next_position)
                        .bind(values)
                        .execute(&mut *tx)
                        .await
                        .map_err($crate::sql::backend)?;
                }
                tx.commit().await.map_err($crate::sql::backend)?;
                Ok(PutOutcome::Saved {
                    seq: $crate::check::to_u64("seq", seq)?,
                })
            }

            async fn fork(
                &self,
                thread_id: &str,
                from: u64,
                write: keel_core::store::CheckpointWrite,
            ) -> Result<keel_core::store::PutOutcome, StoreError> {
                use keel_core::state::MessageOp;
                use keel_core::store::PutOutcome;
                $crate::sql::check_write(thread_id, &write)?;
                if write.parent == Some(from) {
                    return self.put(thread_id, write).await;
                }
                let not_held = || {
                    StoreError::Invalid(format!(
                        "checkpoint {from} is not a checkpoint of thread {thread_id:?}"
                    ))
                };
                let Some(parent) = write.parent else {
                    return match self.head_seq(thread_id).await? {
                        Some(head) => Ok(PutOutcome::Conflict { head: Some(head) }),
                        None => Err(not_held()),
                    };
                };
                let parent = $crate::check::to_i64("checkpoint parent", parent)?;
                let from_seq = i64::try_from(from).map_err(|_| not_held())?;
                let seq = $crate::sql::next_seq(write.parent)?;
                let bodies = write
                    .update
                    .messages
                    .iter()
                    .map(|op| match op {
                        MessageOp::Upsert { message } => {
                            $crate::sql::encode_message(message).map(Some)
                        }
                        _ => Ok(None),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let Some((from_branch, from_depth)) = self.step_at(thread_id, from_seq).await?
                else {
                    return Err(not_held());
                };
                let mut tx = self.pool.begin().await.map_err($crate::sql::backend)?;
                // The same compare-and-swap as `put`: one writer per head, fork or not.
                // It is the transaction's first statement, as in `put`: on SQLite a
                // transaction that reads first and writes second cannot wait for another
                // writer (its snapshot is stale) and fails as "database is locked".
                let swapped: Option<(i64,)> = sqlx::query_as($crate::sql::HEAD_FORK)
                    .bind(thread_id)
                    .bind(seq)
                    .bind(parent)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err($crate::sql::backend)?;
                if swapped.is_none() {
                    drop(tx);
                    return Ok(PutOutcome::Conflict {
                        head: self.head_seq(thread_id).await?,
                    });
                }
                let (start_position,): (i64,) = sqlx::query_as($crate::sql::NEXT_POSITION)
                    .bind(thread_id)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err($crate::sql::backend)?;
                // The branch starts from `from`'s messages and values.
                sqlx::query($crate::sql::ENTRY_FORK)
                    .bind(thread_id)
                    .bind(seq)
                    .bind(from_branch)
                    .bind(from_seq)
                    .execute(&mut *tx)
                    .await
                    .map_err($crate::sql::backend)?;
                let prior: Vec<(String,)> = sqlx::query_as($crate::sql::VALUES_UPTO)
                    .bind(thread_id)
                    .bind(from_seq)
                    .bind(from_branch)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err($crate::sql::backend)?;
                let mut values = $crate::sql::fold_values(&prior)?;
                values.extend(write.update.values.iter().map(|(k, v)| (k.clone(), v.clone())));
                let values = $crate::sql::encode_values(&values)?;
                sqlx::query($crate::sql::STEP_INSERT)
                    .bind(thread_id)
                    .bind(seq)
                    .bind(&write.run_id)
                    .bind(&write.node)
                    .bind(&values)
                    .bind(write.created_at_ms)
                    .bind(from_seq)
                    .bind(seq)
                    .bind(from_depth + 1)
                    .execute(&mut *tx)
                    .await
                    .map_err($crate::sql::backend)?;
                let next_position =
                    Self::write_ops(&mut tx, thread_id, seq, seq, start_position, &write, &bodies)
                        .await?;
                sqlx::query($crate::sql::HEAD_SET)
                    .bind(thread_id)
                    .bind(next_position)
                    .bind(&values)
                    .execute(&mut *tx)
                    .await
                    .map_err($crate::sql::backend)?;
                tx.commit().await.map_err($crate::sql::backend)?;
                Ok(PutOutcome::Saved {
                    seq: $crate::check::to_u64("seq", seq)?,
                })
            }

            async fn latest(
                &self,
                thread_id: &str,
            ) -> Result<Option<keel_core::store::Checkpoint>, StoreError> {
                $crate::check::text("thread_id", thread_id)?;
                let row: Option<$crate::sql::LatestRow> =
                    sqlx::query_as($crate::sql::LATEST_STEP)
                        .bind(thread_id)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err($crate::sql::backend)?;
                let Some(row) = row else {
                    return Ok(None);
                };
                // The state at the head's seq, whatever a concurrent writer commits meanwhile.
                let bodies: Vec<(String,)> = sqlx::query_as($crate::sql::ENTRIES_AT)
                    .bind(thread_id)
                    .bind(row.0)
                    .bind(row.7)
                    .fetch_all(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                $crate::sql::decode_latest(row, &bodies).map(Some)
            }

            async fn history(
                &self,
                thread_id: &str,
            ) -> Result<Vec<keel_core::store::Checkpoint>, StoreError> {
                let mut all = self.branch_page(thread_id, None, None, usize::MAX).await?;
                all.reverse();
                Ok(all)
            }

            async fn history_page(
                &self,
                thread_id: &str,
                before: Option<u64>,
                limit: usize,
            ) -> Result<Vec<keel_core::store::Checkpoint>, StoreError> {
                self.branch_page(thread_id, None, before, limit).await
            }

            async fn branch_page(
                &self,
                thread_id: &str,
                tip: Option<u64>,
                before: Option<u64>,
                limit: usize,
            ) -> Result<Vec<keel_core::store::Checkpoint>, StoreError> {
                $crate::check::text("thread_id", thread_id)?;
                let mut page = Vec::new();
                if limit == 0 || before == Some(0) {
                    return Ok(page);
                }
                let start: Option<(i64, i64)> = match tip {
                    None => sqlx::query_as($crate::sql::HEAD_ROW)
                        .bind(thread_id)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err($crate::sql::backend)?,
                    Some(tip) => match i64::try_from(tip) {
                        Ok(tip) => self.step_at(thread_id, tip).await?.map(|(b, _)| (tip, b)),
                        Err(_) => None,
                    },
                };
                let Some((mut cut, mut branch)) = start else {
                    return Ok(page);
                };
                let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
                while page.len() < limit {
                    let upto = cut.min(before - 1);
                    let segment = self.segment(thread_id, branch, upto, limit - page.len()).await?;
                    page.extend(segment);
                    if page.len() >= limit {
                        break;
                    }
                    // On to the checkpoint this branch forked from, on its own branch.
                    let from: Option<(Option<i64>,)> = sqlx::query_as($crate::sql::BRANCH_FROM)
                        .bind(thread_id)
                        .bind(branch)
                        .fetch_optional(&self.pool)
                        .await
                        .map_err($crate::sql::backend)?;
                    let Some((Some(from),)) = from else { break };
                    let Some((from_branch, _)) = self.step_at(thread_id, from).await? else {
                        break;
                    };
                    if from_branch == branch {
                        break;
                    }
                    (cut, branch) = (from, from_branch);
                }
                Ok(page)
            }

            async fn tree_page(
                &self,
                thread_id: &str,
                before: Option<u64>,
                limit: usize,
            ) -> Result<Vec<keel_core::store::Checkpoint>, StoreError> {
                $crate::check::text("thread_id", thread_id)?;
                let mut page = Vec::new();
                if limit == 0 || before == Some(0) {
                    return Ok(page);
                }
                let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
                let seqs: Vec<(i64, i64)> = sqlx::query_as($crate::sql::TREE_SEQS)
                    .bind(thread_id)
                    .bind(before)
                    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                    .fetch_all(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                // Only the current branch grows, so a branch's steps are consecutive
                // seqs: each run of one branch is its newest steps up to the run's first.
                for run in seqs.chunk_by(|a, b| a.1 == b.1) {
                    let (upto, branch) = run[0];
                    page.extend(self.segment(thread_id, branch, upto, run.len()).await?);
                }
                Ok(page)
            }

            async fn checkpoint_at(
                &self,
                thread_id: &str,
                seq: u64,
            ) -> Result<Option<keel_core::store::Checkpoint>, StoreError> {
                $crate::check::text("thread_id", thread_id)?;
                let Ok(seq) = i64::try_from(seq) else {
                    return Ok(None);
                };
                let Some((branch, _)) = self.step_at(thread_id, seq).await? else {
                    return Ok(None);
                };
                Ok(self
                    .segment(thread_id, branch, seq, 1)
                    .await?
                    .into_iter()
                    .find(|cp| i64::try_from(cp.seq) == Ok(seq)))
            }

            async fn delete_thread(&self, thread_id: &str) -> Result<u64, StoreError> {
                $crate::check::text("thread_id", thread_id)?;
                let mut tx = self.pool.begin().await.map_err($crate::sql::backend)?;
                let mut steps = 0;
                for q in $crate::sql::DELETE_THREAD {
                    // The last statement deletes the steps: its count is the answer.
                    steps = sqlx::query(q)
                        .bind(thread_id)
                        .execute(&mut *tx)
                        .await
                        .map_err($crate::sql::backend)?
                        .rows_affected();
                }
                tx.commit().await.map_err($crate::sql::backend)?;
                Ok(steps)
            }

            async fn copy_thread(&self, from: &str, to: &str) -> Result<u64, StoreError> {
                $crate::check::text("thread_id", from)?;
                $crate::check::text("thread_id", to)?;
                if self.head_seq(to).await?.is_some() {
                    return Err(StoreError::Invalid(format!(
                        "thread {to:?} already has checkpoints; a copy needs a thread without any"
                    )));
                }
                let mut tx = self.pool.begin().await.map_err($crate::sql::backend)?;
                let mut steps = 0;
                for q in $crate::sql::COPY_THREAD {
                    // The last statement copies the steps: its count is the answer.
                    steps = sqlx::query(q)
                        .bind(from)
                        .bind(to)
                        .execute(&mut *tx)
                        .await
                        .map_err(|e| {
                            if $crate::sql::is_unique_violation(&e) {
                                StoreError::Invalid(format!(
                                    "thread {to:?} already has checkpoints; a copy needs a thread without any"
                                ))
                            } else {
                                $crate::sql::backend(e)
                            }
                        })?
                        .rows_affected();
                }
                tx.commit().await.map_err($crate::sql::backend)?;
                Ok(steps)
            }
        }

        #[async_trait::async_trait]
        impl keel_core::store::ChatHistoryStore for $store {
            async fn append(
                &self,
                scope: &keel_core::store::SessionScope,
                messages: &[keel_core::store::StoredMessage],
            ) -> Result<(), StoreError> {
                self.append_with($q.append, scope, messages).await.map(|_| ())
            }

            async fn append_new(
                &self,
                scope: &keel_core::store::SessionScope,
                messages: &[keel_core::store::StoredMessage],
            ) -> Result<u64, StoreError> {
                self.append_with($q.append_new, scope, messages).await
            }

            async fn append_stamped(
                &self,
                scope: &keel_core::store::SessionScope,
                messages: &[keel_core::message::Message],
                not_before_ms: i64,
            ) -> Result<Vec<keel_core::store::Cursor>, StoreError> {
                $crate::check::scope(scope)?;
                $crate::check::batch_ids(messages.iter().map(|m| m.id()))?;
                if messages.is_empty() {
                    return Ok(Vec::new());
                }
                let bodies = messages
                    .iter()
                    .map($crate::sql::encode_message)
                    .collect::<Result<Vec<_>, _>>()?;
                let rows: Vec<_> = messages.iter().zip(&bodies).collect();
                let chunks: Vec<_> = rows.chunks($crate::sql::APPEND_ROWS_PER_STATEMENT).collect();
                // Each chunk stamps after the newest row, the previous chunk's included.
                let mut tx = self.batch_transaction(chunks.len()).await?;
                let mut stored = Vec::with_capacity(messages.len());
                for chunk in &chunks {
                    let sql = $crate::sql::stamped($q.append_stamped, chunk.len());
                    // Built from a constant statement and a row count only: no input text.
                    let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                        .persistent(true)
                        .bind(&scope.flow_id)
                        .bind(&scope.user_id)
                        .bind(&scope.session_id)
                        .bind(&scope.context_id)
                        .bind(not_before_ms);
                    for (i, (m, body)) in chunk.iter().enumerate() {
                        q = q
                            .bind(m.id())
                            .bind(i64::try_from(i).unwrap_or(i64::MAX))
                            .bind(m.role().as_str())
                            .bind(*body);
                    }
                    let r: Result<Vec<(String, i64)>, _> = match tx.as_mut() {
                        Some(tx) => q.fetch_all(&mut **tx).await,
                        None => q.fetch_all(&self.pool).await,
                    };
                    let r = r.map_err($crate::sql::backend)?;
                    stored.extend(r.into_iter().map(|(message_id, timestamp_ms)| {
                        keel_core::store::Cursor {
                            timestamp_ms,
                            message_id,
                        }
                    }));
                }
                if let Some(tx) = tx {
                    tx.commit().await.map_err($crate::sql::backend)?;
                }
                stored.sort();
                Ok(stored)
            }

            async fn delete_session_history(
                &self,
                flow_id: &str,
                user_id: &str,
                session_id: &str,
            ) -> Result<u64, StoreError> {
                self.delete_session_rows($crate::sql::DELETE_HISTORY, flow_id, user_id, session_id)
                    .await
            }

            async fn last_n(
                &self,
                scope: &keel_core::store::SessionScope,
                n: usize,
            ) -> Result<Vec<keel_core::store::StoredMessage>, StoreError> {
                $crate::check::scope(scope)?;
                if n == 0 {
                    return Ok(Vec::new());
                }
                // Only a number is formatted in (see LAST_N_UNLIMITED).
                let text = format!(
                    "{}{}",
                    $crate::sql::LAST_N_UNLIMITED,
                    $crate::check::limit(n)
                );
                let query = sqlx::query_as(sqlx::AssertSqlSafe(text))
                    .persistent(true)
                    .bind(&scope.flow_id)
                    .bind(&scope.user_id)
                    .bind(&scope.session_id)
                    .bind(&scope.context_id);
                let rows: Vec<(i64, String)> = query
                    .fetch_all(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                let mut out = Self::messages(rows)?;
                out.reverse();
                Ok(out)
            }

            async fn newest_timestamp(
                &self,
                scope: &keel_core::store::SessionScope,
            ) -> Result<Option<i64>, StoreError> {
                $crate::check::scope(scope)?;
                let (t,): (Option<i64>,) = sqlx::query_as($crate::sql::NEWEST_TIMESTAMP)
                    .bind(&scope.flow_id)
                    .bind(&scope.user_id)
                    .bind(&scope.session_id)
                    .bind(&scope.context_id)
                    .fetch_one(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                Ok(t)
            }

            async fn after(
                &self,
                scope: &keel_core::store::SessionScope,
                cursor: Option<&keel_core::store::Cursor>,
                limit: usize,
            ) -> Result<Vec<keel_core::store::StoredMessage>, StoreError> {
                $crate::check::scope(scope)?;
                if limit == 0 {
                    return Ok(Vec::new());
                }
                let q = $crate::sql::bind_scope_cursor!(
                    $crate::sql::AFTER_START,
                    $crate::sql::AFTER_CURSOR,
                    scope,
                    cursor
                );
                let rows: Vec<(i64, String)> = q
                    .bind($crate::check::limit(limit))
                    .fetch_all(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                Self::messages(rows)
            }

            async fn count_after(
                &self,
                scope: &keel_core::store::SessionScope,
                cursor: Option<&keel_core::store::Cursor>,
            ) -> Result<u64, StoreError> {
                $crate::check::scope(scope)?;
                let q = $crate::sql::bind_scope_cursor!(
                    $crate::sql::COUNT_START,
                    $crate::sql::COUNT_CURSOR,
                    scope,
                    cursor
                );
                let (n,): (i64,) = q
                    .fetch_one(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                $crate::check::to_u64("count", n)
            }
        }

        #[async_trait::async_trait]
        impl keel_core::store::SessionMemoryStore for $store {
            async fn get_state(
                &self,
                scope: &keel_core::store::SessionScope,
            ) -> Result<Option<keel_core::store::SessionMemoryState>, StoreError> {
                use sqlx::Row as _;
                $crate::check::scope(scope)?;
                let row = sqlx::query($crate::sql::GET_STATE)
                    .bind(&scope.flow_id)
                    .bind(&scope.user_id)
                    .bind(&scope.session_id)
                    .bind(&scope.context_id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                let Some(row) = row else { return Ok(None) };
                let row = (|| -> Result<$crate::sql::StateRow, sqlx::Error> {
                    Ok($crate::sql::StateRow {
                        summary: row.try_get("summary")?,
                        pinned: row.try_get("pinned")?,
                        covered_until_message_id: row.try_get("covered_until_message_id")?,
                        covered_until_timestamp: row.try_get("covered_until_timestamp")?,
                        absorbed_count: row.try_get("absorbed_count")?,
                        summary_model: row.try_get("summary_model")?,
                        version: row.try_get("version")?,
                        created_at_ms: row.try_get("created_at_ms")?,
                        updated_at_ms: row.try_get("updated_at_ms")?,
                    })
                })()
                .map_err(|e| StoreError::Corrupt(format!("session_memory_state row: {e}")))?;
                $crate::sql::decode_state(row).map(Some)
            }

            async fn save_state(
                &self,
                scope: &keel_core::store::SessionScope,
                state: &keel_core::store::SessionMemoryState,
                expected_version: u64,
            ) -> Result<keel_core::store::SaveOutcome, StoreError> {
                $crate::check::scope(scope)?;
                let enc = $crate::sql::encode_state(state, expected_version)?;
                let now = $crate::check::now_ms();
                let q = if expected_version == 0 {
                    $q.insert_state
                } else {
                    $q.update_state
                };
                let q = sqlx::query(q)
                    .bind(&scope.flow_id)
                    .bind(&scope.user_id)
                    .bind(&scope.session_id)
                    .bind(&scope.context_id)
                    .bind(&state.summary)
                    .bind(&enc.pinned)
                    .bind(&enc.cursor_id)
                    .bind(enc.cursor_ts)
                    .bind(enc.absorbed)
                    .bind(&state.summary_model)
                    .bind(enc.version);
                let q = if expected_version == 0 {
                    q.bind(now).bind(now)
                } else {
                    q.bind(now).bind(enc.expected)
                };
                let done = q.execute(&self.pool).await.map_err($crate::sql::backend)?;
                // Insert: ON CONFLICT DO NOTHING leaves 0 rows when the scope exists, even
                // if another process inserted it a moment ago. Update: 0 rows when the
                // stored version moved on (or the row is gone).
                Ok(if done.rows_affected() == 1 {
                    keel_core::store::SaveOutcome::Saved {
                        version: expected_version + 1,
                    }
                } else {
                    keel_core::store::SaveOutcome::Conflict
                })
            }

            async fn delete_session_states(
                &self,
                flow_id: &str,
                user_id: &str,
                session_id: &str,
            ) -> Result<u64, StoreError> {
                self.delete_session_rows($crate::sql::DELETE_STATES, flow_id, user_id, session_id)
                    .await
            }
        }

        #[async_trait::async_trait]
        impl keel_core::store::SummaryStore for $store {
            async fn get_summary(
                &self,
                key: &str,
            ) -> Result<Option<serde_json::Value>, StoreError> {
                $crate::check::text("key", key)?;
                let row: Option<(String,)> = sqlx::query_as($crate::sql::GET_SUMMARY)
                    .bind(key)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                row.map(|(text,)| {
                    serde_json::from_str(&text)
                        .map_err(|e| StoreError::Corrupt(format!("summary_cache.value: {e}")))
                })
                .transpose()
            }

            async fn put_summary(
                &self,
                key: &str,
                value: &serde_json::Value,
            ) -> Result<(), StoreError> {
                $crate::check::text("key", key)?;
                let text = serde_json::to_string(value)
                    .map_err(|e| StoreError::Invalid(format!("summary value: {e}")))?;
                sqlx::query($q.put_summary)
                    .bind(key)
                    .bind(text)
                    .bind($crate::check::now_ms())
                    .execute(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                Ok(())
            }

            async fn delete_summaries(&self, prefix: &str) -> Result<u64, StoreError> {
                $crate::check::prefix(prefix)?;
                let done = sqlx::query($crate::sql::DELETE_SUMMARIES)
                    .bind(prefix)
                    .execute(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                sqlx::query($crate::sql::DELETE_LEASES)
                    .bind(prefix)
                    .execute(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                Ok(done.rows_affected())
            }

            async fn try_lease(
                &self,
                key: &str,
                holder: &str,
                ttl: std::time::Duration,
            ) -> Result<bool, StoreError> {
                $crate::check::text("key", key)?;
                $crate::check::text("holder", holder)?;
                let now = $crate::check::now_ms();
                let until = now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
                let done = sqlx::query($crate::sql::TAKE_LEASE)
                    .bind(key)
                    .bind(holder)
                    .bind(until)
                    .bind(now)
                    .execute(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                Ok(done.rows_affected() == 1)
            }

            async fn release_lease(&self, key: &str, holder: &str) -> Result<(), StoreError> {
                sqlx::query($crate::sql::RELEASE_LEASE)
                    .bind(key)
                    .bind(holder)
                    .execute(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                Ok(())
            }
        }
    };
}
pub(crate) use impl_sql_store;

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
