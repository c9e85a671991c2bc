//! Differential tests against LangChain 1.5: the same scenarios (tests/fixtures/langchain/
//! scenarios.json) run through Keel here and through LangChain's `create_agent` by
//! `scripts/compare/middleware_diff.py`, whose output this test compares with: the final
//! messages, every request the model received, the `todos` state and the error of a
//! failed run, without ids. PII detectors and strategies are compared text by text.
//!
//! The expected side is the committed `expected.json`, or the file named by
//! `KEEL_LANGCHAIN_EXPECTED` (scripts/test.sh regenerates it from a fresh LangChain).

use std::collections::BTreeMap;
use std::sync::Arc;

use keel_agent::AgentError;
use keel_core::message::{Message, MessageBody, ToolStatus};
use keel_core::model::{ChatModel, ModelError, ModelErrorKind, ModelProfile};
use keel_core::tool::ToolError;
use keel_middleware::human_in_the_loop::{Decision, HumanInTheLoop, Interrupt, ResumeError};
use keel_middleware::pii::{Detector, Rule, Strategy};
use keel_middleware::stack::{ModelRegistry, Stack};
use keel_testkit::{FnTool, ScriptedModel};
use serde_json::{Value, json};

// cfg(test) marks the helper as test code, where the lints allow unwrap.
#[cfg(test)]
fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/langchain")
}

// cfg(test) marks the helper as test code, where the lints allow unwrap.
#[cfg(test)]
fn load(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

// cfg(test) marks the helper as test code, where the lints allow unwrap.
#[cfg(test)]
fn expected() -> Value {
    match std::env::var_os("KEEL_LANGCHAIN_EXPECTED") {
        Some(p) => load(std::path::Path::new(&p)),
        None => load(&fixtures().join("expected.json")),
    }
}

// cfg(test) marks the helper as test code, where the lints allow unwrap.
#[cfg(test)]
fn answer(v: &Value) -> Result<Message, ModelError> {
    if let Some(e) = v.get("error") {
        let kind: ModelErrorKind = serde_json::from_value(e["kind"].clone()).unwrap();
        return Err(ModelError::new(kind, e["message"].as_str().unwrap()));
    }
    Ok(serde_json::from_value(v.clone()).unwrap())
}

/// The comparable part of a message (as the Python side's `norm`).
// cfg(test) marks the helper as test code, where the lints allow unwrap.
#[cfg(test)]
fn norm(m: &Message) -> Value {
    let text = m.text().into_owned();
    match m.body() {
        MessageBody::Human(_) => json!({"role": "user", "content": text}),
        MessageBody::System(_) => json!({"role": "system", "content": text}),
        MessageBody::Tool(t) => json!({
            "role": "tool",
            "content": text,
            "tool_call_id": t.tool_call_id,
            "name": t.name,
            "status": if t.status == ToolStatus::Error { "error" } else { "success" },
        }),
        MessageBody::Ai(a) => {
            let mut out = json!({"role": "assistant", "content": text});
            if !a.tool_calls.is_empty() {
                out["tool_calls"] = a
                    .tool_calls
                    .iter()
                    .map(|c| json!({"id": c.id, "name": c.name, "args": c.args}))
                    .collect();
            }
            out
        }
    }
}

// cfg(test) marks the helper as test code, where the lints allow unwrap.
#[cfg(test)]
fn requests(model: &ScriptedModel) -> Value {
    model
        .requests()
        .iter()
        .map(|r| {
            json!({
                "system": r.system.as_ref().map(|s| s.text().into_owned()),
                "messages": r.messages.iter().map(norm).collect::<Vec<_>>(),
            })
        })
        .collect()
}

// cfg(test) marks the helper as test code, where the lints allow unwrap.
#[cfg(test)]
async fn run_keel(s: &Value) -> BTreeMap<String, Value> {
    let stack_text = serde_json::to_string(&json!({"middleware": s["middleware"]})).unwrap();
    let stack = Stack::from_yaml_str(&stack_text).unwrap_or_else(|e| panic!("{}: {e}", s["name"]));
    let main = Arc::new(ScriptedModel::with_results(
        s["answers"].as_array().unwrap().iter().map(answer),
    ));
    let mut named: BTreeMap<String, Arc<ScriptedModel>> = BTreeMap::new();
    if let Some(models) = s.get("models").and_then(Value::as_object) {
        for (name, answers) in models {
            let m = ScriptedModel::with_results(answers.as_array().unwrap().iter().map(answer))
                .with_profile(ModelProfile::new(name.clone(), "scripted"));
            named.insert(name.clone(), Arc::new(m));
        }
    }
    let registry: Arc<dyn ModelRegistry> = {
        let named = named.clone();
        Arc::new(move |n: &str| named.get(n).map(|m| m.clone() as Arc<dyn ChatModel>))
    };
    let mut builder = stack
        .agent_builder(main.clone(), registry)
        .unwrap()
        .tool(FnTool::echo("echo"))
        .tool(FnTool::echo("search"))
        .tool(FnTool::new("fail", |_| {
            Err(ToolError::Failed {
                tool: "fail".into(),
                message: "boom".into(),
            })
        }));
    if let Some(p) = s.get("system_prompt").and_then(Value::as_str) {
        builder = builder.system_prompt(p);
    }
    let agent = builder
        .build()
        .unwrap_or_else(|e| panic!("{}: {e}", s["name"]));
    let mut error = Value::Null;
    let mut interrupts = Vec::new();
    let turns = s["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (Some(t), None));
    let resumes = s
        .get("resumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|d| (None, Some(d)));
    for (turn, decisions) in turns.chain(resumes) {
        let result = match (turn, decisions) {
            (Some(turn), _) => {
                let input: Vec<Message> = serde_json::from_value(turn.clone()).unwrap();
                agent.invoke("t", input).await
            }
            (None, Some(d)) => {
                let decisions: Vec<Decision> = serde_json::from_value(d.clone()).unwrap();
                HumanInTheLoop::resume(&agent, "t", decisions)
                    .await
                    .map_err(|e| match e {
                        ResumeError::Agent(e) => e,
                        other => panic!("{}: {other}", s["name"]),
                    })
            }
            (None, None) => unreachable!(),
        };
        match result {
            Ok(out) => {
                if let Some(pending) = Interrupt::of(&out.state) {
                    interrupts.push(json!({
                        "action_requests": pending.action_requests,
                        "review_configs": pending.review_configs,
                    }));
                }
            }
            Err(e) => {
                error = Value::String(match e {
                    AgentError::Middleware(e) => e.message,
                    AgentError::Model { source, .. } => source.message,
                    other => other.to_string(),
                });
                break;
            }
        }
    }
    let state = agent.state("t").await.unwrap().unwrap_or_default();
    let mut out = BTreeMap::new();
    out.insert(
        "messages".to_owned(),
        state.messages.iter().map(norm).collect(),
    );
    out.insert("requests".to_owned(), requests(&main));
    out.insert("error".to_owned(), error);
    out.insert(
        "todos".to_owned(),
        state.values.get("todos").cloned().unwrap_or(Value::Null),
    );
    if !interrupts.is_empty() {
        out.insert("interrupts".to_owned(), Value::Array(interrupts));
    }
    for (name, m) in &named {
        out.insert(format!("requests_{name}"), requests(m));
    }
    out
}

#[tokio::test]
async fn every_scenario_matches_langchain() {
    let scenarios = load(&fixtures().join("scenarios.json"));
    let expected = expected();
    let mut failures = Vec::new();
    let list = scenarios["scenarios"].as_array().unwrap();
    for s in list {
        let name = s["name"].as_str().unwrap();
        let want = &expected["scenarios"][name];
        assert!(
            want.is_object(),
            "LangChain's outcome for {name} is missing: rerun scripts/compare/middleware_diff.py"
        );
        let got = run_keel(s).await;
        let mut keys: Vec<&String> = got.keys().collect();
        keys.extend(want.as_object().into_iter().flat_map(|o| o.keys()));
        keys.sort();
        keys.dedup();
        for key in keys {
            let value = got.get(key).unwrap_or(&Value::Null);
            if &want[key] != value {
                failures.push(format!(
                    "{name}.{key}:\n  langchain: {}\n  keel:      {}",
                    want[key], value
                ));
            }
        }
    }
    assert!(list.len() >= 43, "the scenario list shrank");
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn pii_detectors_and_strategies_match_langchain() {
    let expected = expected();
    let cases = expected["pii"].as_array().unwrap();
    assert!(cases.len() >= 50);
    let mut failures = Vec::new();
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let pii_type = case["pii_type"].as_str().unwrap();
        let detector = Detector::builtin(pii_type).unwrap();
        let values: Vec<String> = detector
            .find(pii_type, text)
            .into_iter()
            .map(|m| m.value)
            .collect();
        if json!(values) != case["values"] {
            failures.push(format!(
                "{pii_type} in {text:?}: langchain {} keel {values:?}",
                case["values"]
            ));
        }
        for (name, strategy) in [
            ("redact", Strategy::Redact),
            ("mask", Strategy::Mask),
            ("hash", Strategy::Hash),
            ("block", Strategy::Block),
        ] {
            let rule = Rule {
                pii_type: pii_type.into(),
                detector: detector.clone(),
                strategy,
            };
            let got = match rule.process_text(text) {
                Ok(Some((t, _))) => json!(t),
                Ok(None) => json!(text),
                Err(count) => json!({"error": rule.blocked_message(count)}),
            };
            if got != case[name] {
                failures.push(format!(
                    "{pii_type}/{name} on {text:?}: langchain {} keel {got}",
                    case[name]
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
