//! Pair protection: an AI message's tool calls and their tool results travel together.
//!
//! Providers reject a tool result whose call is missing and a tool call without its
//! result (HTTP 400). Every peer has shipped that bug at the cut (LangChain #34282 and #38352, Semantic Kernel
//! #12708, Google ADK #4740),
//! so here it is an *invariant on the final request* ([`check_pairs`]), plus a
//! [`PairIndex`] that compaction uses to only ever cut or move whole bundles.
//!
//! ```
//! use keel_core::message::{Message, ToolCall};
//! use keel_core::pairs::{check_pairs, PairIndex, PairViolation};
//! use serde_json::json;
//!
//! let msgs = vec![
//!     Message::human("list files"),
//!     Message::ai("").with_tool_calls(vec![ToolCall::new("c1", "ls", json!({}))]),
//!     Message::tool("c1", "a.txt"),
//!     Message::ai("done"),
//! ];
//! assert!(check_pairs(&msgs).is_ok());
//! // Cutting between the call and its result is not allowed; the safe cut moves back.
//! let index = PairIndex::new(&msgs);
//! assert!(!index.is_safe_cut(2));
//! assert_eq!(index.safe_cut_back(2), 1);
//! assert_eq!(index.safe_cut_forward(2), 3);
//! assert!(matches!(check_pairs(&msgs[2..]), Err(PairViolation::OrphanResult { .. })));
//! ```

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// FNV-1a ([`crate::hash`]): call ids and indices are short keys and never
/// attacker-chosen in a way that matters here (a collision only slows the index down),
/// so a fast hasher is fine.
type Fnv = BuildHasherDefault<crate::hash::StableHasher>;

use crate::message::Message;

/// Why a message list would be rejected by a provider.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PairViolation {
    /// A tool result with no AI tool call right before it (in the same tool run).
    #[error(
        "message #{index} is a tool result for call {tool_call_id:?}, but no preceding assistant message in its tool run made that call"
    )]
    OrphanResult {
        /// Position in the list.
        index: usize,
        /// The call id it answers.
        tool_call_id: String,
    },
    /// A tool call whose result does not follow its AI message.
    #[error("message #{index} calls tool {tool_call_id:?}, but its result does not follow")]
    MissingResult {
        /// Position of the AI message.
        index: usize,
        /// The unanswered call id.
        tool_call_id: String,
    },
    /// Two results for the same call.
    #[error("message #{index} answers call {tool_call_id:?} a second time")]
    DuplicateResult {
        /// Position of the second result.
        index: usize,
        /// The call id.
        tool_call_id: String,
    },
}

/// Checks the pair invariant as providers enforce it: the results of an AI message's
/// tool calls follow it directly (one tool run, any order), every result answers a call
/// of that AI message, and every call is answered. The only exception is the final AI
/// message's calls when nothing but some of its results follows: those are the pending
/// calls of the current step.
pub fn check_pairs(messages: &[Message]) -> Result<(), PairViolation> {
    check(messages, true)
}

/// Like [`check_pairs`], but a trailing AI message with unanswered calls is a violation too.
pub fn check_pairs_strict(messages: &[Message]) -> Result<(), PairViolation> {
    check(messages, false)
}

fn check(messages: &[Message], allow_pending_tail: bool) -> Result<(), PairViolation> {
    let mut scanner = PairScanner::new();
    let mut first: Option<PairEvent> = None;
    for (index, m) in messages.iter().enumerate() {
        scanner.push(index, m, |e| {
            first.get_or_insert(e);
        });
        if first.is_some() {
            break;
        }
    }
    if first.is_none() && !allow_pending_tail {
        scanner.finish(|e| {
            first.get_or_insert(e);
        });
    }
    match first {
        None => Ok(()),
        Some(PairEvent::OrphanResult {
            index,
            tool_call_id,
            ..
        }) => Err(PairViolation::OrphanResult {
            index,
            tool_call_id,
        }),
        Some(PairEvent::DuplicateResult {
            index,
            tool_call_id,
            ..
        }) => Err(PairViolation::DuplicateResult {
            index,
            tool_call_id,
        }),
        Some(PairEvent::UnansweredCall {
            ai_index,
            tool_call_id,
            ..
        }) => Err(PairViolation::MissingResult {
            index: ai_index,
            tool_call_id,
        }),
        // Only reported by a scanner that tracks issued ids.
        Some(PairEvent::ReusedCallId { .. }) => Ok(()),
    }
}

/// What a [`PairScanner`] finds, at the positions it was given (list indices or file
/// lines).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PairEvent {
    /// A tool result whose call is not in the tool run it sits in. `issued_at`: where the
    /// call was issued earlier, when the scanner tracks issued ids (a late result).
    OrphanResult {
        /// Position of the result.
        index: usize,
        /// The call id it answers.
        tool_call_id: String,
        /// Where the call was issued, if it was (tracking scanners only).
        issued_at: Option<usize>,
    },
    /// A second result for a call of the current tool run.
    DuplicateResult {
        /// Position of the second result.
        index: usize,
        /// The call id.
        tool_call_id: String,
        /// Position of the first result.
        first_at: usize,
    },
    /// A call whose tool run ended without its result.
    UnansweredCall {
        /// Position of the AI message that made the call.
        ai_index: usize,
        /// The call id.
        tool_call_id: String,
        /// The tool's name.
        name: String,
        /// Position of the message that ended the tool run; `None` at the end of the list
        /// (the pending calls of the current step).
        next: Option<usize>,
    },
    /// A tool call id already used by an earlier call (tracking scanners only).
    ReusedCallId {
        /// Position of the AI message reusing the id.
        index: usize,
        /// The id.
        tool_call_id: String,
        /// Where it was first issued.
        first_at: usize,
    },
}

#[derive(Clone, Debug)]
struct OpenCall {
    id: String,
    name: String,
    answered_at: Option<usize>,
}

/// The pair rules as a scan, one message at a time: the one implementation behind
/// [`check_pairs`], session memory's recent window, the agent loop's pending calls and
/// `keel check-transcript` (which reports every finding with its line, so it feeds
/// messages as it reads them and never holds the file).
///
/// ```
/// use keel_core::message::{Message, ToolCall};
/// use keel_core::pairs::{PairEvent, PairScanner};
/// use serde_json::json;
///
/// let msgs = [
///     Message::ai("").with_tool_calls(vec![ToolCall::new("c1", "ls", json!({}))]),
///     Message::human("never mind"),
/// ];
/// let mut found = Vec::new();
/// let mut scanner = PairScanner::new();
/// for (i, m) in msgs.iter().enumerate() {
///     scanner.push(i, m, |e| found.push(e));
/// }
/// scanner.finish(|e| found.push(e));
/// assert!(matches!(&found[..], [PairEvent::UnansweredCall { ai_index: 0, next: Some(1), .. }]));
/// ```
#[derive(Clone, Debug, Default)]
pub struct PairScanner {
    ai_index: usize,
    open: Vec<OpenCall>,
    issued: Option<std::collections::HashMap<String, usize>>,
}

impl PairScanner {
    /// A scanner of the pair rules.
    pub fn new() -> Self {
        Self::default()
    }

    /// A scanner that also remembers every issued call id, to report late results
    /// ([`PairEvent::OrphanResult`] with `issued_at`) and reused ids. Memory grows with
    /// the number of calls.
    pub fn tracking_issued() -> Self {
        PairScanner {
            issued: Some(Default::default()),
            ..Self::default()
        }
    }

    /// Reads the message at position `index`, reporting what it breaks.
    pub fn push(&mut self, index: usize, message: &Message, mut report: impl FnMut(PairEvent)) {
        if let Some(id) = message.tool_call_id() {
            match self.open.iter_mut().find(|c| c.id == id) {
                Some(OpenCall {
                    answered_at: Some(first_at),
                    ..
                }) => report(PairEvent::DuplicateResult {
                    index,
                    tool_call_id: id.to_owned(),
                    first_at: *first_at,
                }),
                Some(call) => call.answered_at = Some(index),
                None => report(PairEvent::OrphanResult {
                    index,
                    tool_call_id: id.to_owned(),
                    issued_at: self.issued.as_ref().and_then(|m| m.get(id).copied()),
                }),
            }
            return;
        }
        self.close(Some(index), &mut report);
        let calls = message.tool_calls();
        if calls.is_empty() {
            return;
        }
        self.ai_index = index;
        for call in calls {
            if let Some(issued) = self.issued.as_mut() {
                match issued.get(&call.id) {
                    Some(&first_at) => report(PairEvent::ReusedCallId {
                        index,
                        tool_call_id: call.id.clone(),
                        first_at,
                    }),
                    None => {
                        issued.insert(call.id.clone(), index);
                    }
                }
            }
            self.open.push(OpenCall {
                id: call.id.clone(),
                name: call.name.clone(),
                answered_at: None,
            });
        }
    }

    /// Ends the scan: the calls of the last tool run still unanswered are reported with
    /// `next: None`.
    pub fn finish(mut self, mut report: impl FnMut(PairEvent)) {
        self.close(None, &mut report);
    }

    /// The calls of the current tool run that have no result yet, as `(id, name)`.
    pub fn open_calls(&self) -> impl Iterator<Item = (&str, &str)> {
        self.open
            .iter()
            .filter(|c| c.answered_at.is_none())
            .map(|c| (c.id.as_str(), c.name.as_str()))
    }

    fn close(&mut self, next: Option<usize>, report: &mut impl FnMut(PairEvent)) {
        for call in self.open.drain(..) {
            if call.answered_at.is_none() {
                report(PairEvent::UnansweredCall {
                    ai_index: self.ai_index,
                    tool_call_id: call.id,
                    name: call.name,
                    next,
                });
            }
        }
    }
}

/// The calls of the last AI message that no tool result after it answers: what the
/// agent loop still has to run.
pub fn pending_calls(messages: &[Message]) -> Vec<&crate::message::ToolCall> {
    let Some(ai) = messages.iter().rposition(|m| !m.tool_calls().is_empty()) else {
        return Vec::new();
    };
    if messages[ai + 1..].iter().any(|m| m.is_ai()) {
        return Vec::new();
    }
    let answered: Vec<&str> = messages[ai + 1..]
        .iter()
        .filter_map(Message::tool_call_id)
        .collect();
    messages[ai]
        .tool_calls()
        .iter()
        .filter(|c| !answered.contains(&c.id.as_str()))
        .collect()
}

/// Which messages belong together, computed once per message list.
///
/// A cut at `c` means `messages[..c]` go one way and `messages[c..]` the other. A cut is
/// safe when no AI message and one of its results lie on different sides. The index
/// also knows each AI message's results, so a rescued AI message always moves together
/// with all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairIndex {
    unsafe_cut: Vec<bool>,
    /// `results[result_start[ai]..result_start[ai + 1]]` are the results of `ai`, ascending.
    result_start: Vec<usize>,
    results: Vec<usize>,
    caller: Vec<Option<usize>>,
    /// Messages that cannot be paired in the input: results with no earlier call, and
    /// AI messages with a call that is never answered. Ascending.
    unpaired: Vec<usize>,
}

impl PairIndex {
    /// Indexes `messages`. A result is paired with the latest earlier AI message that
    /// made its call; results with no such message stay unpaired (orphans in the input).
    ///
    /// One pass, built for long cold threads. A tool run that answers exactly the calls
    /// of the AI message before it (the usual case) is recognised from the messages'
    /// cached [`Digest`](crate::message::Digest)s without reading an id. Other
    /// results are matched by id: first against the latest AI message's calls, and only
    /// a result that answers an older message makes the index hash the call ids seen
    /// so far.
    pub fn new(messages: &[Message]) -> Self {
        Self::with_visitor(messages, |_, _| {})
    }

    /// [`new`](Self::new), calling `visit(index, message)` on every message during the
    /// same pass, so a caller that also scans the thread reads each message once.
    pub fn with_visitor(messages: &[Message], mut visit: impl FnMut(usize, &Message)) -> Self {
        let n = messages.len();
        let mut b = Builder {
            messages,
            caller: vec![None; n],
            diff: vec![0i64; n + 2],
            callers: Vec::new(),
            answered: Vec::new(),
            unpaired: Vec::new(),
            results_per_ai: vec![0usize; n + 1],
            by_id: HashMap::default(),
            indexed: 0,
        };
        // The tool run after the latest AI message with calls: its results so far and
        // the sum of their call-id hashes.
        let mut run: Vec<usize> = Vec::new();
        let mut run_sum = 0u64;
        for (i, m) in messages.iter().enumerate() {
            visit(i, m);
            if m.is_tool() {
                if b.callers.is_empty() {
                    b.pair_exact(i);
                } else {
                    run_sum = run_sum.wrapping_add(m.digest().call_ids);
                    run.push(i);
                }
                continue;
            }
            b.close_run(&mut run, run_sum);
            run_sum = 0;
            let calls = m.tool_calls().len();
            if calls > 0 {
                b.callers.push((i, b.answered.len()));
                b.answered.resize(b.answered.len() + calls, false);
            }
        }
        b.close_run(&mut run, run_sum);
        b.finish()
    }

    /// The number of messages indexed.
    pub fn len(&self) -> usize {
        self.unsafe_cut.len().saturating_sub(1)
    }

    /// True when no message is indexed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Extends an index of `messages[..self.len()]` to all of `messages`, the same index
    /// [`new`](Self::new) would build on the whole list, indexing only the new messages
    /// and the tool run they may continue. The caller guarantees that the indexed
    /// messages are still the list's prefix (an append-only list, see
    /// [`Lineage`](crate::state::Lineage)); a shorter list is indexed from scratch.
    ///
    /// The messages from the last non-tool message before the old end are indexed
    /// again on their own and spliced in. That is exact unless a new result answers a
    /// call made before that point (a late or orphan result): the suffix then reports it
    /// unpaired, and the whole list is indexed from scratch instead.
    pub fn extend(&mut self, messages: &[Message]) {
        let old = self.len();
        if messages.len() < old {
            *self = Self::new(messages);
            return;
        }
        if messages.len() == old {
            return;
        }
        // Restart at the last non-tool message before the old end: usually the AI
        // message whose results are arriving. No tool run straddles that point, and the
        // run before it was closed there in the old index too.
        let mut start = old;
        while start > 0 && messages[start - 1].is_tool() {
            start -= 1;
        }
        let start = start.saturating_sub(1);
        let suffix = Self::new(&messages[start..]);
        if suffix
            .unpaired
            .iter()
            .any(|&i| messages[start + i].is_tool())
        {
            *self = Self::new(messages);
            return;
        }
        self.unsafe_cut.truncate(start);
        self.unsafe_cut.extend_from_slice(&suffix.unsafe_cut);
        self.caller.truncate(start);
        self.caller
            .extend(suffix.caller.iter().map(|c| c.map(|ai| ai + start)));
        let base = self.result_start.get(start).copied().unwrap_or(0);
        self.results.truncate(base);
        self.results
            .extend(suffix.results.iter().map(|&r| r + start));
        self.result_start.truncate(start);
        self.result_start
            .extend(suffix.result_start.iter().map(|&k| k + base));
        self.unpaired.retain(|&i| i < start);
        self.unpaired
            .extend(suffix.unpaired.iter().map(|&i| i + start));
    }

    /// True when cutting before `cut` separates no AI message from its results.
    pub fn is_safe_cut(&self, cut: usize) -> bool {
        !self.unsafe_cut.get(cut).copied().unwrap_or(false)
    }

    /// The largest safe cut `<= cut` (0 is always safe).
    pub fn safe_cut_back(&self, cut: usize) -> usize {
        let mut c = cut.min(self.unsafe_cut.len().saturating_sub(1));
        while c > 0 && self.unsafe_cut[c] {
            c -= 1;
        }
        c
    }

    /// The smallest safe cut `>= cut` (the end is always safe).
    pub fn safe_cut_forward(&self, cut: usize) -> usize {
        let end = self.unsafe_cut.len().saturating_sub(1);
        let mut c = cut.min(end);
        while c < end && self.unsafe_cut[c] {
            c += 1;
        }
        c
    }

    /// The last message that cannot be paired in the input (a result without its call,
    /// or an AI message with an unanswered call), ignoring the AI message at
    /// `pending_tail` (the pending calls of the current step).
    pub fn last_unpaired(&self, pending_tail: Option<usize>) -> Option<usize> {
        self.unpaired
            .iter()
            .rev()
            .copied()
            .find(|&i| Some(i) != pending_tail)
    }

    /// Adjusts a cut so that the kept side (`messages[cut..]`) holds no orphan: first back
    /// to the AI message of a tool run it would split (keeping more, as LangChain does),
    /// then, if the input itself has unpairable messages at or after the cut, forward
    /// past the last of them.
    pub fn adjust_cut(&self, cut: usize, pending_tail: Option<usize>) -> usize {
        let c = self.safe_cut_back(cut);
        match self.last_unpaired(pending_tail) {
            Some(u) if u >= c => self.safe_cut_forward(u + 1),
            _ => c,
        }
    }

    /// The results of the AI message at `ai` (empty for other messages).
    pub fn results_of(&self, ai: usize) -> &[usize] {
        match (self.result_start.get(ai), self.result_start.get(ai + 1)) {
            (Some(&start), Some(&end)) => &self.results[start..end],
            _ => &[],
        }
    }

    /// The AI message that issued the call a tool result at `index` answers.
    pub fn caller_of(&self, index: usize) -> Option<usize> {
        self.caller.get(index).copied().flatten()
    }

    /// The indices that must move with `index`: an AI message with its results, or a
    /// result with its AI message and that message's other results; else just `index`.
    pub fn bundle(&self, index: usize) -> Vec<usize> {
        let head = self.caller_of(index).unwrap_or(index);
        let mut out = vec![head];
        out.extend_from_slice(self.results_of(head));
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// The state of [`PairIndex::with_visitor`]'s single pass.
struct Builder<'m> {
    messages: &'m [Message],
    caller: Vec<Option<usize>>,
    /// Difference array: +1 at ai+1, -1 at result+1 marks cuts in (ai, result] unsafe.
    diff: Vec<i64>,
    /// AI messages with calls, in order, with the number of their first call among all
    /// calls; `answered[k]` says whether call number k got a result.
    callers: Vec<(usize, usize)>,
    answered: Vec<bool>,
    unpaired: Vec<usize>,
    results_per_ai: Vec<usize>,
    /// Call id -> (AI index, first call number), built lazily up to `indexed` callers.
    by_id: HashMap<&'m str, (usize, usize), Fnv>,
    indexed: usize,
}

impl<'m> Builder<'m> {
    fn link(&mut self, result: usize, ai: usize) {
        self.caller[result] = Some(ai);
        self.results_per_ai[ai] += 1;
        self.diff[ai + 1] += 1;
        self.diff[result + 1] -= 1;
    }

    /// Ends the tool run after the latest AI message. The usual run answers exactly that
    /// message's calls: as many results as calls, with the same sum of call-id hashes
    /// (each message's [`Digest`](crate::message::Digest)), so no id string is read.
    /// Any other run is paired result by result, comparing ids.
    fn close_run(&mut self, run: &mut Vec<usize>, sum: u64) {
        if run.is_empty() {
            return;
        }
        if let Some(&(ai, base)) = self.callers.last() {
            let calls = self.messages[ai].tool_calls().len();
            if run.len() == calls && sum == self.messages[ai].digest().call_ids {
                for &r in run.iter() {
                    self.link(r, ai);
                }
                self.answered[base..base + calls].fill(true);
                run.clear();
                return;
            }
        }
        for r in std::mem::take(run) {
            self.pair_exact(r);
        }
    }

    /// Pairs the result at `i` with the latest earlier AI message that made its call.
    fn pair_exact(&mut self, i: usize) {
        let messages = self.messages;
        let Some(id) = messages[i].tool_call_id() else {
            return;
        };
        let latest = self
            .callers
            .last()
            .copied()
            .filter(|&(a, _)| messages[a].tool_calls().iter().any(|c| c.id == id));
        let found = latest.or_else(|| {
            for &(a, base) in &self.callers[self.indexed..] {
                for c in messages[a].tool_calls() {
                    self.by_id.insert(c.id.as_str(), (a, base));
                }
            }
            self.indexed = self.callers.len();
            self.by_id.get(id).copied()
        });
        let Some((ai, base)) = found else {
            self.unpaired.push(i);
            return;
        };
        for (k, c) in messages[ai].tool_calls().iter().enumerate() {
            if c.id == id {
                self.answered[base + k] = true;
            }
        }
        self.link(i, ai);
    }

    fn finish(self) -> PairIndex {
        let Builder {
            messages,
            caller,
            diff,
            callers,
            answered,
            mut unpaired,
            results_per_ai,
            ..
        } = self;
        let n = messages.len();
        for (j, &(ai, base)) in callers.iter().enumerate() {
            let end = callers.get(j + 1).map_or(answered.len(), |&(_, b)| b);
            if !answered[base..end].iter().all(|&a| a) {
                unpaired.push(ai);
            }
        }
        unpaired.sort_unstable();
        // Results grouped by AI message (counting sort keeps each group ascending).
        let mut result_start = Vec::with_capacity(n + 1);
        let mut total = 0usize;
        for count in &results_per_ai {
            result_start.push(total);
            total += count;
        }
        let mut results = vec![0usize; total];
        let mut next = result_start.clone();
        for (i, c) in caller.iter().enumerate() {
            if let Some(ai) = *c {
                results[next[ai]] = i;
                next[ai] += 1;
            }
        }
        let mut unsafe_cut = vec![false; n + 1];
        let mut depth = 0i64;
        for (c, flag) in unsafe_cut.iter_mut().enumerate() {
            depth += diff[c];
            *flag = depth > 0;
        }
        PairIndex {
            unsafe_cut,
            result_start,
            results,
            caller,
            unpaired,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::ai;

    #[test]
    fn parallel_calls_any_order() {
        let msgs = vec![
            Message::human("q"),
            ai(&["a", "b"]),
            Message::tool("b", "1"),
            Message::tool("a", "2"),
            Message::ai("x"),
        ];
        assert!(check_pairs_strict(&msgs).is_ok());
        let idx = PairIndex::new(&msgs);
        assert!(
            idx.is_safe_cut(1) && !idx.is_safe_cut(2) && !idx.is_safe_cut(3) && idx.is_safe_cut(4)
        );
        assert_eq!(idx.bundle(3), vec![1, 2, 3]);
    }

    #[test]
    fn missing_and_pending() {
        let msgs = vec![
            Message::human("q"),
            ai(&["a", "b"]),
            Message::tool("a", "1"),
        ];
        assert!(
            check_pairs(&msgs).is_ok(),
            "pending call of the current step"
        );
        assert!(matches!(
            check_pairs_strict(&msgs),
            Err(PairViolation::MissingResult { index: 1, .. })
        ));
        let mut more = msgs.clone();
        more.push(Message::human("next"));
        assert!(matches!(
            check_pairs(&more),
            Err(PairViolation::MissingResult { index: 1, .. })
        ));
    }

    /// The definition, quadratic: a result pairs with the latest earlier AI message that
    /// made its call.
    fn reference(msgs: &[Message]) -> (Vec<Option<usize>>, Vec<usize>, Vec<bool>) {
        let caller: Vec<Option<usize>> = msgs
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let id = m.tool_call_id()?;
                (0..i)
                    .rev()
                    .find(|&a| msgs[a].tool_calls().iter().any(|c| c.id == id))
            })
            .collect();
        let mut unpaired = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            if m.is_tool() && caller[i].is_none() {
                unpaired.push(i);
            }
            let unanswered = m.tool_calls().iter().any(|c| {
                !(0..msgs.len())
                    .any(|r| caller[r] == Some(i) && msgs[r].tool_call_id() == Some(&c.id))
            });
            if unanswered {
                unpaired.push(i);
            }
        }
        let safe = (0..=msgs.len())
            .map(|cut| {
                !caller
                    .iter()
                    .enumerate()
                    .any(|(r, a)| a.is_some_and(|a| a < cut && cut <= r))
            })
            .collect();
        (caller, unpaired, safe)
    }

    /// Messages from a generated script: 0: human, 1: AI with calls (ids may repeat
    /// across and within messages), 2: tool result, 3: plain AI.
    fn scripted(script: &[(u8, u8, usize)]) -> Vec<Message> {
        script
            .iter()
            .map(|&(kind, id, calls)| match kind {
                0 => Message::human("q"),
                1 => ai(&(0..calls)
                    .map(|k| ["a", "b", "c", "d", "e"][(usize::from(id) + k * k) % 5])
                    .collect::<Vec<_>>()),
                2 => Message::tool(["a", "b", "c", "d", "e"][usize::from(id)], "r"),
                _ => Message::ai("x"),
            })
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn index_matches_the_definition(
            script in proptest::collection::vec((0u8..4, 0u8..5, 1usize..4), 0..40)
        ) {
            let msgs = scripted(&script);
            let idx = PairIndex::new(&msgs);
            let (caller, unpaired, safe) = reference(&msgs);
            for (i, want) in caller.iter().enumerate() {
                proptest::prop_assert_eq!(idx.caller_of(i), *want);
                let results: Vec<usize> =
                    (0..msgs.len()).filter(|&r| caller[r] == Some(i)).collect();
                proptest::prop_assert_eq!(idx.results_of(i), results.as_slice());
            }
            proptest::prop_assert_eq!(&idx.unpaired, &unpaired);
            for (cut, want) in safe.iter().enumerate() {
                proptest::prop_assert_eq!(idx.is_safe_cut(cut), *want, "cut {}", cut);
            }
        }
    }

    proptest::proptest! {
        /// Extending an index, in any number of steps, builds the index of the whole list.
        #[test]
        fn extending_matches_indexing_at_once(
            script in proptest::collection::vec((0u8..4, 0u8..5, 1usize..4), 0..40),
            steps in proptest::collection::vec(0usize..40, 0..6),
        ) {
            let msgs = scripted(&script);
            let mut ends: Vec<usize> = steps.iter().map(|&k| k.min(msgs.len())).collect();
            ends.sort_unstable();
            ends.push(msgs.len());
            let mut idx = PairIndex::new(&[]);
            for end in ends {
                idx.extend(&msgs[..end]);
                proptest::prop_assert_eq!(&idx, &PairIndex::new(&msgs[..end]), "end {}", end);
            }
        }
    }

    /// The usual agent step: an AI message with calls, then its results one by one.
    #[test]
    fn extending_through_a_tool_run() {
        let msgs = [
            Message::human("q"),
            ai(&["a", "b"]),
            Message::tool("a", "1"),
            Message::tool("b", "2"),
            Message::ai("done"),
            ai(&["c"]),
            Message::tool("c", "3"),
        ];
        let mut idx = PairIndex::new(&[]);
        for end in 0..=msgs.len() {
            idx.extend(&msgs[..end]);
            assert_eq!(idx, PairIndex::new(&msgs[..end]), "end {end}");
        }
        assert_eq!(idx.len(), msgs.len());
    }

    #[test]
    fn result_after_another_message_is_orphan() {
        let msgs = vec![ai(&["a"]), Message::human("hi"), Message::tool("a", "1")];
        assert!(matches!(
            check_pairs(&msgs),
            Err(PairViolation::MissingResult { index: 0, .. })
        ));
        assert!(matches!(
            check_pairs(&msgs[1..]),
            Err(PairViolation::OrphanResult { index: 1, .. })
        ));
        let dup = vec![ai(&["a"]), Message::tool("a", "1"), Message::tool("a", "1")];
        assert!(matches!(
            check_pairs(&dup),
            Err(PairViolation::DuplicateResult { index: 2, .. })
        ));
    }
}
