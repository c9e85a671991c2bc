"""Drives keel serve with the official Python client, `langgraph-sdk` (PyPI).

Run by scripts/serve-sdk-test.sh, which starts the scripted server (examples/keel.yaml's
middleware around keel-testkit's ScriptedModel) and passes its URLs:

    python python_sdk_test.py OPEN_URL AUTH_URL

Prints one line per test and ends with `N passed, N failed`; exits non-zero on failure.
"""

import asyncio
import sys
import traceback

import httpx
from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError, NotFoundError

OPEN_URL, AUTH_URL = sys.argv[1], sys.argv[2]
# `keel serve --config examples/keel.yaml` itself (the offline model), when given.
SERVE_URL = sys.argv[3] if len(sys.argv) > 3 else None
# `keel serve --config examples/keel-review.yaml` (human in the loop on `echo`), when given.
REVIEW_URL = sys.argv[4] if len(sys.argv) > 4 else None
ALICE, BOB = "alice-key-1", "bob-key-22"

LOG = "\n".join(
    f"  10:{i:02}:00 WARN ingest: object store timeout after 30s (bucket ingest-eu, partition {i})"
    for i in range(12)
)


def client(url=OPEN_URL, key=None):
    return get_client(url=url, api_key=key)


async def collect(stream):
    return [part async for part in stream]


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


@test
async def assistants_are_listed_and_found():
    c = client()
    found = await c.assistants.search()
    assert [a["graph_id"] for a in found] == ["agent"], found
    by_id = await c.assistants.get(found[0]["assistant_id"])
    assert by_id["graph_id"] == "agent"
    info = await c.http.get("/info")
    assert "version" in info and "flags" in info, info
    ok = await c.http.get("/ok")
    assert ok == {"ok": True}, ok


@test
async def every_stream_mode_has_its_events():
    c = client()
    expected = {
        "values": {"values"},
        "updates": {"updates"},
        "messages": {"messages/metadata", "messages/partial", "messages/complete"},
        "messages-tuple": {"messages"},
        "custom": set(),
        "events": {"events"},
    }
    for mode, names in expected.items():
        thread = await c.threads.create()
        parts = await collect(
            c.runs.stream(
                thread["thread_id"],
                "agent",
                input={"messages": [{"role": "user", "content": f"echo hello in {mode}"}]},
                stream_mode=mode,
            )
        )
        events = [p.event for p in parts]
        assert events[0] == "metadata", events
        assert events[-1] == "end", events
        middle = set(events[1:-1])
        if mode == "custom":
            # Session memory writes nothing on a short thread; nothing else may leak in.
            assert middle <= {"custom"}, events
        else:
            assert middle == names, (mode, events)
        if mode == "messages-tuple":
            chunk, meta = parts[1].data
            assert chunk["type"] == "AIMessageChunk" and meta["langgraph_node"] == "model", parts[1]
            tool = [p.data[0] for p in parts if p.event == "messages" and p.data[0]["type"] == "tool"]
            assert tool and tool[0]["name"] == "echo", parts
            text = "".join(p.data[0]["content"] for p in parts if p.event == "messages" and p.data[0]["type"] == "AIMessageChunk")
            assert text.startswith("The tool said:"), text
        if mode == "events":
            kinds = {p.data["event"] for p in parts if p.event == "events"}
            assert {"on_chain_start", "on_chat_model_stream", "on_chain_end"} <= kinds, kinds
        if mode == "values":
            last = parts[-2].data["messages"]
            assert [m["type"] for m in last] == ["human", "ai", "tool", "ai"], last


@test
async def twelve_long_turns_compact_and_state_keeps_every_message():
    await twelve_long_turns(client())


@test
async def keel_serve_with_the_offline_model_compacts_twelve_long_turns():
    if SERVE_URL is None:
        raise AssertionError("no keel serve URL given")
    c = client(SERVE_URL)
    found = await c.assistants.search()
    assert [a["graph_id"] for a in found] == ["agent"], found
    await twelve_long_turns(c)


async def twelve_long_turns(c):
    thread = await c.threads.create(metadata={"test": "long"})
    seen_modes = set()
    custom = []
    for turn in range(12):
        text = f"Turn {turn}: the nightly ingest failed again on node {turn}. Log excerpt:\n{LOG}"
        async for part in c.runs.stream(
            thread["thread_id"],
            "agent",
            input={"messages": [{"role": "user", "content": text}]},
            stream_mode=["values", "updates", "messages-tuple", "custom"],
        ):
            seen_modes.add(part.event)
            if part.event == "custom":
                custom.append(part.data)
    assert {"values", "updates", "messages", "custom"} <= seen_modes, seen_modes
    kinds = [e.get("type") for e in custom]
    assert "context_compacted" in kinds, kinds
    # examples/keel.yaml writes summaries ahead (precompute_at): a compaction either used
    # one (`precomputed`), reused the cache, or blocked and was announced first.
    compacted = [e for e in custom if e.get("type") == "context_compacted"]
    assert any(e.get("precomputed") for e in compacted), compacted
    for i, e in enumerate(custom):
        if e.get("type") == "context_compacted" and e.get("source") == "model" and not e.get("precomputed"):
            assert "context_compacting" in kinds[:i], (i, kinds)
    state = await c.threads.get_state(thread["thread_id"])
    messages = state["values"]["messages"]
    humans = [m for m in messages if m["type"] == "human"]
    assert len(humans) == 12, len(humans)
    assert humans[0]["content"].startswith("Turn 0:"), humans[0]
    assert len(messages) == 24, len(messages)
    history = await c.threads.get_history(thread["thread_id"], limit=5)
    assert len(history) == 5
    steps = [h["metadata"]["step"] for h in history]
    assert steps == sorted(steps, reverse=True), steps
    assert history[0]["checkpoint"]["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
    older = await c.threads.get_history(thread["thread_id"], limit=2, before=history[-1]["checkpoint"])
    assert [h["metadata"]["step"] for h in older] == [steps[-1] - 1, steps[-1] - 2], older
    found = await c.threads.search(metadata={"test": "long"})
    assert [t["thread_id"] for t in found] == [thread["thread_id"]], found


async def wait_for_human(c, thread_id: str, text: str) -> None:
    """Waits until the thread's state holds a human message with `text`."""
    for _ in range(250):
        state = await c.threads.get_state(thread_id)
        messages = (state.get("values") or {}).get("messages") or []
        if any(m["type"] == "human" and m["content"] == text for m in messages):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the input {text!r} never reached the thread's state")


@test
async def cancel_stops_a_run_and_keeps_its_checkpoints():
    c = client()
    thread = await c.threads.create()
    run = await c.runs.create(thread["thread_id"], "agent", input={"messages": [{"role": "user", "content": "slow please"}]})
    # "running" is set before the run writes its input; cancel once the input
    # checkpoint exists, or there is nothing for the run to keep.
    await wait_for_human(c, thread["thread_id"], "slow please")
    await c.runs.cancel(thread["thread_id"], run["run_id"], wait=True)
    after = await c.runs.get(thread["thread_id"], run["run_id"])
    assert after["status"] == "interrupted", after
    state = await c.threads.get_state(thread["thread_id"])
    kinds = [m["type"] for m in state["values"]["messages"]]
    assert kinds == ["human"], kinds
    runs = await c.runs.list(thread["thread_id"])
    assert [r["run_id"] for r in runs] == [run["run_id"]], runs
    # The thread takes new runs afterwards.
    result = await c.runs.wait(thread["thread_id"], "agent", input={"messages": [{"role": "user", "content": "hello again"}]})
    assert result["messages"][-1]["content"].startswith("You said: hello again"), result


@test
async def a_client_that_leaves_cancels_with_on_disconnect_cancel():
    c = client()
    thread = await c.threads.create()
    tid = thread["thread_id"]
    run_id = None
    async for part in c.runs.stream(
        tid, "agent", input={"messages": [{"role": "user", "content": "slow leaving"}]},
        stream_mode="messages-tuple", on_disconnect="cancel",
    ):
        if part.event == "metadata":
            run_id = part.data["run_id"]
        if part.event == "messages":
            break
    status = None
    for _ in range(100):
        status = (await c.runs.get(tid, run_id))["status"]
        if status not in ("pending", "running"):
            break
        await asyncio.sleep(0.02)
    assert status == "interrupted", status
    # langgraph-api leaves a thread whose run was cancelled (action interrupt) interrupted.
    assert (await c.threads.get(tid))["status"] == "interrupted"
    # Without on_disconnect the run goes on, and the thread is busy meanwhile.
    async for part in c.runs.stream(tid, "agent", input={"messages": [{"role": "user", "content": "slow staying"}]}):
        if part.event == "metadata":
            run_id = part.data["run_id"]
            break
    assert (await c.threads.get(tid))["status"] == "busy"
    await c.runs.join(tid, run_id)
    assert (await c.runs.get(tid, run_id))["status"] == "success"
    assert (await c.threads.get(tid))["status"] == "idle"


@test
async def last_event_id_resumes_where_the_stream_stopped():
    c = client()
    thread = await c.threads.create()
    run = await c.runs.create(
        thread["thread_id"], "agent",
        input={"messages": [{"role": "user", "content": "slow stream"}]},
        stream_mode=["messages-tuple", "values"],
    )
    first = []
    async for part in c.runs.join_stream(thread["thread_id"], run["run_id"]):
        first.append(part)
        if len(first) == 8:
            break
    rest = await collect(c.runs.join_stream(thread["thread_id"], run["run_id"], last_event_id=first[-1].id))
    ids = [int(p.id) for p in first + rest]
    assert ids == list(range(len(ids))), ids
    assert rest[-1].event == "end", rest[-1]
    full = await collect(c.runs.join_stream(thread["thread_id"], run["run_id"]))
    assert [(p.event, p.data) for p in full] == [(p.event, p.data) for p in first + rest]
    text = "".join(p.data[0]["content"] for p in full if p.event == "messages")
    assert text.split() == [f"w{i}" for i in range(1, 61)], text


@test
async def multitask_strategies():
    c = client()
    thread = await c.threads.create()
    tid = thread["thread_id"]
    slow = await c.runs.create(tid, "agent", input={"messages": [{"role": "user", "content": "slow one"}]})
    try:
        await c.runs.create(tid, "agent", input={"messages": [{"role": "user", "content": "rejected"}]}, multitask_strategy="reject")
        raise AssertionError("reject accepted a run on a busy thread")
    except ConflictError:
        pass
    queued = await c.runs.create(tid, "agent", input={"messages": [{"role": "user", "content": "queued"}]}, multitask_strategy="enqueue")
    assert queued["status"] == "pending", queued
    await c.runs.join(tid, queued["run_id"])
    assert (await c.runs.get(tid, slow["run_id"]))["status"] == "success"
    texts = [m["content"] for m in (await c.threads.get_state(tid))["values"]["messages"] if m["type"] == "human"]
    assert texts == ["slow one", "queued"], texts

    # rollback: the running run is cancelled, deleted, and its input undone.
    slow2 = await c.runs.create(tid, "agent", input={"messages": [{"role": "user", "content": "slow two"}]})
    newer = await c.runs.create(tid, "agent", input={"messages": [{"role": "user", "content": "instead"}]}, multitask_strategy="rollback")
    await c.runs.join(tid, newer["run_id"])
    try:
        await c.runs.get(tid, slow2["run_id"])
        raise AssertionError("a rolled-back run is still listed")
    except NotFoundError:
        pass
    texts = [m["content"] for m in (await c.threads.get_state(tid))["values"]["messages"] if m["type"] == "human"]
    assert texts == ["slow one", "queued", "instead"], texts

    # interrupt: the running run stops and keeps its checkpoints.
    slow3 = await c.runs.create(tid, "agent", input={"messages": [{"role": "user", "content": "slow three"}]})
    await wait_for_human(c, tid, "slow three")
    last = await c.runs.create(tid, "agent", input={"messages": [{"role": "user", "content": "after interrupt"}]}, multitask_strategy="interrupt")
    await c.runs.join(tid, last["run_id"])
    assert (await c.runs.get(tid, slow3["run_id"]))["status"] == "interrupted"
    texts = [m["content"] for m in (await c.threads.get_state(tid))["values"]["messages"] if m["type"] == "human"]
    assert texts[-2:] == ["slow three", "after interrupt"], texts


@test
async def bad_input_gets_the_error_shape():
    async with httpx.AsyncClient(base_url=OPEN_URL) as h:
        thread = (await h.post("/threads", json={})).json()
        tid = thread["thread_id"]
        cases = [
            ("/threads/" + tid + "/runs", {"assistant_id": "agent", "input": {"messages": 3}}, 422),
            ("/threads/" + tid + "/runs", {"assistant_id": "agent", "input": {"messages": [{"type": "robot"}]}}, 422),
            ("/threads/" + tid + "/runs", {"assistant_id": "agent", "stream_mode": "tools"}, 422),
            # langgraph-api: 422 for an assistant_id neither a UUID nor a graph, 404 for
            # a UUID of no assistant.
            ("/threads/" + tid + "/runs", {"assistant_id": "nope"}, 422),
            ("/threads/" + tid + "/runs", {"assistant_id": "5f1a0c39-9bd5-4c3e-9d55-0c8cc2d6a7e1"}, 404),
            ("/threads/" + tid + "/runs", {"assistant_id": "agent", "command": {"resume": "yes"}}, 400),
            ("/threads/missing/runs", {"assistant_id": "agent"}, 404),
            ("/threads", {"thread_id": tid}, 409),
        ]
        for path, body, status in cases:
            r = await h.post(path, json=body)
            assert r.status_code == status, (path, body, r.status_code, r.text)
            assert isinstance(r.json().get("detail"), str), r.text
        r = await h.post("/threads", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422 and "detail" in r.json(), r.text
        r = await h.post("/threads", content=b"x" * (3 * 1024 * 1024), headers={"content-type": "application/json"})
        assert r.status_code == 413 and "detail" in r.json(), (r.status_code, r.text)
        r = await h.get(f"/threads/{tid}/runs/nope/stream", headers={"Last-Event-ID": "abc"})
        assert r.status_code == 404, r.text


@test
async def threads_are_scoped_to_their_owner():
    alice, bob = client(AUTH_URL, ALICE), client(AUTH_URL, BOB)
    thread = await alice.threads.create(metadata={"owner": "alice"})
    tid = thread["thread_id"]
    await alice.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "alice's secret"}]})
    assert (await alice.threads.get(tid))["thread_id"] == tid
    for call in (
        lambda: bob.threads.get(tid),
        lambda: bob.threads.get_state(tid),
        lambda: bob.threads.get_history(tid),
        lambda: bob.runs.list(tid),
        lambda: bob.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "hi"}]}),
        lambda: bob.threads.delete(tid),
    ):
        try:
            await call()
            raise AssertionError("bob reached alice's thread")
        except NotFoundError:
            pass
        except httpx.HTTPStatusError as e:  # runs.wait raises httpx's own error
            assert e.response.status_code == 404, e
    assert await bob.threads.search() == []
    assert [t["thread_id"] for t in await alice.threads.search()] == [tid]
    async with httpx.AsyncClient(base_url=AUTH_URL) as h:
        assert (await h.post("/threads/search", json={})).status_code == 401
        assert (await h.post("/threads/search", json={}, headers={"x-api-key": "wrong-key-123"})).status_code == 401
        assert (await h.get("/ok")).status_code == 200
    state = await alice.threads.get_state(tid)
    assert state["values"]["messages"][0]["content"] == "alice's secret"


@test
async def store_items_are_long_term_memory_per_owner():
    alice, bob = client(AUTH_URL, ALICE), client(AUTH_URL, BOB)
    await alice.store.put_item(["prefs", "u1"], key="theme", value={"color": "teal", "size": 2})
    await alice.store.put_item(["prefs", "u1", "deep"], key="font", value={"size": 3})
    await alice.store.put_item(["notes"], key="n1", value={"size": 2}, ttl=60)
    item = await alice.store.get_item(["prefs", "u1"], key="theme")
    assert item["namespace"] == ["prefs", "u1"] and item["key"] == "theme", item
    assert item["value"] == {"color": "teal", "size": 2}, item
    assert item["created_at"] and item["updated_at"], item
    assert await alice.store.get_item(["prefs", "u1"], key="missing") is None

    found = await alice.store.search_items(["prefs"])
    assert [i["key"] for i in found["items"]] == ["theme", "font"], found
    found = await alice.store.search_items(["prefs"], filter={"size": 2}, query="ignored without an index")
    assert [i["key"] for i in found["items"]] == ["theme"], found
    found = await alice.store.search_items([], filter={"size": {"$gte": 2}}, limit=2, offset=1)
    assert [i["key"] for i in found["items"]] == ["font", "n1"], found

    listed = await alice.store.list_namespaces()
    assert listed["namespaces"] == [["notes"], ["prefs", "u1"], ["prefs", "u1", "deep"]], listed
    listed = await alice.store.list_namespaces(prefix=["prefs"], max_depth=2)
    assert listed["namespaces"] == [["prefs", "u1"]], listed

    # Bob has a store of his own: nothing of alice's is visible or reachable.
    assert await bob.store.get_item(["prefs", "u1"], key="theme") is None
    assert (await bob.store.search_items([]))["items"] == []
    assert (await bob.store.list_namespaces())["namespaces"] == []
    await bob.store.delete_item(["prefs", "u1"], key="theme")
    assert (await alice.store.get_item(["prefs", "u1"], key="theme"))["value"]["color"] == "teal"

    await alice.store.delete_item(["prefs", "u1"], key="theme")
    assert await alice.store.get_item(["prefs", "u1"], key="theme") is None

    # Bad input is refused with the field named.
    try:
        await alice.store.put_item(["prefs"], key="", value={})
        raise AssertionError("an empty key was accepted")
    except httpx.HTTPStatusError as e:
        assert e.response.status_code == 422 and "key" in e.response.json()["detail"], e.response.text


@test
async def stateless_runs_and_deletion():
    c = client()
    result = await c.runs.wait(None, "agent", input={"messages": [{"role": "user", "content": "no thread"}]})
    assert result["messages"][-1]["content"].startswith("You said: no thread"), result
    thread = await c.threads.create()
    await c.threads.delete(thread["thread_id"])
    try:
        await c.threads.get(thread["thread_id"])
        raise AssertionError("a deleted thread is still there")
    except NotFoundError:
        pass


@test
async def an_interrupt_is_streamed_and_a_command_resumes_it():
    if REVIEW_URL is None:
        raise AssertionError("no keel serve URL with human_in_the_loop given")
    c = client(REVIEW_URL)
    thread = await c.threads.create()
    tid = thread["thread_id"]
    parts = await collect(c.runs.stream(
        tid, "agent",
        input={"messages": [{"role": "user", "content": "echo hello"}]},
        stream_mode=["updates", "values"],
    ))
    interrupts = [p.data["__interrupt__"] for p in parts
                  if p.event == "updates" and "__interrupt__" in p.data]
    assert len(interrupts) == 1, [(p.event, p.data) for p in parts]
    [pending] = interrupts[0]
    request = pending["value"]["action_requests"][0]
    assert request["name"] == "echo", pending
    assert request["args"] == {"query": "echo hello"}, pending
    assert request["description"].startswith("Tool execution requires approval"), pending
    assert pending["value"]["review_configs"][0]["allowed_decisions"] == ["approve", "edit", "reject"]
    assert (await c.threads.get(tid))["status"] == "interrupted"
    state = await c.threads.get_state(tid)
    assert state["next"] == ["HumanInTheLoopMiddleware.after_model"], state["next"]
    assert state["tasks"][0]["interrupts"][0]["id"] == pending["id"], state["tasks"]
    # No tool ran: the AI message's call has no result yet.
    assert state["values"]["messages"][-1]["tool_calls"][0]["name"] == "echo"

    # A wrong answer is refused before a run starts.
    try:
        await c.runs.create(tid, "agent", command={"resume": {"decisions": [{"type": "respond", "message": "x"}]}})
        raise AssertionError("a decision the review config forbids was accepted")
    except httpx.HTTPStatusError as e:
        assert e.response.status_code == 422 and "not allowed" in e.response.text, e.response.text

    # Edit, with the SDK's Command shape; the edited call runs.
    parts = await collect(c.runs.stream(
        tid, "agent",
        command={"resume": {"decisions": [{"type": "edit", "edited_action": {"name": "echo", "args": {"query": "edited"}}}]}},
        stream_mode="updates",
    ))
    assert not [p for p in parts if p.event == "error"], parts
    state = await c.threads.get_state(tid)
    messages = state["values"]["messages"]
    tool = [m for m in messages if m["type"] == "tool"]
    assert tool and "edited" in tool[-1]["content"], messages
    assert messages[-1]["type"] == "ai" and "edited" in messages[-1]["content"], messages[-1]
    assert "__interrupt__" not in state["values"] and state["next"] == []
    assert (await c.threads.get(tid))["status"] == "idle"

    # Reject through runs.wait: its answer carries the interrupt, then the rejection.
    values = await c.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "echo again"}]})
    assert values["__interrupt__"][0]["value"]["action_requests"][0]["args"] == {"query": "echo again"}, values
    values = await c.runs.wait(tid, "agent", command={"resume": {"decisions": [{"type": "reject", "message": "not today"}]}})
    rejected = [m for m in values["messages"] if m["type"] == "tool"][-1]
    assert rejected["status"] == "error" and "not today" in rejected["content"], rejected

    # The same from the JS-style map keyed by interrupt id is covered by the Rust tests;
    # nothing is pending now, so a resume is a 400.
    try:
        await c.runs.create(tid, "agent", command={"resume": {"decisions": [{"type": "approve"}]}})
        raise AssertionError("a resume with nothing pending was accepted")
    except httpx.HTTPStatusError as e:
        assert e.response.status_code == 400 and "no pending interrupt" in e.response.text, e.response.text


@test
async def threads_stream_starts_a_run_and_streams_its_messages():
    # langgraph-sdk's thread-centric surface: POST /threads/{id}/commands (run.start)
    # and POST /threads/{id}/stream/events, on a thread the server creates on first use.
    c = client()
    async with c.threads.stream(assistant_id="agent") as thread:
        started = await thread.run.start(input={"messages": [{"role": "user", "content": "hi"}]})
        assert set(started) == {"run_id"}, started

        # One projection at a time: two opened together race in the SDK (the shared
        # stream it replaces can be closed before its headers arrive, and its `ready`
        # then never resolves).
        streams = await asyncio.wait_for(collect(thread.messages), 60)
        texts = [await m.text for m in streams]
        assert texts and texts[-1].startswith("You said: hi"), texts
        output = await thread.output.with_timeout(60)
        assert [m["type"] for m in output["messages"]] == ["human", "ai"], output
        assert output["messages"][-1]["content"] == texts[-1], output
        tid = thread.thread_id
    # The same thread through the REST API.
    assert (await c.threads.get(tid))["status"] == "idle"
    assert len((await c.threads.get_state(tid))["values"]["messages"]) == 2


@test
async def threads_stream_surfaces_an_interrupt_and_run_respond_resumes_it():
    if REVIEW_URL is None:
        raise AssertionError("no keel serve URL with human_in_the_loop given")
    c = client(REVIEW_URL)
    async with c.threads.stream(assistant_id="agent") as thread:
        await thread.run.start(input={"messages": [{"role": "user", "content": "echo hello"}]})
        for _ in range(300):
            if thread.interrupted:
                break
            await asyncio.sleep(0.1)
        assert thread.interrupted, "no input.requested arrived"
        [pending] = thread.interrupts
        assert pending["namespace"] == [], pending
        assert pending["value"]["action_requests"][0]["args"] == {"query": "echo hello"}, pending
        state = await c.threads.get_state(thread.thread_id)
        assert state["tasks"][0]["interrupts"][0]["id"] == pending["interrupt_id"], state["tasks"]
        answered = await thread.run.respond({"decisions": [{"type": "approve"}]})
        assert answered == {}, answered
        output = await thread.output.with_timeout(60)
        tool = [m for m in output["messages"] if m["type"] == "tool"]
        assert tool and "echo hello" in tool[-1]["content"], output["messages"]
        assert output["messages"][-1]["type"] == "ai", output["messages"][-1]


@test
async def agent_chat_ui_requests_work():
    """What agent-chat-ui's useStream sends, in the SDK's own request shapes."""
    if REVIEW_URL is None:
        raise AssertionError("no keel serve URL with human_in_the_loop given")
    c = client(REVIEW_URL)
    ui = dict(stream_mode=["values", "messages-tuple", "updates", "custom"],
              stream_subgraphs=True, stream_resumable=True, on_disconnect="continue",
              context={}, config={}, metadata={})

    async def head(tid):
        [latest, *_] = await c.threads.get_history(tid, limit=10)
        cp = latest["checkpoint"]
        return {"checkpoint_id": cp["checkpoint_id"], "checkpoint_ns": "", "checkpoint_map": None}

    async def status(tid, want):
        # The thread's status is written just after the run's stream ends.
        for _ in range(50):
            got = (await c.threads.get(tid))["status"]
            if got == want:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"thread status {got}, not {want}")

    async def run(tid, **kwargs):
        parts = await collect(c.runs.stream(tid, "agent", **ui, **kwargs))
        assert not [p for p in parts if p.event == "error"], parts
        return parts

    tid = (await c.threads.create())["thread_id"]
    await run(tid, input={"messages": [{"type": "human", "content": "echo one"}]})
    # The thread list: searched by graph_id (or assistant_id), counted.
    listed = await c.threads.search(metadata={"graph_id": "agent"}, limit=100)
    assert tid in [t["thread_id"] for t in listed], listed
    assistant_id = (await c.assistants.get("agent"))["assistant_id"]
    listed = await c.threads.search(metadata={"assistant_id": assistant_id}, limit=100)
    assert tid in [t["thread_id"] for t in listed], listed
    counted = await c.threads.count(metadata={"graph_id": "agent"})
    assert counted >= 1, counted

    # A decision from the head checkpoint, beside input {}.
    await run(tid, input={}, command={"resume": {"decisions": [{"type": "approve"}]}},
              checkpoint=await head(tid))
    state = await c.threads.get_state(tid)
    assert state["next"] == [] and state["values"]["messages"][-1]["type"] == "ai", state

    # The next message from the head; paused again, then "Mark as resolved".
    await run(tid, input={"messages": [{"type": "human", "content": "echo two"}]},
              checkpoint=await head(tid))
    await status(tid, "interrupted")
    await run(tid, input={}, command={"goto": "__end__"}, checkpoint=await head(tid))
    state = await c.threads.get_state(tid)
    assert state["next"] == [] and state["interrupts"] == [], state
    assert state["values"]["messages"][-1]["type"] == "tool", state["values"]["messages"][-1]
    await status(tid, "idle")

    # Typing during a review: a tool message per paused call, then the new message.
    await run(tid, input={"messages": [{"type": "human", "content": "echo three"}]},
              checkpoint=await head(tid))
    state = await c.threads.get_state(tid)
    call = state["values"]["messages"][-1]["tool_calls"][0]
    await run(tid, checkpoint=await head(tid), input={"messages": [
        {"type": "tool", "tool_call_id": call["id"], "name": call["name"], "content": "Cancelled by user"},
        {"type": "human", "content": "hello"},
    ]})
    state = await c.threads.get_state(tid)
    kinds = [m["type"] for m in state["values"]["messages"][-3:]]
    assert kinds == ["tool", "human", "ai"], state["values"]["messages"][-3:]
    assert state["next"] == [], state

    # An earlier checkpoint forks: the new branch's first parent is that checkpoint.
    [_, earlier, *_] = await c.threads.get_history(tid, limit=10)
    await run(tid, input={"messages": [{"type": "human", "content": "fork"}]},
              checkpoint=earlier["checkpoint"])
    history = await c.threads.get_history(tid, limit=100)
    forked = [h for h in history if h["parent_checkpoint"]
              and h["parent_checkpoint"]["checkpoint_id"] == earlier["checkpoint"]["checkpoint_id"]]
    assert forked, history
    assert forked[0]["values"]["messages"][-1]["content"] == "fork", forked[0]
    assert (await c.threads.prune([tid]))["pruned_count"] == 1


@test
async def time_travel_forks_updates_and_copies():
    """Forks (edit, regenerate), update_state, copy and history paging, as LangGraph's."""
    c = client()
    tid = (await c.threads.create())["thread_id"]
    await c.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "first"}]})
    await c.runs.wait(tid, "agent", input={"messages": [{"role": "user", "content": "second"}]})
    head = await c.threads.get_state(tid)
    history = await c.threads.get_history(tid, limit=100)
    assert history[0]["checkpoint"] == head["checkpoint"], history[0]
    for newer, older in zip(history, history[1:]):
        assert newer["parent_checkpoint"]["checkpoint_id"] == older["checkpoint"]["checkpoint_id"]
    empty = history[-1]
    assert empty["metadata"]["step"] == -1 and empty["values"]["messages"] == [], empty
    assert empty["parent_checkpoint"] is None, empty

    # Paging: before and limit walk the branch newest first.
    page = await c.threads.get_history(tid, limit=2)
    rest = await c.threads.get_history(tid, limit=100, before=page[-1]["checkpoint"])
    assert [h["checkpoint"] for h in page + rest] == [h["checkpoint"] for h in history]

    # Edit the first message: a fork from the empty first checkpoint, streamed.
    parts = await collect(c.runs.stream(
        tid, "agent", input={"messages": [{"role": "user", "content": "edited"}]},
        checkpoint_id=empty["checkpoint"]["checkpoint_id"], stream_mode="values"))
    assert not [p for p in parts if p.event == "error"], parts
    state = await c.threads.get_state(tid)
    humans = [m["content"] for m in state["values"]["messages"] if m["type"] == "human"]
    assert humans == ["edited"], state["values"]["messages"]
    # The old branch stays readable.
    old = await c.threads.get_state(tid, checkpoint_id=head["checkpoint"]["checkpoint_id"])
    assert old["values"] == head["values"], old

    # Regenerate: from the checkpoint before the answer, with no input.
    before_answer = next(h for h in await c.threads.get_history(tid, limit=100)
                         if h["values"]["messages"] and h["values"]["messages"][-1]["type"] == "human")
    await c.runs.wait(tid, "agent", input=None,
                      checkpoint_id=before_answer["checkpoint"]["checkpoint_id"])
    state = await c.threads.get_state(tid)
    assert state["parent_checkpoint"]["checkpoint_id"] == before_answer["checkpoint"]["checkpoint_id"], state

    # update_state as a node: replaces a message by id, appends one without.
    first = state["values"]["messages"][0]
    updated = await c.threads.update_state(
        tid, {"messages": [{"type": "human", "content": "rewritten", "id": first["id"]},
                           {"type": "ai", "content": "noted"}]}, as_node="model")
    assert updated["checkpoint"]["thread_id"] == tid, updated
    state = await c.threads.get_state(tid)
    assert state["checkpoint"]["checkpoint_id"] == updated["checkpoint"]["checkpoint_id"]
    assert state["values"]["messages"][0]["content"] == "rewritten", state["values"]["messages"]
    assert state["values"]["messages"][-1]["content"] == "noted"
    assert state["metadata"]["source"] == "update", state["metadata"]
    try:
        await c.threads.update_state(tid, {"messages": []}, as_node="planner")
        raise AssertionError("an unknown as_node was accepted")
    except httpx.HTTPStatusError as e:
        assert e.response.status_code == 422 and "as_node" in e.response.text, e.response.text

    # copy: a new thread with the same state and metadata, independent of its source.
    await c.threads.update(tid, metadata={"topic": "tt"})
    copied = await c.threads.copy(tid)
    copy_state = await c.threads.get_state(copied["thread_id"])
    assert copied["thread_id"] != tid
    assert copy_state["values"] == state["values"], copy_state
    assert (await c.threads.get(copied["thread_id"]))["metadata"]["topic"] == "tt"
    await c.runs.wait(copied["thread_id"], "agent",
                      input={"messages": [{"role": "user", "content": "only in the copy"}]})
    assert (await c.threads.get_state(tid))["values"] == state["values"]
    await c.threads.delete(tid)
    await c.threads.delete(copied["thread_id"])


async def main():
    passed = failed = 0
    for fn in TESTS:
        try:
            await asyncio.wait_for(fn(), timeout=120)
            passed += 1
            print(f"ok   {fn.__name__}")
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__}")
            traceback.print_exc()
    print(f"{passed} passed, {failed} failed")
    return failed


if __name__ == "__main__":
    sys.exit(1 if asyncio.run(main()) else 0)
