//! The bundled session `examples/sessions/support-prj123.jsonl`: it is in Keel's message
//! shape, byte for byte, it is what its generator produces, and it has the shape of the
//! support scenario it stands for (one project, one cluster, a long troubleshooting hour).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::path::PathBuf;
use std::process::Command;

use keel_core::message::{Message, Role};
use keel_replay::Transcript;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn session_path() -> PathBuf {
    root().join("examples/sessions/support-prj123.jsonl")
}

fn lines() -> Vec<String> {
    std::fs::read_to_string(session_path())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn messages() -> Vec<Message> {
    lines()
        .iter()
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {}: {e}", i + 1)))
        .collect()
}

#[test]
fn every_line_round_trips_byte_for_byte_through_message() {
    for (i, line) in lines().iter().enumerate() {
        let m: Message =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("line {}: {e}", i + 1));
        assert!(!m.id().is_empty(), "line {} has no id", i + 1);
        let again = serde_json::to_string(&m).unwrap();
        assert_eq!(&again, line, "line {} does not round-trip", i + 1);
    }
}

#[test]
fn it_is_a_valid_transcript_with_stable_unique_ids() {
    let t = Transcript::from_messages(messages()).unwrap();
    assert_eq!(t.system().map(Message::role), Some(Role::System));
    assert!(t.model_calls() >= 100, "{} model calls", t.model_calls());
    for (i, m) in t.messages().iter().enumerate() {
        assert_eq!(
            m.id(),
            format!("prj123-m{:04}", i + 2),
            "ids follow the line number"
        );
    }
}

#[test]
fn it_has_the_shape_of_the_support_scenario() {
    let msgs = messages();
    let users: Vec<&Message> = msgs.iter().filter(|m| m.is_human()).collect();
    assert_eq!(users.len(), 60, "60 exchanges");
    let first = users[0].text();
    assert!(
        first.contains("PRJ-123") && first.contains("EU cluster"),
        "{first}"
    );
    assert_eq!(users[59].text(), "Which cluster were we on again?");
    let last = msgs.last().unwrap();
    assert!(
        last.is_ai() && last.text().contains("EU cluster"),
        "ends with the answer"
    );

    let longest_user_words = users
        .iter()
        .map(|m| m.text().split_whitespace().count())
        .max();
    assert!(
        longest_user_words >= Some(2500),
        "a pasted log of several thousand words"
    );

    let parallel = msgs.iter().filter(|m| m.tool_calls().len() >= 2).count();
    assert!(
        parallel >= 5,
        "{parallel} AI messages with parallel tool calls"
    );
    assert!(
        msgs.iter().any(|m| m.tool_calls().len() == 3),
        "one with three calls"
    );

    let skill_reads = msgs
        .iter()
        .flat_map(Message::tool_calls)
        .filter(|c| {
            c.name == "read_file"
                && c.args["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("/mnt/skills/") && p.ends_with("/SKILL.md"))
        })
        .count();
    assert!(skill_reads >= 5, "{skill_reads} skill reads");

    let all_text: String = msgs.iter().map(|m| m.text().into_owned()).collect();
    for decision in [
        "roll back to v2.3",
        "Dana Whitfield",
        "batches of 500",
        "INC-4471",
    ] {
        assert!(
            all_text.contains(decision),
            "decision {decision:?} is in the session"
        );
    }
    // The facts the scenario is about are stated once, at the start: after the first
    // exchange, only summaries can carry the cluster.
    let mentions = msgs[..msgs.len() - 1]
        .iter()
        .filter(|m| m.text().contains("EU cluster"))
        .count();
    assert_eq!(
        mentions, 1,
        "the EU cluster is named once before the final answer"
    );
}

#[test]
fn the_generator_reproduces_the_committed_file() {
    let out = tempfile::NamedTempFile::new().unwrap();
    let status = match Command::new("python3")
        .arg(root().join("scripts/gen_session.py"))
        .arg("-o")
        .arg(out.path())
        .status()
    {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("python3 is not installed; skipping the regeneration check");
            return;
        }
        Err(e) => panic!("running the generator: {e}"),
    };
    assert!(status.success());
    let regenerated = std::fs::read(out.path()).unwrap();
    let committed = std::fs::read(session_path()).unwrap();
    assert!(
        regenerated == committed,
        "scripts/gen_session.py no longer produces the committed session; regenerate it"
    );
}
