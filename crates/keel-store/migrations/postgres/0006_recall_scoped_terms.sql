-- Recall, per-call cost independent of the thread's length. Every indexed term is written
-- with its scope's tag in front (`fts_own`, `fts_context`), so a term's GIN posting list
-- holds one scope's documents only and its document frequency is one index lookup.
-- `recall_scopes` keeps each scope's document and term counts (for BM25), updated by a
-- trigger. A document also indexes the terms of the message before it
-- (`context_terms`, weight B), so a reply is found by the words of the question it
-- answers.
--
-- The index is derived data: it is emptied here and the recall middleware indexes each
-- thread again on its next model call (`keel recall-index rebuild` does all at once).
DELETE FROM recall_documents;
DROP INDEX IF EXISTS recall_documents_tsv;
ALTER TABLE recall_documents DROP COLUMN IF EXISTS tsv;
ALTER TABLE recall_documents ADD COLUMN IF NOT EXISTS context_terms TEXT NOT NULL DEFAULT '';
ALTER TABLE recall_documents ADD COLUMN IF NOT EXISTS fts_own TEXT NOT NULL DEFAULT '';
ALTER TABLE recall_documents ADD COLUMN IF NOT EXISTS fts_context TEXT NOT NULL DEFAULT '';
ALTER TABLE recall_documents ADD COLUMN tsv tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('simple'::regconfig, fts_own), 'A')
    || setweight(to_tsvector('simple'::regconfig, fts_context), 'B')
) STORED;
CREATE INDEX IF NOT EXISTS recall_documents_tsv ON recall_documents USING GIN (tsv);
CREATE INDEX IF NOT EXISTS recall_documents_seq
    ON recall_documents (flow_id, user_id, session_id, context_id, seq);

CREATE TABLE IF NOT EXISTS recall_scopes (
    flow_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    documents BIGINT NOT NULL,
    total_terms BIGINT NOT NULL,
    PRIMARY KEY (flow_id, user_id, session_id, context_id)
);

CREATE OR REPLACE FUNCTION recall_scopes_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO recall_scopes (flow_id, user_id, session_id, context_id, documents, total_terms)
        VALUES (NEW.flow_id, NEW.user_id, NEW.session_id, NEW.context_id, 1, NEW.term_count)
        ON CONFLICT (flow_id, user_id, session_id, context_id) DO UPDATE
        SET documents = recall_scopes.documents + 1,
            total_terms = recall_scopes.total_terms + EXCLUDED.total_terms;
        RETURN NEW;
    END IF;
    UPDATE recall_scopes
    SET documents = documents - 1, total_terms = total_terms - OLD.term_count
    WHERE flow_id = OLD.flow_id AND user_id = OLD.user_id
      AND session_id = OLD.session_id AND context_id = OLD.context_id;
    RETURN OLD;
END
$$;

DROP TRIGGER IF EXISTS recall_documents_count ON recall_documents;
CREATE TRIGGER recall_documents_count AFTER INSERT OR DELETE ON recall_documents
    FOR EACH ROW EXECUTE FUNCTION recall_scopes_count();
