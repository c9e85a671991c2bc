//! The recall index ([`RecallIndex`]) on every backend: the memory store's BM25 postings,
//! SQLite FTS5 and PostgreSQL `tsvector` with a GIN index (migrations 0004, 0006 and 0007).
//!
//! Every term the databases index is written with its scope's tag in front, so a term's
//! posting list holds one scope's documents: a search reads the postings of its own few
//! terms (the rarest, up to [`MAX_POSTINGS`](keel_core::recall::MAX_POSTINGS)) and
//! nothing else of the thread, and its cost does not grow with the thread's length. One
//! statement reads the scope's counts and the terms' document frequencies (kept in
//! `recall_term_counts`, one index lookup a term, written in the transaction that
//! indexes the documents). The best [`MAX_CANDIDATES`](keel_core::recall::MAX_CANDIDATES)
//! documents are those holding the most weight
//! ([`reach_weight`](keel_core::recall::reach_weight)) of the terms read, ties to the
//! newest row, as the memory index picks them: PostgreSQL sums the weights and reads the
//! chosen rows in one statement; SQLite reads each term's row ids from FTS5 in one
//! statement, sums them in Rust and reads the chosen rows by id in one more (one JSON
//! row). The shared scorer in [`keel_core::recall`] ranks those, so every backend
//! returns the same hits.

use async_trait::async_trait;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use keel_core::recall::{
    CorpusStats, DocumentTerms, MAX_CANDIDATES, candidate_terms, check_document, rank, reach_weight,
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
    /// The distinct terms of the text and the context (what `recall_term_counts` counts).
    distinct: Vec<String>,
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
        distinct: {
            let mut d: Vec<String> = t.own.iter().chain(&t.context).cloned().collect();
            d.sort_unstable();
            d.dedup();
            d
        },
    })
}

/// How many of the documents of `chunk` the database inserted (`inserted`: their
/// message ids; the first of a repeated id is the one inserted) hold each term, sorted
/// by term (so concurrent writers lock the rows in one order).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn term_counts(chunk: &[(&RecallDocument, Row)], inserted: Vec<String>) -> Vec<(String, i64)> {
    let mut pending: std::collections::HashSet<String> = inserted.into_iter().collect();
    let mut counts: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
    for (d, r) in chunk {
        if pending.remove(&d.message_id) {
            for t in &r.distinct {
                *counts.entry(t.as_str()).or_default() += 1;
            }
        }
    }
    counts.into_iter().map(|(t, n)| (t.to_owned(), n)).collect()
}

/// The statement that reads, for each of the `terms` (bound from `$6` on, each after
/// its weight), the scope's documents holding it, keeps the `$5` holding the most
/// weight, ties to the newest row (`top`), and reads them with `fetch` (the scope is
/// `$1`-`$4`): `hit` is one term's statement with `$W` for its weight and `$T` for the
/// term.
#[cfg(feature = "postgres")]
fn candidates_sql(terms: usize, hit: &str, fetch: &str) -> String {
    let hits = (0..terms)
        .map(|i| {
            hit.replace("$W", &format!("${}", 6 + 2 * i))
                .replace("$T", &format!("${}", 7 + 2 * i))
        })
        .collect::<Vec<_>>()
        .join(" UNION ALL ");
    format!(
        "WITH hits (id, w) AS ({hits}), \
         top AS (SELECT id FROM hits GROUP BY id ORDER BY sum(w) DESC, id DESC LIMIT $5) \
         {fetch}"
    )
}

/// The weights and terms [`candidates_sql`] binds.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn weighted<'a>(
    read: &'a [String],
    df: &std::collections::HashMap<String, u64>,
    stats: CorpusStats,
) -> Vec<(i64, &'a String)> {
    read.iter()
        .map(|t| {
            (
                reach_weight(stats.documents, df.get(t).copied().unwrap_or(0)),
                t,
            )
        })
        .collect()
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
/// `(term or "" for the counts, documents, total terms)`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn counts(rows: Vec<(String, i64, i64)>) -> (CorpusStats, std::collections::HashMap<String, u64>) {
    let mut stats = CorpusStats::default();
    let mut df = std::collections::HashMap::new();
    for (term, n, total) in rows {
        let n = u64::try_from(n).unwrap_or(0);
        if term.is_empty() {
            stats = CorpusStats {
                documents: n,
                total_terms: u64::try_from(total).unwrap_or(0),
            };
        } else if n > 0 {
            df.insert(term, n);
        }
    }
    (stats, df)
}

/// The statement reading the scope's counts and, for `$5` on, the terms' document
/// frequencies.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn counts_sql(terms: usize) -> String {
    let list = (0..terms)
        .map(|i| format!("${}", i + 5))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT CAST('' AS TEXT), documents, total_terms FROM recall_scopes \
         WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4 \
         UNION ALL SELECT term, documents, 0 FROM recall_term_counts \
         WHERE flow_id = $1 AND user_id = $2 AND session_id = $3 AND context_id = $4 \
         AND term IN ({list})"
    )
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

    /// The statement reading the row ids of each of `terms` (bound from `$1` on) from
    /// FTS5, one comma-separated list per term, the lists separated by `;`, in one row.
    /// One term (`limited`) reads only the newest `$2` of its list.
    fn postings_sql(terms: usize, limited: bool) -> String {
        if limited {
            return "SELECT coalesce(group_concat(rowid), '') FROM (SELECT rowid \
                    FROM recall_terms WHERE recall_terms MATCH $1 ORDER BY rowid DESC LIMIT $2)"
                .to_owned();
        }
        let lists = (1..=terms)
            .map(|i| {
                format!(
                    "coalesce((SELECT group_concat(rowid) FROM recall_terms \
                     WHERE recall_terms MATCH ${i}), '')"
                )
            })
            .collect::<Vec<_>>()
            .join(" || ';' || ");
        format!("SELECT {lists}")
    }

    /// The row ids of the best [`MAX_CANDIDATES`] documents holding the `read` terms (each
    /// after its weight, the scope's `tag` put in front): the most weight first, ties to
    /// the newest row, as the memory index picks them. FTS5 gives each term's row ids
    /// alone (no join, no rank function) and the weights are summed here. One term read
    /// gives every document the same weight: its newest [`MAX_CANDIDATES`] alone are read.
    async fn candidate_ids(
        conn: &mut sqlx::SqliteConnection,
        tag: &str,
        read: &[(i64, &String)],
    ) -> Result<Vec<i64>, StoreError> {
        if read.is_empty() {
            return Ok(Vec::new());
        }
        let limited = read.len() == 1;
        let sql = postings_sql(read.len(), limited);
        let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql));
        for (_, t) in read {
            q = q.bind(format!("\"{tag}{t}\""));
        }
        if limited {
            q = q.bind(MAX_CANDIDATES as i64);
        }
        let (lists,): (String,) = q.fetch_one(&mut *conn).await.map_err(backend)?;
        let mut weights: std::collections::HashMap<i64, i64> =
            std::collections::HashMap::with_capacity(4096);
        for ((w, _), list) in read.iter().zip(lists.split(';')) {
            for id in list.split(',').filter(|id| !id.is_empty()) {
                let id: i64 = id
                    .parse()
                    .map_err(|_| StoreError::Corrupt(format!("recall row id {id:?}")))?;
                *weights.entry(id).or_default() += w;
            }
        }
        let mut ranked: Vec<(i64, i64)> = weights.into_iter().collect();
        ranked.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
        ranked.truncate(MAX_CANDIDATES);
        Ok(ranked.into_iter().map(|(id, _)| id).collect())
    }

    /// The scope's documents of row ids `ids`, in that order, read in one row (a JSON
    /// array). The rows are looked up by id from the list (`CROSS JOIN` keeps SQLite
    /// from walking the scope's rows instead); an id whose document is gone (deleted
    /// since its id was read) is skipped.
    async fn candidate_documents(
        conn: &mut sqlx::SqliteConnection,
        scope: &SessionScope,
        ids: &[i64],
    ) -> Result<Vec<(RecallDocument, DocumentTerms)>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let list = serde_json::to_string(ids)
            .map_err(|e| StoreError::Invalid(format!("recall row ids: {e}")))?;
        let (json,): (String,) = scoped_query!(
            sqlx::query_as(
                "SELECT json_group_array(json_array(d.document, d.terms, d.context_terms)) \
                 FROM json_each($5) AS j CROSS JOIN recall_documents d ON d.id = j.value \
                 WHERE d.flow_id = $1 AND d.user_id = $2 AND d.session_id = $3 \
                 AND d.context_id = $4"
            ),
            scope
        )
        .bind(list)
        .fetch_one(&mut *conn)
        .await
        .map_err(backend)?;
        let rows: Vec<(String, String, String)> = serde_json::from_str(&json)
            .map_err(|e| StoreError::Corrupt(format!("recall candidates: {e}")))?;
        rows.iter().map(|(j, t, c)| decode(j, t, c)).collect()
    }

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
            // One transaction per chunk, begun as a writer (no read lock to upgrade while
            // other writers wait): the documents, then the counts of the terms of those
            // the database took (an id it holds already is skipped).
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                let sql = crate::sql::multi_row(
                    "INSERT INTO recall_documents (flow_id, user_id, session_id, context_id, \
                     message_id, seq, document, scope_tag, terms, term_count, context_terms, \
                     fts_own, fts_context) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
                     ON CONFLICT (flow_id, user_id, session_id, context_id, message_id) \
                     DO NOTHING RETURNING message_id",
                    chunk.len(),
                );
                let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql));
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
                let mut tx = self
                    .pool()
                    .begin_with("BEGIN IMMEDIATE")
                    .await
                    .map_err(backend)?;
                let inserted: Vec<(String,)> = q.fetch_all(&mut *tx).await.map_err(backend)?;
                let n = inserted.len() as u64;
                let counts = term_counts(chunk, inserted.into_iter().map(|(id,)| id).collect());
                if !counts.is_empty() {
                    let json: serde_json::Map<String, serde_json::Value> = counts
                        .into_iter()
                        .map(|(t, n)| (t, serde_json::Value::from(n)))
                        .collect();
                    scoped_query!(
                        sqlx::query(
                            "INSERT INTO recall_term_counts \
                             (flow_id, user_id, session_id, context_id, term, documents) \
                             SELECT $1, $2, $3, $4, key, value FROM json_each($5) WHERE true \
                             ON CONFLICT (flow_id, user_id, session_id, context_id, term) \
                             DO UPDATE SET documents = documents + excluded.documents"
                        ),
                        scope
                    )
                    .bind(serde_json::Value::Object(json).to_string())
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                }
                tx.commit().await.map_err(backend)?;
                added += n;
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
            let mut q = scoped_query!(
                sqlx::query_as(sqlx::AssertSqlSafe(counts_sql(query.len()))),
                scope
            );
            for t in &query {
                q = q.bind(t);
            }
            let mut conn = self.pool().acquire().await.map_err(backend)?;
            let rows: Vec<(String, i64, i64)> = q.fetch_all(&mut *conn).await.map_err(backend)?;
            let (stats, df) = counts(rows);
            let read = candidate_terms(&query, &df);
            if read.is_empty() {
                return Ok(Vec::new());
            }
            let ids = candidate_ids(&mut conn, &tag, &weighted(&read, &df, stats)).await?;
            let candidates = candidate_documents(&mut conn, scope, &ids).await?;
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
            sqlx::query(
                "DELETE FROM recall_term_counts WHERE flow_id = $1 AND user_id = $2 AND session_id = $3",
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
            sqlx::query("DELETE FROM recall_term_counts")
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

        /// A hit whose document is deleted between reading its row id and reading the
        /// documents is left out; the others are read.
        #[tokio::test]
        async fn a_hit_deleted_before_its_document_is_read_is_dropped() {
            let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
            let scope = SessionScope::new("flow", "user", "thread", "");
            let docs: Vec<RecallDocument> = (0..3)
                .map(|i| RecallDocument::new(format!("m{i}"), i, "user", "the gateway port"))
                .collect();
            store.index_documents(&scope, &docs).await.unwrap();
            let term = "gateway".to_owned();
            let mut conn = store.pool().acquire().await.unwrap();
            let ids = candidate_ids(&mut conn, &scope_tag(&scope), &[(1, &term)])
                .await
                .unwrap();
            assert_eq!(ids.len(), 3);
            sqlx::query("DELETE FROM recall_documents WHERE message_id = 'm1'")
                .execute(&mut *conn)
                .await
                .unwrap();
            let read = candidate_documents(&mut conn, &scope, &ids).await.unwrap();
            let found: Vec<&str> = read.iter().map(|(d, _)| d.message_id.as_str()).collect();
            assert_eq!(found, ["m2", "m0"]);
            // Another scope's search reads none of them, even given their ids.
            let other = SessionScope::new("flow", "user", "other", "");
            let none = candidate_documents(&mut conn, &other, &ids).await.unwrap();
            assert!(none.is_empty());
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
            // One transaction per chunk: the documents, then the counts of the terms of
            // those the database took (an id it holds already is skipped). The scope's
            // row in `recall_scopes`, locked by the insert's trigger, keeps writers of
            // one scope in turn; the counts are written in term order.
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                let sql = crate::sql::multi_row(
                    "INSERT INTO recall_documents (flow_id, user_id, session_id, context_id, \
                     message_id, seq, document, terms, term_count, context_terms, fts_own, \
                     fts_context) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                     ON CONFLICT (flow_id, user_id, session_id, context_id, message_id) \
                     DO NOTHING RETURNING message_id",
                    chunk.len(),
                );
                let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql));
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
                let mut tx = self.pool().begin().await.map_err(backend)?;
                let inserted: Vec<(String,)> = q.fetch_all(&mut *tx).await.map_err(backend)?;
                let n = inserted.len() as u64;
                let (terms, counts): (Vec<String>, Vec<i64>) =
                    term_counts(chunk, inserted.into_iter().map(|(id,)| id).collect())
                        .into_iter()
                        .unzip();
                if !terms.is_empty() {
                    scoped_query!(
                        sqlx::query(
                            "INSERT INTO recall_term_counts \
                             (flow_id, user_id, session_id, context_id, term, documents) \
                             SELECT $1, $2, $3, $4, t, n FROM unnest($5::TEXT[], $6::BIGINT[]) \
                             AS u (t, n) \
                             ON CONFLICT (flow_id, user_id, session_id, context_id, term) \
                             DO UPDATE SET documents = recall_term_counts.documents \
                             + EXCLUDED.documents"
                        ),
                        scope
                    )
                    .bind(&terms)
                    .bind(&counts)
                    .execute(&mut *tx)
                    .await
                    .map_err(backend)?;
                }
                tx.commit().await.map_err(backend)?;
                added += n;
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
            let mut q = scoped_query!(
                sqlx::query_as(sqlx::AssertSqlSafe(counts_sql(query.len()))),
                scope
            );
            for t in &query {
                q = q.bind(t);
            }
            let mut conn = self.pool().acquire().await.map_err(backend)?;
            let rows: Vec<(String, i64, i64)> = q.fetch_all(&mut *conn).await.map_err(backend)?;
            let (stats, df) = counts(rows);
            let read = candidate_terms(&query, &df);
            if read.is_empty() {
                return Ok(Vec::new());
            }
            let sql = candidates_sql(
                read.len(),
                "SELECT id, $W::BIGINT FROM recall_documents \
                 WHERE tsv @@ to_tsquery('simple', $T)",
                "SELECT d.document, d.terms, d.context_terms FROM top \
                 JOIN recall_documents d ON d.id = top.id \
                 WHERE d.flow_id = $1 AND d.user_id = $2 AND d.session_id = $3 \
                 AND d.context_id = $4",
            );
            let mut q = scoped_query!(sqlx::query_as(sqlx::AssertSqlSafe(sql)), scope)
                .bind(MAX_CANDIDATES as i64);
            for (w, t) in weighted(&read, &df, stats) {
                q = q.bind(w).bind(format!("{tag}{t}"));
            }
            let rows: Vec<(String, String, String)> =
                q.fetch_all(&mut *conn).await.map_err(backend)?;
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
            sqlx::query(
                "DELETE FROM recall_term_counts WHERE flow_id = $1 AND user_id = $2 AND session_id = $3",
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
            sqlx::query("DELETE FROM recall_term_counts")
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
