//! What the stages remember about a thread between calls, so that a call on a long
//! thread costs what is new rather than what is old.
//!
//! A request whose messages are still the state's own list carries the list's
//! [`Lineage`]: the lists of one lineage only ever grew by appending. For such a list
//! the memo says how far the dangling-call scan already found nothing wrong and which
//! cached summary was already checked against the list's prefix, so neither is redone.
//! Any other list (edited history, a list rebuilt by an outer middleware, a new
//! process) simply misses and is scanned in full, as before. The last message the memo
//! saw is compared on every use, a cheap witness against a list changed in place
//! without a new lineage.

use std::num::NonZeroUsize;
use std::sync::Arc;

use keel_core::message::Message;
use keel_core::state::Lineage;
use lru::LruCache;
use parking_lot::Mutex;

use crate::cache::CachedSummary;
use crate::rules::{PlanIndex, RescuePolicy};

/// True when the first `len` messages of `messages` are still the ones seen, as far as
/// the witness (the fingerprint of the last of them) tells: within one lineage a list
/// only grows, so this is a cheap guard against a list changed in place.
fn still_prefix(messages: &[Message], len: usize, witness: u64) -> bool {
    len <= messages.len() && (len == 0 || messages[len - 1].fingerprint() == witness)
}

/// One list's memo.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ThreadMemo {
    lineage: Lineage,
    /// Messages seen.
    len: usize,
    /// Fingerprint of the last message seen.
    witness: u64,
    /// `messages[..clean]` have no dangling tool call, and `clean` starts a tool run
    /// block (it is 0 or a message that is not a tool result).
    pub clean: usize,
    /// `(boundary, prefix_hash)` of a cached summary that matched this lineage's prefix:
    /// any entry with the same pair matches too (matching compares exactly those).
    verified: Option<(usize, u64)>,
}

impl ThreadMemo {
    /// A memo for `messages` of `lineage`.
    fn new(messages: &[Message], lineage: Lineage) -> Self {
        ThreadMemo {
            lineage,
            len: messages.len(),
            witness: messages.last().map_or(0, Message::fingerprint),
            clean: 0,
            verified: None,
        }
    }

    /// True when `messages` (of `lineage`) continue the list this memo saw.
    fn continues(&self, messages: &[Message], lineage: Lineage) -> bool {
        self.lineage == lineage && still_prefix(messages, self.len, self.witness)
    }

    /// True when `entry` was already matched against this lineage's prefix.
    pub fn verified(&self, entry: &CachedSummary) -> bool {
        self.verified == Some((entry.boundary, entry.prefix_hash))
    }
}

/// The memos of recent lists (a bounded LRU), keyed by lineage rather than by thread:
/// what a memo says is a fact about the list, so a second caller on the same list (an
/// outer retry, `keel compact`, a call under another thread id) finds it too.
pub(crate) struct ThreadMemos(Mutex<LruCache<Lineage, ThreadMemo>>);

impl ThreadMemos {
    /// Room for `capacity` lists.
    pub fn new(capacity: NonZeroUsize) -> Self {
        ThreadMemos(Mutex::new(LruCache::new(capacity)))
    }

    /// The memo of `lineage` if `messages` continue what it saw.
    pub fn get(&self, messages: &[Message], lineage: Option<Lineage>) -> Option<ThreadMemo> {
        let lineage = lineage?;
        let memo = *self.0.lock().get(&lineage)?;
        memo.continues(messages, lineage).then_some(memo)
    }

    /// Updates the memo of `messages` (of `lineage`) with `change`, starting from what is
    /// remembered when the list continues it, else from nothing.
    pub fn update(
        &self,
        messages: &[Message],
        lineage: Option<Lineage>,
        change: impl FnOnce(&mut ThreadMemo),
    ) {
        let Some(lineage) = lineage else { return };
        let mut map = self.0.lock();
        let mut memo = match map.get(&lineage) {
            Some(m) if m.continues(messages, lineage) => ThreadMemo {
                len: messages.len(),
                witness: messages.last().map_or(0, Message::fingerprint),
                ..*m
            },
            _ => ThreadMemo::new(messages, lineage),
        };
        change(&mut memo);
        map.put(lineage, memo);
    }

    /// Records that `entry` matches the prefix of `messages`.
    pub fn set_verified(
        &self,
        messages: &[Message],
        lineage: Option<Lineage>,
        entry: &CachedSummary,
    ) {
        self.update(messages, lineage, |m| {
            m.verified = Some((entry.boundary, entry.prefix_hash));
        });
    }
}

/// How many lists keep a [`PlanIndex`] between calls. An index costs about 40 bytes a
/// message (400 KB for a 10,000-message thread), so this bounds the memory at about
/// 25 MB for lists of that length; a list that drops out is indexed again, in full, at
/// its next compaction.
pub(crate) const PLAN_INDEX_LISTS: NonZeroUsize = match NonZeroUsize::new(64) {
    Some(n) => n,
    None => NonZeroUsize::MIN,
};

/// The [`PlanIndex`]es of recent lists (a bounded LRU keyed by lineage), kept up to
/// date as each list grows, so that the first compaction of a long thread plans
/// without reading the whole thread again. Each entry remembers a witness (the
/// fingerprint of the last message it indexed), compared on every use like
/// [`ThreadMemo`]'s.
pub(crate) struct PlanIndexes(Mutex<LruCache<Lineage, (Arc<PlanIndex>, u64)>>);

impl PlanIndexes {
    /// Room for `capacity` lists.
    pub fn new(capacity: NonZeroUsize) -> Self {
        PlanIndexes(Mutex::new(LruCache::new(capacity)))
    }

    /// The index of `messages` (of `lineage`) for `policy`: the remembered one extended
    /// by what the list gained since, or a new one. The lock is not held while indexing.
    pub fn index(
        &self,
        messages: &[Message],
        lineage: Lineage,
        policy: &RescuePolicy,
    ) -> Arc<PlanIndex> {
        let kept = self
            .0
            .lock()
            .pop(&lineage)
            .filter(|(index, witness)| still_prefix(messages, index.len(), *witness));
        let index = match kept {
            Some((mut index, _)) if !index.is_empty() => {
                if index.len() < messages.len() {
                    Arc::make_mut(&mut index).extend(messages, policy);
                }
                index
            }
            _ => Arc::new(PlanIndex::new(messages, policy)),
        };
        let witness = messages.last().map_or(0, Message::fingerprint);
        self.0.lock().put(lineage, (index.clone(), witness));
        index
    }

    /// Number of lists indexed.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.lock().len()
    }
}
