-- Leases on summary cache keys: the process that holds one writes the key's summary
-- ahead of time (speculative summaries), so sibling processes serving the same thread
-- do not write it too. A lease expires by time; an expired one is taken over.
CREATE TABLE IF NOT EXISTS summary_leases (
    key           TEXT NOT NULL PRIMARY KEY,
    holder        TEXT NOT NULL,
    expires_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
