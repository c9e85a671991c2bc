#!/usr/bin/env python3
"""Generate the LangChain parity fixtures for keel-summarization.

Runs the real `langchain.agents.middleware.SummarizationMiddleware` (LangChain 1.5.x,
approximate token counter, a fake summary model) over deterministic generated
conversations and records, per trigger/keep configuration, whether it triggered, where
it cut, which message ids it kept and summarized, and whether its kept window contains
a tool result whose call was summarized away (an orphan).

Output: one JSON file per conversation under
`crates/keel-summarization/tests/fixtures/langchain/`, each holding the messages in
Keel's wire shape and a list of cases (configuration + LangChain's outcome). The Rust
test `crates/keel-summarization/tests/langchain_parity.rs` replays every case.

Usage (from the repository root; see scripts/compare/run.sh for the virtualenv):

    target/pyenv-langchain/bin/python scripts/compare/gen_parity_fixtures.py [--out DIR] [--seed N]

The fixtures are committed; rerun only to regenerate them on purpose (the output is
byte-identical for a given seed and LangChain version).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import convgen  # noqa: E402

from importlib.metadata import version  # noqa: E402

from langchain.agents.middleware.summarization import SummarizationMiddleware  # noqa: E402
from langchain_core.language_models.fake_chat_models import FakeListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.messages.utils import count_tokens_approximately  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "crates/keel-summarization/tests/fixtures/langchain"
FAKE_SUMMARY = "FAKE SUMMARY: the user asked for work; tools ran; results were noted."


def lc_tuple(spec: dict[str, Any]) -> tuple[str, Any]:
    return (spec["kind"], spec["value"])


def run_langchain(messages: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, Any]:
    """Run LangChain's middleware once and describe its decision."""
    lc = convgen.to_langchain(messages)
    ids = [m["id"] for m in messages]
    profile = {"max_input_tokens": config["max_input_tokens"]} if config.get("max_input_tokens") else None
    model = FakeListChatModel(responses=[FAKE_SUMMARY], profile=profile)
    mw = SummarizationMiddleware(
        model,
        trigger=[lc_tuple(t) for t in config["trigger"]],
        keep=lc_tuple(config["keep"]),
    )
    total = mw.token_counter(lc)
    triggered = mw._should_summarize(lc, total)
    cutoff = mw._determine_cutoff_index(lc) if triggered else None

    # The public hook, run for real: its output is the ground truth; the private calls
    # above only name the cut, and must agree with it.
    update = mw.before_model({"messages": list(lc)}, None)
    if update is None:
        assert not triggered or cutoff is not None and cutoff <= 0, "before_model passed through but a cut was chosen"
        summarized_ids: list[str] = []
        kept_ids = ids
    else:
        out = update["messages"]
        preserved = out[2:]
        kept_ids = [m.id for m in preserved]
        # The summary text is LangChain's business (it may be its "too long to
        # summarize" placeholder, LangChain #39261); parity is about the split.
        assert out[1].content.startswith("Here is a summary of the conversation to date:")
        assert cutoff is not None and kept_ids == ids[cutoff:], "before_model disagrees with _determine_cutoff_index"
        summarized_ids = ids[:cutoff]

    orphan_tool_ids: list[str] = []
    if update is not None:
        issued: set[str] = set()
        for m in lc[cutoff:]:
            if isinstance(m, AIMessage):
                issued.update(tc["id"] for tc in m.tool_calls)
            elif isinstance(m, ToolMessage) and m.tool_call_id not in issued:
                orphan_tool_ids.append(m.id)

    return {
        "config": config,
        "langchain_total_tokens": total,
        "triggered": triggered,
        "cutoff_index": cutoff,
        "summarized": update is not None,
        "summarized_ids": summarized_ids,
        "kept_ids": kept_ids,
        "kept_starts_with_tool": update is not None and isinstance(lc[cutoff], ToolMessage),
        "orphan_tool_ids": orphan_tool_ids,
        "langchain_orphans": bool(orphan_tool_ids),
    }


def strictly_paired(messages: list[dict[str, Any]]) -> bool:
    """True when every AI message's results directly follow it (one tool run, any
    order) and answer all its calls: what OpenAI and Anthropic accept. The
    split-parallel shapes are not; they are the inputs on which LangChain's cut can
    keep a result whose call it summarized."""
    pending: set[str] | None = None
    for m in messages:
        if m["role"] == "tool":
            if pending is None or m["tool_call_id"] not in pending:
                return False
            pending.discard(m["tool_call_id"])
            continue
        if pending:
            return False
        pending = {c["id"] for c in m.get("tool_calls", [])} or None
    return not pending


def suffix_sums(tokens: list[int]) -> list[int]:
    out = [0] * (len(tokens) + 1)
    for i in range(len(tokens) - 1, -1, -1):
        out[i] = out[i + 1] + tokens[i]
    return out


def pick_configs(rng: random.Random, messages: list[dict[str, Any]], tokens: list[int], k: int,
                 scaled_total: int) -> list[dict[str, Any]]:
    """`k` trigger/keep configurations aimed at interesting cuts: inside tool runs,
    exactly on count boundaries, nothing fitting, and just under the trigger."""
    n = len(messages)
    total = sum(tokens)
    sums = suffix_sums(tokens)
    tool_idx = [i for i, m in enumerate(messages) if m["role"] == "tool" and i > 0]
    configs = []
    for _ in range(k):
        # --- keep
        keep_kind = rng.choice(["messages", "messages", "tokens", "tokens", "fraction"])
        max_input = None
        if keep_kind == "messages":
            if tool_idx and rng.random() < 0.6:
                keep_val = n - rng.choice(tool_idx)
            else:
                keep_val = rng.randint(1, max(1, n // 2))
            keep = {"kind": "messages", "value": max(1, keep_val)}
        elif keep_kind == "tokens":
            r = rng.random()
            if r < 0.35 and n > 1:
                # Exactly a suffix sum: the `<=` boundary of the search.
                j = rng.choice(tool_idx) if tool_idx and rng.random() < 0.6 else rng.randint(1, n - 1)
                keep_val = sums[j]
            elif r < 0.45:
                keep_val = max(1, tokens[-1] - 1)  # nothing fits
            else:
                keep_val = max(1, int(total * rng.uniform(0.05, 0.6)))
            keep = {"kind": "tokens", "value": keep_val}
        else:
            max_input = rng.choice([4096, 8192, 16000, 32768, 128000])
            keep = {"kind": "fraction", "value": round(rng.uniform(0.02, 0.3), 3)}
        # --- trigger
        trig_kind = rng.choice(["tokens", "tokens", "messages", "both", "fraction"])
        trigger = []
        if trig_kind in ("tokens", "both"):
            r = rng.random()
            val = total if r < 0.15 else total + 1 if r < 0.25 else max(1, int(total * rng.uniform(0.3, 1.0)))
            if scaled_total > total + 1 and rng.random() < 0.6:
                # Between the raw and the usage-scaled count: only scaling can fire it.
                val = rng.randint(total + 1, scaled_total)
            trigger.append({"kind": "tokens", "value": val})
        if trig_kind in ("messages", "both"):
            r = rng.random()
            val = n if r < 0.15 else n + 1 if r < 0.25 else rng.randint(max(1, n // 3), n)
            trigger.append({"kind": "messages", "value": val})
        if trig_kind == "fraction":
            if max_input is None:
                max_input = rng.choice([4096, 8192, 16000, 32768, 128000])
            trigger.append({"kind": "fraction", "value": round(min(1.0, max(0.01, total / max_input * rng.uniform(0.4, 1.1))), 3)})
        configs.append({"trigger": trigger, "keep": keep, "max_input_tokens": max_input})
    return configs


def conversations(rng: random.Random) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(name, description, messages) for every fixture conversation."""
    out = []
    g = convgen.conversation

    def add(name: str, desc: str, msgs: list[dict[str, Any]]) -> None:
        out.append((name, desc, msgs))

    for i in range(8):
        add(f"plain_{i:02d}", "human/AI/tool turns, string content",
            g(rng, f"p{i}", turns=rng.randint(2, 8), max_parallel=1, loop_max=3))
    for i in range(8):
        add(f"parallel_{i:02d}", "parallel tool calls (up to 5 per AI message)",
            g(rng, f"q{i}", turns=rng.randint(2, 6), max_parallel=5, loop_max=4))
    for i in range(6):
        add(f"long_outputs_{i:02d}", "long tool outputs (1.5k-12k chars) among short ones",
            g(rng, f"l{i}", turns=rng.randint(2, 5), max_parallel=3, long_rate=0.4, long_chars=(1500, 12000)))
    for i in range(6):
        add(f"list_content_{i:02d}", "list content: text parts, Anthropic-style AI text parts with calls, images, other blocks",
            g(rng, f"c{i}", turns=rng.randint(2, 6), parts_rate=0.6, extra_blocks=True))
    for i in range(5):
        add(f"unicode_{i:02d}", "CJK, accents and astral emoji in content and tool arguments",
            g(rng, f"u{i}", turns=rng.randint(2, 6), unicode=True, parts_rate=0.2))
    for i in range(6):
        add(f"split_parallel_{i:02d}", "calls split over consecutive AI messages and deferred results (LangChain #38352 shapes)",
            g(rng, f"s{i}", turns=rng.randint(2, 6), max_parallel=3, split_parallel_rate=0.7))
    for i in range(3):
        add(f"degenerate_task_{i:02d}", "[task, AI(many calls), results...]",
            convgen.degenerate_task(rng, f"d{i}", n_calls=rng.randint(3, 8), long_chars=rng.choice([0, 2000])))
    for i in range(5):
        msgs = g(rng, f"r{i}", turns=rng.randint(3, 8), max_parallel=3, long_rate=0.1)
        tokens = [count_tokens_approximately([m]) for m in convgen.to_langchain(msgs)]
        # The last conversation mixes providers, which turns LangChain's scaling off.
        # "openai" is not the fake model's provider, so LangChain's second trigger path
        # (the last AI message's reported total_tokens >= threshold, taken only when the
        # message's provider is the middleware model's) stays off: these cases pin down
        # the scaled count alone.
        convgen.add_usage(rng, msgs, tokens, ["openai", "anthropic"] if i == 4 else ["openai"])
        add(f"usage_scaling_{i:02d}", "AI messages carry provider-reported usage: the trigger count is scaled "
            "(LangChain's use_usage_metadata_scaling); mixed providers disable it", msgs)
    for i in range(4):
        add(f"long_thread_{i:02d}", "a longer thread (30+ turns) with every feature mixed",
            g(rng, f"t{i}", turns=rng.randint(30, 40), max_parallel=3, long_rate=0.05, unicode=True,
              parts_rate=0.1, split_parallel_rate=0.1))
    return out


def dump(fixture: dict[str, Any]) -> str:
    """JSON with one message and one case per line: small, and diffs stay readable."""
    def line(v: Any) -> str:
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))

    out = ["{"]
    keys = list(fixture)
    for i, key in enumerate(keys):
        v = fixture[key]
        comma = "," if i + 1 < len(keys) else ""
        if key in ("messages", "cases"):
            body = ",\n".join("  " + line(x) for x in v)
            out.append(f" {line(key)}: [\n{body}\n ]{comma}")
        else:
            out.append(f" {line(key)}: {line(v)}{comma}")
    out.append("}")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=20260512)
    ap.add_argument("--configs-per-conversation", type=int, default=4)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.json"):
        old.unlink()
    n_conv = n_cases = n_summarized = n_orphans = 0
    for name, desc, msgs in conversations(rng):
        n_conv += 1
        lc = convgen.to_langchain(msgs)
        tokens = [count_tokens_approximately([m]) for m in lc]
        scaled_total = count_tokens_approximately(lc, use_usage_metadata_scaling=True)
        # Shapes where LangChain can orphan a result get more cuts aimed at them.
        k = args.configs_per_conversation * (3 if name.startswith(("split_parallel", "usage_scaling")) else 1)
        cases = [run_langchain(msgs, c) for c in pick_configs(rng, msgs, tokens, k, scaled_total)]
        fixture = {
            "generator": "scripts/compare/gen_parity_fixtures.py",
            "seed": args.seed,
            "langchain_version": version("langchain"),
            "langchain_core_version": version("langchain-core"),
            "name": name,
            "description": desc,
            "input_strictly_paired": strictly_paired(msgs),
            "messages": msgs,
            "approx_tokens": tokens,
            "approx_total_usage_scaled": scaled_total,
            "cases": cases,
        }
        (args.out / f"{name}.json").write_text(dump(fixture), encoding="utf-8")
        n_cases += len(cases)
        n_summarized += sum(c["summarized"] for c in cases)
        n_orphans += sum(c["langchain_orphans"] for c in cases)
    print(f"wrote {n_conv} conversations, {n_cases} cases "
          f"({n_summarized} summarized, {n_orphans} with a LangChain orphan) to {args.out}")


if __name__ == "__main__":
    main()
