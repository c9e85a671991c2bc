//! [`ItemStore`]: long-term memory shared across threads, the Agent Server's Store API
//! (LangGraph's `BaseStore`: items of JSON under a namespace and a key, see LangGraph's
//! "Memory" docs and the `client.store` methods of `langgraph-sdk`).
//!
//! Items are kept per owner (the owner of the request's API key, [`ApiKeys`](crate::ApiKeys)):
//! an owner never reads, lists, overwrites or deletes another owner's items, and two
//! owners may use the same namespace and key. The router serves them under `/store`;
//! Rust middleware uses the same methods directly:
//!
//! ```
//! # async fn demo() -> Result<(), keel_server::store_api::StoreError> {
//! use keel_server::store_api::{ItemStore, Search};
//! let store = ItemStore::memory();
//! let ns = vec!["users".to_owned(), "u1".to_owned()];
//! let value = serde_json::json!({"likes": "tea"});
//! store.put("alice", &ns, "prefs", value.as_object().cloned().unwrap_or_default(), None).await?;
//! let item = store.get("alice", &ns, "prefs", true).await?;
//! assert_eq!(item.map(|i| i.value["likes"].clone()), Some("tea".into()));
//! assert!(store.get("bob", &ns, "prefs", true).await?.is_none());
//! let found = store.search("alice", &Search { namespace_prefix: vec!["users".into()], ..Search::default() }).await?;
//! assert_eq!(found.len(), 1);
//! # Ok(()) }
//! ```
//!
//! Limits (refused with a typed [`StoreError::Invalid`] naming the field):
//! a namespace has 1 to [`MAX_NAMESPACE_DEPTH`] labels of 1 to [`MAX_LABEL_CHARS`]
//! characters, none containing `.` (the SDKs join labels with dots in `GET
//! /store/items`) or a control character, none the wildcard `*` of namespace listings,
//! and the first is not `langgraph` (reserved by LangGraph); a key has 1 to [`MAX_KEY_CHARS`] characters and no control character; a
//! value is a JSON object of at most [`MAX_VALUE_BYTES`] bytes serialized; a TTL is 1 to
//! [`MAX_TTL_MINUTES`] minutes. Semantic search (`query`) needs an embedding index, which
//! this server does not have: as on LangGraph's server without an `index` configured,
//! the query is ignored and the search filters only.
//!
//! Storage: memory, or the table `keel_server_store_items` created on first use next to
//! the server's other tables in the agent's SQLite or PostgreSQL database. A search
//! reads the owner's rows under the prefix and filters and pages them in the server, and
//! a namespace listing reads the owner's distinct namespaces: meant for thousands of
//! items per owner, not millions. Expired items stop being read at once and are deleted
//! at the next write. To give middleware the same memory as the Store API, build one
//! store ([`ItemStore::for_store`]), hand it to the middleware and to
//! [`ServerOptions::items`](crate::ServerOptions::items).

use std::collections::BTreeMap;

use parking_lot::RwLock;
use serde_json::{Map, Value, json};

use crate::time::{now_ms, rfc3339};

/// The most labels a namespace may have.
pub const MAX_NAMESPACE_DEPTH: usize = 16;
/// The most characters a namespace label may have.
pub const MAX_LABEL_CHARS: usize = 256;
/// The most characters a key may have.
pub const MAX_KEY_CHARS: usize = 1024;
/// The largest value, serialized, in bytes.
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;
/// The longest time to live, in minutes (one year).
pub const MAX_TTL_MINUTES: f64 = 525_600.0;
/// The most items or namespaces one page returns.
pub const MAX_PAGE: usize = 1000;

/// Separates labels in the stored form of a namespace; labels hold no control
/// character, so the stored form is unambiguous and every label ends with it (a prefix
/// of labels is a prefix of the text).
const LABEL_END: char = '\u{1f}';

/// A store operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A field is out of its allowed range.
    #[error("{field}: {message}")]
    Invalid {
        /// The field (`namespace`, `key`, `value`, `ttl`, `filter`, `limit`...).
        field: &'static str,
        /// What is wrong and what is allowed.
        message: String,
    },
    /// The database failed.
    #[error("store items: {0}")]
    Storage(String),
}

impl StoreError {
    fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        StoreError::Invalid {
            field,
            message: message.into(),
        }
    }

    fn storage(e: impl std::fmt::Display) -> Self {
        StoreError::Storage(e.to_string())
    }
}

/// One stored item.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// Its namespace (labels, outermost first).
    pub namespace: Vec<String>,
    /// Its key within the namespace.
    pub key: String,
    /// The document.
    pub value: Map<String, Value>,
    /// Creation time, ms since the epoch.
    pub created_at_ms: i64,
    /// Last write, ms since the epoch.
    pub updated_at_ms: i64,
}

impl Item {
    /// The protocol's `Item` object.
    pub fn to_json(&self) -> Value {
        json!({
            "namespace": self.namespace,
            "key": self.key,
            "value": self.value,
            "created_at": rfc3339(self.created_at_ms),
            "updated_at": rfc3339(self.updated_at_ms),
        })
    }

    /// The protocol's `SearchItem` object: an `Item` with `score` (always null: no
    /// semantic search).
    pub fn to_search_json(&self) -> Value {
        let mut v = self.to_json();
        if let Some(o) = v.as_object_mut() {
            o.insert("score".into(), Value::Null);
        }
        v
    }
}

/// What `search` looks for.
#[derive(Clone, Debug)]
pub struct Search {
    /// Items whose namespace starts with these labels (empty: every item).
    pub namespace_prefix: Vec<String>,
    /// Conditions on top-level keys of the value: a value means equality; an object of
    /// operators `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte` compares.
    pub filter: Map<String, Value>,
    /// The most items returned.
    pub limit: usize,
    /// Items skipped first.
    pub offset: usize,
    /// Extend the TTL of the items returned.
    pub refresh_ttl: bool,
}

impl Default for Search {
    fn default() -> Self {
        Search {
            namespace_prefix: Vec::new(),
            filter: Map::new(),
            limit: 10,
            offset: 0,
            refresh_ttl: true,
        }
    }
}

/// What `namespaces` lists.
#[derive(Clone, Debug)]
pub struct NamespaceQuery {
    /// Namespaces starting with these labels (`*` matches any one label).
    pub prefix: Vec<String>,
    /// Namespaces ending with these labels (`*` matches any one label).
    pub suffix: Vec<String>,
    /// Namespaces cut to at most this many labels (duplicates dropped).
    pub max_depth: Option<usize>,
    /// The most namespaces returned.
    pub limit: usize,
    /// Namespaces skipped first.
    pub offset: usize,
}

impl Default for NamespaceQuery {
    fn default() -> Self {
        NamespaceQuery {
            prefix: Vec::new(),
            suffix: Vec::new(),
            max_depth: None,
            limit: 100,
            offset: 0,
        }
    }
}

/// Checks a namespace an item is written to or read from (see the module's limits).
pub fn check_namespace(field: &'static str, namespace: &[String]) -> Result<(), StoreError> {
    if namespace.is_empty() {
        return Err(StoreError::invalid(
            field,
            "a namespace needs at least one label",
        ));
    }
    check_labels(field, namespace, false)?;
    if namespace[0] == "langgraph" {
        return Err(StoreError::invalid(
            field,
            "the first label may not be \"langgraph\" (reserved by LangGraph)",
        ));
    }
    Ok(())
}

/// Checks the labels of a prefix or suffix (may be empty; `*` allowed when `wildcards`).
fn check_labels(field: &'static str, labels: &[String], wildcards: bool) -> Result<(), StoreError> {
    if labels.len() > MAX_NAMESPACE_DEPTH {
        return Err(StoreError::invalid(
            field,
            format!(
                "has {} labels; at most {MAX_NAMESPACE_DEPTH} are allowed",
                labels.len()
            ),
        ));
    }
    for label in labels {
        let chars = label.chars().count();
        if chars == 0 || chars > MAX_LABEL_CHARS {
            return Err(StoreError::invalid(
                field,
                format!(
                    "label {label:?} has {chars} characters; a label has 1 to {MAX_LABEL_CHARS}"
                ),
            ));
        }
        if label.contains('.') {
            return Err(StoreError::invalid(
                field,
                format!("label {label:?} contains '.'; namespace labels cannot contain periods"),
            ));
        }
        if let Some(c) = label.chars().find(|c| c.is_control()) {
            return Err(StoreError::invalid(
                field,
                format!(
                    "label {label:?} contains the control character U+{:04X}",
                    u32::from(c)
                ),
            ));
        }
        if !wildcards && label == "*" {
            // A stored "*" would be matched by every wildcard and could not be listed
            // exactly; LangGraph stores it, but nothing is lost by refusing it.
            return Err(StoreError::invalid(
                field,
                "label \"*\" is a wildcard in namespace listings and cannot be stored",
            ));
        }
    }
    Ok(())
}

/// Checks a key (see the module's limits).
pub fn check_key(key: &str) -> Result<(), StoreError> {
    let chars = key.chars().count();
    if chars == 0 || chars > MAX_KEY_CHARS {
        return Err(StoreError::invalid(
            "key",
            format!("has {chars} characters; a key has 1 to {MAX_KEY_CHARS}"),
        ));
    }
    if let Some(c) = key.chars().find(|c| c.is_control()) {
        return Err(StoreError::invalid(
            "key",
            format!(
                "{key:?} contains the control character U+{:04X}",
                u32::from(c)
            ),
        ));
    }
    Ok(())
}

/// Checks a value's size (see [`MAX_VALUE_BYTES`]); returns it serialized.
fn check_value(value: &Map<String, Value>) -> Result<String, StoreError> {
    let text = serde_json::to_string(value).map_err(StoreError::storage)?;
    if text.len() > MAX_VALUE_BYTES {
        return Err(StoreError::invalid(
            "value",
            format!(
                "is {} bytes serialized; at most {MAX_VALUE_BYTES} are allowed",
                text.len()
            ),
        ));
    }
    Ok(text)
}

/// Checks a TTL in minutes; returns it in ms.
fn ttl_ms(ttl_minutes: Option<f64>) -> Result<Option<i64>, StoreError> {
    match ttl_minutes {
        None => Ok(None),
        Some(m) if m.is_finite() && m > 0.0 && m <= MAX_TTL_MINUTES => {
            // In range, so the product fits an i64.
            #[allow(clippy::cast_possible_truncation)]
            let ms = (m * 60_000.0).ceil() as i64;
            Ok(Some(ms.max(1)))
        }
        Some(m) => Err(StoreError::invalid(
            "ttl",
            format!(
                "{m} minutes is out of range; a TTL is more than 0 and at most {MAX_TTL_MINUTES} minutes, or null for none"
            ),
        )),
    }
}

/// Checks a filter: operator objects use only the known operators.
fn check_filter(filter: &Map<String, Value>) -> Result<(), StoreError> {
    for (k, v) in filter {
        if let Value::Object(ops) = v
            && ops.keys().any(|o| o.starts_with('$'))
        {
            for op in ops.keys() {
                if !matches!(op.as_str(), "$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte") {
                    return Err(StoreError::invalid(
                        "filter",
                        format!(
                            "{k}: operator {op:?} is not one of $eq, $ne, $gt, $gte, $lt, $lte"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn order(a: &Value, b: &Value) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn keeps(filter: &Map<String, Value>, value: &Map<String, Value>) -> bool {
    filter.iter().all(|(k, want)| {
        let have = value.get(k);
        match want {
            Value::Object(ops) if ops.keys().any(|o| o.starts_with('$')) => {
                ops.iter().all(|(op, arg)| match (op.as_str(), have) {
                    ("$eq", h) => h == Some(arg),
                    ("$ne", h) => h != Some(arg),
                    (_, None) => false,
                    ("$gt", Some(h)) => order(h, arg).is_some_and(|o| o.is_gt()),
                    ("$gte", Some(h)) => order(h, arg).is_some_and(|o| o.is_ge()),
                    ("$lt", Some(h)) => order(h, arg).is_some_and(|o| o.is_lt()),
                    ("$lte", Some(h)) => order(h, arg).is_some_and(|o| o.is_le()),
                    _ => false,
                })
            }
            _ => have == Some(want),
        }
    })
}

/// `*` in a pattern matches any one label.
fn matches_labels(pattern: &[String], labels: &[String]) -> bool {
    pattern.len() == labels.len() && pattern.iter().zip(labels).all(|(p, l)| p == "*" || p == l)
}

fn encode_ns(namespace: &[String]) -> String {
    let mut s = String::new();
    for label in namespace {
        s.push_str(label);
        s.push(LABEL_END);
    }
    s
}

fn decode_ns(text: &str) -> Vec<String> {
    text.split_terminator(LABEL_END)
        .map(str::to_owned)
        .collect()
}

#[derive(Clone, Debug)]
struct Row {
    item: Item,
    ttl_ms: Option<i64>,
    expires_at_ms: Option<i64>,
}

impl Row {
    fn live(&self, now: i64) -> bool {
        self.expires_at_ms.is_none_or(|e| e > now)
    }
}

type MemoryKey = (String, String, String);

#[derive(Debug)]
enum Backend {
    Memory(RwLock<BTreeMap<MemoryKey, Row>>),
    Sqlite(sqlx::SqlitePool),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
}

/// Runs `$body` with `$pool` bound to whichever SQL pool `$self` holds; `$memory` for the
/// in-memory backend.
macro_rules! sql {
    ($self:expr, $rows:ident => $memory:expr, $pool:ident => $body:expr) => {
        match &$self.backend {
            Backend::Memory($rows) => $memory,
            Backend::Sqlite($pool) => $body,
            #[cfg(feature = "postgres")]
            Backend::Postgres($pool) => $body,
        }
    };
}

const CREATE_ITEMS: &str = "CREATE TABLE IF NOT EXISTS keel_server_store_items (
    owner TEXT NOT NULL, namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL, updated_at_ms BIGINT NOT NULL,
    ttl_ms BIGINT, expires_at_ms BIGINT,
    PRIMARY KEY (owner, namespace, key))";
const CREATE_ITEMS_EXPIRY: &str = "CREATE INDEX IF NOT EXISTS keel_server_store_items_expiry ON keel_server_store_items (expires_at_ms)";

type SqlRow = (String, String, String, i64, i64, Option<i64>, Option<i64>);

const SELECT_COLUMNS: &str =
    "namespace, key, value, created_at_ms, updated_at_ms, ttl_ms, expires_at_ms";

fn from_sql(row: SqlRow) -> Result<Row, StoreError> {
    let (namespace, key, value, created_at_ms, updated_at_ms, ttl_ms, expires_at_ms) = row;
    Ok(Row {
        item: Item {
            namespace: decode_ns(&namespace),
            key,
            value: serde_json::from_str(&value).map_err(StoreError::storage)?,
            created_at_ms,
            updated_at_ms,
        },
        ttl_ms,
        expires_at_ms,
    })
}

/// Long-term memory: JSON items under a namespace and key, kept per owner, in memory or
/// in the agent's database. See the [module](self) for limits.
#[derive(Debug)]
pub struct ItemStore {
    backend: Backend,
}

impl ItemStore {
    /// Items in this process's memory (lost on restart).
    pub fn memory() -> Self {
        ItemStore {
            backend: Backend::Memory(RwLock::new(BTreeMap::new())),
        }
    }

    /// Items in the store's database (in memory for a memory store), the table created
    /// if missing.
    pub async fn for_store(store: &keel_store::Store) -> Result<Self, StoreError> {
        let backend = match store {
            keel_store::Store::Memory(_) => return Ok(Self::memory()),
            keel_store::Store::Sqlite(s) => Backend::Sqlite(s.pool().clone()),
            #[cfg(feature = "postgres")]
            keel_store::Store::Postgres(s) => Backend::Postgres(s.pool().clone()),
            #[allow(unreachable_patterns)]
            _ => return Ok(Self::memory()),
        };
        let items = ItemStore { backend };
        for statement in [CREATE_ITEMS, CREATE_ITEMS_EXPIRY] {
            sql!(items, _r => {}, pool => {
                sqlx::query(statement)
                    .execute(pool)
                    .await
                    .map_err(StoreError::storage)?;
            });
        }
        Ok(items)
    }

    /// Writes an item (creating or replacing it); `ttl_minutes` makes it expire that long
    /// after its last write or read, `None` keeps it until deleted.
    pub async fn put(
        &self,
        owner: &str,
        namespace: &[String],
        key: &str,
        value: Map<String, Value>,
        ttl_minutes: Option<f64>,
    ) -> Result<(), StoreError> {
        check_namespace("namespace", namespace)?;
        check_key(key)?;
        let text = check_value(&value)?;
        let ttl = ttl_ms(ttl_minutes)?;
        let now = now_ms();
        let expires = ttl.map(|t| now.saturating_add(t));
        let ns = encode_ns(namespace);
        sql!(self, rows => {
            let mut rows = rows.write();
            rows.retain(|_, r| r.live(now));
            let id = (owner.to_owned(), ns, key.to_owned());
            let created_at_ms = rows.get(&id).map_or(now, |r| r.item.created_at_ms);
            rows.insert(id, Row {
                item: Item { namespace: namespace.to_vec(), key: key.to_owned(), value, created_at_ms, updated_at_ms: now },
                ttl_ms: ttl,
                expires_at_ms: expires,
            });
            Ok(())
        }, pool => {
            sqlx::query("DELETE FROM keel_server_store_items WHERE expires_at_ms <= $1")
                .bind(now)
                .execute(pool)
                .await
                .map_err(StoreError::storage)?;
            sqlx::query(
                "INSERT INTO keel_server_store_items (owner, namespace, key, value, created_at_ms, updated_at_ms, ttl_ms, expires_at_ms) VALUES ($1, $2, $3, $4, $5, $5, $6, $7) ON CONFLICT (owner, namespace, key) DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms, ttl_ms = excluded.ttl_ms, expires_at_ms = excluded.expires_at_ms",
            )
            .bind(owner)
            .bind(&ns)
            .bind(key)
            .bind(&text)
            .bind(now)
            .bind(ttl)
            .bind(expires)
            .execute(pool)
            .await
            .map_err(StoreError::storage)?;
            Ok(())
        })
    }

    /// Reads an item; `None` when missing, expired, or another owner's. `refresh_ttl`
    /// restarts its time to live.
    pub async fn get(
        &self,
        owner: &str,
        namespace: &[String],
        key: &str,
        refresh_ttl: bool,
    ) -> Result<Option<Item>, StoreError> {
        check_namespace("namespace", namespace)?;
        check_key(key)?;
        let now = now_ms();
        let ns = encode_ns(namespace);
        let row = sql!(self, rows => {
            let id = (owner.to_owned(), ns.clone(), key.to_owned());
            rows.read().get(&id).filter(|r| r.live(now)).cloned()
        }, pool => {
            let row: Option<SqlRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {SELECT_COLUMNS} FROM keel_server_store_items WHERE owner = $1 AND namespace = $2 AND key = $3 AND (expires_at_ms IS NULL OR expires_at_ms > $4)"
            )))
            .bind(owner)
            .bind(&ns)
            .bind(key)
            .bind(now)
            .fetch_optional(pool)
            .await
            .map_err(StoreError::storage)?;
            row.map(from_sql).transpose()?
        });
        if let Some(r) = &row
            && refresh_ttl
        {
            self.refresh(owner, std::slice::from_ref(r), now).await?;
        }
        Ok(row.map(|r| r.item))
    }

    /// Deletes an item; deleting a missing item is not an error.
    pub async fn delete(
        &self,
        owner: &str,
        namespace: &[String],
        key: &str,
    ) -> Result<(), StoreError> {
        check_namespace("namespace", namespace)?;
        check_key(key)?;
        let ns = encode_ns(namespace);
        sql!(self, rows => {
            rows.write().remove(&(owner.to_owned(), ns, key.to_owned()));
            Ok(())
        }, pool => {
            sqlx::query("DELETE FROM keel_server_store_items WHERE owner = $1 AND namespace = $2 AND key = $3")
                .bind(owner)
                .bind(&ns)
                .bind(key)
                .execute(pool)
                .await
                .map_err(StoreError::storage)?;
            Ok(())
        })
    }

    /// The owner's items under a namespace prefix that pass the filter, oldest first.
    pub async fn search(&self, owner: &str, search: &Search) -> Result<Vec<Item>, StoreError> {
        check_labels("namespace_prefix", &search.namespace_prefix, false)?;
        check_filter(&search.filter)?;
        check_page(search.limit, search.offset)?;
        let now = now_ms();
        let prefix = encode_ns(&search.namespace_prefix);
        let candidates: Vec<Row> = sql!(self, rows => {
            rows.read()
                .range((owner.to_owned(), String::new(), String::new())..)
                .take_while(|((o, _, _), _)| o == owner)
                .filter(|((_, ns, _), r)| ns.starts_with(&prefix) && r.live(now))
                .map(|(_, r)| r.clone())
                .collect()
        }, pool => {
            let prefix_chars = i32::try_from(prefix.chars().count()).map_err(StoreError::storage)?;
            let rows: Vec<SqlRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT {SELECT_COLUMNS} FROM keel_server_store_items WHERE owner = $1 AND substr(namespace, 1, $2) = $3 AND (expires_at_ms IS NULL OR expires_at_ms > $4) ORDER BY created_at_ms, namespace, key"
            )))
            .bind(owner)
            .bind(prefix_chars)
            .bind(&prefix)
            .bind(now)
            .fetch_all(pool)
            .await
            .map_err(StoreError::storage)?;
            rows.into_iter().map(from_sql).collect::<Result<_, _>>()?
        });
        let mut found: Vec<Row> = candidates
            .into_iter()
            .filter(|r| keeps(&search.filter, &r.item.value))
            .collect();
        found.sort_by(|a, b| {
            (a.item.created_at_ms, &a.item.namespace, &a.item.key).cmp(&(
                b.item.created_at_ms,
                &b.item.namespace,
                &b.item.key,
            ))
        });
        let page: Vec<Row> = found
            .into_iter()
            .skip(search.offset)
            .take(search.limit)
            .collect();
        if search.refresh_ttl {
            self.refresh(owner, &page, now).await?;
        }
        Ok(page.into_iter().map(|r| r.item).collect())
    }

    /// The owner's distinct namespaces matching the query, sorted.
    pub async fn namespaces(
        &self,
        owner: &str,
        query: &NamespaceQuery,
    ) -> Result<Vec<Vec<String>>, StoreError> {
        check_labels("prefix", &query.prefix, true)?;
        check_labels("suffix", &query.suffix, true)?;
        check_page(query.limit, query.offset)?;
        if query.max_depth == Some(0) {
            return Err(StoreError::invalid(
                "max_depth",
                "0 is out of range; max_depth is at least 1, or null for no limit",
            ));
        }
        let now = now_ms();
        let all: Vec<String> = sql!(self, rows => {
            rows.read()
                .range((owner.to_owned(), String::new(), String::new())..)
                .take_while(|((o, _, _), _)| o == owner)
                .filter(|(_, r)| r.live(now))
                .map(|((_, ns, _), _)| ns.clone())
                .collect()
        }, pool => {
            let rows: Vec<(String,)> = sqlx::query_as(
                "SELECT DISTINCT namespace FROM keel_server_store_items WHERE owner = $1 AND (expires_at_ms IS NULL OR expires_at_ms > $2)",
            )
            .bind(owner)
            .bind(now)
            .fetch_all(pool)
            .await
            .map_err(StoreError::storage)?;
            rows.into_iter().map(|(ns,)| ns).collect()
        });
        let mut out: Vec<Vec<String>> = all
            .iter()
            .map(|ns| decode_ns(ns))
            .filter(|ns| {
                ns.len() >= query.prefix.len()
                    && matches_labels(&query.prefix, &ns[..query.prefix.len()])
                    && ns.len() >= query.suffix.len()
                    && matches_labels(&query.suffix, &ns[ns.len() - query.suffix.len()..])
            })
            .map(|mut ns| {
                if let Some(d) = query.max_depth {
                    ns.truncate(d);
                }
                ns
            })
            .collect();
        out.sort();
        out.dedup();
        Ok(out
            .into_iter()
            .skip(query.offset)
            .take(query.limit)
            .collect())
    }

    /// Restarts the time to live of items just read.
    async fn refresh(&self, owner: &str, rows: &[Row], now: i64) -> Result<(), StoreError> {
        for r in rows {
            let Some(ttl) = r.ttl_ms else { continue };
            let expires = now.saturating_add(ttl);
            let ns = encode_ns(&r.item.namespace);
            sql!(self, rows => {
                if let Some(row) = rows.write().get_mut(&(owner.to_owned(), ns, r.item.key.clone())) {
                    row.expires_at_ms = Some(expires);
                }
            }, pool => {
                sqlx::query("UPDATE keel_server_store_items SET expires_at_ms = $1 WHERE owner = $2 AND namespace = $3 AND key = $4 AND ttl_ms IS NOT NULL")
                    .bind(expires)
                    .bind(owner)
                    .bind(&ns)
                    .bind(&r.item.key)
                    .execute(pool)
                    .await
                    .map_err(StoreError::storage)?;
            });
        }
        Ok(())
    }
}

fn check_page(limit: usize, offset: usize) -> Result<(), StoreError> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(StoreError::invalid(
            "limit",
            format!("{limit} is out of range; limit is 1 to {MAX_PAGE}"),
        ));
    }
    if offset > i32::MAX as usize {
        return Err(StoreError::invalid(
            "offset",
            format!("{offset} is out of range; offset is 0 to {}", i32::MAX),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(labels: &[&str]) -> Vec<String> {
        labels.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn namespaces_encode_so_prefixes_are_label_prefixes() {
        let a = encode_ns(&ns(&["a", "b"]));
        assert!(a.starts_with(&encode_ns(&ns(&["a"]))));
        assert!(!encode_ns(&ns(&["ab"])).starts_with(&encode_ns(&ns(&["a"]))));
        assert_eq!(decode_ns(&a), ns(&["a", "b"]));
    }

    #[test]
    fn validation_names_the_field() {
        let e = check_namespace("namespace", &ns(&["a.b"])).unwrap_err();
        assert!(e.to_string().starts_with("namespace: "), "{e}");
        assert!(check_namespace("namespace", &[]).is_err());
        assert!(check_namespace("namespace", &ns(&[""])).is_err());
        assert!(check_namespace("namespace", &ns(&["x\u{1}"])).is_err());
        assert!(check_namespace("namespace", &ns(&["langgraph"])).is_err());
        assert!(check_key("").is_err());
        assert!(ttl_ms(Some(0.0)).is_err());
        assert_eq!(ttl_ms(Some(1.0)).unwrap(), Some(60_000));
        assert!(
            check_filter(&json!({"a": {"$regex": "x"}}).as_object().cloned().unwrap()).is_err()
        );
    }

    #[test]
    fn filters_compare() {
        let v = json!({"a": 2, "s": "m"}).as_object().cloned().unwrap();
        let f = |f: Value| keeps(f.as_object().unwrap(), &v);
        assert!(f(json!({"a": 2})));
        assert!(!f(json!({"a": 1})));
        assert!(f(json!({"a": {"$gt": 1}, "s": {"$lte": "m"}})));
        assert!(!f(json!({"a": {"$lt": 2}})));
        assert!(f(json!({"b": {"$ne": 1}})));
        assert!(!f(json!({"b": {"$gt": 1}})));
    }
}
