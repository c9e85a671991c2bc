"""The oracle's agent: LangChain's create_agent around a scripted chat model that answers
the way the model of Keel's scripted_server does (crates/keel-server/examples/support/
scripted.rs), so the differential suite (../diff_test.py) can run the same scenarios
against langgraph-api and `keel serve` and compare what comes back.

What the model answers, by the last message (the system prompt is not counted):
- after a tool result: `The tool said: <result>`;
- `echo ...`: a call of the `echo` tool with `{"query": <message>}`, id `call_<count>`;
- `slow ...`: 60 words;
- anything else: `You said: <first 12 words> (<count> messages)`.

Its middleware is LangChain's part of examples/keel.yaml (SummarizationMiddleware);
ORACLE_AGENT=review puts HumanInTheLoopMiddleware in front of `echo`, as
examples/keel-review.yaml does; ORACLE_PACE_MS is the time per streamed word (5 ms).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Iterator

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, SummarizationMiddleware
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool

PACE = float(os.environ.get("ORACLE_PACE_MS", "5")) / 1000.0
METADATA = {"model": "scripted", "provider": "scripted"}


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(
        part.get("text", "") if isinstance(part, dict) else str(part) for part in content
    )


def answer(messages: list[BaseMessage]) -> AIMessage:
    """The scripted answer to a request's messages."""
    messages = [m for m in messages if not isinstance(m, SystemMessage)]
    count = len(messages)
    last = messages[-1] if messages else None
    if isinstance(last, ToolMessage):
        return AIMessage(content=f"The tool said: {_text(last)}", response_metadata=dict(METADATA))
    said = _text(last) if last is not None else ""
    if said.startswith("echo"):
        return AIMessage(
            content="",
            tool_calls=[
                {"name": "echo", "args": {"query": said}, "id": f"call_{count}", "type": "tool_call"}
            ],
            response_metadata=dict(METADATA),
        )
    if said.startswith("slow"):
        return AIMessage(
            content=" ".join(f"w{i}" for i in range(1, 61)), response_metadata=dict(METADATA)
        )
    head = " ".join(said.split()[:12])
    return AIMessage(
        content=f"You said: {head} ({count} messages)", response_metadata=dict(METADATA)
    )


class ScriptedChatModel(BaseChatModel):
    """A chat model whose answers are a function of the request (see `answer`)."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedChatModel":
        # The answers name the tools themselves; binding changes nothing.
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Paced like the stream, so a run lasts as long whether or not tokens are streamed.
        message = answer(messages)
        time.sleep(PACE * (len(_text(message).split()) + 1))
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        message = answer(messages)
        text = _text(message)
        words = []
        rest = text
        while rest:
            cut = rest.find(" ")
            word, rest = (rest, "") if cut < 0 else (rest[: cut + 1], rest[cut + 1 :])
            words.append(word)
        for word in words:
            time.sleep(PACE)
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=word))
            if run_manager:
                run_manager.on_llm_new_token(word, chunk=chunk)
            yield chunk
        time.sleep(PACE)
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                tool_call_chunks=[
                    {
                        "name": call["name"],
                        "args": json.dumps(call["args"], separators=(",", ":")),
                        "id": call["id"],
                        "index": i,
                        "type": "tool_call_chunk",
                    }
                    for i, call in enumerate(message.tool_calls)
                ],
                response_metadata=dict(METADATA),
                chunk_position="last",
            )
        )


@tool
def echo(query: str) -> str:
    """Returns its arguments."""
    return json.dumps({"query": query}, separators=(",", ":"))


def _middleware() -> list[Any]:
    # The middleware of examples/keel.yaml and keel-review.yaml that LangChain has (Keel's
    # session memory has no counterpart); the scenarios stay below both triggers.
    if os.environ.get("ORACLE_AGENT") == "review":
        return [
            HumanInTheLoopMiddleware(
                interrupt_on={"echo": {"allowed_decisions": ["approve", "edit", "reject"]}},
                description_prefix="Tool execution requires approval",
            ),
            SummarizationMiddleware(
                ScriptedChatModel(), trigger=("tokens", 4000), keep=("messages", 20)
            ),
        ]
    return [
        SummarizationMiddleware(
            ScriptedChatModel(),
            trigger=[("tokens", 2000), ("messages", 60)],
            keep=("tokens", 800),
            trim_tokens_to_summarize=4000,
        )
    ]


agent = create_agent(
    ScriptedChatModel(),
    tools=[echo],
    system_prompt="You are a support assistant for Northwind's data platform.",
    middleware=_middleware(),
)
