// Drives keel serve with the official JavaScript client, @langchain/langgraph-sdk (npm),
// against the scripted server (scripts/serve-tests.sh js starts it):
//
//   node js_sdk_test.mjs URL [REVIEW_URL]
//
// REVIEW_URL is a server of examples/keel-review.yaml (human in the loop on `echo`).
//
// Prints one line per test and ends with `N passed, N failed`.
import { Client } from "@langchain/langgraph-sdk";

const [url, reviewUrl] = process.argv.slice(2);
const client = new Client({ apiUrl: url });
const results = { passed: 0, failed: 0 };

function assert(cond, message) {
  if (!cond) throw new Error(message);
}

async function collect(iterable) {
  const parts = [];
  for await (const part of iterable) parts.push(part);
  return parts;
}

async function test(name, fn) {
  try {
    await fn();
    results.passed += 1;
    console.log(`ok   ${name}`);
  } catch (err) {
    results.failed += 1;
    console.log(`FAIL ${name}\n${err.stack || err}`);
  }
}

const user = (content) => ({ messages: [{ role: "user", content }] });

await test("assistants.search lists the agent", async () => {
  const found = await client.assistants.search();
  assert(found.length === 1 && found[0].graph_id === "agent", JSON.stringify(found));
  const one = await client.assistants.get("agent");
  assert(one.assistant_id === found[0].assistant_id, JSON.stringify(one));
});

await test("each stream mode has its events", async () => {
  const expected = {
    values: ["values"],
    updates: ["updates"],
    "messages-tuple": ["messages"],
    messages: ["messages/complete", "messages/metadata", "messages/partial"],
    events: ["events"],
  };
  for (const [mode, names] of Object.entries(expected)) {
    const thread = await client.threads.create();
    const parts = await collect(client.runs.stream(thread.thread_id, "agent", { input: user(`echo js ${mode}`), streamMode: mode }));
    const events = parts.map((p) => p.event);
    assert(events[0] === "metadata" && events.at(-1) === "end", `${mode}: ${events}`);
    const middle = [...new Set(events.slice(1, -1))].sort();
    assert(JSON.stringify(middle) === JSON.stringify(names), `${mode}: ${middle}`);
  }
});

await test("a long thread streams values, updates, messages-tuple and the compacting event; state keeps every message", async () => {
  const thread = await client.threads.create();
  const log = Array.from({ length: 12 }, (_, i) => `  10:${i}:00 WARN ingest: object store timeout after 30s (partition ${i})`).join("\n");
  const seen = new Set();
  const custom = [];
  for (let turn = 0; turn < 12; turn += 1) {
    for await (const part of client.runs.stream(thread.thread_id, "agent", {
      input: user(`Turn ${turn}: the nightly ingest failed on node ${turn}.\n${log}`),
      streamMode: ["values", "updates", "messages-tuple", "custom"],
    })) {
      seen.add(part.event);
      if (part.event === "custom") custom.push(part.data);
    }
  }
  for (const e of ["values", "updates", "messages", "custom"]) assert(seen.has(e), `no ${e} event: ${[...seen]}`);
  // examples/keel.yaml writes summaries ahead (precompute_at): a compaction either used
  // one (`precomputed`), reused the cache, or blocked and was announced first.
  const kinds = custom.map((e) => e.type);
  const compacted = custom.filter((e) => e.type === "context_compacted");
  assert(compacted.length > 0, `custom: ${kinds}`);
  assert(compacted.some((e) => e.precomputed), `no precomputed summary: ${JSON.stringify(compacted)}`);
  custom.forEach((e, i) => {
    if (e.type === "context_compacted" && e.source === "model" && !e.precomputed) {
      assert(kinds.slice(0, i).includes("context_compacting"), `unannounced at ${i}: ${kinds}`);
    }
  });
  const state = await client.threads.getState(thread.thread_id);
  assert(state.values.messages.length === 24, `messages: ${state.values.messages.length}`);
  const history = await client.threads.getHistory(thread.thread_id, { limit: 3 });
  assert(history.length === 3 && history[0].checkpoint.checkpoint_id === state.checkpoint.checkpoint_id, JSON.stringify(history.map((h) => h.checkpoint)));
});

await test("cancel stops a running run", async () => {
  const thread = await client.threads.create();
  const run = await client.runs.create(thread.thread_id, "agent", { input: user("slow js") });
  // "running" is set before the run writes its input: cancel once the input is in the
  // thread's state, or there is nothing for the run to keep.
  for (let i = 0; i < 250; i += 1) {
    const s = await client.threads.getState(thread.thread_id);
    if ((s.values?.messages ?? []).some((m) => m.type === "human" && m.content === "slow js")) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  await client.runs.cancel(thread.thread_id, run.run_id, true);
  const after = await client.runs.get(thread.thread_id, run.run_id);
  assert(after.status === "interrupted", JSON.stringify(after));
  const state = await client.threads.getState(thread.thread_id);
  assert(state.values.messages.map((m) => m.type).join() === "human", JSON.stringify(state.values));
});

await test("joinStream with lastEventId resumes after that event", async () => {
  const thread = await client.threads.create();
  const run = await client.runs.create(thread.thread_id, "agent", { input: user("slow resume"), streamMode: ["messages-tuple"] });
  const first = [];
  for await (const part of client.runs.joinStream(thread.thread_id, run.run_id)) {
    first.push(part);
    if (first.length === 6) break;
  }
  const rest = await collect(client.runs.joinStream(thread.thread_id, run.run_id, { lastEventId: first.at(-1).id }));
  const ids = [...first, ...rest].map((p) => Number(p.id));
  assert(ids.every((id, i) => id === i), `ids ${ids}`);
  assert(rest.at(-1).event === "end", JSON.stringify(rest.at(-1)));
  const words = [...first, ...rest].filter((p) => p.event === "messages").map((p) => p.data[0].content).join("").split(" ").filter(Boolean);
  assert(words.length === 60 && words[59] === "w60", `words ${words.length}`);
});

await test("runs.wait answers with the thread's values; a bad request has the error shape", async () => {
  const thread = await client.threads.create();
  const values = await client.runs.wait(thread.thread_id, "agent", { input: user("hello from js") });
  assert(values.messages.at(-1).content.startsWith("You said: hello from js"), JSON.stringify(values));
  const res = await fetch(`${url}/threads/${thread.thread_id}/runs`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ assistant_id: "agent", input: { messages: [{ type: "robot" }] } }),
  });
  const body = await res.json();
  assert(res.status === 422 && typeof body.detail === "string", `${res.status} ${JSON.stringify(body)}`);
});

await test("an interrupt reaches the stream and a command resumes it", async () => {
  assert(reviewUrl, "no REVIEW_URL given");
  const review = new Client({ apiUrl: reviewUrl });
  const thread = await review.threads.create();
  const parts = await collect(review.runs.stream(thread.thread_id, "agent", { input: user("echo from js"), streamMode: ["updates", "values"] }));
  const pending = parts.filter((p) => p.event === "updates" && p.data.__interrupt__).map((p) => p.data.__interrupt__);
  assert(pending.length === 1, JSON.stringify(parts));
  const [interrupt] = pending[0];
  assert(interrupt.value.action_requests[0].name === "echo" && typeof interrupt.id === "string", JSON.stringify(interrupt));
  const values = parts.filter((p) => p.event === "values").at(-1).data;
  assert(values.__interrupt__[0].id === interrupt.id, JSON.stringify(values));
  assert((await review.threads.get(thread.thread_id)).status === "interrupted");
  // The JS client's Command: resume keyed by interrupt id.
  const resumed = await collect(review.runs.stream(thread.thread_id, "agent", {
    command: { resume: { [interrupt.id]: { decisions: [{ type: "approve" }] } } },
    streamMode: "values",
  }));
  const last = resumed.filter((p) => p.event === "values").at(-1).data;
  const tool = last.messages.filter((m) => m.type === "tool");
  assert(tool.length === 1 && tool[0].content.includes("echo from js"), JSON.stringify(last.messages));
  assert(last.__interrupt__ === undefined, JSON.stringify(last));
  const state = await review.threads.getState(thread.thread_id);
  assert(state.next.length === 0 && state.tasks.length === 0, JSON.stringify(state));
});

await test("threads.stream starts a run and streams its messages (protocol v2)", async () => {
  // POST /threads/{id}/commands (run.start) and POST /threads/{id}/stream/events.
  const thread = client.threads.stream({ assistantId: "agent" });
  try {
    const started = await thread.run.start({ input: user("hi from js") });
    assert(typeof started.run_id === "string", JSON.stringify(started));
    const texts = [];
    const messages = (async () => {
      for await (const m of thread.messages) texts.push(await m.text);
    })();
    const out = await thread.output;
    await Promise.race([messages, new Promise((resolve) => setTimeout(resolve, 2000))]);
    assert(out.messages.map((m) => m.type).join() === "human,ai", JSON.stringify(out));
    assert(texts.at(-1) === out.messages[1].content, JSON.stringify({ texts, out }));
  } finally {
    await thread.close();
  }
});

await test("threads.stream surfaces an interrupt and respondInput resumes it", async () => {
  assert(reviewUrl, "no REVIEW_URL given");
  const review = new Client({ apiUrl: reviewUrl });
  const thread = review.threads.stream({ assistantId: "agent" });
  try {
    await thread.run.start({ input: user("echo from v2") });
    for (let i = 0; i < 300 && thread.interrupts.length === 0; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    assert(thread.interrupts.length === 1, "no input.requested arrived");
    const [pending] = thread.interrupts;
    assert(pending.payload.action_requests[0].args.query === "echo from v2", JSON.stringify(pending));
    await thread.respondInput({
      namespace: pending.namespace,
      interrupt_id: pending.interruptId,
      response: { decisions: [{ type: "approve" }] },
    });
    for (let i = 0; i < 300; i += 1) {
      const state = await review.threads.getState(thread.threadId);
      const tool = (state.values.messages ?? []).filter((m) => m.type === "tool");
      if (tool.length === 1 && state.values.messages.at(-1).type === "ai") {
        assert(tool[0].content.includes("echo from v2"), JSON.stringify(tool));
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error("the resumed run did not finish");
  } finally {
    await thread.close();
  }
});

await test("agent-chat-ui's useStream requests work", async () => {
  assert(reviewUrl, "no REVIEW_URL given");
  const review = new Client({ apiUrl: reviewUrl });
  // As useStream submits: its stream modes and flags, and the thread's head checkpoint
  // (without thread_id) from the history it fetched.
  const ui = {
    streamMode: ["values", "messages-tuple", "updates", "custom"],
    streamSubgraphs: true,
    streamResumable: true,
    onDisconnect: "continue",
    context: {},
    config: {},
    metadata: {},
  };
  const head = async (threadId) => {
    const [latest] = await review.threads.getHistory(threadId, { limit: 10 });
    const { thread_id: _, ...checkpoint } = latest.checkpoint;
    return checkpoint;
  };
  const submit = async (threadId, input, options = {}) => {
    const parts = await collect(review.runs.stream(threadId, "agent", { ...ui, input, ...options, checkpoint: await head(threadId) }));
    const errors = parts.filter((p) => p.event === "error");
    assert(errors.length === 0, JSON.stringify(errors));
    return parts;
  };
  const { thread_id: tid } = await review.threads.create();
  await collect(review.runs.stream(tid, "agent", { ...ui, input: { messages: [{ type: "human", content: "echo ui" }] } }));
  const listed = await review.threads.search({ metadata: { graph_id: "agent" }, limit: 100 });
  assert(listed.some((t) => t.thread_id === tid), JSON.stringify(listed));
  // A decision: submit({}, {command: {resume}}).
  await submit(tid, {}, { command: { resume: { decisions: [{ type: "approve" }] } } });
  let state = await review.threads.getState(tid);
  assert(state.next.length === 0 && state.values.messages.at(-1).type === "ai", JSON.stringify(state));
  // Paused again; "Mark as resolved": submit({}, {command: {goto: END}}).
  await submit(tid, { messages: [{ type: "human", content: "echo again" }] });
  await submit(tid, {}, { command: { goto: "__end__" } });
  state = await review.threads.getState(tid);
  assert(state.next.length === 0 && state.interrupts.length === 0, JSON.stringify(state));
  // The thread's status is written just after the run's stream ends.
  let status;
  for (let i = 0; i < 50 && status !== "idle"; i += 1) {
    status = (await review.threads.get(tid)).status;
    if (status !== "idle") await new Promise((r) => setTimeout(r, 50));
  }
  assert(status === "idle", status);
  // Typing during a review: a tool message per paused call, then the new message.
  await submit(tid, { messages: [{ type: "human", content: "echo third" }] });
  state = await review.threads.getState(tid);
  const calls = state.values.messages.at(-1).tool_calls;
  await submit(tid, {
    messages: [
      ...calls.map((c) => ({ type: "tool", tool_call_id: c.id, name: c.name, content: "Cancelled by user" })),
      { type: "human", content: "hello" },
    ],
  });
  state = await review.threads.getState(tid);
  const kinds = state.values.messages.slice(-3).map((m) => m.type);
  assert(JSON.stringify(kinds) === JSON.stringify(["tool", "human", "ai"]), JSON.stringify(state.values.messages));
});

console.log(`${results.passed} passed, ${results.failed} failed`);
process.exit(results.failed ? 1 : 0);
