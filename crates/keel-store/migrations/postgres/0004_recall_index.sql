-- Recall: a full-text index of thread messages, one row per message, scoped like chat
-- history. `terms` holds keel's own terms (see keel_core::recall::terms: lower-cased
-- words, CJK bigrams, non-ASCII terms hex-encoded), so the `simple` configuration turns
-- them into exactly these lexemes whatever the server's locale.
CREATE TABLE IF NOT EXISTS recall_documents (
    flow_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    message_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL,
    document TEXT NOT NULL,
    terms TEXT NOT NULL,
    term_count BIGINT NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, terms)) STORED,
    PRIMARY KEY (flow_id, user_id, session_id, context_id, message_id)
);

CREATE INDEX IF NOT EXISTS recall_documents_tsv ON recall_documents USING GIN (tsv);
