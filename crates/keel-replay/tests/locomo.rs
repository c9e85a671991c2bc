//! The LoCoMo recipe on the five development conversations of the benchmark (Maharana et
//! al., "Evaluating Very Long-Term Conversational Memory of LLM Agents", ACL 2024).
//!
//! The files are read where they are, `../shared/datasets/locomo-dev` relative to the
//! repository root (or the folder `KEEL_LOCOMO_DIR` names), and never copied: the test
//! skips with a note when the folder is absent. It checks the conversion against the
//! counts the dataset's README gives (probes per file, 230 in all) and the turns of each
//! transcript, and that nothing depends on the speakers' names.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

use std::path::PathBuf;

use keel_replay::ReplayOptions;
use keel_replay::locomo::{Conversation, evaluate};
use serde_json::Value;

/// (file, sessions with turns, turns in them, messages after the conversion without the
/// system prompt, probes).
const FILES: [(&str, usize, usize, usize, usize); 5] = [
    ("26", 19, 419, 418, 28),
    ("30", 19, 369, 369, 18),
    ("41", 32, 663, 662, 55),
    ("42", 29, 629, 628, 57),
    ("43", 29, 680, 679, 72),
];

fn dataset() -> Option<PathBuf> {
    let dir = match std::env::var_os("KEEL_LOCOMO_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/datasets/locomo-dev")
        }
    };
    if dir.join("26.json").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "note: skipped: the LoCoMo development files are not at {} (set KEEL_LOCOMO_DIR \
             to their folder)",
            dir.display()
        );
        None
    }
}

const MAX_BYTES: usize = 64 << 20;

#[test]
fn the_recipe_gives_the_readme_counts() {
    let Some(dir) = dataset() else { return };
    let mut total = 0;
    for (name, sessions, turns, messages, probes) in FILES {
        let c = Conversation::read(&dir.join(format!("{name}.json")), MAX_BYTES).unwrap();
        assert_eq!(c.sessions, sessions, "{name}: sessions");
        assert_eq!(c.turns, turns, "{name}: turns");
        assert_eq!(c.messages.len() - 1, messages, "{name}: messages");
        assert_eq!(c.probes.len(), probes, "{name}: probes");
        total += c.probes.len();
        let transcript = c.transcript().unwrap();
        assert!(
            transcript.warnings().is_empty(),
            "{name}: {:?}",
            transcript.warnings()
        );
        // Every message carries its speaker and its session's date; the transcript ends
        // with an assistant message.
        for m in transcript.messages() {
            assert!(
                m.name()
                    .is_some_and(|n| n == c.speaker_a || n == c.speaker_b)
            );
            assert!(
                m.metadata()["timestamp"]
                    .as_str()
                    .is_some_and(|t| !t.is_empty())
            );
            assert!(m.text().contains(&format!("{}: ", m.name().unwrap())));
        }
        assert!(transcript.messages().last().unwrap().is_ai());
        for p in &c.probes {
            assert!((1..=4).contains(&p.category));
            assert!(!p.evidence.is_empty());
        }
    }
    assert_eq!(total, 230);
}

/// The speakers' names are data: renamed everywhere they are names (the speaker
/// fields), the conversation gives the same probes and the same turns under the new
/// names.
#[test]
fn nothing_depends_on_the_speakers_names() {
    let Some(dir) = dataset() else { return };
    let path = dir.join("30.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let original: Value = serde_json::from_str(&text).unwrap();
    let mut renamed = original.clone();
    let a = original["speaker_a"].as_str().unwrap().to_owned();
    let names = |n: &str| if n == a { "Person One" } else { "Person Two" };
    renamed["speaker_a"] = "Person One".into();
    renamed["speaker_b"] = "Person Two".into();
    for (key, value) in renamed.as_object_mut().unwrap() {
        if key.starts_with("session_")
            && let Some(turns) = value.as_array_mut()
        {
            for t in turns {
                let new = names(t["speaker"].as_str().unwrap());
                t["speaker"] = new.into();
            }
        }
    }
    let before = Conversation::from_json(&original, &path).unwrap();
    let after = Conversation::from_json(&renamed, &path).unwrap();
    assert_eq!(before.probes, after.probes);
    assert_eq!(before.messages.len(), after.messages.len());
    assert!(after.messages[1].text().contains("Person"));
}

/// With no stack the request is the whole history: every probe is found (its answer is
/// in an evidence turn), and the tokens sent are the full history's.
#[tokio::test]
async fn the_full_history_finds_every_probe() {
    let Some(dir) = dataset() else { return };
    let c = Conversation::read(&dir.join("30.json"), MAX_BYTES).unwrap();
    let (report, _) = evaluate(&c, &ReplayOptions::default(), None).await.unwrap();
    let f = &report.figures;
    assert_eq!((f.found.found, f.found.probes), (18, 18));
    assert_eq!(f.sent_tokens, f.full_history_tokens);
    assert!(f.sent_tokens > 3 * f.last100_tokens, "{f:?}");
    assert!(f.last100_found.found < 18, "{f:?}");
}
