"""Owners and deletion across two server processes on one PostgreSQL, with langgraph-sdk.

Alice and bob use the same thread id, each on a different process. Alice's thread runs
long enough for session memory to fold and summarization to compact (both store her
text in the database). Then:

- bob's `threads.create` with alice's id succeeds (no existence oracle) and his thread
  starts empty, from either process;
- alice deletes her thread through the other process; `pg_dump` of the database,
  checked by the calling script, must then hold none of her text;
- alice re-creates the id: its state is empty and its first model call sees exactly
  what a never-used id's first call sees (the scripted model reports how many messages
  it was sent).

    python tenancy_test.py URL_A URL_B
"""

import asyncio
import sys
import traceback

from langgraph_sdk import get_client

URL_A, URL_B = sys.argv[1], sys.argv[2]
ALICE, BOB = "alice-key-1", "bob-key-22"
SECRET = "TENANT-SECRET-5521"
LOG = "\n".join(f"  10:{i:02}:00 WARN ingest: {SECRET} object store timeout (partition {i})" for i in range(24))


async def main():
    alice_a = get_client(url=URL_A, api_key=ALICE)
    alice_b = get_client(url=URL_B, api_key=ALICE)
    bob_b = get_client(url=URL_B, api_key=BOB)
    passed = failed = 0

    def check(name, cond, detail=""):
        nonlocal passed, failed
        if cond:
            passed += 1
            print(f"ok   {name}")
        else:
            failed += 1
            print(f"FAIL {name}: {detail}")

    async def say(client, thread, text):
        return await client.runs.wait(thread, "agent", input={"messages": [{"role": "user", "content": text}]})

    await alice_a.threads.create(thread_id="shared-id")
    for turn in range(8):
        await say(alice_a, "shared-id", f"turn {turn}: {SECRET}\n{LOG}")

    bob = await bob_b.threads.create(thread_id="shared-id")
    check("another owner's id can be created (no 409)", bob["thread_id"] == "shared-id", bob)
    state = await bob_b.threads.get_state("shared-id")
    check("bob's thread of that id starts empty", state["values"] in ({}, {"messages": []}), state["values"])
    values = await say(bob_b, "shared-id", "hello from bob")
    seen = " ".join(str(m.get("content")) for m in values["messages"])
    check("bob's run sees none of alice's text", SECRET not in seen, seen[:200])

    await alice_b.threads.delete("shared-id")
    try:
        await alice_a.threads.get("shared-id")
        check("alice's deleted thread is gone on the other process", False)
    except Exception as e:  # the SDK raises httpx's HTTPStatusError on 404
        status = getattr(getattr(e, "response", None), "status_code", None)
        check("alice's deleted thread is gone on the other process", status == 404, repr(e))
    bob_state = await bob_b.threads.get_state("shared-id")
    check("bob's thread is untouched by alice's delete", len(bob_state["values"]["messages"]) == 2, bob_state["values"])

    fresh = await alice_a.threads.create(thread_id="never-used-id")
    first_fresh = await say(alice_a, fresh["thread_id"], "hello again")
    again = await alice_a.threads.create(thread_id="shared-id")
    state = await alice_a.threads.get_state("shared-id")
    check("a re-created id has no state", state["values"] in ({}, {"messages": []}), state["values"])
    first_again = await say(alice_a, again["thread_id"], "hello again")
    check(
        "a re-created id's first model call sees what a never-used id's does",
        first_again["messages"][-1]["content"] == first_fresh["messages"][-1]["content"],
        (first_again["messages"][-1]["content"], first_fresh["messages"][-1]["content"]),
    )
    print(f"{passed} passed, {failed} failed")
    return failed


if __name__ == "__main__":
    try:
        sys.exit(1 if asyncio.run(main()) else 0)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
