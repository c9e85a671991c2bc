//! Assistants: the server serves one agent, listed as one assistant whose graph id is
//! the configured name (`assistants.search()` finds it; runs name it by id or graph id).

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::extract::{Ids, JsonBody};
use crate::runs::AssistantInfo;
use crate::state::AppState;
use crate::time::rfc3339;

/// The protocol's `Assistant` object.
pub fn assistant_json(info: &AssistantInfo) -> Value {
    let created = rfc3339(0);
    json!({
        "assistant_id": info.assistant_id,
        "graph_id": info.graph_id,
        "config": {},
        "context": {},
        "created_at": created,
        "updated_at": created,
        "metadata": {"created_by": "system"},
        "version": 1,
        "name": info.graph_id,
        "description": info.description,
    })
}

/// True when `id` names the assistant (its id or its graph id).
pub fn matches(info: &AssistantInfo, id: &str) -> bool {
    id == info.assistant_id || id == info.graph_id
}

/// `GET /assistants/{assistant_id}`.
pub async fn get_one(
    State(app): State<AppState>,
    Ids(id): Ids<String>,
) -> Result<Json<Value>, ApiError> {
    let info = app.manager.assistant();
    if !matches(info, &id) {
        return Err(ApiError::NotFound {
            what: "Assistant",
            id,
        });
    }
    Ok(Json(assistant_json(info)))
}

/// The body of `POST /assistants/search` and `/assistants/count`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SearchBody {
    graph_id: Option<String>,
    name: Option<String>,
    metadata: Option<Map<String, Value>>,
    limit: Option<usize>,
    offset: Option<usize>,
}

fn found(app: &AppState, body: &SearchBody) -> bool {
    let info = app.manager.assistant();
    body.graph_id.as_ref().is_none_or(|g| g == &info.graph_id)
        && body
            .name
            .as_ref()
            .is_none_or(|n| info.graph_id.contains(n.as_str()))
        && body
            .metadata
            .as_ref()
            .is_none_or(|m| m.iter().all(|(k, v)| k == "created_by" && v == "system"))
}

/// `POST /assistants/search`.
pub async fn search(
    State(app): State<AppState>,
    JsonBody(body): JsonBody<SearchBody>,
) -> Json<Value> {
    let hit = found(&app, &body) && body.offset.unwrap_or(0) == 0 && body.limit != Some(0);
    Json(Value::Array(if hit {
        vec![assistant_json(app.manager.assistant())]
    } else {
        Vec::new()
    }))
}

/// `POST /assistants/count`.
pub async fn count(
    State(app): State<AppState>,
    JsonBody(body): JsonBody<SearchBody>,
) -> Json<Value> {
    Json(json!(usize::from(found(&app, &body))))
}

fn named(app: &AppState, id: String) -> Result<&AssistantInfo, ApiError> {
    let info = app.manager.assistant();
    if matches(info, &id) {
        Ok(info)
    } else {
        Err(ApiError::NotFound {
            what: "Assistant",
            id,
        })
    }
}

/// `GET /assistants/{assistant_id}/graph`: the agent's loop in LangGraph's drawable
/// form, as LangGraph draws a `create_agent` graph: `model` and `tools`, and the review
/// node of `human_in_the_loop` (other middleware hooks run inside those steps here, so
/// they are not drawn).
pub async fn graph(
    State(app): State<AppState>,
    Ids(id): Ids<String>,
) -> Result<Json<Value>, ApiError> {
    named(&app, id)?;
    let node = |id: &str| json!({"id": id, "type": "runnable", "data": {"name": id}});
    let edge = |source: &str, target: &str, conditional: bool| {
        let mut e = json!({"source": source, "target": target});
        if conditional {
            e["conditional"] = json!(true);
        }
        e
    };
    // A review pauses at its own node, the one a paused thread's state names as next.
    let pauser = app.manager.agent().resumable().map(|(name, _)| name);
    let review = format!("{}.after_model", pauser.unwrap_or_default());
    let review = review.as_str();
    let reviewed = pauser.is_some();
    let (nodes, edges) = if reviewed {
        (
            vec![
                node("__start__"),
                node("model"),
                node("tools"),
                node(review),
                json!({"id": "__end__"}),
            ],
            vec![
                edge("__start__", "model", false),
                edge("model", review, false),
                edge(review, "tools", true),
                edge(review, "model", true),
                edge(review, "__end__", true),
                edge("tools", "model", false),
            ],
        )
    } else {
        (
            vec![
                node("__start__"),
                node("model"),
                node("tools"),
                json!({"id": "__end__"}),
            ],
            vec![
                edge("__start__", "model", false),
                edge("model", "tools", true),
                edge("model", "__end__", true),
                edge("tools", "model", false),
            ],
        )
    };
    Ok(Json(json!({"nodes": nodes, "edges": edges})))
}

/// `GET /assistants/{assistant_id}/schemas`: the JSON Schemas of the agent's input,
/// output and state (its messages, in LangChain's serialized form) and of its config
/// and context (free-form objects).
pub async fn schemas(
    State(app): State<AppState>,
    Ids(id): Ids<String>,
) -> Result<Json<Value>, ApiError> {
    let info = named(&app, id)?;
    let state = json!({
        "title": "AgentState",
        "type": "object",
        "properties": {
            "messages": {
                "title": "Messages",
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "enum": ["human", "ai", "tool", "system"]},
                        "content": {},
                        "id": {"type": "string"},
                    },
                    "required": ["content"],
                    "additionalProperties": true,
                },
            },
        },
        "required": ["messages"],
    });
    let object =
        |title: &str| json!({"title": title, "type": "object", "additionalProperties": true});
    Ok(Json(json!({
        "graph_id": info.graph_id,
        "input_schema": state,
        "output_schema": state,
        "state_schema": state,
        "config_schema": object("Config"),
        "context_schema": object("Context"),
    })))
}
