//! Speculative summaries (`precompute_at`): the summary a thread's crossing call will
//! need, written before that call, so it waits for no summary model.
//!
//! After a call whose request reached `precompute_at` x a trigger (uncompressed on a
//! thread never compacted, or `[summary, *recent]` on one that was), the middleware
//! plans the cut the crossing call would make and folds what it evicts into the
//! thread's summary, as the blocking path does, then caches the result marked
//! `precomputed`. The crossing call then finds it in the cache ([`reuse`]) and sends it
//! with every message since verbatim; a call that arrives while it is being written
//! waits for it through the thread's single flight instead of writing its own. Only
//! when no precomputed summary can serve does the blocking path run, and only then is
//! `context_compacting` emitted.
//!
//! - **Single flight per thread**: one background summary per thread in process; the
//!   thread's summary gate is taken without waiting (a blocking summary in progress
//!   wins), and processes sharing a summary store take its lease on the cache key
//!   ([`SummaryStore::try_lease`](keel_core::store::SummaryStore::try_lease)).
//! - **Bounded**: at most `precompute_max_concurrent` background summaries per process
//!   for each setting; a thread that finds them all busy is summarized when it crosses.
//! - **Cancelled** when the thread is deleted, before its summaries are purged.
//! - The extractive summarizer costs no model call: its speculative summary is written
//!   inline, which keeps replays deterministic.
//!
//! [`reuse`]: crate::stages::reuse

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use keel_core::message::new_id;
use keel_core::middleware::ModelRequest;
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::cache::FlightGuard;
use crate::events::SummarySource;
use crate::middleware::{Action, CompactionReport, Compactor};
use crate::rules;
use crate::stages::Call;

/// A running background summary: its number and its task.
type Running = (u64, JoinHandle<()>);

/// Background summaries of one middleware: what runs, for which thread.
pub(crate) struct Precompute {
    permits: Arc<Semaphore>,
    /// Thread id to its running task (with a number, so a finished task removes only
    /// its own entry).
    running: Arc<Mutex<HashMap<String, Running>>>,
    next: AtomicU64,
    written: AtomicU64,
    /// This middleware's name as a lease holder (unique per process and instance).
    pub(crate) holder: String,
    /// Per cache key, what the thread sent right after its summary last changed
    /// (tokens, messages): the floor the next speculative summary is timed from.
    bases: Mutex<lru::LruCache<String, (u64, usize)>>,
}

impl Precompute {
    pub(crate) fn new(max_concurrent: usize) -> Self {
        Precompute {
            permits: global_permits(max_concurrent),
            running: Arc::default(),
            next: AtomicU64::new(0),
            written: AtomicU64::new(0),
            holder: format!("keel-{}-{}", std::process::id(), new_id()),
            bases: Mutex::new(lru::LruCache::new(BASES)),
        }
    }

    /// Background summaries written so far.
    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Waits for the thread's background summary, if one runs.
    pub(crate) async fn settle(&self, thread: &str) {
        let task = self.running.lock().remove(thread);
        if let Some((_, handle)) = task {
            let _ = handle.await;
        }
    }

    /// Stops the thread's background summary and waits until it has stopped.
    pub(crate) async fn cancel(&self, thread: &str) {
        let task = self.running.lock().remove(thread);
        if let Some((_, handle)) = task {
            handle.abort();
            let _ = handle.await;
        }
    }
}

/// The process-wide permits for one `precompute_max_concurrent`, shared by middleware
/// rebuilt every run (as DeerFlow rebuilds its middleware).
fn global_permits(n: usize) -> Arc<Semaphore> {
    static GLOBAL: OnceLock<Mutex<HashMap<usize, Arc<Semaphore>>>> = OnceLock::new();
    GLOBAL
        .get_or_init(Default::default)
        .lock()
        .entry(n)
        .or_insert_with(|| Arc::new(Semaphore::new(n)))
        .clone()
}

/// How many threads' floors a middleware remembers.
const BASES: std::num::NonZeroUsize = match std::num::NonZeroUsize::new(4096) {
    Some(n) => n,
    None => std::num::NonZeroUsize::MIN,
};

impl Compactor {
    /// After a call: starts the thread's speculative summary when what was sent reached
    /// `precompute_at` x a trigger and is still under every trigger.
    pub(crate) async fn maybe_precompute(
        core: &Arc<Compactor>,
        request: &ModelRequest,
        report: &CompactionReport,
    ) {
        let Some(share) = core.precompute_at() else {
            return;
        };
        if !core.enabled()
            || !matches!(
                report.action,
                Action::PassThrough | Action::CacheReused | Action::Compacted
            )
        {
            return;
        }
        let Some(key) = Self::precompute_key(core, request, report, share) else {
            return;
        };
        let thread = request.runtime.thread_id.to_string();
        if core
            .precompute()
            .running
            .lock()
            .contains_key(thread.as_str())
        {
            return;
        }
        if core.dangles(request) {
            // The crossing call answers them first; a summary planned now would not match.
            return;
        }
        // The thread's gate is taken now, so a crossing call that comes before the task
        // runs waits for this summary instead of writing its own.
        let Some(flight) = core.cache().try_single_flight(&key) else {
            return;
        };
        if core.summarizer().is_extractive() {
            // Boxed: a call that writes no summary ahead never carries its state.
            Box::pin(core.precompute_once(request.clone(), key, share)).await;
            drop(flight);
            return;
        }
        Self::spawn_precompute(core, request, key, share, flight, thread);
    }

    /// The thread's cache key when what was sent reached `precompute_at` x a trigger
    /// above the thread's floor (the size right after its last compaction) and is still
    /// under every trigger; a compacted call records the floor.
    fn precompute_key(
        core: &Arc<Compactor>,
        request: &ModelRequest,
        report: &CompactionReport,
        share: f64,
    ) -> Option<String> {
        let triggers = core.resolve_triggers(request.model.profile().max_input_tokens);
        let (tokens, messages) = (report.tokens_after, report.messages_after);
        let compacted = report.action == Action::Compacted;
        // A floor only raises the threshold: a call not near it from zero needs no key
        // (most calls of a thread, so the pass-through path stays cheap).
        if !compacted
            && (rules::triggered(&triggers, tokens, messages)
                || !rules::near_trigger(&triggers, share, (0, 0), tokens, messages))
        {
            return None;
        }
        let counter = core.counter_for(request.model.profile());
        let key = core.cache_key(&request.runtime.thread_id, request, counter.as_ref());
        if compacted {
            core.precompute()
                .bases
                .lock()
                .put(key.clone(), (tokens, messages));
        }
        let base = core
            .precompute()
            .bases
            .lock()
            .get(&key)
            .copied()
            .unwrap_or((0, 0));
        if rules::triggered(&triggers, tokens, messages)
            || !rules::near_trigger(&triggers, share, base, tokens, messages)
        {
            return None;
        }
        Some(key)
    }

    /// Runs the speculative summary in a background task holding the thread's gate and
    /// one of the process's slots; with every slot busy, the crossing call summarizes.
    fn spawn_precompute(
        core: &Arc<Compactor>,
        request: &ModelRequest,
        key: String,
        share: f64,
        flight: FlightGuard,
        thread: String,
    ) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Ok(permit) = core.precompute().permits.clone().try_acquire_owned() else {
            tracing::debug!(thread_id = %thread, "summarization: every background summary slot is busy; the crossing call will summarize");
            return;
        };
        let mut running = core.precompute().running.lock();
        if running.contains_key(thread.as_str()) {
            return;
        }
        let id = core.precompute().next.fetch_add(1, Ordering::Relaxed);
        let task_core = core.clone();
        let request = request.clone();
        let task_thread = thread.clone();
        let task = handle.spawn(async move {
            task_core.precompute_once(request, key, share).await;
            drop((flight, permit));
            let mut running = task_core.precompute().running.lock();
            if running.get(&task_thread).is_some_and(|(n, _)| *n == id) {
                running.remove(&task_thread);
            }
        });
        running.insert(thread, (id, task));
    }

    /// Writes and caches the summary the crossing call of `request`'s thread will need,
    /// unless the cached one will still serve it or another process holds the lease.
    /// The caller holds the thread's single-flight gate for `key`.
    async fn precompute_once(&self, request: ModelRequest, key: String, share: f64) {
        let counter = self.counter_for(request.model.profile());
        let measured = self.measure(&request, counter.as_ref());
        let ttl = Duration::from_secs_f64(self.summary_deadline_secs() + 10.0);
        let (cache, holder) = (self.cache(), &self.precompute().holder);
        let lease = cache.try_lease(&key, holder, ttl).await;
        if lease == Some(false) {
            return;
        }
        let mut call = Call::new(&request, counter, measured);
        call.key = key;
        call.background = true;
        self.precompute_for(&mut call, share).await;
        cache.release_lease(&call.key, holder).await;
    }

    async fn precompute_for(&self, call: &mut Call<'_>, share: f64) {
        let (cache, precompute) = (self.cache(), self.precompute());
        let cached = match cache.get(&call.key).await {
            Some(entry) if self.matches(call, &entry) => Some(entry),
            _ => None,
        };
        // What the thread sends today: the whole request, or `[summary, *recent]`.
        let mut sent = (call.measured.total, call.request.messages.len());
        let base = precompute
            .bases
            .lock()
            .get(&call.key)
            .copied()
            .unwrap_or((0, 0));
        if let Some(entry) = &cached
            && let Some(a) = self.serve(call, entry, SummarySource::Cache, None)
        {
            sent = (a.report.tokens_after, a.messages.len());
            if !rules::near_trigger(&call.measured.triggers, share, base, sent.0, sent.1) {
                return;
            }
        }
        let m = &call.measured;
        call.keep = Some(rules::keep_ahead(
            self.keep_policy(),
            m.window,
            &m.triggers,
            sent,
        ));
        let planned = self.plan_cut(call, cached.as_deref());
        if planned.evicts_nothing() {
            return;
        }
        let ControlFlow::Continue(written) = self.summarize(call, cached.as_ref(), &planned).await
        else {
            return;
        };
        let mut entry = self.new_entry(&call.request, cached.as_deref(), &planned, written.text);
        entry.precomputed = true;
        let entry = cache.put(&call.key, entry).await;
        self.memos()
            .set_verified(&call.request.messages, call.request.lineage(), &entry);
        if let Some(a) = self.serve(call, &entry, SummarySource::Cache, None) {
            let floor = (a.report.tokens_after, a.messages.len());
            precompute.bases.lock().put(call.key.clone(), floor);
        }
        precompute.written.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            thread_id = %call.request.runtime.thread_id,
            boundary = entry.boundary,
            "summarization: speculative summary written"
        );
    }
}
