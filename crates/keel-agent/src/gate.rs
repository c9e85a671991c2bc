//! [`ThreadGate`]: one active run per thread, the runs waiting behind it, and the four
//! multitask strategies deciding what an arrival does. The agent's own runs pass
//! through one (with [`Waiting::Start`]); `keel serve` queues its runs through another
//! (with [`Waiting::Cancel`], as LangGraph Agent Server does). The strategies are
//! written once, in [`ThreadGate::admit`].
//!
//! The gate holds entries (shared, as `Arc`s), not tasks: what an entry is (a waiting
//! future, a queued server run) is its owner's; the gate tells the owner which entry
//! now holds the thread, and tells entries they are preempted through
//! [`Gated::preempt`].

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::strategy::{CancelAction, MultitaskStrategy};

/// An entry of a [`ThreadGate`]: a run, named by an id unique among its thread's
/// entries, that can be told a newer run wants the thread.
pub trait Gated {
    /// The run's id.
    fn id(&self) -> &str;
    /// A newer run (or a cancel) wants the thread: stop as `action` says. Called with
    /// the gate's lock held: only signal (set a flag, send on a channel), never wait.
    fn preempt(&self, action: CancelAction);
}

/// What an `interrupt` or `rollback` arrival does to the runs still waiting on the
/// thread (the active one is always preempted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// They leave the queue without starting and are handed back
    /// ([`Admitted::displaced`]) for their owner to close: only the newest input is
    /// answered. LangGraph Agent Server's behaviour, which `keel serve` keeps.
    Cancel,
    /// They stay queued, preempted: each starts in turn, records its input (the user
    /// did send it) and stops at once. The agent's behaviour, so that no message a
    /// caller handed to `invoke` is lost.
    Start,
}

/// Why [`ThreadGate::admit`] refused an entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The thread is busy and the strategy is `reject`.
    Busy,
    /// The thread already has `waiting` entries queued, the gate's limit.
    Full {
        /// Entries waiting on the thread.
        waiting: usize,
    },
    /// An entry with the same id is active or waiting on the thread (ids name entries
    /// in [`ThreadGate::leave`] and [`ThreadGate::cancel`], so they must be unique).
    DuplicateId,
}

/// What [`ThreadGate::admit`] did with an entry it took.
#[derive(Debug)]
pub struct Admitted<T> {
    /// True when the entry holds the thread now (it was idle); otherwise it waits, and
    /// [`ThreadGate::leave`] hands it the thread in its turn.
    pub started: bool,
    /// Entries an `interrupt`/`rollback` arrival took off the queue
    /// ([`Waiting::Cancel`]), each already told through [`Gated::preempt`].
    pub displaced: Vec<Arc<T>>,
}

/// What [`ThreadGate::leave`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Left<T> {
    /// The entry held the thread; `next` holds it now (`None`: the thread is idle).
    Released {
        /// The entry that holds the thread now, for its owner to start.
        next: Option<Arc<T>>,
    },
    /// The entry was waiting and left the queue without starting.
    Withdrawn(Arc<T>),
    /// The gate does not hold the entry (it left before).
    Absent,
}

/// What [`ThreadGate::cancel`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Cancelled<T> {
    /// The entry holds the thread and was told to stop ([`Gated::preempt`]); it keeps
    /// the thread until it [leaves](ThreadGate::leave).
    Signalled,
    /// The entry was waiting: it left the queue without starting (and was told).
    Withdrawn(Arc<T>),
    /// The gate does not hold the entry.
    Absent,
}

/// The entries of a busy thread (an idle thread has no lane).
struct Lane<T> {
    active: Arc<T>,
    queue: VecDeque<Arc<T>>,
}

impl<T: Gated> Lane<T> {
    /// Takes the waiting entry `id` off the queue.
    fn take_waiting(&mut self, id: &str) -> Option<Arc<T>> {
        let i = self.queue.iter().position(|q| q.id() == id)?;
        self.queue.remove(i)
    }
}

/// One active entry per thread and a queue behind it (see the module docs).
pub struct ThreadGate<T> {
    lanes: Mutex<HashMap<Arc<str>, Lane<T>>>,
    waiting: Waiting,
    max_waiting: usize,
}

impl<T> std::fmt::Debug for ThreadGate<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadGate")
            .field("threads", &self.lanes.lock().len())
            .field("waiting", &self.waiting)
            .field("max_waiting", &self.max_waiting)
            .finish()
    }
}

impl<T: Gated> ThreadGate<T> {
    /// A gate whose preempting arrivals treat waiting entries as `waiting` says, with
    /// no limit on the queue.
    pub fn new(waiting: Waiting) -> Self {
        ThreadGate {
            lanes: Mutex::new(HashMap::new()),
            waiting,
            max_waiting: usize::MAX,
        }
    }

    /// At most `max` entries wait per thread; one more is [`Refused::Full`] (an
    /// `interrupt`/`rollback` arrival under [`Waiting::Cancel`] empties the queue first,
    /// so it is never refused).
    pub fn with_max_waiting(mut self, max: usize) -> Self {
        self.max_waiting = max;
        self
    }

    /// Takes `entry` on `thread_id` as `strategy` says: it holds an idle thread at once;
    /// on a busy one `reject` refuses it, `enqueue` queues it, and `interrupt` and
    /// `rollback` preempt the active entry (and the waiting ones, as the gate's
    /// [`Waiting`] says) before queueing it.
    pub fn admit(
        &self,
        thread_id: &Arc<str>,
        entry: Arc<T>,
        strategy: MultitaskStrategy,
    ) -> Result<Admitted<T>, Refused> {
        let mut lanes = self.lanes.lock();
        let Some(lane) = lanes.get_mut(&**thread_id) else {
            let lane = Lane {
                active: entry,
                queue: VecDeque::new(),
            };
            lanes.insert(thread_id.clone(), lane);
            return Ok(Admitted {
                started: true,
                displaced: Vec::new(),
            });
        };
        let taken = |e: &Arc<T>| e.id() == entry.id();
        if taken(&lane.active) || lane.queue.iter().any(taken) {
            return Err(Refused::DuplicateId);
        }
        if strategy == MultitaskStrategy::Reject {
            return Err(Refused::Busy);
        }
        let preempts = strategy.preempts();
        // Checked before anyone is told: a refused arrival stops nobody. A preempting
        // arrival under `Waiting::Cancel` empties the queue, so it is never refused.
        let keeps_queue = preempts.is_none() || self.waiting == Waiting::Start;
        if keeps_queue && lane.queue.len() >= self.max_waiting {
            return Err(Refused::Full {
                waiting: lane.queue.len(),
            });
        }
        let mut displaced = Vec::new();
        if let Some(action) = preempts {
            lane.active.preempt(action);
            for waiting in &lane.queue {
                waiting.preempt(action);
            }
            if self.waiting == Waiting::Cancel {
                displaced = lane.queue.drain(..).collect();
            }
        }
        lane.queue.push_back(entry);
        Ok(Admitted {
            started: false,
            displaced,
        })
    }

    /// The entry `id` of `thread_id` is done (it ended, or its owner gave up waiting):
    /// the next waiting entry holds the thread when `id` held it.
    pub fn leave(&self, thread_id: &str, id: &str) -> Left<T> {
        let mut lanes = self.lanes.lock();
        let Some(lane) = lanes.get_mut(thread_id) else {
            return Left::Absent;
        };
        if lane.active.id() != id {
            return lane.take_waiting(id).map_or(Left::Absent, Left::Withdrawn);
        }
        match lane.queue.pop_front() {
            Some(next) => {
                lane.active = next.clone();
                Left::Released { next: Some(next) }
            }
            None => {
                lanes.remove(thread_id);
                Left::Released { next: None }
            }
        }
    }

    /// Stops the entry `id` of `thread_id` as `action` says: the active one is told
    /// (and keeps the thread until it leaves), a waiting one leaves the queue.
    pub fn cancel(&self, thread_id: &str, id: &str, action: CancelAction) -> Cancelled<T> {
        let mut lanes = self.lanes.lock();
        let Some(lane) = lanes.get_mut(thread_id) else {
            return Cancelled::Absent;
        };
        if lane.active.id() == id {
            lane.active.preempt(action);
            return Cancelled::Signalled;
        }
        match lane.take_waiting(id) {
            Some(entry) => {
                entry.preempt(action);
                Cancelled::Withdrawn(entry)
            }
            None => Cancelled::Absent,
        }
    }

    /// The entry holding `thread_id`, if any.
    pub fn active(&self, thread_id: &str) -> Option<Arc<T>> {
        Some(self.lanes.lock().get(thread_id)?.active.clone())
    }

    /// The entries waiting on `thread_id`, first in line first.
    pub fn waiting(&self, thread_id: &str) -> Vec<Arc<T>> {
        self.lanes
            .lock()
            .get(thread_id)
            .map_or_else(Vec::new, |lane| lane.queue.iter().cloned().collect())
    }

    /// True while `thread_id` has an active or a waiting entry.
    pub fn is_busy(&self, thread_id: &str) -> bool {
        self.lanes.lock().contains_key(thread_id)
    }

    /// True when no thread has an entry.
    pub fn is_idle(&self) -> bool {
        self.lanes.lock().is_empty()
    }

    /// Every entry of every thread: the active ones and the waiting ones.
    pub fn entries(&self) -> Vec<Arc<T>> {
        self.lanes
            .lock()
            .values()
            .flat_map(|lane| std::iter::once(&lane.active).chain(&lane.queue).cloned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry that records how it was told to stop.
    #[derive(Debug)]
    struct Entry(&'static str, Arc<Mutex<Vec<CancelAction>>>);

    impl PartialEq for Entry {
        fn eq(&self, other: &Self) -> bool {
            self.0 == other.0
        }
    }

    impl Gated for Entry {
        fn id(&self) -> &str {
            self.0
        }
        fn preempt(&self, action: CancelAction) {
            self.1.lock().push(action);
        }
    }

    fn key(thread: &str) -> Arc<str> {
        Arc::from(thread)
    }

    fn entry(id: &'static str) -> Arc<Entry> {
        Arc::new(Entry(id, Arc::default()))
    }

    fn told(e: &Entry) -> Vec<CancelAction> {
        e.1.lock().clone()
    }

    #[test]
    fn an_idle_thread_is_taken_at_once_and_reject_refuses_while_it_is_busy() {
        let gate = ThreadGate::new(Waiting::Cancel);
        let a = entry("a");
        assert!(
            gate.admit(&key("t"), a.clone(), MultitaskStrategy::Reject)
                .unwrap()
                .started
        );
        let refused = gate.admit(&key("t"), entry("b"), MultitaskStrategy::Reject);
        assert_eq!(refused.unwrap_err(), Refused::Busy);
        assert!(told(&a).is_empty(), "reject leaves the active run alone");
        assert!(
            gate.admit(&key("u"), entry("c"), MultitaskStrategy::Reject)
                .unwrap()
                .started
        );
        let twice = gate.admit(&key("t"), entry("a"), MultitaskStrategy::Enqueue);
        assert_eq!(
            twice.unwrap_err(),
            Refused::DuplicateId,
            "a's id is taken on t"
        );
        assert_eq!(gate.leave("t", "a"), Left::Released { next: None });
        assert!(!gate.is_busy("t"));
        assert!(gate.is_busy("u"));
    }

    #[test]
    fn enqueue_waits_in_order_up_to_the_limit() {
        let gate = ThreadGate::new(Waiting::Cancel).with_max_waiting(2);
        gate.admit(&key("t"), entry("a"), MultitaskStrategy::Enqueue)
            .unwrap();
        for id in ["b", "c"] {
            let admitted = gate
                .admit(&key("t"), entry(id), MultitaskStrategy::Enqueue)
                .unwrap();
            assert!(!admitted.started && admitted.displaced.is_empty());
        }
        let full = gate.admit(&key("t"), entry("d"), MultitaskStrategy::Enqueue);
        assert_eq!(full.unwrap_err(), Refused::Full { waiting: 2 });
        let ids = |v: Vec<Arc<Entry>>| v.iter().map(|e| e.0).collect::<Vec<_>>();
        assert_eq!(ids(gate.waiting("t")), ["b", "c"]);
        assert_eq!(
            gate.leave("t", "a"),
            Left::Released {
                next: Some(entry("b"))
            }
        );
        assert_eq!(gate.active("t"), Some(entry("b")));
        assert_eq!(gate.leave("t", "c"), Left::Withdrawn(entry("c")));
        assert_eq!(gate.leave("t", "c"), Left::Absent);
        assert_eq!(gate.leave("t", "b"), Left::Released { next: None });
        assert!(gate.is_idle());
    }

    #[test]
    fn a_preempting_arrival_cancels_the_waiting_runs_or_keeps_them_preempted() {
        for (waiting, strategy, action) in [
            (
                Waiting::Cancel,
                MultitaskStrategy::Interrupt,
                CancelAction::Interrupt,
            ),
            (
                Waiting::Start,
                MultitaskStrategy::Rollback,
                CancelAction::Rollback,
            ),
        ] {
            let gate = ThreadGate::new(waiting).with_max_waiting(2);
            let (a, b) = (entry("a"), entry("b"));
            gate.admit(&key("t"), a.clone(), MultitaskStrategy::Enqueue)
                .unwrap();
            gate.admit(&key("t"), b.clone(), MultitaskStrategy::Enqueue)
                .unwrap();
            let admitted = gate.admit(&key("t"), entry("c"), strategy).unwrap();
            assert!(!admitted.started);
            assert_eq!(told(&a), [action], "{waiting:?}: the active run is told");
            assert_eq!(told(&b), [action], "{waiting:?}: the waiting run is told");
            let ids = |v: Vec<Arc<Entry>>| v.iter().map(|e| e.0).collect::<Vec<_>>();
            match waiting {
                Waiting::Cancel => {
                    assert_eq!(ids(admitted.displaced), ["b"]);
                    assert_eq!(ids(gate.waiting("t")), ["c"]);
                }
                Waiting::Start => {
                    // b stays, preempted, ahead of c.
                    assert!(admitted.displaced.is_empty());
                    assert_eq!(ids(gate.waiting("t")), ["b", "c"]);
                }
            }
        }
    }

    #[test]
    fn a_refused_arrival_stops_nobody() {
        // Under `Waiting::Start` the queue keeps its entries, so a preempting arrival
        // can find it full: it is refused before the others are told.
        let gate = ThreadGate::new(Waiting::Start).with_max_waiting(1);
        let (a, b) = (entry("a"), entry("b"));
        gate.admit(&key("t"), a.clone(), MultitaskStrategy::Enqueue)
            .unwrap();
        gate.admit(&key("t"), b.clone(), MultitaskStrategy::Enqueue)
            .unwrap();
        let full = gate.admit(&key("t"), entry("c"), MultitaskStrategy::Rollback);
        assert_eq!(full.unwrap_err(), Refused::Full { waiting: 1 });
        assert!(told(&a).is_empty() && told(&b).is_empty());
        // Under `Waiting::Cancel` the same arrival empties the queue and is taken.
        let gate = ThreadGate::new(Waiting::Cancel).with_max_waiting(1);
        gate.admit(&key("t"), entry("a"), MultitaskStrategy::Enqueue)
            .unwrap();
        gate.admit(&key("t"), entry("b"), MultitaskStrategy::Enqueue)
            .unwrap();
        let taken = gate.admit(&key("t"), entry("c"), MultitaskStrategy::Rollback);
        assert_eq!(taken.unwrap().displaced.len(), 1);
    }

    #[test]
    fn cancel_signals_the_active_run_and_withdraws_a_waiting_one() {
        let gate = ThreadGate::new(Waiting::Start);
        let (a, b) = (entry("a"), entry("b"));
        gate.admit(&key("t"), a.clone(), MultitaskStrategy::Enqueue)
            .unwrap();
        gate.admit(&key("t"), b.clone(), MultitaskStrategy::Enqueue)
            .unwrap();
        assert_eq!(
            gate.cancel("t", "a", CancelAction::Interrupt),
            Cancelled::Signalled
        );
        assert_eq!(told(&a), [CancelAction::Interrupt]);
        assert_eq!(
            gate.active("t"),
            Some(a.clone()),
            "it holds the thread until it leaves"
        );
        assert_eq!(
            gate.cancel("t", "b", CancelAction::Rollback),
            Cancelled::Withdrawn(b.clone())
        );
        assert_eq!(told(&b), [CancelAction::Rollback]);
        assert_eq!(
            gate.cancel("t", "x", CancelAction::Interrupt),
            Cancelled::Absent
        );
        assert_eq!(
            gate.cancel("u", "a", CancelAction::Interrupt),
            Cancelled::Absent
        );
        assert_eq!(gate.entries(), vec![a]);
    }
}
