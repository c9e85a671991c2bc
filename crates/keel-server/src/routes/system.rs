//! `GET /ok` and `GET /info`, as the Agent Server answers them.

use axum::Json;
use serde_json::{Value, json};

/// Health check: `{"ok": true}`.
pub async fn ok() -> Json<Value> {
    Json(json!({"ok": true}))
}

/// The server's version and the optional features it offers (`flags`).
pub async fn info() -> Json<Value> {
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "langgraph_py_version": null,
        "flags": {
            "assistants": true,
            "crons": false,
            "langsmith": false,
            "langsmith_tracing_replicas": false,
        },
        "host": {"kind": "keel-server", "project_id": null, "revision_id": null, "tenant_id": null},
        "metadata": {"server": "keel-server", "version": env!("CARGO_PKG_VERSION")},
    }))
}
