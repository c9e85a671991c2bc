//! The newest stored messages of recently used sessions, kept between turns.
//!
//! Every turn reads its recent window: the newest few dozen messages of the session.
//! Reading them means fetching and decoding every row each turn, while from one turn
//! to the next only the turn's own messages are new, and this process wrote them. So
//! the compressor keeps each session's newest rows ([`TailCache`]) and appends what it
//! records. Before a cached tail is used, one query checks it against the store: the
//! number of rows after the tail's oldest row must be the number the tail holds after
//! it. Chat history is append-only and a tail holds only rows this process read or
//! stored, in order, so the counts agree exactly when the store holds nothing the tail
//! lacks. A row appended by another process (or another compressor) changes the count,
//! and the tail is read again. Rows older than the tail never change the window.

use std::collections::HashSet;
use std::num::NonZeroUsize;

use keel_core::store::{Cursor, SessionScope, StoredMessage};
use lru::LruCache;
use parking_lot::Mutex;

/// Sessions whose tail is kept.
const SESSIONS: usize = 1024;

/// One session's newest stored rows, oldest first.
struct Tail {
    rows: Vec<StoredMessage>,
    /// The rows are the session's whole history.
    whole: bool,
    /// Bumped on every change, so a check made before a change is not taken for after.
    generation: u64,
    /// The generation whose rows the store's count, taken by the statement that last
    /// recorded into the session, proved current, and the ids that statement recorded;
    /// used once (see [`TailCache::take_confirmed`]).
    confirmed: Option<(u64, HashSet<String>)>,
}

/// What a check against the store needs: the tail's oldest row (`None` when the tail
/// is the whole history) and how many rows the store must hold after it.
pub(crate) struct Check {
    /// Count the rows after this position (`None`: count them all).
    pub after: Option<Cursor>,
    /// The count that proves the tail current.
    pub expected: u64,
    generation: u64,
}

/// Per-session tails, bounded in sessions and in rows per session.
pub(crate) struct TailCache {
    tails: Mutex<LruCache<SessionScope, Tail>>,
    max_rows: usize,
}

impl TailCache {
    /// Keeps at most `max_rows` rows for each of the last [`SESSIONS`] sessions.
    pub fn new(max_rows: usize) -> Self {
        TailCache {
            tails: Mutex::new(LruCache::new(
                NonZeroUsize::new(SESSIONS).unwrap_or(NonZeroUsize::MIN),
            )),
            max_rows: max_rows.max(1),
        }
    }

    /// The most rows kept per session.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// How to check the scope's tail, if one is kept that can answer `n` rows.
    pub fn check(&self, scope: &SessionScope, n: usize) -> Option<Check> {
        let mut tails = self.tails.lock();
        let tail = tails.get(scope)?;
        if tail.whole {
            return Some(Check {
                after: None,
                expected: tail.rows.len() as u64,
                generation: tail.generation,
            });
        }
        let first = tail.rows.first()?;
        (tail.rows.len() >= n).then(|| Check {
            after: Some(first.cursor()),
            expected: tail.rows.len() as u64 - 1,
            generation: tail.generation,
        })
    }

    /// The newest `n` rows, oldest first, if the tail has not changed since `check`
    /// (whose count the store confirmed).
    pub fn newest(
        &self,
        scope: &SessionScope,
        check: &Check,
        n: usize,
    ) -> Option<Vec<StoredMessage>> {
        let tails = self.tails.lock();
        let tail = tails.peek(scope)?;
        (tail.generation == check.generation)
            .then(|| tail.rows[tail.rows.len().saturating_sub(n)..].to_vec())
    }

    /// Replaces the scope's tail with rows just read (`last_n` of `asked` rows).
    pub fn put(&self, scope: &SessionScope, rows: &[StoredMessage], asked: usize) {
        let whole = rows.len() < asked;
        let keep = rows.len().min(self.max_rows);
        let mut tails = self.tails.lock();
        let generation = tails
            .peek(scope)
            .map_or(0, |t| t.generation.wrapping_add(1));
        tails.put(
            scope.clone(),
            Tail {
                rows: rows[rows.len() - keep..].to_vec(),
                whole: whole && keep == rows.len(),
                generation,
                confirmed: None,
            },
        );
    }

    /// Adds rows this process just stored (`stored`, oldest first, the positions the
    /// store returned) to the scope's tail. A row that does not sort after the tail's
    /// newest (another writer got in between) drops the tail instead.
    pub fn append(&self, scope: &SessionScope, stored: Vec<StoredMessage>) {
        let mut tails = self.tails.lock();
        self.append_locked(&mut tails, scope, stored);
    }

    /// [`Self::append`], with the store's count of the rows after `check`'s position
    /// taken once `stored` was written. When the count is the tail's plus the rows just
    /// stored (and the tail did not change meanwhile), no other writer stored rows in
    /// the session since the tail was last proved current: the tail is marked
    /// confirmed, and the next [`Self::take_confirmed`] says so without another count.
    /// `recorded` holds the ids of every message the statement was given (stored or
    /// skipped as stored before).
    pub fn append_counted(
        &self,
        scope: &SessionScope,
        stored: Vec<StoredMessage>,
        recorded: HashSet<String>,
        check: &Check,
        count: u64,
    ) {
        let mut tails = self.tails.lock();
        let current = tails
            .peek(scope)
            .is_some_and(|t| t.generation == check.generation)
            && count == check.expected.saturating_add(stored.len() as u64);
        if let Some(tail) = self.append_locked(&mut tails, scope, stored)
            && current
        {
            tail.confirmed = Some((tail.generation, recorded));
        }
    }

    /// Whether the scope's tail is as the last record's count proved it (nothing
    /// changed it since), when that record was of `current` (the turn's input: every
    /// id in it, and at least one). A count taken when some earlier turn was recorded
    /// says nothing of what other writers stored since. Answers `true` once per proof:
    /// a later turn counts again.
    pub fn take_confirmed(&self, scope: &SessionScope, current: &HashSet<&str>) -> bool {
        let mut tails = self.tails.lock();
        let Some(tail) = tails.get_mut(scope) else {
            return false;
        };
        let generation = tail.generation;
        tail.confirmed.take().is_some_and(|(at, recorded)| {
            at == generation
                && !current.is_empty()
                && current.iter().all(|id| recorded.contains(*id))
        })
    }

    /// The newest `n` rows, oldest first, when the tail holds them (or is the whole
    /// history): for a tail [`Self::take_confirmed`] just proved current.
    pub fn confirmed_newest(&self, scope: &SessionScope, n: usize) -> Option<Vec<StoredMessage>> {
        let check = self.check(scope, n)?;
        self.newest(scope, &check, n)
    }

    /// Appends `stored` to the scope's tail; the tail, unless it was dropped (a row out
    /// of order) or there is none.
    fn append_locked<'t>(
        &self,
        tails: &'t mut LruCache<SessionScope, Tail>,
        scope: &SessionScope,
        stored: Vec<StoredMessage>,
    ) -> Option<&'t mut Tail> {
        if stored.is_empty() {
            return tails.get_mut(scope);
        }
        let mut newest = tails.peek(scope)?.rows.last().map(StoredMessage::cursor);
        let in_order = stored.iter().all(|row| {
            let at = row.cursor();
            let after = newest.as_ref().is_none_or(|n| at > *n);
            newest = Some(at);
            after
        });
        if !in_order {
            tails.pop(scope);
            return None;
        }
        let tail = tails.get_mut(scope)?;
        tail.rows.extend(stored);
        if tail.rows.len() > self.max_rows {
            let cut = tail.rows.len() - self.max_rows;
            tail.rows.drain(..cut);
            tail.whole = false;
        }
        tail.generation = tail.generation.wrapping_add(1);
        tail.confirmed = None;
        Some(tail)
    }

    /// Forgets every context of a session (it was deleted).
    pub fn forget_session(&self, flow_id: &str, user_id: &str, session_id: &str) {
        let mut tails = self.tails.lock();
        let doomed: Vec<SessionScope> = tails
            .iter()
            .map(|(s, _)| s)
            .filter(|s| s.flow_id == flow_id && s.user_id == user_id && s.session_id == session_id)
            .cloned()
            .collect();
        for s in doomed {
            tails.pop(&s);
        }
    }
}

#[cfg(test)]
mod tests {
    use keel_core::message::Message;

    use super::*;

    fn row(ts: i64, id: &str) -> StoredMessage {
        StoredMessage {
            timestamp_ms: ts,
            message: Message::human(id).with_id(id),
        }
    }

    fn scope() -> SessionScope {
        SessionScope::new("flow", "user", "session", "")
    }

    #[test]
    fn a_short_history_is_whole_and_checked_by_its_full_count() {
        let cache = TailCache::new(8);
        cache.put(&scope(), &[row(1, "a"), row(2, "b")], 5);
        let check = cache.check(&scope(), 5).unwrap();
        assert_eq!((check.after.as_ref(), check.expected), (None, 2));
        let rows = cache.newest(&scope(), &check, 5).unwrap();
        assert_eq!(rows.len(), 2);
    }

    #[test]
    fn a_partial_tail_is_checked_after_its_oldest_row_and_only_answers_what_it_holds() {
        let cache = TailCache::new(8);
        cache.put(&scope(), &[row(1, "a"), row(2, "b"), row(3, "c")], 3);
        assert!(
            cache.check(&scope(), 4).is_none(),
            "4 rows from a tail of 3"
        );
        let check = cache.check(&scope(), 2).unwrap();
        assert_eq!(check.after.as_ref(), Some(&row(1, "a").cursor()));
        assert_eq!(check.expected, 2);
        let rows = cache.newest(&scope(), &check, 2).unwrap();
        assert_eq!(rows, [row(2, "b"), row(3, "c")]);
    }

    #[test]
    fn appended_rows_extend_the_tail_up_to_its_bound() {
        let cache = TailCache::new(3);
        cache.put(&scope(), &[row(1, "a"), row(2, "b")], 5);
        cache.append(&scope(), vec![row(3, "c"), row(4, "d")]);
        let check = cache.check(&scope(), 3).unwrap();
        assert_eq!(
            check.after.as_ref(),
            Some(&row(2, "b").cursor()),
            "no longer whole"
        );
        assert_eq!(
            cache.newest(&scope(), &check, 3).unwrap(),
            [row(2, "b"), row(3, "c"), row(4, "d")]
        );
    }

    #[test]
    fn a_change_after_the_check_voids_it() {
        let cache = TailCache::new(8);
        cache.put(&scope(), &[row(1, "a")], 5);
        let check = cache.check(&scope(), 5).unwrap();
        cache.append(&scope(), vec![row(2, "b")]);
        assert!(cache.newest(&scope(), &check, 5).is_none());
    }

    #[test]
    fn a_row_out_of_order_drops_the_tail() {
        let cache = TailCache::new(8);
        cache.put(&scope(), &[row(5, "a")], 5);
        cache.append(&scope(), vec![row(4, "z")]);
        assert!(cache.check(&scope(), 1).is_none());
    }

    #[test]
    fn forgetting_a_session_forgets_every_context() {
        let cache = TailCache::new(8);
        let other = SessionScope::new("flow", "user", "session", "ctx");
        cache.put(&scope(), &[row(1, "a")], 5);
        cache.put(&other, &[row(1, "a")], 5);
        cache.forget_session("flow", "user", "session");
        assert!(cache.check(&scope(), 1).is_none());
        assert!(cache.check(&other, 1).is_none());
    }
}
