-- Checkpoints as deltas (issue 14). Expand-only: the tables of 0001 stay as they are.
-- A step costs what it changed: one step row, one entry row per new or replaced
-- message, and a compare-and-swap on the thread's head row. TEXT columns hold
-- serde_json output; the checkpointer never queries inside them, so both dialects run
-- the same statements.

-- The head of each thread: compare-and-swap on head_seq keeps one writer per step.
CREATE TABLE IF NOT EXISTS checkpoint_heads (
    thread_id     TEXT NOT NULL PRIMARY KEY,
    head_seq      INTEGER NOT NULL,
    next_position INTEGER NOT NULL,
    state_values  TEXT NOT NULL
) WITHOUT ROWID;

-- One row per step: who wrote it and the values it set (a JSON object).
CREATE TABLE IF NOT EXISTS checkpoint_steps (
    thread_id     TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    run_id        TEXT NOT NULL,
    node          TEXT NOT NULL,
    values_set    TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (thread_id, seq)
) WITHOUT ROWID;

-- One row per version of a message: in the state of every seq in
-- [added_seq, removed_seq), at `position` (a replacement keeps its position).
CREATE TABLE IF NOT EXISTS checkpoint_entries (
    thread_id   TEXT NOT NULL,
    position    INTEGER NOT NULL,
    added_seq   INTEGER NOT NULL,
    removed_seq INTEGER,
    message_id  TEXT NOT NULL,
    body        TEXT NOT NULL,
    PRIMARY KEY (thread_id, position, added_seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS checkpoint_entries_live
    ON checkpoint_entries (thread_id, message_id) WHERE removed_seq IS NULL;

-- Threads written before this migration continue from their latest checkpoint (the
-- steps before it stay readable in the tables of 0001).
INSERT INTO checkpoint_heads (thread_id, head_seq, next_position, state_values)
SELECT c.thread_id, c.seq, json_array_length(c.message_hashes), c.state_values
FROM checkpoints c
WHERE c.seq = (SELECT MAX(seq) FROM checkpoints WHERE thread_id = c.thread_id)
ON CONFLICT DO NOTHING;
INSERT INTO checkpoint_steps (thread_id, seq, run_id, node, values_set, created_at_ms)
SELECT c.thread_id, c.seq, c.run_id, c.node, c.state_values, c.created_at_ms
FROM checkpoints c
WHERE c.seq = (SELECT MAX(seq) FROM checkpoints WHERE thread_id = c.thread_id)
ON CONFLICT DO NOTHING;
INSERT INTO checkpoint_entries (thread_id, position, added_seq, removed_seq, message_id, body)
SELECT c.thread_id, CAST(j.key AS INTEGER), c.seq, NULL, json_extract(m.body, '$.id'), m.body
FROM checkpoints c
JOIN json_each(c.message_hashes) j
JOIN checkpoint_messages m ON m.thread_id = c.thread_id AND m.content_hash = j.value
WHERE c.seq = (SELECT MAX(seq) FROM checkpoints WHERE thread_id = c.thread_id)
ON CONFLICT DO NOTHING;
