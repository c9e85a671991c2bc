//! Sessions written in other styles than [`planted`](crate::planted)'s: facts in plain
//! language without ids or numbers, values corrected later, facts that only a read-only
//! tool result or an assistant finding establishes, dense sessions, facts in German,
//! Spanish or Chinese inside an English session, long sessions with facts until the
//! end; and three shapes that real sessions showed: rules said in plain words between
//! long pasted logs full of ids, corrections said in other words, and questions whose
//! answer is the next turn. Every fact comes with a [`Probe`]: a question, the needles a request must
//! hold to answer it, and the stale values (a corrected value) it must not present as
//! current.
//!
//! The filler is of other shapes than the planted generator's: chat-log lines
//! (`[09:12] Sam: ack`), narration (`Let's continue.`), announcements of pastes, and
//! read-only tool loops under many names. Message ids are long and share a long prefix,
//! the way UUIDs of one session often do.
//!
//! Seeds: [`TUNING_SEEDS`] are for tuning, [`REPORTING_SEEDS`] for reported figures;
//! a summarizer is never tuned on the reporting seeds.
//!
//! ```
//! use keel_testkit::styles::{generate, Style};
//!
//! let s = generate(Style::Corrected, 3);
//! assert!(!s.probes.is_empty());
//! assert_eq!(s.messages, generate(Style::Corrected, 3).messages);
//! let p = &s.probes[0];
//! assert!(s.messages[p.message_index].text().contains(&p.needles[0])
//!     || s.messages[p.message_index].text().to_lowercase().contains(&p.needles[0].to_lowercase()));
//! assert!(!p.stale.is_empty());
//! ```

use std::collections::BTreeSet;
use std::ops::RangeInclusive;

use keel_core::message::{Message, MessageBody, ToolCall};
use serde_json::{Value, json};

use crate::planted::{self, Builder, FactKind, Rng};

/// Seeds to tune a summarizer on.
pub const TUNING_SEEDS: RangeInclusive<u64> = 1..=99;
/// Seeds reported figures come from (never tuned on).
pub const REPORTING_SEEDS: RangeInclusive<u64> = 1000..=1999;

/// The style of a generated session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Style {
    /// Constraints, preferences and decisions in plain language: no ids, no numbers.
    Plain,
    /// Values stated, then corrected later in varied words (or by a tool result).
    Corrected,
    /// Facts that read-only tool results (`get_*`, `check_*`, `describe_*`, `run_sql`,
    /// `http_get`, `read_file`) or assistant findings establish.
    ReadTools,
    /// 60 facts in 1,200 messages: more than a 300-word summary can hold.
    Dense,
    /// Facts stated in German, Spanish or Chinese inside an English session.
    Multilingual,
    /// 3,000+ messages, with facts also in the last tenth.
    Long,
    /// Long pasted logs and tool outputs full of ids, hashes, trace ids and timestamps,
    /// with rules, constraints and preferences said in plain words between them; the
    /// probes ask for the rules, not the ids.
    PasteHeavy,
    /// Values corrected later in other words than "actually X, not Y" ("we moved it over
    /// to ...", "scratch that, ...", the subject itself reworded), with stale values.
    Reworded,
    /// A question in one turn whose answer is the next turn alone ("what port does the
    /// gateway use?" then "8443."), asked about again later.
    AnswerNext,
}

impl Style {
    /// Every style, in a fixed order.
    pub const ALL: [Style; 9] = [
        Style::Plain,
        Style::Corrected,
        Style::ReadTools,
        Style::Dense,
        Style::Multilingual,
        Style::Long,
        Style::PasteHeavy,
        Style::Reworded,
        Style::AnswerNext,
    ];

    /// The style named `name` (as [`as_str`](Self::as_str) spells it).
    pub fn from_name(name: &str) -> Option<Style> {
        Style::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// A short lower-case name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Style::Plain => "plain",
            Style::Corrected => "corrected",
            Style::ReadTools => "read-tools",
            Style::Dense => "dense",
            Style::Multilingual => "multilingual",
            Style::Long => "long",
            Style::PasteHeavy => "paste-heavy",
            Style::Reworded => "reworded",
            Style::AnswerNext => "answer-next",
        }
    }
}

/// What a request must hold for one fact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The question the fact answers.
    pub question: String,
    /// Texts that must all appear (case-insensitively) for the fact to be kept.
    pub needles: Vec<String>,
    /// Earlier values of a corrected fact, which must not be presented as current.
    pub stale: Vec<String>,
    /// The message that states the (current) value.
    pub message_index: usize,
    /// The message that stated the stale value, for a corrected fact.
    pub stale_index: Option<usize>,
}

impl Probe {
    /// `{"question", "needles", "stale"}`.
    pub fn to_json(&self) -> Value {
        json!({"question": self.question, "needles": self.needles, "stale": self.stale})
    }

    /// True when every needle appears in `text` (case-insensitively).
    pub fn kept_in(&self, text: &str) -> bool {
        let lower = text.to_lowercase();
        self.needles
            .iter()
            .all(|n| lower.contains(&n.to_lowercase()))
    }
}

/// A generated session and its probes.
#[derive(Clone, Debug, PartialEq)]
pub struct StyledSession {
    /// The style.
    pub style: Style,
    /// The conversation, starting with a system prompt; every message has an id.
    pub messages: Vec<Message>,
    /// One probe per fact.
    pub probes: Vec<Probe>,
}

impl StyledSession {
    /// One JSON message per line (the `keel replay` transcript format).
    pub fn to_jsonl(&self) -> Result<String, serde_json::Error> {
        let mut out = String::new();
        for m in &self.messages {
            out.push_str(&serde_json::to_string(m)?);
            out.push('\n');
        }
        Ok(out)
    }

    /// The probes, one `{"question", "needles", "stale"}` object per line (the
    /// `keel eval --probes` format).
    pub fn probes_jsonl(&self) -> String {
        let mut out = String::new();
        for p in &self.probes {
            out.push_str(&p.to_json().to_string());
            out.push('\n');
        }
        out
    }

    /// The probes as a JSON array of `{"question", "needles", "stale"}`.
    pub fn probes_json(&self) -> Value {
        Value::Array(self.probes.iter().map(Probe::to_json).collect())
    }
}

/// Draws words without replacement (then again in another order).
struct Deck {
    items: &'static [&'static str],
    order: Vec<usize>,
    next: usize,
}

impl Deck {
    fn new(items: &'static [&'static str]) -> Deck {
        Deck {
            items,
            order: Vec::new(),
            next: 0,
        }
    }

    fn draw(&mut self, rng: &mut Rng) -> &'static str {
        if self.next >= self.order.len() {
            self.order = (0..self.items.len()).collect();
            for i in (1..self.order.len()).rev() {
                let j = (rng.next() % (i as u64 + 1)) as usize;
                self.order.swap(i, j);
            }
            self.next = 0;
        }
        let item = self.items[self.order[self.next]];
        self.next += 1;
        item
    }
}

const CITIES: &[&str] = &[
    "Frankfurt",
    "Dublin",
    "Oslo",
    "Lisbon",
    "Warsaw",
    "Zurich",
    "Madrid",
    "Vienna",
    "Helsinki",
    "Prague",
    "Milan",
    "Lyon",
    "Porto",
    "Tallinn",
];
const DATA: &[&str] = &[
    "customer data",
    "payroll exports",
    "support transcripts",
    "card tokens",
    "audit trails",
    "invoice drafts",
    "health records",
    "call recordings",
    "loyalty balances",
    "shipping manifests",
    "tax filings",
    "contract scans",
];
const SYSTEMS: &[&str] = &[
    "billing ledger",
    "warehouse scheduler",
    "partner portal",
    "returns queue",
    "pricing engine",
    "identity broker",
    "archive vault",
    "label printers",
    "courier gateway",
    "refund desk",
    "catalog mirror",
    "loyalty engine",
    "payout batcher",
    "fraud screen",
];
const TEAMS: &[&str] = &[
    "finance team",
    "legal team",
    "privacy office",
    "night shift",
    "partner desk",
    "procurement team",
    "security guild",
    "storage crew",
    "field engineers",
    "treasury desk",
    "works council",
    "audit committee",
];
const PEOPLE: &[&str] = &[
    "Priya", "Tomasz", "Amara", "Kenji", "Lucia", "Oskar", "Nadia", "Rafael", "Ingrid", "Mateo",
    "Yusuf", "Greta",
];
const VENDORS: &[&str] = &[
    "Hetzner",
    "Scaleway",
    "Exoscale",
    "Backblaze",
    "Wasabi",
    "Fastly",
    "Bunny",
    "Upcloud",
    "Gcore",
    "Ionos",
];
/// Teammates whose chat lines are pasted (never the owner of a fact's name).
const MATES: &[&str] = &["Sam", "Lee", "Dana", "Alex", "Robin", "Kim"];
const REGIONS: &[&str] = &[
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "eu-central-1",
    "eu-central-2",
    "eu-north-1",
    "eu-south-1",
    "us-east-2",
    "us-west-2",
    "ap-south-1",
];
const ZH_CITIES: &[&str] = &[
    "法兰克福",
    "都柏林",
    "新加坡",
    "上海",
    "东京",
    "首尔",
    "悉尼",
];
const ZH_NAMES: &[&str] = &["王伟", "李娜", "张敏", "刘洋", "陈静", "杨帆", "赵磊"];

const LANGUAGES: &[&str] = &[
    "German",
    "Dutch",
    "Polish",
    "Portuguese",
    "Italian",
    "Swedish",
    "French",
];
const NUMBER_WORDS: &[&str] = &[
    "three", "four", "five", "six", "seven", "eight", "nine", "eleven", "twelve",
];
const TIERS: &[&str] = &[
    "Gold",
    "Platinum",
    "Enterprise Plus",
    "Business Critical",
    "Premier",
];

/// Everything the generator draws from.
struct Gen {
    style: Style,
    b: Builder,
    rng: Rng,
    cities: Deck,
    data: Deck,
    systems: Deck,
    teams: Deck,
    people: Deck,
    vendors: Deck,
    regions: Deck,
    zh_cities: Deck,
    zh_names: Deck,
    /// Every value a needle uses, so no two facts share one.
    used: BTreeSet<String>,
    clock: u64,
    /// Templates not used yet in this session, for the kinds that use each at most once
    /// (drawn lazily, so the other kinds' sessions stay as they were).
    templates: Vec<u64>,
}

/// A fact ready to state: its sentence, needles and question.
struct Fact {
    sentence: String,
    needles: Vec<String>,
    question: String,
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

impl Gen {
    fn new(seed: u64, style: Style) -> Gen {
        Gen {
            style,
            b: Builder {
                seed,
                messages: Vec::new(),
                calls: 0,
            },
            rng: Rng(seed ^ 0x5717_1E00_0000_0000 ^ ((style as u64) << 40)),
            cities: Deck::new(CITIES),
            data: Deck::new(DATA),
            systems: Deck::new(SYSTEMS),
            teams: Deck::new(TEAMS),
            people: Deck::new(PEOPLE),
            vendors: Deck::new(VENDORS),
            regions: Deck::new(REGIONS),
            zh_cities: Deck::new(ZH_CITIES),
            zh_names: Deck::new(ZH_NAMES),
            used: BTreeSet::new(),
            clock: 8 * 60,
            templates: Vec::new(),
        }
    }

    /// The next of `count` templates, each used once before any is used again.
    fn template(&mut self, count: u64) -> u64 {
        if self.templates.is_empty() {
            self.templates = (0..count).collect();
            for i in (1..self.templates.len()).rev() {
                let j = (self.rng.next() % (i as u64 + 1)) as usize;
                self.templates.swap(i, j);
            }
        }
        self.templates.pop().unwrap_or(0)
    }

    fn push(&mut self, m: Message) -> usize {
        let index = self.b.messages.len();
        // Long ids with a long shared prefix: an 8-character reference cannot tell
        // them apart.
        let id = format!("conv-{:04}-northwind-export-{index:05}", self.b.seed);
        self.b.messages.push(m.with_id(id));
        index
    }

    fn stamp(&mut self) -> String {
        self.clock += self.rng.range(0, 3);
        format!("[{:02}:{:02}]", (self.clock / 60) % 24, self.clock % 60)
    }

    fn mate(&mut self) -> &'static str {
        self.rng.pick(MATES)
    }

    /// A number in `lo..=hi` no other needle uses (as text with `fmt`).
    fn fresh(&mut self, lo: u64, hi: u64, fmt: impl Fn(u64) -> String) -> String {
        for _ in 0..64 {
            let v = fmt(self.rng.range(lo, hi));
            if self.used.insert(v.clone()) {
                return v;
            }
        }
        let v = fmt(hi + self.used.len() as u64);
        self.used.insert(v.clone());
        v
    }

    fn host(&mut self) -> String {
        let word = self.rng.pick(planted::WORDS);
        self.fresh(10, 989, |n| format!("pg-{word}-{n}.db.internal"))
    }

    // ---- filler ------------------------------------------------------------------

    /// A read-only tool loop whose output is noise.
    fn tool_noise(&mut self) {
        let svc = self.rng.pick(planted::SERVICES);
        let name = self.rng.pick(&[
            "get_pods",
            "check_health",
            "describe_service",
            "run_sql",
            "http_get",
            "read_file",
            "get_metrics",
            "kubectl_logs",
        ]);
        let intro = self.rng.pick(&[
            "",
            "Looking at it now.",
            "Checking.",
            "Pulling the next batch of logs.",
            "One moment.",
        ]);
        let id = self.b.call_id();
        let call = ToolCall::new(id.clone(), name, json!({"target": svc}));
        self.push(Message::ai(intro).with_tool_calls(vec![call]));
        let lines = self.rng.range(4, 24);
        let text: Vec<String> = (0..lines)
            .map(|_| planted::log_line(&mut self.rng, svc))
            .collect();
        self.tool_result(&id, name, &text.join("\n"));
        let after = self.rng.pick(&[
            "Nothing unusual there.",
            "Let's continue.",
            "Same picture as before.",
            "Moving on to the next one.",
            "That part looks normal.",
            "Continuing with the remaining pods.",
        ]);
        self.push(Message::ai(after));
    }

    fn tool_result(&mut self, id: &str, name: &str, text: &str) -> usize {
        let mut m = Message::tool(id, text);
        if let MessageBody::Tool(t) = m.body_mut() {
            t.name = Some(name.to_owned());
        }
        self.push(m)
    }

    /// Chat of the shapes that carry nothing: acks, timestamps, narration, pastes.
    fn chatter(&mut self) {
        match self.rng.range(0, 5) {
            0 => {
                let stamp = self.stamp();
                let mate = self.mate();
                let line = self.rng.pick(&[
                    "ack",
                    "on it",
                    "👍",
                    "lgtm",
                    "same here",
                    "brb",
                    "will do",
                    "seen",
                    "+1",
                ]);
                self.push(Message::human(format!("{stamp} {mate}: {line}")));
            }
            1 => {
                let stamp = self.stamp();
                let (a, b) = (self.mate(), self.mate());
                let s2 = self.stamp();
                let text = format!(
                    "pasting from the team channel:\n{stamp} {a}: anyone looking at this?\n{s2} {b}: yes, on it"
                );
                self.push(Message::human(text));
            }
            2 => {
                let u = self.rng.pick(&[
                    "any news?",
                    "still there?",
                    "ok, continue",
                    "keep going",
                    "back, sorry",
                    "hmm ok",
                    "right",
                    "go on then",
                ]);
                self.push(Message::human(u));
            }
            3 => {
                let a = self.rng.pick(&[
                    "Let's continue.",
                    "I'm going through the remaining pods one by one.",
                    "Now I'm comparing the two configs side by side.",
                    "Next I'll look at the queue depth.",
                    "Still working through the output.",
                    "Here's what I see so far:",
                ]);
                self.push(Message::ai(a));
            }
            _ => {
                let u = self.rng.pick(&[
                    "Can you check the other pods too?",
                    "What does the health check say now?",
                    "Is it the same on the staging side?",
                ]);
                self.push(Message::human(u));
                let a = self.rng.pick(&["Sure, checking.", "On it.", "Will do."]);
                self.push(Message::ai(a));
            }
        }
    }

    fn filler(&mut self) {
        match self.style {
            Style::PasteHeavy => {
                match self.rng.range(0, 9) {
                    0..=3 => self.paste(),
                    4 | 5 => self.tool_noise(),
                    _ => self.chatter(),
                }
                return;
            }
            Style::AnswerNext => {
                if self.rng.chance(40) {
                    self.quiet_tool();
                } else {
                    self.chatter();
                }
                return;
            }
            _ => {}
        }
        if self.rng.chance(55) {
            self.tool_noise();
        } else {
            self.chatter();
        }
    }

    /// A long block of machine output: log lines, trace spans, commits, a stack
    /// trace or cluster events, full of ids, hashes and timestamps.
    fn paste_block(&mut self) -> String {
        let svc = self.rng.pick(planted::SERVICES);
        let r = &mut self.rng;
        let lines = r.range(10, 50);
        let ts = |r: &mut Rng| {
            format!(
                "2026-11-30T{:02}:{:02}:{:02}.{:03}Z",
                r.range(6, 11),
                r.range(0, 59),
                r.range(0, 59),
                r.range(0, 999)
            )
        };
        let text: Vec<String> = match r.range(0, 4) {
            0 => (0..lines).map(|_| planted::log_line(r, svc)).collect(),
            1 => (0..lines)
                .map(|_| {
                    format!(
                        "{{\"ts\":\"{}\",\"trace_id\":\"{}\",\"span_id\":\"{}\",\"parent_id\":\"{}\",\"service\":\"{svc}\",\"op\":\"POST /v1/export\",\"status\":{},\"duration_ms\":{}}}",
                        ts(r),
                        r.hex(32),
                        r.hex(16),
                        r.hex(16),
                        if r.chance(30) { 500 } else { 200 },
                        r.range(2, 9000)
                    )
                })
                .collect(),
            2 => (0..lines / 4 + 2)
                .map(|_| {
                    format!(
                        "commit {}\nAuthor: ci-bot <ci@acme.internal>\nDate:   {}\n\n    build: bump {svc} to {}",
                        r.hex(40),
                        ts(r),
                        r.hex(7)
                    )
                })
                .collect(),
            3 => {
                let mut t = vec![
                    format!("{} ERROR request_id={} unhandled exception", ts(r), r.hex(24)),
                    "Traceback (most recent call last):".to_owned(),
                ];
                for _ in 0..lines / 3 + 2 {
                    t.push(format!(
                        "  File \"/srv/{svc}/app/{}.py\", line {}, in handle_{}",
                        r.pick(&["handlers", "export", "batch", "client", "retry"]),
                        r.range(12, 880),
                        r.hex(6)
                    ));
                }
                t.push(format!("KeyError: 'order_{}'", r.hex(8)));
                t
            }
            _ => {
                let mut t = vec!["LAST SEEN   TYPE      REASON      OBJECT                              MESSAGE".to_owned()];
                for _ in 0..lines {
                    t.push(format!(
                        "{}m         {}   {}   pod/{svc}-{}-{}   {} (sha256:{})",
                        r.range(1, 59),
                        r.pick(&["Warning", "Normal "]),
                        r.pick(&["BackOff   ", "Pulled    ", "Killing   ", "Unhealthy "]),
                        r.hex(9),
                        r.hex(5),
                        r.pick(&[
                            "Back-off restarting failed container",
                            "Container image pulled",
                            "Stopping container",
                            "Readiness probe failed: HTTP probe failed with statuscode: 503",
                        ]),
                        r.hex(12)
                    ));
                }
                t
            }
        };
        text.join("\n")
    }

    /// A pasted block, by the user or as a read-only tool's result.
    fn paste(&mut self) {
        let block = self.paste_block();
        if self.rng.chance(50) {
            let intro = self.rng.pick(&[
                "here's the latest from the pod:",
                "more logs:",
                "this is what grep gives me:",
                "pasting the trace:",
                "output below",
                "same thing again, newer:",
            ]);
            self.push(Message::human(format!("{intro}\n```\n{block}\n```")));
            let a = self.rng.pick(&[
                "Thanks, reading it.",
                "Looking through it.",
                "Got it.",
                "The same failure pattern as before.",
            ]);
            self.push(Message::ai(a));
        } else {
            let name = self.rng.pick(&[
                "grep_logs",
                "get_traces",
                "kubectl_events",
                "git_log",
                "tail_logs",
            ]);
            let id = self.b.call_id();
            let svc = self.rng.pick(planted::SERVICES);
            let call = ToolCall::new(id.clone(), name, json!({"target": svc}));
            self.push(Message::ai("").with_tool_calls(vec![call]));
            self.tool_result(&id, name, &block);
            let a = self.rng.pick(&[
                "Nothing new in there.",
                "Let's continue.",
                "More of the same.",
            ]);
            self.push(Message::ai(a));
        }
    }

    /// A read-only tool loop whose output is status words, no numbers.
    fn quiet_tool(&mut self) {
        let svc = self.rng.pick(planted::SERVICES);
        let name = self.rng.pick(&[
            "check_health",
            "get_status",
            "describe_service",
            "list_alerts",
        ]);
        let id = self.b.call_id();
        let call = ToolCall::new(id.clone(), name, json!({"target": svc}));
        self.push(Message::ai("Checking.").with_tool_calls(vec![call]));
        let mut lines = vec![format!("service: {svc}")];
        for key in ["pods", "queue", "alerts", "last deploy", "dependencies"] {
            if self.rng.chance(70) {
                let v = self.rng.pick(&[
                    "all running",
                    "draining",
                    "none firing",
                    "healthy",
                    "yesterday evening",
                    "degraded upstream",
                    "ok",
                    "paused",
                ]);
                lines.push(format!("{key}: {v}"));
            }
        }
        self.tool_result(&id, name, &lines.join("\n"));
        let after = self
            .rng
            .pick(&["Looks fine.", "Nothing alarming.", "Let's continue."]);
        self.push(Message::ai(after));
    }

    // ---- stating facts -----------------------------------------------------------

    /// States `sentence` in a varied voice: the user, the user among chatter, the
    /// assistant, or a pasted teammate line. Returns the message index.
    fn state(&mut self, sentence: &str) -> usize {
        let sentence = capitalise(sentence);
        match self.rng.range(0, 9) {
            0..=2 => self.push(Message::human(sentence)),
            3 | 4 => {
                let before = self.rng.pick(&["one more thing:", "fyi", "btw,", "also"]);
                let after = self
                    .rng
                    .pick(&["anyway, continue", "ok, go on", "keep going"]);
                self.push(Message::human(format!("{before} {sentence} {after}")))
            }
            5 | 6 => {
                let lead = self.rng.pick(&[
                    "From the handover notes:",
                    "For the record:",
                    "Noting this from the runbook:",
                    "",
                ]);
                let text = format!("{lead} {sentence}").trim().to_owned();
                self.push(Message::human("what do the handover notes say?"));
                self.push(Message::ai(text))
            }
            _ => {
                let (s1, s2) = (self.stamp(), self.stamp());
                let (a, b) = (self.mate(), self.mate());
                let text =
                    format!("pasting from the team channel:\n{s1} {a}: {sentence}\n{s2} {b}: ack");
                self.push(Message::human(text))
            }
        }
    }

    fn probe(&mut self, f: Fact, index: usize) -> Probe {
        Probe {
            question: f.question,
            needles: f.needles,
            stale: Vec::new(),
            message_index: index,
            stale_index: None,
        }
    }

    /// A fact in plain language: no ids, no numbers.
    fn plain_fact(&mut self) -> Fact {
        let r = &mut self.rng;
        let t = r.range(0, 11);
        let (city, data, system, team, person, vendor) = (
            self.cities.draw(r),
            self.data.draw(r),
            self.systems.draw(r),
            self.teams.draw(r),
            self.people.draw(r),
            self.vendors.draw(r),
        );
        let (sentence, needles, question) = match t {
            0 => (
                format!("no {data} leaves the {city} region"),
                vec![data, city],
                format!("Where must the {data} stay?"),
            ),
            1 => (
                format!("the {team} signs off on every change to the {system} before it ships"),
                vec![team, system],
                format!("Who signs off on changes to the {system}?"),
            ),
            2 => (
                format!("{person} would rather be phoned than paged about the {system}"),
                vec![person, system],
                format!("How does {person} want to be told about the {system}?"),
            ),
            3 => (
                format!("we're going with {vendor} for the {system} backups"),
                vec![vendor, system],
                format!("Which vendor takes the {system} backups?"),
            ),
            4 => (
                format!("nobody touches the {system} during the {city} business day"),
                vec![system, city],
                format!("When must the {system} be left alone?"),
            ),
            5 => (
                format!("{data} are handled by the {team} and never by support"),
                vec![data, team],
                format!("Who handles {data}?"),
            ),
            6 => (
                format!(
                    "we absorb the cost of the {system} migration until the cut-over; the {team} must not bill the customer for it"
                ),
                vec![system, team],
                format!("Who must not bill the customer for the {system} migration?"),
            ),
            7 => (
                format!("the {system} stays read-only until {person} is back from leave"),
                vec![system, person],
                format!("Until when is the {system} read-only?"),
            ),
            8 => (
                format!("keep the {data} out of the shared dashboards, the {team} asked for that"),
                vec![data, team],
                "What must stay out of the shared dashboards?".to_owned(),
            ),
            9 => (
                format!("{person} owns the relationship with {vendor}, so talk to them first"),
                vec![person, vendor],
                format!("Who owns the relationship with {vendor}?"),
            ),
            10 => (
                format!(
                    "let's keep the {system} on the old layout until the {team} has trained everyone"
                ),
                vec![system, team],
                format!("Why does the {system} keep the old layout?"),
            ),
            _ => (
                format!(
                    "the customer wants the weekly report from the {system} sent to {person} only"
                ),
                vec![system, person],
                format!("Who gets the weekly report from the {system}?"),
            ),
        };
        Fact {
            sentence,
            needles: needles.into_iter().map(str::to_owned).collect(),
            question,
        }
    }

    fn plain(&mut self) -> Probe {
        let f = self.plain_fact();
        let i = self.state(&f.sentence);
        self.probe(f, i)
    }

    /// A value fact of the planted generator's kinds, stated in a varied voice.
    fn value(&mut self) -> Probe {
        const KINDS: [FactKind; 13] = [
            FactKind::Decision,
            FactKind::Rule,
            FactKind::Requirement,
            FactKind::Preference,
            FactKind::Identifier,
            FactKind::Version,
            FactKind::Hash,
            FactKind::DateTime,
            FactKind::Path,
            FactKind::Url,
            FactKind::Name,
            FactKind::ErrorCode,
            FactKind::Address,
        ];
        let kind = KINDS[(self.rng.next() % KINDS.len() as u64) as usize];
        let (sentence, needle) = loop {
            let again = self.rng.chance(30);
            let (s, n) = planted::fact_text(&mut self.rng, kind, again);
            if self.used.insert(n.clone()) {
                break (s, n);
            }
        };
        let sentence = sentence
            .trim_start_matches("Okay, ")
            .replace(" Slack channel", " channel");
        let i = self.state(&sentence);
        // Asked about by its context, as a user would ("the worker config lives at
        // what?"): a question naming only the kind ("what is the path stated?") has
        // as many answers as the session has paths.
        let masked = sentence
            .replace(&needle, "what")
            .trim_end_matches(['.', '!'])
            .to_owned();
        Probe {
            question: format!("Remind me: {masked}?"),
            needles: vec![needle],
            stale: Vec::new(),
            message_index: i,
            stale_index: None,
        }
    }

    /// A fact a read-only tool result or an assistant finding establishes.
    fn read_tool(&mut self) -> Probe {
        let svc = self.rng.pick(planted::SERVICES);
        let word = self.rng.pick(planted::WORDS);
        let t = self.rng.range(0, 10);
        if t >= 8 {
            // An assistant finding, after a look at noise.
            self.tool_noise();
            let (text, needle, question) = match t {
                8 => {
                    let n = self.fresh(1000, 9999, |n| format!("build {n}"));
                    (
                        format!("Production is on {n}."),
                        n,
                        "Which build runs in production?".to_owned(),
                    )
                }
                9 => {
                    let node = self.fresh(10, 250, |n| format!("ip-10-4-{n}-17"));
                    (
                        format!("The failing job runs on node {node}, the others are fine."),
                        node,
                        "Where does the failing job run?".to_owned(),
                    )
                }
                _ => {
                    let hook = self.fresh(0, 0, |_| format!("{word}-webhook"));
                    (
                        format!("The root cause is the expired token of the {hook}."),
                        hook,
                        "What is the root cause?".to_owned(),
                    )
                }
            };
            let i = self.push(Message::ai(text));
            return Probe {
                question,
                needles: vec![needle],
                stale: Vec::new(),
                message_index: i,
                stale_index: None,
            };
        }
        let (name, args, output, needles, question) = match t {
            0 => {
                let build = self.fresh(1000, 9999, |n| format!("build-{n}"));
                (
                    "get_deployment",
                    json!({"service": svc, "env": "production"}),
                    format!(
                        "service: {svc}\nenvironment: production\nimage: registry.acme.internal/{svc}:{build}\nreplicas: 6\nupdated: 2026-11-29T22:14Z"
                    ),
                    vec![build],
                    format!("Which build of {svc} runs in production?"),
                )
            }
            1 => {
                let mount = self.fresh(0, 0, |_| format!("/var/lib/{word}-data"));
                let pct = self.rng.range(94, 99);
                (
                    "check_disk",
                    json!({"host": format!("{svc}-db-1")}),
                    format!(
                        "Filesystem      Size  Used Avail Use% Mounted on\n/dev/nvme0n1p1   50G   21G   29G  42% /\n/dev/nvme1n1    500G  {}G  {}G  {pct}% {mount}",
                        5 * pct,
                        500 - 5 * pct
                    ),
                    vec![mount],
                    "Which volume is nearly full?".to_owned(),
                )
            }
            2 => {
                let domain = self.fresh(0, 0, |_| format!("api.{word}.example"));
                let date = self.fresh(1, 28, |d| format!("2026-12-{d:02}"));
                (
                    "describe_certificate",
                    json!({"name": domain}),
                    format!(
                        "Subject: CN={domain}\nIssuer: R11\nNot Before: 2026-09-{}\nNot After: {date} 23:59:59 UTC\nSerial: {}",
                        self.rng.range(10, 28),
                        self.rng.hex(16)
                    ),
                    vec![domain, date],
                    "When does the certificate expire?".to_owned(),
                )
            }
            3 => {
                let count = self.fresh(1_000_000, 9_999_999, |n| n.to_string());
                (
                    "run_sql",
                    json!({"query": "SELECT count(*) FROM orders WHERE state = 'stuck'"}),
                    format!("  count\n---------\n {count}\n(1 row)"),
                    vec![count],
                    "How many orders are stuck?".to_owned(),
                )
            }
            4 => {
                let comp = self.fresh(0, 0, |_| format!("queue-{word}"));
                (
                    "http_get",
                    json!({"url": "https://status.acme.internal/api/v2/components"}),
                    format!(
                        "{{\"page\": \"acme\", \"components\": [{{\"name\": \"api\", \"status\": \"operational\"}}, {{\"name\": \"{comp}\", \"status\": \"degraded\", \"since\": \"2026-11-30T06:40Z\"}}]}}"
                    ),
                    vec![comp],
                    "Which component is degraded?".to_owned(),
                )
            }
            5 => {
                let host = self.host();
                (
                    "read_file",
                    json!({"path": format!("/etc/{svc}/database.toml")}),
                    format!("# managed by ansible\n[database]\nprimary = \"{host}\"\npool = 20\n"),
                    vec![host],
                    format!("Which database does {svc} use?"),
                )
            }
            6 => {
                let lb = self.fresh(10, 99, |n| format!("lb-{word}-{n}.acme.net"));
                (
                    "check_dns",
                    json!({"name": format!("{svc}.acme.com")}),
                    format!(
                        ";; ANSWER SECTION:\n{svc}.acme.com. 300 IN CNAME {lb}.\n;; Query time: 12 msec"
                    ),
                    vec![lb],
                    format!("Where does {svc}.acme.com point?"),
                )
            }
            _ => {
                let flag = self.fresh(0, 0, |_| format!("{word}_pricing"));
                (
                    "get_feature_flags",
                    json!({"service": svc}),
                    format!("{{\"new_checkout\": false, \"{flag}\": true, \"dark_mode\": false}}"),
                    vec![flag],
                    "Which flag is on?".to_owned(),
                )
            }
        };
        let id = self.b.call_id();
        let intro = self.rng.pick(&["", "Let me check.", "Checking that."]);
        self.push(Message::ai(intro).with_tool_calls(vec![ToolCall::new(id.clone(), name, args)]));
        let i = self.tool_result(&id, name, &output);
        if self.rng.chance(50) {
            let a = self
                .rng
                .pick(&["Got the output.", "Let's continue.", "Ok."]);
            self.push(Message::ai(a));
        }
        Probe {
            question,
            needles,
            stale: Vec::new(),
            message_index: i,
            stale_index: None,
        }
    }

    /// A fact in German, Spanish or Chinese (by `lang`: 0, 1, 2).
    fn foreign(&mut self, lang: u64) -> Probe {
        let r = &mut self.rng;
        let person = format!("{} {}", r.pick(planted::FIRST), r.pick(planted::LAST));
        let (sentence, needles, question) = match (lang, r.range(0, 3)) {
            (0, 0) => {
                let city = self.cities.draw(r);
                (
                    format!("Die Kundendaten dürfen das Rechenzentrum in {city} nicht verlassen."),
                    vec![city.to_owned()],
                    "Wo müssen die Kundendaten bleiben?".to_owned(),
                )
            }
            (0, 1) => {
                let h = self.fresh(0, 21, |h| format!("{h:02}:30 Uhr"));
                (
                    format!(
                        "Der Wartungstermin ist am Samstag um {h}, vorher bitte nichts ausrollen."
                    ),
                    vec![h],
                    "Wann ist der Wartungstermin?".to_owned(),
                )
            }
            (0, 2) => {
                self.used.insert(person.clone());
                (
                    format!("Ansprechpartner beim Kunden ist {person}, bitte immer in CC setzen."),
                    vec![person],
                    "Wer ist der Ansprechpartner?".to_owned(),
                )
            }
            (0, _) => {
                let t = self.fresh(100, 9999, |n| format!("TCK-{n}"));
                (
                    format!("Das Ticket dafür ist {t}, bitte überall angeben."),
                    vec![t],
                    "Welches Ticket?".to_owned(),
                )
            }
            (1, 0) => {
                let n = self.fresh(11, 99, |n| format!("reintentos es {n}"));
                (
                    format!("El límite de {n} y no se puede cambiar sin aprobación."),
                    vec![n],
                    "¿Cuál es el límite de reintentos?".to_owned(),
                )
            }
            (1, 1) => {
                let city = self.cities.draw(r);
                (
                    format!(
                        "Los datos de facturación se quedan en {city}; nunca se copian a otra región."
                    ),
                    vec![city.to_owned()],
                    "¿Dónde se quedan los datos de facturación?".to_owned(),
                )
            }
            (1, 2) => {
                self.used.insert(person.clone());
                (
                    format!(
                        "La responsable del proyecto es {person}, hay que avisarle antes de cada cambio."
                    ),
                    vec![person],
                    "¿Quién es la responsable del proyecto?".to_owned(),
                )
            }
            (1, _) => {
                let host = self.host();
                (
                    format!("El servidor principal es {host} y no hay que reiniciarlo."),
                    vec![host],
                    "¿Cuál es el servidor principal?".to_owned(),
                )
            }
            (_, 0) => {
                let city = self.zh_cities.draw(r);
                (
                    format!("客户的数据必须保存在{city}机房，不能迁移到其他地区。"),
                    vec![format!("{city}机房")],
                    "客户的数据保存在哪里？".to_owned(),
                )
            }
            (_, 1) => {
                let t = self.fresh(100, 9999, |n| format!("TCK-{n}"));
                (
                    format!("工单号是{t}，请在所有更新里引用。"),
                    vec![t],
                    "工单号是多少？".to_owned(),
                )
            }
            (_, 2) => {
                let name = self.zh_names.draw(r);
                (
                    format!("这个项目的负责人是{name}，有问题先找他。"),
                    vec![format!("负责人是{name}")],
                    "负责人是谁？".to_owned(),
                )
            }
            (_, _) => {
                let host = self.host();
                (
                    format!("主数据库是{host}。不要重启它。"),
                    vec![host],
                    "主数据库是哪个？".to_owned(),
                )
            }
        };
        let i = match self.rng.range(0, 2) {
            0 => self.push(Message::human(sentence)),
            1 => self.push(Message::human(format!("the customer wrote: {sentence}"))),
            _ => {
                let (s, m) = (self.stamp(), self.mate());
                self.push(Message::human(format!(
                    "pasting from the team channel:\n{s} {m}: {sentence}"
                )))
            }
        };
        Probe {
            question,
            needles,
            stale: Vec::new(),
            message_index: i,
            stale_index: None,
        }
    }

    /// The first statement of a value that is corrected later: (subject, old, new,
    /// statement, a key for tool output).
    fn corrected_pair(&mut self, subject: u64) -> (String, String, String, String, String) {
        match subject {
            0 => {
                let (a, b) = (self.host(), self.host());
                let s = format!("the primary host is {a}");
                ("primary host".into(), a, b, s, "primary_host".into())
            }
            1 => {
                let a = self.fresh(20, 90, |n| format!("{n} seconds"));
                let b = self.fresh(91, 300, |n| format!("{n} seconds"));
                let s = format!("set the request timeout to {a}");
                ("request timeout".into(), a, b, s, "request_timeout".into())
            }
            2 => {
                let (a, b) = (
                    self.regions.draw(&mut self.rng),
                    self.regions.draw(&mut self.rng),
                );
                let s = format!("ship the nightly exports to {a}");
                (
                    "export region".into(),
                    a.into(),
                    b.into(),
                    s,
                    "export_region".into(),
                )
            }
            3 => {
                let a = self.fresh(3, 12, |n| format!("{n} replicas"));
                let b = self.fresh(13, 40, |n| format!("{n} replicas"));
                let s = format!("we run the worker with {a}");
                ("worker replicas".into(), a, b, s, "worker_replicas".into())
            }
            4 => {
                let a = self.fresh(1, 9, |n| format!("release/26.{n}"));
                let b = self.fresh(10, 12, |n| format!("release/26.{n}"));
                let s = format!("cut the hotfix from {a}");
                ("hotfix branch".into(), a, b, s, "hotfix_branch".into())
            }
            5 => {
                let a = format!(
                    "{} {}",
                    self.people.draw(&mut self.rng),
                    self.rng.pick(planted::LAST)
                );
                let b = format!(
                    "{} {}",
                    self.people.draw(&mut self.rng),
                    self.rng.pick(planted::LAST)
                );
                let s = format!("the on-call owner this week is {a}");
                ("on-call owner".into(), a, b, s, "oncall_owner".into())
            }
            6 => {
                let a = self.fresh(1, 14, |d| format!("2026-12-{d:02}"));
                let b = self.fresh(15, 28, |d| format!("2026-12-{d:02}"));
                let s = format!("the cut-over is planned for {a}");
                ("cut-over date".into(), a, b, s, "cutover_date".into())
            }
            _ => {
                let a = self.fresh(100, 900, |n| format!("{n} rows per batch"));
                let b = self.fresh(1000, 5000, |n| format!("{n} rows per batch"));
                let s = format!("the importer uses {a}");
                ("importer batch size".into(), a, b, s, "batch_size".into())
            }
        }
    }

    /// States a correction of `subject` to `new`, in one of several wordings.
    fn correct(&mut self, subject: &str, new: &str, key: &str) -> usize {
        match self.rng.range(0, 6) {
            0 => self.push(Message::human(format!("Change of plan: {new} instead."))),
            1 => self.push(Message::human(format!(
                "Let's switch to {new} for the {subject}."
            ))),
            2 => self.push(Message::human(format!("Bump the {subject} to {new}."))),
            3 => self.push(Message::human(format!("Actually, the {subject} is {new}."))),
            4 => {
                let (s, m) = (self.stamp(), self.mate());
                self.push(Message::human(format!(
                    "pasting from the team channel:\n{s} {m}: {subject} moved to {new}, fyi"
                )))
            }
            _ => {
                let id = self.b.call_id();
                let call = ToolCall::new(
                    id.clone(),
                    "get_config",
                    json!({"service": "export-worker"}),
                );
                self.push(Message::ai("Let me check the live config.").with_tool_calls(vec![call]));
                let text = format!("log_level: info\n{key}: {new}\nretries: 5");
                let i = self.tool_result(&id, "get_config", &text);
                self.push(Message::ai(format!(
                    "The live config has {key} set to {new}."
                )));
                i
            }
        }
    }
}

impl Gen {
    /// A rule, constraint or preference in plain words (each of the twelve at most once
    /// per session).
    fn rule_fact(&mut self) -> Fact {
        let r = &mut self.rng;
        let (data, city, system, team, person, vendor) = (
            self.data.draw(r),
            self.cities.draw(r),
            self.systems.draw(r),
            self.teams.draw(r),
            self.people.draw(r),
            self.vendors.draw(r),
        );
        let t = self.template(12);
        let (sentence, needles, question): (String, Vec<String>, String) = match t {
            0 => (
                format!("keep your answers short, {person} reads them on a phone between meetings"),
                vec!["short".into(), person.into()],
                "How long should the answers be, and why?".into(),
            ),
            1 => {
                let day = self.rng.pick(planted::DAYS);
                (
                    format!(
                        "the {team} is frozen until {day}, nothing of theirs ships before then"
                    ),
                    vec![team.into(), day.into()],
                    "Which team is frozen, and until when?".into(),
                )
            }
            2 => (
                format!("nobody restarts anything on the {system} without asking {person} first"),
                vec![person.into()],
                format!("Who has to be asked before anything on the {system} is restarted?"),
            ),
            3 => (
                format!("never paste {data} into a ticket, link to the vault entry"),
                vec![data.into()],
                "What must never be pasted into a ticket?".into(),
            ),
            4 => {
                let lang = self.rng.pick(LANGUAGES);
                (
                    format!(
                        "write every status update in {lang}, the customer's managers read them"
                    ),
                    vec![lang.into()],
                    "Which language are the status updates written in?".into(),
                )
            }
            5 => (
                format!(
                    "{person} wants a phone call, not a chat message, when the {system} is down"
                ),
                vec!["phone call".into()],
                format!("How does {person} want to hear that the {system} is down?"),
            ),
            6 => (
                format!("rollbacks of the {system} need a second pair of eyes from the {team}"),
                vec![team.into()],
                format!("Who has to review a rollback of the {system}?"),
            ),
            7 => {
                let h = self.fresh(1, 5, |h| format!("{h} pm"));
                (
                    format!("no deploys after {h} on Fridays, whatever the ticket says"),
                    vec![h],
                    "What is the cut-off for deploys on Fridays?".into(),
                )
            }
            8 => {
                let n = self.fresh(3, 40, |n| format!("{n} support tickets"));
                (
                    format!("the {vendor} contract caps us at {n} a month, so batch the questions"),
                    vec![n],
                    format!("How many support tickets a month does the {vendor} contract allow?"),
                )
            }
            9 => (
                format!("the {data} stay in {city}, no other region, not even for a test"),
                vec![city.into()],
                format!("Where must the {data} stay?"),
            ),
            10 => (
                format!("every reply that goes to the customer passes through {person} first"),
                vec![person.into()],
                "Who checks replies before they go to the customer?".into(),
            ),
            _ => (
                "don't say outage to the customer, call it degraded service".to_owned(),
                vec!["degraded service".into()],
                "What do we call an outage when we talk to the customer?".into(),
            ),
        };
        Fact {
            sentence,
            needles,
            question,
        }
    }

    /// States a rule between pastes: on its own, after or before a pasted block in the
    /// same message, or in a pasted chat line.
    fn paste_rule(&mut self) -> Probe {
        let f = self.rule_fact();
        let sentence = capitalise(&f.sentence);
        let i = match self.rng.range(0, 6) {
            0..=2 => {
                let lead = self.rng.pick(&[
                    "",
                    "Also, ",
                    "One rule for this whole thing: ",
                    "Before I forget: ",
                ]);
                let text = if lead.is_empty() {
                    format!("{sentence}.")
                } else {
                    format!("{lead}{}.", f.sentence)
                };
                self.push(Message::human(text))
            }
            3 => {
                let block = self.paste_block();
                self.push(Message::human(format!(
                    "newest batch:\n```\n{block}\n```\nand {}.",
                    f.sentence
                )))
            }
            4 => {
                let block = self.paste_block();
                self.push(Message::human(format!(
                    "{sentence}. Anyway, here is the next batch:\n```\n{block}\n```"
                )))
            }
            _ => {
                let (s, m) = (self.stamp(), self.mate());
                self.push(Message::human(format!(
                    "from the incident channel:\n{s} {m}: {}",
                    f.sentence
                )))
            }
        };
        self.probe(f, i)
    }

    /// States a correction of the value `key` names in other words than
    /// [`correct`](Gen::correct): the subject reworded or left out, and no "actually"
    /// or "instead".
    fn reword(&mut self, new: &str, key: &str) -> usize {
        let aliases: &[&str] = match key {
            "primary_host" => &["main database box", "database primary", "primary"],
            "request_timeout" => &["timeout", "request budget"],
            "export_region" => &["nightly export target", "export destination"],
            "worker_replicas" => &["worker count", "number of workers"],
            "hotfix_branch" => &["hotfix base", "branch we hotfix from"],
            "oncall_owner" => &["on-call", "person holding the pager this week"],
            "cutover_date" => &["cut-over", "switch date"],
            _ => &["import batch", "batch setting of the importer"],
        };
        let a = self.rng.pick(aliases);
        let text = match self.rng.range(0, 8) {
            0 => format!("Scratch that, the {a} is {new}."),
            1 => format!("We moved the {a} over to {new} this morning."),
            2 => format!("Heads up: {a} is {new} from now on."),
            3 => format!("Forget what I said about the {a}, go with {new}."),
            4 => format!("After the review we settled on {new} for the {a}."),
            5 => format!("Ops changed the {a} overnight, it's {new} now."),
            6 => format!("{new} is the {a} going forward; the earlier one is retired."),
            _ => {
                let (s, m) = (self.stamp(), self.mate());
                format!("from the change log:\n{s} {m}: {a} -> {new}")
            }
        };
        if self.rng.chance(25) {
            self.push(Message::human("anything changed while I was away?"));
            self.push(Message::ai(text))
        } else {
            self.push(Message::human(text))
        }
    }

    /// A question and, in the very next turn, its answer alone.
    fn answer_next(&mut self) -> Probe {
        let svc = self.rng.pick(planted::SERVICES);
        let r = &mut self.rng;
        let (person, region, vendor) = (
            self.people.draw(r),
            self.regions.draw(r),
            self.vendors.draw(r),
        );
        let t = self.template(12);
        let (ask, value, question): (String, String, String) = match t {
            0 => (
                format!("What port does the {svc} gateway listen on?"),
                self.fresh(1025, 65000, |n| n.to_string()),
                format!("Which port does the {svc} gateway listen on?"),
            ),
            1 => (
                "Which region holds the disaster-recovery copy?".into(),
                region.into(),
                "Where is the disaster-recovery copy kept?".into(),
            ),
            2 => (
                "Who's on call tonight?".into(),
                person.into(),
                "Who is on call tonight?".into(),
            ),
            3 => (
                "When is the maintenance window?".into(),
                self.fresh(1, 11, |h| format!("{h} am UTC")),
                "What time is the maintenance window?".into(),
            ),
            4 => {
                let (a, b) = (self.rng.range(1, 4), self.rng.range(0, 30));
                (
                    "Which version is live right now?".into(),
                    self.fresh(0, 20, |c| format!("v{a}.{b}.{c}")),
                    "Which version is live?".into(),
                )
            }
            5 => {
                let n = self.rng.pick(NUMBER_WORDS);
                self.used.insert(n.to_owned());
                (
                    "How many retries does the importer get before it gives up?".into(),
                    n.into(),
                    "How many retries does the importer get?".into(),
                )
            }
            6 => {
                let word = self.rng.pick(planted::WORDS);
                (
                    "Where do the exports land?".into(),
                    self.fresh(10, 99, |n| format!("s3://{word}-exports-{n}")),
                    "Which bucket do the exports land in?".into(),
                )
            }
            7 => (
                "Who signs off on the budget for this?".into(),
                person.into(),
                "Who approves the budget?".into(),
            ),
            8 => (
                "What's the ticket number for this?".into(),
                self.fresh(100, 9999, |n| format!("TCK-{n}")),
                "Which ticket is this tracked in?".into(),
            ),
            9 => (
                "Which vendor keeps the backups?".into(),
                vendor.into(),
                "Who hosts the backups?".into(),
            ),
            10 => (
                format!("Which database does the {svc} write to?"),
                self.host(),
                format!("Where does the {svc} write its data?"),
            ),
            _ => {
                let tier = self.rng.pick(TIERS);
                self.used.insert(tier.to_owned());
                (
                    "What support tier is the customer on?".into(),
                    tier.into(),
                    "Which support tier does the customer have?".into(),
                )
            }
        };
        let answer = match self.rng.range(0, 6) {
            0 => format!("{}.", capitalise(&value)),
            1 => value.clone(),
            2 => format!("It's {value}."),
            3 => format!("{}, I just checked.", capitalise(&value)),
            4 => format!("That's {value}."),
            _ => format!("Should be {value}."),
        };
        let i = if self.rng.chance(50) {
            self.push(Message::human(ask));
            self.push(Message::ai(answer))
        } else {
            self.push(Message::ai(format!(
                "Quick question before I go on: {}",
                ask.to_lowercase()
            )));
            let i = self.push(Message::human(answer));
            let ack = self.rng.pick(&["Thanks.", "Got it.", "Noted, continuing."]);
            self.push(Message::ai(ack));
            i
        };
        Probe {
            question,
            needles: vec![value],
            stale: Vec::new(),
            message_index: i,
            stale_index: None,
        }
    }
}

/// Messages and facts of each style.
fn layout(style: Style) -> (usize, usize) {
    match style {
        Style::Plain => (400, 10),
        Style::Corrected => (400, 6),
        Style::ReadTools => (400, 10),
        Style::Dense => (1200, 60),
        Style::Multilingual => (400, 9),
        Style::Long => (3000, 20),
        Style::PasteHeavy => (400, 10),
        Style::Reworded => (400, 6),
        Style::AnswerNext => (400, 10),
    }
}

/// Generates a session of `style` from `seed`.
pub fn generate(style: Style, seed: u64) -> StyledSession {
    let mut g = Gen::new(seed, style);
    g.push(Message::system(
        "You are the on-call assistant for Acme Cloud's logistics customers. Use the tools \
         to look things up instead of guessing.",
    ));
    g.push(Message::human(
        "Morning. Northwind's export pipeline is misbehaving again, can you help me go \
         through it?",
    ));
    g.push(Message::ai("Sure, let's start with the current state."));
    let (total, facts) = layout(style);
    // Facts at sorted random positions; the long style also plants a fifth of them in
    // the last tenth (before the last 40 messages, which a request keeps verbatim).
    let end = total.saturating_sub(40).max(10) as u64;
    let mut slots: Vec<u64> = (0..facts)
        .map(|i| {
            if style == Style::Long && i % 5 == 4 {
                g.rng.range(total as u64 * 9 / 10, end)
            } else {
                g.rng.range(4, end)
            }
        })
        .collect();
    slots.sort_unstable();
    let mut probes: Vec<Probe> = Vec::new();
    // Corrections: (slot of the correction, probe index, subject, new value, key).
    let mut corrections: Vec<(u64, usize, String, String, String)> = Vec::new();
    let mut subjects: Vec<u64> = (0..8).collect();
    for i in (1..subjects.len()).rev() {
        let j = (g.rng.next() % (i as u64 + 1)) as usize;
        subjects.swap(i, j);
    }
    let mut next = 0;
    while g.b.messages.len() < total || next < slots.len() || !corrections.is_empty() {
        let here = g.b.messages.len() as u64;
        if let Some(k) = corrections.iter().position(|c| c.0 <= here) {
            let (_, p, subject, new, key) = corrections.remove(k);
            let i = if style == Style::Reworded {
                g.reword(&new, &key)
            } else {
                g.correct(&subject, &new, &key)
            };
            let probe = &mut probes[p];
            probe.stale_index = Some(probe.message_index);
            probe.message_index = i;
            continue;
        }
        if next < slots.len() && slots[next] <= here {
            let probe = match style {
                Style::Plain => g.plain(),
                Style::ReadTools => g.read_tool(),
                Style::Multilingual => g.foreign(next as u64 % 3),
                Style::Dense | Style::Long => match next % 4 {
                    0 => g.plain(),
                    1 => g.read_tool(),
                    _ => g.value(),
                },
                Style::PasteHeavy => g.paste_rule(),
                Style::AnswerNext => g.answer_next(),
                Style::Corrected | Style::Reworded => {
                    let (subject, old, new, sentence, key) =
                        g.corrected_pair(subjects[next % subjects.len()]);
                    let i = g.state(&sentence);
                    let at = g.rng.range(here + 30, (end).max(here + 31));
                    corrections.push((at, probes.len(), subject.clone(), new.clone(), key));
                    Probe {
                        question: format!("What is the current {subject}?"),
                        needles: vec![new],
                        stale: vec![old],
                        message_index: i,
                        stale_index: None,
                    }
                }
            };
            probes.push(probe);
            next += 1;
            continue;
        }
        if g.b.messages.len() >= total {
            // Only corrections are left: bring the next one forward.
            if let Some(c) = corrections.iter_mut().min_by_key(|c| c.0) {
                c.0 = here;
            }
            continue;
        }
        g.filler();
    }
    g.push(Message::human("Can you sum up where we are?"));
    g.push(Message::ai("Here is where we are."));
    StyledSession {
        style,
        messages: g.b.messages,
        probes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_style_is_findable_and_deterministic() {
        for style in Style::ALL {
            let s = generate(style, 5);
            let (total, facts) = layout(style);
            assert!(s.messages.len() >= total, "{style:?}");
            assert_eq!(s.probes.len(), facts, "{style:?}");
            assert_eq!(s, generate(style, 5), "{style:?}");
            for p in &s.probes {
                let text = s.messages[p.message_index].text();
                assert!(p.kept_in(&text), "{style:?}: {p:?} not in {text:?}");
                // No other message holds this fact's needles (no false keeps), except
                // the assistant repeating a tool result right after it.
                let holders: Vec<usize> = (0..s.messages.len())
                    .filter(|&i| p.kept_in(&s.messages[i].text()))
                    .collect();
                assert!(
                    holders
                        .iter()
                        .all(|&i| i == p.message_index || i == p.message_index + 1),
                    "{style:?}: {p:?} {holders:?}"
                );
                for stale in &p.stale {
                    assert!(!text.contains(stale.as_str()), "{p:?}");
                    let at = p.stale_index.unwrap();
                    assert!(at < p.message_index);
                    assert!(s.messages[at].text().contains(stale.as_str()));
                }
            }
        }
    }

    /// The three kinds from real shapes, on tuning and reporting seeds alike: every
    /// needle is in its message and nowhere else, and each kind has its shape.
    #[test]
    fn kinds_from_real_shapes_hold_on_many_seeds() {
        for style in [Style::PasteHeavy, Style::Reworded, Style::AnswerNext] {
            for seed in (1..=30).chain(1000..=1030) {
                let s = generate(style, seed);
                assert_eq!(s.probes.len(), layout(style).1, "{style:?} {seed}");
                for p in &s.probes {
                    let holders: Vec<usize> = (0..s.messages.len())
                        .filter(|&i| p.kept_in(&s.messages[i].text()))
                        .collect();
                    assert!(
                        holders.contains(&p.message_index)
                            && holders
                                .iter()
                                .all(|&i| i == p.message_index || i == p.message_index + 1),
                        "{style:?} {seed}: {p:?} {holders:?}"
                    );
                    let text = s.messages[p.message_index].text().to_lowercase();
                    match style {
                        Style::Reworded => {
                            // The correction does not restate the old value (unless the
                            // new one contains it: release/26.10 and release/26.1).
                            let stale = p.stale[0].to_lowercase();
                            let new = p.needles[0].to_lowercase();
                            assert!(new.contains(&stale) || !text.contains(&stale), "{p:?}");
                            assert!(!text.contains("actually") && !text.contains("instead"));
                        }
                        Style::AnswerNext => {
                            // The turn before asks; it does not hold the answer.
                            let ask = s.messages[p.message_index - 1].text();
                            assert!(ask.ends_with('?'), "{ask}");
                            assert!(text.len() < 60, "{text}");
                        }
                        _ => {}
                    }
                }
                if style == Style::PasteHeavy {
                    // Pastes are long and full of ids: most of the session's text.
                    let long = s.messages.iter().filter(|m| m.text().len() > 1500).count();
                    assert!(long >= 30, "{seed}: {long}");
                }
            }
        }
    }

    #[test]
    fn long_sessions_have_late_facts() {
        let s = generate(Style::Long, 1001);
        let n = s.messages.len();
        let late = s
            .probes
            .iter()
            .filter(|p| p.message_index >= n * 9 / 10)
            .count();
        assert!(late >= 3, "{late}");
    }

    #[test]
    fn probes_serialize() {
        let s = generate(Style::Corrected, 2);
        let v = s.probes_json();
        assert!(v[0]["question"].is_string());
        assert!(v[0]["needles"].is_array());
        assert_eq!(v[0]["stale"].as_array().map(Vec::len), Some(1));
    }
}
