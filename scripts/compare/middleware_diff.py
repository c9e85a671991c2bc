#!/usr/bin/env python3
"""Run keel-middleware's differential scenarios through LangChain 1.5's built-in middleware.

Reads `crates/keel-middleware/tests/fixtures/langchain/scenarios.json` (the scenarios
both sides run: a middleware stack in Keel's stack-file shape, the model's scripted
answers, the user's turns) and writes what LangChain's `create_agent` does with each:
the final messages, every request the model received, the `todos` state and the error
of a failed run, normalized so they compare with Keel's (no ids, text content). It also
runs LangChain's PII detectors and strategies over a list of texts.

The Rust test `crates/keel-middleware/tests/langchain_diff.rs` runs the same scenarios
through Keel and compares. `scripts/test.sh` runs this script into target/ on every CI
run (a fresh LangChain from PyPI) and points the test at its output; the committed
`expected.json` lets `cargo test` compare offline.

Usage: python scripts/compare/middleware_diff.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    HumanInTheLoopMiddleware,
    ModelCallLimitMiddleware,
    ModelFallbackMiddleware,
    ModelRetryMiddleware,
    PIIMiddleware,
    TodoListMiddleware,
    ToolCallLimitMiddleware,
    ToolRetryMiddleware,
)
from langchain.agents.middleware._redaction import (
    BUILTIN_DETECTORS,
    PIIDetectionError,
    apply_strategy,
)
from langchain.agents.middleware.tool_error import ToolErrorMiddleware
from langchain_core import exceptions as lcx
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool, ToolException
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "crates/keel-middleware/tests/fixtures/langchain"

ERRORS = {
    "server": lcx.ModelAPIError,
    "rate_limited": lcx.ModelRateLimitError,
    "timeout": lcx.ModelTimeoutError,
    "connection": lcx.ModelConnectionError,
    "authentication": lcx.ModelAuthenticationError,
    "invalid_request": lcx.ModelInvalidRequestError,
}


def to_lc(m: dict[str, Any]) -> BaseMessage:
    """A Keel wire-shape message as a LangChain message."""
    role = m["role"]
    if role == "user":
        return HumanMessage(content=m["content"])
    if role == "system":
        return SystemMessage(content=m["content"])
    if role == "tool":
        return ToolMessage(content=m["content"], tool_call_id=m["tool_call_id"], name=m.get("name"))
    calls = [
        {"id": c["id"], "name": c["function"]["name"], "args": json.loads(c["function"]["arguments"] or "{}"), "type": "tool_call"}
        for c in m.get("tool_calls", [])
    ]
    return AIMessage(content=m.get("content") or "", tool_calls=calls)


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(
        b if isinstance(b, str) else b.get("text", "") for b in content if isinstance(b, (str, dict))
    )


def norm(m: BaseMessage) -> dict[str, Any]:
    """The comparable part of a message."""
    if isinstance(m, HumanMessage):
        return {"role": "user", "content": text_of(m.content)}
    if isinstance(m, SystemMessage):
        return {"role": "system", "content": text_of(m.content)}
    if isinstance(m, ToolMessage):
        return {
            "role": "tool",
            "content": text_of(m.content),
            "tool_call_id": m.tool_call_id,
            "name": m.name,
            "status": m.status,
        }
    out: dict[str, Any] = {"role": "assistant", "content": text_of(m.content)}
    if m.tool_calls:
        out["tool_calls"] = [{"id": c["id"], "name": c["name"], "args": c["args"]} for c in m.tool_calls]
    return out


class ScriptedChat(BaseChatModel):
    """Answers from a list; records every request."""

    answers: list[Any]
    requests: list[Any]
    label: str = "scripted"

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        self.requests.append({"tools_bound": sorted(t.name if hasattr(t, "name") else t["name"] for t in tools)})
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        system = [text_of(m.content) for m in messages if isinstance(m, SystemMessage)]
        self.requests.append(
            {
                "system": system[0] if system else None,
                "messages": [norm(m) for m in messages if not isinstance(m, SystemMessage)],
            }
        )
        if not self.answers:
            raise lcx.ModelInvalidRequestError(f"no answer left for model call #{len(self.model_requests())}")
        answer = self.answers.pop(0)
        if "error" in answer:
            raise ERRORS[answer["error"]["kind"]](answer["error"]["message"])
        return ChatResult(generations=[ChatGeneration(message=to_lc(answer))])

    def model_requests(self) -> list[Any]:
        return [r for r in self.requests if "messages" in r]


def echo(**kwargs: Any) -> str:
    return json.dumps(kwargs, separators=(",", ":"), ensure_ascii=False)


def fail(**kwargs: Any) -> str:
    raise ToolException("boom")


TOOLS = [
    StructuredTool.from_function(func=echo, name="echo", description="echo", args_schema={"type": "object", "properties": {}, "additionalProperties": True}),
    StructuredTool.from_function(func=echo, name="search", description="search", args_schema={"type": "object", "properties": {}, "additionalProperties": True}),
    StructuredTool.from_function(func=fail, name="fail", description="fail", args_schema={"type": "object", "properties": {}, "additionalProperties": True}),
]


def build(entry: dict[str, Any], models: dict[str, ScriptedChat]) -> Any:
    [(name, args)] = entry.items()
    args = dict(args or {})
    if name == "model_call_limit":
        return ModelCallLimitMiddleware(**args)
    if name == "tool_call_limit":
        return ToolCallLimitMiddleware(**args)
    if name in ("model_retry", "tool_retry"):
        if "retry_on" in args:
            kinds = args.pop("retry_on")
            if name == "model_retry":
                args["retry_on"] = tuple(ERRORS[k] for k in kinds)
            else:
                args["retry_on"] = (ToolException,) if "failed" in kinds else ()
        cls = ModelRetryMiddleware if name == "model_retry" else ToolRetryMiddleware
        return cls(**args)
    if name == "tool_error":
        template = args.get("on_error", "Error: {error}")
        return ToolErrorMiddleware(
            on_error=lambda exc, req: template.replace("{tool}", req.tool_call["name"]).replace("{error}", str(exc)),
            tools=args.get("tools"),
        )
    if name == "model_fallback":
        names = args["models"] if isinstance(args, dict) and "models" in args else entry[name]
        return ModelFallbackMiddleware(*[models[n] for n in names])
    if name == "context_editing":
        edits = [ClearToolUsesEdit(**e["clear_tool_uses"]) for e in args.get("edits", [])]
        return ContextEditingMiddleware(edits=edits or None)
    if name == "pii":
        pii_type = args.pop("pii_type")
        return PIIMiddleware(pii_type, **args)
    if name == "todo_list":
        return TodoListMiddleware(**args)
    if name == "human_in_the_loop":
        return HumanInTheLoopMiddleware(**args)
    raise ValueError(f"no LangChain counterpart wired for {name}")


def run_scenario(s: dict[str, Any]) -> dict[str, Any]:
    main = ScriptedChat(answers=list(s["answers"]), requests=[])
    models = {n: ScriptedChat(answers=list(a), requests=[], label=n) for n, a in s.get("models", {}).items()}
    middleware = [build(e, models) for e in s["middleware"]]
    agent = create_agent(
        main,
        tools=TOOLS,
        system_prompt=s.get("system_prompt"),
        middleware=middleware,
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t"}}
    error = None
    state: dict[str, Any] = {}
    interrupts = []
    inputs = [{"messages": [to_lc(m) for m in turn]} for turn in s["turns"]]
    inputs += [Command(resume={"decisions": d}) for d in s.get("resumes", [])]
    for step in inputs:
        try:
            state = agent.invoke(step, config)
        except Exception as exc:  # noqa: BLE001 - the error text is the outcome
            error = str(exc)
            state = agent.get_state(config).values
            break
        for pending in state.get("__interrupt__", []):
            interrupts.append({k: pending.value[k] for k in ("action_requests", "review_configs")})
    out: dict[str, Any] = {
        "messages": [norm(m) for m in state.get("messages", [])],
        "requests": main.model_requests(),
        "error": error,
        "todos": state.get("todos"),
    }
    if interrupts:
        out["interrupts"] = interrupts
    for n, m in models.items():
        out[f"requests_{n}"] = m.model_requests()
    return out


def pii_cases(texts: list[str]) -> list[dict[str, Any]]:
    out = []
    for text in texts:
        for pii_type, detector in BUILTIN_DETECTORS.items():
            matches = detector(text)
            row: dict[str, Any] = {"text": text, "pii_type": pii_type, "values": [m["value"] for m in matches]}
            for strategy in ("redact", "mask", "hash", "block"):
                try:
                    row[strategy] = apply_strategy(text, matches, strategy)
                except PIIDetectionError as e:
                    row[strategy] = {"error": str(e)}
            out.append(row)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=FIXTURES / "expected.json")
    args = parser.parse_args()
    scenarios = json.loads((FIXTURES / "scenarios.json").read_text())
    result = {
        "langchain": version("langchain"),
        "scenarios": {s["name"]: run_scenario(s) for s in scenarios["scenarios"]},
        "pii": pii_cases(scenarios["pii_texts"]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"{len(result['scenarios'])} scenarios, {len(result['pii'])} PII cases -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
