//! # keel-store
//!
//! Storage backends for every contract in [`keel_core::store`]: the per-thread
//! [`Checkpointer`], the per-session [`ChatHistoryStore`], the rolling-summary
//! [`SessionMemoryStore`] and the [`SummaryStore`] behind the summary cache.
//!
//! Three backends implement all four traits and pass one conformance suite (the
//! `conformance` module, behind the feature of the same name, off by default: enable it
//! in the `[dev-dependencies]` of a crate whose tests run it on another backend):
//!
//! | backend | feature | URL | use it for |
//! | --- | --- | --- | --- |
//! | [`memory::MemoryStore`] | always | `memory:` | tests; the fallback with no database |
//! | `sqlite::SqliteStore` | `sqlite` (default) | `sqlite://path.db` (created on first use), `sqlite::memory:` | one process, no server to run |
//! | `postgres::PostgresStore` | `postgres` | `postgres://user:pw@host/db` | several agent processes sharing sessions |
//!
//! [`Store::connect`] picks the backend from the URL, runs the embedded migrations and
//! returns a [`Store`] that implements every trait:
//!
//! ```
//! # #[cfg(feature = "sqlite")]
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use keel_core::message::Message;
//! use keel_core::store::{
//!     ChatHistoryStore, SaveOutcome, SessionMemoryState, SessionMemoryStore, SessionScope,
//!     StoredMessage,
//! };
//! use keel_store::Store;
//!
//! let store = Store::connect("sqlite::memory:").await?;
//! let scope = SessionScope::new("support-agent", "user-42", "session-7", "");
//!
//! store
//!     .append(&scope, &[StoredMessage {
//!         timestamp_ms: 1,
//!         message: Message::human("I'm on project PRJ-123, EU cluster").with_id("m1"),
//!     }])
//!     .await?;
//! assert_eq!(store.last_n(&scope, 10).await?.len(), 1);
//!
//! // Optimistic versioning: insert at version 0, then update only from the version read.
//! let mut state = SessionMemoryState::default();
//! state.pinned.insert("project".into(), "PRJ-123".into());
//! assert_eq!(store.save_state(&scope, &state, 0).await?, SaveOutcome::Saved { version: 1 });
//! assert_eq!(store.save_state(&scope, &state, 0).await?, SaveOutcome::Conflict);
//! let loaded = store.get_state(&scope).await?.unwrap();
//! assert_eq!((loaded.version, loaded.pinned["project"].as_str()), (1, Some("PRJ-123")));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! ## Guarantees (all backends)
//!
//! - **Scope is a security boundary.** Every chat-history and session-state query filters
//!   by the full `(flow_id, user_id, session_id, context_id)`; deleting a session's state
//!   filters by `(flow_id, user_id, session_id)`. No API reads by session id alone.
//! - **Messages are never modified.** No API updates a chat-history row or a checkpoint;
//!   they are deleted only with their session (`delete_session_history`) or thread
//!   (`delete_thread`). `append` is all-or-nothing and rejects an id already in the
//!   scope; `append_new` skips such ids instead (`ON CONFLICT DO NOTHING`), so recording
//!   a retried turn is a no-op.
//! - **One writer per checkpoint step.** [`Checkpointer::put`] appends only after the
//!   head its writer read; a concurrent writer gets `PutOutcome::Conflict` and writes
//!   nothing, in one process or across processes sharing a database.
//! - **History order** is `(timestamp_ms, message id)`, ids compared byte-wise (PostgreSQL
//!   uses `COLLATE "C"` so that its order matches SQLite's and Rust's).
//! - **Compare-and-swap** as [`SessionMemoryStore::save_state`] documents: insert when
//!   `expected_version` is 0 (a row that already exists, even one inserted a microsecond
//!   ago by another process, is a [`SaveOutcome::Conflict`], never an error), otherwise
//!   update where the stored version equals `expected_version`. The stored version is
//!   `expected_version + 1` whatever `state.version` says.
//! - **Timestamps** `created_at_ms` / `updated_at_ms` are set by the store from this
//!   process's clock: created on insert and kept by updates, updated on every save.
//! - **Text** holding a NUL character is rejected with [`StoreError::Invalid`] by every
//!   backend (PostgreSQL cannot store it; the others refuse it too so that data can move).
//!
//! ## Schema
//!
//! Migrations are embedded in the binary and run on connect. They are expand-only: they
//! create tables and indexes and never drop or rewrite anything, so an older binary keeps
//! working against a newer schema. Running them again is a no-op (sqlx records applied
//! versions in `_sqlx_migrations`; PostgreSQL serialises concurrent migrators with an
//! advisory lock).
//!
//! - Checkpoints (migration 0002), stored as deltas so a step costs what it changed:
//!   `checkpoint_heads (thread_id)`: `head_seq` (compare-and-swap target),
//!   `next_position`, `state_values` (JSON, the head's values);
//!   `checkpoint_steps (thread_id, seq)`: `run_id`, `node`, `values_set` (JSON, what the
//!   step set), `created_at_ms`; `checkpoint_entries (thread_id, position, added_seq)`:
//!   one version of a message, in the state of every seq in `[added_seq, removed_seq)`,
//!   with `message_id` and `body` (JSON), indexed on `(thread_id, message_id)` for live
//!   versions. A replacement under the same id closes the old version and opens one at
//!   the same position, so every step's state stays readable. These columns are `TEXT`
//!   on both dialects (never queried inside), so both run the same statements.
//! - Checkpoint branches (migration 0003, time travel): `checkpoint_steps` gains
//!   `parent_seq`, `branch` (the seq of the branch's first step, 0 for the first branch)
//!   and `depth`; `checkpoint_entries` and `checkpoint_heads` gain `branch`. A fork's
//!   first step copies its fork point's entries into the new branch with one
//!   `INSERT ... SELECT`, then every step of the branch costs what it changed and touches
//!   that branch only; the head row names the current branch, the only one written again.
//! - `checkpoint_messages` and `checkpoints` (migration 0001): the earlier layout, a
//!   content-addressed message per row and a list of hashes per step. Migration 0002
//!   carries each thread's latest checkpoint over; older steps stay readable there.
//! - `chat_messages`: primary key `(flow_id, user_id, session_id, context_id,
//!   message_id)`, plus `timestamp_ms`, `role` and `body` (the message's JSON); indexed on
//!   `(flow_id, user_id, session_id, context_id, timestamp_ms, message_id)` for `last_n`,
//!   `after` and `count_after`.
//! - `session_memory_state`: primary key `(flow_id, user_id, session_id, context_id)`;
//!   `summary`, `pinned` (JSON object), `covered_until_message_id`,
//!   `covered_until_timestamp` (both null before the first fold), `absorbed_count`,
//!   `summary_model`, `version`, `created_at_ms`, `updated_at_ms`.
//! - `summary_cache (key) -> value` (JSON), `updated_at_ms`.
//!
//! Other JSON columns are `TEXT` on SQLite and `JSON` on PostgreSQL (not `JSONB`: `JSON` keeps
//! the text as written and accepts every string serde_json can produce, `\u0000` included).
//!
//! ## Operations
//!
//! - **SQLite** is the default: a file in WAL mode, `synchronous = NORMAL`, a 5 s busy
//!   timeout, a small pool. Readers never block the writer; writers queue. Use it for one
//!   agent process (or a few on one host that write rarely). `sqlite::memory:` is a
//!   private database that lives as long as the [`Store`] (one connection).
//! - **PostgreSQL** when several processes or hosts share sessions: compare-and-swap is
//!   decided by row locks in the server, so concurrent folds on one session resolve to
//!   one winner per version across machines, and a summary cached by one process is
//!   reused by the others. Give each service its own database or schema (set
//!   `search_path` with `postgres::PostgresStore::connect_with`).
//! - **Memory** when there is no database: nothing survives a restart.
//!
//! Deleting a session: [`ChatHistoryStore::delete_session_history`],
//! [`SessionMemoryStore::delete_session_states`], [`Checkpointer::delete_thread`] and
//! [`SummaryStore::delete_summaries`] (by key prefix) remove what a session stored; see
//! `docs/operations.md`, "Deleting a session".

#[cfg(feature = "conformance")]
pub mod conformance;
pub mod error;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

mod check;
mod recall;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
mod store;

pub use error::ConnectError;
pub use keel_core::recall::{RecallDocument, RecallHit, RecallIndex};
pub use keel_core::store::{
    ChatHistoryStore, Checkpoint, CheckpointWrite, Checkpointer, Cursor, PutOutcome, SaveOutcome,
    SessionMemoryState, SessionMemoryStore, SessionScope, StoreError, StoredMessage, SummaryStore,
};
pub use store::{Backend, Storage, Store};

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use sql::multi_row;
