//! The recall index ([`RecallIndex`]) on every backend: the memory store's BM25 postings,
//! SQLite FTS5 and PostgreSQL `tsvector` with a GIN index (migration 0003). The
//! databases find the candidates and count document frequencies; the shared scorer in
//! [`keel_core::recall`] ranks them, so every backend returns the same hits.

use async_trait::async_trait;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use keel_core::recall::{CorpusStats, check_document, rank, terms};
use keel_core::recall::{RecallDocument, RecallHit, RecallIndex};
use keel_core::store::{SessionScope, StoreError};

use crate::memory::MemoryStore;
use crate::store::Store;

/// Candidates the database hands to the scorer, by its own rank.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
const CANDIDATES: i64 = 256;

/// Documents per INSERT (10 parameters each, well under both dialects' limits).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
const ROWS_PER_STATEMENT: usize = 200;

/// Query terms used at most (a long question is cut).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
const MAX_QUERY_TERMS: usize = 32;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn encode(document: &RecallDocument) -> Result<(String, String, i64), StoreError> {
    check_document(document)?;
    let json = serde_json::to_string(document)
        .map_err(|e| StoreError::Invalid(format!("recall document: {e}")))?;
    let t = terms(&document.text);
    let count = i64::try_from(t.len()).unwrap_or(i64::MAX);
    Ok((json, t.join(" "), count))
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn decode(json: &str, terms: &str) -> Result<(RecallDocument, Vec<String>), StoreError> {
    let d: RecallDocument = serde_json::from_str(json)
        .map_err(|e| StoreError::Corrupt(format!("recall document: {e}")))?;
    Ok((d, terms.split_whitespace().map(str::to_owned).collect()))
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn seq(document: &RecallDocument) -> i64 {
    i64::try_from(document.seq).unwrap_or(i64::MAX)
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn stats(row: (i64, i64)) -> CorpusStats {
    CorpusStats {
        documents: u64::try_from(row.0).unwrap_or(0),
        total_terms: u64::try_from(row.1).unwrap_or(0),
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn query_slice(query: &[String]) -> &[String] {
    &query[..query.len().min(MAX_QUERY_TERMS)]
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn valid_term(t: &str) -> bool {
    !t.is_empty()
        && t.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

#[async_trait]
impl RecallIndex for MemoryStore {
    async fn index_documents(
        &self,
        scope: &SessionScope,
        documents: &[RecallDocument],
    ) -> Result<u64, StoreError> {
        self.recall_index().index_documents(scope, documents).await
    }

    async fn search(
        &self,
        scope: &SessionScope,
        query: &[String],
        limit: usize,
    ) -> Result<Vec<RecallHit>, StoreError> {
        self.recall_index().search(scope, query, limit).await
    }

    async fn indexed_count(&self, scope: &SessionScope) -> Result<u64, StoreError> {
        self.recall_index().indexed_count(scope).await
    }

    async fn delete_session_index(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        self.recall_index()
            .delete_session_index(flow_id, user_id, session_id)
            .await
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use std::collections::HashMap;

    use keel_core::hash::StableHasher;

    use super::*;
    use crate::sql::backend;
    use crate::sqlite::SqliteStore;

    /// A term naming the scope (FNV-1a over its four parts, each followed by 0xff), so
    /// FTS5 itself keeps to one scope; the join on the scope columns is what decides.
    fn scope_tag(scope: &SessionScope) -> String {
        let mut h = StableHasher::new();
        for part in [
            &scope.flow_id,
            &scope.user_id,
            &scope.session_id,
            &scope.context_id,
        ] {
            h.write(part.as_bytes());
            h.write_u8(0xff);
        }
        format!("s{:016x}", h.finish())
    }

    #[async_trait]
    impl RecallIndex for SqliteStore {
        async fn index_documents(
            &self,
            scope: &SessionScope,
            documents: &[RecallDocument],
        ) -> Result<u64, StoreError> {
            let rows = documents
                .iter()
                .map(|d| encode(d).map(|r| (d, r)))
                .collect::<Result<Vec<_>, _>>()?;
            if rows.is_empty() {
                return Ok(0);
            }
            let tag = scope_tag(scope);
            let mut added = 0;
            // One statement per chunk: atomic by itself, and no transaction that would
            // have to upgrade a read lock while other writers wait.
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                let sql = crate::sql::multi_row(
                    "INSERT INTO recall_documents (flow_id, user_id, session_id, context_id, \
                     message_id, seq, document, scope_tag, terms, term_count) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
                     ON CONFLICT (flow_id, user_id, session_id, context_id, message_id) DO NOTHING",
                    chunk.len(),
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for (d, (json, t, count)) in chunk {
                    q = q
                        .bind(&scope.flow_id)
                        .bind(&scope.user_id)
                        .bind(&scope.session_id)
                        .bind(&scope.context_id)
                        .bind(&d.message_id)
                        .bind(seq(d))
                        .bind(json)
                        .bind(&tag)
                        .bind(t)
                        .bind(*count);
                }
                added += q
                    .execute(self.pool())
                    .await
                    .map_err(backend)?
                    .rows_affected();
            }
            Ok(added)
        }

        async fn search(
            &self,
            scope: &SessionScope,
            query: &[String],
            limit: usize,
        ) -> Result<Vec<RecallHit>, StoreError> {
            let query: Vec<String> = query_slice(query)
                .iter()
                .filter(|t| valid_term(t))
                .cloned()
                .collect();
            if query.is_empty() || limit == 0 {
                return Ok(Vec::new());
            }
            let tag = scope_tag(scope);
            let mut conn = self.pool().acquire().await.map_err(backend)?;
            let totals: (i64, i64) = sqlx::query_as("SELECT count(*), COALESCE(sum(term_count), 0) FROM recall_documents d WHERE d.flow_id = $1 AND d.user_id = $2 AND d.session_id = $3 AND d.context_id = $4")
            .bind(&scope.flow_id)
            .bind(&scope.user_id)
            .bind(&scope.session_id)
            .bind(&scope.context_id)
            .fetch_one(&mut *conn)
            .await
            .map_err(backend)?;
            let mut df = HashMap::new();
            for t in &query {
                let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM recall_fts JOIN recall_documents d ON d.id = recall_fts.rowid WHERE recall_fts MATCH $5 AND d.flow_id = $1 AND d.user_id = $2 AND d.session_id = $3 AND d.context_id = $4")
                    .bind(&scope.flow_id)
                    .bind(&scope.user_id)
                    .bind(&scope.session_id)
                    .bind(&scope.context_id)
                    .bind(format!("scope_tag : \"{tag}\" AND terms : \"{t}\""))
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(backend)?;
                if n > 0 {
                    df.insert(t.clone(), u64::try_from(n).unwrap_or(0));
                }
            }
            if df.is_empty() {
                return Ok(Vec::new());
            }
            let any = df
                .keys()
                .map(|t| format!("\"{t}\""))
                .collect::<Vec<_>>()
                .join(" OR ");
            let rows: Vec<(String, String)> = sqlx::query_as("SELECT d.document, d.terms FROM recall_fts JOIN recall_documents d ON d.id = recall_fts.rowid WHERE recall_fts MATCH $5 AND d.flow_id = $1 AND d.user_id = $2 AND d.session_id = $3 AND d.context_id = $4 ORDER BY bm25(recall_fts), d.seq DESC LIMIT $6")
            .bind(&scope.flow_id)
            .bind(&scope.user_id)
            .bind(&scope.session_id)
            .bind(&scope.context_id)
            .bind(format!("scope_tag : \"{tag}\" AND terms : ({any})"))
            .bind(CANDIDATES)
            .fetch_all(&mut *conn)
            .await
            .map_err(backend)?;
            let candidates = rows
                .iter()
                .map(|(j, t)| decode(j, t))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rank(&query, candidates, &df, stats(totals), limit))
        }

        async fn indexed_count(&self, scope: &SessionScope) -> Result<u64, StoreError> {
            let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM recall_documents d WHERE d.flow_id = $1 AND d.user_id = $2 AND d.session_id = $3 AND d.context_id = $4")
            .bind(&scope.flow_id)
            .bind(&scope.user_id)
            .bind(&scope.session_id)
            .bind(&scope.context_id)
            .fetch_one(self.pool())
            .await
            .map_err(backend)?;
            Ok(u64::try_from(n).unwrap_or(0))
        }

        async fn delete_session_index(
            &self,
            flow_id: &str,
            user_id: &str,
            session_id: &str,
        ) -> Result<u64, StoreError> {
            let r = sqlx::query(
                "DELETE FROM recall_documents WHERE flow_id = $1 AND user_id = $2 AND session_id = $3",
            )
            .bind(flow_id)
            .bind(user_id)
            .bind(session_id)
            .execute(self.pool())
            .await
            .map_err(backend)?;
            Ok(r.rows_affected())
        }
    }

    impl SqliteStore {
        /// Every scope holding chat history.
        pub async fn history_scopes(&self) -> Result<Vec<SessionScope>, StoreError> {
            let rows: Vec<(String, String, String, String)> = sqlx::query_as(
                "SELECT DISTINCT flow_id, user_id, session_id, context_id FROM chat_messages \
                 ORDER BY flow_id, user_id, session_id, context_id",
            )
            .fetch_all(self.pool())
            .await
            .map_err(backend)?;
            Ok(rows
                .into_iter()
                .map(|(f, u, s, c)| SessionScope::new(f, u, s, c))
                .collect())
        }

        /// Every thread holding checkpoints.
        pub async fn checkpoint_threads(&self) -> Result<Vec<String>, StoreError> {
            let rows: Vec<(String,)> =
                sqlx::query_as("SELECT thread_id FROM checkpoint_heads ORDER BY thread_id")
                    .fetch_all(self.pool())
                    .await
                    .map_err(backend)?;
            Ok(rows.into_iter().map(|(t,)| t).collect())
        }
    }

    impl SqliteStore {
        /// Empties the recall index of every scope (before a rebuild); returns how many
        /// documents went.
        pub async fn clear_recall_index(&self) -> Result<u64, StoreError> {
            let r = sqlx::query("DELETE FROM recall_documents")
                .execute(self.pool())
                .await
                .map_err(backend)?;
            Ok(r.rows_affected())
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn scope_tags_are_stable() {
            // FTS5 terms written into recall indexes on disk: these values must never move.
            let scope = SessionScope::new("flow", "user-1", "session-9", "ctx");
            assert_eq!(scope_tag(&scope), "sa281005fbd1bd2f9");
            assert_eq!(
                scope_tag(&SessionScope::new("", "", "", "")),
                "s994f76653e2a3951"
            );
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use std::collections::HashMap;

    use super::*;
    use crate::postgres::PostgresStore;
    use crate::sql::backend;

    #[async_trait]
    impl RecallIndex for PostgresStore {
        async fn index_documents(
            &self,
            scope: &SessionScope,
            documents: &[RecallDocument],
        ) -> Result<u64, StoreError> {
            let rows = documents
                .iter()
                .map(|d| encode(d).map(|r| (d, r)))
                .collect::<Result<Vec<_>, _>>()?;
            if rows.is_empty() {
                return Ok(0);
            }
            let mut added = 0;
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                let sql = crate::sql::multi_row(
                    "INSERT INTO recall_documents (flow_id, user_id, session_id, context_id, \
                     message_id, seq, document, terms, term_count) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                     ON CONFLICT (flow_id, user_id, session_id, context_id, message_id) DO NOTHING",
                    chunk.len(),
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for (d, (json, t, count)) in chunk {
                    q = q
                        .bind(&scope.flow_id)
                        .bind(&scope.user_id)
                        .bind(&scope.session_id)
                        .bind(&scope.context_id)
                        .bind(&d.message_id)
                        .bind(seq(d))
                        .bind(json)
                        .bind(t)
                        .bind(*count);
                }
                added += q
                    .execute(self.pool())
                    .await
                    .map_err(backend)?
                    .rows_affected();
            }
            Ok(added)
        }

        async fn search(
            &self,
            scope: &SessionScope,
            query: &[String],
            limit: usize,
        ) -> Result<Vec<RecallHit>, StoreError> {
            let query: Vec<String> = query_slice(query)
                .iter()
                .filter(|t| valid_term(t))
                .cloned()
                .collect();
            if query.is_empty() || limit == 0 {
                return Ok(Vec::new());
            }
            let mut conn = self.pool().acquire().await.map_err(backend)?;
            let totals: (i64, i64) = sqlx::query_as("SELECT count(*), COALESCE(sum(term_count), 0)::BIGINT FROM recall_documents WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4")
            .bind(&scope.flow_id)
            .bind(&scope.user_id)
            .bind(&scope.session_id)
            .bind(&scope.context_id)
            .fetch_one(&mut *conn)
            .await
            .map_err(backend)?;
            let mut df = HashMap::new();
            for t in &query {
                let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM recall_documents WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4 \
                     AND tsv @@ to_tsquery('simple', $5)")
                .bind(&scope.flow_id)
                .bind(&scope.user_id)
                .bind(&scope.session_id)
                .bind(&scope.context_id)
                .bind(t)
                .fetch_one(&mut *conn)
                .await
                .map_err(backend)?;
                if n > 0 {
                    df.insert(t.clone(), u64::try_from(n).unwrap_or(0));
                }
            }
            if df.is_empty() {
                return Ok(Vec::new());
            }
            let any = df.keys().cloned().collect::<Vec<_>>().join(" | ");
            let rows: Vec<(String, String)> = sqlx::query_as("SELECT document, terms FROM recall_documents WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4 \
                 AND tsv @@ to_tsquery('simple', $5) \
                 ORDER BY ts_rank(tsv, to_tsquery('simple', $5)) DESC, seq DESC LIMIT $6")
            .bind(&scope.flow_id)
            .bind(&scope.user_id)
            .bind(&scope.session_id)
            .bind(&scope.context_id)
            .bind(any)
            .bind(CANDIDATES)
            .fetch_all(&mut *conn)
            .await
            .map_err(backend)?;
            let candidates = rows
                .iter()
                .map(|(j, t)| decode(j, t))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rank(&query, candidates, &df, stats(totals), limit))
        }

        async fn indexed_count(&self, scope: &SessionScope) -> Result<u64, StoreError> {
            let (n,): (i64,) = sqlx::query_as("SELECT count(*) FROM recall_documents WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4")
            .bind(&scope.flow_id)
            .bind(&scope.user_id)
            .bind(&scope.session_id)
            .bind(&scope.context_id)
            .fetch_one(self.pool())
            .await
            .map_err(backend)?;
            Ok(u64::try_from(n).unwrap_or(0))
        }

        async fn delete_session_index(
            &self,
            flow_id: &str,
            user_id: &str,
            session_id: &str,
        ) -> Result<u64, StoreError> {
            let r = sqlx::query(
                "DELETE FROM recall_documents WHERE flow_id = $1 AND user_id = $2 AND session_id = $3",
            )
            .bind(flow_id)
            .bind(user_id)
            .bind(session_id)
            .execute(self.pool())
            .await
            .map_err(backend)?;
            Ok(r.rows_affected())
        }
    }

    impl PostgresStore {
        /// Every scope holding chat history.
        pub async fn history_scopes(&self) -> Result<Vec<SessionScope>, StoreError> {
            let rows: Vec<(String, String, String, String)> = sqlx::query_as(
                "SELECT DISTINCT flow_id, user_id, session_id, context_id FROM chat_messages \
                 ORDER BY flow_id, user_id, session_id, context_id",
            )
            .fetch_all(self.pool())
            .await
            .map_err(backend)?;
            Ok(rows
                .into_iter()
                .map(|(f, u, s, c)| SessionScope::new(f, u, s, c))
                .collect())
        }

        /// Every thread holding checkpoints.
        pub async fn checkpoint_threads(&self) -> Result<Vec<String>, StoreError> {
            let rows: Vec<(String,)> =
                sqlx::query_as("SELECT thread_id FROM checkpoint_heads ORDER BY thread_id")
                    .fetch_all(self.pool())
                    .await
                    .map_err(backend)?;
            Ok(rows.into_iter().map(|(t,)| t).collect())
        }
    }

    impl PostgresStore {
        /// Empties the recall index of every scope (before a rebuild); returns how many
        /// documents went.
        pub async fn clear_recall_index(&self) -> Result<u64, StoreError> {
            let r = sqlx::query("DELETE FROM recall_documents")
                .execute(self.pool())
                .await
                .map_err(backend)?;
            Ok(r.rows_affected())
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            Store::Memory($s) => $call,
            #[cfg(feature = "sqlite")]
            Store::Sqlite($s) => $call,
            #[cfg(feature = "postgres")]
            Store::Postgres($s) => $call,
        }
    };
}

#[async_trait]
impl RecallIndex for Store {
    async fn index_documents(
        &self,
        scope: &SessionScope,
        documents: &[RecallDocument],
    ) -> Result<u64, StoreError> {
        dispatch!(self, s => s.index_documents(scope, documents).await)
    }

    async fn search(
        &self,
        scope: &SessionScope,
        query: &[String],
        limit: usize,
    ) -> Result<Vec<RecallHit>, StoreError> {
        dispatch!(self, s => s.search(scope, query, limit).await)
    }

    async fn indexed_count(&self, scope: &SessionScope) -> Result<u64, StoreError> {
        dispatch!(self, s => s.indexed_count(scope).await)
    }

    async fn delete_session_index(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        dispatch!(self, s => s.delete_session_index(flow_id, user_id, session_id).await)
    }
}

impl Store {
    /// Every scope holding chat history (what `keel recall-index rebuild` indexes).
    pub async fn history_scopes(&self) -> Result<Vec<SessionScope>, StoreError> {
        match self {
            Store::Memory(s) => Ok(s.history_scopes()),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(s) => s.history_scopes().await,
            #[cfg(feature = "postgres")]
            Store::Postgres(s) => s.history_scopes().await,
        }
    }

    /// Every thread holding checkpoints (what `keel recall-index rebuild` indexes).
    pub async fn checkpoint_threads(&self) -> Result<Vec<String>, StoreError> {
        match self {
            Store::Memory(s) => Ok(s.checkpoint_threads()),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(s) => s.checkpoint_threads().await,
            #[cfg(feature = "postgres")]
            Store::Postgres(s) => s.checkpoint_threads().await,
        }
    }

    /// Empties the recall index of every scope, the first step of a rebuild; returns
    /// how many documents went.
    pub async fn clear_recall_index(&self) -> Result<u64, StoreError> {
        match self {
            Store::Memory(s) => Ok(s.recall_index().clear()),
            #[cfg(feature = "sqlite")]
            Store::Sqlite(s) => s.clear_recall_index().await,
            #[cfg(feature = "postgres")]
            Store::Postgres(s) => s.clear_recall_index().await,
        }
    }
}
