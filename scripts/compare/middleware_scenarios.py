#!/usr/bin/env python3
"""Write keel-middleware's differential scenarios (tests/fixtures/langchain/scenarios.json).

Each scenario is a middleware stack in Keel's stack-file shape (LangChain's class names
in snake case with its constructor arguments), the model's scripted answers (Keel's
wire shape; `{"error": {...}}` for a failed call), the user's turns, and optionally a
system prompt and named fallback models. `middleware_diff.py` runs them through
LangChain, `tests/langchain_diff.rs` through Keel. Edit here, rerun both.

Usage: python3 scripts/compare/middleware_scenarios.py
"""

import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "crates/keel-middleware/tests/fixtures/langchain/scenarios.json"


def ai(text="", calls=()):
    m = {"role": "assistant", "content": text}
    if calls:
        m["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a, sort_keys=True)}}
            for i, n, a in calls
        ]
    return m


def user(t):
    return {"role": "user", "content": t}


def tool(i, n, c):
    return {"role": "tool", "content": c, "tool_call_id": i, "name": n}


def err(kind, msg):
    return {"error": {"kind": kind, "message": msg}}


def echo_call(cid, **a):
    return (cid, "echo", a)


S = []


def sc(name, mw, answers, turns, **kw):
    d = {"name": name, "middleware": mw, "answers": answers, "turns": turns}
    d.update(kw)
    S.append(d)


go = [[user("go")]]

# ModelCallLimit
loop = [ai(calls=[echo_call(f"c{i}", i=i)]) for i in range(4)]
sc("model_call_limit_run_end", [{"model_call_limit": {"run_limit": 2, "exit_behavior": "end"}}], loop, go)
sc("model_call_limit_thread_across_turns", [{"model_call_limit": {"thread_limit": 2}}],
   [ai("one"), ai("two"), ai("three")], [[user("a")], [user("b")], [user("c")]])
sc("model_call_limit_both_limits", [{"model_call_limit": {"thread_limit": 1, "run_limit": 1}}], loop, go)
sc("model_call_limit_error", [{"model_call_limit": {"run_limit": 1, "exit_behavior": "error"}}], loop, go)
sc("model_call_limit_zero", [{"model_call_limit": {"run_limit": 0}}], [ai("never")], go)
sc("model_call_limit_run_resets_per_turn", [{"model_call_limit": {"run_limit": 1}}],
   [ai(calls=[echo_call("a")]), ai("two"), ai("three")], [[user("a")], [user("b")]])

# ToolCallLimit
sc("tool_call_limit_continue_one_tool", [{"tool_call_limit": {"tool_name": "search", "run_limit": 1}}],
   [ai(calls=[("a", "search", {"q": 1}), ("b", "search", {"q": 2}), ("c", "echo", {"x": 1})]), ai("done")], go)
sc("tool_call_limit_end_global", [{"tool_call_limit": {"thread_limit": 2, "exit_behavior": "end"}}],
   [ai(calls=[echo_call("a")]), ai(calls=[echo_call("b"), ("c", "search", {})]), ai("never")], go)
sc("tool_call_limit_error", [{"tool_call_limit": {"run_limit": 1, "exit_behavior": "error"}}],
   [ai(calls=[echo_call("a"), echo_call("b")])], go)
sc("tool_call_limit_thread_across_turns", [{"tool_call_limit": {"thread_limit": 1}}],
   [ai(calls=[echo_call("a")]), ai("one"), ai(calls=[echo_call("b")]), ai("two")], [[user("x")], [user("y")]])
sc("tool_call_limit_two_instances",
   [{"tool_call_limit": {"run_limit": 3}}, {"tool_call_limit": {"tool_name": "search", "run_limit": 1}}],
   [ai(calls=[("a", "search", {}), ("b", "search", {}), echo_call("c")]), ai(calls=[echo_call("d")]), ai("done")], go)
sc("tool_call_limit_end_run_limit_named",
   [{"tool_call_limit": {"tool_name": "echo", "run_limit": 1, "exit_behavior": "end"}}],
   [ai(calls=[echo_call("a"), echo_call("b")])], go)

# ModelRetry (no waiting: initial_delay 0)
sc("model_retry_recovers", [{"model_retry": {"max_retries": 2, "initial_delay": 0}}],
   [err("server", "502"), err("rate_limited", "slow down"), ai("fine")], go)
sc("model_retry_exhausted_continue", [{"model_retry": {"max_retries": 2, "initial_delay": 0}}],
   [err("server", "down")] * 3, go)
sc("model_retry_zero_retries", [{"model_retry": {"max_retries": 0, "initial_delay": 0}}], [err("timeout", "late")], go)
sc("model_retry_on_failure_error", [{"model_retry": {"max_retries": 1, "initial_delay": 0, "on_failure": "error"}}],
   [err("server", "a"), err("server", "b")], go)
sc("model_retry_not_retryable", [{"model_retry": {"max_retries": 3, "initial_delay": 0}}],
   [err("authentication", "bad key"), ai("never")], go)
sc("model_retry_retry_on", [{"model_retry": {"max_retries": 3, "initial_delay": 0, "retry_on": ["timeout"]}}],
   [err("timeout", "t1"), err("server", "s1"), ai("never")], go)

# ToolRetry, ToolError
sc("tool_retry_exhausted", [{"tool_retry": {"max_retries": 2, "initial_delay": 0}}],
   [ai(calls=[("c1", "fail", {})]), ai("done")], go)
sc("tool_retry_zero_retries", [{"tool_retry": {"max_retries": 0, "initial_delay": 0}}],
   [ai(calls=[("c1", "fail", {}), echo_call("c2", k="v")]), ai("done")], go)
sc("tool_error_template", [{"tool_error": {"on_error": "{tool} broke: {error}. Try another way."}}],
   [ai(calls=[("c1", "fail", {})]), ai("ok")], go)

# ModelFallback
sc("model_fallback_third_answers", [{"model_fallback": {"models": ["backup", "third"]}}], [err("server", "primary down")], go,
   models={"backup": [err("server", "backup down")], "third": [ai("from third")]})
sc("model_fallback_all_fail", [{"model_fallback": {"models": ["backup"]}}], [err("server", "primary down")], go,
   models={"backup": [err("timeout", "backup slow")]})

# ContextEditing (ClearToolUses): transient, so the requests are what differ
hist = [user("start")]
for i, t in enumerate(["search", "echo", "search", "echo"]):
    hist.append(ai(calls=[(f"h{i}", t, {"q": i})]))
    hist.append(tool(f"h{i}", t, "result %d: " % i + "x" * 300))
hist.append(user("next"))
clear = lambda **kw: [{"context_editing": {"edits": [{"clear_tool_uses": kw}]}}]  # noqa: E731
sc("context_editing_keep_one", clear(trigger=10, keep=1), [ai("ok")], [hist])
sc("context_editing_exclude_and_inputs",
   clear(trigger=10, keep=0, exclude_tools=["echo"], clear_tool_inputs=True, placeholder="[gone]"), [ai("ok")], [hist])
sc("context_editing_clear_at_least", clear(trigger=10, keep=0, clear_at_least=120), [ai("ok")], [hist])
sc("context_editing_under_trigger", clear(trigger=100000), [ai("ok")], [hist])
sc("context_editing_during_run", clear(trigger=50, keep=1),
   [ai(calls=[echo_call("r1", blob="y" * 200)]), ai(calls=[echo_call("r2", blob="z" * 200)]), ai("done")], go)

# PII
sc("pii_input_redact_email", [{"pii": {"pii_type": "email", "strategy": "redact"}}], [ai("ok")],
   [[user("old a@b.io"), ai("noted"), user("I am ada@example.com, cc bob@corp.org")]])
sc("pii_input_mask_card", [{"pii": {"pii_type": "credit_card", "strategy": "mask"}}], [ai("ok")],
   [[user("card 4111-1111-1111-1111 and 4532015112830366")]])
sc("pii_input_hash_ip", [{"pii": {"pii_type": "ip", "strategy": "hash"}}], [ai("ok")],
   [[user("from 10.0.0.1 to 192.168.1.20, not 300.1.1.1")]])
sc("pii_block_email", [{"pii": {"pii_type": "email", "strategy": "block"}}], [ai("never")], [[user("mail ada@example.com")]])
sc("pii_tool_results_url",
   [{"pii": {"pii_type": "url", "strategy": "redact", "apply_to_input": False, "apply_to_tool_results": True}}],
   [ai(calls=[echo_call("c1", link="see https://example.com/a?b=1 or www.rust-lang.org")]), ai("done")],
   [[user("find https://keep.me/x")]])
sc("pii_output_mac_mask",
   [{"pii": {"pii_type": "mac_address", "strategy": "mask", "apply_to_input": False, "apply_to_output": True}}],
   [ai("your NIC is 00:1A:2b:3c:4D:5e")], go)
sc("pii_custom_regex", [{"pii": {"pii_type": "api_key", "detector": "sk-[a-zA-Z0-9]{8,}", "strategy": "mask"}}],
   [ai("ok")], [[user("key sk-abcdef123456 and sk-short")]])
sc("pii_two_types_stacked", [{"pii": {"pii_type": "email"}}, {"pii": {"pii_type": "ip", "strategy": "mask"}}],
   [ai("ok")], [[user("ada@example.com at 172.16.0.9")]])

# TodoList
plan = {"todos": [{"content": "Read the logs", "status": "in_progress"}, {"content": "Write the fix", "status": "pending"}]}
sc("todo_list_write", [{"todo_list": {}}], [ai(calls=[("t1", "write_todos", plan)]), ai("working")],
   [[user("fix it")]], system_prompt="Be brief.")
sc("todo_list_no_system_prompt", [{"todo_list": {}}],
   [ai(calls=[("t1", "write_todos", {"todos": [{"content": "it's \"quoted\"", "status": "completed"}]})]), ai("done")], go)
sc("todo_list_parallel_rejected", [{"todo_list": {}}],
   [ai(calls=[("a", "write_todos", plan), ("b", "write_todos", plan)]), ai("sorry")], go)
sc("todo_list_rewrite", [{"todo_list": {}}],
   [ai(calls=[("t1", "write_todos", plan)]),
    ai(calls=[("t2", "write_todos", {"todos": [{"content": "Read the logs", "status": "completed"}]})]), ai("done")], go)

# HumanInTheLoop (batched): pause, then resume with decisions (edits differ on purpose)
gated = ai(calls=[("s1", "search", {"q": "rust"}), echo_call("e1", x=1), ("f1", "fail", {"path": "/tmp/a"})])
hitl = [{"human_in_the_loop": {"interrupt_on": {"search": True, "fail": {"allowed_decisions": ["approve", "reject", "respond"]}}}}]
sc("human_in_the_loop_reject_and_respond", hitl, [gated, ai("done")], go,
   resumes=[[{"type": "reject", "message": "not now"}, {"type": "respond", "message": "the file is fine"}]])
sc("human_in_the_loop_approve_and_reject_without_reason", hitl, [gated, ai("done")], go,
   resumes=[[{"type": "approve"}, {"type": "reject"}]])
sc("human_in_the_loop_two_pauses", hitl,
   [ai(calls=[("s1", "search", {"q": 1})]), ai(calls=[("s2", "search", {"q": 2})]), ai("done")], go,
   resumes=[[{"type": "approve"}], [{"type": "respond", "message": "cached"}]])

TEXTS = [
    "plain text, nothing here",
    "ada@example.com and bob.smith+tag@mail.co.uk",
    "x@y",
    "card 4111 1111 1111 1111, 4111-1111-1111-1112, 4532015112830366",
    "ips 10.0.0.1 192.168.001.1 255.255.255.255 256.1.1.1 1.2.3",
    "mac 00:1A:2b:3c:4D:5e and 00-1a-2b-3c-4d-5e",
    "see https://example.com/a?b=1, http://x y, www.rust-lang.org, docs.rs/regex, foo.bar",
    "mixed: ada@example.com at 10.1.2.3 via https://ex.io/p (card 5555555555554444)",
    "unicode: café ada@exämple.com 中文 https://例子.测试/路径",
    "http:///nohost and https://ok.example",
]

OUT.parent.mkdir(parents=True, exist_ok=True)
OUT.write_text(json.dumps({"scenarios": S, "pii_texts": TEXTS}, indent=1, ensure_ascii=False) + "\n")
print(f"{len(S)} scenarios, {len(TEXTS)} PII texts -> {OUT}")
