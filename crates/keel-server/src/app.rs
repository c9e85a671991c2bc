//! The router: routes, in the order a request meets the layers (outermost first):
//! the host and origin check ([`crate::origin`]), CORS (answers preflights), the body cap (read by `JsonBody`),
//! authentication, then the handlers (and `/mcp`, the MCP endpoint: [`crate::mcp`]).

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderName, StatusCode, header};
use axum::routing::{get, post};
use keel_agent::Agent;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

use crate::auth::{ApiKeys, authenticate};
use crate::extract::BodyLimit;
use crate::lease::Leases;
use crate::origin::{OriginGuard, OriginPolicy, guard};
use crate::registry::Registry;
use crate::routes::{assistants, page, protocol, runs, store, system, thread_stream, threads};
use crate::runs::{AssistantInfo, RunLimits, RunManager};
pub use crate::state::AppState;
use crate::store_api::ItemStore;

/// LangGraph's namespace for assistant ids derived from a graph id (uuid5 over the
/// graph id), so `agent` gets the same assistant id as on LangGraph's server.
const ASSISTANT_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x6ba7b821_9dad_11d1_80b4_00c04fd430c8);

/// The default of [`ServerOptions::max_input_messages`]. A conversation of 10,000
/// messages is already far past any model's context window; the cap keeps one request
/// from holding the thread (and the database's write lock) for long.
pub const DEFAULT_MAX_INPUT_MESSAGES: usize = 10_000;

/// How the server behaves; [`ServerOptions::default`] is an open server for `agent`.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The graph id the assistant is listed under.
    pub graph_id: String,
    /// The assistant's description.
    pub description: Option<String>,
    /// API keys; empty for no authentication.
    pub api_keys: ApiKeys,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// The most messages one run's `input.messages` may carry (more is a 422).
    pub max_input_messages: usize,
    /// Limits on runs.
    pub runs: RunLimits,
    /// Serve the chat page at `/`.
    pub page: bool,
    /// Where thread and run records live; `None` keeps them in memory
    /// ([`Registry::for_store`] puts them in the agent's database).
    pub registry: Option<Arc<Registry>>,
    /// How runs of one thread exclude each other across processes.
    pub leases: Leases,
    /// Origins and host names served besides loopback ones (see [`crate::origin`]).
    pub origins: OriginPolicy,
    /// Where Store API items (long-term memory) live; `None` keeps them in memory
    /// ([`ItemStore::for_store`] puts them in the agent's database).
    pub items: Option<Arc<ItemStore>>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            graph_id: crate::config::DEFAULT_GRAPH_ID.into(),
            description: None,
            api_keys: ApiKeys::default(),
            max_body_bytes: 2 * 1024 * 1024,
            max_input_messages: DEFAULT_MAX_INPUT_MESSAGES,
            runs: RunLimits::default(),
            page: true,
            registry: None,
            leases: Leases::Local,
            origins: OriginPolicy::default(),
            items: None,
        }
    }
}

/// The assistant id the Agent Server derives from a graph id.
pub fn assistant_id(graph_id: &str) -> String {
    uuid::Uuid::new_v5(&ASSISTANT_NAMESPACE, graph_id.as_bytes()).to_string()
}

/// The Agent Server API for `agent`, with default options (no auth, the chat page).
pub fn router(agent: Agent) -> Router {
    router_with(agent, ServerOptions::default())
}

/// The Agent Server API for `agent`.
pub fn router_with(agent: Agent, options: ServerOptions) -> Router {
    router_parts(agent, options).0
}

/// The Agent Server API for `agent`, and its run manager (to stop the runs at shutdown).
pub fn router_parts(agent: Agent, options: ServerOptions) -> (Router, Arc<RunManager>) {
    let (model_name, provider) = model_of(&agent);
    let assistant = AssistantInfo {
        assistant_id: assistant_id(&options.graph_id),
        graph_id: options.graph_id.clone(),
        description: options.description.clone(),
        model_name,
        provider,
    };
    let registry = options
        .registry
        .clone()
        .unwrap_or_else(|| Arc::new(Registry::memory()));
    let manager = Arc::new(RunManager::new(
        agent,
        registry.clone(),
        assistant,
        options.runs.clone(),
        options.leases.clone(),
    ));
    let items = options
        .items
        .clone()
        .unwrap_or_else(|| Arc::new(ItemStore::memory()));
    let state = AppState {
        registry,
        manager,
        max_input_messages: options.max_input_messages,
        items,
    };
    let runs_handle = state.manager.clone();
    let mcp = crate::mcp::service(state.clone(), options.max_body_bytes);
    let mut api = thread_routes()
        .merge(run_routes())
        .route_service(crate::mcp::MCP_PATH, mcp);

    if options.page {
        api = api
            .route("/", get(page::index))
            .route("/static/app.js", get(page::script))
            .route("/static/app.css", get(page::style));
    }
    (layered(api, state, &options), runs_handle)
}

/// The assistants' and threads' routes (state, history, streams, commands).
fn thread_routes() -> Router<AppState> {
    Router::new()
        .route("/ok", get(system::ok))
        .route("/info", get(system::info))
        .route("/assistants/search", post(assistants::search))
        .route("/assistants/count", post(assistants::count))
        .route("/assistants/{assistant_id}", get(assistants::get_one))
        .route("/assistants/{assistant_id}/graph", get(assistants::graph))
        .route(
            "/assistants/{assistant_id}/schemas",
            get(assistants::schemas),
        )
        .route("/threads", post(threads::create))
        .route("/threads/search", post(threads::search))
        .route("/threads/count", post(threads::count))
        .route("/threads/prune", post(threads::prune))
        .route(
            "/threads/{thread_id}",
            get(threads::get_one)
                .patch(threads::patch)
                .delete(threads::delete),
        )
        .route(
            "/threads/{thread_id}/state",
            get(threads::state).post(threads::update_state),
        )
        .route("/threads/{thread_id}/copy", post(threads::copy))
        .route("/threads/{thread_id}/compact", post(threads::compact))
        .route("/threads/{thread_id}/stream", get(thread_stream::join))
        .route(
            "/threads/{thread_id}/state/{checkpoint_id}",
            get(threads::state_at),
        )
        .route(
            "/threads/{thread_id}/history",
            get(threads::history_get).post(threads::history_post),
        )
}

/// The runs' routes (on a thread and stateless) and the Store API's.
fn run_routes() -> Router<AppState> {
    Router::new()
        .route(
            "/threads/{thread_id}/runs",
            get(runs::list).post(runs::create),
        )
        .route(
            "/threads/{thread_id}/runs/stream",
            post(runs::create_stream),
        )
        .route("/threads/{thread_id}/runs/wait", post(runs::create_wait))
        .route("/threads/{thread_id}/commands", post(protocol::command))
        .route(
            "/threads/{thread_id}/stream/events",
            post(protocol::stream_events),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}",
            get(runs::get_one).delete(runs::delete),
        )
        .route(
            "/threads/{thread_id}/runs/{run_id}/cancel",
            post(runs::cancel),
        )
        .route("/threads/{thread_id}/runs/{run_id}/join", get(runs::join))
        .route(
            "/threads/{thread_id}/runs/{run_id}/stream",
            get(runs::join_stream),
        )
        .route("/runs", post(runs::stateless_create))
        .route("/runs/stream", post(runs::stateless_stream))
        .route("/runs/wait", post(runs::stateless_wait))
        .route(
            "/store/items",
            get(store::get).put(store::put).delete(store::delete),
        )
        .route("/store/items/search", post(store::search))
        .route("/store/namespaces", post(store::namespaces))
}

/// The routes with their fallbacks, state and layers: authentication, the body limit,
/// CORS and the origin guard, outermost last.
fn layered(api: Router<AppState>, state: AppState, options: &ServerOptions) -> Router {
    let limit = options.max_body_bytes;
    let origins = OriginGuard::new(options.origins.clone(), options.api_keys.enabled());
    let cors_origins = origins.clone();
    // Unknown paths and methods answer as Starlette does for the Agent Server.
    api.fallback(|| async {
        (
            StatusCode::NOT_FOUND,
            axum::Json(serde_json::json!({"detail": "Not Found"})),
        )
    })
    .method_not_allowed_fallback(|| async {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            axum::Json(serde_json::json!({"detail": "Method Not Allowed"})),
        )
    })
    .with_state(state)
    .layer(axum::middleware::from_fn_with_state(
        options.api_keys.clone(),
        authenticate,
    ))
    .layer(axum::Extension(BodyLimit(limit)))
    .layer(
        CorsLayer::new()
            .allow_origin(AllowOrigin::predicate(move |origin, _| {
                origin.to_str().is_ok_and(|o| cors_origins.allows_origin(o))
            }))
            .allow_methods(Any)
            .allow_headers(Any)
            .expose_headers([
                header::CONTENT_LOCATION,
                header::LOCATION,
                HeaderName::from_static("x-pagination-next"),
            ]),
    )
    .layer(axum::middleware::from_fn_with_state(origins, guard))
}

/// The model's name and provider.
fn model_of(agent: &Agent) -> (String, String) {
    let profile = agent.model_profile();
    (profile.name.clone(), profile.provider.clone())
}
