//! The `summarization` entry of a stack file, with Keel's built-in entries: the
//! loader an application composes (`keel run` does).

use std::sync::Arc;

use keel_core::model::{ChatModel, ModelRegistry};
use keel_middleware::stack::{Stack, StackError, StackLoader};
use keel_summarization::stack::SummarizationEntry;
use keel_testkit::ScriptedModel;

fn any_model() -> Arc<dyn ModelRegistry> {
    let m: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new([]));
    Arc::new(move |_: &str| Some(m.clone()))
}

fn load(text: &str) -> Result<Stack, StackError> {
    StackLoader::builtin()
        .with(SummarizationEntry)
        .load_str(text)
}

/// The error's message ("loaded" when there is none, which no assertion expects).
fn err(text: &str) -> String {
    load(text).map_or_else(|e| e.to_string(), |_| "loaded".to_owned())
}

const FULL: &str = "\
model: main
system_prompt: Be brief.
middleware:
  - pii: {pii_type: email, strategy: redact, apply_to_input: true}
  - model_call_limit: {run_limit: 2, exit_behavior: end}
  - tool_call_limit: {tool_name: search, thread_limit: 5, run_limit: 3}
  - model_retry: {max_retries: 3, initial_delay: 0, retry_on: [server, timeout], on_failure: error}
  - tool_retry: {max_retries: 1, tools: [search], initial_delay: 0}
  - tool_error: {on_error: 'Error: {error}', tools: [search]}
  - model_fallback: [backup]
  - context_editing: {edits: [{clear_tool_uses: {trigger: 1000, keep: 1, exclude_tools: [search]}}]}
  - todo_list: {}
  - summarization:
      trigger:
        - type: tokens
          value: 4000
      keep:
        type: messages
        value: 20
";

#[test]
fn a_full_stack_loads_in_order_and_builds() {
    let stack = load(FULL).unwrap();
    assert_eq!(stack.model.as_deref(), Some("main"));
    assert_eq!(stack.system_prompt.as_deref(), Some("Be brief."));
    let names: Vec<&str> = stack.middleware.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "pii",
            "model_call_limit",
            "tool_call_limit",
            "model_retry",
            "tool_retry",
            "tool_error",
            "model_fallback",
            "context_editing",
            "todo_list",
            "summarization"
        ]
    );
    assert_eq!(stack.middleware[9].line, 13);
    let built = stack.middleware(any_model()).unwrap();
    let names: Vec<&str> = built.iter().map(|m| m.name()).collect();
    assert_eq!(names[0], "PIIMiddleware[email]");
    assert_eq!(names[2], "ToolCallLimitMiddleware[search]");
    assert_eq!(built.len(), 10);
    let agent = stack
        .agent_builder(Arc::new(ScriptedModel::new([])), any_model())
        .unwrap()
        .build();
    assert!(agent.is_ok());
}

#[test]
fn summarization_errors_keep_the_files_line_numbers() {
    let text = "\
system_prompt: hi
middleware:
  - model_call_limit: {run_limit: 2}
  - summarization:
      trigger:
        type: tokens
        value: -5
  - todo_list: {}
";
    let e = err(text);
    assert!(
        e.starts_with("middleware[1].summarization.trigger.value = -5 (line 7)"),
        "{e}"
    );
    let flow = "middleware:\n  - summarization: {trigerr: 5}\n";
    let e = err(flow);
    assert!(
        e.contains("trigerr (line 2)") && e.contains("did you mean `trigger`"),
        "{e}"
    );
}

#[test]
fn summarization_listed_is_enabled_unless_it_says_otherwise() {
    let on =
        load("middleware:\n  - summarization: {trigger: {type: messages, value: 50}}\n").unwrap();
    assert_eq!(on.middleware(any_model()).unwrap().len(), 1);
    let off = load(
        "middleware:\n  - summarization: {enabled: false, trigger: {type: messages, value: 50}}\n",
    )
    .unwrap();
    assert_eq!(off.middleware(any_model()).unwrap().len(), 0);
}

#[test]
fn summarization_loads_beside_recall() {
    let stack = load(
        "middleware:\n  - summarization: {trigger: [{type: tokens, value: 4000}]}\n  - recall: {max_excerpts: 3, max_tokens: 500, min_score: 0.25}\n",
    )
    .unwrap();
    let names: Vec<&str> = stack.middleware.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["summarization", "recall"]);
}

#[test]
fn without_the_entry_registered_summarization_is_an_unknown_key() {
    let e = Stack::from_yaml_str("middleware:\n  - summarization: {}\n")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "unknown key middleware[0].summarization (line 2)");
}
