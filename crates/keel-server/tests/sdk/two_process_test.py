"""Two server processes on one PostgreSQL database, driven with langgraph-sdk.

Runs on the same threads are sent to both servers at random (multitask_strategy
enqueue). Afterwards, from either server: no message is lost (every user message is
followed by the answer to it; a thread run by both processes at once would lose one
run's messages, since each appends to the state it started from), each run's
checkpoints are contiguous in the thread's history (never interleaved with another
run's), and every run ended in success.

    python two_process_test.py URL_A URL_B
"""

import asyncio
import random
import sys
import traceback

from langgraph_sdk import get_client

URL_A, URL_B = sys.argv[1], sys.argv[2]
THREADS, RUNS_PER_THREAD = 8, 6
# Long enough that the threads compact (examples/keel.yaml triggers at 2000 tokens).
LOG = "\n".join(f"  10:{i:02}:00 WARN ingest: object store timeout after 30s (bucket ingest-eu, partition {i})" for i in range(24))


async def main():
    a, b = get_client(url=URL_A), get_client(url=URL_B)
    rng = random.Random(16)
    passed = failed = 0

    def check(name, cond, detail=""):
        nonlocal passed, failed
        if cond:
            passed += 1
            print(f"ok   {name}")
        else:
            failed += 1
            print(f"FAIL {name}: {detail}")

    threads = []
    for i in range(THREADS):
        creator = a if i % 2 == 0 else b
        threads.append((await creator.threads.create(metadata={"two_process": True}))["thread_id"])
    other = await (b if THREADS > 0 else a).threads.get(threads[0])
    check("a thread created on one server is visible on the other", other["thread_id"] == threads[0])

    # Every run is created at once, so runs of one thread reach both processes together.
    plan = []
    for turn in range(RUNS_PER_THREAD):
        for t in threads:
            c = rng.choice([a, b])
            plan.append((c, t, f"turn {turn} on {t[:8]} via {'A' if c is a else 'B'}\n{LOG}"))

    async def create(c, t, text):
        run = await c.runs.create(
            t, "agent", input={"messages": [{"role": "user", "content": text}]},
            multitask_strategy="enqueue", stream_mode=["custom"],
        )
        return (c, t, run["run_id"], text)

    sent = await asyncio.gather(*(create(*p) for p in plan))
    await asyncio.gather(*(c.runs.join(t, r) for c, t, r, _ in sent))
    statuses = [(await c.runs.get(t, r))["status"] for c, t, r, _ in sent]
    check("every run ended in success", all(s == "success" for s in statuses), statuses)
    check("runs went to both servers", {id(c) for c, *_ in sent} == {id(a), id(b)})

    lost, interleaved = [], []
    for t in threads:
        reader = rng.choice([a, b])
        state = await reader.threads.get_state(t)
        messages = state["values"]["messages"]
        expected = {text for _, tt, _, text in sent if tt == t}
        humans = [m["content"] for m in messages if m["type"] == "human"]
        if sorted(humans) != sorted(expected):
            lost.append((t, len(humans), len(expected)))
        for i, m in enumerate(messages):
            if m["type"] == "human":
                nxt = messages[i + 1] if i + 1 < len(messages) else None
                first_line = m["content"].split("\n")[0]
                if nxt is None or nxt["type"] != "ai" or first_line not in nxt["content"]:
                    lost.append((t, "unanswered", first_line))
        history = await reader.threads.get_history(t, limit=1000)
        runs_in_order = [h["metadata"]["run_id"] for h in reversed(history)]
        seen, previous = set(), None
        for run_id in runs_in_order:
            if run_id != previous and run_id in seen:
                interleaved.append((t, run_id))
            seen.add(run_id)
            previous = run_id
    check("no message lost, every user message answered", not lost, lost[:5])

    # Summaries: each one is written by a model call once, whichever process needs it
    # next reads it from the database (the summary cache's second level).
    compacted = []
    for c, t, r, _ in sent:
        async for part in c.runs.join_stream(t, r):
            if part.event == "custom" and part.data.get("type") == "context_compacted":
                compacted.append((t, part.data["summarized"], part.data["source"], bool(part.data.get("precomputed"))))
    # Every turn has the same size, so each thread needs one summary: the first process
    # to compact writes it (on crossing, or ahead of it with examples/keel.yaml's
    # precompute_at, under a lease both processes share), and every later compaction, in
    # either process, reuses it. A summary written ahead is sent as `precomputed`.
    # Written ahead, a thread may also fold again before its next crossing; each summary
    # (a thread and how many messages it covers) must still be written once.
    written = {}
    for t, summarized, source, _ in compacted:
        if source == "model":
            written[(t, summarized)] = written.get((t, summarized), 0) + 1
    for key in {(t, summarized) for t, summarized, _, ahead in compacted if ahead}:
        written[key] = written.get(key, 0) + 1
    sources = sorted({s for _, _, s, _ in compacted})
    check("threads compacted", len(compacted) > 0, compacted)
    compacted_threads = {t for t, _, _, _ in compacted}
    check(
        "each summary was written once across both processes",
        {t for t, _ in written} == compacted_threads and all(n == 1 for n in written.values()),
        written,
    )
    print(f"     compactions: {len(compacted)}, summaries written: {sum(written.values())}, sources: {sources}")
    check("no two runs of a thread interleaved their checkpoints", not interleaved, interleaved[:5])

    # A run on A, followed from B: its stream (with Last-Event-ID), join and cancel reach
    # it through the database, not only through A.
    t = (await a.threads.create())["thread_id"]
    run = await a.runs.create(
        t, "agent", input={"messages": [{"role": "user", "content": "slow across processes"}]},
        stream_mode=["messages-tuple", "values"],
    )
    first = []
    async for part in b.runs.join_stream(t, run["run_id"]):
        first.append(part)
        if len(first) == 8:
            break
    rest = [p async for p in b.runs.join_stream(t, run["run_id"], last_event_id=first[-1].id)]
    ids = [int(p.id) for p in first + rest]
    check("B streams A's run, and resumes after a Last-Event-ID", ids == list(range(len(ids))) and rest[-1].event == "end", ids)
    on_a = [(p.id, p.event, p.data) for p in [p async for p in a.runs.join_stream(t, run["run_id"])]]
    on_b = [(p.id, p.event, p.data) for p in first + rest]
    check("B sees the same events, ids and payloads as A", on_a == on_b, (len(on_a), len(on_b)))
    text = "".join(p.data[0]["content"] for p in first + rest if p.event == "messages")
    check("the streamed answer is whole", text.split() == [f"w{i}" for i in range(1, 61)], text[:80])

    run = await a.runs.create(t, "agent", input={"messages": [{"role": "user", "content": "slow join"}]})
    values = await b.runs.join(t, run["run_id"])
    check("B's join waits for A's run to end", values["messages"][-1]["content"].split()[-1] == "w60", values["messages"][-1]["content"][-40:])

    run = await a.runs.create(t, "agent", input={"messages": [{"role": "user", "content": "slow cancel"}]})
    await asyncio.sleep(0.1)
    await b.runs.cancel(t, run["run_id"], wait=True)
    status = (await a.runs.get(t, run["run_id"]))["status"]
    check("B cancels A's run", status == "interrupted", status)
    print(f"{passed} passed, {failed} failed")
    return failed


if __name__ == "__main__":
    try:
        sys.exit(1 if asyncio.run(main()) else 0)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
