//! What the SQL backends share: the queries both dialects accept, encoding of rows, and
//! [`impl_sql_store!`], which writes every storage trait once for any sqlx database.
//! Only statements that write JSON differ between SQLite and PostgreSQL; each backend
//! passes those in its [`Queries`].

use std::collections::HashMap;

use keel_core::message::Message;
use keel_core::store::{Checkpoint, Cursor, SessionMemoryState, StoreError, StoredMessage};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::check;

/// The statements whose text differs between dialects (all write JSON columns, which
/// PostgreSQL types as `JSON` and SQLite keeps as `TEXT`).
pub(crate) struct Queries {
    /// `$1..$4` scope, `$5` message id, `$6` timestamp, `$7` role, `$8` body JSON.
    pub append: &'static str,
    /// `$1..$4` scope, `$5` summary, `$6` pinned JSON, `$7` cursor id, `$8` cursor
    /// timestamp, `$9` absorbed, `$10` model, `$11` version, `$12` created, `$13` updated.
    pub insert_state: &'static str,
    /// As `insert_state` for `$1..$11`, `$12` updated, `$13` expected version.
    pub update_state: &'static str,
    /// `$1` key, `$2` value JSON, `$3` updated.
    pub put_summary: &'static str,
    /// `$1` thread, `$2` a JSON array of `[hash, body JSON text]` pairs.
    pub put_blobs: &'static str,
    /// `$1` thread, `$2` run id, `$3` node, `$4` hashes JSON, `$5` values JSON, `$6`
    /// created; returns `seq`.
    pub put_checkpoint: &'static str,
    /// `$1` thread, `$2` seq: `content_hash`, `body` of the messages of one checkpoint.
    pub blobs_of_checkpoint: &'static str,
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

pub(crate) const LAST_N: &str = scoped!(
    "SELECT timestamp_ms, CAST(body AS TEXT) AS body FROM chat_messages",
    " ORDER BY timestamp_ms DESC, message_id DESC LIMIT $5"
);
pub(crate) const AFTER_START: &str = scoped!(
    "SELECT timestamp_ms, CAST(body AS TEXT) AS body FROM chat_messages",
    " ORDER BY timestamp_ms, message_id LIMIT $5"
);
pub(crate) const AFTER_CURSOR: &str = scoped!(
    "SELECT timestamp_ms, CAST(body AS TEXT) AS body FROM chat_messages",
    " AND (timestamp_ms, message_id) > ($5, $6) ORDER BY timestamp_ms, message_id LIMIT $7"
);
pub(crate) const COUNT_START: &str = scoped!("SELECT COUNT(*) AS n FROM chat_messages", "");
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
pub(crate) const LATEST_CHECKPOINT: &str = "SELECT seq, run_id, node, \
     CAST(message_hashes AS TEXT) AS message_hashes, CAST(state_values AS TEXT) AS state_values, \
     created_at_ms FROM checkpoints WHERE thread_id = $1 ORDER BY seq DESC LIMIT 1";
pub(crate) const ALL_CHECKPOINTS: &str = "SELECT seq, run_id, node, \
     CAST(message_hashes AS TEXT) AS message_hashes, CAST(state_values AS TEXT) AS state_values, \
     created_at_ms FROM checkpoints WHERE thread_id = $1 ORDER BY seq";
pub(crate) const ALL_BLOBS: &str =
    "SELECT content_hash, CAST(body AS TEXT) AS body FROM checkpoint_messages WHERE thread_id = $1";

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

/// The key of a message in `checkpoint_messages`: the first 128 bits of the SHA-256 of
/// its JSON, in hex. Content-addressed rather than keyed by id because middleware may
/// rewrite a message under the same id, and both versions must stay recoverable.
pub(crate) fn content_hash(body: &str) -> String {
    let digest = Sha256::digest(body.as_bytes());
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A checkpoint ready for the two inserts.
pub(crate) struct EncodedCheckpoint {
    /// JSON array of `[hash, body]` pairs, each distinct message once.
    pub blobs: String,
    /// JSON array of hashes, in message order.
    pub hashes: String,
    /// JSON object of state values.
    pub values: String,
}

pub(crate) fn encode_checkpoint(cp: &Checkpoint) -> Result<EncodedCheckpoint, StoreError> {
    let mut hashes = Vec::with_capacity(cp.messages.len());
    let mut blobs = Vec::with_capacity(cp.messages.len());
    let mut seen = std::collections::HashSet::new();
    for m in &cp.messages {
        let body = encode_message(m)?;
        let hash = content_hash(&body);
        if seen.insert(hash.clone()) {
            blobs.push(Value::Array(vec![
                Value::String(hash.clone()),
                Value::String(body),
            ]));
        }
        hashes.push(Value::String(hash));
    }
    let to_text = |v: &Value| {
        serde_json::to_string(v)
            .map_err(|e| StoreError::Invalid(format!("checkpoint cannot be serialized: {e}")))
    };
    Ok(EncodedCheckpoint {
        blobs: to_text(&Value::Array(blobs))?,
        hashes: to_text(&Value::Array(hashes))?,
        values: to_text(&Value::Object(cp.values.clone()))?,
    })
}

/// The columns of a `checkpoints` row.
pub(crate) struct CheckpointRow {
    pub seq: i64,
    pub run_id: String,
    pub node: String,
    pub message_hashes: String,
    pub state_values: String,
    pub created_at_ms: i64,
}

/// Rebuilds a checkpoint from its row and the decoded messages of its thread.
pub(crate) fn decode_checkpoint(
    row: CheckpointRow,
    messages: &HashMap<String, Message>,
) -> Result<Checkpoint, StoreError> {
    let hashes: Vec<String> = decode_json("checkpoints.message_hashes", &row.message_hashes)?;
    let values: Map<String, Value> = decode_json("checkpoints.state_values", &row.state_values)?;
    let seq = check::to_u64("checkpoints.seq", row.seq)?;
    let messages = hashes
        .iter()
        .map(|h| {
            messages.get(h).cloned().ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "checkpoint {seq} refers to message {h}, which is not stored"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Checkpoint {
        seq,
        run_id: row.run_id,
        node: row.node,
        messages,
        values,
        created_at_ms: row.created_at_ms,
    })
}

/// Decodes `(content_hash, body)` rows.
pub(crate) fn decode_blobs(
    rows: Vec<(String, String)>,
) -> Result<HashMap<String, Message>, StoreError> {
    rows.into_iter()
        .map(|(h, body)| Ok((h, decode_json("checkpoint_messages.body", &body)?)))
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

/// How many times `put` retries when a concurrent writer took the same seq (PostgreSQL
/// under READ COMMITTED; SQLite serialises writers and never needs it).
pub(crate) const CHECKPOINT_RETRIES: usize = 16;

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
            async fn fetch_blobs(
                &self,
                thread_id: &str,
                seq: Option<i64>,
            ) -> Result<std::collections::HashMap<String, keel_core::message::Message>, StoreError>
            {
                let rows: Vec<(String, String)> = match seq {
                    Some(seq) => {
                        sqlx::query_as($q.blobs_of_checkpoint)
                            .bind(thread_id)
                            .bind(seq)
                            .fetch_all(&self.pool)
                            .await
                    }
                    None => {
                        sqlx::query_as($crate::sql::ALL_BLOBS)
                            .bind(thread_id)
                            .fetch_all(&self.pool)
                            .await
                    }
                }
                .map_err($crate::sql::backend)?;
                $crate::sql::decode_blobs(rows)
            }

            fn checkpoint_row(
                row: &<$db as sqlx::Database>::Row,
            ) -> Result<$crate::sql::CheckpointRow, sqlx::Error> {
                use sqlx::Row as _;
                Ok($crate::sql::CheckpointRow {
                    seq: row.try_get("seq")?,
                    run_id: row.try_get("run_id")?,
                    node: row.try_get("node")?,
                    message_hashes: row.try_get("message_hashes")?,
                    state_values: row.try_get("state_values")?,
                    created_at_ms: row.try_get("created_at_ms")?,
                })
            }

            fn messages(
                rows: Vec<(i64, String)>,
            ) -> Result<Vec<keel_core::store::StoredMessage>, StoreError> {
                rows.iter()
                    .map(|(ts, body)| $crate::sql::stored_message(*ts, body))
                    .collect()
            }
        }

        #[async_trait::async_trait]
        impl keel_core::store::Checkpointer for $store {
            async fn put(
                &self,
                thread_id: &str,
                checkpoint: keel_core::store::Checkpoint,
            ) -> Result<u64, StoreError> {
                $crate::check::text("thread_id", thread_id)?;
                $crate::check::text("checkpoint.run_id", &checkpoint.run_id)?;
                $crate::check::text("checkpoint.node", &checkpoint.node)?;
                let enc = $crate::sql::encode_checkpoint(&checkpoint)?;
                // Blobs first and on their own: an interrupted put leaves at most unused
                // blobs, which the next put of the same messages reuses.
                sqlx::query($q.put_blobs)
                    .bind(thread_id)
                    .bind(&enc.blobs)
                    .execute(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                let mut last_error = None;
                for _ in 0..$crate::sql::CHECKPOINT_RETRIES {
                    let r: Result<(i64,), sqlx::Error> = sqlx::query_as($q.put_checkpoint)
                        .bind(thread_id)
                        .bind(&checkpoint.run_id)
                        .bind(&checkpoint.node)
                        .bind(&enc.hashes)
                        .bind(&enc.values)
                        .bind(checkpoint.created_at_ms)
                        .fetch_one(&self.pool)
                        .await;
                    match r {
                        Ok((seq,)) => return $crate::check::to_u64("checkpoints.seq", seq),
                        Err(e) if $crate::sql::is_unique_violation(&e) => last_error = Some(e),
                        Err(e) => return Err($crate::sql::backend(e)),
                    }
                }
                Err(StoreError::Backend(format!(
                    "checkpoint of thread {thread_id:?} lost the race for a seq {} times: {}",
                    $crate::sql::CHECKPOINT_RETRIES,
                    last_error.map(|e| e.to_string()).unwrap_or_default()
                )))
            }

            async fn latest(
                &self,
                thread_id: &str,
            ) -> Result<Option<keel_core::store::Checkpoint>, StoreError> {
                $crate::check::text("thread_id", thread_id)?;
                let row = sqlx::query($crate::sql::LATEST_CHECKPOINT)
                    .bind(thread_id)
                    .fetch_optional(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                let Some(row) = row else { return Ok(None) };
                let row = Self::checkpoint_row(&row).map_err($crate::sql::backend)?;
                let blobs = self.fetch_blobs(thread_id, Some(row.seq)).await?;
                $crate::sql::decode_checkpoint(row, &blobs).map(Some)
            }

            async fn history(
                &self,
                thread_id: &str,
            ) -> Result<Vec<keel_core::store::Checkpoint>, StoreError> {
                $crate::check::text("thread_id", thread_id)?;
                let rows = sqlx::query($crate::sql::ALL_CHECKPOINTS)
                    .bind(thread_id)
                    .fetch_all(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                if rows.is_empty() {
                    return Ok(Vec::new());
                }
                // Read after the checkpoints: every blob a listed checkpoint refers to was
                // committed before it, so this read sees them all.
                let blobs = self.fetch_blobs(thread_id, None).await?;
                rows.iter()
                    .map(|r| {
                        let row = Self::checkpoint_row(r).map_err($crate::sql::backend)?;
                        $crate::sql::decode_checkpoint(row, &blobs)
                    })
                    .collect()
            }
        }

        #[async_trait::async_trait]
        impl keel_core::store::ChatHistoryStore for $store {
            async fn append(
                &self,
                scope: &keel_core::store::SessionScope,
                messages: &[keel_core::store::StoredMessage],
            ) -> Result<(), StoreError> {
                $crate::check::scope(scope)?;
                $crate::check::append_batch(messages)?;
                if messages.is_empty() {
                    return Ok(());
                }
                let bodies = messages
                    .iter()
                    .map(|m| $crate::sql::encode_message(&m.message))
                    .collect::<Result<Vec<_>, _>>()?;
                // One transaction: a batch with one duplicate id stores nothing.
                let mut tx = self.pool.begin().await.map_err($crate::sql::backend)?;
                for (m, body) in messages.iter().zip(&bodies) {
                    let r = sqlx::query($q.append)
                        .bind(&scope.flow_id)
                        .bind(&scope.user_id)
                        .bind(&scope.session_id)
                        .bind(&scope.context_id)
                        .bind(m.message.id())
                        .bind(m.timestamp_ms)
                        .bind(m.message.role().as_str())
                        .bind(body)
                        .execute(&mut *tx)
                        .await;
                    match r {
                        Ok(_) => {}
                        Err(e) if $crate::sql::is_unique_violation(&e) => {
                            return Err($crate::check::duplicate_id(m.message.id()));
                        }
                        Err(e) => return Err($crate::sql::backend(e)),
                    }
                }
                tx.commit().await.map_err($crate::sql::backend)
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
                let rows: Vec<(i64, String)> = sqlx::query_as($crate::sql::LAST_N)
                    .bind(&scope.flow_id)
                    .bind(&scope.user_id)
                    .bind(&scope.session_id)
                    .bind(&scope.context_id)
                    .bind($crate::check::limit(n))
                    .fetch_all(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                let mut out = Self::messages(rows)?;
                out.reverse();
                Ok(out)
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
                $crate::check::session(flow_id, user_id, session_id)?;
                let done = sqlx::query($crate::sql::DELETE_STATES)
                    .bind(flow_id)
                    .bind(user_id)
                    .bind(session_id)
                    .execute(&self.pool)
                    .await
                    .map_err($crate::sql::backend)?;
                Ok(done.rows_affected())
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
        }
    };
}
pub(crate) use impl_sql_store;
