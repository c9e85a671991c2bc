//! `/mcp`: the server's assistant as a tool of a Model Context Protocol server
//! (streamable HTTP, the official Rust SDK rmcp's server side), so MCP clients (an IDE,
//! another agent, keel-mcp itself) can ask it questions.
//!
//! The assistant is one tool, named after its graph id. Its input is
//! `{"message": "...", "thread_id": "..."}` (`thread_id` optional); a call runs the
//! agent as `runs.wait` does, on the caller's thread of that id (created when new) or
//! on a fresh thread deleted afterwards, and answers with the final assistant message
//! as text, plus `{"answer", "thread_id"}` as structured content. A failed run, or one
//! paused for human review, is an `isError` result saying so.
//!
//! Authentication is the rest of the server's: with API keys configured, a request
//! needs `x-api-key: KEY` or `Authorization: Bearer KEY` (what MCP clients send, per the
//! specification's authorization section), and its threads are the key owner's
//! ([`ApiKeys`](crate::ApiKeys)). The endpoint is stateless (no `Mcp-Session-Id`, JSON
//! answers):
//! every call stands alone, and shutting the server down leaves no stream open.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::auth::Owner;
use crate::state::AppState;

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// The MCP server: one tool per assistant (a server has one).
#[derive(Clone)]
pub struct KeelMcp {
    app: AppState,
}

impl KeelMcp {
    fn tool(&self) -> Tool {
        let info = self.app.manager.assistant();
        let description = match &info.description {
            Some(d) => format!("Ask the assistant {:?}: {d}", info.graph_id),
            None => format!(
                "Ask the assistant {:?} (model {}); it answers with its final message.",
                info.graph_id, info.model_name
            ),
        };
        let schema = json!({
            "type": "object",
            "properties": {
                "message": {"type": "string", "description": "What the user says to the assistant."},
                "thread_id": {
                    "type": "string",
                    "description": "Continue this conversation (created when new); omit for a one-off question."
                }
            },
            "required": ["message"],
            "additionalProperties": false
        });
        let schema = match schema {
            Value::Object(map) => map,
            _ => Default::default(),
        };
        Tool::new(info.graph_id.clone(), description, Arc::new(schema))
    }
}

fn error_result(message: impl Into<String>) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(message.into())]).into()
}

/// The text of the last assistant message of a thread's values (LangChain shape).
fn final_answer(values: &Value) -> Option<String> {
    let message = values["messages"]
        .as_array()?
        .iter()
        .rev()
        .find(|m| m["type"] == "ai")?;
    Some(match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    })
}

impl ServerHandler for KeelMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("keel", env!("CARGO_PKG_VERSION")))
            .with_instructions("Each tool is an assistant served by Keel; call it with the user's message (and a thread_id to continue a conversation).")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![self.tool()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = &self.app.manager.assistant().graph_id;
        if request.name != *name {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {:?}; this server has {name:?}", request.name),
                None,
            ));
        }
        let args = request.arguments.unwrap_or_default();
        let Some(message) = args.get("message").and_then(Value::as_str) else {
            return Err(ErrorData::invalid_params(
                "arguments.message is required: the user's message, a string",
                None,
            ));
        };
        let thread_id = match args.get("thread_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id.clone()),
            Some(other) => {
                return Err(ErrorData::invalid_params(
                    format!("arguments.thread_id must be a string, not {other}"),
                    None,
                ));
            }
        };
        if let Some(key) = args
            .keys()
            .find(|k| !matches!(k.as_str(), "message" | "thread_id"))
        {
            return Err(ErrorData::invalid_params(
                format!("unknown argument {key:?}; allowed: message, thread_id"),
                None,
            ));
        }
        // The owner the authentication layer resolved for this HTTP request.
        let owner = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Owner>())
            .cloned()
            .ok_or_else(|| ErrorData::internal_error("the request has no owner", None))?;
        let values = match crate::routes::runs::wait_for_message(
            &self.app,
            &owner,
            thread_id.clone(),
            message.to_owned(),
        )
        .await
        {
            Ok(values) => values,
            Err(e) => return Ok(error_result(e.to_string())),
        };
        if let Some(error) = values.get("__error__") {
            let message = error["message"].as_str().unwrap_or("the run failed");
            return Ok(error_result(format!("the run failed: {message}")));
        }
        if values.get("__interrupt__").is_some() {
            return Ok(error_result(format!(
                "the run paused for human review on thread {}; resume it with the Agent Server API (runs with command.resume)",
                thread_id.as_deref().unwrap_or("(a one-off thread)")
            )));
        }
        let answer = final_answer(&values).unwrap_or_default();
        let mut result = CallToolResult::success(vec![ContentBlock::text(answer.clone())]);
        result.structured_content = Some(json!({"answer": answer, "thread_id": thread_id}));
        Ok(result.into())
    }
}

/// The `/mcp` service for the router: stateless streamable HTTP with JSON answers.
/// Host and Origin are checked by the router's own guard ([`crate::origin`]), which
/// wraps it, so rmcp's loopback-only host list is off here.
pub fn service(
    app: AppState,
    max_body_bytes: usize,
) -> StreamableHttpService<KeelMcp, NeverSessionManager> {
    let mut config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    config.legacy_session_mode = false;
    config.json_response = true;
    config.max_request_body_bytes = max_body_bytes;
    StreamableHttpService::new(
        move || Ok(KeelMcp { app: app.clone() }),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}
