// Differential suite, the JavaScript half: the scenarios of diff_test.py against
// langgraph-api (the oracle, the real LangGraph Agent Server from PyPI around
// oracle/graph.py) and `keel serve` (the scripted_server example, whose model answers the
// same way), through the official JavaScript client, @langchain/langgraph-sdk (npm), and
// raw fetch where the client hides the status code or the endpoint (Protocol v2's
// commands and event stream).
//
// Normalisation, comparison, report and exit rule are diff_test.py's, over the same
// allowlist (oracle/allowlist.json): a difference is `SCENARIO PATH KIND`, and what the
// JS client gives is compared for both servers, so its own shapes (stream parts as
// {event, data}, store items with createdAt) cancel out. Scenarios only this half runs
// are named `js-...`.
//
//   node diff_test.mjs --oracle URL --oracle-review URL --keel URL --keel-review URL \
//       [--allowlist oracle/allowlist.json] [--report FILE] [--only SCENARIO,...]
//
// It imports the SDK from the node_modules next to it (scripts/serve-tests.sh copies it
// there). The *-review servers put a person's approval in front of the `echo` tool.
import { readFileSync, writeFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";
import { Client } from "@langchain/langgraph-sdk";

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;
const HEX_ID = /^[0-9a-f]{32}$/;
const ISO_TS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:\d{2}|Z)?$/;
// Keys whose values differ from run to run whatever they hold (the JS client copies a
// store item's timestamps into createdAt and updatedAt).
const VOLATILE_KEYS = new Set(["timestamp", "event_id", "created_at", "updated_at", "run_attempt", "createdAt", "updatedAt"]);
const TAG = randomUUID().replaceAll("-", "").slice(0, 8);

const isDict = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

function normalise(value, key = null) {
  if (value === undefined) return null;
  if (VOLATILE_KEYS.has(key) && value !== null) return "<volatile>";
  if (Array.isArray(value)) return value.map((v) => normalise(v));
  if (isDict(value)) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [normalise(k), normalise(v, k)]));
  }
  if (typeof value === "string") {
    if (ISO_TS.test(value)) return "<ts>";
    if (HEX_ID.test(value)) return "<hex-id>";
    return value.replace(UUID, "<uuid>");
  }
  return value;
}

function compare(path, oracle, keel, out) {
  if (isDict(oracle) && isDict(keel)) {
    for (const k of Object.keys(oracle)) {
      if (!(k in keel)) out.push({ path: `${path}.${k}`, kind: "missing-in-keel", oracle: oracle[k], keel: null });
    }
    for (const k of Object.keys(keel)) {
      if (!(k in oracle)) out.push({ path: `${path}.${k}`, kind: "extra-in-keel", oracle: null, keel: keel[k] });
    }
    for (const k of Object.keys(oracle)) if (k in keel) compare(`${path}.${k}`, oracle[k], keel[k], out);
  } else if (Array.isArray(oracle) && Array.isArray(keel)) {
    if (oracle.length !== keel.length) out.push({ path, kind: "length", oracle: oracle.length, keel: keel.length });
    for (let i = 0; i < Math.min(oracle.length, keel.length); i += 1) compare(`${path}[${i}]`, oracle[i], keel[i], out);
  } else if (JSON.stringify(oracle) !== JSON.stringify(keel)) {
    out.push({ path, kind: "value", oracle, keel });
  }
}

const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const pattern = (glob) => new RegExp(`^${glob.split("*").map(escape).join(".*")}$`, "s");

// ---------------------------------------------------------------- the two servers

class Target {
  constructor(name, url, reviewUrl) {
    this.name = name;
    this.url = url.replace(/\/$/, "");
    this.reviewUrl = reviewUrl.replace(/\/$/, "");
    this.sdk = new Client({ apiUrl: this.url, apiKey: null });
    this.review = new Client({ apiUrl: this.reviewUrl, apiKey: null });
  }
}

/** A call's result, or the status code and body keys of the error it raised. */
async function statusOf(promise) {
  try {
    return { ok: await promise };
  } catch (e) {
    if (typeof e?.status !== "number") throw e;
    let body;
    try {
      body = JSON.parse(e.text);
    } catch {
      body = e.text;
    }
    return { status: e.status, body_keys: isDict(body) ? Object.keys(body).sort() : null };
  }
}

async function raw(base, method, path, body = undefined) {
  const r = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if ((r.headers.get("content-type") || "").includes("text/event-stream")) {
    await r.body?.cancel();
    return { status: r.status, body: "<event-stream>" };
  }
  const text = await r.text();
  let data;
  try {
    data = JSON.parse(text);
  } catch {
    data = text;
  }
  return { status: r.status, body: data };
}

/** The lines of a response's body (SSE), without their line endings. */
async function* lines(response) {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of response.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let at;
    while ((at = buffer.search(/\r?\n/)) >= 0) {
      yield buffer.slice(0, at);
      buffer = buffer.slice(buffer[at] === "\r" ? at + 2 : at + 1);
    }
  }
  if (buffer) yield buffer;
}

const user = (text) => ({ messages: [{ role: "user", content: text }] });

/** (type, content, tool calls) of each message of a values dict. */
function texts(values) {
  const messages = isDict(values) ? values.messages || [] : [];
  return messages.map((m) => [m.type ?? null, m.content ?? null, (m.tool_calls || []).map((c) => c.name ?? null)]);
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/** A stream's events, as diff_test.py's collect: names in order, each name's data in
 * order, with a closing `end` event, a repeated `values` event and the null `updates` of
 * a node that wrote nothing taken out and recorded once each. */
async function collect(stream) {
  const names = [];
  const byName = {};
  const odd = { end_event: false, repeated_values: 0, null_updates: [] };
  for await (const part of stream) {
    const { event, data } = part;
    if (event === "end") {
      odd.end_event = true;
      continue;
    }
    if (event === "values" && names.at(-1) === "values" && same(byName.values.at(-1), data)) {
      odd.repeated_values += 1;
      continue;
    }
    if (event === "updates" && isDict(data) && Object.values(data).every((v) => v === null)) {
      odd.null_updates.push(...Object.keys(data));
      continue;
    }
    if (event === "events" && isDict(data)) {
      names.push(`events:${data.event ?? null}:${data.name ?? null}`);
      continue;
    }
    names.push(event);
    (byName[event] ||= []).push(data);
  }
  return { names, data: byName, ...odd };
}

async function newThread(c, metadata = {}) {
  return (await c.threads.create({ metadata: { suite: TAG, ...metadata } })).thread_id;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// -------------------------------------------------------------------- scenarios
// Each takes a Target and returns what it observed, as JSON; both servers' are compared.

async function sAssistants(t) {
  const found = await t.sdk.assistants.search({ graphId: "agent" });
  const one = await t.sdk.assistants.get(found[0].assistant_id);
  const missing = await raw(t.url, "GET", `/assistants/${randomUUID()}`);
  return { search: found, get: one, missing_status: missing.status };
}

async function sThreads(t) {
  const c = t.sdk;
  const created = await c.threads.create({ metadata: { suite: TAG, kind: "crud" } });
  const tid = created.thread_id;
  const got = await c.threads.get(tid);
  const updated = await c.threads.update(tid, { metadata: { extra: 1 } });
  const search = await c.threads.search({ metadata: { suite: TAG, kind: "crud" } });
  const count = await c.threads.count({ metadata: { suite: TAG, kind: "crud" } });
  const missing = await raw(t.url, "GET", `/threads/${randomUUID()}`);
  const deleted = await raw(t.url, "DELETE", `/threads/${tid}`);
  const after = await raw(t.url, "GET", `/threads/${tid}`);
  return {
    create: created,
    get: got,
    update: updated,
    search,
    count,
    missing_status: missing.status,
    delete_status: deleted.status,
    after_delete_status: after.status,
  };
}

async function sRunMetadata(t) {
  const c = t.sdk;
  const kind = `meta-${TAG}`;
  const tid = await newThread(c, { kind });
  const output = await c.runs.wait(tid, "agent", { input: user("hello there") });
  const thread = await c.threads.get(tid);
  const byGraph = await c.threads.search({ metadata: { graph_id: "agent", kind } });
  const count = await c.threads.count({ metadata: { graph_id: "agent", kind } });
  const idle = await c.threads.search({ metadata: { kind }, status: "idle" });
  return {
    output,
    thread_metadata: thread.metadata,
    thread_status: thread.status,
    search_by_graph_id: byGraph.map((x) => x.thread_id === tid),
    count_by_graph_id: count,
    search_idle: idle.length,
  };
}

function streamScenario(mode, text) {
  return async (t) => {
    const tid = await newThread(t.sdk);
    const got = await collect(t.sdk.runs.stream(tid, "agent", { input: user(text), streamMode: mode }));
    if (mode === "messages-tuple") {
      // A client merges streamed chunks into the thread's messages by id.
      const state = await t.sdk.threads.getState(tid);
      const final = new Set(state.values.messages.filter((m) => m.type === "ai").map((m) => m.id));
      const streamed = (got.data.messages || []).filter((c) => c[0].type === "AIMessageChunk").map((c) => c[0].id);
      got.chunk_ids_are_state_ids = streamed.every((id) => final.has(id));
    }
    return got;
  };
}

async function twoTurns(c) {
  const tid = await newThread(c);
  await c.runs.wait(tid, "agent", { input: user("hello") });
  await c.runs.wait(tid, "agent", { input: user("second one") });
  return tid;
}

function historyShape(history) {
  return history.map((h) => ({
    messages: texts(h.values),
    next: h.next,
    source: h.metadata?.source ?? null,
    step: h.metadata?.step ?? null,
    has_parent: h.parent_checkpoint != null,
    tasks: (h.tasks || []).map((x) => x.name ?? null),
  }));
}

async function sStateHistory(t) {
  const c = t.sdk;
  const tid = await twoTurns(c);
  const state = await c.threads.getState(tid);
  const history = await c.threads.getHistory(tid, { limit: 20 });
  return { state, history: historyShape(history), history_full_first: history[0] };
}

async function sContinueHead(t) {
  const c = t.sdk;
  const tid = await newThread(c);
  await c.runs.wait(tid, "agent", { input: user("hello") });
  const head = (await c.threads.getState(tid)).checkpoint.checkpoint_id;
  const output = await c.runs.wait(tid, "agent", { input: user("again"), checkpointId: head });
  const history = await c.threads.getHistory(tid, { limit: 20 });
  return { output: texts(output), history: historyShape(history) };
}

async function sFork(t) {
  const c = t.sdk;
  const tid = await twoTurns(c);
  const history = await c.threads.getHistory(tid, { limit: 20 });
  // The end of the first turn: two messages, nothing next.
  const first = history.find((h) => texts(h.values).length === 2 && !h.next?.length);
  const output = await c.runs.wait(tid, "agent", { input: user("forked"), checkpointId: first.checkpoint.checkpoint_id });
  const state = await c.threads.getState(tid);
  const after = await c.threads.getHistory(tid, { limit: 40 });
  return { output: texts(output), state: texts(state.values), history_len: after.length };
}

async function sEditFirst(t) {
  const c = t.sdk;
  const tid = await twoTurns(c);
  const history = await c.threads.getHistory(tid, { limit: 20 });
  // agent-chat-ui edits a message from the parent of the first checkpoint it appears in.
  const seen = history.filter((h) => texts(h.values)[0]?.[1] === "hello");
  const parent = seen.at(-1).parent_checkpoint;
  if (parent == null) return { parent_of_first_message_checkpoint: null };
  const output = await c.runs.wait(tid, "agent", { input: user("edited first"), checkpointId: parent.checkpoint_id });
  const state = await c.threads.getState(tid);
  return { output: texts(output), state: texts(state.values) };
}

async function sRegenerate(t) {
  const c = t.sdk;
  const tid = await twoTurns(c);
  const history = await c.threads.getHistory(tid, { limit: 20 });
  // Regenerate the last answer: run again, without input, from the checkpoint before it.
  const before = history.filter((h) => same(h.next, ["model"]) && texts(h.values).length === 3);
  if (!before.length) return { checkpoint_before_last_answer: null };
  const output = await c.runs.wait(tid, "agent", { checkpointId: before[0].checkpoint.checkpoint_id });
  return { output: texts(output) };
}

async function interrupted(t) {
  const c = t.review;
  const tid = (await c.threads.create({ metadata: { suite: TAG } })).thread_id;
  const output = await c.runs.wait(tid, "agent", { input: user("echo hi") });
  return [tid, output];
}

async function sInterrupt(t) {
  const c = t.review;
  const [tid, output] = await interrupted(t);
  const thread = await c.threads.get(tid);
  const state = await c.threads.getState(tid);
  return {
    output,
    thread_status: thread.status,
    thread_interrupts: thread.interrupts,
    next: state.next,
    tasks: state.tasks,
    state_interrupts: state.interrupts ?? null,
  };
}

function resumeScenario(decision) {
  return async (t) => {
    const c = t.review;
    const [tid] = await interrupted(t);
    const output = await c.runs.wait(tid, "agent", { command: { resume: { decisions: [decision] } } });
    const thread = await c.threads.get(tid);
    return { output: texts(output), full: output, status: thread.status };
  };
}

async function sInterruptGoto(t) {
  const c = t.review;
  const [tid] = await interrupted(t);
  let output = await statusOf(c.runs.wait(tid, "agent", { command: { goto: "model" } }));
  const thread = await c.threads.get(tid);
  const state = await c.threads.getState(tid);
  if ("ok" in output) output = { ok: texts(output.ok) };
  return { output, status: thread.status, next: state.next };
}

async function sInterruptNewInput(t) {
  const c = t.review;
  const [tid] = await interrupted(t);
  let output = await statusOf(c.runs.wait(tid, "agent", { input: user("hello instead") }));
  const thread = await c.threads.get(tid);
  if ("ok" in output) output = { ok: texts(output.ok) };
  return { output, status: thread.status };
}

async function waitRunning(c, tid, rid) {
  for (let i = 0; i < 200; i += 1) {
    if ((await c.runs.get(tid, rid)).status === "running") return;
    await sleep(20);
  }
}

async function sCancel(t) {
  const c = t.sdk;
  const tid = await newThread(c);
  const run = await c.runs.create(tid, "agent", { input: user("slow please") });
  await waitRunning(c, tid, run.run_id);
  await sleep(100);
  const cancelled = await statusOf(c.runs.cancel(tid, run.run_id, true));
  const got = await c.runs.get(tid, run.run_id);
  const thread = await c.threads.get(tid);
  return { create: run, cancel: cancelled, run_status: got.status, thread_status: thread.status };
}

async function sJoin(t) {
  const c = t.sdk;
  const tid = await newThread(c);
  const run = await c.runs.create(tid, "agent", { input: user("hello") });
  const joined = await c.runs.join(tid, run.run_id);
  const got = await c.runs.get(tid, run.run_id);
  const listed = await c.runs.list(tid);
  return { join: joined, run: got, list_len: listed.length };
}

async function sReconnect(t) {
  const c = t.sdk;
  const tid = await newThread(c);
  const run = await c.runs.create(tid, "agent", {
    input: user("slow please"),
    streamMode: ["values", "messages-tuple"],
    streamResumable: true,
  });
  const rid = run.run_id;
  const first = [];
  let lastId = null;
  const abort = new AbortController();
  const r = await fetch(`${t.url}/threads/${tid}/runs/${rid}/stream`, { signal: abort.signal });
  let event = null;
  for await (const line of lines(r)) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("id:")) lastId = line.slice(3).trim();
    else if (line === "" && event) {
      first.push(event);
      event = null;
      if (first.length >= 4) break;
    }
  }
  abort.abort();
  const rest = await collect(c.runs.joinStream(tid, rid, { lastEventId: lastId ?? undefined }));
  const values = rest.data.values || [{}];
  return {
    first,
    had_event_id: lastId !== null,
    rest_names_first: rest.names.slice(0, 1),
    rest_end_event: rest.end_event,
    final: texts(values.at(-1)),
    total: first.length + rest.names.length,
  };
}

async function sseEvents(base, path, body, until, out, signal) {
  const r = await fetch(base + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal,
  });
  out.push({ status: r.status });
  let event = null;
  for await (const line of lines(r)) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) {
      const data = JSON.parse(line.slice(5));
      out.push({ event, data });
      if (until(data)) return;
    }
  }
}

async function sProtocolV2(t) {
  const tid = randomUUID();
  const events = [];
  const done = (data) => {
    const inner = data?.params?.data || {};
    return data?.method === "lifecycle" && ["completed", "failed", "interrupted"].includes(inner.event);
  };
  const abort = new AbortController();
  const reader = sseEvents(
    t.url,
    `/threads/${tid}/stream/events`,
    { channels: ["values", "messages", "lifecycle", "updates"] },
    done,
    events,
    abort.signal,
  ).catch((e) => {
    if (e?.name !== "AbortError") throw e;
  });
  await sleep(500);
  const start = await raw(t.url, "POST", `/threads/${tid}/commands`, {
    id: 1,
    method: "run.start",
    params: { assistant_id: "agent", input: user("hi") },
  });
  let timer;
  const finished = await Promise.race([
    reader.then(() => true),
    new Promise((resolve) => (timer = setTimeout(() => resolve(false), 20000))),
  ]);
  clearTimeout(timer);
  abort.abort();
  if (!finished) events.push("timeout");
  const bad = await raw(t.url, "POST", `/threads/${tid}/stream/events`, { channels: ["nope"] });
  const unknown = await raw(t.url, "POST", `/threads/${tid}/commands`, { id: 2, method: "no.such", params: {} });
  const sequence = [];
  for (const e of events) {
    if (isDict(e) && "event" in e) {
      const d = e.data;
      const inner = d?.params?.data;
      sequence.push({
        event: e.event,
        method: d.method ?? null,
        type: d.type ?? null,
        keys: Object.keys(d).sort(),
        param_keys: Object.keys(d.params || {}).sort(),
        data_event: isDict(inner) ? (inner.event ?? null) : null,
      });
    }
  }
  return {
    start,
    stream_status: events[0] ?? null,
    sequence,
    bad_channel_status: bad.status,
    unknown_command: unknown,
  };
}

async function sStore(t) {
  const s = t.sdk.store;
  const ns = ["suite", TAG];
  const put = await statusOf(s.putItem(ns, "k1", { a: 1, text: "hello" }));
  await s.putItem(ns, "k2", { a: 2 });
  const got = await s.getItem(ns, "k1");
  const search = await s.searchItems(["suite"], { filter: { a: 2 } });
  const namespaces = await s.listNamespaces({ prefix: ["suite"] });
  await s.deleteItem(ns, "k1");
  const after = await statusOf(s.getItem(ns, "k1"));
  return {
    put,
    get: got,
    search,
    namespaces_has_ours: namespaces.namespaces.filter((n) => same(n, ns)),
    after_delete: after,
  };
}

async function sErrors(t) {
  const tid = await newThread(t.sdk);
  const bad = await fetch(`${t.url}/threads`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: "{",
  });
  await bad.body?.cancel();
  return {
    run_on_missing_thread: (await raw(t.url, "POST", `/threads/${randomUUID()}/runs/wait`, { assistant_id: "agent", input: user("x") })).status,
    missing_assistant: (await raw(t.url, "POST", `/threads/${tid}/runs/wait`, { assistant_id: "nope", input: user("x") })).status,
    missing_run: (await raw(t.url, "GET", `/threads/${tid}/runs/${randomUUID()}`)).status,
    state_of_missing_thread: (await raw(t.url, "GET", `/threads/${randomUUID()}/state`)).status,
    bad_json: bad.status,
  };
}

// JS only: the assistant calls the Python half does not make.
async function sJsAssistantsGraph(t) {
  const c = t.sdk;
  const [found] = await c.assistants.search({ graphId: "agent" });
  const graph = await statusOf(c.assistants.getGraph(found.assistant_id));
  const schemas = await statusOf(c.assistants.getSchemas(found.assistant_id));
  return {
    count: await c.assistants.count({ graphId: "agent" }),
    graph_nodes: "ok" in graph ? (graph.ok.nodes || []).map((n) => n.id).sort() : graph,
    schemas_keys: "ok" in schemas ? Object.keys(schemas.ok).sort() : schemas,
    state_schema_messages: "ok" in schemas ? Object.keys(schemas.ok.state_schema?.properties || {}).includes("messages") : null,
  };
}

// JS only: the thread-state calls the Python half does not make (updateState, getState
// at a checkpoint, copy).
async function sJsThreadState(t) {
  const c = t.sdk;
  const tid = await newThread(c);
  await c.runs.wait(tid, "agent", { input: user("hello") });
  const head = await c.threads.getState(tid);
  const updated = await statusOf(
    c.threads.updateState(tid, { values: { messages: [{ type: "human", content: "added by update" }] } }),
  );
  const after = await c.threads.getState(tid);
  const atHead = await c.threads.getState(tid, head.checkpoint.checkpoint_id);
  const copy = await statusOf(c.threads.copy(tid));
  let copied = null;
  if ("ok" in copy) {
    const state = await c.threads.getState(copy.ok.thread_id);
    copied = { same_id: copy.ok.thread_id === tid, messages: texts(state.values) };
  }
  return {
    // The SDK declares Pick<Config, "configurable">: what a client reads checkpoint_id from.
    update: updated,
    after: texts(after.values),
    after_parent_is_head: after.parent_checkpoint?.checkpoint_id === head.checkpoint.checkpoint_id,
    at_head: texts(atHead.values),
    copy,
    copied,
  };
}

const STREAM_MODES = ["values", "updates", "messages-tuple", "events", "tasks", "checkpoints", "debug", "custom"];

const SCENARIOS = {
  assistants: sAssistants,
  threads: sThreads,
  "run-metadata": sRunMetadata,
  ...Object.fromEntries(
    STREAM_MODES.map((mode) => [`stream-${mode}`, streamScenario(mode, ["events", "debug"].includes(mode) ? "hello there" : "echo hi")]),
  ),
  "state-history": sStateHistory,
  "continue-head": sContinueHead,
  fork: sFork,
  "edit-first": sEditFirst,
  regenerate: sRegenerate,
  interrupt: sInterrupt,
  "resume-approve": resumeScenario({ type: "approve" }),
  "resume-edit": resumeScenario({ type: "edit", edited_action: { name: "echo", args: { query: "edited" } } }),
  "resume-reject": resumeScenario({ type: "reject", message: "not now" }),
  "interrupt-goto": sInterruptGoto,
  "interrupt-new-input": sInterruptNewInput,
  cancel: sCancel,
  join: sJoin,
  reconnect: sReconnect,
  "protocol-v2": sProtocolV2,
  store: sStore,
  errors: sErrors,
  "js-assistants-graph": sJsAssistantsGraph,
  "js-thread-state": sJsThreadState,
};

async function observe(fn, t) {
  let timer;
  try {
    return await Promise.race([
      fn(t),
      new Promise((_, reject) => (timer = setTimeout(() => reject(Object.assign(new Error("timeout"), { name: "TimeoutError" })), 90000))),
    ]);
  } catch (e) {
    // An exception is an observation too: both may raise alike.
    return { exception: e?.name ?? String(e), status: typeof e?.status === "number" ? e.status : null };
  } finally {
    clearTimeout(timer);
  }
}

async function main() {
  const { values: args } = parseArgs({
    options: {
      oracle: { type: "string" },
      "oracle-review": { type: "string" },
      keel: { type: "string" },
      "keel-review": { type: "string" },
      allowlist: { type: "string", default: new URL("oracle/allowlist.json", import.meta.url).pathname },
      report: { type: "string" },
      only: { type: "string" },
    },
  });
  for (const required of ["oracle", "oracle-review", "keel", "keel-review"]) {
    if (!args[required]) {
      console.error(`diff_test.mjs: --${required} is required`);
      return 2;
    }
  }
  const oracle = new Target("oracle", args.oracle, args["oracle-review"]);
  const keel = new Target("keel", args.keel, args["keel-review"]);
  const allow = JSON.parse(readFileSync(args.allowlist, "utf8"));
  // Tried in this order: a gap or a fork is never hidden by a broader accepted pattern.
  const entries = ["forks_land_separately", "keel_gaps", "accepted"].flatMap((section) =>
    (allow[section] || []).map((e) => ({ ...e, section, re: pattern(e.match), hits: 0 })),
  );
  const names = args.only ? args.only.split(",") : Object.keys(SCENARIOS);
  const unknown = names.filter((n) => !(n in SCENARIOS));
  if (unknown.length) {
    console.error(`diff_test.mjs: no such scenario: ${unknown.join(", ")}`);
    return 2;
  }

  const report = [];
  let unexpected = 0;
  let accepted = 0;
  for (const name of names) {
    const started = performance.now();
    const [o, k] = await Promise.all([observe(SCENARIOS[name], oracle), observe(SCENARIOS[name], keel)]);
    const diffs = [];
    compare("", normalise(o), normalise(k), diffs);
    let bad = 0;
    for (const d of diffs) {
      d.id = `${name} ${d.path.replace(/^\.+/, "")} ${d.kind}`;
      const hit = entries.find((e) => e.re.test(d.id));
      if (hit) {
        hit.hits += 1;
        d.allowed = `${hit.section}: ${hit.reason}`;
        accepted += 1;
      } else {
        bad += 1;
        unexpected += 1;
        const show = (v) => (JSON.stringify(v) ?? "null").slice(0, 200);
        console.log(`DIFF ${d.id}: oracle=${show(d.oracle)} keel=${show(d.keel)}`);
      }
    }
    const verdict = bad ? "FAIL" : "ok  ";
    console.log(`${verdict} ${name}: ${diffs.length} difference(s), ${bad} unexpected (${((performance.now() - started) / 1000).toFixed(1)}s)`);
    report.push({ scenario: name, oracle: o, keel: k, differences: diffs });
  }

  // An entry is noted only when its scenario part could match a scenario run here, so
  // entries of scenarios this half does not have stay quiet.
  // With --only, as diff_test.py: only the entries that name one of those scenarios.
  for (const e of entries) {
    const scenarioPart = pattern(e.match.split(" ")[0]);
    const ran = args.only ? names.some((n) => e.match.startsWith(`${n} `)) : names.some((n) => scenarioPart.test(n));
    if (e.hits === 0 && ran) {
      const note = e.section === "forks_land_separately" ? " (flip it: keel now agrees)" : "";
      console.log(`note: allowlist entry matched nothing${note}: ${e.match}`);
    }
  }
  if (args.report) writeFileSync(args.report, JSON.stringify(report, null, 1));
  console.log(`${names.length} scenarios: ${accepted} accepted difference(s), ${unexpected} unexpected`);
  return unexpected ? 1 : 0;
}

process.exitCode = await main();
