-- Recall, a search's cost independent of the thread's length. `recall_term_counts` holds,
-- per scope, the number of documents holding each term (in their text or their context):
-- the document frequencies BM25 needs, one index lookup per query term, where FTS5's
-- `fts5vocab` reads the term's whole posting list to count it. The store writes it in the
-- transaction that indexes the documents and deletes it with the scope's index.
CREATE TABLE IF NOT EXISTS recall_term_counts (
    flow_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    term TEXT NOT NULL,
    documents INTEGER NOT NULL,
    PRIMARY KEY (flow_id, user_id, session_id, context_id, term)
) WITHOUT ROWID;

-- The counts of what is indexed already: each term is written with its scope's tag (17
-- characters) in front.
INSERT INTO recall_term_counts (flow_id, user_id, session_id, context_id, term, documents)
SELECT s.flow_id, s.user_id, s.session_id, s.context_id, substr(v.term, 18), v.doc
FROM recall_vocab v
JOIN (SELECT DISTINCT scope_tag, flow_id, user_id, session_id, context_id
      FROM recall_documents) s ON s.scope_tag = substr(v.term, 1, 17)
WHERE length(v.term) > 17 AND v.doc > 0
ON CONFLICT (flow_id, user_id, session_id, context_id, term) DO NOTHING;
