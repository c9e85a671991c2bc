//! The recall index ([`RecallIndex`]) on every backend: the memory store's BM25 postings,
//! SQLite FTS5 and PostgreSQL `tsvector` with a GIN index (migrations 0004 and 0006).
//!
//! Every term the databases index is written with its scope's tag in front, so a term's
//! posting list holds one scope's documents: a search reads the postings of its own few
//! terms (the rarest, up to [`MAX_POSTINGS`](keel_core::recall::MAX_POSTINGS)) and
//! nothing else of the thread, and its cost does not grow with the thread's length. One
//! statement reads the scope's counts and the terms' document frequencies (FTS5's
//! `fts5vocab`, or a GIN lookup per term), one more the best candidates by the
//! database's own rank (`bm25()`, `ts_rank`); the shared scorer in
//! [`keel_core::recall`] ranks those, so every backend returns the same hits.

use async_trait::async_trait;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use keel_core::recall::{
    CorpusStats, DocumentTerms, MAX_CANDIDATES, candidate_terms, check_document, rank,
};
use keel_core::recall::{RecallDocument, RecallHit, RecallIndex};
use keel_core::store::{SessionScope, StoreError};

use crate::memory::MemoryStore;
use crate::store::Store;

/// Documents per INSERT (13 parameters each, well under both dialects' limits).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
const ROWS_PER_STATEMENT: usize = 150;

/// Query terms used at most (a long question is cut).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
const MAX_QUERY_TERMS: usize = 32;

/// Positions `following` looks up at most in one call.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
const MAX_FOLLOWING: usize = 64;

/// A term naming the scope (FNV-1a over its four parts, each followed by 0xff), written
/// in front of every indexed term of the scope: `s` and 16 hex digits.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn scope_tag(scope: &SessionScope) -> String {
    let mut h = keel_core::hash::StableHasher::new();
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

/// `terms` with the scope's tag in front of each, space-separated.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn scoped(tag: &str, terms: &[String]) -> String {
    let mut out = String::with_capacity(terms.iter().map(|t| t.len() + tag.len() + 1).sum());
    for t in terms {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(tag);
        out.push_str(t);
    }
    out
}

/// One document as the databases store it.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
struct Row {
    json: String,
    terms: String,
    context_terms: String,
    term_count: i64,
    fts_own: String,
    fts_context: String,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn encode(tag: &str, document: &RecallDocument) -> Result<Row, StoreError> {
    check_document(document)?;
    let json = serde_json::to_string(document)
        .map_err(|e| StoreError::Invalid(format!("recall document: {e}")))?;
    let t = document.terms();
    Ok(Row {
        json,
        terms: t.own.join(" "),
        context_terms: t.context.join(" "),
        term_count: i64::try_from(t.weighted_len()).unwrap_or(i64::MAX),
        fts_own: scoped(tag, &t.own),
        fts_context: scoped(tag, &t.context),
    })
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn decode(
    json: &str,
    terms: &str,
    context: &str,
) -> Result<(RecallDocument, DocumentTerms), StoreError> {
    let d: RecallDocument = serde_json::from_str(json)
        .map_err(|e| StoreError::Corrupt(format!("recall document: {e}")))?;
    let split = |s: &str| s.split_whitespace().map(str::to_owned).collect();
    Ok((
        d,
        DocumentTerms {
            own: split(terms),
            context: split(context),
        },
    ))
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn decode_document(json: &str) -> Result<RecallDocument, StoreError> {
    serde_json::from_str(json).map_err(|e| StoreError::Corrupt(format!("recall document: {e}")))
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn seq(document: &RecallDocument) -> i64 {
    i64::try_from(document.seq).unwrap_or(i64::MAX)
}

/// The query's usable terms: at most [`MAX_QUERY_TERMS`], each plain `[a-z0-9]`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn usable(query: &[String]) -> Vec<String> {
    query
        .iter()
        .take(MAX_QUERY_TERMS)
        .filter(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
        .cloned()
        .collect()
}

/// The scope's counts and the document frequencies of `query` from rows of
/// `(scoped term or "" for the counts, documents, total terms)`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn counts(
    tag: &str,
    rows: Vec<(String, i64, i64)>,
) -> (CorpusStats, std::collections::HashMap<String, u64>) {
    let mut stats = CorpusStats::default();
    let mut df = std::collections::HashMap::new();
    for (term, n, total) in rows {
        let n = u64::try_from(n).unwrap_or(0);
        if term.is_empty() {
            stats = CorpusStats {
                documents: n,
                total_terms: u64::try_from(total).unwrap_or(0),
            };
        } else if let Some(t) = term.strip_prefix(tag)
            && n > 0
        {
            df.insert(t.to_owned(), n);
        }
    }
    (stats, df)
}

/// The statement that reads, for each of `n` positions bound from `$5` on, the first
/// document of the scope after it.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn following_sql(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "SELECT document FROM (SELECT document FROM recall_documents \
                 WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4 \
                 AND seq > ${} ORDER BY seq LIMIT 1) AS f{i}",
                i + 5
            )
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn dedup_documents(rows: Vec<(String,)>) -> Result<Vec<RecallDocument>, StoreError> {
    let mut out: Vec<RecallDocument> = Vec::new();
    for (json,) in rows {
        let d = decode_document(&json)?;
        if !out.iter().any(|o| o.message_id == d.message_id) {
            out.push(d);
        }
    }
    Ok(out)
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

    async fn following(
        &self,
        scope: &SessionScope,
        seqs: &[u64],
    ) -> Result<Vec<RecallDocument>, StoreError> {
        self.recall_index().following(scope, seqs).await
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

/// The statements both dialects share, with the scope bound as `$1`-`$4`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
macro_rules! scoped_query {
    ($q:expr, $scope:expr) => {
        $q.bind(&$scope.flow_id)
            .bind(&$scope.user_id)
            .bind(&$scope.session_id)
            .bind(&$scope.context_id)
    };
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use crate::sql::backend;
    use crate::sqlite::SqliteStore;

    #[async_trait]
    impl RecallIndex for SqliteStore {
        async fn index_documents(
            &self,
            scope: &SessionScope,
            documents: &[RecallDocument],
        ) -> Result<u64, StoreError> {
            let tag = scope_tag(scope);
            let rows = documents
                .iter()
                .map(|d| encode(&tag, d).map(|r| (d, r)))
                .collect::<Result<Vec<_>, _>>()?;
            if rows.is_empty() {
                return Ok(0);
            }
            let mut added = 0;
            // One statement per chunk: atomic by itself, and no transaction that would
            // have to upgrade a read lock while other writers wait.
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                let sql = crate::sql::multi_row(
                    "INSERT INTO recall_documents (flow_id, user_id, session_id, context_id, \
                     message_id, seq, document, scope_tag, terms, term_count, context_terms, \
                     fts_own, fts_context) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
                     ON CONFLICT (flow_id, user_id, session_id, context_id, message_id) DO NOTHING",
                    chunk.len(),
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for (d, r) in chunk {
                    q = scoped_query!(q, scope)
                        .bind(&d.message_id)
                        .bind(seq(d))
                        .bind(&r.json)
                        .bind(&tag)
                        .bind(&r.terms)
                        .bind(r.term_count)
                        .bind(&r.context_terms)
                        .bind(&r.fts_own)
                        .bind(&r.fts_context);
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
            let query = usable(query);
            if query.is_empty() || limit == 0 {
                return Ok(Vec::new());
            }
            let tag = scope_tag(scope);
            let mut sql = "SELECT '', documents, total_terms FROM recall_scopes \
                 WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4"
                .to_owned();
            for i in 0..query.len() {
                sql.push_str(&format!(
                    " UNION ALL SELECT term, doc, 0 FROM recall_vocab WHERE term = ${}",
                    i + 5
                ));
            }
            let mut q = scoped_query!(sqlx::query_as(sqlx::AssertSqlSafe(sql)), scope);
            for t in &query {
                q = q.bind(format!("{tag}{t}"));
            }
            let mut conn = self.pool().acquire().await.map_err(backend)?;
            let rows: Vec<(String, i64, i64)> = q.fetch_all(&mut *conn).await.map_err(backend)?;
            let (stats, df) = counts(&tag, rows);
            let read = candidate_terms(&query, &df);
            if read.is_empty() {
                return Ok(Vec::new());
            }
            let any = read
                .iter()
                .map(|t| format!("\"{tag}{t}\""))
                .collect::<Vec<_>>()
                .join(" OR ");
            let rows: Vec<(String, String, String)> = scoped_query!(
                sqlx::query_as(
                    "SELECT d.document, d.terms, d.context_terms FROM recall_terms \
                     JOIN recall_documents d ON d.id = recall_terms.rowid \
                     WHERE recall_terms MATCH $5 AND d.flow_id = $1 AND d.user_id = $2 \
                     AND d.session_id = $3 AND d.context_id = $4 \
                     ORDER BY bm25(recall_terms, 1.0, 0.5), d.seq DESC LIMIT $6"
                ),
                scope
            )
            .bind(any)
            .bind(MAX_CANDIDATES as i64)
            .fetch_all(&mut *conn)
            .await
            .map_err(backend)?;
            let candidates = rows
                .iter()
                .map(|(j, t, c)| decode(j, t, c))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rank(&query, candidates, &df, stats, limit))
        }

        async fn following(
            &self,
            scope: &SessionScope,
            seqs: &[u64],
        ) -> Result<Vec<RecallDocument>, StoreError> {
            let seqs = &seqs[..seqs.len().min(MAX_FOLLOWING)];
            if seqs.is_empty() {
                return Ok(Vec::new());
            }
            let mut q = scoped_query!(
                sqlx::query_as(sqlx::AssertSqlSafe(following_sql(seqs.len()))),
                scope
            );
            for &s in seqs {
                q = q.bind(i64::try_from(s).unwrap_or(i64::MAX));
            }
            dedup_documents(q.fetch_all(self.pool()).await.map_err(backend)?)
        }

        async fn indexed_count(&self, scope: &SessionScope) -> Result<u64, StoreError> {
            let (n,): (i64,) = scoped_query!(
                sqlx::query_as(
                    "SELECT count(*) FROM recall_documents d WHERE d.flow_id = $1 \
                     AND d.user_id = $2 AND d.session_id = $3 AND d.context_id = $4"
                ),
                scope
            )
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
            let mut tx = self.pool().begin().await.map_err(backend)?;
            let r = sqlx::query(
                "DELETE FROM recall_documents WHERE flow_id = $1 AND user_id = $2 AND session_id = $3",
            )
            .bind(flow_id)
            .bind(user_id)
            .bind(session_id)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
            sqlx::query(
                "DELETE FROM recall_scopes WHERE flow_id = $1 AND user_id = $2 AND session_id = $3",
            )
            .bind(flow_id)
            .bind(user_id)
            .bind(session_id)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
            tx.commit().await.map_err(backend)?;
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

        /// Empties the recall index of every scope (before a rebuild); returns how many
        /// documents went.
        pub async fn clear_recall_index(&self) -> Result<u64, StoreError> {
            let mut tx = self.pool().begin().await.map_err(backend)?;
            let r = sqlx::query("DELETE FROM recall_documents")
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
            sqlx::query("DELETE FROM recall_scopes")
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
            tx.commit().await.map_err(backend)?;
            Ok(r.rows_affected())
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn scope_tags_are_stable() {
            // Terms written into recall indexes on disk: these values must never move.
            let scope = SessionScope::new("flow", "user-1", "session-9", "ctx");
            assert_eq!(scope_tag(&scope), "sa281005fbd1bd2f9");
            assert_eq!(
                scope_tag(&SessionScope::new("", "", "", "")),
                "s994f76653e2a3951"
            );
            assert_eq!(
                scoped("sa281005fbd1bd2f9", &["port".to_owned(), "8443".to_owned()]),
                "sa281005fbd1bd2f9port sa281005fbd1bd2f98443"
            );
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres {
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
            let tag = scope_tag(scope);
            let rows = documents
                .iter()
                .map(|d| encode(&tag, d).map(|r| (d, r)))
                .collect::<Result<Vec<_>, _>>()?;
            if rows.is_empty() {
                return Ok(0);
            }
            let mut added = 0;
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                let sql = crate::sql::multi_row(
                    "INSERT INTO recall_documents (flow_id, user_id, session_id, context_id, \
                     message_id, seq, document, terms, term_count, context_terms, fts_own, \
                     fts_context) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                     ON CONFLICT (flow_id, user_id, session_id, context_id, message_id) DO NOTHING",
                    chunk.len(),
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
                for (d, r) in chunk {
                    q = scoped_query!(q, scope)
                        .bind(&d.message_id)
                        .bind(seq(d))
                        .bind(&r.json)
                        .bind(&r.terms)
                        .bind(r.term_count)
                        .bind(&r.context_terms)
                        .bind(&r.fts_own)
                        .bind(&r.fts_context);
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
            let query = usable(query);
            if query.is_empty() || limit == 0 {
                return Ok(Vec::new());
            }
            let tag = scope_tag(scope);
            let scoped_terms: Vec<String> = query.iter().map(|t| format!("{tag}{t}")).collect();
            let mut conn = self.pool().acquire().await.map_err(backend)?;
            let rows: Vec<(String, i64, i64)> = scoped_query!(
                sqlx::query_as(
                    "SELECT ''::TEXT, documents, total_terms FROM recall_scopes \
                     WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4 \
                     UNION ALL SELECT t, (SELECT count(*) FROM recall_documents \
                     WHERE tsv @@ to_tsquery('simple', t)), 0::BIGINT \
                     FROM unnest($5::TEXT[]) AS t"
                ),
                scope
            )
            .bind(&scoped_terms)
            .fetch_all(&mut *conn)
            .await
            .map_err(backend)?;
            let (stats, df) = counts(&tag, rows);
            let read = candidate_terms(&query, &df);
            if read.is_empty() {
                return Ok(Vec::new());
            }
            let any = read
                .iter()
                .map(|t| format!("{tag}{t}"))
                .collect::<Vec<_>>()
                .join(" | ");
            let rows: Vec<(String, String, String)> = scoped_query!(
                sqlx::query_as(
                    "SELECT document, terms, context_terms FROM recall_documents \
                     WHERE tsv @@ to_tsquery('simple', $5) AND flow_id = $1 AND user_id = $2 \
                     AND session_id = $3 AND context_id = $4 \
                     ORDER BY ts_rank(tsv, to_tsquery('simple', $5)) DESC, seq DESC LIMIT $6"
                ),
                scope
            )
            .bind(any)
            .bind(MAX_CANDIDATES as i64)
            .fetch_all(&mut *conn)
            .await
            .map_err(backend)?;
            let candidates = rows
                .iter()
                .map(|(j, t, c)| decode(j, t, c))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rank(&query, candidates, &df, stats, limit))
        }

        async fn following(
            &self,
            scope: &SessionScope,
            seqs: &[u64],
        ) -> Result<Vec<RecallDocument>, StoreError> {
            let seqs = &seqs[..seqs.len().min(MAX_FOLLOWING)];
            if seqs.is_empty() {
                return Ok(Vec::new());
            }
            let mut q = scoped_query!(
                sqlx::query_as(sqlx::AssertSqlSafe(following_sql(seqs.len()))),
                scope
            );
            for &s in seqs {
                q = q.bind(i64::try_from(s).unwrap_or(i64::MAX));
            }
            dedup_documents(q.fetch_all(self.pool()).await.map_err(backend)?)
        }

        async fn indexed_count(&self, scope: &SessionScope) -> Result<u64, StoreError> {
            let (n,): (i64,) = scoped_query!(
                sqlx::query_as(
                    "SELECT count(*) FROM recall_documents WHERE flow_id = $1 \
                     AND user_id = $2 AND session_id = $3 AND context_id = $4"
                ),
                scope
            )
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
            let mut tx = self.pool().begin().await.map_err(backend)?;
            let r = sqlx::query(
                "DELETE FROM recall_documents WHERE flow_id = $1 AND user_id = $2 AND session_id = $3",
            )
            .bind(flow_id)
            .bind(user_id)
            .bind(session_id)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
            sqlx::query(
                "DELETE FROM recall_scopes WHERE flow_id = $1 AND user_id = $2 AND session_id = $3",
            )
            .bind(flow_id)
            .bind(user_id)
            .bind(session_id)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
            tx.commit().await.map_err(backend)?;
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

        /// Empties the recall index of every scope (before a rebuild); returns how many
        /// documents went.
        pub async fn clear_recall_index(&self) -> Result<u64, StoreError> {
            let mut tx = self.pool().begin().await.map_err(backend)?;
            let r = sqlx::query("DELETE FROM recall_documents")
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
            sqlx::query("DELETE FROM recall_scopes")
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
            tx.commit().await.map_err(backend)?;
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

    async fn following(
        &self,
        scope: &SessionScope,
        seqs: &[u64],
    ) -> Result<Vec<RecallDocument>, StoreError> {
        dispatch!(self, s => s.following(scope, seqs).await)
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
