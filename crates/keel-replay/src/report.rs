//! What a replay measured: one [`CallReport`] per model call, [`Totals`], and the
//! memory the agent ended with. Serializes to the `--json` shape; [`ReplayReport::render`]
//! prints the table for people.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{Map, Value};

/// One replayed model call.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CallReport {
    /// 1-based position among the model calls (also the `--dump-requests` file number).
    pub index: usize,
    /// The transcript line of the AI message this call produced.
    pub line: usize,
    /// Messages in the transcript before this call (without the system prompt).
    pub history_messages: usize,
    /// Tokens of sending that whole history verbatim, system prompt included.
    pub history_tokens: u64,
    /// Messages the middleware stack actually sent (without the system prompt).
    pub request_messages: usize,
    /// Tokens of the request as sent: system prompt, messages and tool schemas.
    pub request_tokens: u64,
    /// True when a summary was produced during this call (a summarizer ran).
    pub summary_call: bool,
    /// True when the request carries a summary but no summarizer ran: a cached summary
    /// was reused.
    pub cache_hit: bool,
    /// Custom stream events the middleware emitted during this call (payloads as sent,
    /// e.g. `{"type": "context_compacting", ...}`).
    pub events: Vec<Value>,
    /// Why a provider would reject this request (an orphan tool result, a call without
    /// its result); absent when the request is well formed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pair_violation: Option<String>,
}

/// Sums over all calls, and the two baselines the replay compares against.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Model calls replayed.
    pub calls: usize,
    /// Tokens the middleware stack sent, over all calls.
    pub sent_tokens: u64,
    /// Tokens of sending the system prompt plus the last 100 messages verbatim on every
    /// call (Langflow's default `n_messages = 100`; Langflow feature request #15799).
    pub baseline_last100_tokens: u64,
    /// Tokens of sending the whole history verbatim on every call.
    pub full_history_tokens: u64,
    /// Summarizer runs (a call that catches up on a long backlog may run several).
    pub summary_calls: u64,
    /// Calls that reused a cached summary.
    pub cache_hits: usize,
    /// Requests a provider would reject for a broken tool-call pairing.
    pub pair_violations: usize,
}

impl Totals {
    /// `sent_tokens` as a fraction of the last-100 baseline (0 when the baseline is 0).
    pub fn sent_vs_baseline(&self) -> f64 {
        ratio(self.sent_tokens, self.baseline_last100_tokens)
    }

    /// `sent_tokens` as a fraction of sending the full history (0 when that is 0).
    pub fn sent_vs_full_history(&self) -> f64 {
        ratio(self.sent_tokens, self.full_history_tokens)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The whole result of a replay, in the `--json` shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReplayReport {
    /// The token counter used for every figure.
    pub counter: String,
    /// One entry per model call, in order.
    pub calls: Vec<CallReport>,
    /// Sums and baselines.
    pub totals: Totals,
    /// Pinned keys of the session memory at the end (empty without session memory).
    pub pinned: Map<String, Value>,
    /// The last summary the model saw (from the session memory or the summarization
    /// middleware), if any.
    pub summary: Option<String>,
}

impl ReplayReport {
    /// Adds one call and updates the totals.
    pub fn push(&mut self, call: CallReport, baseline_last100_tokens: u64) {
        let t = &mut self.totals;
        t.calls += 1;
        t.sent_tokens += call.request_tokens;
        t.full_history_tokens += call.history_tokens;
        t.baseline_last100_tokens += baseline_last100_tokens;
        t.cache_hits += usize::from(call.cache_hit);
        t.pair_violations += usize::from(call.pair_violation.is_some());
        self.calls.push(call);
    }

    /// The report for people: a table with one row per call, then the totals, the
    /// pinned keys and the summary.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:>5} {:>5} {:>8} {:>9} {:>8} {:>9}  {:<8} events",
            "call", "line", "history", "hist.tok", "sent", "sent.tok", "summary"
        );
        for c in &self.calls {
            let summary = match (c.summary_call, c.cache_hit) {
                (true, _) => "call",
                (false, true) => "cached",
                (false, false) => "-",
            };
            let mut events: Vec<String> = c
                .events
                .iter()
                .map(|e| {
                    e.get("type")
                        .and_then(Value::as_str)
                        .map_or_else(|| e.to_string(), str::to_owned)
                })
                .collect();
            if let Some(v) = &c.pair_violation {
                events.push(format!("INVALID REQUEST: {v}"));
            }
            let _ = writeln!(
                out,
                "{:>5} {:>5} {:>8} {:>9} {:>8} {:>9}  {:<8} {}",
                c.index,
                c.line,
                c.history_messages,
                c.history_tokens,
                c.request_messages,
                c.request_tokens,
                summary,
                events.join(", ")
            );
        }
        let t = &self.totals;
        let _ = writeln!(out);
        let _ = writeln!(out, "model calls            {:>10}", t.calls);
        let _ = writeln!(out, "tokens sent            {:>10}", t.sent_tokens);
        let _ = writeln!(
            out,
            "last-100 baseline      {:>10}   sent = {:.1}% of it",
            t.baseline_last100_tokens,
            100.0 * t.sent_vs_baseline()
        );
        let _ = writeln!(
            out,
            "full history           {:>10}   sent = {:.1}% of it",
            t.full_history_tokens,
            100.0 * t.sent_vs_full_history()
        );
        let _ = writeln!(out, "summary calls          {:>10}", t.summary_calls);
        let _ = writeln!(out, "summary cache hits     {:>10}", t.cache_hits);
        let _ = writeln!(out, "invalid requests       {:>10}", t.pair_violations);
        let _ = writeln!(out, "tokens counted with    {:>10}", self.counter);
        if !self.pinned.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(out, "pinned keys:");
            for (k, v) in &self.pinned {
                let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                let _ = writeln!(out, "  {k}: {v}");
            }
        }
        if let Some(summary) = &self.summary {
            let _ = writeln!(out);
            let _ = writeln!(out, "summary at the end:");
            for line in summary.lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(index: usize, sent: u64, cache_hit: bool) -> CallReport {
        CallReport {
            index,
            line: index * 2,
            history_messages: index,
            history_tokens: 100 * index as u64,
            request_messages: 2,
            request_tokens: sent,
            summary_call: false,
            cache_hit,
            events: vec![json!({"type": "context_compacting", "message": "..."})],
            pair_violation: None,
        }
    }

    #[test]
    fn totals_add_up_and_render() {
        let mut r = ReplayReport {
            counter: "approximate".into(),
            ..Default::default()
        };
        r.push(call(1, 50, false), 100);
        r.push(call(2, 60, true), 200);
        assert_eq!(r.totals.sent_tokens, 110);
        assert_eq!(r.totals.baseline_last100_tokens, 300);
        assert_eq!(r.totals.full_history_tokens, 300);
        assert_eq!(r.totals.cache_hits, 1);
        let text = r.render();
        assert!(text.contains("context_compacting"), "{text}");
        assert!(text.contains("36.7% of it"), "{text}");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["calls"][1]["cache_hit"], json!(true));
        assert!(v["calls"][0].get("pair_violation").is_none());
    }
}
