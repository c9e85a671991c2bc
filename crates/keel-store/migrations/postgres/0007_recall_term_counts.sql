-- Recall, a search's cost independent of the thread's length. `recall_term_counts` holds,
-- per scope, the number of documents holding each term (in their text or their context):
-- the document frequencies BM25 needs, one index lookup per query term, where counting
-- the GIN matches reads the term's whole posting list. The store writes it in the
-- transaction that indexes the documents and deletes it with the scope's index.
-- `id` numbers the documents in the order they were indexed: a search's candidates that
-- hold the same weight of the query go newest first, as SQLite's row ids and the memory
-- index order them.
CREATE TABLE IF NOT EXISTS recall_term_counts (
    flow_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    term TEXT NOT NULL,
    documents BIGINT NOT NULL,
    PRIMARY KEY (flow_id, user_id, session_id, context_id, term)
);

-- The counts of what is indexed already: each lexeme is a term with its scope's tag (17
-- characters) in front.
INSERT INTO recall_term_counts (flow_id, user_id, session_id, context_id, term, documents)
SELECT flow_id, user_id, session_id, context_id, substr(t, 18), count(*)
FROM recall_documents, unnest(tsvector_to_array(tsv)) AS t
WHERE length(t) > 17
GROUP BY flow_id, user_id, session_id, context_id, substr(t, 18)
ON CONFLICT (flow_id, user_id, session_id, context_id, term) DO NOTHING;

ALTER TABLE recall_documents ADD COLUMN IF NOT EXISTS id BIGSERIAL;
CREATE UNIQUE INDEX IF NOT EXISTS recall_documents_id ON recall_documents (id);
