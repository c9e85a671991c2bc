//! Incremental counting: count each message once.
//!
//! [`CachedCounter`] wraps any counter with two memories, both bounded:
//!
//! - a per-message map keyed by [`Message::fingerprint`] (a hash of everything
//!   serialized, id included), so a message seen before is never re-tokenized, and an
//!   edited message (new fingerprint) is. It is bounded by generations rather than a
//!   linked LRU: inserts go to a young table; when it is full, the old table is dropped
//!   and the young one becomes old; a hit in the old table moves the entry back to the
//!   young one. Recently used counts survive like in an LRU (to within a factor of
//!   two), with no allocation per entry, which matters when a cold 10,000-message
//!   thread is counted in one go;
//! - per conversation (keyed by its first message), a prefix memo of the fingerprints
//!   and running sums of the last list counted. Counting a conversation that grew by
//!   one message compares fingerprints along the list (a `u64` each; messages cache
//!   their fingerprint) and counts one message.
//!
//! Locks (`parking_lot`) are held only around map operations (once per chunk of
//! messages, not once per message), never while the inner counter tokenizes. The wrapper is transparent: it reports the inner counter's name
//! and the same numbers.
//!
//! ```
//! use keel_core::message::Message;
//! use keel_core::tokens::TokenCounter;
//! use keel_tokens::{ApproximateCounter, CachedCounter};
//!
//! let counter = CachedCounter::new(ApproximateCounter::langchain());
//! let mut history = vec![Message::human("hello world").with_id("h1")];
//! assert_eq!(counter.count_messages(&history), 7);
//! history.push(Message::ai("hi there!").with_id("a1"));
//! assert_eq!(counter.count_messages(&history), 15); // counts only "a1"
//! ```

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher, Hash, Hasher};
use std::num::NonZeroUsize;

use keel_core::message::Message;
use keel_core::state::Lineage;
use keel_core::tokens::TokenCounter;
use keel_core::tool::ToolSpec;
use lru::LruCache;
use parking_lot::Mutex;

/// Default number of per-message counts kept.
pub const DEFAULT_MESSAGE_CAPACITY: usize = 65_536;
/// Default number of conversations whose prefix memo is kept.
pub const DEFAULT_CONVERSATION_CAPACITY: usize = 64;

/// Messages looked up and counted per lock acquisition: small enough that a chunk's
/// text is still in cache when it is counted right after being fingerprinted.
const CHUNK: usize = 64;

/// Keys that are already well-mixed 64-bit hashes (fingerprints) need no rehashing.
#[derive(Default)]
struct PassThroughHasher(u64);

impl Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; fold anything else in for safety.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8)) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type FingerprintMap = HashMap<u64, u64, BuildHasherDefault<PassThroughHasher>>;

/// Per-message counts, bounded by two generations (see the [module docs](self)).
struct Generations {
    young: FingerprintMap,
    old: FingerprintMap,
    /// Entries per generation: the map holds at most twice this.
    per_generation: usize,
}

impl Generations {
    fn new(capacity: NonZeroUsize) -> Self {
        Generations {
            young: FingerprintMap::default(),
            old: FingerprintMap::default(),
            per_generation: capacity.get().div_ceil(2),
        }
    }

    fn get(&mut self, key: u64) -> Option<u64> {
        if let Some(&n) = self.young.get(&key) {
            return Some(n);
        }
        let n = self.old.remove(&key)?;
        self.insert(key, n);
        Some(n)
    }

    fn insert(&mut self, key: u64, n: u64) {
        if self.young.len() >= self.per_generation && !self.young.contains_key(&key) {
            self.old = std::mem::take(&mut self.young);
            self.young.reserve(self.per_generation.min(CHUNK * 16));
        }
        self.young.insert(key, n);
    }

    /// Makes room for `additional` inserts without rehashing along the way (a cold
    /// thread inserts thousands at once).
    fn reserve(&mut self, additional: usize) {
        let room = self.per_generation.saturating_sub(self.young.len());
        self.young.reserve(additional.min(room));
    }

    fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    fn clear(&mut self) {
        self.young.clear();
        self.old.clear();
    }
}

/// The last list counted in one conversation: fingerprints and running sums
/// (`sums[i]` = tokens of the first `i` messages; `sums.len() == fps.len() + 1`).
#[derive(Default)]
struct PrefixMemo {
    fps: Vec<u64>,
    sums: Vec<u64>,
    /// The lineage of the list last counted, when its caller knew it: a list of the same
    /// lineage starts with the memo's messages, so only the rest is compared.
    lineage: Option<Lineage>,
}

/// A caching, incremental wrapper around a [`TokenCounter`]. See the [module docs](self).
pub struct CachedCounter<C> {
    inner: C,
    messages: Mutex<Generations>,
    conversations: Mutex<LruCache<u64, PrefixMemo>>,
    tools: Mutex<Option<(u64, u64)>>,
}

impl<C: TokenCounter> CachedCounter<C> {
    /// Wraps `inner` with the default capacities.
    pub fn new(inner: C) -> Self {
        Self::with_capacity(
            inner,
            NonZeroUsize::new(DEFAULT_MESSAGE_CAPACITY).unwrap_or(NonZeroUsize::MIN),
            NonZeroUsize::new(DEFAULT_CONVERSATION_CAPACITY).unwrap_or(NonZeroUsize::MIN),
        )
    }

    /// Wraps `inner`, keeping at most `messages` per-message counts (rounded up to an
    /// even number) and the prefix memo of at most `conversations` conversations.
    pub fn with_capacity(inner: C, messages: NonZeroUsize, conversations: NonZeroUsize) -> Self {
        CachedCounter {
            inner,
            messages: Mutex::new(Generations::new(messages)),
            conversations: Mutex::new(LruCache::new(conversations)),
            tools: Mutex::new(None),
        }
    }

    /// The wrapped counter.
    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// Number of per-message counts currently kept.
    pub fn cached_messages(&self) -> usize {
        self.messages.lock().len()
    }

    /// Forgets everything.
    pub fn clear(&self) {
        self.messages.lock().clear();
        self.conversations.lock().clear();
        *self.tools.lock() = None;
    }

    /// Counts of `messages`, appended to `memo` (extending its fingerprints and sums).
    /// Works in chunks: fingerprint, look up the whole chunk under one lock, count the
    /// misses with no lock held, store them under one lock.
    ///
    /// `lineage_known`: the list's lineage is known, so its prefix memo alone serves its
    /// next counts. Its messages that were never fingerprinted before (just built, or read
    /// from storage on a cold process) then skip the per-message map: it could only hold
    /// them if an equal message was counted elsewhere, and filling it with a whole cold
    /// thread costs more than their counting. A message fingerprinted before is looked
    /// up and stored as usual.
    fn extend_memo(&self, memo: &mut PrefixMemo, messages: &[Message], lineage_known: bool) {
        memo.fps.reserve(messages.len());
        memo.sums.reserve(messages.len());
        let mut running = memo.sums.last().copied().unwrap_or(0);
        let mut counts: Vec<Option<u64>> = Vec::with_capacity(CHUNK);
        let mut fresh: Vec<(u64, u64)> = Vec::with_capacity(CHUNK);
        let mut known: Vec<bool> = Vec::with_capacity(CHUNK);
        if !lineage_known {
            self.messages.lock().reserve(messages.len());
        }
        for chunk in messages.chunks(CHUNK) {
            let first = memo.fps.len();
            known.clear();
            known.extend(
                chunk
                    .iter()
                    .map(|m| !lineage_known || m.cached_fingerprint().is_some()),
            );
            memo.fps.extend(chunk.iter().map(Message::fingerprint));
            let fps = &memo.fps[first..];
            counts.clear();
            if known.iter().any(|&k| k) {
                let mut cache = self.messages.lock();
                counts.extend(
                    fps.iter()
                        .zip(&known)
                        .map(|(&fp, &k)| if k { cache.get(fp) } else { None }),
                );
            } else {
                counts.resize(chunk.len(), None);
            }
            fresh.clear();
            for (((m, &fp), count), &k) in chunk.iter().zip(fps).zip(&counts).zip(&known) {
                let n = match count {
                    Some(n) => *n,
                    None => {
                        let n = self.inner.count_message(m);
                        if k {
                            fresh.push((fp, n));
                        }
                        n
                    }
                };
                running += n;
                memo.sums.push(running);
            }
            if !fresh.is_empty() {
                let mut cache = self.messages.lock();
                for &(fp, n) in &fresh {
                    cache.insert(fp, n);
                }
            }
        }
    }

    /// The prefix memo for `messages`, updated to cover all of them.
    fn memo_for(
        &self,
        messages: &[Message],
        lineage: Option<Lineage>,
    ) -> Option<(u64, PrefixMemo)> {
        let first = messages.first()?;
        let conv = first.fingerprint();
        // Taken out of the map so that no lock is held while counting; a concurrent
        // count of the same conversation falls back to the per-message cache.
        let mut memo = self.conversations.lock().pop(&conv).unwrap_or_default();
        if memo.sums.is_empty() {
            memo.sums.push(0);
        }
        // Same lineage: the remembered messages are a prefix of these (the last one is
        // still compared, a cheap witness against a list edited in place without a new
        // lineage). Otherwise fingerprints are compared along the list.
        let seen = memo.fps.len();
        let trusted = lineage.is_some()
            && memo.lineage == lineage
            && seen <= messages.len()
            && memo
                .fps
                .last()
                .is_none_or(|fp| *fp == messages[seen - 1].fingerprint());
        let common = if trusted {
            seen
        } else {
            memo.fps
                .iter()
                .zip(messages)
                .take_while(|(fp, m)| **fp == m.fingerprint())
                .count()
        };
        memo.lineage = lineage;
        memo.fps.truncate(common);
        memo.sums.truncate(common + 1);
        self.extend_memo(&mut memo, &messages[common..], lineage.is_some());
        Some((conv, memo))
    }

    fn put_back(&self, conv: u64, memo: PrefixMemo) {
        self.conversations.lock().put(conv, memo);
    }

    fn tools_key(tools: &[ToolSpec]) -> u64 {
        let mut h = DefaultHasher::new();
        for t in tools {
            t.name.hash(&mut h);
            t.description.hash(&mut h);
            t.parameters.to_string().hash(&mut h);
        }
        h.finish()
    }
}

impl<C: TokenCounter> TokenCounter for CachedCounter<C> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn count_message(&self, message: &Message) -> u64 {
        let key = message.fingerprint();
        if let Some(n) = self.messages.lock().get(key) {
            return n;
        }
        let n = self.inner.count_message(message);
        self.messages.lock().insert(key, n);
        n
    }

    fn count_text(&self, text: &str) -> u64 {
        self.inner.count_text(text)
    }

    fn count_messages(&self, messages: &[Message]) -> u64 {
        self.count_messages_in(messages, None)
    }

    fn count_messages_in(&self, messages: &[Message], lineage: Option<Lineage>) -> u64 {
        match self.memo_for(messages, lineage) {
            Some((conv, memo)) => {
                let total = memo.sums.last().copied().unwrap_or(0);
                self.put_back(conv, memo);
                total
            }
            None => 0,
        }
    }

    fn count_each(&self, messages: &[Message]) -> Vec<u64> {
        self.count_each_in(messages, None)
    }

    fn count_each_in(&self, messages: &[Message], lineage: Option<Lineage>) -> Vec<u64> {
        match self.memo_for(messages, lineage) {
            Some((conv, memo)) => {
                let each = memo.sums.windows(2).map(|w| w[1] - w[0]).collect();
                self.put_back(conv, memo);
                each
            }
            None => Vec::new(),
        }
    }

    fn count_tools(&self, tools: &[ToolSpec]) -> u64 {
        if tools.is_empty() {
            return self.inner.count_tools(tools);
        }
        let key = Self::tools_key(tools);
        if let Some((k, n)) = *self.tools.lock()
            && k == key
        {
            return n;
        }
        let n = self.inner.count_tools(tools);
        *self.tools.lock() = Some((key, n));
        n
    }

    /// The inner counter's overhead; `count_request` (the trait default) then adds the
    /// cached parts to it.
    fn request_overhead(&self) -> u64 {
        self.inner.request_overhead()
    }
}

impl<C: std::fmt::Debug> std::fmt::Debug for CachedCounter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedCounter")
            .field("inner", &self.inner)
            .field("cached_messages", &self.messages.lock().len())
            .field("conversations", &self.conversations.lock().len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ApproximateCounter;
    use keel_core::message::MessageBody;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts how often the inner counter is asked about a message.
    #[derive(Clone, Default)]
    struct Probe {
        calls: Arc<AtomicUsize>,
        inner: ApproximateCounter,
    }

    impl TokenCounter for Probe {
        fn name(&self) -> &str {
            "probe"
        }
        fn count_message(&self, m: &Message) -> u64 {
            self.calls.fetch_add(1, Ordering::SeqCst);
            self.inner.count_message(m)
        }
        fn count_text(&self, t: &str) -> u64 {
            self.inner.count_text(t)
        }
    }

    fn conversation(n: usize) -> Vec<Message> {
        (0..n)
            .map(|i| {
                if i % 2 == 0 {
                    Message::human(format!("question {i} about the design"))
                        .with_id(format!("h{i}"))
                } else {
                    Message::ai(format!("answer {i}: it depends")).with_id(format!("a{i}"))
                }
            })
            .collect()
    }

    #[test]
    fn growing_by_one_counts_one() {
        let probe = Probe::default();
        let cached = CachedCounter::new(probe.clone());
        let mut conv = conversation(100);
        let plain = ApproximateCounter::langchain();
        assert_eq!(cached.count_messages(&conv), plain.count_messages(&conv));
        assert_eq!(probe.calls.load(Ordering::SeqCst), 100);
        conv.push(Message::human("one more").with_id("new"));
        assert_eq!(cached.count_messages(&conv), plain.count_messages(&conv));
        assert_eq!(probe.calls.load(Ordering::SeqCst), 101);
        assert_eq!(cached.count_each(&conv), plain.count_each(&conv));
        assert_eq!(probe.calls.load(Ordering::SeqCst), 101);
    }

    #[test]
    fn edited_message_is_recounted() {
        let probe = Probe::default();
        let cached = CachedCounter::new(probe.clone());
        let mut conv = conversation(10);
        let before = cached.count_messages(&conv);
        if let MessageBody::Human(h) = conv[4].body_mut() {
            h.content =
                "a much longer question than before, with many more characters in it".into();
        }
        let after = cached.count_messages(&conv);
        assert!(after > before);
        assert_eq!(after, ApproximateCounter::langchain().count_messages(&conv));
        // Only the edited message and nothing else was recounted: the suffix after it
        // comes from the per-message cache.
        assert_eq!(probe.calls.load(Ordering::SeqCst), 11);
    }

    #[test]
    fn truncated_and_summarized_lists_stay_correct() {
        let cached = CachedCounter::new(ApproximateCounter::langchain());
        let plain = ApproximateCounter::langchain();
        let conv = conversation(50);
        assert_eq!(cached.count_messages(&conv), plain.count_messages(&conv));
        let shorter = &conv[..20];
        assert_eq!(
            cached.count_messages(shorter),
            plain.count_messages(shorter)
        );
        let mut summarized = vec![Message::human("summary").with_id("s")];
        summarized.extend_from_slice(&conv[30..]);
        assert_eq!(
            cached.count_messages(&summarized),
            plain.count_messages(&summarized)
        );
        assert_eq!(cached.count_messages(&[]), 0);
    }

    /// A cold list with a known lineage is counted through its prefix memo alone; after
    /// an edit (a new lineage) the counts are still exact, and messages seen before use
    /// the per-message map again.
    #[test]
    fn cold_lists_with_a_lineage_skip_the_per_message_map() {
        let probe = Probe::default();
        let cached = CachedCounter::new(probe.clone());
        let plain = ApproximateCounter::langchain();
        let mut conv = conversation(40);
        let first = Lineage::fresh();
        assert_eq!(
            cached.count_messages_in(&conv, Some(first)),
            plain.count_messages(&conv)
        );
        // Only the first message (the conversation's key) was fingerprinted before.
        assert_eq!(cached.cached_messages(), 1);
        assert_eq!(probe.calls.load(Ordering::SeqCst), 40);
        conv.push(Message::human("one more").with_id("new"));
        assert_eq!(
            cached.count_messages_in(&conv, Some(first)),
            plain.count_messages(&conv)
        );
        assert_eq!(probe.calls.load(Ordering::SeqCst), 41);
        if let MessageBody::Human(h) = conv[10].body_mut() {
            h.content = "edited, and longer than it was before".into();
        }
        let second = Lineage::fresh();
        assert_eq!(
            cached.count_messages_in(&conv, Some(second)),
            plain.count_messages(&conv)
        );
        assert_eq!(probe.calls.load(Ordering::SeqCst), 41 + 31);
        assert_eq!(cached.cached_messages(), 32, "known messages were stored");
        assert_eq!(
            cached.count_messages_in(&conv, None),
            plain.count_messages(&conv)
        );
    }

    #[test]
    fn bounded_memory() {
        let cached = CachedCounter::with_capacity(
            ApproximateCounter::langchain(),
            NonZeroUsize::new(8).unwrap(),
            NonZeroUsize::new(2).unwrap(),
        );
        let conv = conversation(100);
        assert_eq!(
            cached.count_messages(&conv),
            ApproximateCounter::langchain().count_messages(&conv)
        );
        assert!((1..=8).contains(&cached.cached_messages()));
    }

    #[test]
    fn request_and_tools_match_inner() {
        let plain = ApproximateCounter::langchain();
        let cached = CachedCounter::new(ApproximateCounter::langchain());
        let tools = vec![ToolSpec::new(
            "ls",
            "list a directory",
            serde_json::json!({"type": "object"}),
        )];
        let sys = Message::system("be brief");
        let conv = conversation(5);
        for _ in 0..2 {
            assert_eq!(
                cached.count_request(Some(&sys), &conv, &tools),
                plain.count_request(Some(&sys), &conv, &tools)
            );
        }
    }

    #[test]
    fn shared_across_threads() {
        let cached = Arc::new(CachedCounter::new(ApproximateCounter::langchain()));
        let conv = Arc::new(conversation(200));
        let want = ApproximateCounter::langchain().count_messages(&conv);
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (cached, conv) = (cached.clone(), conv.clone());
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let len = 150 + (i * 7 + t) % 50;
                        let _ = cached.count_messages(&conv[..len]);
                    }
                    cached.count_messages(&conv)
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), want);
        }
    }
}
