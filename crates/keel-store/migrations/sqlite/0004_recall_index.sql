-- Recall: a full-text index of thread messages, one row per message, scoped like chat
-- history. `terms` holds keel's own terms (see keel_core::recall::terms: lower-cased
-- words, CJK bigrams, non-ASCII terms hex-encoded), so FTS5's unicode61 tokenizer splits
-- them exactly as PostgreSQL's `simple` configuration does. `scope_tag` is a term naming
-- the scope, so the FTS5 query itself is restricted to one scope; the join on the scope
-- columns decides.
CREATE TABLE IF NOT EXISTS recall_documents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    flow_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    document TEXT NOT NULL,
    scope_tag TEXT NOT NULL,
    terms TEXT NOT NULL,
    term_count INTEGER NOT NULL,
    UNIQUE (flow_id, user_id, session_id, context_id, message_id)
);

CREATE VIRTUAL TABLE IF NOT EXISTS recall_fts USING fts5(
    scope_tag,
    terms,
    content = 'recall_documents',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 0'
);

CREATE TRIGGER IF NOT EXISTS recall_documents_insert AFTER INSERT ON recall_documents BEGIN
    INSERT INTO recall_fts (rowid, scope_tag, terms) VALUES (new.id, new.scope_tag, new.terms);
END;

CREATE TRIGGER IF NOT EXISTS recall_documents_delete AFTER DELETE ON recall_documents BEGIN
    INSERT INTO recall_fts (recall_fts, rowid, scope_tag, terms)
    VALUES ('delete', old.id, old.scope_tag, old.terms);
END;
