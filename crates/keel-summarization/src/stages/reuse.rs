//! Stage 3, reuse: the thread's cached summary, when it still stands for an unchanged
//! prefix and the request built from it fits under every trigger. A hit costs no
//! planning and no model call, only counting what is sent.

use std::sync::Arc;

use crate::cache::CachedSummary;
use crate::events::SummarySource;
use crate::middleware::{Compactor, Prepared};
use crate::plan;
use crate::stages::Call;

/// The outcome of a cache lookup.
pub(crate) enum Lookup {
    /// The cached summary serves this call as it is.
    Hit(Box<Prepared>),
    /// Plan a new cut; the entry (if any) is the previous summary to fold into.
    Miss(Option<Arc<CachedSummary>>),
}

impl Compactor {
    /// Looks the thread up. `seen`: the entry an earlier lookup of this call already
    /// tried (after waiting for the single flight only a *new* entry is worth trying).
    pub(crate) async fn lookup(
        &self,
        call: &Call<'_>,
        seen: Option<&Arc<CachedSummary>>,
    ) -> Lookup {
        let Some(entry) = self.cache.get(&call.key).await else {
            return Lookup::Miss(None);
        };
        if !self.matches(call, &entry) {
            return Lookup::Miss(None);
        }
        if !call.manual
            && seen.is_none_or(|old| !Arc::ptr_eq(old, &entry))
            && let Some(p) = self.reuse(call, &entry, SummarySource::Cache, None)
            && fits(call, &p)
        {
            self.emit_compacted(call.request, &p.report);
            return Lookup::Hit(Box::new(p));
        }
        Lookup::Miss(Some(entry))
    }

    /// True when `entry` still stands for the start of the request's messages: hashed
    /// once per lineage, then trusted while the list only grows.
    pub(crate) fn matches(&self, call: &Call<'_>, entry: &CachedSummary) -> bool {
        let request = call.request;
        let (messages, lineage) = (&request.messages, request.lineage());
        if messages.len() >= entry.boundary
            && self
                .threads
                .get(messages, lineage)
                .is_some_and(|memo| memo.verified(entry))
        {
            return true;
        }
        let matched = entry.matches(messages);
        if matched {
            self.threads.set_verified(messages, lineage, entry);
        }
        matched
    }

    /// `[summary, *uncovered]` for `entry`, counting only what is sent (counts are
    /// cached per message), or `None` when assembling refuses.
    pub(crate) fn reuse(
        &self,
        call: &Call<'_>,
        entry: &CachedSummary,
        source: SummarySource,
        error: Option<String>,
    ) -> Option<Prepared> {
        let messages = &call.request.messages;
        let counter = call.counter.as_ref();
        self.assemble(
            call,
            &|i| counter.count_message(&messages[i]),
            entry,
            source,
            0,
            error,
        )
        .ok()
    }
}

/// True when the compacted request is under every trigger.
fn fits(call: &Call<'_>, p: &Prepared) -> bool {
    !plan::triggered(
        &call.measured.triggers,
        p.report.tokens_after,
        p.request.messages.len(),
    )
}
