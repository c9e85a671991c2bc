-- Keel storage schema, PostgreSQL. Expand-only: this file and its successors create, never drop.
-- JSON columns are JSON (not JSONB): stored as written, and `\u0000` in strings is accepted.
-- Ids that order rows use COLLATE "C" so that ties sort byte-wise, as on SQLite and in Rust.

-- Each distinct message of a thread, once, keyed by a hash of its JSON.
CREATE TABLE IF NOT EXISTS checkpoint_messages (
    thread_id    TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    body         JSON NOT NULL,
    PRIMARY KEY (thread_id, content_hash)
);

-- Append-only checkpoints; message_hashes is a JSON array of checkpoint_messages keys.
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id      TEXT NOT NULL,
    seq            BIGINT NOT NULL,
    run_id         TEXT NOT NULL,
    node           TEXT NOT NULL,
    message_hashes JSON NOT NULL,
    state_values   JSON NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (thread_id, seq)
);

-- Chat history per session scope; read in (timestamp_ms, message_id) order.
CREATE TABLE IF NOT EXISTS chat_messages (
    flow_id      TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    context_id   TEXT NOT NULL,
    message_id   TEXT COLLATE "C" NOT NULL,
    timestamp_ms BIGINT NOT NULL,
    role         TEXT NOT NULL,
    body         JSON NOT NULL,
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
    pinned                   JSON NOT NULL,
    covered_until_message_id TEXT,
    covered_until_timestamp  BIGINT,
    absorbed_count           BIGINT NOT NULL,
    summary_model            TEXT,
    version                  BIGINT NOT NULL,
    created_at_ms            BIGINT NOT NULL,
    updated_at_ms            BIGINT NOT NULL,
    PRIMARY KEY (flow_id, user_id, session_id, context_id)
);

-- Second level of the summary cache.
CREATE TABLE IF NOT EXISTS summary_cache (
    key           TEXT NOT NULL PRIMARY KEY,
    value         JSON NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
