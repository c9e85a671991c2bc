//! `keel recall-index rebuild --db URL`: builds the recall index of an existing database
//! from scratch.

use std::process::ExitCode;

use keel_core::recall::{RecallIndex, documents};
use keel_core::store::{ChatHistoryStore, Checkpointer, Cursor};
use keel_store::Store;

use super::CommandResult;

/// `keel recall-index`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Manage the recall index (full-text search over stored messages)",
    long_about = "Manage the recall index: the full-text index the `recall` middleware searches \
                  for the exact evidence that summaries and session memory compacted away. The \
                  middleware indexes new messages as they reach the model; `rebuild` indexes an \
                  existing database from scratch (after an upgrade, or a restore)."
)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Empty the recall index, then index every stored chat history (session memory's
    /// record, under its own scope) and every thread's latest checkpoint (under
    /// `(--flow-id, --user-id, thread id)`, the recall middleware's scope).
    Rebuild {
        /// The database: `sqlite://keel.db`, `postgres://user:pw@host/db`.
        #[arg(long, value_name = "URL")]
        db: String,
        /// The flow id the recall middleware is configured with (its `flow_id`).
        #[arg(long, value_name = "ID", default_value = "keel")]
        flow_id: String,
        /// The user id the recall middleware is configured with (its `user_id`).
        #[arg(long, value_name = "ID", default_value = "")]
        user_id: String,
    },
}

/// Messages read from a chat history at once.
const PAGE: usize = 500;

async fn rebuild(db: &str, flow_id: &str, user_id: &str) -> CommandResult {
    let store = Store::connect(db).await?;
    let cleared = store.clear_recall_index().await?;
    let mut indexed = 0u64;
    let scopes = store.history_scopes().await?;
    for scope in &scopes {
        let mut messages = Vec::new();
        let mut cursor: Option<Cursor> = None;
        loop {
            let page = store.after(scope, cursor.as_ref(), PAGE).await?;
            cursor = page.last().map(|m| m.cursor());
            let full = page.len() == PAGE;
            messages.extend(page.into_iter().map(|m| m.message));
            if !full {
                break;
            }
        }
        let docs = documents(&messages, 0, |m| {
            matches!(m.name(), Some("summary") | Some("recall"))
        });
        indexed += store.index_documents(scope, &docs).await?;
    }
    let threads = store.checkpoint_threads().await?;
    for thread in &threads {
        let Some(checkpoint) = store.latest(thread).await? else {
            continue;
        };
        let scope = keel_core::store::SessionScope::new(flow_id, user_id, thread.as_str(), "");
        let docs = documents(&checkpoint.messages, 0, |m| {
            matches!(m.name(), Some("summary") | Some("recall"))
        });
        indexed += store.index_documents(&scope, &docs).await?;
    }
    println!(
        "recall index rebuilt: {indexed} messages indexed from {} chat histories and {} threads ({cleared} old entries removed)",
        scopes.len(),
        threads.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs the command.
pub fn run(args: Args) -> CommandResult {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match args.action {
        Action::Rebuild {
            db,
            flow_id,
            user_id,
        } => runtime.block_on(rebuild(&db, &flow_id, &user_id)),
    }
}
