//! Recall inside a real agent loop: what is quoted (only what the final request lacks),
//! where, within which budget, tool results, order in the stack, incremental indexing
//! and CJK text.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: failures should be loud

mod common;

use std::sync::Arc;

use common::*;
use keel_core::message::{Message, ToolCall};
use keel_core::middleware::Middleware;
use keel_core::pairs::check_pairs;
use keel_core::recall::{MemoryRecallIndex, RecallIndex};
use keel_memory::{FoldEngine, SessionMemoryMiddleware, SessionMemorySettings};
use keel_recall::middleware::approx_tokens;
use keel_recall::{RECALL_PREFIX, RecallSettings};
use keel_store::memory::MemoryStore;
use keel_summarization::config::{ContextSize, SummarizationConfig};
use keel_summarization::middleware::SummarizationMiddleware;
use keel_testkit::{FnTool, RecordedRequest, ScriptedModel};
use serde_json::json;

fn summarization(trigger: u64, keep: u64) -> Arc<dyn Middleware> {
    let config = SummarizationConfig::builder()
        .trigger(ContextSize::Messages(trigger))
        .keep(ContextSize::Messages(keep))
        .build()
        .unwrap();
    Arc::new(
        SummarizationMiddleware::builder(config)
            .extractive()
            .build()
            .unwrap(),
    )
}

fn session_memory(n: usize) -> Arc<dyn Middleware> {
    let scope = keel_core::store::SessionScope::new("keel", "", "", "");
    let settings = SessionMemorySettings::for_scope(scope).with_n_messages(n);
    Arc::new(
        SessionMemoryMiddleware::builder(settings)
            .store(Arc::new(MemoryStore::new()))
            .fold_engine(FoldEngine::Extractive)
            .build()
            .unwrap(),
    )
}

fn last(model: &ScriptedModel) -> RecordedRequest {
    user_requests(model).pop().expect("a user-facing request")
}

#[tokio::test]
async fn excerpts_quote_only_messages_the_final_request_no_longer_carries() {
    // A second statement of the fact sits in the kept window: it matches the question
    // as well, but the request carries it, so only the dropped one is quoted.
    let mut t = thread();
    let q = t.pop().unwrap();
    t.push(Message::human("Reminder: billing backups are still with the vendor.").with_id("kept"));
    t.push(q);
    let model = model();
    let agent = agent(
        &model,
        vec![
            recall(Arc::new(MemoryRecallIndex::new())),
            Arc::new(KeepLast(4)),
        ],
    );
    agent.invoke("t", t.clone()).await.unwrap();
    let req = last(&model);
    let (_, text) = recall_message(&req.messages).expect("the dropped fact is recalled");
    assert!(text.starts_with(RECALL_PREFIX), "{text}");
    assert!(
        text.contains(&format!("> {FACT}")),
        "quoted as written: {text}"
    );
    assert_eq!(
        quoted_ids(&text),
        ["fact"],
        "only the dropped message: {text}"
    );
    assert!(req.messages.iter().any(|m| m.id() == "kept"));

    // The same thread with nothing dropped: no recall message at all.
    let full = common::model();
    let whole = common::agent(&full, vec![recall(Arc::new(MemoryRecallIndex::new()))]);
    whole.invoke("t", t).await.unwrap();
    assert_eq!(recall_message(&last(&full).messages), None);
}

#[tokio::test]
async fn a_message_kept_verbatim_under_another_id_is_not_quoted_again() {
    // The request carries the fact's text under a different id (a resent copy).
    let mut t = thread();
    let q = t.pop().unwrap();
    t.push(Message::human(FACT).with_id("copy"));
    t.push(q);
    let model = model();
    let agent = agent(
        &model,
        vec![
            recall(Arc::new(MemoryRecallIndex::new())),
            Arc::new(KeepLast(3)),
        ],
    );
    agent.invoke("t", t).await.unwrap();
    assert_eq!(recall_message(&last(&model).messages), None);
}

#[tokio::test]
async fn without_a_summary_the_excerpts_go_right_before_the_latest_user_input() {
    // The latest input is a run of two user messages: the excerpts precede both.
    let mut t = thread();
    t.pop();
    t.push(Message::ai("Anything else?").with_id("a-last"));
    t.push(Message::human("One more question.").with_id("q-a"));
    t.push(Message::human(QUESTION).with_id("question"));
    let model = model();
    let agent = agent(
        &model,
        vec![
            recall(Arc::new(MemoryRecallIndex::new())),
            Arc::new(KeepLast(4)),
        ],
    );
    agent.invoke("t", t).await.unwrap();
    let req = last(&model);
    let (at, _) = recall_message(&req.messages).expect("recalled");
    assert_eq!(req.messages[at - 1].id(), "a-last");
    assert_eq!(req.messages[at + 1].id(), "q-a");
    assert_eq!(req.messages[at + 2].id(), "question");
    assert_eq!(at + 3, req.messages.len());
}

#[tokio::test]
async fn with_a_summary_the_excerpts_go_right_before_it() {
    let model = model();
    let agent = agent(
        &model,
        vec![
            recall(Arc::new(MemoryRecallIndex::new())),
            summarization(10, 4),
        ],
    );
    agent.invoke("t", thread()).await.unwrap();
    let req = last(&model);
    let summary = req
        .messages
        .iter()
        .position(|m| m.name() == Some("summary"))
        .expect("summarization ran");
    let (at, text) = recall_message(&req.messages).expect("recalled");
    assert_eq!(at + 1, summary, "recall directly before the summary");
    assert_eq!(quoted_ids(&text), ["fact"]);
    assert_eq!(req.messages.last().unwrap().id(), "question");
}

/// Ten older messages that all answer the question, each a few lines long.
fn many_matches() -> Vec<Message> {
    // Ten different statements about the billing backups' vendor (near-duplicates would
    // be merged into one excerpt).
    const SAYINGS: [&str; 10] = [
        "the first quote came from Arclight, priced per terabyte",
        "legal wants the contract signed before March",
        "the restore drill last week took 40 minutes end to end",
        "encryption keys stay in our own KMS, never with them",
        "the nightly window moved to 02:00 UTC to avoid the batch jobs",
        "retention is 35 days for dailies and a year for monthlies",
        "their support line answered within the hour on Sunday",
        "finance asked for a cap of 1,200 euros a month",
        "the old tape library gets switched off in June",
        "audit needs a written report of each restore test",
    ];
    let mut t: Vec<Message> = SAYINGS
        .iter()
        .enumerate()
        .map(|(i, saying)| {
            Message::human(format!(
                "Billing backups, vendor note {i}: {saying}.\nChecked by the vendor team."
            ))
            .with_id(format!("match{i}"))
        })
        .collect();
    t.extend(filler("f", 1..21));
    t.push(Message::human(QUESTION).with_id("question"));
    t
}

async fn recalled_with(settings: RecallSettings) -> String {
    let model = model();
    let agent = agent(
        &model,
        vec![
            recall_with(settings, Arc::new(MemoryRecallIndex::new())),
            Arc::new(KeepLast(3)),
        ],
    );
    agent.invoke("t", many_matches()).await.unwrap();
    recall_message(&last(&model).messages).expect("recalled").1
}

#[tokio::test]
async fn max_excerpts_caps_the_number_of_quoted_messages() {
    for n in [1, 2, 3] {
        let text = recalled_with(RecallSettings {
            max_excerpts: n,
            max_tokens: 20_000,
            ..RecallSettings::default()
        })
        .await;
        assert_eq!(quoted_ids(&text).len(), n, "max_excerpts {n}: {text}");
    }
    let text = recalled_with(RecallSettings {
        max_excerpts: 50,
        max_tokens: 20_000,
        ..RecallSettings::default()
    })
    .await;
    assert_eq!(
        quoted_ids(&text).len(),
        10,
        "every match, none twice: {text}"
    );
}

#[tokio::test]
async fn the_excerpt_message_stays_within_max_tokens() {
    let header = approx_tokens(&keel_recall::render(&[]));
    // Every budget from one excerpt's worth up: the rendered message never exceeds it.
    for max_tokens in (header + 55..header + 260).chain([400, 1000]) {
        let text = recalled_with(RecallSettings {
            max_excerpts: 50,
            max_tokens,
            ..RecallSettings::default()
        })
        .await;
        assert!(!quoted_ids(&text).is_empty(), "budget {max_tokens}: {text}");
        assert!(
            approx_tokens(&text) <= max_tokens,
            "budget {max_tokens}, message of {} tokens: {text}",
            approx_tokens(&text)
        );
    }
    // A larger budget holds more of them.
    let small = recalled_with(RecallSettings {
        max_excerpts: 50,
        max_tokens: header + 60,
        ..RecallSettings::default()
    })
    .await;
    let large = recalled_with(RecallSettings {
        max_excerpts: 50,
        max_tokens: 1000,
        ..RecallSettings::default()
    })
    .await;
    assert!(quoted_ids(&small).len() < quoted_ids(&large).len());
}

/// The model calls `lookup` once when asked about the order, then answers.
fn tool_model() -> Arc<ScriptedModel> {
    Arc::new(ScriptedModel::from_fn(|r: &RecordedRequest| {
        let last = r.messages.last().unwrap();
        if last.is_human() && last.id() == "order" {
            return Ok(Message::ai("Looking it up.")
                .with_id("call-msg")
                .with_tool_calls(vec![ToolCall::new(
                    "call-1",
                    "lookup",
                    json!({"order": "A-77"}),
                )]));
        }
        Ok(Message::ai("ok").with_id(format!("answer-{}", last.id())))
    }))
}

#[tokio::test]
async fn a_tool_result_is_quoted_with_its_call_marked_untrusted_and_the_request_stays_pair_safe() {
    let model = tool_model();
    let index = Arc::new(MemoryRecallIndex::new());
    let agent = keel_agent::Agent::builder()
        .model(model.clone())
        .tool(FnTool::new("lookup", |_| {
            Ok("Order A-77 left on Fjordline freight, pallet 12, from the Oslo dock.".into())
        }))
        .middleware_shared(recall(index))
        .middleware_shared(summarization(10, 4))
        .build()
        .unwrap();
    agent
        .invoke(
            "t",
            vec![Message::human("Where is order A-77?").with_id("order")],
        )
        .await
        .unwrap();
    agent.invoke("t", filler("f", 1..21)).await.unwrap();
    agent
        .invoke(
            "t",
            vec![Message::human("Which freight company carries order A-77?").with_id("question")],
        )
        .await
        .unwrap();
    for r in user_requests(&model) {
        check_pairs(&r.messages).unwrap();
    }
    let req = last(&model);
    assert!(
        !req.messages.iter().any(|m| m.is_tool()),
        "the tool result was summarized away"
    );
    let (_, text) = recall_message(&req.messages).expect("the tool result is recalled");
    assert!(text.contains("tool result of lookup · untrusted"), "{text}");
    assert!(
        text.contains(r#"> lookup({"order":"A-77"}) returned:"#),
        "quoted with its call: {text}"
    );
    assert!(
        text.contains("> Order A-77 left on Fjordline freight"),
        "{text}"
    );
    assert!(
        text.contains("untrusted are"),
        "the untrusted rule is stated: {text}"
    );
}

#[tokio::test]
async fn recall_works_outside_or_inside_summarization_and_session_memory() {
    type Stack = fn() -> Vec<Arc<dyn Middleware>>;
    let stacks: [(&str, Stack); 4] = [
        ("recall, summarization", || {
            vec![
                recall(Arc::new(MemoryRecallIndex::new())),
                summarization(10, 4),
            ]
        }),
        ("summarization, recall", || {
            vec![
                summarization(10, 4),
                recall(Arc::new(MemoryRecallIndex::new())),
            ]
        }),
        ("recall, session memory", || {
            vec![
                recall(Arc::new(MemoryRecallIndex::new())),
                session_memory(4),
            ]
        }),
        ("session memory, recall", || {
            vec![
                session_memory(4),
                recall(Arc::new(MemoryRecallIndex::new())),
            ]
        }),
    ];
    for (name, stack) in stacks {
        let model = model();
        let agent = agent(&model, stack());
        // Two turns, as a conversation runs: the question comes on its own.
        let mut t = thread();
        let question = t.pop().unwrap();
        agent.invoke("t", t).await.unwrap();
        agent.invoke("t", vec![question]).await.unwrap();
        let req = last(&model);
        assert!(
            !req.messages.iter().any(|m| m.id() == "fact"),
            "{name}: the fact was compacted away"
        );
        let (at, text) = recall_message(&req.messages).unwrap_or_else(|| {
            panic!(
                "{name}: recalled in {:?}",
                req.messages
                    .iter()
                    .map(|m| (m.id(), m.name()))
                    .collect::<Vec<_>>()
            )
        });
        assert_eq!(quoted_ids(&text), ["fact"], "{name}: {text}");
        // Before the summary when the request has one (summarization always does
        // here), else right before the question.
        match req
            .messages
            .iter()
            .position(|m| m.name() == Some("summary"))
        {
            Some(summary) => assert_eq!(at + 1, summary, "{name}: before the summary"),
            None => {
                assert!(!name.contains("summarization"), "{name}: a summary");
                assert_eq!(req.messages[at + 1].id(), "question", "{name}");
            }
        }
        check_pairs(&req.messages).unwrap();
    }
}

#[tokio::test]
async fn a_second_turn_indexes_only_the_new_messages() {
    let index = Arc::new(CountingIndex::default());
    let model = model();
    let agent = agent(&model, vec![recall(index.clone()), Arc::new(KeepLast(4))]);
    let scope = RecallSettings::default().scope_for_thread("t");
    agent.invoke("t", thread()).await.unwrap();
    let first: Vec<String> = thread().iter().map(|m| m.id().to_owned()).collect();
    assert_eq!(index.calls(), [first]);
    assert_eq!(index.indexed_count(&scope).await.unwrap(), 22);

    agent
        .invoke(
            "t",
            vec![Message::human("And the offsite copies?").with_id("q2")],
        )
        .await
        .unwrap();
    let calls = index.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1], ["answer-question", "q2"], "only the new messages");
    assert_eq!(index.indexed_count(&scope).await.unwrap(), 24);

    // Another thread is indexed from its start, on its own.
    agent.invoke("u", filler("g", 0..3)).await.unwrap();
    assert_eq!(index.calls()[2], ["g0", "g1", "g2"]);
    assert_eq!(index.indexed_count(&scope).await.unwrap(), 24);

    // A fresh middleware (a restart) re-sends the thread; the index keeps one copy.
    let model2 = self::model();
    let again = agent_with(&model2, vec![recall(index.clone())], agent);
    again
        .invoke("t", vec![Message::human("Last one.").with_id("q3")])
        .await
        .unwrap();
    assert_eq!(
        index.calls().last().unwrap().len(),
        26,
        "everything re-sent"
    );
    assert_eq!(
        index.indexed_count(&scope).await.unwrap(),
        26,
        "no duplicates"
    );
}

/// An agent with a new stack over the checkpoints of `old`.
fn agent_with(
    model: &Arc<ScriptedModel>,
    stack: Vec<Arc<dyn Middleware>>,
    old: keel_agent::Agent,
) -> keel_agent::Agent {
    let mut b = keel_agent::Agent::builder()
        .model(model.clone())
        .checkpointer(old.checkpointer().clone());
    for m in stack {
        b = b.middleware_shared(m);
    }
    b.build().unwrap()
}

async fn cjk_on(index: Arc<dyn RecallIndex>) {
    let mut t = vec![Message::human("这个项目的负责人是王芳，她负责数据库迁移。").with_id("fact")];
    for i in 0..12 {
        t.push(
            Message::human(format!("今天的天气很好，第{i}次会议改到下午三点。"))
                .with_id(format!("f{i}")),
        );
    }
    t.push(Message::human("项目负责人是谁？").with_id("question"));
    let model = model();
    let agent = agent(&model, vec![recall(index), Arc::new(KeepLast(3))]);
    agent.invoke("t", t).await.unwrap();
    let (_, text) = recall_message(&last(&model).messages).expect("the CJK fact is recalled");
    assert_eq!(quoted_ids(&text), ["fact"], "{text}");
    assert!(text.contains("> 这个项目的负责人是王芳"), "{text}");
}

#[tokio::test]
async fn a_cjk_question_finds_cjk_text_in_memory_and_on_sqlite() {
    cjk_on(Arc::new(MemoryRecallIndex::new())).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("keel.db").display());
    cjk_on(Arc::new(keel_store::Store::connect(&url).await.unwrap())).await;
}
