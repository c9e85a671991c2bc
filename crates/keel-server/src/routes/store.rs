//! The Store API (long-term memory across threads, see [`crate::store_api`]):
//! `PUT/GET/DELETE /store/items`, `POST /store/items/search`, `POST /store/namespaces`,
//! in the shapes of LangGraph's Agent Server (`client.store` of `langgraph-sdk`). Every
//! call is scoped to the caller's owner.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::auth::Owner;
use crate::error::ApiError;
use crate::extract::{JsonBody, QueryPairs};
use crate::state::AppState;
use crate::store_api::{NamespaceQuery, Search, StoreError};

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid { .. } => ApiError::Invalid(e.to_string()),
            StoreError::Storage(message) => ApiError::storage("using the store", message),
        }
    }
}

/// The body of `PUT /store/items`.
#[derive(Debug, Deserialize)]
pub struct PutBody {
    namespace: Vec<String>,
    key: String,
    value: Value,
    /// Which fields to embed for semantic search: accepted and ignored (no index).
    #[serde(default)]
    #[allow(dead_code)]
    index: Option<Value>,
    /// Minutes to live.
    #[serde(default)]
    ttl: Option<f64>,
}

fn object(field: &str, value: Value) -> Result<Map<String, Value>, ApiError> {
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::Invalid(format!(
            "{field}: {other} is not a JSON object; an item's value is an object ({{...}})"
        ))),
    }
}

/// `PUT /store/items`: writes an item (204).
pub async fn put(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    JsonBody(body): JsonBody<PutBody>,
) -> Result<StatusCode, ApiError> {
    let value = object("value", body.value)?;
    app.items
        .put(&owner.0, &body.namespace, &body.key, value, body.ttl)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /store/items?namespace=a.b&key=k[&refresh_ttl=true]`: the item, or `null` when
/// there is none (as LangGraph's server answers).
pub async fn get(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    query: QueryPairs,
) -> Result<Json<Value>, ApiError> {
    let namespace: Vec<String> = query
        .get("namespace")
        .unwrap_or_default()
        .split('.')
        .map(str::to_owned)
        .collect();
    let Some(key) = query.get("key") else {
        return Err(ApiError::Invalid(
            "key: the query parameter key is required".into(),
        ));
    };
    let refresh = query.bool_or("refresh_ttl", true)?;
    let item = app.items.get(&owner.0, &namespace, key, refresh).await?;
    Ok(Json(item.map_or(Value::Null, |i| i.to_json())))
}

/// The body of `DELETE /store/items`.
#[derive(Debug, Deserialize)]
pub struct DeleteBody {
    namespace: Vec<String>,
    key: String,
}

/// `DELETE /store/items`: deletes an item, if present (204).
pub async fn delete(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    JsonBody(body): JsonBody<DeleteBody>,
) -> Result<StatusCode, ApiError> {
    app.items
        .delete(&owner.0, &body.namespace, &body.key)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The body of `POST /store/items/search`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SearchBody {
    namespace_prefix: Option<Vec<String>>,
    filter: Option<Map<String, Value>>,
    limit: Option<usize>,
    offset: Option<usize>,
    /// Natural-language query: ignored without an embedding index, as on LangGraph.
    #[allow(dead_code)]
    query: Option<String>,
    refresh_ttl: Option<bool>,
}

/// `POST /store/items/search`: `{"items": [...]}`, oldest first.
pub async fn search(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    JsonBody(body): JsonBody<SearchBody>,
) -> Result<Json<Value>, ApiError> {
    let defaults = Search::default();
    let search = Search {
        namespace_prefix: body.namespace_prefix.unwrap_or_default(),
        filter: body.filter.unwrap_or_default(),
        limit: body.limit.unwrap_or(defaults.limit),
        offset: body.offset.unwrap_or(defaults.offset),
        refresh_ttl: body.refresh_ttl.unwrap_or(defaults.refresh_ttl),
    };
    let items = app.items.search(&owner.0, &search).await?;
    let items: Vec<Value> = items.iter().map(|i| i.to_search_json()).collect();
    Ok(Json(json!({ "items": items })))
}

/// The body of `POST /store/namespaces`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NamespacesBody {
    prefix: Option<Vec<String>>,
    suffix: Option<Vec<String>>,
    max_depth: Option<usize>,
    limit: Option<usize>,
    offset: Option<usize>,
}

/// `POST /store/namespaces`: `{"namespaces": [[...], ...]}`, sorted.
pub async fn namespaces(
    State(app): State<AppState>,
    Extension(owner): Extension<Owner>,
    JsonBody(body): JsonBody<NamespacesBody>,
) -> Result<Json<Value>, ApiError> {
    let defaults = NamespaceQuery::default();
    let query = NamespaceQuery {
        prefix: body.prefix.unwrap_or_default(),
        suffix: body.suffix.unwrap_or_default(),
        max_depth: body.max_depth,
        limit: body.limit.unwrap_or(defaults.limit),
        offset: body.offset.unwrap_or(defaults.offset),
    };
    let namespaces = app.items.namespaces(&owner.0, &query).await?;
    Ok(Json(json!({ "namespaces": namespaces })))
}
