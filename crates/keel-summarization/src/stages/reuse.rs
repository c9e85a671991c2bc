//! Stage 3, reuse: the thread's cached summary, when it still stands for an unchanged
//! prefix and the request built from it fits under every trigger. A hit costs no
//! planning and no model call, only counting what is sent.

use std::ops::ControlFlow;
use std::sync::Arc;

use crate::cache::CachedSummary;
use crate::events::SummarySource;
use crate::middleware::Compactor;
use crate::rules;
use crate::stages::{Assembled, Call, Outcome, Step};

impl Compactor {
    /// Looks the thread up: `Break` when the cached summary serves this call as it is,
    /// else hands on the entry (if any) to fold into. `seen`: the entry an earlier
    /// lookup of this call already tried (after waiting for the single flight only a
    /// *new* entry is worth trying).
    pub(crate) async fn lookup(
        &self,
        call: &Call<'_>,
        seen: Option<&Arc<CachedSummary>>,
    ) -> Step<Option<Arc<CachedSummary>>> {
        let Some(entry) = self.cache().get(&call.key).await else {
            return ControlFlow::Continue(None);
        };
        if !self.matches(call, &entry) {
            return ControlFlow::Continue(None);
        }
        if !call.manual
            && seen.is_none_or(|old| !Arc::ptr_eq(old, &entry))
            && let Some(a) = self.serve(call, &entry, SummarySource::Cache, None)
            && fits(call, &a)
        {
            return ControlFlow::Break(Outcome::Summarized(a));
        }
        ControlFlow::Continue(Some(entry))
    }

    /// True when `entry` still stands for the start of the request's messages: hashed
    /// once per lineage, then trusted while the list only grows.
    pub(crate) fn matches(&self, call: &Call<'_>, entry: &CachedSummary) -> bool {
        let request = &*call.request;
        let (messages, lineage) = (&request.messages, request.lineage());
        let memos = self.memos();
        if messages.len() >= entry.boundary
            && memos
                .get(messages, lineage)
                .is_some_and(|memo| memo.verified(entry))
        {
            return true;
        }
        let matched = entry.matches(messages);
        if matched {
            memos.set_verified(messages, lineage, entry);
        }
        matched
    }

    /// `[summary, *uncovered]` for `entry`, counting only what is sent (counts are
    /// cached per message), or `None` when assembling refuses.
    pub(crate) fn serve(
        &self,
        call: &Call<'_>,
        entry: &CachedSummary,
        source: SummarySource,
        error: Option<String>,
    ) -> Option<Assembled> {
        self.assemble(call, entry, source, 0, error).ok()
    }
}

/// True when the compacted request is under every trigger.
fn fits(call: &Call<'_>, a: &Assembled) -> bool {
    !rules::triggered(
        &call.measured.triggers,
        a.report.tokens_after,
        a.messages.len(),
    )
}
