"""Deterministic generator of agent conversations, shared by the LangChain parity
fixtures and the Keel-vs-LangChain benchmark.

Conversations are produced in Keel's wire shape (the OpenAI chat shape plus an `id`,
see `keel_core::message::Message`), which is also what the Rust side reads, and are
converted to LangChain message objects only inside the Python scripts. Everything
depends on a `random.Random` seeded by the caller, so a seed always yields the same
bytes.
"""

from __future__ import annotations

import json
import random
from typing import Any

WORDS = (
    "the agent reads config file module test build error fix patch deploy service "
    "request latency cache thread summary token budget window history message tool "
    "result output parse schema value field index query table row column user goal "
    "plan step next done failed retry timeout server client branch commit review "
    "migration database lock queue worker shard replica metric alert dashboard"
).split()

# Non-ASCII text exercises "characters, not bytes" in the approximate counter:
# Python's len() counts code points, so CJK, accents and astral emoji count once each.
UNICODE_BITS = ["上下文", "压缩", "摘要", "naïve", "café", "Grüße", "日本語のテキスト", "🚀", "✅", "𝔘𝔫𝔦"]

TOOLS = ["read_file", "grep", "run_tests", "web_search", "list_dir", "write_file", "bash"]


def sentence(rng: random.Random, n_min: int, n_max: int, unicode: bool = False) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(n_min, n_max))]
    if unicode and rng.random() < 0.5:
        words.insert(rng.randrange(len(words) + 1), rng.choice(UNICODE_BITS))
    text = " ".join(words)
    return text[:1].upper() + text[1:] + rng.choice([".", "?", "!", "."])


def paragraph(rng: random.Random, sentences: int, unicode: bool = False) -> str:
    return " ".join(sentence(rng, 4, 16, unicode) for _ in range(sentences))


def long_output(rng: random.Random, chars: int, unicode: bool = False) -> str:
    """A tool output of about `chars` characters: log lines, code or a JSON blob."""
    kind = rng.choice(["log", "code", "json"])
    lines: list[str] = []
    size = 0
    i = 0
    while size < chars:
        i += 1
        if kind == "log":
            line = f"{i:05d} [{rng.choice(['INFO', 'WARN', 'ERROR'])}] {sentence(rng, 3, 12, unicode)}"
        elif kind == "code":
            line = f"    {rng.choice(WORDS)}_{i} = compute({rng.choice(WORDS)!r}, {rng.randint(0, 999)})  # {rng.choice(WORDS)}"
        else:
            line = json.dumps({"row": i, "name": rng.choice(WORDS), "ok": rng.random() < 0.8}, ensure_ascii=False)
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def call_id(rng: random.Random) -> str:
    # Varied lengths: the tool_call_id length is part of the approximate count.
    return "call_" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rng.randint(6, 24)))


def tool_args(rng: random.Random, name: str, unicode: bool) -> dict[str, Any]:
    if name in ("read_file", "write_file"):
        args: dict[str, Any] = {"path": f"/workspace/{rng.choice(WORDS)}/{rng.choice(WORDS)}.py"}
        if name == "write_file":
            args["content"] = sentence(rng, 5, 20, unicode)
        return args
    if name == "grep":
        return {"pattern": rng.choice(["fn main", "it's", 'say "hi"', "a\\b", "TODO"]), "max": rng.randint(1, 50), "case": rng.random() < 0.5}
    if name == "run_tests":
        return {"filter": None if rng.random() < 0.5 else rng.choice(WORDS), "jobs": rng.randint(1, 8), "ratio": 0.5}
    if name == "web_search":
        return {"query": sentence(rng, 2, 8, unicode), "sites": [rng.choice(WORDS) + ".org" for _ in range(rng.randint(0, 3))]}
    if name == "list_dir":
        return {}
    return {"command": f"ls -la {rng.choice(WORDS)} && echo 'done'\n", "env": {"RUST_LOG": "debug", "N": rng.randint(0, 9)}}


class Conv:
    """Builds one conversation, handing out stable ids."""

    def __init__(self, rng: random.Random, prefix: str) -> None:
        self.rng = rng
        self.prefix = prefix
        self.messages: list[dict[str, Any]] = []

    def _id(self) -> str:
        return f"{self.prefix}-{len(self.messages):05d}"

    def human(self, unicode: bool = False, parts: bool = False, extra_blocks: bool = False) -> None:
        rng = self.rng
        text = paragraph(rng, rng.randint(1, 4), unicode)
        content: Any = text
        if parts:
            content = [{"type": "text", "text": text}]
            if rng.random() < 0.5:
                content.append({"type": "text", "text": sentence(rng, 3, 10, unicode)})
            if extra_blocks:
                content.append({"type": "image_url", "image_url": {"url": f"https://example.invalid/{rng.choice(WORDS)}.png"}})
                if rng.random() < 0.5:
                    content.append({"type": "input_audio", "input_audio": {"data": "UklGRg" * rng.randint(1, 20), "format": "wav"}})
        msg: dict[str, Any] = {"role": "user", "content": content, "id": self._id()}
        if rng.random() < 0.1:
            msg["name"] = rng.choice(["alice", "bob", "用户"])
        self.messages.append(msg)

    def ai_text(self, unicode: bool = False, parts: bool = False) -> None:
        text = paragraph(self.rng, self.rng.randint(1, 6), unicode)
        content: Any = [{"type": "text", "text": text}] if parts else text
        self.messages.append({"role": "assistant", "content": content, "id": self._id()})

    def ai_calls(self, n_calls: int, unicode: bool = False, parts: bool = False) -> list[tuple[str, str]]:
        rng = self.rng
        calls = []
        wire = []
        for _ in range(n_calls):
            name = rng.choice(TOOLS)
            cid = call_id(rng)
            calls.append((cid, name))
            wire.append({
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(tool_args(rng, name, unicode), ensure_ascii=False)},
            })
        content: Any = None
        if parts:
            # Anthropic style: text in a content list alongside the calls.
            content = [{"type": "text", "text": sentence(rng, 3, 12, unicode)}]
        elif rng.random() < 0.4:
            content = sentence(rng, 3, 12, unicode)
        self.messages.append({"role": "assistant", "content": content, "tool_calls": wire, "id": self._id()})
        return calls

    def tool_result(self, cid: str, name: str, long_chars: int = 0, unicode: bool = False) -> None:
        rng = self.rng
        text = long_output(rng, long_chars, unicode) if long_chars else paragraph(rng, rng.randint(1, 3), unicode)
        msg: dict[str, Any] = {"role": "tool", "content": text, "tool_call_id": cid, "id": self._id()}
        if rng.random() < 0.6:
            msg["name"] = name
        if rng.random() < 0.08:
            msg["status"] = "error"
            msg["content"] = f"Error: {sentence(rng, 3, 8)}"
        self.messages.append(msg)


def conversation(rng: random.Random, prefix: str, *, turns: int, max_parallel: int = 3,
                 loop_max: int = 4, long_rate: float = 0.1, long_chars: tuple[int, int] = (1500, 8000),
                 unicode: bool = False, parts_rate: float = 0.0, extra_blocks: bool = False,
                 split_parallel_rate: float = 0.0) -> list[dict[str, Any]]:
    """A multi-turn agent conversation: each turn is a human message, a tool loop of
    0..loop_max steps (each an AI message with 1..max_parallel calls and their results)
    and a final AI answer.

    With `split_parallel_rate`, some steps issue their calls from two consecutive AI
    messages whose results then follow together, or deliver one result after a later
    step's results: orderings some providers produce, and the ones where a cut that
    only looks for an *intersecting* AI message leaves a result without its call.
    """
    conv = Conv(rng, prefix)
    for _ in range(turns):
        conv.human(unicode, rng.random() < parts_rate, extra_blocks)
        deferred: list[tuple[str, str]] = []
        for _ in range(rng.randint(0, loop_max)):
            n = rng.randint(1, max_parallel)
            parts = rng.random() < parts_rate
            if rng.random() < split_parallel_rate:
                if rng.random() < 0.5:
                    calls = conv.ai_calls(n, unicode, parts) + conv.ai_calls(rng.randint(1, 2), unicode)
                else:
                    calls = conv.ai_calls(max(n, 2), unicode, parts)
                    deferred.append(calls.pop())
            else:
                calls = conv.ai_calls(n, unicode, parts)
            for cid, name in calls:
                long = rng.randint(*long_chars) if rng.random() < long_rate else 0
                conv.tool_result(cid, name, long, unicode)
            if deferred and rng.random() < 0.7:
                for cid, name in deferred:
                    conv.tool_result(cid, name, 0, unicode)
                deferred = []
        for cid, name in deferred:
            conv.tool_result(cid, name, 0, unicode)
        conv.ai_text(unicode, rng.random() < parts_rate)
    return conv.messages


def degenerate_task(rng: random.Random, prefix: str, n_calls: int, long_chars: int) -> list[dict[str, Any]]:
    """`[task, AI(many calls), results...]`: the shape where a cut inside the results
    moves back to the AI message and summarizes only the user's task."""
    conv = Conv(rng, prefix)
    conv.human()
    calls = conv.ai_calls(n_calls)
    for cid, name in calls:
        conv.tool_result(cid, name, long_chars)
    return conv.messages


def add_usage(rng: random.Random, msgs: list[dict[str, Any]], per_message: list[int],
              providers: list[str]) -> None:
    """Attach provider-reported usage to some AI messages, as a real provider would:
    `total_tokens` = the history so far (off from the approximate count by a random
    factor, so LangChain's usage scaling matters) plus the answer. `per_message` are the
    approximate counts, for realism only."""
    running = 0
    for m, count in zip(msgs, per_message):
        running += count
        if m["role"] != "assistant":
            continue
        m["response_metadata"] = {"model_provider": rng.choice(providers)}
        if rng.random() < 0.7:
            output = count
            prompt = int((running - count) * rng.uniform(0.8, 1.6))
            m["usage"] = {"input_tokens": prompt, "output_tokens": output, "total_tokens": prompt + output}


# --- conversion to LangChain -------------------------------------------------------

def to_langchain(msgs: list[dict[str, Any]]) -> list[Any]:
    """Keel wire messages -> LangChain message objects (same ids, content, calls)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = []
    for m in msgs:
        role = m["role"]
        content = m.get("content")
        if content is None:
            content = ""
        kw: dict[str, Any] = {"id": m["id"]}
        if m.get("name"):
            kw["name"] = m["name"]
        if role == "user":
            out.append(HumanMessage(content=content, **kw))
        elif role == "system":
            out.append(SystemMessage(content=content, **kw))
        elif role == "assistant":
            calls = [
                {"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"] or "{}"), "id": c["id"]}
                for c in m.get("tool_calls", [])
            ]
            if m.get("usage"):
                kw["usage_metadata"] = dict(m["usage"])
            if m.get("response_metadata"):
                kw["response_metadata"] = dict(m["response_metadata"])
            out.append(AIMessage(content=content, tool_calls=calls, **kw))
        elif role == "tool":
            out.append(ToolMessage(content=content, tool_call_id=m["tool_call_id"], status=m.get("status", "success"), **kw))
        else:
            raise ValueError(f"unknown role {role!r} in message {m['id']}")
    return out
