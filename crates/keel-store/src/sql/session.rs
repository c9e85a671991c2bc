//! A [`SqlStore`]'s per-session traits: the [`ChatHistoryStore`], the
//! [`SessionMemoryStore`] and the [`SummaryStore`] behind the summary cache.

use std::time::Duration;

use keel_core::message::Message;
use keel_core::store::{
    ChatHistoryStore, Cursor, SaveOutcome, SessionMemoryState, SessionMemoryStore, SessionScope,
    StoreError, StoredMessage, SummaryStore,
};
use serde_json::Value;
use sqlx::{ColumnIndex, Decode, Encode, Executor, IntoArguments, Row as _, Type};

use super::{
    AFTER_CURSOR, AFTER_START, APPEND_ROWS_PER_STATEMENT, COUNT_CURSOR, COUNT_START,
    DELETE_HISTORY, DELETE_LEASES, DELETE_STATES, DELETE_SUMMARIES, Dialect, GET_STATE,
    GET_SUMMARY, LAST_N_UNLIMITED, MESSAGE_EXISTS, NEWEST_TIMESTAMP, RELEASE_LEASE, SqlStore,
    StateRow, TAKE_LEASE, backend, bind_scope_cursor, decode_state, encode_message, encode_state,
    is_unique_violation, multi_row, stamped, stored_messages,
};
use crate::check;

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
    /// Appends a chat-history batch in one transaction with `query` (`append`: fail on a
    /// stored id; `append_new`: skip it); returns the rows stored.
    async fn append_with(
        &self,
        query: &'static str,
        scope: &SessionScope,
        messages: &[StoredMessage],
    ) -> Result<u64, StoreError> {
        check::scope(scope)?;
        check::append_batch(messages)?;
        if messages.is_empty() {
            return Ok(0);
        }
        let bodies = messages
            .iter()
            .map(|m| encode_message(&m.message))
            .collect::<Result<Vec<_>, _>>()?;
        // One statement for the batch (one round trip, atomic by itself) while it fits
        // the parameter limit; larger batches go in one transaction.
        let rows: Vec<_> = messages.iter().zip(&bodies).collect();
        let chunks: Vec<_> = rows.chunks(APPEND_ROWS_PER_STATEMENT).collect();
        let mut tx = self.batch_transaction(chunks.len()).await?;
        let mut stored = 0;
        for chunk in &chunks {
            let sql = multi_row(query, chunk.len());
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
                Ok(done) => stored += DB::rows_affected(&done),
                Err(e) if is_unique_violation(&e) => {
                    // Name the id: the first of the chunk already stored.
                    let id = self
                        .first_stored(scope, chunk.iter().map(|(m, _)| m.message.id()))
                        .await
                        .unwrap_or_else(|| chunk[0].0.message.id().to_owned());
                    return Err(check::duplicate_id(&id));
                }
                Err(e) => return Err(backend(e)),
            }
        }
        if let Some(tx) = tx {
            tx.commit().await.map_err(backend)?;
        }
        Ok(stored)
    }

    /// The first of `ids` already stored in the scope (to name a duplicate).
    async fn first_stored<'i>(
        &self,
        scope: &SessionScope,
        ids: impl Iterator<Item = &'i str>,
    ) -> Option<String> {
        for id in ids {
            let found: Option<(i64,)> = sqlx::query_as(MESSAGE_EXISTS)
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

#[async_trait::async_trait]
impl<DB: Dialect> ChatHistoryStore for SqlStore<DB>
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
    async fn append(
        &self,
        scope: &SessionScope,
        messages: &[StoredMessage],
    ) -> Result<(), StoreError> {
        self.append_with(DB::QUERIES.append, scope, messages)
            .await
            .map(|_| ())
    }

    async fn append_new(
        &self,
        scope: &SessionScope,
        messages: &[StoredMessage],
    ) -> Result<u64, StoreError> {
        self.append_with(DB::QUERIES.append_new, scope, messages)
            .await
    }

    async fn append_stamped(
        &self,
        scope: &SessionScope,
        messages: &[Message],
        not_before_ms: i64,
    ) -> Result<Vec<Cursor>, StoreError> {
        check::scope(scope)?;
        check::batch_ids(messages.iter().map(|m| m.id()))?;
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let bodies = messages
            .iter()
            .map(encode_message)
            .collect::<Result<Vec<_>, _>>()?;
        let rows: Vec<_> = messages.iter().zip(&bodies).collect();
        let chunks: Vec<_> = rows.chunks(APPEND_ROWS_PER_STATEMENT).collect();
        // Each chunk stamps after the newest row, the previous chunk's included.
        let mut tx = self.batch_transaction(chunks.len()).await?;
        let mut stored = Vec::with_capacity(messages.len());
        for chunk in &chunks {
            let sql = stamped(DB::QUERIES.append_stamped, chunk.len());
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
            let r = r.map_err(backend)?;
            stored.extend(r.into_iter().map(|(message_id, timestamp_ms)| Cursor {
                timestamp_ms,
                message_id,
            }));
        }
        if let Some(tx) = tx {
            tx.commit().await.map_err(backend)?;
        }
        stored.sort();
        Ok(stored)
    }

    async fn append_stamped_counting(
        &self,
        scope: &SessionScope,
        messages: &[Message],
        not_before_ms: i64,
        count_after: Option<&Cursor>,
    ) -> Result<(Vec<Cursor>, u64), StoreError> {
        if !DB::MULTI_STATEMENT || messages.is_empty() || messages.len() > APPEND_ROWS_PER_STATEMENT
        {
            let stored = self.append_stamped(scope, messages, not_before_ms).await?;
            let count = self.count_after(scope, count_after).await?;
            return Ok((stored, count));
        }
        check::scope(scope)?;
        check::batch_ids(messages.iter().map(|m| m.id()))?;
        let bodies = messages
            .iter()
            .map(encode_message)
            .collect::<Result<Vec<_>, _>>()?;
        // The INSERT, then the COUNT on the same connection: one call to the driver.
        // The cursor's parameters follow the rows' (`$6` on, four a row).
        let mut sql = stamped(DB::QUERIES.append_stamped, messages.len());
        sql.push_str("; ");
        sql.push_str(COUNT_START);
        if count_after.is_some() {
            let p = 6 + 4 * messages.len();
            sql.push_str(&format!(
                " AND (timestamp_ms, message_id) > (${p}, ${})",
                p + 1
            ));
        }
        // Built from constant statements and a row count only: no input text.
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql))
            .persistent(true)
            .bind(&scope.flow_id)
            .bind(&scope.user_id)
            .bind(&scope.session_id)
            .bind(&scope.context_id)
            .bind(not_before_ms);
        for (i, (m, body)) in messages.iter().zip(&bodies).enumerate() {
            q = q
                .bind(m.id())
                .bind(i64::try_from(i).unwrap_or(i64::MAX))
                .bind(m.role().as_str())
                .bind(body);
        }
        if let Some(c) = count_after {
            q = q.bind(c.timestamp_ms).bind(&c.message_id);
        }
        let rows = q.fetch_all(&self.pool).await.map_err(backend)?;
        // The INSERT's rows are `(message_id, timestamp_ms)`, the COUNT's is `(n)`.
        let mut stored = Vec::with_capacity(messages.len());
        let mut count = None;
        for row in rows {
            let decoded = if row.len() == 1 {
                row.try_get::<i64, _>(0).map(|n| count = Some(n))
            } else {
                row.try_get::<String, _>(0).and_then(|message_id| {
                    let timestamp_ms = row.try_get::<i64, _>(1)?;
                    stored.push(Cursor {
                        timestamp_ms,
                        message_id,
                    });
                    Ok(())
                })
            };
            decoded.map_err(|e| StoreError::Corrupt(format!("chat_messages append: {e}")))?;
        }
        let count = count.ok_or_else(|| {
            StoreError::Backend("the count after the append returned no row".into())
        })?;
        stored.sort();
        Ok((stored, check::to_u64("count", count)?))
    }

    async fn delete_session_history(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        self.delete_session_rows(DELETE_HISTORY, flow_id, user_id, session_id)
            .await
    }

    async fn last_n(
        &self,
        scope: &SessionScope,
        n: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        check::scope(scope)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        // Only a number is formatted in (see LAST_N_UNLIMITED).
        let text = format!("{}{}", LAST_N_UNLIMITED, check::limit(n));
        let query = sqlx::query_as(sqlx::AssertSqlSafe(text))
            .persistent(true)
            .bind(&scope.flow_id)
            .bind(&scope.user_id)
            .bind(&scope.session_id)
            .bind(&scope.context_id);
        let rows: Vec<(i64, String)> = query.fetch_all(&self.pool).await.map_err(backend)?;
        let mut out = stored_messages(rows)?;
        out.reverse();
        Ok(out)
    }

    async fn newest_timestamp(&self, scope: &SessionScope) -> Result<Option<i64>, StoreError> {
        check::scope(scope)?;
        let (t,): (Option<i64>,) = sqlx::query_as(NEWEST_TIMESTAMP)
            .bind(&scope.flow_id)
            .bind(&scope.user_id)
            .bind(&scope.session_id)
            .bind(&scope.context_id)
            .fetch_one(&self.pool)
            .await
            .map_err(backend)?;
        Ok(t)
    }

    async fn after(
        &self,
        scope: &SessionScope,
        cursor: Option<&Cursor>,
        limit: usize,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        check::scope(scope)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let rows: Vec<(i64, String)> = bind_scope_cursor(AFTER_START, AFTER_CURSOR, scope, cursor)
            .bind(check::limit(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        stored_messages(rows)
    }

    async fn count_after(
        &self,
        scope: &SessionScope,
        cursor: Option<&Cursor>,
    ) -> Result<u64, StoreError> {
        check::scope(scope)?;
        let (n,): (i64,) = bind_scope_cursor(COUNT_START, COUNT_CURSOR, scope, cursor)
            .fetch_one(&self.pool)
            .await
            .map_err(backend)?;
        check::to_u64("count", n)
    }
}

#[async_trait::async_trait]
impl<DB: Dialect> SessionMemoryStore for SqlStore<DB>
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
    async fn get_state(
        &self,
        scope: &SessionScope,
    ) -> Result<Option<SessionMemoryState>, StoreError> {
        check::scope(scope)?;
        let row = sqlx::query(GET_STATE)
            .bind(&scope.flow_id)
            .bind(&scope.user_id)
            .bind(&scope.session_id)
            .bind(&scope.context_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?;
        let Some(row) = row else { return Ok(None) };
        let row = (|| -> Result<StateRow, sqlx::Error> {
            Ok(StateRow {
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
        decode_state(row).map(Some)
    }

    async fn save_state(
        &self,
        scope: &SessionScope,
        state: &SessionMemoryState,
        expected_version: u64,
    ) -> Result<SaveOutcome, StoreError> {
        check::scope(scope)?;
        let enc = encode_state(state, expected_version)?;
        let now = check::now_ms();
        let q = if expected_version == 0 {
            DB::QUERIES.insert_state
        } else {
            DB::QUERIES.update_state
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
        let done = q.execute(&self.pool).await.map_err(backend)?;
        // Insert: ON CONFLICT DO NOTHING leaves 0 rows when the scope exists, even if
        // another process inserted it a moment ago. Update: 0 rows when the stored version
        // moved on (or the row is gone).
        Ok(if DB::rows_affected(&done) == 1 {
            SaveOutcome::Saved {
                version: expected_version + 1,
            }
        } else {
            SaveOutcome::Conflict
        })
    }

    async fn delete_session_states(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        self.delete_session_rows(DELETE_STATES, flow_id, user_id, session_id)
            .await
    }
}

#[async_trait::async_trait]
impl<DB: Dialect> SummaryStore for SqlStore<DB>
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
    async fn get_summary(&self, key: &str) -> Result<Option<Value>, StoreError> {
        check::text("key", key)?;
        let row: Option<(String,)> = sqlx::query_as(GET_SUMMARY)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?;
        row.map(|(text,)| {
            serde_json::from_str(&text)
                .map_err(|e| StoreError::Corrupt(format!("summary_cache.value: {e}")))
        })
        .transpose()
    }

    async fn put_summary(&self, key: &str, value: &Value) -> Result<(), StoreError> {
        check::text("key", key)?;
        let text = serde_json::to_string(value)
            .map_err(|e| StoreError::Invalid(format!("summary value: {e}")))?;
        sqlx::query(DB::QUERIES.put_summary)
            .bind(key)
            .bind(text)
            .bind(check::now_ms())
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn delete_summaries(&self, prefix: &str) -> Result<u64, StoreError> {
        check::prefix(prefix)?;
        let done = sqlx::query(DELETE_SUMMARIES)
            .bind(prefix)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        sqlx::query(DELETE_LEASES)
            .bind(prefix)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(DB::rows_affected(&done))
    }

    async fn try_lease(&self, key: &str, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        check::text("key", key)?;
        check::text("holder", holder)?;
        let now = check::now_ms();
        let until = now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let done = sqlx::query(TAKE_LEASE)
            .bind(key)
            .bind(holder)
            .bind(until)
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(DB::rows_affected(&done) == 1)
    }

    async fn release_lease(&self, key: &str, holder: &str) -> Result<(), StoreError> {
        sqlx::query(RELEASE_LEASE)
            .bind(key)
            .bind(holder)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }
}
