//! The rule book: triggers, the keep policy, rescue, stickiness headroom and the trim
//! budget, as pure functions of the messages, their token counts and the settings.
//!
//! The stages ([`crate::stages`]) apply these rules to one call; nothing here reads
//! the middleware's state. The part users call (the LangChain split and the latest
//! user message) is public as [`crate::plan`].

use std::borrow::Cow;
use std::collections::BTreeSet;

use keel_core::message::{DYNAMIC_CONTEXT, Message, tool_name_bits};
use keel_core::tokens::TokenCounter;
use keel_tokens::ApproximateCounter;

use crate::SUMMARY_NAME;
use crate::cache::{PREFIX_SEED, fold_step};
use crate::config::ContextSize;
use keel_core::pairs::PairIndex;

/// LangChain's fallback when a fraction `keep` cannot be resolved.
pub(crate) const DEFAULT_MESSAGES_TO_KEEP: u64 = 20;

/// `keep` over this is the share that stickiness headroom may never shrink the kept tail
/// below (see [`Planner::floor_cut`]): one half.
const KEEP_FLOOR_DIVISOR: u64 = 2;

/// A trigger or keep size with fractions resolved against a context window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Limit {
    /// Tokens.
    Tokens(u64),
    /// Messages.
    Messages(u64),
}

/// Resolves `size` against the context window; `None` for a fraction with no window.
pub(crate) fn resolve(size: ContextSize, max_input_tokens: Option<u64>) -> Option<Limit> {
    match size {
        ContextSize::Tokens(t) => Some(Limit::Tokens(t)),
        ContextSize::Messages(m) => Some(Limit::Messages(m)),
        ContextSize::Fraction(f) => {
            max_input_tokens.map(|w| Limit::Tokens(ContextSize::fraction_tokens(f, w)))
        }
    }
}

/// True when any trigger is reached (`>=`): `tokens` counts the whole request.
pub(crate) fn triggered(triggers: &[Limit], tokens: u64, messages: usize) -> bool {
    triggers.iter().any(|t| match *t {
        Limit::Tokens(n) => tokens >= n,
        Limit::Messages(n) => messages as u64 >= n,
    })
}

/// The index of the latest real user message: a human message that is not a summary
/// and not a dynamic-context reminder.
pub fn latest_user_message(messages: &[Message]) -> Option<usize> {
    messages
        .iter()
        .rposition(|m| m.is_human() && m.name() != Some(SUMMARY_NAME) && !m.flag(DYNAMIC_CONTEXT))
}

/// The AI message whose calls are pending in the current step: the last non-tool
/// message, when it made tool calls.
pub(crate) fn pending_tail(messages: &[Message]) -> Option<usize> {
    let i = messages.iter().rposition(|m| !m.is_tool())?;
    (!messages[i].tool_calls().is_empty()).then_some(i)
}

/// Suffix sums: `suffix[i]` = tokens of `messages[i..]` (`suffix[n]` = 0). Monotonic by
/// construction, which the keep search needs.
pub(crate) fn suffix_sums(per_message: &[u64]) -> Vec<u64> {
    let mut out = vec![0u64; per_message.len() + 1];
    for i in (0..per_message.len()).rev() {
        out[i] = out[i + 1] + per_message[i];
    }
    out
}

/// The keep policy's raw cut (before pair adjustment), as LangChain computes it:
/// `messages: n` cuts at `len - n` (0 when `len <= n`); `tokens: t` keeps everything when
/// it all fits, else binary-searches the earliest suffix that fits, else keeps only the
/// last message.
pub(crate) fn keep_cut(keep: Limit, suffix: &[u64]) -> usize {
    let n = suffix.len().saturating_sub(1);
    match keep {
        Limit::Messages(k) => n.saturating_sub(usize::try_from(k).unwrap_or(usize::MAX)),
        Limit::Tokens(t) => {
            let t = t.max(1);
            if n == 0 || suffix[0] <= t {
                return 0;
            }
            let (mut left, mut right) = (0usize, n);
            let mut candidate = n;
            while left < right {
                let mid = (left + right) / 2;
                if suffix[mid] <= t {
                    candidate = mid;
                    right = mid;
                } else {
                    left = mid + 1;
                }
            }
            if candidate == n {
                candidate = left;
            }
            if candidate >= n {
                if n == 1 {
                    return 0;
                }
                candidate = n - 1;
            }
            candidate
        }
    }
}

/// The split LangChain 1.5's `SummarizationMiddleware` would make, computed by Keel:
/// with rescue and headroom disabled and LangChain's approximate counter (usage scaling
/// for the trigger, unscaled suffix counts for keep). The one difference is pairing: the
/// kept side never holds an orphan (see [`PairIndex::adjust_cut`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    /// Whether a trigger fired.
    pub triggered: bool,
    /// `messages[..cut]` are summarized, `messages[cut..]` kept.
    pub cut: usize,
}

/// See [`Split`]. A fraction with no context window never triggers (LangChain skips it)
/// and, as `keep`, falls back to the last 20 messages.
pub fn langchain_split(
    messages: &[Message],
    trigger: &[ContextSize],
    keep: ContextSize,
    max_input_tokens: Option<u64>,
) -> Split {
    let counter = ApproximateCounter::langchain();
    let per_message = counter.count_each(messages);
    let total = keel_tokens::scaling::count_with_usage_scaling(&counter, messages);
    let triggers: Vec<Limit> = trigger
        .iter()
        .filter_map(|t| resolve(*t, max_input_tokens))
        .collect();
    if !triggered(&triggers, total, messages.len()) {
        return Split {
            triggered: false,
            cut: 0,
        };
    }
    let keep = resolve(keep, max_input_tokens).unwrap_or(Limit::Messages(DEFAULT_MESSAGES_TO_KEEP));
    let raw = keep_cut(keep, &suffix_sums(&per_message));
    let cut = if raw == 0 {
        0
    } else {
        PairIndex::new(messages).adjust_cut(raw, None)
    };
    Split {
        triggered: true,
        cut,
    }
}

/// Skill-rescue settings (DeerFlow's `preserve_recent_skill_*` keys).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SkillRescue {
    /// How many skill files at most (0 disables).
    pub max_count: u64,
    /// Total token budget of rescued skill bundles.
    pub max_tokens: u64,
    /// A skill read whose result is larger than this is not rescued.
    pub max_tokens_per_skill: u64,
    /// Tool names that read files.
    pub tool_names: Vec<String>,
    /// Where skills live (normalised).
    pub container_path: String,
}

/// What the planner may keep besides the recent window.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RescuePolicy {
    /// Keep the latest real user message.
    pub latest_user_message: bool,
    /// Keep messages flagged `dynamic_context`.
    pub dynamic_context: bool,
    /// Keep recent skill reads.
    pub skills: SkillRescue,
}

impl RescuePolicy {
    /// No rescue at all (LangChain's behaviour).
    #[cfg(test)]
    pub fn none() -> Self {
        RescuePolicy {
            latest_user_message: false,
            dynamic_context: false,
            skills: SkillRescue {
                max_count: 0,
                max_tokens: 0,
                max_tokens_per_skill: 0,
                tool_names: Vec::new(),
                container_path: "/mnt/skills".into(),
            },
        }
    }
}

/// Lexically normalises an absolute path (`//`, `.`, `..`, trailing `/`); `None` for a
/// relative path.
pub(crate) fn normalize_path(path: &str) -> Option<String> {
    let path = path.trim();
    if !path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// The normalised skill path a tool call reads, if it is a skill read.
#[cfg(test)]
pub(crate) fn skill_path(
    call: &keel_core::message::ToolCall,
    skills: &SkillRescue,
) -> Option<String> {
    skill_path_under(call, skills, &normalize_path(&skills.container_path)?)
}

/// [`skill_path`] with the container path already normalised (planning calls this once
/// per tool call, so the root is normalised once per plan).
fn skill_path_under(
    call: &keel_core::message::ToolCall,
    skills: &SkillRescue,
    root: &str,
) -> Option<String> {
    if !skills.tool_names.contains(&call.name) {
        return None;
    }
    let raw = ["path", "file_path", "filepath"]
        .iter()
        .find_map(|k| call.args.get(*k).and_then(|v| v.as_str()))?;
    // Most paths are already normal (absolute, no empty, `.` or `..` segment): compare
    // them as they are and allocate only for a skill read. A planning pass looks at every
    // file read of the thread, so this is most of what it spends on them.
    let trimmed = raw.trim();
    let normal = trimmed.starts_with('/')
        && !trimmed
            .as_bytes()
            .windows(2)
            .any(|w| w[0] == b'/' && (w[1] == b'/' || w[1] == b'.'));
    if normal {
        let p = match trimmed.strip_suffix('/') {
            Some(p) if !p.is_empty() => p,
            _ => trimmed,
        };
        return under_root(p, root).then(|| p.to_owned());
    }
    // Normalising only drops segments, so a path under the root names the root's last
    // segment somewhere; most file reads do not, and skip the allocation.
    let last = root.rsplit('/').next().unwrap_or("");
    if !last.is_empty() && !raw.contains(last) {
        return None;
    }
    let p = normalize_path(raw)?;
    under_root(&p, root).then_some(p)
}

/// Whether the normalised path `p` is the normalised `root` or lies under it.
fn under_root(p: &str, root: &str) -> bool {
    p == root
        || root == "/"
        || (p.len() > root.len() && p.starts_with(root) && p.as_bytes()[root.len()] == b'/')
}

/// A skill read: (AI index, bundle indices, skill paths, bundle tokens, largest skill
/// result in tokens).
type SkillBundle = (usize, Vec<usize>, BTreeSet<String>, u64, u64);

/// What planning needs to know about a whole message list: which messages belong
/// together ([`PairIndex`]), the dynamic-context messages and the skill reads. Built in
/// one pass, and [`extend`](Self::extend)ed as an append-only list grows, so that the
/// first compaction of a long thread does not have to read the whole thread again.
#[derive(Clone, Debug)]
pub(crate) struct PlanIndex {
    pairs: PairIndex,
    /// Messages flagged `dynamic_context` (when the policy rescues them), ascending.
    dynamic: Vec<usize>,
    /// AI messages that read skill files, ascending: (index, [(call number, path)]).
    skill_reads: Vec<(usize, Vec<(usize, String)>)>,
    /// `prefix[i]`: the state of the summary cache's prefix hash after `messages[..i]`,
    /// so a summary's prefix hash costs nothing once the list is indexed.
    prefix: Vec<u64>,
    /// What the policy says to look for, worked out once for the list's life.
    facts: Facts,
}

impl PlanIndex {
    /// Indexes `messages` for `policy`.
    pub fn new(messages: &[Message], policy: &RescuePolicy) -> Self {
        // One pass over the thread: the pair index, skill reads and dynamic-context
        // flags are all collected while each message is in cache (on a cold 10,000-message
        // thread, every extra pass is mostly cache misses).
        let facts = Facts::new(policy);
        let mut dynamic = Vec::new();
        let mut skill_reads = Vec::new();
        let mut prefix = Vec::with_capacity(messages.len() + 1);
        prefix.push(PREFIX_SEED);
        let pairs = PairIndex::with_visitor(messages, |i, m| {
            facts.visit(policy, i, m, &mut dynamic, &mut skill_reads);
            prefix.push(fold_step(prefix[i], m.fingerprint()));
        });
        PlanIndex {
            pairs,
            dynamic,
            skill_reads,
            prefix,
            facts,
        }
    }

    /// The summary cache's prefix hash of the first `boundary` indexed messages (see
    /// [`crate::cache::prefix_hash`]).
    pub(crate) fn prefix_hash(&self, boundary: usize) -> Option<u64> {
        Some(self.prefix.get(boundary)? ^ boundary as u64)
    }

    /// Number of messages indexed.
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// True when no message is indexed.
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Extends an index of `messages[..self.len()]` (for the same `policy`) to all of
    /// `messages`, reading only the new messages (see [`PairIndex::extend`]). The caller
    /// guarantees that the indexed messages are still the list's prefix.
    pub fn extend(&mut self, messages: &[Message], policy: &RescuePolicy) {
        let old = self.len();
        if messages.len() < old {
            *self = Self::new(messages, policy);
            return;
        }
        self.pairs.extend(messages);
        for (i, m) in messages.iter().enumerate().skip(old) {
            self.facts
                .visit(policy, i, m, &mut self.dynamic, &mut self.skill_reads);
            self.prefix.push(fold_step(self.prefix[i], m.fingerprint()));
        }
    }
}

/// The per-message part of [`PlanIndex`]: dynamic-context flags and skill reads.
#[derive(Clone, Debug)]
struct Facts {
    /// The normalised skills root, when skill rescue is on.
    root: Option<String>,
    /// [`tool_name_bits`] of the file-reading tools.
    reader_bits: Vec<u64>,
}

impl Facts {
    fn new(policy: &RescuePolicy) -> Self {
        Facts {
            root: normalize_path(&policy.skills.container_path)
                .filter(|_| policy.skills.max_count > 0),
            reader_bits: policy
                .skills
                .tool_names
                .iter()
                .map(|n| tool_name_bits(n))
                .collect(),
        }
    }

    fn visit(
        &self,
        policy: &RescuePolicy,
        i: usize,
        m: &Message,
        dynamic: &mut Vec<usize>,
        skill_reads: &mut Vec<(usize, Vec<(usize, String)>)>,
    ) {
        if policy.dynamic_context && m.flag(DYNAMIC_CONTEXT) {
            dynamic.push(i);
        }
        let Some(root) = self.root.as_deref() else {
            return;
        };
        if m.tool_calls().is_empty() {
            return;
        }
        // A message whose digest rules out every file-reading tool is not looked into.
        let names = m.digest().call_names;
        if !self.reader_bits.iter().any(|&b| b & !names == 0) {
            return;
        }
        let reads: Vec<(usize, String)> = m
            .tool_calls()
            .iter()
            .enumerate()
            .filter_map(|(k, call)| Some((k, skill_path_under(call, &policy.skills, root)?)))
            .collect();
        if !reads.is_empty() {
            skill_reads.push((i, reads));
        }
    }
}

/// Precomputed facts for planning over one message list.
pub(crate) struct Planner<'a> {
    messages: &'a [Message],
    per_message: &'a [u64],
    suffix: Vec<u64>,
    index: Cow<'a, PlanIndex>,
    latest_user: Option<usize>,
    /// Skill bundles, newest first.
    skill_bundles: Vec<SkillBundle>,
    policy: &'a RescuePolicy,
    pending: Option<usize>,
}

/// A plan: what is summarized, what is rescued, what is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// `messages[cut..]` are the recent window.
    pub cut: usize,
    /// Indices before `cut` kept verbatim, ascending.
    pub rescued: Vec<usize>,
    /// Indices before `cut` that the summary represents, ascending.
    pub summarized: Vec<usize>,
}

impl<'a> Planner<'a> {
    /// Indexes `messages`; `per_message[i]` is the token count of `messages[i]`.
    pub fn new(messages: &'a [Message], per_message: &'a [u64], policy: &'a RescuePolicy) -> Self {
        let index = PlanIndex::new(messages, policy);
        Self::with_index(messages, per_message, policy, Cow::Owned(index))
    }

    /// A planner over `messages` with their `index` already built (it must index exactly
    /// these messages, for this `policy`).
    pub fn with_index(
        messages: &'a [Message],
        per_message: &'a [u64],
        policy: &'a RescuePolicy,
        index: Cow<'a, PlanIndex>,
    ) -> Self {
        debug_assert_eq!(
            index.len(),
            messages.len(),
            "the plan index is for another list"
        );
        let pairs = &index.pairs;
        let skill_bundles: Vec<SkillBundle> = index
            .skill_reads
            .iter()
            .rev()
            .map(|(i, reads)| {
                let i = *i;
                let calls = messages[i].tool_calls();
                let mut paths = BTreeSet::new();
                let mut largest = 0u64;
                for (k, path) in reads {
                    let id = calls[*k].id.as_str();
                    let result_tokens = pairs
                        .results_of(i)
                        .iter()
                        .find(|&&r| messages[r].tool_call_id() == Some(id))
                        .map_or(0, |&r| per_message[r]);
                    largest = largest.max(result_tokens);
                    paths.insert(path.clone());
                }
                let bundle = pairs.bundle(i);
                let tokens = bundle.iter().map(|&j| per_message[j]).sum();
                (i, bundle, paths, tokens, largest)
            })
            .collect();
        Planner {
            messages,
            per_message,
            suffix: suffix_sums(per_message),
            latest_user: if policy.latest_user_message {
                latest_user_message(messages)
            } else {
                None
            },
            pending: pending_tail(messages),
            index,
            skill_bundles,
            policy,
        }
    }

    /// The pair index.
    pub fn pairs(&self) -> &PairIndex {
        &self.index.pairs
    }

    /// Tokens of `messages[i..]`.
    pub fn suffix_tokens(&self, i: usize) -> u64 {
        self.suffix.get(i).copied().unwrap_or(0)
    }

    /// The keep policy's cut, adjusted so no pair is split and no orphan is kept.
    pub fn keep_cut(&self, keep: Limit) -> usize {
        let raw = keep_cut(keep, &self.suffix);
        if raw == 0 {
            0
        } else {
            self.index.pairs.adjust_cut(raw, self.pending)
        }
    }

    /// Indices before `cut` to keep verbatim, ascending. `exclude` marks indices that
    /// may not be rescued (already inside an earlier summary).
    pub fn rescue(&self, cut: usize, exclude: &dyn Fn(usize) -> bool) -> Vec<usize> {
        let mut set: BTreeSet<usize> = BTreeSet::new();
        let add_bundle = |set: &mut BTreeSet<usize>, bundle: &[usize]| {
            if bundle.iter().all(|&j| j < cut && !exclude(j)) {
                set.extend(bundle.iter().copied());
            }
        };
        if let Some(u) = self.latest_user.filter(|&u| u < cut) {
            add_bundle(&mut set, &[u]);
        }
        for &d in self.index.dynamic.iter().filter(|&&d| d < cut) {
            add_bundle(&mut set, &self.index.pairs.bundle(d));
        }
        let skills = &self.policy.skills;
        let mut chosen_paths: BTreeSet<&str> = BTreeSet::new();
        let mut remaining = skills.max_tokens;
        for (ai, bundle, paths, tokens, largest) in &self.skill_bundles {
            if *ai >= cut {
                continue;
            }
            if chosen_paths.len() as u64 >= skills.max_count {
                break;
            }
            // A newer read of the same files already won.
            if paths.iter().all(|p| chosen_paths.contains(p.as_str())) {
                continue;
            }
            if *largest > skills.max_tokens_per_skill || *tokens > remaining {
                continue;
            }
            let new_paths = paths
                .iter()
                .filter(|p| !chosen_paths.contains(p.as_str()))
                .count() as u64;
            if chosen_paths.len() as u64 + new_paths > skills.max_count {
                continue;
            }
            if bundle.iter().any(|&j| j >= cut || exclude(j)) {
                continue;
            }
            remaining -= tokens;
            chosen_paths.extend(paths.iter().map(String::as_str));
            set.extend(bundle.iter().copied());
        }
        set.into_iter().collect()
    }

    /// Builds the plan for `cut`: rescued and summarized indices before it.
    pub fn plan_at(&self, cut: usize, exclude: &dyn Fn(usize) -> bool) -> Plan {
        let rescued = self.rescue(cut, exclude);
        let mut r = rescued.iter().peekable();
        let summarized = (0..cut)
            .filter(|i| {
                while r.peek().is_some_and(|&&x| x < *i) {
                    r.next();
                }
                r.peek() != Some(&i)
            })
            .collect();
        Plan {
            cut,
            rescued,
            summarized,
        }
    }

    /// Tokens and message count of the request the plan produces (with a summary of
    /// `summary_tokens` tokens): `(tokens of messages, message count)`.
    pub fn kept_size(&self, plan: &Plan, summary_tokens: u64) -> (u64, usize) {
        let rescued: u64 = plan.rescued.iter().map(|&i| self.per_message[i]).sum();
        let tokens = summary_tokens + rescued + self.suffix_tokens(plan.cut);
        let count = 1 + plan.rescued.len() + (self.messages.len() - plan.cut);
        (tokens, count)
    }

    /// The first index of the bundle `index` belongs to (an AI message with its results
    /// moves as one).
    fn bundle_start(&self, index: usize) -> usize {
        self.index
            .pairs
            .caller_of(index)
            .unwrap_or(index)
            .min(self.index.pairs.safe_cut_back(index))
    }

    /// The largest cut that keeps the floor of the recent window: the cut may move up to
    /// here, never past it, whatever stickiness headroom wants.
    ///
    /// The floor is the union of
    /// - the newest message with its whole tool bundle, and the message before it with
    ///   its bundle (in a tool loop: the results the model just received, and the step
    ///   before them);
    /// - the latest real user message, unless rescue keeps it verbatim anyway;
    /// - `keep` over [`KEEP_FLOOR_DIVISOR`] (half of `messages: 20` is the last 10 messages;
    ///   half of `tokens: 3000` is the newest suffix within 1,500 tokens).
    pub fn floor_cut(&self, keep: Limit) -> usize {
        let n = self.messages.len();
        if n == 0 {
            return 0;
        }
        let newest = self.bundle_start(n - 1);
        let mut floor = if newest > 0 {
            self.bundle_start(newest - 1)
        } else {
            0
        };
        let share = match keep {
            Limit::Messages(k) => Limit::Messages(k.div_ceil(KEEP_FLOOR_DIVISOR)),
            Limit::Tokens(t) => Limit::Tokens(t / KEEP_FLOOR_DIVISOR),
        };
        floor = floor.min(
            self.index
                .pairs
                .safe_cut_back(keep_cut(share, &self.suffix)),
        );
        if !self.policy.latest_user_message
            && let Some(u) = latest_user_message(self.messages)
        {
            floor = floor.min(self.index.pairs.safe_cut_back(u));
        }
        floor
    }

    /// Moves the cut forward (whole bundles at a time) until the kept window is below
    /// `headroom` x every trigger, but never past `floor` (see [`floor_cut`](Self::floor_cut)).
    /// `fixed_tokens` is the system prompt and tool schemas; `summary_tokens` the expected
    /// summary size. The flag is false when the floor was reached and the window still
    /// does not fit: the fixed part (or the floor itself) is too large for headroom.
    #[allow(clippy::too_many_arguments)]
    pub fn apply_headroom(
        &self,
        plan: Plan,
        triggers: &[Limit],
        headroom: f64,
        fixed_tokens: u64,
        summary_tokens: u64,
        floor: usize,
        exclude: &dyn Fn(usize) -> bool,
    ) -> (Plan, bool) {
        let n = self.messages.len();
        let fits = |cut: usize, rescued: &[usize]| {
            let rescued_tokens: u64 = rescued.iter().map(|&i| self.per_message[i]).sum();
            let tokens = summary_tokens + rescued_tokens + self.suffix_tokens(cut) + fixed_tokens;
            let count = 1 + rescued.len() + (n - cut);
            triggers.iter().all(|t| match *t {
                Limit::Tokens(limit) => (tokens as f64) < headroom * limit as f64,
                Limit::Messages(limit) => (count as f64) < headroom * limit as f64,
            })
        };
        if fits(plan.cut, &plan.rescued) {
            return (plan, true);
        }
        // Only the rescue set is recomputed per step (it depends on the cut); the
        // summarized list is built once at the end, so a long walk stays linear-ish.
        let mut cut = plan.cut;
        let mut reached = false;
        while cut < floor {
            cut = self.index.pairs.safe_cut_forward(cut + 1).min(floor);
            if fits(cut, &self.rescue(cut, exclude)) {
                reached = true;
                break;
            }
        }
        if cut == plan.cut {
            return (plan, reached);
        }
        (self.plan_at(cut, exclude), reached)
    }

    /// Never summarize only the user's task while keeping its tool outputs: when every
    /// summarized message is a user message and the recent window opens with the tool
    /// bundle that answers it, move the cut past that bundle (unless that would cross
    /// `floor`).
    pub fn avoid_task_only(
        &self,
        plan: Plan,
        floor: usize,
        exclude: &dyn Fn(usize) -> bool,
    ) -> Plan {
        if plan.summarized.is_empty()
            || !plan.summarized.iter().all(|&i| self.messages[i].is_human())
            || plan.cut >= self.messages.len()
            || self.index.pairs.results_of(plan.cut).is_empty()
        {
            return plan;
        }
        let next = self.index.pairs.safe_cut_forward(plan.cut + 1);
        if next > floor {
            return plan;
        }
        self.plan_at(next, exclude)
    }
}

/// How many times `trim_tokens_to_summarize` of the overflow the extractive summarizer
/// condenses (see `bound_overflow`).
pub(crate) const OVERFLOW_CONDENSE_FACTOR: u64 = 2;

/// How many of the overflow's first user messages are always condensed.
pub(crate) const OVERFLOW_TASK_MESSAGES: usize = 3;

/// True when compacting `before` (tokens, messages) into `after` would not shrink what
/// fired: compaction never sends more tokens when a token trigger was reached, nor as
/// many messages when a message trigger was.
pub(crate) fn grows(triggers: &[Limit], before: (u64, usize), after: (u64, usize)) -> bool {
    triggers.iter().any(|t| match *t {
        Limit::Tokens(n) => before.0 >= n && after.0 >= before.0,
        Limit::Messages(n) => before.1 as u64 >= n && after.1 >= before.1,
    })
}

/// What of the overflow the extractive summarizer reads: the first
/// [`OVERFLOW_TASK_MESSAGES`] user messages (where a conversation states its task)
/// and the newest messages within [`OVERFLOW_CONDENSE_FACTOR`] x
/// `trim_tokens_to_summarize` (`trim`); the number left out. In a thread that compacts as it
/// grows the overflow is a handful of messages and nothing is left out; only the
/// first compaction of a long thread (a migrated history, a raised trigger) would
/// otherwise condense all of it, which cost ~85 ms on 10,000 messages.
pub(crate) fn bound_overflow(
    trim: Option<u64>,
    messages: &[Message],
    per_message: &[u64],
    overflow: Vec<usize>,
) -> (Vec<usize>, usize) {
    let Some(trim) = trim else {
        return (overflow, 0);
    };
    let budget = trim.saturating_mul(OVERFLOW_CONDENSE_FACTOR);
    let mut used = 0u64;
    let mut newest = overflow.len();
    while newest > 0 && used + per_message[overflow[newest - 1]] <= budget {
        used += per_message[overflow[newest - 1]];
        newest -= 1;
    }
    if newest == 0 {
        return (overflow, 0);
    }
    let task: Vec<usize> = overflow[..newest]
        .iter()
        .copied()
        .filter(|&i| messages[i].is_human())
        .take(OVERFLOW_TASK_MESSAGES)
        .collect();
    let omitted = newest - task.len();
    let mut kept = task;
    kept.extend_from_slice(&overflow[newest..]);
    (kept, omitted)
}

/// Splits the evicted messages into what the summary call reads (the newest within
/// `trim_tokens_to_summarize`, starting on a whole bundle) and the older overflow.
pub(crate) fn trim(
    budget: Option<u64>,
    messages: &[Message],
    per_message: &[u64],
    mut evicted: Vec<usize>,
    planner: &Planner<'_>,
) -> (Vec<usize>, Vec<usize>) {
    let Some(budget) = budget else {
        return (evicted, Vec::new());
    };
    let mut used = 0u64;
    let mut start = evicted.len();
    while start > 0 {
        let t = per_message[evicted[start - 1]];
        if used + t > budget && start < evicted.len() {
            break;
        }
        used += t;
        start -= 1;
    }
    // Do not open the transcript with results whose call was trimmed away.
    while start < evicted.len()
        && messages[evicted[start]].is_tool()
        && planner
            .pairs()
            .caller_of(evicted[start])
            .is_none_or(|ai| !evicted[start..].contains(&ai))
    {
        start += 1;
    }
    let fold_input = evicted.split_off(start);
    (fold_input, evicted)
}

/// True when what is sent (`tokens`, `messages`) has used `share` of the room between
/// `base` (what the thread sent right after its summary last changed; zero before its
/// first compaction) and one of `triggers`. Timed from the floor, a thread whose fixed
/// part and recent window already fill most of a trigger does not fold again after
/// every message.
pub(crate) fn near_trigger(
    triggers: &[Limit],
    share: f64,
    base: (u64, usize),
    tokens: u64,
    messages: usize,
) -> bool {
    let reached =
        |now: f64, base: f64, limit: f64| now >= base.min(limit) + share * (limit - base).max(0.0);
    triggers.iter().any(|t| match *t {
        Limit::Tokens(n) => reached(tokens as f64, base.0 as f64, n as f64),
        Limit::Messages(n) => reached(messages as f64, base.1 as f64, n as f64),
    })
}

/// The keep policy of a speculative summary: the configured `keep`, less what the
/// thread will grow before it crosses a trigger (`sent` is what it sends now). The
/// crossing call then sends the window the blocking path would have kept, and a
/// thread folds as often as without `precompute_at` (a summary written ahead with
/// the full window would cover only what grew past it, and fold again soon after).
pub(crate) fn keep_ahead(
    keep: ContextSize,
    window: Option<u64>,
    triggers: &[Limit],
    sent: (u64, usize),
) -> Limit {
    let keep = resolve(keep, window).unwrap_or(Limit::Messages(DEFAULT_MESSAGES_TO_KEEP));
    // The share of the nearest trigger reached, and the room left under each kind.
    let mut reached: f64 = 0.0;
    let (mut tokens_left, mut messages_left) = (None::<u64>, None::<u64>);
    for t in triggers {
        match *t {
            Limit::Tokens(n) => {
                reached = reached.max(sent.0 as f64 / n.max(1) as f64);
                let left = n.saturating_sub(sent.0);
                tokens_left = Some(tokens_left.map_or(left, |l| l.min(left)));
            }
            Limit::Messages(n) => {
                reached = reached.max(sent.1 as f64 / n.max(1) as f64);
                let left = n.saturating_sub(sent.1 as u64);
                messages_left = Some(messages_left.map_or(left, |l| l.min(left)));
            }
        }
    }
    let scaled = |k: u64| (k as f64 * reached.min(1.0)).floor() as u64;
    match keep {
        Limit::Tokens(k) => Limit::Tokens(tokens_left.map_or(scaled(k), |l| k.saturating_sub(l))),
        Limit::Messages(k) => {
            Limit::Messages(messages_left.map_or(scaled(k), |l| k.saturating_sub(l)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::message::ToolCall;
    use serde_json::json;

    #[test]
    fn token_keep_binary_search() {
        // suffix of [5, 5, 5, 5]: 20, 15, 10, 5, 0
        let s = suffix_sums(&[5, 5, 5, 5]);
        assert_eq!(keep_cut(Limit::Tokens(20), &s), 0);
        assert_eq!(keep_cut(Limit::Tokens(11), &s), 2);
        assert_eq!(
            keep_cut(Limit::Tokens(1), &s),
            3,
            "none fits: keep the last message"
        );
        assert_eq!(keep_cut(Limit::Messages(3), &s), 1);
        assert_eq!(keep_cut(Limit::Messages(9), &s), 0);
    }

    /// The prefix hashes kept in the index, built at once or extended step by step, are
    /// the summary cache's.
    #[test]
    fn kept_prefix_hashes_are_the_caches() {
        let msgs: Vec<Message> = (0..12)
            .map(|i| match i % 3 {
                0 => Message::human(format!("q{i}")),
                1 => Message::ai(format!("a{i}")),
                _ => Message::system(format!("s{i}")),
            })
            .collect();
        let policy = RescuePolicy::none();
        let whole = PlanIndex::new(&msgs, &policy);
        let mut grown = PlanIndex::new(&msgs[..3], &policy);
        grown.extend(&msgs[..7], &policy);
        grown.extend(&msgs, &policy);
        for b in 0..=msgs.len() {
            let want = crate::cache::prefix_hash(&msgs[..b]);
            assert_eq!(whole.prefix_hash(b), Some(want), "boundary {b}");
            assert_eq!(grown.prefix_hash(b), Some(want), "boundary {b}");
        }
        assert_eq!(whole.prefix_hash(msgs.len() + 1), None);
    }

    #[test]
    fn skill_paths_are_normalised() {
        let skills = SkillRescue {
            max_count: 5,
            max_tokens: 100,
            max_tokens_per_skill: 50,
            tool_names: vec!["read_file".into()],
            container_path: "/mnt/skills/".into(),
        };
        let call = |args| ToolCall::new("c", "read_file", args);
        assert_eq!(
            skill_path(
                &call(json!({"path": "/mnt//skills/./pdf/../pdf/SKILL.md"})),
                &skills
            )
            .as_deref(),
            Some("/mnt/skills/pdf/SKILL.md")
        );
        assert_eq!(
            skill_path(&call(json!({"file_path": "/mnt/skills-evil/x"})), &skills),
            None
        );
        assert_eq!(
            skill_path(
                &call(json!({"filepath": "/mnt/skills/../etc/passwd"})),
                &skills
            ),
            None
        );
        assert_eq!(
            skill_path(
                &ToolCall::new("c", "bash", json!({"path": "/mnt/skills/a"})),
                &skills
            ),
            None
        );
    }

    /// Paths already normal are compared as they are: the answer is the one normalising
    /// gives, for paths under the root, beside it and around it.
    #[test]
    fn normal_paths_take_the_short_way_to_the_same_answer() {
        let call = |path: &str| ToolCall::new("c", "read_file", json!({ "path": path }));
        for root in ["/mnt/skills", "/mnt/skills/", "/", "/a"] {
            let skills = SkillRescue {
                max_count: 5,
                max_tokens: 100,
                max_tokens_per_skill: 50,
                tool_names: vec!["read_file".into()],
                container_path: root.into(),
            };
            let root = normalize_path(root).unwrap();
            for path in [
                "/",
                "/mnt",
                "/mnt/skills",
                "/mnt/skills/",
                " /mnt/skills/pdf/SKILL.md ",
                "/mnt/skills/pdf/SKILL.md",
                "/mnt/skills/pdf/",
                "/mnt/skillsx/a",
                "/mnt/skill",
                "/workspace/src/main.rs",
                "/a",
                "/ab",
                "/a/b",
                "/mnt/skills/.hidden",
                "/mnt/skills/a/../../etc",
                "//mnt/skills/a",
                "relative/path",
            ] {
                let slow = normalize_path(path).filter(|p| under_root(p, &root));
                assert_eq!(
                    skill_path(&call(path), &skills),
                    slow,
                    "path {path:?} under root {root:?}"
                );
            }
        }
    }
}
