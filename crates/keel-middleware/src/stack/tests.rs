use std::sync::Arc;

use keel_core::message::Message;
use keel_core::model::ChatModel;
use keel_testkit::ScriptedModel;

use super::*;

fn any_model() -> Arc<dyn ModelRegistry> {
    let m: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new([]));
    Arc::new(move |_: &str| Some(m.clone()))
}

/// The stack file's refusal of `text`, as its message (every entry's tests use it).
pub(crate) fn err(text: &str) -> String {
    match Stack::from_yaml_str(text) {
        Ok(_) => panic!("expected an error for:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn errors_name_key_value_range_and_line() {
    assert_eq!(
        err("middleware:\n  - pii: {pii_type: email, strategy: redakt}\n"),
        "middleware[0].pii.strategy = \"redakt\" (line 2): is not a known value; allowed: one of block, redact, mask, hash"
    );
    assert_eq!(
        err("middleware:\n  - pi: {pii_type: email}\n"),
        "unknown key middleware[0].pi (line 2) (did you mean `pii`?)"
    );
    assert_eq!(
        err("middleware:\n  - model_call_limit:\n      run_limt: 2\n"),
        "unknown key middleware[0].model_call_limit.run_limt (line 3) (did you mean `run_limit`?)"
    );
    assert_eq!(
        err("middleware:\n  - tool_call_limit: {thread_limit: 1, run_limit: 4}\n"),
        "middleware[0].tool_call_limit.run_limit = 4: exceeds thread_limit (1); allowed: a whole number in [0, 1] (at most thread_limit) (line 2)"
    );
    assert_eq!(
        err("middleware:\n  - model_call_limit: {run_limit: -1}\n"),
        "middleware[0].model_call_limit.run_limit = -1 (line 2): is out of range; allowed: a whole number in [0, 1000000000]"
    );
    assert!(err("modle: x\n").contains("unknown key modle (line 1) (did you mean `model`?)"));
    assert!(
        err("middleware: [{pii: {pii_type: email}, model_call_limit: {run_limit: 1}}]\n")
            .contains("one-key mapping")
    );
    assert!(err("middleware:\n  - pii: {pii_type: email\n").starts_with("invalid YAML"));
}

#[test]
fn unknown_models_are_named_with_their_line() {
    let stack =
        Stack::from_yaml_str("middleware:\n  - model_fallback:\n      models: [a, b]\n").unwrap();
    let none: Arc<dyn ModelRegistry> = Arc::new(|_: &str| None);
    let Err(e) = stack.middleware(none) else {
        panic!("an unknown model must fail")
    };
    let e = e.to_string();
    assert!(
        e.starts_with("middleware[0].model_fallback.models[0] = \"a\" (line 3): no such model"),
        "{e}"
    );
}

#[tokio::test]
async fn a_loaded_stack_behaves_like_the_rust_one() {
    let stack = Stack::from_yaml_str(
        "middleware:\n  - model_call_limit: {run_limit: 1, exit_behavior: end}\n",
    )
    .unwrap();
    let model = Arc::new(ScriptedModel::new([crate::test_support::call(
        "c1",
        "echo",
        serde_json::json!({}),
    )]));
    let agent = stack
        .agent_builder(model.clone(), any_model())
        .unwrap()
        .tool(keel_testkit::FnTool::echo("echo"))
        .build()
        .unwrap();
    let out = agent.invoke("t", vec![Message::human("go")]).await.unwrap();
    assert_eq!(
        out.last_message().unwrap().text(),
        "Model call limits exceeded: run limit (1/1)"
    );
}

#[test]
fn the_model_driven_entries_load_and_resolve_their_models() {
    let text = "\
middleware:
  - llm_tool_selector: {model: small, max_tools: 2, always_include: [echo], on_parsing_failure: all}
  - llm_tool_emulator: {model: small, tools: [get_weather]}
  - model_router:
      instructions: Pick the model.
      classifier: small
      choices:
        fast: {model: small, criteria: small talk}
        deep: {model: large, criteria: hard questions}
  - model_refusal: {}
";
    let stack = Stack::from_yaml_str(text).unwrap();
    let built = stack.middleware(any_model()).unwrap();
    let names: Vec<&str> = built.iter().map(|m| m.name()).collect();
    assert_eq!(
        names,
        [
            "LLMToolSelectorMiddleware",
            "LLMToolEmulator",
            "ModelRouterMiddleware",
            "ModelRefusalMiddleware"
        ]
    );
    let only_small: Arc<dyn ModelRegistry> = {
        let m: Arc<dyn ChatModel> = Arc::new(ScriptedModel::new([]));
        Arc::new(move |n: &str| (n == "small").then(|| m.clone()))
    };
    let Err(e) = stack.middleware(only_small) else {
        panic!("`large` is unknown")
    };
    assert_eq!(
        e.to_string(),
        "middleware[2].model_router.choices.deep.model = \"large\" (line 9): no such model; the application resolves model names (for `keel run`, every name is the scripted model)"
    );
    assert!(
        err("middleware:\n  - llm_tool_emulator: {tools: [x]}\n")
            .contains("llm_tool_emulator.model = (missing): is required")
    );
}

#[test]
fn human_in_the_loop_entries_load() {
    let stack = Stack::from_yaml_str(
        "middleware:\n  - human_in_the_loop:\n      interrupt_on:\n        send_email: true\n        read_file: false\n        delete_file: {allowed_decisions: [approve, reject]}\n",
    )
    .unwrap();
    assert_eq!(
        stack.middleware(any_model()).unwrap()[0].name(),
        "HumanInTheLoopMiddleware"
    );
    let e = err(
        "middleware:\n  - human_in_the_loop:\n      interrupt_on: {x: {allowed_decisions: [maybe]}}\n",
    );
    assert!(
        e.contains("\"maybe\" is not a decision") && e.contains("(line 3)"),
        "{e}"
    );
    let e = err(
        "middleware:\n  - human_in_the_loop: {interrupt_on: {x: true}, interrupt_mode: sometimes}\n",
    );
    assert!(
        e.contains("interrupt_mode") && e.contains("one of batched, per_call"),
        "{e}"
    );
    assert!(
        Stack::from_yaml_str(
            "middleware:\n  - human_in_the_loop: {interrupt_on: {x: true}, interrupt_mode: per_call}\n"
        )
        .is_ok()
    );
}

#[test]
fn builder_resolves_the_files_model() {
    let stack = Stack::from_yaml_str("system_prompt: hi\nmodel: main\n").unwrap();
    assert!(stack.builder(any_model()).unwrap().build().is_ok());
    let none: Arc<dyn ModelRegistry> = Arc::new(|_: &str| None);
    let Err(e) = stack.builder(none) else {
        panic!("`main` is unknown")
    };
    assert!(
        e.to_string()
            .starts_with("model = \"main\" (line 2): no such model"),
        "{e}"
    );
    let Err(e) = Stack::from_yaml_str("middleware: []\n")
        .unwrap()
        .builder(any_model())
    else {
        panic!("no model key")
    };
    assert!(e.to_string().contains("the stack names no model"), "{e}");
}

#[test]
fn a_model_mapping_names_its_model_and_is_kept_for_the_application() {
    let stack = Stack::from_yaml_str(
        "model: {provider: anthropic, model: claude-sonnet-4-5, cache_ttl: 1h}\n",
    )
    .unwrap();
    assert_eq!(stack.model.as_deref(), Some("claude-sonnet-4-5"));
    assert!(matches!(
        stack.model_spec.as_ref().map(|n| &n.value),
        Some(keel_config::yaml::Yaml::Map(entries)) if entries.len() == 3
    ));
    assert!(
        Stack::from_yaml_str("model: main\n")
            .unwrap()
            .model_spec
            .is_none()
    );
    let Err(e) = Stack::from_yaml_str("model: {provider: anthropic}\n") else {
        panic!("no model name")
    };
    assert!(e.to_string().contains("names no model"), "{e}");
}

#[test]
fn recall_entries_load_and_name_bad_values() {
    // With summarization: keel-summarization's tests/stack.rs.
    assert_eq!(
        err("middleware:\n  - recall: {max_excerpts: 0}\n"),
        "middleware[0].recall.max_excerpts = 0: is out of range; allowed: a whole number in [1, 50] (line 2)"
    );
    assert!(
        err("middleware:\n  - recall: {min_score: 2}\n").contains(
            "recall.min_score = 2: is out of range; allowed: a number in [0, 1] (line 2)"
        )
    );
    assert!(
        err("middleware:\n  - recall: {max_excerpt: 3}\n")
            .contains("unknown key middleware[0].recall.max_excerpt (line 3)")
            || err("middleware:\n  - recall: {max_excerpt: 3}\n")
                .contains("unknown key middleware[0].recall.max_excerpt")
    );
}

#[test]
fn names_are_the_builtin_registry_in_order() {
    assert_eq!(StackLoader::builtin().names(), NAMES);
    for name in NAMES {
        // Every built-in entry reads its own settings: an unknown one is refused by it.
        let e = err(&format!("middleware:\n  - {name}:\n      zzz_unknown: 1\n"));
        assert!(
            e.contains(&format!("middleware[0].{name}.zzz_unknown")),
            "{name}: {e}"
        );
    }
}
