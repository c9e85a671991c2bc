-- Recall, per-call cost independent of the thread's length. Every indexed term is written
-- with its scope's tag in front (`fts_own`, `fts_context`), so a term's posting list in
-- FTS5 holds one scope's documents only, and `recall_vocab` (fts5vocab) gives a term's
-- document frequency in one lookup. `recall_scopes` keeps each scope's document and term
-- counts (for BM25), updated by the triggers. A document also indexes the terms of the
-- message before it (`context_terms`), so a reply is found by the words of the question
-- it answers.
--
-- The index is derived data: it is emptied here and the recall middleware indexes each
-- thread again on its next model call (`keel recall-index rebuild` does all at once).
DROP TRIGGER IF EXISTS recall_documents_insert;
DROP TRIGGER IF EXISTS recall_documents_delete;
DROP TABLE IF EXISTS recall_fts;
DELETE FROM recall_documents;

ALTER TABLE recall_documents ADD COLUMN context_terms TEXT NOT NULL DEFAULT '';
ALTER TABLE recall_documents ADD COLUMN fts_own TEXT NOT NULL DEFAULT '';
ALTER TABLE recall_documents ADD COLUMN fts_context TEXT NOT NULL DEFAULT '';

CREATE INDEX IF NOT EXISTS recall_documents_seq
    ON recall_documents (flow_id, user_id, session_id, context_id, seq);

CREATE TABLE IF NOT EXISTS recall_scopes (
    flow_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    documents INTEGER NOT NULL,
    total_terms INTEGER NOT NULL,
    PRIMARY KEY (flow_id, user_id, session_id, context_id)
) WITHOUT ROWID;

CREATE VIRTUAL TABLE IF NOT EXISTS recall_terms USING fts5(
    fts_own,
    fts_context,
    content = 'recall_documents',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 0'
);

CREATE VIRTUAL TABLE IF NOT EXISTS recall_vocab USING fts5vocab(recall_terms, 'row');

CREATE TRIGGER IF NOT EXISTS recall_documents_insert AFTER INSERT ON recall_documents BEGIN
    INSERT INTO recall_terms (rowid, fts_own, fts_context)
    VALUES (new.id, new.fts_own, new.fts_context);
    INSERT INTO recall_scopes (flow_id, user_id, session_id, context_id, documents, total_terms)
    VALUES (new.flow_id, new.user_id, new.session_id, new.context_id, 1, new.term_count)
    ON CONFLICT (flow_id, user_id, session_id, context_id) DO UPDATE
    SET documents = documents + 1, total_terms = total_terms + excluded.total_terms;
END;

CREATE TRIGGER IF NOT EXISTS recall_documents_delete AFTER DELETE ON recall_documents BEGIN
    INSERT INTO recall_terms (recall_terms, rowid, fts_own, fts_context)
    VALUES ('delete', old.id, old.fts_own, old.fts_context);
    UPDATE recall_scopes
    SET documents = documents - 1, total_terms = total_terms - old.term_count
    WHERE flow_id = old.flow_id AND user_id = old.user_id
      AND session_id = old.session_id AND context_id = old.context_id;
END;
