//! The per-thread summary cache: process-wide, bounded (LRU), thread-safe, with an
//! optional second level ([`SummaryStore`]) so restarted or sibling processes reuse
//! summaries, and single flight so concurrent model calls on one thread share one
//! summary call.
//!
//! An entry says which prefix of the thread the summary covers: `messages[..boundary]`
//! except the `holes` (messages rescued at the time, still sent verbatim). It is valid
//! for a later message list only while that prefix is unchanged (same fingerprints), so
//! an edited history is re-summarized, never served a stale summary.
//!
//! Locks are `parking_lot` mutexes held only around map operations, never across an
//! await; the single-flight gate is an async mutex per thread.
//!
//! ```
//! use keel_core::message::Message;
//! use keel_summarization::cache::{CachedSummary, SummaryCache};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let cache = SummaryCache::new(16);
//! let msgs = vec![Message::human("a").with_id("1"), Message::ai("b").with_id("2")];
//! cache.put("t1", CachedSummary::new("- a then b", &msgs, 2, vec![])).await;
//! let hit = cache.get("t1").await.unwrap();
//! assert!(hit.matches(&msgs));
//! assert!(!hit.matches(&msgs[..1]));
//! // A new entry carries the ledger of current values its summary records.
//! let e = CachedSummary::new("- [m2] user: Switch to eu-west-3 instead. (was eu-west-1)", &msgs, 2, vec![]);
//! assert_eq!((e.current[0].value.as_str(), e.current[0].was.as_str()), ("eu-west-3", "eu-west-1"));
//! # });
//! // An entry stored before the ledger of current values existed still loads.
//! let old: CachedSummary = serde_json::from_str(
//!     r#"{"summary": "- a", "boundary": 1, "holes": [], "prefix_hash": 7}"#,
//! ).unwrap();
//! assert!(old.current.is_empty());
//! ```

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, OnceLock};

use keel_core::message::Message;
use keel_core::store::{StoreError, SummaryStore};
use lru::LruCache;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// A summary and the part of the thread it stands for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedSummary {
    /// The summary text (without the summary-message prefix).
    pub summary: String,
    /// The summary covers `messages[..boundary]`, except `holes`.
    pub boundary: usize,
    /// Indices before `boundary` that are not in the summary (rescued, sent verbatim).
    pub holes: Vec<usize>,
    /// A hash of the fingerprints of `messages[..boundary]`.
    pub prefix_hash: u64,
    /// The current values the summary records (`new (was old)` lines, with the
    /// message each came from). Entries stored before this field existed load with
    /// none.
    #[serde(default)]
    pub current: Vec<keel_summary::extractive::CurrentValue>,
    /// True when the summary was written in the background ahead of the call that
    /// needed it (`precompute_at`). Entries stored before this field existed load as
    /// `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub precomputed: bool,
}

/// Hash of the fingerprints of `messages` (order-sensitive).
pub fn prefix_hash(messages: &[Message]) -> u64 {
    fold_fingerprints(PREFIX_SEED, messages) ^ messages.len() as u64
}

/// The state [`prefix_hash`] starts from: FNV's offset basis.
pub(crate) const PREFIX_SEED: u64 = keel_core::hash::OFFSET_BASIS;

/// One step of [`prefix_hash`]: the state after a message with fingerprint `fp`. Not
/// FNV-1a (a whole 64-bit word per step, and a rotation), only its constants: a fold of
/// fingerprints, which are themselves hashes.
pub(crate) fn fold_step(h: u64, fp: u64) -> u64 {
    (h ^ fp).wrapping_mul(keel_core::hash::PRIME).rotate_left(5)
}

/// The running state of [`prefix_hash`] after `messages`, starting from `h`.
fn fold_fingerprints(mut h: u64, messages: &[Message]) -> u64 {
    for m in messages {
        h = fold_step(h, m.fingerprint());
    }
    h
}

impl CachedSummary {
    /// An entry covering `messages[..boundary]` except `holes`.
    pub fn new(
        summary: impl Into<String>,
        messages: &[Message],
        boundary: usize,
        holes: Vec<usize>,
    ) -> Self {
        let boundary = boundary.min(messages.len());
        let hash = prefix_hash(&messages[..boundary]);
        Self::with_prefix_hash(summary, boundary, holes, hash)
    }

    /// [`new`](Self::new) with the prefix hash of the covered messages already known
    /// (kept with the list's planning index, so the prefix is not read again).
    pub(crate) fn with_prefix_hash(
        summary: impl Into<String>,
        boundary: usize,
        mut holes: Vec<usize>,
        prefix_hash: u64,
    ) -> Self {
        holes.retain(|&h| h < boundary);
        holes.sort_unstable();
        holes.dedup();
        let summary = summary.into();
        CachedSummary {
            current: keel_summary::extractive::current_values(&summary),
            summary,
            boundary,
            holes,
            prefix_hash,
            precomputed: false,
        }
    }

    /// [`new`](Self::new) for a later cut of a list that `previous` matches: only the
    /// messages between the two boundaries are hashed, so a summary on a long thread
    /// does not re-read the covered prefix.
    pub fn extending(
        previous: &CachedSummary,
        summary: impl Into<String>,
        messages: &[Message],
        boundary: usize,
        holes: Vec<usize>,
    ) -> Self {
        let boundary = boundary.min(messages.len());
        if boundary < previous.boundary || previous.boundary > messages.len() {
            return Self::new(summary, messages, boundary, holes);
        }
        let mut entry = Self::new(summary, &[], 0, Vec::new());
        let state = previous.prefix_hash ^ previous.boundary as u64;
        let state = fold_fingerprints(state, &messages[previous.boundary..boundary]);
        let mut holes = holes;
        holes.retain(|&h| h < boundary);
        holes.sort_unstable();
        holes.dedup();
        entry.boundary = boundary;
        entry.holes = holes;
        entry.prefix_hash = state ^ boundary as u64;
        entry
    }

    /// True when `messages` still starts with the prefix this summary covers.
    pub fn matches(&self, messages: &[Message]) -> bool {
        messages.len() >= self.boundary
            && prefix_hash(&messages[..self.boundary]) == self.prefix_hash
    }

    /// True when message `i` is represented by the summary.
    pub fn covers(&self, i: usize) -> bool {
        i < self.boundary && self.holes.binary_search(&i).is_err()
    }

    /// Indices of `0..len` not represented by the summary, ascending.
    pub fn uncovered(&self, len: usize) -> Vec<usize> {
        (0..len).filter(|&i| !self.covers(i)).collect()
    }
}

type Flights = Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>;

/// The process-wide per-thread summary cache. See the [module docs](self).
pub struct SummaryCache {
    entries: Mutex<LruCache<String, Arc<CachedSummary>>>,
    store: Option<Arc<dyn SummaryStore>>,
    flights: Arc<Flights>,
}

impl std::fmt::Debug for SummaryCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummaryCache")
            .field("entries", &self.entries.lock().len())
            .field("store", &self.store.is_some())
            .finish()
    }
}

/// The key under which an entry is stored in the second level. The version names the
/// fingerprint scheme of `prefix_hash` (v2: foldhash), so entries written under another
/// scheme are never even compared.
pub fn store_key(thread_id: &str) -> String {
    format!("keel-summary:v2:{thread_id}")
}

impl SummaryCache {
    /// An in-process cache remembering at most `capacity` threads (least recently used
    /// evicted first).
    pub fn new(capacity: usize) -> Self {
        SummaryCache {
            entries: Mutex::new(LruCache::new(
                NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN),
            )),
            store: None,
            flights: Arc::default(),
        }
    }

    /// The same cache backed by a second level.
    pub fn with_store(mut self, store: Arc<dyn SummaryStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The process-wide cache, created on first use with `capacity`; a later, larger
    /// `capacity` grows it (it never shrinks under running threads).
    pub fn global(capacity: usize) -> Arc<SummaryCache> {
        static GLOBAL: OnceLock<Arc<SummaryCache>> = OnceLock::new();
        let cache = GLOBAL.get_or_init(|| Arc::new(SummaryCache::new(capacity)));
        {
            let mut entries = cache.entries.lock();
            if capacity > entries.cap().get()
                && let Some(cap) = NonZeroUsize::new(capacity)
            {
                entries.resize(cap);
            }
        }
        cache.clone()
    }

    /// Threads currently cached in process.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// True when nothing is cached in process.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entry for a thread: in-process first, then the second level.
    pub async fn get(&self, thread_id: &str) -> Option<Arc<CachedSummary>> {
        if let Some(e) = self.entries.lock().get(thread_id) {
            return Some(e.clone());
        }
        let store = self.store.as_ref()?;
        match store.get_summary(&store_key(thread_id)).await {
            Ok(Some(v)) => match serde_json::from_value::<CachedSummary>(v) {
                Ok(e) => {
                    let e = Arc::new(e);
                    self.entries.lock().put(thread_id.to_owned(), e.clone());
                    Some(e)
                }
                Err(err) => {
                    tracing::warn!(thread_id, error = %err, "ignoring an undecodable stored summary");
                    None
                }
            },
            Ok(None) => None,
            Err(err) => {
                tracing::warn!(thread_id, error = %err, "summary store read failed; continuing without it");
                None
            }
        }
    }

    /// Stores an entry in process and, when configured, in the second level (a store
    /// failure is logged; the in-process entry still serves).
    pub async fn put(&self, thread_id: &str, entry: CachedSummary) -> Arc<CachedSummary> {
        let entry = Arc::new(entry);
        self.entries.lock().put(thread_id.to_owned(), entry.clone());
        if let Some(store) = &self.store {
            match serde_json::to_value(&*entry) {
                Ok(v) => {
                    if let Err(err) = store.put_summary(&store_key(thread_id), &v).await {
                        tracing::warn!(thread_id, error = %err, "summary store write failed");
                    }
                }
                Err(err) => tracing::warn!(thread_id, error = %err, "summary not serializable"),
            }
        }
        entry
    }

    /// Forgets a thread in process (the second level keeps its copy).
    pub fn invalidate(&self, thread_id: &str) {
        self.entries.lock().pop(thread_id);
    }

    /// Deletes every summary of a thread: in process, the entries keyed `thread_id`
    /// or `thread_id#<recipe>`; in the second level, every `thread_id#<recipe>` entry
    /// (the keys the middleware writes, see
    /// [`cache_key`](crate::middleware::SummarizationMiddleware::cache_key)), whatever recipe wrote
    /// them. Part of deleting a session, since a summary holds the session's text.
    /// Returns how many second-level entries went; a second-level failure is returned
    /// (after the in-process entries are gone) so the caller can retry.
    pub async fn purge_thread(&self, thread_id: &str) -> Result<u64, StoreError> {
        let prefix = format!("{thread_id}#");
        {
            let mut entries = self.entries.lock();
            let doomed: Vec<String> = entries
                .iter()
                .map(|(k, _)| k)
                .filter(|k| *k == thread_id || k.starts_with(&prefix))
                .cloned()
                .collect();
            for k in doomed {
                entries.pop(&k);
            }
        }
        match &self.store {
            Some(store) => store.delete_summaries(&store_key(&prefix)).await,
            None => Ok(0),
        }
    }

    /// The single-flight gate of `thread_id` when no task holds it, without waiting.
    pub fn try_single_flight(&self, thread_id: &str) -> Option<FlightGuard> {
        let gate = self
            .flights
            .lock()
            .entry(thread_id.to_owned())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(())))
            .clone();
        let guard = gate.clone().try_lock_owned().ok();
        let flight = FlightGuard {
            flights: self.flights.clone(),
            thread_id: thread_id.to_owned(),
            gate,
            guard,
        };
        // Dropped without the guard, it still removes an unused gate.
        flight.guard.is_some().then_some(flight)
    }

    /// True when a second level (shared with other processes) is configured.
    pub fn has_store(&self) -> bool {
        self.store.is_some()
    }

    /// Takes the second level's lease on `key` for `holder` (see
    /// [`SummaryStore::try_lease`]): `Some(true)` taken, `Some(false)` held by another
    /// holder, `None` without a second level or when the store failed (logged): the
    /// caller then goes on as if alone.
    pub async fn try_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Option<bool> {
        let store = self.store.as_ref()?;
        match store.try_lease(&store_key(key), holder, ttl).await {
            Ok(taken) => Some(taken),
            Err(err) => {
                tracing::warn!(key, error = %err, "summary lease failed; going on without it");
                None
            }
        }
    }

    /// Gives back a lease taken with [`try_lease`](Self::try_lease).
    pub async fn release_lease(&self, key: &str, holder: &str) {
        if let Some(store) = &self.store
            && let Err(err) = store.release_lease(&store_key(key), holder).await
        {
            tracing::warn!(key, error = %err, "summary lease release failed; it expires by itself");
        }
    }

    /// Waits until no other task is summarizing `thread_id`, then holds the gate until
    /// the guard drops. Callers re-check the cache after acquiring: the task they waited
    /// for has usually just stored what they need.
    pub async fn single_flight(&self, thread_id: &str) -> FlightGuard {
        let gate = self
            .flights
            .lock()
            .entry(thread_id.to_owned())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(())))
            .clone();
        let guard = gate.clone().lock_owned().await;
        FlightGuard {
            flights: self.flights.clone(),
            thread_id: thread_id.to_owned(),
            gate,
            guard: Some(guard),
        }
    }
}

/// Holds a thread's single-flight gate. Dropping it lets the next waiter in and removes
/// the gate when nobody else uses it.
pub struct FlightGuard {
    flights: Arc<Flights>,
    thread_id: String,
    gate: Arc<tokio::sync::Mutex<()>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        self.guard.take();
        let mut flights = self.flights.lock();
        // The map and this guard hold the only references: nobody is waiting.
        if Arc::strong_count(&self.gate) == 2 {
            flights.remove(&self.thread_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extended_entry_hashes_like_a_new_one() {
        let msgs: Vec<Message> = (0..40)
            .map(|i| Message::human(format!("m{i}")).with_id(format!("{i}")))
            .collect();
        let first = CachedSummary::new("a", &msgs, 12, vec![3, 5]);
        for boundary in [12, 13, 30, 40] {
            let extended = CachedSummary::extending(&first, "b", &msgs, boundary, vec![5, 20]);
            assert_eq!(
                extended,
                CachedSummary::new("b", &msgs, boundary, vec![5, 20])
            );
            assert!(extended.matches(&msgs));
        }
        // A cut before the previous boundary is hashed from scratch.
        let earlier = CachedSummary::extending(&first, "c", &msgs, 4, vec![]);
        assert_eq!(earlier, CachedSummary::new("c", &msgs, 4, vec![]));
    }
}
