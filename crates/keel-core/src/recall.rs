//! Recall of the exact evidence: the contract of a full-text index over a thread's
//! messages, the tokenizer every backend shares, the BM25 score and an in-memory index.
//!
//! A [`RecallIndex`] holds one [`RecallDocument`] per indexed message, scoped by
//! [`SessionScope`] (owner and thread). The SQL stores match with the database's own
//! full-text search (SQLite FTS5, PostgreSQL `tsvector` with a GIN index) and this
//! module scores the candidates, so every backend ranks the same documents the same way.
//!
//! ## Terms
//!
//! [`terms`] turns text into the index's terms, for documents and queries alike:
//! lower-cased runs of letters and digits, a light suffix strip on ASCII words (`runs`,
//! `running` and `run` meet), common English, German and Spanish function words dropped,
//! and every run of CJK characters cut into overlapping two-character terms (a lone
//! character stays a term), since CJK text has no spaces to split on. Any term that is
//! not ASCII is then written as `x` and the hex of its UTF-8 bytes, so the database's
//! tokenizer sees plain `[a-z0-9]` words on both dialects: FTS5's `unicode61` and
//! PostgreSQL's `simple` configuration (whose parser depends on the server's locale for
//! non-ASCII letters) split and fold them identically.
//!
//! ```
//! use keel_core::recall::terms;
//!
//! assert_eq!(terms("The failing job RUNS on node ip-10-4"), ["fail", "job", "run", "node", "ip", "10", "4"]);
//! // 负责人 becomes 负责 and 责人, hex-encoded.
//! assert_eq!(terms("负责人").len(), 2);
//! assert_eq!(terms("负责人是谁"), terms("负责人是谁"));
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::message::{Message, MessageBody};
use crate::store::{SessionScope, StoreError};

/// The longest term kept, in bytes (longer runs are blobs: keys, base64).
pub const MAX_TERM_BYTES: usize = 64;

/// BM25's term-frequency saturation.
const K1: f64 = 1.2;
/// BM25's length normalisation.
const B: f64 = 0.75;

/// Weight of a context term (a term of the message before) against the document's own.
pub const CONTEXT_WEIGHT: f64 = 0.5;

/// The share of a term's weight a match in the context alone adds to coverage.
pub const CONTEXT_COVERAGE: f64 = 0.15;

/// Characters of the message before a document kept as its context.
pub const CONTEXT_CHARS: usize = 300;

/// Postings a search reads at most to find its candidates: query terms are taken rarest
/// first until their document frequencies add up to this (the rarest is always taken).
/// A common word in a long thread would otherwise make every call read most of it; its
/// weight (inverse document frequency) is small, so the candidates it would add rarely
/// win. Scoring still counts every query term.
pub const MAX_POSTINGS: u64 = 4096;

/// Candidates a search scores at most. Every backend picks the same ones: the documents
/// holding the most weight ([`reach_weight`]) of the terms [`candidate_terms`] reads,
/// ties going to the document indexed last.
pub const MAX_CANDIDATES: usize = 256;

/// One indexed message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecallDocument {
    /// The message id (unique within the scope).
    pub message_id: String,
    /// The message's position in the thread (0-based), its reference in excerpts.
    pub seq: u64,
    /// `user`, `assistant` or `tool`.
    pub role: String,
    /// Who wrote it: the message's name, or the tool's name for a tool result.
    pub who: Option<String>,
    /// The text to quote (for a tool result, with the call that produced it).
    pub text: String,
    /// True for tool output: data, never instructions.
    pub untrusted: bool,
    /// When it was said, as the message's `timestamp` metadata gives it (any text:
    /// shown as written, never parsed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The text of the message before it (cut to [`CONTEXT_CHARS`] characters): what it
    /// answers. Its terms are indexed at [`CONTEXT_WEIGHT`], so an answer is found by the
    /// words of the question it answers ("which port?" / "8443").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context: String,
}

impl RecallDocument {
    /// A document without time or context.
    pub fn new(
        message_id: impl Into<String>,
        seq: u64,
        role: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        RecallDocument {
            message_id: message_id.into(),
            seq,
            role: role.into(),
            who: None,
            text: text.into(),
            untrusted: false,
            time: None,
            context: String::new(),
        }
    }

    /// The index terms of the document's own text and of its context.
    pub fn terms(&self) -> DocumentTerms {
        DocumentTerms {
            own: terms(&self.text),
            context: terms(&self.context),
        }
    }
}

/// The terms of one document: its own, and those of the message before it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DocumentTerms {
    /// Terms of the document's text.
    pub own: Vec<String>,
    /// Terms of its context (the message before it).
    pub context: Vec<String>,
}

impl DocumentTerms {
    /// The document's length for BM25: its own terms, and its context's at
    /// [`CONTEXT_WEIGHT`] (rounded up).
    pub fn weighted_len(&self) -> u64 {
        self.own.len() as u64 + (self.context.len() as u64).div_ceil(2)
    }
}

/// A document found by [`RecallIndex::search`].
#[derive(Clone, Debug, PartialEq)]
pub struct RecallHit {
    /// The document.
    pub document: RecallDocument,
    /// BM25 over the scope's documents.
    pub score: f64,
    /// The share (0 to 1) of the query's weight (the inverse document frequency of its
    /// terms found in the scope) that this document matches.
    pub coverage: f64,
}

/// Counts a scope's documents and their terms, for BM25.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CorpusStats {
    /// Documents in the scope.
    pub documents: u64,
    /// Terms over all of them.
    pub total_terms: u64,
}

/// A full-text index of a thread's messages, scoped by owner and thread.
#[async_trait]
pub trait RecallIndex: Send + Sync {
    /// Indexes the documents whose message id is not indexed in the scope yet and skips
    /// the others; returns how many were indexed. Ids must be non-empty.
    async fn index_documents(
        &self,
        scope: &SessionScope,
        documents: &[RecallDocument],
    ) -> Result<u64, StoreError>;
    /// Up to `limit` documents of the scope holding at least one of `query` (terms from
    /// [`terms`]), best first (BM25, then newest first).
    async fn search(
        &self,
        scope: &SessionScope,
        query: &[String],
        limit: usize,
    ) -> Result<Vec<RecallHit>, StoreError>;
    /// For each of `seqs`, the first document of the scope after that position (the
    /// reply to a message, when the message was a question), in no particular order;
    /// positions with nothing after them give nothing.
    async fn following(
        &self,
        scope: &SessionScope,
        seqs: &[u64],
    ) -> Result<Vec<RecallDocument>, StoreError>;
    /// How many documents the scope holds.
    async fn indexed_count(&self, scope: &SessionScope) -> Result<u64, StoreError>;
    /// Deletes the index of every context of `(flow_id, user_id, session_id)`; returns
    /// how many documents went. Called by session deletion.
    async fn delete_session_index(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError>;
}

/// Function words dropped from documents and queries (checked before the suffix
/// strip).
const STOP_WORDS: &[&str] = &[
    // English
    "a", "about", "after", "all", "am", "an", "and", "any", "are", "as", "at", "be", "been",
    "before", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has",
    "have", "he", "her", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "let",
    "me", "must", "my", "no", "not", "of", "on", "or", "our", "she", "should", "so", "than",
    "that", "the", "their", "them", "then", "there", "these", "they", "this", "those", "to", "up",
    "us", "was", "we", "were", "what", "when", "where", "which", "while", "who", "whom", "why",
    "will", "with", "would", "you", "your", // German
    "am", "auf", "bitte", "das", "dem", "den", "der", "die", "ein", "eine", "für", "im", "ist",
    "mit", "nicht", "und", "wann", "was", "welche", "welches", "wer", "wie", "wo", "zu",
    // Spanish
    "al", "con", "cuál", "de", "del", "dónde", "el", "en", "es", "hay", "la", "las", "lo", "los",
    "para", "por", "que", "quién", "se", "su", "un", "una", "y",
];

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0x20000..=0x2FA1F) // CJK extensions B-F, compatibility supplement
}

/// A light, deterministic suffix strip for ASCII words: plural and verb endings, then a
/// final `e`, so `handles`, `handled` and `handle` meet.
fn stem(word: &str) -> String {
    if !word.bytes().all(|b| b.is_ascii_lowercase()) || word.len() <= 3 {
        return word.to_owned();
    }
    let mut w = word;
    for suffix in ["ies", "ing", "ed", "es", "s"] {
        if let Some(base) = w.strip_suffix(suffix)
            && base.len() >= 3
            && !(suffix == "s"
                && (base.ends_with('s') || base.ends_with('u') || base.ends_with('i')))
        {
            w = base;
            break;
        }
    }
    let w = if w.len() > 4 {
        w.strip_suffix('e').unwrap_or(w)
    } else {
        w
    };
    w.to_owned()
}

/// `term` as the index stores it: itself when ASCII, otherwise `x` and its UTF-8 bytes in
/// hex.
fn encode(term: &str) -> Option<String> {
    let out = if term.is_ascii() {
        term.to_owned()
    } else {
        let mut s = String::with_capacity(1 + 2 * term.len());
        s.push('x');
        for b in term.as_bytes() {
            s.push_str(&format!("{b:02x}"));
        }
        s
    };
    (out.len() <= MAX_TERM_BYTES).then_some(out)
}

/// The index terms of `text`, in order (see the [module docs](self)).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut cjk: Vec<char> = Vec::new();
    let flush_word = |word: &mut String, out: &mut Vec<String>| {
        if !word.is_empty() {
            if !STOP_WORDS.contains(&word.as_str())
                && let Some(t) = encode(&stem(word))
            {
                out.push(t);
            }
            word.clear();
        }
    };
    let flush_cjk = |cjk: &mut Vec<char>, out: &mut Vec<String>| {
        match cjk.len() {
            0 => {}
            1 => out.extend(encode(&cjk[0].to_string())),
            _ => out.extend(
                cjk.windows(2)
                    .filter_map(|w| encode(&w.iter().collect::<String>())),
            ),
        }
        cjk.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            flush_word(&mut word, &mut out);
            cjk.push(c);
        } else if c.is_alphanumeric() {
            flush_cjk(&mut cjk, &mut out);
            word.extend(c.to_lowercase());
        } else {
            flush_word(&mut word, &mut out);
            flush_cjk(&mut cjk, &mut out);
        }
    }
    flush_word(&mut word, &mut out);
    flush_cjk(&mut cjk, &mut out);
    out
}

/// The distinct terms of a query, in first-seen order.
pub fn query_terms(text: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    terms(text)
        .into_iter()
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

/// Inverse document frequency (BM25's, never negative).
fn idf(documents: u64, df: u64) -> f64 {
    let (n, df) = (documents as f64, df as f64);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// The query terms a search reads postings for: those found in the scope, rarest first,
/// until their document frequencies add up to [`MAX_POSTINGS`] (the rarest is always
/// read).
pub fn candidate_terms(query: &[String], df: &HashMap<String, u64>) -> Vec<String> {
    let mut found: Vec<(&String, u64)> = query
        .iter()
        .filter_map(|q| df.get(q).filter(|&&n| n > 0).map(|&n| (q, n)))
        .collect();
    found.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    let mut read = 0u64;
    let mut out = Vec::new();
    for (q, n) in found {
        if !out.is_empty() && read + n > MAX_POSTINGS {
            break;
        }
        read += n;
        out.push(q.clone());
    }
    out
}

/// The weight a candidate gains for holding a query term of document frequency `df` in
/// a scope of `documents`: the term's inverse document frequency in millionths, an
/// integer so that every database adds a candidate's weights up to the same total.
pub fn reach_weight(documents: u64, df: u64) -> i64 {
    (idf(documents, df) * 1e6).round() as i64
}

/// Scores one document for `query`: `(bm25, coverage)`. A term's frequency is its count
/// in the document's own terms plus [`CONTEXT_WEIGHT`] times its count in the context's;
/// a term only the context holds counts [`CONTEXT_COVERAGE`] of its weight towards
/// coverage, so a message is not quoted for what the one before it said alone.
/// `df` holds the number of the scope's documents containing each query term (in either);
/// terms found in no document weigh nothing (coverage is relative to what the scope could
/// match).
pub fn score(
    query: &[String],
    document: &DocumentTerms,
    df: &HashMap<String, u64>,
    stats: CorpusStats,
) -> (f64, f64) {
    let dl = document.weighted_len() as f64;
    let avgdl = if stats.documents == 0 {
        1.0
    } else {
        (stats.total_terms as f64 / stats.documents as f64).max(1.0)
    };
    // A query has a few terms: counting each in the document's terms is cheaper than a
    // map of all of them (a search scores up to MAX_CANDIDATES documents).
    let (mut bm25, mut matched, mut weight) = (0.0, 0.0, 0.0);
    for q in query {
        let n = df.get(q).copied().unwrap_or(0);
        if n == 0 {
            continue;
        }
        let w = idf(stats.documents, n);
        weight += w;
        let own = document.own.iter().filter(|t| *t == q).count();
        let context = document.context.iter().filter(|t| *t == q).count();
        if own + context > 0 {
            let f = own as f64 + CONTEXT_WEIGHT * context as f64;
            bm25 += w * f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * dl / avgdl));
            matched += if own > 0 { w } else { w * CONTEXT_COVERAGE };
        }
    }
    let coverage = if weight > 0.0 { matched / weight } else { 0.0 };
    (bm25, coverage)
}

/// Scores candidates and keeps the best `limit`: BM25 descending, then newest first.
pub fn rank(
    query: &[String],
    candidates: Vec<(RecallDocument, DocumentTerms)>,
    df: &HashMap<String, u64>,
    stats: CorpusStats,
    limit: usize,
) -> Vec<RecallHit> {
    let refs: Vec<(&RecallDocument, &DocumentTerms)> =
        candidates.iter().map(|(d, t)| (d, t)).collect();
    rank_refs(query, &refs, df, stats, limit)
}

/// [`rank`] over borrowed candidates: only the hits kept are cloned.
fn rank_refs(
    query: &[String],
    candidates: &[(&RecallDocument, &DocumentTerms)],
    df: &HashMap<String, u64>,
    stats: CorpusStats,
    limit: usize,
) -> Vec<RecallHit> {
    let mut scored: Vec<(&RecallDocument, f64, f64)> = candidates
        .iter()
        .filter_map(|&(document, doc_terms)| {
            let (score, coverage) = score(query, doc_terms, df, stats);
            (score > 0.0).then_some((document, score, coverage))
        })
        .collect();
    scored.sort_by(|a, b| {
        b.1.total_cmp(&a.1)
            .then(b.0.seq.cmp(&a.0.seq))
            .then_with(|| a.0.message_id.cmp(&b.0.message_id))
    });
    scored.truncate(limit);
    scored
        .into_iter()
        .map(|(document, score, coverage)| RecallHit {
            document: document.clone(),
            score,
            coverage,
        })
        .collect()
}

/// `text` cut to its first `max` characters (on a character boundary).
fn cut_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// The `timestamp` metadata of a message, when it is a text.
fn timestamp(m: &Message) -> Option<String> {
    m.metadata()
        .get("timestamp")
        .and_then(serde_json::Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

/// The documents of `messages[from..]`, numbered by position in `messages` (`seq`).
/// System messages, messages `skip` refuses, AI messages without text (their calls are
/// quoted with their results) and messages without an id are left out. A tool result
/// carries the call that produced it (`name(args) returned:`), found among the
/// messages before it, and is marked untrusted. Each document carries the message's
/// `timestamp` metadata and, as its context, the text of the message before it.
pub fn documents(
    messages: &[Message],
    from: usize,
    skip: impl Fn(&Message) -> bool,
) -> Vec<RecallDocument> {
    let mut out = Vec::new();
    for (seq, m) in messages.iter().enumerate().skip(from) {
        if m.id().is_empty() || skip(m) {
            continue;
        }
        let text = m.text();
        let (role, who, text, untrusted) = match m.body() {
            MessageBody::System(_) => continue,
            MessageBody::Human(_) => (
                "user",
                m.name().map(str::to_owned),
                text.into_owned(),
                false,
            ),
            MessageBody::Ai(ai) => {
                if text.trim().is_empty() {
                    continue;
                }
                let mut t = text.into_owned();
                for c in &ai.tool_calls {
                    t.push_str(&format!("\n[calls {}({})]", c.name, c.args));
                }
                ("assistant", m.name().map(str::to_owned), t, false)
            }
            MessageBody::Tool(tool) => {
                let call = messages[..seq]
                    .iter()
                    .rev()
                    .take(256)
                    .find_map(|p| p.tool_calls().iter().find(|c| c.id == tool.tool_call_id));
                let (name, head) = match call {
                    Some(c) => (
                        c.name.clone(),
                        format!("{}({}) returned:\n", c.name, c.args),
                    ),
                    None => {
                        let name = m.name().unwrap_or("tool").to_owned();
                        let head = format!("{name} returned:\n");
                        (name, head)
                    }
                };
                ("tool", Some(name), format!("{head}{text}"), true)
            }
        };
        if text.trim().is_empty() {
            continue;
        }
        let context = messages[..seq]
            .iter()
            .rev()
            .find(|p| !matches!(p.body(), MessageBody::System(_)) && !skip(p))
            .map(|p| cut_chars(p.text().trim(), CONTEXT_CHARS).to_owned())
            .unwrap_or_default();
        out.push(RecallDocument {
            message_id: m.id().to_owned(),
            seq: seq as u64,
            role: role.to_owned(),
            who,
            text,
            untrusted,
            time: timestamp(m),
            context,
        });
    }
    out
}

/// Checks a document before it is indexed.
pub fn check_document(document: &RecallDocument) -> Result<(), StoreError> {
    if document.message_id.is_empty() {
        return Err(StoreError::Invalid(
            "a recall document needs a non-empty message id".into(),
        ));
    }
    if document.text.contains('\0') || document.message_id.contains('\0') {
        return Err(StoreError::Invalid(format!(
            "recall document {:?} holds a NUL character",
            document.message_id
        )));
    }
    Ok(())
}

/// One document of a [`ScopeIndex`].
struct Indexed {
    document: RecallDocument,
    terms: DocumentTerms,
}

/// One scope's documents. A document's place in `documents` is its place in the order
/// the scope's documents were indexed (a database's row id), so a posting list, kept in
/// that order, ends with the newest documents.
#[derive(Default)]
struct ScopeIndex {
    /// The documents, in the order they were indexed.
    documents: Vec<Indexed>,
    /// message id -> place in `documents`
    ids: HashMap<String, usize>,
    /// position -> place in `documents`
    by_seq: BTreeMap<u64, usize>,
    /// term -> places of the documents holding it (in the text or the context),
    /// ascending
    postings: HashMap<String, Vec<usize>>,
    total_terms: u64,
}

/// An in-memory [`RecallIndex`] (BM25 over postings): the index of the memory store and
/// of a recall middleware without a database.
#[derive(Default)]
pub struct MemoryRecallIndex {
    scopes: Mutex<HashMap<SessionScope, ScopeIndex>>,
}

impl std::fmt::Debug for MemoryRecallIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRecallIndex")
            .field("scopes", &self.scopes.lock().len())
            .finish()
    }
}

impl MemoryRecallIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Empties every scope; returns how many documents went.
    pub fn clear(&self) -> u64 {
        let mut scopes = self.scopes.lock();
        let n = scopes.values().map(|i| i.documents.len() as u64).sum();
        scopes.clear();
        n
    }
}

#[async_trait]
impl RecallIndex for MemoryRecallIndex {
    async fn index_documents(
        &self,
        scope: &SessionScope,
        documents: &[RecallDocument],
    ) -> Result<u64, StoreError> {
        for d in documents {
            check_document(d)?;
        }
        let mut scopes = self.scopes.lock();
        let index = scopes.entry(scope.clone()).or_default();
        let mut added = 0;
        for d in documents {
            if index.ids.contains_key(&d.message_id) {
                continue;
            }
            let order = index.documents.len();
            let doc_terms = d.terms();
            for t in doc_terms.own.iter().chain(&doc_terms.context) {
                let posting = index.postings.entry(t.clone()).or_default();
                // This document's places are pushed last: a repeated term is seen here.
                if posting.last() != Some(&order) {
                    posting.push(order);
                }
            }
            index.total_terms += doc_terms.weighted_len();
            index.by_seq.insert(d.seq, order);
            index.ids.insert(d.message_id.clone(), order);
            index.documents.push(Indexed {
                document: d.clone(),
                terms: doc_terms,
            });
            added += 1;
        }
        Ok(added)
    }

    async fn search(
        &self,
        scope: &SessionScope,
        query: &[String],
        limit: usize,
    ) -> Result<Vec<RecallHit>, StoreError> {
        let scopes = self.scopes.lock();
        let Some(index) = scopes.get(scope) else {
            return Ok(Vec::new());
        };
        let df: HashMap<String, u64> = query
            .iter()
            .filter_map(|q| index.postings.get(q).map(|p| (q.clone(), p.len() as u64)))
            .collect();
        let stats = CorpusStats {
            documents: index.documents.len() as u64,
            total_terms: index.total_terms,
        };
        // The candidates the rarest terms reach, pre-ranked by the weight of the terms
        // each holds, so scoring stays bounded; ties go to the document indexed last,
        // as the databases break them by row id.
        let read = candidate_terms(query, &df);
        let mut reach: Vec<(usize, i64)> = match read.as_slice() {
            // One term read (always the case when the rarest alone passes MAX_POSTINGS):
            // every document it reaches weighs the same, so the candidates are the newest
            // MAX_CANDIDATES of its posting list, its end. A call reads them alone, not
            // the whole list, which may hold most of a long thread.
            [only] => index
                .postings
                .get(only)
                .into_iter()
                .flat_map(|p| p.iter().rev().take(MAX_CANDIDATES))
                .map(|&at| (at, 0))
                .collect(),
            // Several terms: their lists add up to at most MAX_POSTINGS.
            _ => {
                let mut weights: HashMap<usize, i64> = HashMap::new();
                for q in &read {
                    let w = reach_weight(stats.documents, df.get(q).copied().unwrap_or(0));
                    for &at in index.postings.get(q).into_iter().flatten() {
                        *weights.entry(at).or_default() += w;
                    }
                }
                let mut reach: Vec<(usize, i64)> = weights.into_iter().collect();
                reach.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
                reach.truncate(MAX_CANDIDATES);
                reach
            }
        };
        reach.truncate(MAX_CANDIDATES);
        let candidates: Vec<(&RecallDocument, &DocumentTerms)> = reach
            .into_iter()
            .filter_map(|(at, _)| index.documents.get(at).map(|d| (&d.document, &d.terms)))
            .collect();
        Ok(rank_refs(query, &candidates, &df, stats, limit))
    }

    async fn following(
        &self,
        scope: &SessionScope,
        seqs: &[u64],
    ) -> Result<Vec<RecallDocument>, StoreError> {
        let scopes = self.scopes.lock();
        let Some(index) = scopes.get(scope) else {
            return Ok(Vec::new());
        };
        let mut out: Vec<RecallDocument> = Vec::new();
        for &seq in seqs {
            let next = index
                .by_seq
                .range(seq.saturating_add(1)..)
                .next()
                .and_then(|(_, &at)| index.documents.get(at));
            if let Some(Indexed { document: d, .. }) = next
                && !out.iter().any(|o| o.message_id == d.message_id)
            {
                out.push(d.clone());
            }
        }
        Ok(out)
    }

    async fn indexed_count(&self, scope: &SessionScope) -> Result<u64, StoreError> {
        Ok(self
            .scopes
            .lock()
            .get(scope)
            .map_or(0, |i| i.documents.len() as u64))
    }

    async fn delete_session_index(
        &self,
        flow_id: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<u64, StoreError> {
        let mut scopes = self.scopes.lock();
        let mut gone = 0;
        scopes.retain(|s, index| {
            let hit = s.flow_id == flow_id && s.user_id == user_id && s.session_id == session_id;
            if hit {
                gone += index.documents.len() as u64;
            }
            !hit
        });
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_folded_and_stripped() {
        assert_eq!(terms("Handles handled handle"), ["handl", "handl", "handl"]);
        assert_eq!(terms("What is the root cause?"), ["root", "caus"]);
        assert_eq!(terms("status"), ["status"]);
        assert!(terms(&"a".repeat(100)).is_empty());
    }

    #[test]
    fn cjk_runs_become_bigrams_on_both_sides() {
        let doc = terms("这个项目的负责人是王芳，有问题先找他。");
        let query = query_terms("负责人是谁？");
        let hits = query.iter().filter(|q| doc.contains(q)).count();
        assert_eq!(hits, 3, "负责 责人 人是 are shared, 是谁 is not");
        assert!(
            doc.iter()
                .chain(&query)
                .all(|t| t.bytes().all(|b| b.is_ascii_alphanumeric()))
        );
    }

    #[test]
    fn non_ascii_words_are_encoded() {
        assert_eq!(
            terms("Ansprechpartner dürfen"),
            ["ansprechpartner", "x64c3bc7266656e"]
        );
    }

    #[tokio::test]
    async fn memory_index_ranks_and_deletes() {
        let index = MemoryRecallIndex::new();
        let scope = SessionScope::new("f", "u", "s", "");
        let doc = |id: &str, seq, text: &str| RecallDocument::new(id, seq, "user", text);
        let docs = [
            doc("a", 0, "the billing service runs build 42"),
            doc("b", 1, "lunch is at noon"),
            doc("c", 2, "billing billing billing"),
        ];
        assert_eq!(index.index_documents(&scope, &docs).await.ok(), Some(3));
        assert_eq!(index.index_documents(&scope, &docs).await.ok(), Some(0));
        let hits = index
            .search(&scope, &query_terms("which build does billing run?"), 10)
            .await
            .unwrap_or_default();
        assert_eq!(
            hits.first().map(|h| h.document.message_id.as_str()),
            Some("a")
        );
        assert_eq!(hits.len(), 2);
        let other = SessionScope::new("f", "u2", "s", "");
        assert!(
            index
                .search(&other, &query_terms("billing"), 10)
                .await
                .unwrap_or_default()
                .is_empty()
        );
        assert_eq!(
            index.delete_session_index("f", "u", "s").await.ok(),
            Some(3)
        );
        assert_eq!(index.indexed_count(&scope).await.ok(), Some(0));
    }

    #[tokio::test]
    async fn a_common_term_reaches_its_newest_documents() {
        // One term read whose posting list passes MAX_POSTINGS: every document weighs
        // the same, so the candidates are the newest MAX_CANDIDATES, and the best hits
        // among them (same length, same score) the newest of all.
        let index = MemoryRecallIndex::new();
        let scope = SessionScope::new("f", "u", "s", "");
        let n = MAX_POSTINGS + 100;
        let docs: Vec<RecallDocument> = (0..n)
            .map(|i| RecallDocument::new(format!("m{i}"), i, "user", format!("deploy w{i}")))
            .collect();
        assert_eq!(index.index_documents(&scope, &docs).await.ok(), Some(n));
        let hits = index
            .search(&scope, &query_terms("deploy"), 3)
            .await
            .unwrap_or_default();
        let seqs: Vec<u64> = hits.iter().map(|h| h.document.seq).collect();
        assert_eq!(seqs, [n - 1, n - 2, n - 3]);
        // A rare term beside it: read with the common one only while their lists fit;
        // the rare term's document wins.
        let hits = index
            .search(&scope, &query_terms("deploy w17"), 3)
            .await
            .unwrap_or_default();
        assert_eq!(
            hits.first().map(|h| h.document.message_id.as_str()),
            Some("m17")
        );
        // Context terms are posted once per document, even when repeated.
        let mut d = RecallDocument::new("x", n, "user", "rollout rollout");
        d.context = "rollout".into();
        assert_eq!(index.index_documents(&scope, &[d]).await.ok(), Some(1));
        let hits = index
            .search(&scope, &query_terms("rollout"), 5)
            .await
            .unwrap_or_default();
        assert_eq!(hits.len(), 1);
    }
}
