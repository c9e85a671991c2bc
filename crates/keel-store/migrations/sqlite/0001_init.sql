-- Keel storage schema, SQLite. Expand-only: this file and its successors create, never drop.
-- JSON columns are TEXT holding serde_json output.

-- Each distinct message of a thread, once, keyed by a hash of its JSON.
CREATE TABLE IF NOT EXISTS checkpoint_messages (
    thread_id    TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    body         TEXT NOT NULL,
    PRIMARY KEY (thread_id, content_hash)
) WITHOUT ROWID;

-- Append-only checkpoints; message_hashes is a JSON array of checkpoint_messages keys.
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id      TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    run_id         TEXT NOT NULL,
    node           TEXT NOT NULL,
    message_hashes TEXT NOT NULL,
    state_values   TEXT NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (thread_id, seq)
) WITHOUT ROWID;

-- Chat history per session scope; read in (timestamp_ms, message_id) order.
CREATE TABLE IF NOT EXISTS chat_messages (
    flow_id      TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    context_id   TEXT NOT NULL,
    message_id   TEXT NOT NULL,
    timestamp_ms INTEGER NOT NULL,
    role         TEXT NOT NULL,
    body         TEXT NOT NULL,
    PRIMARY KEY (flow_id, user_id, session_id, context_id, message_id)
);
CREATE INDEX IF NOT EXISTS chat_messages_by_position
    ON chat_messages (flow_id, user_id, session_id, context_id, timestamp_ms, message_id);

-- Rolling session summary, one row per scope, versioned for compare-and-swap.
CREATE TABLE IF NOT EXISTS session_memory_state (
    flow_id                  TEXT NOT NULL,
    user_id                  TEXT NOT NULL,
    session_id               TEXT NOT NULL,
    context_id               TEXT NOT NULL,
    summary                  TEXT NOT NULL,
    pinned                   TEXT NOT NULL,
    covered_until_message_id TEXT,
    covered_until_timestamp  INTEGER,
    absorbed_count           INTEGER NOT NULL,
    summary_model            TEXT,
    version                  INTEGER NOT NULL,
    created_at_ms            INTEGER NOT NULL,
    updated_at_ms            INTEGER NOT NULL,
    PRIMARY KEY (flow_id, user_id, session_id, context_id)
) WITHOUT ROWID;

-- Second level of the summary cache.
CREATE TABLE IF NOT EXISTS summary_cache (
    key           TEXT NOT NULL PRIMARY KEY,
    value         TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
