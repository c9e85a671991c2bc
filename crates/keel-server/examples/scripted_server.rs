//! The server the SDK, browser and load tests drive: examples/keel.yaml's middleware
//! stack around keel-testkit's `ScriptedModel` (a test double, never a default of
//! `keel serve`), which answers from the request so tests know what to expect, and
//! streams word by word at a set pace so cancelling and reconnecting happen mid-run.
//!
//! ```sh
//! cargo run -p keel-server --example scripted_server -- --port 0 [--pace-ms 5] \
//!     [--api-keys alice-key-1=alice,bob-key-22=bob] [--database sqlite://x.db]
//! ```
//!
//! What the model answers, by the last user message:
//! - a summary request (internal call): `Summary of N messages.`
//! - `echo ...`: a call of the `echo` tool, then `The tool said: <result>`;
//! - `slow ...`: 60 words, so the run lasts 60 × pace;
//! - anything else: `You said: <the message's first 12 words>` (`N messages`).

#[path = "support/scripted.rs"]
mod scripted;

use std::sync::Arc;
use std::time::Duration;

use keel_server::ApiKeys;
use keel_server::Leases;
use keel_server::Registry;
use keel_server::config::StackConfig;
use keel_server::{ServerOptions, router_with};
use keel_store::Store;

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let port = flag(&args, "--port").unwrap_or_else(|| "0".into());
    let pace = Duration::from_millis(flag(&args, "--pace-ms").map_or(Ok(5), |p| p.parse())?);
    let keys = ApiKeys::parse(&flag(&args, "--api-keys").unwrap_or_default())?;
    let database = flag(&args, "--database").unwrap_or_else(|| "memory:".into());
    let config = flag(&args, "--config")
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/keel.yaml").into());

    let stack = StackConfig::from_file(&config)?;
    let model = scripted::model(pace);
    let store = Store::connect(&database).await?;
    let registry = Registry::for_store(&store).await?;
    let items = keel_server::store_api::ItemStore::for_store(&store).await?;
    let leases = match &store {
        #[cfg(feature = "postgres")]
        Store::Postgres(_) => Leases::postgres(&database).await?,
        _ => Leases::Local,
    };
    let agent = stack.build_with_model(Arc::new(store), Arc::new(model), false)?;
    let options = ServerOptions {
        graph_id: stack.name.clone(),
        api_keys: keys,
        registry: Some(Arc::new(registry)),
        items: Some(Arc::new(items)),
        leases,
        ..ServerOptions::default()
    };
    let listener = keel_server::serve::bind(&format!("127.0.0.1:{port}")).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router_with(agent, options)).await?;
    Ok(())
}
