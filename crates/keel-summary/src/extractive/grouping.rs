//! The shape of an extractive summary: four groups, the ones the summary prompt asks
//! for, each line traceable to the message it came from.
//!
//! ```text
//! Goal and requirements:
//! - [m0002] Goal: Find why the nightly export fails.
//! - [m0031] user: Never delete anything in the audit-7 bucket.
//! Facts and decisions:
//! - [m0044] user: The ticket for this is TCK-632.
//! Done:
//! - [m0101] create_incident returned: Created incident INC-77 (SEV-2).
//! Open questions:
//! - [m0217] user asked: Do we have a runbook for this?
//! ```
//!
//! A line starts with the reference of its message (its id, or the last 12 characters of
//! a long one, the whole id when two would be the same), then who said it: `user:`, `assistant:`, or the tool that returned it
//! (`read_file returned:`), so tool output never reads as the user's words.

/// The groups of a summary, in the order they are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Section {
    /// The goal, and the user's requirements, rules and preferences.
    Goal,
    /// Facts and decisions.
    Facts,
    /// What was done: tool outcomes.
    Done,
    /// Open questions.
    Open,
}

impl Section {
    pub const ALL: [Section; 4] = [Section::Goal, Section::Facts, Section::Done, Section::Open];

    pub fn header(self) -> &'static str {
        match self {
            Section::Goal => "Goal and requirements:",
            Section::Facts => "Facts and decisions:",
            Section::Done => "Done:",
            Section::Open => "Open questions:",
        }
    }

    fn from_header(line: &str) -> Option<Section> {
        Section::ALL.into_iter().find(|s| s.header() == line)
    }
}

/// One line of a summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Line {
    pub section: Section,
    /// The message reference, without brackets.
    pub reference: Option<String>,
    /// The text, with its speaker (`user: ...`).
    pub text: String,
}

/// True for a whitespace-separated token that counts as a word: one with a letter or a
/// digit (bullet markers and lone punctuation are free). Session memory clips its
/// summary with the same rule, so a summary within budget is never clipped again.
pub(crate) fn is_word(token: &str) -> bool {
    token.chars().any(char::is_alphanumeric)
}

/// Words in `text`, counted as [`is_word`] does.
pub(crate) fn count_words(text: &str) -> usize {
    text.split_whitespace().filter(|t| is_word(t)).count()
}

/// The short reference of a message id: the id itself when short, else its last 12
/// characters (ids of one session often share a long prefix; their ends differ); only
/// characters that cannot break the line's shape are kept. Two messages whose
/// references would be the same get their whole ids ([`full_reference`]).
pub(crate) fn reference(id: &str) -> Option<String> {
    let clean = full_reference(id)?;
    if clean.len() <= 14 {
        return Some(clean);
    }
    // Every kept character is ASCII (one byte).
    Some(clean[clean.len() - 12..].to_owned())
}

/// The whole id, cleaned as [`reference`] cleans it.
pub(crate) fn full_reference(id: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':');
    let clean: String = id.chars().filter(|c| allowed(*c)).collect();
    (!clean.is_empty()).then_some(clean)
}

/// Reads a summary back into lines: this module's own format, an older flat list of
/// bullets, or a model-written summary (each non-empty line a fact). Unknown headers
/// (`Summary:`, `Pinned:`) are dropped; their bullets are facts.
pub(crate) fn parse(summary: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut section = Section::Facts;
    for line in summary.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(s) = Section::from_header(line) {
            section = s;
            continue;
        }
        let bullet = line
            .strip_prefix("- ")
            .or_else(|| line.strip_prefix("* "))
            .or_else(|| line.strip_prefix("• "));
        let Some(body) = bullet else {
            if line.ends_with(':') && line.split_whitespace().count() <= 3 {
                continue;
            }
            out.push(Line {
                section,
                reference: None,
                text: line.to_owned(),
            });
            continue;
        };
        let body = body.trim();
        let (reference, text) = match body.strip_prefix('[').and_then(|r| r.split_once("] ")) {
            Some((r, t)) if !r.contains(char::is_whitespace) && r.len() <= 40 => {
                (Some(r.to_owned()), t.trim())
            }
            _ => (None, body),
        };
        if text.is_empty() {
            continue;
        }
        let section = if text.starts_with("Goal:") {
            Section::Goal
        } else {
            section
        };
        out.push(Line {
            section,
            reference,
            text: text.to_owned(),
        });
    }
    out
}

/// One bullet line as written.
pub(crate) fn bullet(line: &Line) -> String {
    match &line.reference {
        Some(r) => format!("- [{r}] {}", line.text),
        None => format!("- {}", line.text),
    }
}

/// Writes the lines grouped by section (in section order, each section's lines in the
/// order given), with a header per non-empty section when `headers` is on.
pub(crate) fn render(lines: &[Line], headers: bool) -> String {
    let mut out: Vec<String> = Vec::new();
    for section in Section::ALL {
        let mut first = true;
        for line in lines.iter().filter(|l| l.section == section) {
            if first && headers {
                out.push(section.header().to_owned());
            }
            first = false;
            out.push(bullet(line));
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let lines = vec![
            Line {
                section: Section::Goal,
                reference: Some("m1".into()),
                text: "Goal: fix it.".into(),
            },
            Line {
                section: Section::Done,
                reference: None,
                text: "read_file returned: ok".into(),
            },
        ];
        let text = render(&lines, true);
        assert_eq!(
            text,
            "Goal and requirements:\n- [m1] Goal: fix it.\nDone:\n- read_file returned: ok"
        );
        assert_eq!(parse(&text), lines);
    }

    #[test]
    fn foreign_summaries_are_facts() {
        let lines = parse("Pinned:\n- ticket: TCK-7\n\nSummary:\nThe user is Ada.");
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|l| l.section == Section::Facts));
        assert_eq!(lines[0].text, "ticket: TCK-7");
    }

    #[test]
    fn references() {
        assert_eq!(reference("s3-m0044").as_deref(), Some("s3-m0044"));
        assert_eq!(
            reference("550e8400-e29b-41d4-a716-446655440000").as_deref(),
            Some("446655440000")
        );
        assert_eq!(reference("a] b").as_deref(), Some("ab"));
        assert_eq!(reference(""), None);
    }
}
