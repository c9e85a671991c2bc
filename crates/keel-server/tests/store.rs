//! The Store API (long-term memory across threads) through the router: items written,
//! read, searched, listed and deleted in the shapes of LangGraph's Agent Server, kept
//! per API-key owner, validated, in memory, SQLite and PostgreSQL (when
//! `KEEL_TEST_POSTGRES_URL` is set, in a fresh schema).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use common::{call, json};
use keel_agent::Agent;
use keel_agent::offline::OfflineModel;
use keel_server::ApiKeys;
use keel_server::store_api::ItemStore;
use keel_server::{ServerOptions, router_with};
use keel_store::Store;
use serde_json::{Value, json};

const ALICE: &str = "alice-key-0001";
const BOB: &str = "bob-key-00002";

async fn server(store: &Store) -> Router {
    let agent = Agent::builder()
        .model(Arc::new(OfflineModel::new()))
        .build()
        .unwrap();
    let options = ServerOptions {
        api_keys: ApiKeys::new(HashMap::from([
            (ALICE.to_owned(), "alice".to_owned()),
            (BOB.to_owned(), "bob".to_owned()),
        ])),
        items: Some(Arc::new(ItemStore::for_store(store).await.unwrap())),
        ..ServerOptions::default()
    };
    router_with(agent, options)
}

async fn put(app: &Router, key: &str, body: Value) -> (StatusCode, String) {
    call(app, "PUT", "/store/items", Some(key), Some(body)).await
}

async fn get(app: &Router, key: &str, query: &str) -> Value {
    let (status, body) = call(
        app,
        "GET",
        &format!("/store/items?{query}"),
        Some(key),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    json(&body)
}

async fn post(app: &Router, key: &str, path: &str, body: Value) -> Value {
    let (status, text) = call(app, "POST", path, Some(key), Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    json(&text)
}

fn keys(search: &Value) -> Vec<&str> {
    search["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["key"].as_str().unwrap())
        .collect()
}

async fn store_api(store: Store) {
    let app = server(&store).await;
    // Writes answer 204 with no body, as LangGraph's server does.
    for (ns, k, v) in [
        (json!(["users", "u1"]), "k1", json!({"a": 1, "b": "x"})),
        (json!(["users", "u1", "notes"]), "k2", json!({"a": 2})),
        (json!(["users", "u2"]), "k3", json!({"a": 1})),
        (json!(["other"]), "k4", json!({"a": 1})),
    ] {
        let (status, body) = put(
            &app,
            ALICE,
            json!({"namespace": ns, "key": k, "value": v, "index": false}),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
        assert!(body.is_empty());
        tokio::time::sleep(Duration::from_millis(3)).await;
    }

    // GET: the namespace joined with dots, as the SDKs send it.
    let item = get(&app, ALICE, "namespace=users.u1&key=k1").await;
    assert_eq!(item["namespace"], json!(["users", "u1"]));
    assert_eq!(item["key"], "k1");
    assert_eq!(item["value"], json!({"a": 1, "b": "x"}));
    assert!(item["created_at"].is_string() && item["updated_at"].is_string());
    assert_eq!(
        get(&app, ALICE, "namespace=users.u1&key=nope").await,
        Value::Null
    );

    // Search: by prefix of labels, filter, pages; `query` is ignored without an index.
    let all = post(
        &app,
        ALICE,
        "/store/items/search",
        json!({"namespace_prefix": ["users"]}),
    )
    .await;
    assert_eq!(keys(&all), ["k1", "k2", "k3"]);
    assert_eq!(all["items"][0]["score"], Value::Null);
    assert_eq!(all["items"][0]["value"], json!({"a": 1, "b": "x"}));
    let ones = post(
        &app,
        ALICE,
        "/store/items/search",
        json!({"namespace_prefix": ["users"], "filter": {"a": 1}}),
    )
    .await;
    assert_eq!(keys(&ones), ["k1", "k3"]);
    let gt = post(
        &app,
        ALICE,
        "/store/items/search",
        json!({"namespace_prefix": ["users"], "filter": {"a": {"$gt": 1}}}),
    )
    .await;
    assert_eq!(keys(&gt), ["k2"]);
    let page = post(
        &app,
        ALICE,
        "/store/items/search",
        json!({"namespace_prefix": ["users"], "query": "hello", "limit": 1, "offset": 1}),
    )
    .await;
    assert_eq!(keys(&page), ["k2"]);
    let none = post(
        &app,
        ALICE,
        "/store/items/search",
        json!({"namespace_prefix": ["use"]}),
    )
    .await;
    assert_eq!(keys(&none), Vec::<&str>::new());
    let everything = post(&app, ALICE, "/store/items/search", json!({})).await;
    assert_eq!(keys(&everything), ["k1", "k2", "k3", "k4"]);

    // Namespaces: sorted, by prefix/suffix (with `*`), cut to max_depth.
    let ns = |v: Value| v["namespaces"].clone();
    assert_eq!(
        ns(post(&app, ALICE, "/store/namespaces", json!({})).await),
        json!([
            ["other"],
            ["users", "u1"],
            ["users", "u1", "notes"],
            ["users", "u2"]
        ])
    );
    assert_eq!(
        ns(post(
            &app,
            ALICE,
            "/store/namespaces",
            json!({"prefix": ["users"], "max_depth": 2})
        )
        .await),
        json!([["users", "u1"], ["users", "u2"]])
    );
    assert_eq!(
        ns(post(
            &app,
            ALICE,
            "/store/namespaces",
            json!({"suffix": ["notes"]})
        )
        .await),
        json!([["users", "u1", "notes"]])
    );
    assert_eq!(
        ns(post(
            &app,
            ALICE,
            "/store/namespaces",
            json!({"prefix": ["users", "*"], "limit": 2, "offset": 1})
        )
        .await),
        json!([["users", "u1", "notes"], ["users", "u2"]])
    );

    // A rewrite keeps created_at and moves updated_at.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (status, _) = put(
        &app,
        ALICE,
        json!({"namespace": ["users", "u1"], "key": "k1", "value": {"a": 9}}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let again = get(&app, ALICE, "namespace=users.u1&key=k1").await;
    assert_eq!(again["value"], json!({"a": 9}));
    assert_eq!(again["created_at"], item["created_at"]);
    assert_ne!(again["updated_at"], item["updated_at"]);

    // Another owner sees nothing of alice's, and cannot overwrite or delete it.
    assert_eq!(
        get(&app, BOB, "namespace=users.u1&key=k1").await,
        Value::Null
    );
    assert_eq!(
        keys(&post(&app, BOB, "/store/items/search", json!({})).await),
        Vec::<&str>::new()
    );
    assert_eq!(
        ns(post(&app, BOB, "/store/namespaces", json!({})).await),
        json!([])
    );
    let (status, _) = put(
        &app,
        BOB,
        json!({"namespace": ["users", "u1"], "key": "k1", "value": {"bob": true}}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = call(
        &app,
        "DELETE",
        "/store/items",
        Some(BOB),
        Some(json!({"namespace": ["users", "u2"], "key": "k3"})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        get(&app, ALICE, "namespace=users.u1&key=k1").await["value"],
        json!({"a": 9})
    );
    assert_eq!(
        get(&app, ALICE, "namespace=users.u2&key=k3").await["value"],
        json!({"a": 1})
    );
    assert_eq!(
        get(&app, BOB, "namespace=users.u1&key=k1").await["value"],
        json!({"bob": true})
    );
    let (status, _) = call(
        &app,
        "GET",
        "/store/items?namespace=users.u1&key=k1",
        None,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Delete: 204, then the item reads as null; deleting again is fine.
    for _ in 0..2 {
        let (status, body) = call(
            &app,
            "DELETE",
            "/store/items",
            Some(ALICE),
            Some(json!({"namespace": ["users", "u2"], "key": "k3"})),
        )
        .await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    }
    assert_eq!(
        get(&app, ALICE, "namespace=users.u2&key=k3").await,
        Value::Null
    );

    // A TTL (minutes) makes an item expire.
    let (status, _) = put(
        &app,
        ALICE,
        json!({"namespace": ["tmp"], "key": "t", "value": {}, "ttl": 0.001}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(get(&app, ALICE, "namespace=tmp&key=t").await["key"], "t");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(get(&app, ALICE, "namespace=tmp&key=t").await, Value::Null);
    assert_eq!(
        keys(
            &post(
                &app,
                ALICE,
                "/store/items/search",
                json!({"namespace_prefix": ["tmp"]})
            )
            .await
        ),
        Vec::<&str>::new()
    );
}

#[tokio::test]
async fn store_items_in_memory() {
    store_api(Store::connect("memory:").await.unwrap()).await;
}

#[tokio::test]
async fn store_items_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    store_api(Store::connect(&url).await.unwrap()).await;
    // Items outlive the process: a new server on the same file reads them.
    let app = server(&Store::connect(&url).await.unwrap()).await;
    assert_eq!(
        get(&app, ALICE, "namespace=users.u1&key=k1").await["value"],
        json!({"a": 9})
    );
}

#[cfg(feature = "postgres")]
#[cfg_attr(
    not(feature = "postgres-tests"),
    ignore = "needs PostgreSQL: run with `--features postgres-tests` and KEEL_TEST_POSTGRES_URL (scripts/test.sh provisions both)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_items_on_postgres() {
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    use std::str::FromStr;

    let url = match std::env::var("KEEL_TEST_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "KEEL_TEST_POSTGRES_URL is not set: run the tests with scripts/test.sh, which \
             provisions a throwaway PostgreSQL (or `scripts/postgres.sh -- cargo test -p \
             keel-server --features postgres-tests`)"
        ),
    };
    let schema = format!("keel_store_items_{}", uuid::Uuid::new_v4().simple());
    let admin = sqlx::PgPool::connect(&url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await
        .unwrap();
    let options = PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", schema.as_str())]);
    let pg = keel_store::postgres::PostgresStore::connect_with(
        options,
        PgPoolOptions::new().max_connections(4),
    )
    .await
    .unwrap();
    store_api(Store::Postgres(pg)).await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(&admin)
        .await
        .unwrap();
}

#[tokio::test]
async fn store_input_is_validated_with_the_field_named() {
    let app = server(&Store::connect("memory:").await.unwrap()).await;
    let big = "x".repeat(keel_server::store_api::MAX_VALUE_BYTES);
    for (body, needle) in [
        (
            json!({"namespace": ["a.b"], "key": "k", "value": {}}),
            "namespace: label \"a.b\" contains '.'",
        ),
        (
            json!({"namespace": [], "key": "k", "value": {}}),
            "namespace: a namespace needs at least one label",
        ),
        (
            json!({"namespace": [""], "key": "k", "value": {}}),
            "namespace: label \"\" has 0 characters",
        ),
        (
            json!({"namespace": ["x\u{1}"], "key": "k", "value": {}}),
            "U+0001",
        ),
        (
            json!({"namespace": ["langgraph"], "key": "k", "value": {}}),
            "reserved by LangGraph",
        ),
        (
            json!({"namespace": ["x"], "key": "", "value": {}}),
            "key: has 0 characters",
        ),
        (
            json!({"namespace": ["x"], "key": "k", "value": [1]}),
            "value: [1] is not a JSON object",
        ),
        (
            json!({"namespace": ["x"], "key": "k", "value": null}),
            "value: null is not a JSON object",
        ),
        (
            json!({"namespace": ["x"], "key": "k", "value": {"v": big}}),
            "value: is 1048584 bytes",
        ),
        (
            json!({"namespace": ["x"], "key": "k", "value": {}, "ttl": 0}),
            "ttl: 0 minutes is out of range",
        ),
    ] {
        let (status, text) = put(&app, ALICE, body.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {text}");
        let detail = json(&text)["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains(needle), "{body}: {detail}");
    }
    for (path, body, needle) in [
        (
            "/store/items/search",
            json!({"namespace_prefix": ["x"], "limit": 0}),
            "limit: 0 is out of range",
        ),
        (
            "/store/items/search",
            json!({"filter": {"a": {"$regex": "x"}}}),
            "filter: a: operator \"$regex\"",
        ),
        (
            "/store/namespaces",
            json!({"max_depth": 0}),
            "max_depth: 0 is out of range",
        ),
        (
            "/store/namespaces",
            json!({"limit": 5000}),
            "limit: 5000 is out of range",
        ),
    ] {
        let (status, text) = call(&app, "POST", path, Some(ALICE), Some(body.clone())).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {text}");
        assert!(
            json(&text)["detail"].as_str().unwrap().contains(needle),
            "{body}: {text}"
        );
    }
    let (status, text) = call(&app, "GET", "/store/items?namespace=x", Some(ALICE), None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{text}");
    assert!(text.contains("key"), "{text}");
}
