//! What a sentence is worth to a summary: the cues that make it a rule, a decision or a
//! requirement, and the values that make it a fact (identifiers, versions, hashes,
//! quantities, dates, paths, URLs, addresses, names). Filler and acknowledgements are
//! worth nothing.
//!
//! Everything here is a pure function of the text: no model, no state. Line shapes are
//! compared by a stable (seedless) hash, so the result is the same on every run.

use keel_core::hash::StableHasher;

/// The kinds of value a summary must not lose, with what each adds to a score.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Entity {
    Url,
    Address,
    Path,
    Version,
    Hash,
    /// Letters and digits together (`TCK-7`, `E4012`, `#ops-7`).
    Identifier,
    /// A hyphenated or underscored name without digits (`orders-sync`).
    Name,
    Quantity,
    DateTime,
    /// Two or more capitalised words (a person, a company).
    Proper,
    /// An upper-case acronym (`EU`, `ERP`).
    Acronym,
    /// A bare number.
    Number,
}

impl Entity {
    fn weight(self) -> u32 {
        match self {
            Entity::Url
            | Entity::Address
            | Entity::Path
            | Entity::Version
            | Entity::Hash
            | Entity::Identifier => 4,
            Entity::Quantity | Entity::DateTime | Entity::Proper => 3,
            Entity::Name => 2,
            Entity::Acronym | Entity::Number => 1,
        }
    }
}

/// Cue bits.
pub(crate) const RULE: u8 = 1;
pub(crate) const DECISION: u8 = 2;
pub(crate) const REQUIREMENT: u8 = 4;

/// What one sentence holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Information {
    /// [`RULE`], [`DECISION`], [`REQUIREMENT`] bits.
    pub cues: u8,
    /// The values found, lower-cased, in order of appearance.
    pub values: Vec<(Entity, String)>,
    /// Content words: lower-case words of four letters or more that are neither
    /// function words, cue words, intensifiers nor units (what a cue applies to).
    pub content: u32,
}

impl Information {
    /// Points for the cues and the values (each kind of value counted once, each further
    /// value one point).
    pub fn score(&self) -> u32 {
        let mut score = 0;
        for (bit, points) in [(RULE, 5), (DECISION, 5), (REQUIREMENT, 4)] {
            if self.cues & bit != 0 {
                score += points;
            }
        }
        let mut kinds: Vec<Entity> = self.values.iter().map(|(k, _)| *k).collect();
        kinds.sort_unstable();
        kinds.dedup();
        score += kinds.iter().map(|k| k.weight()).sum::<u32>();
        score += (self.values.len().saturating_sub(kinds.len()) as u32).min(3);
        score
    }

    /// True when the sentence holds nothing worth a line on its own.
    pub fn is_empty(&self) -> bool {
        self.cues == 0
            && self
                .values
                .iter()
                .all(|(k, _)| matches!(k, Entity::Acronym | Entity::Number))
    }
}

const RULE_WORDS: &[&str] = &[
    "never",
    "always",
    "must",
    "mustn't",
    "don't",
    "cannot",
    "can't",
    "forbidden",
    "prohibited",
    "mandatory",
    "rule",
    "policy",
    "compliance",
    // German and Spanish rules.
    "nie",
    "niemals",
    "immer",
    "muss",
    "müssen",
    "darf",
    "dürfen",
    "verboten",
    "nunca",
    "siempre",
    "debe",
    "deben",
    "prohibido",
];
const RULE_PAIRS: &[(&str, &str)] = &[("do", "not"), ("not", "allowed"), ("only", "ever")];
const DECISION_WORDS: &[&str] = &[
    "decided",
    "decide",
    "decision",
    "agreed",
    "agree",
    "let's",
    "we'll",
    "approved",
    "approve",
    "confirmed",
    "settled",
    "chose",
    "chosen",
    "entschieden",
    "vereinbart",
    "decidimos",
    "acordamos",
    "acordado",
];
const DECISION_PAIRS: &[(&str, &str)] = &[
    ("go", "with"),
    ("going", "with"),
    ("we", "set"),
    ("we", "will"),
    ("switch", "to"),
    ("plan", "is"),
];
const REQUIREMENT_WORDS: &[&str] = &[
    "require",
    "requires",
    "required",
    "requirement",
    "need",
    "needs",
    "prefer",
    "prefers",
    "preference",
    "want",
    "wants",
    "should",
    "expect",
    "expects",
    "deadline",
    "sla",
    "braucht",
    "benötigt",
    "necesita",
    "requiere",
    "quiere",
];
const REQUIREMENT_PAIRS: &[(&str, &str)] = &[("has", "to"), ("have", "to"), ("hay", "que")];
/// Chinese cue words (no spaces to find them by): rules, decisions, requirements.
const CJK_CUES: &[(&str, u8)] = &[
    ("必须", RULE),
    ("不能", RULE),
    ("不要", RULE),
    ("禁止", RULE),
    ("务必", RULE),
    ("决定", DECISION),
    ("同意", DECISION),
    ("要求", REQUIREMENT),
    ("需要", REQUIREMENT),
];

const UNITS: &[&str] = &[
    "ms",
    "s",
    "sec",
    "secs",
    "second",
    "seconds",
    "min",
    "mins",
    "minute",
    "minutes",
    "h",
    "hr",
    "hrs",
    "hour",
    "hours",
    "day",
    "days",
    "week",
    "weeks",
    "month",
    "months",
    "year",
    "years",
    "b",
    "kb",
    "mb",
    "gb",
    "tb",
    "pb",
    "kib",
    "mib",
    "gib",
    "tib",
    "%",
    "percent",
    "x",
    "rps",
    "qps",
    "req/s",
    "rows",
    "pods",
    "nodes",
    "replicas",
    "connections",
    "requests",
    "errors",
    "retries",
    "users",
    "orders",
    "jobs",
    "messages",
    "tokens",
    "times",
    "cores",
    "cpus",
    "usd",
    "eur",
    "$",
    "€",
    "£",
];
const WEEKDAYS: &[&str] = &[
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];
const MONTHS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
];
const ZONES: &[&str] = &["utc", "gmt", "cet", "cest", "pst", "pdt", "est", "edt", "z"];
/// Classes of the lower-case word lists above, as bits (see [`word_classes`]).
const W_RULE: u8 = 1;
const W_DECISION: u8 = 1 << 1;
const W_REQUIREMENT: u8 = 1 << 2;
/// A weekday, a month or a time zone.
const W_DATETIME: u8 = 1 << 3;
const W_UNIT: u8 = 1 << 4;
/// The first word of a cue pair (`do not`, `go with`, `has to`, ...).
const W_PAIR: u8 = 1 << 5;
/// A function word ([`COMMON`]): never a content term.
const W_COMMON: u8 = 1 << 6;

/// The classes `lower` (a lower-case token) belongs to, looked up in all the word lists
/// at once: the words are bucketed by length and first letter, so a token is compared
/// with the one or two listed words that could equal it, instead of scanning every list
/// (scoring looks up every token of every sentence it reads).
fn word_classes(lower: &str) -> u8 {
    let Some(bucket) = word_bucket(lower) else {
        return 0;
    };
    let table = WORD_TABLE.get_or_init(build_word_table);
    table[bucket]
        .iter()
        .find(|(w, _)| *w == lower)
        .map_or(0, |(_, c)| *c)
}

/// Buckets of [`word_classes`]: one per (length up to [`WORD_MAX`], first byte class).
const WORD_MAX: usize = 16;
const WORD_FIRSTS: usize = 27;
static WORD_TABLE: std::sync::OnceLock<Vec<Vec<(&'static str, u8)>>> = std::sync::OnceLock::new();

/// The bucket of `w`: by length, and by first letter (`a`-`z`, anything else shares
/// one); `None` for words longer than any listed one.
fn word_bucket(w: &str) -> Option<usize> {
    let len = w.len();
    if len == 0 || len > WORD_MAX {
        return None;
    }
    let first = w.as_bytes()[0];
    let letter = if first.is_ascii_lowercase() {
        usize::from(first - b'a')
    } else {
        WORD_FIRSTS - 1
    };
    Some((len - 1) * WORD_FIRSTS + letter)
}

/// The word lists [`word_classes`] looks words up in, with the class each gives.
const WORD_LISTS: [(&[&str], u8); 8] = [
    (RULE_WORDS, W_RULE),
    (DECISION_WORDS, W_DECISION),
    (REQUIREMENT_WORDS, W_REQUIREMENT),
    (WEEKDAYS, W_DATETIME),
    (MONTHS, W_DATETIME),
    (ZONES, W_DATETIME),
    (UNITS, W_UNIT),
    (COMMON, W_COMMON),
];

/// The cue pairs whose first words get [`W_PAIR`].
const PAIR_LISTS: [&[(&str, &str)]; 3] = [RULE_PAIRS, DECISION_PAIRS, REQUIREMENT_PAIRS];

fn build_word_table() -> Vec<Vec<(&'static str, u8)>> {
    let mut table: Vec<Vec<(&'static str, u8)>> = vec![Vec::new(); WORD_MAX * WORD_FIRSTS];
    let mut add = |w: &'static str, class: u8| {
        // Every listed word is short; one that is not could never be looked up.
        let Some(b) = word_bucket(w) else { return };
        match table[b].iter_mut().find(|(x, _)| *x == w) {
            Some(entry) => entry.1 |= class,
            None => table[b].push((w, class)),
        }
    };
    for (words, class) in WORD_LISTS {
        for w in words {
            add(w, class);
        }
    }
    for pairs in PAIR_LISTS {
        for (first, _) in pairs {
            add(first, W_PAIR);
        }
    }
    table
}

/// Capitalised words that start sentences or name no one.
const NOT_PROPER: &[&str] = &[
    "The",
    "This",
    "That",
    "These",
    "Those",
    "A",
    "An",
    "I",
    "We",
    "You",
    "It",
    "They",
    "Our",
    "Their",
    "My",
    "Your",
    "Can",
    "Could",
    "Please",
    "Let",
    "Okay",
    "Ok",
    "Also",
    "And",
    "But",
    "So",
    "If",
    "When",
    "Then",
    "Yes",
    "No",
    "Hi",
    "Hey",
    "Hello",
    "Thanks",
    "Sure",
    "Slack",
    "Here",
    "There",
    "What",
    "Why",
    "How",
    "Where",
    "Which",
    "Who",
    "Do",
    "Does",
    "Did",
    "Is",
    "Are",
    "Was",
    "Were",
    "In",
    "On",
    "At",
    "For",
    "From",
    "To",
    "Of",
    "With",
    "Hard",
    "Quick",
    "Oh",
    "Anyway",
    "Two",
    "One",
    "Three",
    "Following",
    "Nothing",
    "Error",
    "Created",
];
const ACKS: &[&str] = &[
    "thanks",
    "thank you",
    "thx",
    "ok",
    "okay",
    "ok cool",
    "cool",
    "great",
    "sure",
    "noted",
    "got it",
    "got it thanks",
    "understood",
    "makes sense",
    "sounds good",
    "sounds good go ahead",
    "go ahead",
    "no problem",
    "no problem take your time",
    "you're welcome",
    "happy to help",
    "perfect",
    "nice",
    "yes",
    "yeah",
    "yep",
    "right",
    "hmm",
    "done",
    "thanks that helps",
    "good question",
    "btw",
    "quick note",
    "oh before i forget",
    "anyway",
    "ok carry on",
    "carry on",
];
/// Words that open a social act rather than a statement.
const SOCIAL: &[&str] = &[
    "thanks",
    "thank",
    "thx",
    "congrats",
    "congratulations",
    "sorry",
    "hey",
    "hi",
    "hello",
    "bye",
    "goodbye",
    "welcome",
    "cheers",
];
/// Openings of an assistant sentence that announce work instead of stating anything.
const INTENT_OPENINGS: &[&str] = &[
    "let me",
    "i'll",
    "i will",
    "checking",
    "looking",
    "one moment",
    "give me",
    "here is",
    "here's",
    "following the",
];
/// Words at the start of a sentence that carry no meaning in a summary.
const DISCOURSE: &[&str] = &[
    "okay", "ok", "so", "btw", "oh", "also", "anyway", "well", "right", "sure", "great", "yes",
    "yeah", "hmm", "and", "wow",
];
/// Verbs that announce a new value for a subject ("set the TTL to ...").
pub(crate) const CHANGE_VERBS: &[&str] = &[
    "set",
    "change",
    "changed",
    "move",
    "moved",
    "bump",
    "bumped",
    "raise",
    "raised",
    "lower",
    "lowered",
    "update",
    "updated",
    "increase",
    "increased",
    "reduce",
    "reduced",
];
const STOPWORDS: &[&str] = &[
    "the", "a", "an", "of", "for", "this", "that", "our", "their", "its", "my", "your", "on", "in",
    "at", "to", "we", "i", "they", "it", "now", "current", "new",
];

/// Punctuation around a token that is not part of it.
fn trim_token(token: &str) -> &str {
    let t = token.trim_matches(|c: char| {
        matches!(
            c,
            ',' | ';'
                | ':'
                | '!'
                | '?'
                | '('
                | ')'
                | '"'
                | '\''
                | '`'
                | '['
                | ']'
                | '{'
                | '}'
                | '*'
                | '<'
                | '>'
                | '“'
                | '”'
                | '‘'
                | '’'
        )
    });
    t.strip_suffix('.').unwrap_or(t)
}

fn is_number(t: &str) -> bool {
    let t = t.trim_start_matches(['$', '€', '£', '~', '+', '-']);
    !t.is_empty()
        && t.chars().next().is_some_and(|c| c.is_ascii_digit())
        && t.chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == ',')
}

/// A number with its unit attached (`30s`, `5GB`, `99%`, `2x`).
fn is_quantity_token(lower: &str) -> bool {
    let split = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .unwrap_or(lower.len());
    split > 0
        && lower[..1].chars().all(|c| c.is_ascii_digit())
        && split < lower.len()
        && word_classes(&lower[split..]) & W_UNIT != 0
}

fn is_address(t: &str) -> bool {
    let core = t.split(['/', ':']).next().unwrap_or(t);
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 4
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 3 && p.chars().all(|c| c.is_ascii_digit()))
}

fn is_version(t: &str) -> bool {
    let (prefixed, core) = match t.strip_prefix(['v', 'V']) {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let core = core.split(['-', '+']).next().unwrap_or(core);
    let parts: Vec<&str> = core.split('.').collect();
    let numeric = parts
        .iter()
        .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    numeric && (parts.len() >= 3 || (prefixed && !parts.is_empty()))
}

fn is_hash(t: &str) -> bool {
    (7..=64).contains(&t.len())
        && t.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        && t.chars().any(|c| c.is_ascii_digit())
        && t.chars().any(|c| c.is_ascii_alphabetic())
}

fn is_path(t: &str) -> bool {
    let rooted = (t.starts_with('/') && !t.starts_with("//"))
        || t.starts_with("~/")
        || t.starts_with("./")
        || t.starts_with("../");
    if rooted {
        return t.len() > 2 && t[1..].contains(['/', '.']);
    }
    // A file name with an extension (`config.yaml`, `SKILL.md`).
    match t.rsplit_once('.') {
        Some((stem, ext)) => {
            !stem.is_empty()
                && stem.chars().any(|c| c.is_ascii_alphabetic())
                && (2..=5).contains(&ext.len())
                && ext.chars().all(|c| c.is_ascii_lowercase())
                && !stem.contains("://")
                && !stem.chars().all(|c| c.is_ascii_lowercase()) // "e.g", "i.e"
                || (stem.contains(['/', '_', '-']) && ext.chars().all(|c| c.is_ascii_alphanumeric()))
        }
        None => false,
    }
}

fn is_date_or_time(t: &str, lower: &str) -> bool {
    let b = t.as_bytes();
    // 2026-11-30, 2026-11-30T08:00Z
    let iso = b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-';
    // 08:00, 8:30, 02:00-04:00
    let clock = t.split_once(':').is_some_and(|(h, m)| {
        !h.is_empty()
            && h.len() <= 2
            && h.chars().all(|c| c.is_ascii_digit())
            && m.chars().take(2).filter(char::is_ascii_digit).count() == 2
    });
    iso || clock || word_classes(lower) & W_DATETIME != 0
}

fn is_identifier(t: &str) -> Option<Entity> {
    // An ordinal (`18th`, `2nd`) is a number.
    let digits_end = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits_end > 0
        && matches!(
            t[digits_end..].to_ascii_lowercase().as_str(),
            "st" | "nd" | "rd" | "th"
        )
    {
        return None;
    }
    let letters = t.chars().any(|c| c.is_ascii_alphabetic());
    let digits = t.chars().any(|c| c.is_ascii_digit());
    let joined = t.contains(['-', '_']) || t.starts_with('#');
    let upper = t.chars().filter(|c| c.is_ascii_uppercase()).count();
    let clean = t.chars().all(|c| {
        c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '#' | '.' | '/' | '@' | ':' | '=')
    });
    if !clean || !letters || t.len() < 2 {
        return None;
    }
    if digits && (joined || upper >= 1 || t.len() >= 4) {
        return Some(Entity::Identifier);
    }
    // A host name (`api.pylon.example`, `CN=api.pylon.example`): two dots or more.
    if t.matches('.').count() >= 2
        && !t.starts_with('.')
        && !t.ends_with('.')
        && t.split('.').all(|p| !p.is_empty())
    {
        return Some(Entity::Identifier);
    }
    if joined && t.len() >= 5 && !t.starts_with('-') && !t.ends_with('-') {
        return Some(Entity::Name);
    }
    if upper >= 2 && upper == t.chars().filter(|c| c.is_ascii_alphabetic()).count() && t.len() <= 6
    {
        return Some(Entity::Acronym);
    }
    None
}

fn is_capitalised(t: &str) -> bool {
    let mut chars = t.chars();
    chars.next().is_some_and(|c| c.is_uppercase())
        && t.len() >= 2
        && chars.all(|c| c.is_lowercase() || c == '\'' || c == '-')
}

/// The cues and values of one sentence.
/// The kind of value a single token is, if any (a number followed by its unit is
/// recognised by [`information`], which sees the next token).
fn classify(t: &str, l: &str) -> Option<Entity> {
    // Most tokens are plain words: letters only. They can only be a day, a month or a
    // time zone, or (all capitals) an acronym.
    if t.bytes().all(|b| b.is_ascii_alphabetic() || b == b'\'') {
        return if word_classes(l) & W_DATETIME != 0 {
            Some(Entity::DateTime)
        } else if t.as_bytes().get(1).is_some_and(u8::is_ascii_uppercase) {
            is_identifier(t).filter(|k| *k == Entity::Acronym)
        } else {
            None
        };
    }
    if t.contains("://") || l.starts_with("www.") {
        Some(Entity::Url)
    } else if is_address(t) {
        Some(Entity::Address)
    } else if is_date_or_time(t, l) {
        Some(Entity::DateTime)
    } else if is_version(t) {
        Some(Entity::Version)
    } else if is_path(t) {
        Some(Entity::Path)
    } else if is_hash(t) {
        Some(Entity::Hash)
    } else if is_quantity_token(l) {
        Some(Entity::Quantity)
    } else if is_number(t) {
        Some(Entity::Number)
    } else {
        is_identifier(t)
    }
}

/// The cues and values of one sentence.
pub(crate) fn information(sentence: &str) -> Information {
    let spaced = cjk_spaced(sentence);
    let sentence: &str = &spaced;
    // ASCII lower-casing keeps every byte offset (and trimming strips no letter), so a
    // token's lower-cased form is the same byte range of `lowered`: one split serves both.
    let lowered = sentence.to_ascii_lowercase();
    let base = sentence.as_ptr() as usize;
    let mut raw: Vec<&str> = Vec::with_capacity(sentence.len() / 5 + 1);
    let mut tokens: Vec<&str> = Vec::with_capacity(raw.capacity());
    let mut lower: Vec<&str> = Vec::with_capacity(raw.capacity());
    for r in sentence.split_whitespace() {
        let t = trim_token(r);
        let start = t.as_ptr() as usize - base;
        raw.push(r);
        tokens.push(t);
        lower.push(&lowered[start..start + t.len()]);
    }
    let values = sentence_values(&raw, &tokens, &lower);
    let content = content_words(&tokens, &lower);
    let mut cues = sentence_cues(sentence, &lower);
    // A cue with nothing it applies to ("Totally agree!", "There's something I want to
    // tell you.") is no rule, decision or requirement. Scripts without spaces have no
    // words to count.
    let valued = values
        .iter()
        .any(|(k, _)| !matches!(k, Entity::Number | Entity::Acronym));
    if content == 0 && !valued && !sentence.chars().any(is_cjk) {
        cues = 0;
    }
    // "No X ..." opening a sentence forbids X ("No customer data leaves the region",
    // "no long essays"); "No, ..." answers and "No doubts." says nothing.
    if (content >= 2 || valued) && raw.first().is_some_and(|w| w.eq_ignore_ascii_case("no")) {
        cues |= RULE;
    }
    Information {
        cues,
        values,
        content,
    }
}

/// Words that say how much, not what: intensifiers and vague pronouns.
const VAGUE: &[&str] = &[
    "totally",
    "really",
    "actually",
    "definitely",
    "absolutely",
    "completely",
    "truly",
    "super",
    "pretty",
    "quite",
    "something",
    "anything",
    "everything",
    "nothing",
    "someone",
    "anyone",
    "everyone",
    "somebody",
    "anybody",
    "everybody",
    "thing",
    "things",
    "stuff",
    "kind",
    "lots",
    "even",
    "ever",
    "mean",
];

/// How many content words the sentence has (see [`Information::content`]): `tokens`
/// trimmed as written (a capitalised word is a name, an address or an opening, not
/// counted), `lower` the same lower-cased.
fn content_words(tokens: &[&str], lower: &[&str]) -> u32 {
    let mut n = 0;
    for (t, l) in tokens.iter().zip(lower) {
        let letters = t.chars().filter(|c| c.is_alphabetic()).count();
        if letters < 4
            || !t
                .chars()
                .all(|c| (c.is_alphabetic() && !c.is_uppercase()) || c == '\'' || c == '-')
            || VAGUE.contains(l)
        {
            continue;
        }
        let class = word_classes(l);
        if class & (W_COMMON | W_RULE | W_DECISION | W_REQUIREMENT | W_DATETIME | W_UNIT) == 0
            && !NARRATION.contains(l)
            && !CHANGE_VERBS.contains(l)
        {
            n += 1;
        }
    }
    n
}

/// The [`RULE`], [`DECISION`] and [`REQUIREMENT`] bits of a sentence (CJK spaced),
/// from its CJK cues and its lower-cased tokens (single cue words and cue pairs).
fn sentence_cues(sentence: &str, lower: &[&str]) -> u8 {
    let mut cues = 0;
    if !sentence.is_ascii() {
        for (cue, bit) in CJK_CUES {
            if sentence.contains(cue) {
                cues |= bit;
            }
        }
    }
    for (i, &l) in lower.iter().enumerate() {
        if l.len() < 2 || !l.as_bytes()[0].is_ascii_alphabetic() {
            continue;
        }
        let class = word_classes(l);
        if class & (W_RULE | W_DECISION | W_REQUIREMENT | W_PAIR) == 0 {
            continue;
        }
        let next = lower.get(i + 1).copied().unwrap_or("");
        let pair = |pairs: &[(&str, &str)]| {
            class & W_PAIR != 0 && pairs.iter().any(|(a, b)| l == *a && next == *b)
        };
        if (class & W_RULE != 0 || pair(RULE_PAIRS)) && directive(lower, i) {
            cues |= RULE;
        }
        if class & W_DECISION != 0 || pair(DECISION_PAIRS) {
            cues |= DECISION;
        }
        if class & W_REQUIREMENT != 0 || pair(REQUIREMENT_PAIRS) {
            cues |= REQUIREMENT;
        }
    }
    cues
}

/// Frequency adverbs that are rule words only where they direct ("Never restart it",
/// "we always tag releases"), not where they describe ("I've always liked it", "it's
/// not always easy").
const FREQUENCY: &[&str] = &[
    "always", "never", "immer", "nie", "niemals", "nunca", "siempre",
];
/// Words after which a frequency adverb directs: a subject that binds a group, a modal,
/// a conjunction joining it to a directive.
const DIRECTING: &[&str] = &[
    "we", "you", "must", "should", "shall", "please", "to", "will", "then", "so",
];
/// Negated modals: a rule when they bind someone ("we can't ship it", "don't restart"),
/// not when the speaker says what they cannot do or know ("I can't wait", "I don't
/// know").
const NEGATED: &[&str] = &["don't", "can't", "cannot", "mustn't", "do"];

/// True when the rule word at `i` of the lower-cased tokens directs rather than
/// describes: a frequency adverb opening the sentence or after [`DIRECTING`], a negated
/// modal not after "I", and "must" not in "must have been" (a guess about the past).
fn directive(lower: &[&str], i: usize) -> bool {
    let l = lower[i];
    let prev = if i > 0 { lower[i - 1] } else { "" };
    if FREQUENCY.contains(&l) {
        // "Never saw this coming": a story, not a rule.
        let next = lower.get(i + 1).copied().unwrap_or("");
        if PAST.contains(&next)
            || (next.len() > 4 && next.ends_with("ed") && !next.ends_with("eed"))
        {
            return false;
        }
        return i == 0
            || DIRECTING.contains(&prev)
            || word_classes(prev) & (W_RULE | W_REQUIREMENT) != 0;
    }
    if NEGATED.contains(&l) {
        // "Can't wait to see it.": the speaker, unnamed.
        let unnamed = i == 0 && matches!(l, "can't" | "cannot");
        return prev != "i" && !unnamed;
    }
    if l == "must" || l == "must've" {
        let next = lower.get(i + 1).copied().unwrap_or("");
        let then = lower.get(i + 2).copied().unwrap_or("");
        // "You must have a badge" binds; "they must have felt it" guesses.
        let perfect = l == "must've"
            || (next == "have"
                && !matches!(
                    then,
                    "a" | "an" | "the" | "your" | "our" | "their" | "this" | "that" | "no"
                ));
        return !perfect;
    }
    true
}

/// The values of a sentence, lower-cased, in order: classified tokens, numbers with
/// their unit (a quantity) or named by the word before them (an identifier), and runs
/// of capitalised words (a name). `raw` are the whitespace-split tokens, `tokens` the
/// same trimmed, `lower` those lower-cased.
fn sentence_values(raw: &[&str], tokens: &[&str], lower: &[&str]) -> Vec<(Entity, String)> {
    let mut values = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i];
        let l = lower[i];
        let kind = classify(t, l);
        if kind == Some(Entity::Number) {
            let unit = lower.get(i + 1).copied().unwrap_or("");
            if word_classes(unit) & W_UNIT != 0 {
                values.push((Entity::Quantity, format!("{l} {unit}")));
                i += 2;
                continue;
            }
            // A number named by the word before it (`build 5712`, `port 8443`) is an
            // identifier, not a count.
            let before = if i > 0 { lower[i - 1] } else { "" };
            if l.len() >= 3
                && l.bytes().all(|b| b.is_ascii_digit())
                && before.len() >= 3
                && before.bytes().all(|b| b.is_ascii_lowercase())
                && word_classes(before) & (W_COMMON | W_UNIT | W_DATETIME) == 0
                && !STOPWORDS.contains(&before)
                && !matches!(
                    before,
                    "and" | "than" | "from" | "about" | "over" | "under" | "with"
                )
            {
                values.push((Entity::Identifier, format!("{before} {l}")));
                i += 1;
                continue;
            }
        }
        if let Some(kind) = kind {
            values.push((kind, l.to_owned()));
            i += 1;
            continue;
        }
        // Two or more capitalised words, not opening the sentence with a common word.
        if is_capitalised(t) && !NOT_PROPER.contains(&t) && !t.starts_with("I'") {
            let mut j = i + 1;
            // A day or a month is a date, not part of a name ("Last Friday").
            while j < tokens.len()
                && is_capitalised(tokens[j])
                && !NOT_PROPER.contains(&tokens[j])
                && !tokens[j].starts_with("I'")
                && word_classes(lower[j]) & W_DATETIME == 0
            {
                // A sentence break or a comma ends a name.
                if raw[j - 1].ends_with(['.', ',', ';', ':']) {
                    break;
                }
                j += 1;
            }
            if j - i >= 2 {
                values.push((Entity::Proper, lower[i..j].join(" ")));
                i = j;
                continue;
            }
        }
        i += 1;
    }
    values
}

/// A word as filler is recognised: lower-case letters, digits and `'` only (may be empty).
fn plain_word(word: &str) -> String {
    if word.is_ascii() {
        return word
            .bytes()
            .filter(|b| b.is_ascii_alphanumeric() || *b == b'\'')
            .map(|b| char::from(b.to_ascii_lowercase()))
            .collect();
    }
    word.chars()
        .filter(|c| c.is_alphanumeric() || *c == '\'')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The most words an acknowledgement in [`ACKS`] has: a sentence with more is none.
const ACK_MAX_WORDS: usize = 5;

/// True for an acknowledgement, a greeting, or an announcement of work with nothing in it.
pub(crate) fn is_filler(sentence: &str, info: &Information, assistant: bool) -> bool {
    // Thanking, congratulating, apologising, greeting, taking leave: a social act
    // whatever follows ("Thanks for the support.", "Bye Sam."), a name in it being whom
    // it is addressed to.
    let social = sentence
        .split_whitespace()
        .next()
        .is_some_and(|w| SOCIAL.contains(&plain_word(w).as_str()));
    let addressed = info.values.iter().all(|(k, _)| {
        matches!(
            k,
            Entity::Number | Entity::Acronym | Entity::DateTime | Entity::Proper
        )
    });
    if social && addressed && info.cues == 0 {
        return true;
    }
    if substantive(info) {
        return false;
    }
    // Only the first words decide (an acknowledgement has at most ACK_MAX_WORDS, an
    // opening two), so a long sentence is not lower-cased whole.
    let mut words: Vec<String> = Vec::with_capacity(ACK_MAX_WORDS + 1);
    for word in sentence.split_whitespace() {
        let w = plain_word(word);
        if !w.is_empty() {
            words.push(w);
            if words.len() > ACK_MAX_WORDS {
                break;
            }
        }
    }
    let p = words.join(" ");
    if words.is_empty() || (words.len() <= ACK_MAX_WORDS && ACKS.contains(&p.as_str())) {
        return true;
    }
    // Past the acknowledgements, a sentence with a cue is judged by its cue.
    if !info.is_empty() {
        return false;
    }
    if words.len() <= 3 {
        return true;
    }
    if sentence.trim_end().ends_with(':') {
        return true;
    }
    assistant && INTENT_OPENINGS.iter().any(|o| p.starts_with(o))
}

/// Openings of narration: the speaker telling what they do or will do ("I'm going
/// through the pods", "Let's continue", "Next I'll look at the queue").
const NARRATION: &[&str] = &[
    "i",
    "i'd",
    "i'll",
    "i'm",
    "i've",
    "let",
    "let's",
    "now",
    "next",
    "still",
    "continuing",
    "looking",
    "checking",
    "moving",
    "going",
    "working",
    "nothing",
    "good",
    "happy",
    "you're",
];

/// True for narration with nothing in it: a sentence opening as [`NARRATION`] does,
/// with no value and no rule or requirement. Findings are stated about the world
/// ("Production is on build 5124."), not about the speaker.
pub(crate) fn is_narration(sentence: &str, info: &Information) -> bool {
    if !info.values.is_empty() || info.cues & (RULE | REQUIREMENT) != 0 {
        return false;
    }
    let first = sentence
        .split_whitespace()
        .next()
        .map(plain_word)
        .unwrap_or_default();
    // An opening gerund narrates too ("Pulling the next batch of logs.").
    NARRATION.contains(&first.as_str()) || (first.len() > 5 && first.ends_with("ing"))
}

/// True when `text` names someone or something: a capitalised word of three letters or
/// more that is no function, cue, social or discourse word ("Bach and Mozart.", not
/// "Will do." or "Sure, checking.").
pub(crate) fn names(text: &str) -> bool {
    text.split_whitespace().any(|w| {
        let t = trim_token(w);
        let p = plain_word(t);
        t.chars().next().is_some_and(char::is_uppercase)
            && p.chars().count() >= 3
            && word_classes(&p) == 0
            && !NARRATION.contains(&p.as_str())
            && !SOCIAL.contains(&p.as_str())
            && !DISCOURSE.contains(&p.as_str())
            && !ACKS.contains(&p.as_str())
            && !NOT_PROPER.contains(&t)
    })
}

/// Past-tense markers: auxiliaries and the commonest irregular verbs, and words that
/// place a sentence in the past.
const PAST: &[&str] = &[
    "was",
    "were",
    "had",
    "did",
    "didn't",
    "wasn't",
    "weren't",
    "hadn't",
    "went",
    "got",
    "made",
    "took",
    "came",
    "felt",
    "found",
    "met",
    "told",
    "thought",
    "saw",
    "ran",
    "gave",
    "yesterday",
    "ago",
    "been",
];

/// True for a value a line can be about: anything but a bare number, an acronym, or a
/// date or time alone ("last Saturday" places an event; it is not what a summary keeps).
pub(crate) fn substantive(info: &Information) -> bool {
    info.values
        .iter()
        .any(|(k, _)| !matches!(k, Entity::Number | Entity::Acronym | Entity::DateTime))
}

/// Pronouns a sentence may open with: its subject is the speaker, the listener, or
/// something said before ("it", "that"), which an extractive summary cannot resolve.
const PRONOUNS: &[&str] = &[
    "i", "i'm", "i've", "i'd", "i'll", "you", "you're", "you've", "you'd", "you'll", "it", "it's",
    "that", "that's", "this", "these", "those", "they", "they're", "he", "she", "he's", "she's",
    "there", "there's", "your", "they've", "they'd", "they'll", "it'll", "that'll",
];

/// Intensifiers: a sentence with one and nothing else to hold on to rates something
/// ("The colours really blend nicely.") rather than stating it.
const INTENSIFIERS: &[&str] = &[
    "really",
    "very",
    "totally",
    "super",
    "pretty",
    "quite",
    "such",
    "absolutely",
    "truly",
];

/// True for a remark rather than a statement: it opens with a pronoun ([`PRONOUNS`])
/// or rates with an intensifier ([`INTENSIFIERS`]), and holds no cue and no value but
/// a hyphenated word ("self-care"), dates and numbers.
pub(crate) fn is_remark(sentence: &str, info: &Information) -> bool {
    // A cue with one content word at most, after a pronoun, tells nothing ("There's
    // something I want to tell you.").
    if (info.cues != 0 && !(info.content <= 1 && opens_with_pronoun(sentence)))
        || info.values.iter().any(|(k, _)| {
            !matches!(
                k,
                Entity::Number | Entity::Acronym | Entity::DateTime | Entity::Name
            )
        })
    {
        return false;
    }
    opens_with_pronoun(sentence)
        || sentence
            .split_whitespace()
            .any(|w| INTENSIFIERS.contains(&plain_word(w).as_str()))
}

/// True when the sentence's first word is one of [`PRONOUNS`]: without a cue or a
/// value, such a sentence is a remark about the speaker, the listener or something
/// unnamed ("It was so powerful.", "That sounds lovely.", "I'm so happy for you.").
pub(crate) fn opens_with_pronoun(sentence: &str) -> bool {
    sentence
        .split_whitespace()
        .next()
        .map(plain_word)
        .is_some_and(|w| PRONOUNS.contains(&w.as_str()))
}

/// True for small talk: a question to the listener ("How have you been?", "Anything
/// exciting happening for you?") with no cue, no value and fewer than three content
/// words.
pub(crate) fn is_small_talk(question: &str, info: &Information) -> bool {
    info.cues == 0
        && !substantive(info)
        && info.content < 3
        && question.split_whitespace().any(|w| {
            matches!(
                plain_word(w).as_str(),
                "you" | "your" | "you're" | "you've" | "how're" | "ya"
            )
        })
}

/// True for a story about the past with nothing to act on: no cue, no value but dates
/// and numbers, and a past-tense marker ("I went to a support group yesterday", "we
/// painted it together"). What happened stays reachable through recall; a summary keeps
/// what holds now.
pub(crate) fn is_past_narration(sentence: &str, info: &Information) -> bool {
    if info.cues != 0 || substantive(info) {
        return false;
    }
    let words: Vec<String> = sentence.split_whitespace().map(plain_word).collect();
    words.iter().enumerate().any(|(i, w)| {
        PAST.contains(&w.as_str())
            || (matches!(w.as_str(), "i" | "we" | "have" | "has" | "had")
                && words
                    .get(i + 1)
                    .is_some_and(|v| v.len() > 4 && v.ends_with("ed")))
    })
}

/// True for an exclamation with nothing in it but feeling ("Congrats, that's amazing!",
/// "let's make it happen!"): it ends with `!` and holds no value but dates and numbers.
/// A prohibition shouted is still a rule ("Never restart it!").
pub(crate) fn is_exclamation(sentence: &str, info: &Information) -> bool {
    // A name in an exclamation is whom it is shouted at ("Congrats Sam!").
    let valued = info.values.iter().any(|(k, _)| {
        !matches!(
            k,
            Entity::Number | Entity::Acronym | Entity::DateTime | Entity::Proper
        )
    });
    if !sentence.trim_end().ends_with('!') || valued {
        return false;
    }
    let first = sentence
        .split_whitespace()
        .next()
        .map(plain_word)
        .unwrap_or_default();
    !(info.cues & RULE != 0 && word_classes(&first) & (W_RULE | W_PAIR) != 0)
}

/// True for a line of machine output rather than something said: a log record, JSON
/// or markup, `key=value` fields, a table row, or a line of few plain words (ids,
/// numbers, paths). Such a line is evidence, kept only when a later message relies on it.
pub(crate) fn is_record(line: &str) -> bool {
    let line = line.trim();
    if is_log_record(line) || line.starts_with(['{', '[', '<', '"', '|']) {
        return true;
    }
    let mut tokens = 0usize;
    let mut plain = 0usize;
    let mut fields = 0usize;
    for t in line.split_whitespace() {
        tokens += 1;
        let core = trim_token(t);
        if !core.is_empty()
            && core
                .chars()
                .all(|c| c.is_alphabetic() || c == '\'' || c == '-')
        {
            plain += 1;
        }
        if let Some((k, v)) = core.split_once('=')
            && !k.is_empty()
            && !v.is_empty()
            && !v.starts_with('=')
        {
            fields += 1;
        }
    }
    fields >= 2 || line.matches(" | ").count() >= 2 || (tokens >= 4 && plain * 5 < tokens * 2)
}

/// The sentence without opening discourse words ("Okay, ...", "btw ...") and without
/// the clauses after a `;` that hold nothing (the first clause always stays).
pub(crate) fn compress(sentence: &str) -> String {
    let mut s = sentence.trim();
    loop {
        let first = s.split_whitespace().next().unwrap_or("");
        let word = first.trim_end_matches([',', ':', '.', '!']);
        // DISCOURSE is lower-case ASCII: the same as lower-casing the word first.
        if first.is_empty()
            || !DISCOURSE.iter().any(|d| d.eq_ignore_ascii_case(word))
            || s.len() == first.len()
        {
            break;
        }
        s = s[first.len()..].trim_start();
    }
    let clauses: Vec<&str> = s.split("; ").collect();
    if clauses.len() == 1 {
        return s.to_owned();
    }
    let mut kept: Vec<&str> = vec![clauses[0]];
    for c in &clauses[1..] {
        if !information(c).is_empty() {
            kept.push(c);
        }
    }
    let mut out = kept.join("; ");
    if kept.len() < clauses.len() && !out.ends_with(['.', '!', '?']) {
        out.push('.');
    }
    out
}

/// Sentences of a text: split at line breaks, at `.`, `!`, `?` followed by white
/// space, and at `。`, `！`, `？`, `；` (scripts without spaces); list markers removed. Lines inside a fenced code block are skipped (pasted
/// logs and code are data, not statements).
pub(crate) fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || line.is_empty() {
            continue;
        }
        let line = strip_marker(line);
        let mut start = 0;
        let bytes = line.as_bytes();
        for (i, c) in line.char_indices() {
            let end = i + c.len_utf8();
            let cjk = matches!(c, '。' | '！' | '？' | '；');
            if cjk
                || matches!(c, '.' | '!' | '?')
                    && (end == bytes.len() || bytes[end].is_ascii_whitespace())
            {
                let s = line[start..end].trim();
                if !s.is_empty() {
                    out.push(s);
                }
                start = end;
            }
        }
        let rest = line[start..].trim();
        if !rest.is_empty() {
            out.push(rest);
        }
    }
    out
}

/// True for a character of a script written without spaces (Han, kana, Hangul).
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF)
}

/// Punctuation of scripts written without spaces.
fn is_cjk_punct(c: char) -> bool {
    matches!(
        c,
        '，' | '。'
            | '！'
            | '？'
            | '；'
            | '：'
            | '、'
            | '（'
            | '）'
            | '「'
            | '」'
            | '『'
            | '』'
            | '【'
            | '】'
            | '《'
            | '》'
    )
}

/// The text with spaces where a script without spaces meets Latin letters or digits,
/// and for its punctuation: `工单号是TCK-7，请` reads as `工单号是 TCK-7 请`, so values
/// glued to such text are found.
pub(crate) fn cjk_spaced(text: &str) -> std::borrow::Cow<'_, str> {
    if text.is_ascii() || !text.chars().any(|c| is_cjk(c) || is_cjk_punct(c)) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut prev: Option<char> = None;
    for c in text.chars() {
        if is_cjk_punct(c) {
            out.push(' ');
            prev = Some(' ');
            continue;
        }
        if let Some(p) = prev
            && ((is_cjk(p) && c.is_ascii_alphanumeric())
                || (p.is_ascii_alphanumeric() && is_cjk(c)))
        {
            out.push(' ');
        }
        out.push(c);
        prev = Some(c);
    }
    std::borrow::Cow::Owned(out)
}

/// A chat-log prefix pasted with a line (`[09:12] Sam: `, `09:12 Sam: `), if any, and
/// the rest.
pub(crate) fn strip_chat_prefix(line: &str) -> &str {
    let rest = line.trim_start();
    let rest = match rest.strip_prefix('[') {
        Some(r) => match r.split_once(']') {
            Some((stamp, after)) if is_stamp(stamp) => after.trim_start(),
            _ => return line,
        },
        None => match rest.split_once(' ') {
            Some((stamp, after)) if is_stamp(stamp) => after.trim_start(),
            _ => return line,
        },
    };
    // Then a name and a colon (one or two words).
    match rest.split_once(": ") {
        Some((name, after))
            if !name.is_empty()
                && name.split_whitespace().count() <= 2
                && name.chars().next().is_some_and(char::is_alphabetic) =>
        {
            after
        }
        _ => rest,
    }
}

/// A message's text without the labels a chat export puts before it: a time stamp
/// with a speaker (`1:56 pm on 8 May, 2023: Sam: `, `[09:12] Sam: `), or the speaker's
/// own name (`Sam: ` in a message named `Sam`). A stamp alone stays: a date at the start
/// of a sentence may be what it says.
pub(crate) fn strip_label<'a>(text: &'a str, name: Option<&str>) -> &'a str {
    let rest = text.trim_start();
    let named = |s: &'a str| -> Option<&'a str> {
        let (label, after) = s.split_once(": ")?;
        let is_name = name.is_some_and(|n| !n.is_empty() && n == label)
            || (label.split_whitespace().count() <= 2
                && label.split_whitespace().all(|w| {
                    w.chars().next().is_some_and(char::is_uppercase)
                        && w.chars().skip(1).all(|c| c.is_alphabetic() || c == '-')
                }));
        is_name.then_some(after)
    };
    if let Some((head, after)) = rest.split_once(": ")
        && head.len() <= 40
        && head.bytes().any(|b| b.is_ascii_digit())
        && {
            let mut dated = true;
            terms(head, |t| dated &= word_classes(t) & W_DATETIME != 0);
            dated
        }
        && let Some(said) = named(after)
    {
        return said;
    }
    if let Some(n) = name
        && !n.is_empty()
        && let Some(said) = rest.strip_prefix(n).and_then(|r| r.strip_prefix(": "))
    {
        return said;
    }
    text
}

fn is_stamp(s: &str) -> bool {
    let b = s.as_bytes();
    (5..=8).contains(&b.len())
        && b.iter().all(|c| c.is_ascii_digit() || *c == b':')
        && b.get(2) == Some(&b':')
}

/// Function words that say nothing about what a sentence is about.
const COMMON: &[&str] = &[
    "that", "this", "with", "from", "have", "they", "there", "what", "when", "your", "will",
    "been", "were", "then", "than", "them", "into", "about", "just", "also", "some", "only",
    "more", "over", "after", "before", "because", "could", "would", "should", "please", "thanks",
    "still", "again", "other", "those", "these", "which", "where", "while", "here", "their",
    "does", "doing", "done", "each", "every", "like", "look", "looks", "make", "much", "need",
    "same", "sure", "take", "very", "want", "well", "yeah", "okay", "right", "going", "let's",
    "it's", "i'll", "i'm", "we're", "don't", "that's", "there's", "can't",
];

/// The content terms of a text: lower-cased words of four letters or more without
/// digits (function words left out), and runs of a script without spaces. A term rare
/// in the session is what a sentence adds.
pub(crate) fn terms(text: &str, mut each: impl FnMut(&str)) {
    if text.is_ascii() {
        // The common case without allocating: words are byte runs, lower-cased into a
        // buffer (a term longer than the buffer is an identifier, not a word).
        let b = text.as_bytes();
        let mut buf = [0u8; 24];
        let mut i = 0;
        while i < b.len() {
            if !b[i].is_ascii_alphanumeric() {
                i += 1;
                continue;
            }
            let start = i;
            let mut digit = false;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || (b[i] == b'\'' && i > start)) {
                digit |= b[i].is_ascii_digit();
                i += 1;
            }
            let w = &b[start..i];
            if digit || w.len() < 4 || w.len() > buf.len() {
                continue;
            }
            for (k, c) in w.iter().enumerate() {
                buf[k] = c.to_ascii_lowercase();
            }
            if let Ok(t) = std::str::from_utf8(&buf[..w.len()])
                && word_classes(t) & W_COMMON == 0
            {
                each(t);
            }
        }
        return;
    }
    let mut word = String::new();
    let mut han = String::new();
    let flush_word = |w: &mut String, each: &mut dyn FnMut(&str)| {
        if w.chars().count() >= 4 && word_classes(w) & W_COMMON == 0 {
            each(w);
        }
        w.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                flush_word(&mut word, &mut each);
            }
            han.push(c);
            continue;
        }
        if !han.is_empty() {
            if han.chars().count() >= 2 {
                each(&han);
            }
            han.clear();
        }
        if c.is_alphabetic() || (c == '\'' && !word.is_empty()) {
            word.extend(c.to_lowercase());
        } else if c.is_ascii_digit() {
            // A token with digits is a value, not a term: drop the whole token.
            word.clear();
            word.push('0');
        } else {
            if word.starts_with('0') {
                word.clear();
            } else {
                flush_word(&mut word, &mut each);
            }
        }
    }
    if !han.is_empty() && han.chars().count() >= 2 {
        each(&han);
    }
    if !word.starts_with('0') {
        flush_word(&mut word, &mut each);
    }
}

/// The content terms of a text ([`terms`]) that can name a subject: without cue
/// words, change verbs ("set", "bump"), units, days, months and time zones.
pub(crate) fn topic_terms(text: &str, mut each: impl FnMut(&str)) {
    terms(text, |t| {
        let class = word_classes(t);
        if class & (W_RULE | W_DECISION | W_REQUIREMENT | W_UNIT | W_DATETIME) == 0
            && !CHANGE_VERBS.contains(&t)
            && !VAGUE.contains(&t)
        {
            each(t);
        }
    });
}

/// True for a log record: a line that opens with a date and time (`2026-11-30T08:12:01Z
/// ...`, `Nov 30 08:12:01 ...`) and goes on. One record is rarely a fact; the tool's
/// failure, when there is one, is read from its error line.
pub(crate) fn is_log_record(line: &str) -> bool {
    // Bytes only: every line of every tool result is checked.
    let b = line.as_bytes();
    let s = b.strip_prefix(b"[").unwrap_or(b);
    let iso = s.len() >= 16
        && s[..4].iter().all(u8::is_ascii_digit)
        && s[4] == b'-'
        && matches!(s[10], b'T' | b' ' | b'_')
        && s[11..16].contains(&b':');
    let syslog = !iso
        && s.len() >= 15
        && s[..3].iter().all(u8::is_ascii_alphabetic)
        && s[3] == b' '
        && {
            let mut month = [0u8; 3];
            month.copy_from_slice(&s[..3]);
            month.make_ascii_lowercase();
            std::str::from_utf8(&month).is_ok_and(|m| word_classes(m) & W_DATETIME != 0)
        }
        && line
            .split_whitespace()
            .nth(2)
            .is_some_and(|t| is_stamp(t.trim_end_matches(|c: char| !c.is_ascii_digit())));
    (iso || syslog) && s.iter().filter(|c| **c == b' ').nth(2).is_some()
}

/// The shape of a line with every token that holds a digit replaced: two lines with the
/// same shape and other values are the same kind of report (log lines, status polls).
pub(crate) fn noise_shape(text: &str) -> u64 {
    let mut h = StableHasher::new();
    for token in text.split_whitespace() {
        if token.bytes().any(|b| b.is_ascii_digit()) {
            h.write_u8(b'#');
        } else {
            for b in token.bytes() {
                h.write_u8(b.to_ascii_lowercase());
            }
        }
        h.write_u8(b' ');
    }
    h.finish()
}

fn strip_marker(line: &str) -> &str {
    for m in ["- ", "* ", "• "] {
        if let Some(rest) = line.strip_prefix(m) {
            return rest.trim_start();
        }
    }
    // "1. ", "12) "
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 && digits <= 2 {
        let rest = &line[digits..];
        if let Some(r) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return r.trim_start();
        }
    }
    line
}

/// What a statement is about, when it says "<subject> is/=/to <value>": the last
/// content words of the subject. A newer statement about the same subject replaces an
/// older one ("the cache TTL is 300 s", later "set the cache TTL to 900 s").
pub(crate) fn subject(sentence: &str) -> Option<String> {
    const VERBS: [&str; 6] = [" is ", " are ", " = ", " to ", " was ", " becomes "];
    if !VERBS.iter().any(|v| sentence.contains(v)) {
        return None;
    }
    let lowered = sentence.to_ascii_lowercase();
    let words: Vec<&str> = lowered.split_whitespace().map(trim_token).collect();
    let at = words
        .iter()
        .position(|w| matches!(*w, "is" | "are" | "=" | "to" | "was" | "becomes"))?;
    let content: Vec<&str> = words[..at]
        .iter()
        .copied()
        .filter(|w| {
            !w.is_empty()
                && !STOPWORDS.contains(w)
                && !RULE_WORDS.contains(w)
                && !DECISION_WORDS.contains(w)
                && !CHANGE_VERBS.contains(w)
        })
        .collect();
    if content.is_empty() {
        return None;
    }
    // The value after the verb must be a value, or this is prose ("is failing").
    let value = words[at + 1..].iter().take(4).any(|w| {
        w.bytes().any(|b| b.is_ascii_digit())
            || classify(w, w).is_some_and(|k| !matches!(k, Entity::Acronym | Entity::Number))
    });
    if !value {
        return None;
    }
    let from = content.len().saturating_sub(3);
    Some(content[from..].join(" "))
}

/// The text with every digit run replaced: two lines with the same shape are the same
/// kind of report with other numbers (a status line repeated every few minutes).
pub(crate) fn shape(text: &str) -> u64 {
    // FNV-1a: stable across runs and toolchains (only compared within one call).
    let mut h = StableHasher::new();
    let mut in_digits = false;
    for b in text.bytes() {
        let b = if b.is_ascii_digit() {
            if in_digits {
                continue;
            }
            in_digits = true;
            b'#'
        } else {
            in_digits = false;
            b.to_ascii_lowercase()
        };
        h.write_u8(b);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_pinned() {
        assert_eq!(
            noise_shape("Build 42 FAILED on node-7 at 12:00"),
            0xc2d0_4428_c8ce_82a5
        );
        assert_eq!(shape("Status 200 OK after 1500ms"), 0x0b78_d9c3_60b3_739f);
        assert_eq!(noise_shape(""), 0xcbf2_9ce4_8422_2325);
    }

    fn kinds(s: &str) -> Vec<Entity> {
        information(s).values.into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn values_are_recognised() {
        assert_eq!(kinds("see https://x.example/a"), vec![Entity::Url]);
        assert_eq!(kinds("allow 10.4.2.19 please"), vec![Entity::Address]);
        assert_eq!(kinds("at /etc/app/config.toml"), vec![Entity::Path]);
        assert_eq!(kinds("pinned to 3.14.2"), vec![Entity::Version]);
        assert_eq!(kinds("commit 9f3ab21c0d"), vec![Entity::Hash]);
        assert_eq!(kinds("ticket TCK-632."), vec![Entity::Identifier]);
        assert_eq!(kinds("grows 37 GB a day"), vec![Entity::Quantity]);
        assert_eq!(kinds("timeout 30s"), vec![Entity::Quantity]);
        assert_eq!(
            kinds("window is Sunday 02:00-04:00 UTC"),
            vec![Entity::DateTime, Entity::DateTime, Entity::DateTime]
        );
        assert_eq!(kinds("the owner is Priya Raman."), vec![Entity::Proper]);
        assert_eq!(kinds("the orders-sync service"), vec![Entity::Name]);
        assert_eq!(
            kinds("Production is on build 5712."),
            vec![Entity::Identifier]
        );
        assert_eq!(
            kinds("Subject: CN=api.pylon.example"),
            vec![Entity::Identifier]
        );
        assert_eq!(
            kinds("image: registry.acme.internal/ledger-api:build-5312"),
            vec![Entity::Identifier]
        );
        assert!(kinds("thanks, that helps").is_empty());
        // Multi-byte text after a colon is not a time (and never panics).
        assert!(!kinds("1:€5 ratio").contains(&Entity::DateTime));
    }

    /// The one-lookup table says of every word exactly what its lists say.
    #[test]
    fn word_classes_match_the_lists() {
        let lists = WORD_LISTS;
        let firsts: Vec<&str> = PAIR_LISTS
            .iter()
            .flat_map(|p| p.iter().map(|(a, _)| *a))
            .collect();
        let mut words: Vec<&str> = lists.iter().flat_map(|(w, _)| w.iter().copied()).collect();
        words.extend(&firsts);
        assert!(
            words.iter().all(|w| word_bucket(w).is_some()),
            "a listed word is too long"
        );
        words.extend([
            "",
            "x1",
            "mustn",
            "decidedly",
            "Never",
            "utc ",
            "zz",
            "ms2",
            "€€",
        ]);
        for w in words {
            let mut want = 0u8;
            for (list, class) in &lists {
                if list.contains(&w) {
                    want |= class;
                }
            }
            if firsts.contains(&w) {
                want |= W_PAIR;
            }
            assert_eq!(word_classes(w), want, "{w:?}");
        }
    }

    #[test]
    fn cues() {
        assert_eq!(information("Never delete the bucket").cues, RULE);
        assert_eq!(information("We agreed on SEV-2").cues, DECISION);
        assert_eq!(information("I prefer email").cues, REQUIREMENT);
    }

    #[test]
    fn acknowledgements_fit_the_word_limit() {
        for a in ACKS.iter().chain(INTENT_OPENINGS) {
            assert!(a.split(' ').count() <= ACK_MAX_WORDS, "{a:?}");
        }
    }

    #[test]
    fn filler_and_compression() {
        let f = |s: &str, a| is_filler(s, &information(s), a);
        assert!(f("Thanks!", false));
        assert!(f("ok cool", false));
        assert!(f("Two things stand out:", true));
        assert!(f("Let me look at the logs.", true));
        assert!(!f("The ticket is TCK-7.", false));
        assert_eq!(
            compress("Okay, decided: the TTL is 300 s; nothing else to add."),
            "decided: the TTL is 300 s."
        );
    }

    #[test]
    fn subjects() {
        assert_eq!(
            subject("we set the cache TTL to 300 seconds").as_deref(),
            Some("cache ttl")
        );
        assert_eq!(
            subject("The cache TTL is 900 s now").as_deref(),
            Some("cache ttl")
        );
        assert_eq!(subject("The job is failing"), None);
    }

    #[test]
    fn scripts_without_spaces() {
        // Split at CJK terminators with no space after them; values glued to the text
        // are found.
        let s = sentences(
            "工单号是TCK-4412，请在所有更新里引用。主数据库是pg-a-1.db.internal。不要重启它。",
        );
        assert_eq!(s.len(), 3, "{s:?}");
        assert_eq!(kinds(s[0]), vec![Entity::Identifier]);
        assert!(kinds(s[1]).contains(&Entity::Path) || !kinds(s[1]).is_empty());
        assert_eq!(information(s[2]).cues, RULE);
        assert_eq!(
            information("Die Daten dürfen Frankfurt nicht verlassen.").cues,
            RULE
        );
    }

    #[test]
    fn log_records_and_chat_prefixes() {
        assert!(is_log_record(
            "2026-11-30T08:40:06.707Z DEBUG billing-gw-764d GET /v1/orders 200 165ms"
        ));
        assert!(is_log_record(
            "Nov 30 08:12:01 host-1 sshd[42]: accepted key"
        ));
        assert!(!is_log_record("primary = \"pg-amber-412.db.internal\""));
        assert!(!is_log_record("Not After: 2026-12-24 23:59:59 UTC"));
        assert_eq!(
            strip_chat_prefix("[09:12] Sam: no customer data leaves the Frankfurt region"),
            "no customer data leaves the Frankfurt region"
        );
        assert_eq!(
            strip_chat_prefix("The ticket is TCK-7."),
            "The ticket is TCK-7."
        );
    }

    #[test]
    fn content_terms() {
        let mut t = Vec::new();
        terms(
            "No customer data leaves the pg-amber-412 Frankfurt region, ok?",
            |w| t.push(w.to_owned()),
        );
        assert_eq!(
            t,
            ["customer", "data", "leaves", "amber", "frankfurt", "region"]
        );
        let mut han = Vec::new();
        terms("客户的数据必须保存", |w| han.push(w.to_owned()));
        assert_eq!(han, ["客户的数据必须保存"]);
    }

    #[test]
    fn narration_is_not_a_name() {
        let s = "Next I'll look at the queue depth.";
        let info = information(s);
        assert!(info.values.is_empty(), "{info:?}");
        assert!(is_narration(s, &info));
        let f = "Production is on build 5124.";
        assert!(!is_narration(f, &information(f)));
    }

    #[test]
    fn sentence_split_skips_fenced_blocks() {
        let s = sentences("First one. Second!\n```\nlog line. more\n```\n- third");
        assert_eq!(s, vec!["First one.", "Second!", "third"]);
    }
}
