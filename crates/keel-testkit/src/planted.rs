//! Sessions with planted facts: realistic support conversations (tool loops, long logs,
//! chit-chat) with facts of every kind a summary must keep, each stated once at a random
//! place. Deterministic from a seed, so a retention figure is reproducible.
//!
//! A fact is *kept* by a request when its needle (the value that makes it that fact: the
//! ticket number, the path, the owner's name...) appears in the text the model reads.
//!
//! ```
//! use keel_testkit::planted::{generate, SessionShape};
//!
//! let session = generate(7, &SessionShape::default());
//! assert_eq!(session.facts.len(), 20);
//! assert!(session.messages.len() >= 300);
//! let again = generate(7, &SessionShape::default());
//! assert_eq!(session.messages, again.messages);
//! // A fact is found by its needle in the message it was planted in.
//! let fact = &session.facts[0];
//! assert!(session.messages[fact.message_index].text().contains(&fact.needle));
//! ```

use keel_core::message::{Message, ToolCall};
use serde_json::json;

/// What kind of information a planted fact is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FactKind {
    /// A decision or agreement ("we agreed to set the cache TTL to 600 seconds").
    Decision,
    /// A hard rule ("never ...", "always ...", "must ...").
    Rule,
    /// A requirement of the user or the customer.
    Requirement,
    /// A preference of the user.
    Preference,
    /// An identifier (a ticket number).
    Identifier,
    /// A pinned version.
    Version,
    /// A commit hash.
    Hash,
    /// A number with a unit.
    Quantity,
    /// A date or a time window.
    DateTime,
    /// A file path.
    Path,
    /// A URL.
    Url,
    /// A person's name.
    Name,
    /// An error code.
    ErrorCode,
    /// An IP address.
    Address,
    /// The outcome of a tool call that changed something.
    ToolOutcome,
}

impl FactKind {
    /// Every kind, in a fixed order.
    pub const ALL: [FactKind; 15] = [
        FactKind::Decision,
        FactKind::Rule,
        FactKind::Requirement,
        FactKind::Preference,
        FactKind::Identifier,
        FactKind::Version,
        FactKind::Hash,
        FactKind::Quantity,
        FactKind::DateTime,
        FactKind::Path,
        FactKind::Url,
        FactKind::Name,
        FactKind::ErrorCode,
        FactKind::Address,
        FactKind::ToolOutcome,
    ];

    /// A short lower-case name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            FactKind::Decision => "decision",
            FactKind::Rule => "rule",
            FactKind::Requirement => "requirement",
            FactKind::Preference => "preference",
            FactKind::Identifier => "identifier",
            FactKind::Version => "version",
            FactKind::Hash => "hash",
            FactKind::Quantity => "quantity",
            FactKind::DateTime => "date/time",
            FactKind::Path => "path",
            FactKind::Url => "url",
            FactKind::Name => "name",
            FactKind::ErrorCode => "error code",
            FactKind::Address => "ip address",
            FactKind::ToolOutcome => "tool outcome",
        }
    }
}

/// One planted fact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlantedFact {
    /// Its kind.
    pub kind: FactKind,
    /// The text that must survive for the fact to count as kept.
    pub needle: String,
    /// Index of the message that states it.
    pub message_index: usize,
}

/// How big a generated session is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionShape {
    /// Messages at least (the session ends with an assistant answer, so a few more).
    pub messages: usize,
    /// Planted facts: every kind once, then kinds again in rotation.
    pub facts: usize,
    /// Facts are planted before this share of the session (per mille), so they are
    /// older than the recent window and must survive summarization.
    pub planted_before_per_mille: usize,
}

impl Default for SessionShape {
    /// A 319-message support session with 20 facts, as in the issue that asked for it.
    fn default() -> Self {
        SessionShape {
            messages: 319,
            facts: 20,
            planted_before_per_mille: 850,
        }
    }
}

/// A generated session and the facts planted in it.
#[derive(Clone, Debug, PartialEq)]
pub struct PlantedSession {
    /// The conversation, starting with a system prompt; every message has an id.
    pub messages: Vec<Message>,
    /// The planted facts.
    pub facts: Vec<PlantedFact>,
}

impl PlantedSession {
    /// One JSON message per line (the `keel replay` transcript format).
    pub fn to_jsonl(&self) -> Result<String, serde_json::Error> {
        let mut out = String::new();
        for m in &self.messages {
            out.push_str(&serde_json::to_string(m)?);
            out.push('\n');
        }
        Ok(out)
    }

    /// The facts whose needle appears in `text`.
    pub fn kept_in(&self, text: &str) -> Vec<&PlantedFact> {
        self.facts
            .iter()
            .filter(|f| text.contains(&f.needle))
            .collect()
    }
}

/// SplitMix64: small, fast, and the same on every platform.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    pub(crate) fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }

    pub(crate) fn chance(&mut self, per_cent: u64) -> bool {
        self.next() % 100 < per_cent
    }

    pub(crate) fn hex(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| char::from(b"0123456789abcdef"[(self.next() % 16) as usize]))
            .collect()
    }
}

pub(crate) const SERVICES: &[&str] = &[
    "ledger-api",
    "export-worker",
    "order-sync",
    "billing-gw",
    "search-indexer",
    "notify-svc",
];
pub(crate) const FIRST: &[&str] = &[
    "Priya", "Tomasz", "Amara", "Kenji", "Lucia", "Oskar", "Nadia", "Rafael", "Ingrid", "Mateo",
];
pub(crate) const LAST: &[&str] = &[
    "Raman",
    "Kowalczyk",
    "Okafor",
    "Watanabe",
    "Ferreira",
    "Lindqvist",
    "Haddad",
    "Moreau",
    "Brennan",
    "Santos",
];
pub(crate) const WORDS: &[&str] = &[
    "amber", "birch", "cobalt", "delta", "ember", "fjord", "granite", "harbor", "indigo",
    "juniper", "kestrel", "lumen", "maple", "nimbus", "orchid", "pylon",
];
pub(crate) const DAYS: &[&str] = &[
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// The sentence that states a fact of `kind`, and its needle. A kind planted a second
/// time (`again`) is worded as another fact, not as a correction of the first.
pub(crate) fn fact_text(rng: &mut Rng, kind: FactKind, again: bool) -> (String, String) {
    let svc = rng.pick(SERVICES);
    let word = rng.pick(WORDS);
    let n = rng.range(100, 9999);
    if again && let Some(other) = second_fact(rng, kind, svc, word, n) {
        return other;
    }
    match kind {
        FactKind::Decision => {
            let ttl = rng.range(2, 59) * 30;
            let needle = format!("TTL to {ttl} seconds");
            (
                format!(
                    "Okay, decided: we set the {svc} cache {needle} and revisit it after the incident."
                ),
                needle,
            )
        }
        FactKind::Rule => {
            let needle = format!("audit-{word}-{n}");
            (
                format!(
                    "Hard rule from compliance: never delete or rewrite anything in the {needle} bucket, even during cleanup."
                ),
                needle,
            )
        }
        FactKind::Requirement => {
            let needle = format!("{word}_{n}_YYYYMMDD.csv.gz");
            (
                format!(
                    "Their requirement is that every export file is gzip-compressed and named {needle}."
                ),
                needle,
            )
        }
        FactKind::Preference => {
            let needle = format!("#ops-{word}-{n}");
            (
                format!(
                    "I prefer to get status updates in the {needle} Slack channel rather than by email."
                ),
                needle,
            )
        }
        FactKind::Identifier => {
            let needle = format!("TCK-{n}");
            (format!("The ticket for this is {needle}."), needle)
        }
        FactKind::Version => {
            let needle = format!(
                "{}.{}.{}",
                rng.range(2, 9),
                rng.range(0, 30),
                rng.range(0, 20)
            );
            (
                format!(
                    "They are pinned to release {needle} of the agent, so please don't suggest upgrading."
                ),
                needle,
            )
        }
        FactKind::Hash => {
            let needle = rng.hex(12);
            (
                format!("The last good build of {svc} was commit {needle}."),
                needle,
            )
        }
        FactKind::Quantity => {
            let needle = format!("{}.{} TB", rng.range(2, 40), rng.range(1, 9));
            (
                format!(
                    "Their export bucket is at {needle} and grows by about {} GB a day.",
                    rng.range(5, 90)
                ),
                needle,
            )
        }
        FactKind::DateTime => {
            let day = rng.pick(DAYS);
            let h = rng.range(0, 20);
            let needle = format!("{day} {h:02}:00-{:02}:00 UTC", h + 2);
            (
                format!("Their maintenance window is {needle}; nothing risky outside it."),
                needle,
            )
        }
        FactKind::Path => {
            let needle = format!("/etc/{svc}/{word}-{n}.toml");
            (
                format!("The worker config lives at {needle} on every node."),
                needle,
            )
        }
        FactKind::Url => {
            let needle = format!("https://status.{word}.example/incidents/{n}");
            (
                format!("The customer's status page for this is {needle} if you need it."),
                needle,
            )
        }
        FactKind::Name => {
            let needle = format!("{} {}", rng.pick(FIRST), rng.pick(LAST));
            (
                format!("The owner of {svc} is {needle}; loop them in before any change there."),
                needle,
            )
        }
        FactKind::ErrorCode => {
            let needle = format!("EXP-{n}");
            (
                format!("In their dashboard the failed runs all show error {needle}."),
                needle,
            )
        }
        FactKind::Address => {
            let needle = format!(
                "10.{}.{}.{}",
                rng.range(10, 250),
                rng.range(0, 255),
                rng.range(2, 254)
            );
            (
                format!("The egress IP they allow-listed on their side is {needle}."),
                needle,
            )
        }
        FactKind::ToolOutcome => {
            let needle = format!("INC-{n}");
            (
                format!(
                    "Created incident {needle} (SEV-2) for {svc}, assigned to the platform on-call."
                ),
                needle,
            )
        }
    }
}

/// The second wording of the kinds planted twice in a default session.
fn second_fact(
    rng: &mut Rng,
    kind: FactKind,
    svc: &str,
    word: &str,
    n: u64,
) -> Option<(String, String)> {
    let k = rng.range(3, 60);
    let (text, needle) = match kind {
        FactKind::Decision => {
            let needle = format!("pool at {k} connections");
            (
                format!("We agreed to cap the {svc} worker {needle} until the fix ships."),
                needle,
            )
        }
        FactKind::Rule => {
            let needle = format!("{svc}-db-{n}");
            (
                format!("Always take a snapshot of {needle} before any schema change."),
                needle,
            )
        }
        FactKind::Requirement => {
            let needle = format!("s3://northwind-{word}-{n}");
            (
                format!("The customer requires exports to land in {needle} and nowhere else."),
                needle,
            )
        }
        FactKind::Preference => {
            let needle = format!("retry limit at {k} attempts");
            (format!("I'd prefer we keep the {needle} for now."), needle)
        }
        FactKind::Identifier => {
            let needle = format!("CASE-{n}");
            (format!("Their Salesforce case is {needle}."), needle)
        }
        _ => return None,
    };
    Some((text, needle))
}

/// Builds the session message by message, with stable ids.
pub(crate) struct Builder {
    pub(crate) seed: u64,
    pub(crate) messages: Vec<Message>,
    pub(crate) calls: u64,
}

impl Builder {
    pub(crate) fn push(&mut self, message: Message) -> usize {
        let index = self.messages.len();
        let id = format!("s{}-m{:04}", self.seed, index);
        self.messages.push(message.with_id(id));
        index
    }

    pub(crate) fn call_id(&mut self) -> String {
        self.calls += 1;
        format!("call_{:04}", self.calls)
    }
}

pub(crate) fn log_line(rng: &mut Rng, svc: &str) -> String {
    let ts = format!(
        "2026-11-30T{:02}:{:02}:{:02}.{:03}Z",
        rng.range(6, 11),
        rng.range(0, 59),
        rng.range(0, 59),
        rng.range(0, 999)
    );
    let pod = format!("{svc}-{}-{}", rng.hex(9), rng.hex(5));
    match rng.range(0, 9) {
        0 => format!(
            "{ts} ERROR {pod} export batch {} failed: upstream timeout after {}s (attempt {}/5)",
            rng.range(1000, 99999),
            rng.range(5, 60),
            rng.range(1, 5)
        ),
        1 => format!(
            "{ts} WARN  {pod} connection pool at {}% ({} of 50 in use) from 10.0.{}.{}",
            rng.range(60, 99),
            rng.range(30, 50),
            rng.range(0, 9),
            rng.range(2, 250)
        ),
        2 => format!(
            "{ts} DEBUG {pod} GET /v1/orders?page={} 200 {}ms",
            rng.range(1, 400),
            rng.range(3, 900)
        ),
        _ => format!(
            "{ts} INFO  {pod} processed batch {} ({} rows) in {}ms",
            rng.range(1000, 99999),
            rng.range(10, 5000),
            rng.range(20, 4000)
        ),
    }
}

/// A read-only tool call and a long result full of numbers that are not facts.
fn tool_loop(b: &mut Builder, rng: &mut Rng) {
    let svc = rng.pick(SERVICES);
    let intro = rng.pick(&[
        "Let me look at the logs.",
        "I'll check the pods first.",
        "Checking the metrics now.",
        "Let me pull that up.",
        "",
    ]);
    let parallel = rng.range(1, 3);
    let mut calls = Vec::new();
    for _ in 0..parallel {
        let id = b.call_id();
        let call = match rng.range(0, 3) {
            0 => ToolCall::new(
                id,
                "kubectl_logs",
                json!({"pod": format!("{svc}-{}", rng.hex(5)), "since": "30m"}),
            ),
            1 => ToolCall::new(id, "kubectl_get_pods", json!({"namespace": svc})),
            2 => ToolCall::new(
                id,
                "query_metrics",
                json!({"query": format!("rate(http_requests_total{{service=\"{svc}\"}}[5m])")}),
            ),
            _ => ToolCall::new(
                id,
                "read_file",
                json!({"path": format!("/var/log/{svc}/worker.log")}),
            ),
        };
        calls.push(call);
    }
    b.push(Message::ai(intro).with_tool_calls(calls.clone()));
    for call in &calls {
        let lines = rng.range(8, 40);
        let text: Vec<String> = (0..lines).map(|_| log_line(rng, svc)).collect();
        let mut m = Message::tool(call.id.clone(), text.join("\n"));
        if let keel_core::message::MessageBody::Tool(t) = m.body_mut() {
            t.name = Some(call.name.clone());
        }
        b.push(m);
    }
    let analysis = match rng.range(0, 4) {
        0 => format!(
            "Two things stand out:\n- {} of the {} pods restarted in the last hour.\n- p99 latency is {} ms, up from {} ms yesterday.",
            rng.range(2, 5),
            rng.range(6, 12),
            rng.range(400, 2000),
            rng.range(80, 300)
        ),
        1 => format!(
            "The logs show timeouts to the upstream every few minutes, about {} per hour. Nothing conclusive yet.",
            rng.range(3, 40)
        ),
        2 => "Following the triage procedure, here is the plan: compare a failing pod with a healthy one, then check recent deploys.".to_owned(),
        3 => format!(
            "Error rate is around {}% and the connection pool is mostly busy. I'd keep looking before changing anything.",
            rng.range(1, 9)
        ),
        _ => "Sure. Nothing unusual in this part of the output.".to_owned(),
    };
    b.push(Message::ai(analysis));
}

fn chit_chat(b: &mut Builder, rng: &mut Rng) {
    let user = rng.pick(&[
        "thanks!",
        "ok cool",
        "one sec, the customer is pinging me",
        "makes sense",
        "hmm, let me think about that",
        "Can you check the worker logs again?",
        "What do the metrics say now?",
        "Sounds good, go ahead.",
        "Great, thanks for the quick look.",
        "ok, back. where were we?",
    ]);
    b.push(Message::human(user));
    let ai = rng.pick(&[
        "Sure.",
        "You're welcome!",
        "Happy to help.",
        "No problem, take your time.",
        "We were comparing the failing pods with the healthy ones.",
        "Good question. Let me take another look.",
    ]);
    b.push(Message::ai(ai));
}

/// States a fact: in the user's voice inside a chatty message, or (a tool outcome) as
/// the result of a call that changed something.
fn plant(b: &mut Builder, rng: &mut Rng, kind: FactKind, again: bool) -> PlantedFact {
    let (sentence, needle) = fact_text(rng, kind, again);
    let message_index = if kind == FactKind::ToolOutcome {
        let id = b.call_id();
        let call = ToolCall::new(
            id.clone(),
            "create_incident",
            json!({"severity": "SEV-2", "title": "export failures"}),
        );
        b.push(Message::ai("I'll open an incident for this.").with_tool_calls(vec![call]));
        let mut m = Message::tool(id, sentence);
        if let keel_core::message::MessageBody::Tool(t) = m.body_mut() {
            t.name = Some("create_incident".into());
        }
        let index = b.push(m);
        b.push(Message::ai("Done, the incident is open."));
        index
    } else {
        let before = rng.pick(&[
            "Oh, before I forget.",
            "Quick note.",
            "btw",
            "Also, something from the customer call.",
            "",
        ]);
        let after = rng.pick(&[
            "Anyway, what do the logs say?",
            "Ok, carry on.",
            "Can you keep digging?",
            "",
        ]);
        let text = [before, sentence.as_str(), after]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        let index = b.push(Message::human(text));
        b.push(Message::ai(rng.pick(&[
            "Noted.",
            "Got it, thanks.",
            "Understood.",
            "Thanks, that helps.",
        ])));
        index
    };
    PlantedFact {
        kind,
        needle,
        message_index,
    }
}

/// Generates a session from `seed`.
pub fn generate(seed: u64, shape: &SessionShape) -> PlantedSession {
    let mut rng = Rng(seed ^ 0x5EED_0000_0000_0017);
    let mut b = Builder {
        seed,
        messages: Vec::new(),
        calls: 0,
    };
    b.push(Message::system(
        "You are the on-call support assistant for Acme Cloud. Use the tools to look at \
         pods, logs and metrics instead of guessing. Keep answers concrete.",
    ));
    b.push(Message::human(
        "Hi! Northwind's nightly export jobs have been failing since this morning. Can you \
         help me find out why?",
    ));
    b.push(Message::ai("Happy to help. Let me start with the logs."));

    // Where facts go: sorted random message positions before the planted limit.
    let limit = (shape.messages * shape.planted_before_per_mille / 1000).max(4);
    let mut slots: Vec<usize> = (0..shape.facts)
        .map(|_| rng.range(3, limit as u64) as usize)
        .collect();
    slots.sort_unstable();
    let kinds: Vec<FactKind> = (0..shape.facts)
        .map(|i| FactKind::ALL[i % FactKind::ALL.len()])
        .collect();
    // Kinds in a seed-dependent order, so no kind is always early or always late.
    let mut order: Vec<usize> = (0..kinds.len()).collect();
    for i in (1..order.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }

    let mut facts = Vec::new();
    let mut next_fact = 0;
    while b.messages.len() < shape.messages {
        if next_fact < slots.len() && b.messages.len() >= slots[next_fact] {
            let k = order[next_fact];
            facts.push(plant(&mut b, &mut rng, kinds[k], k >= FactKind::ALL.len()));
            next_fact += 1;
            continue;
        }
        if rng.chance(65) {
            tool_loop(&mut b, &mut rng);
        } else {
            chit_chat(&mut b, &mut rng);
        }
    }
    while next_fact < slots.len() {
        let k = order[next_fact];
        facts.push(plant(&mut b, &mut rng, kinds[k], k >= FactKind::ALL.len()));
        next_fact += 1;
    }
    b.push(Message::human("Can you sum up where we are?"));
    b.push(Message::ai("Here is where we are."));
    PlantedSession {
        messages: b.messages,
        facts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_planted_and_findable() {
        let s = generate(3, &SessionShape::default());
        for kind in FactKind::ALL {
            assert!(s.facts.iter().any(|f| f.kind == kind), "{kind:?}");
        }
        for f in &s.facts {
            assert!(s.messages[f.message_index].text().contains(&f.needle));
            // Stated once: the needle appears in no other message.
            let count = s
                .messages
                .iter()
                .filter(|m| m.text().contains(&f.needle))
                .count();
            assert_eq!(count, 1, "{}", f.needle);
        }
    }

    #[test]
    fn deterministic_per_seed() {
        let shape = SessionShape::default();
        assert_eq!(generate(1, &shape), generate(1, &shape));
        assert_ne!(generate(1, &shape).messages, generate(2, &shape).messages);
    }
}
