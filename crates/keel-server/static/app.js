// The Keel chat page. It speaks the LangGraph Agent Server protocol, like any SDK
// client: POST /threads, POST /threads/{id}/runs/stream (server-sent events in the
// values, messages-tuple and custom modes), GET /threads/{id}/state, POST
// /threads/search and /threads/{id}/history. A run paused for review (the
// `__interrupt__` of human-in-the-loop middleware) shows its tool calls with the
// decisions allowed; a choice resumes the run with `command: {resume: {decisions}}`.
// No build step: this file is served as is.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { assistant: null, thread: null, streaming: false, bubbles: new Map(), toastTimer: null, lastMessageId: null };

function headers(json = true) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  const key = localStorage.getItem("keel-api-key") || "";
  if (key) h["x-api-key"] = key;
  return h;
}

async function api(method, path, body) {
  const res = await fetch(path, { method, headers: headers(body !== undefined), body: body === undefined ? undefined : JSON.stringify(body) });
  if (!res.ok) {
    let detail = res.statusText;
    try { detail = (await res.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new Error(`${res.status}: ${detail}`);
  }
  return res.status === 204 ? null : res.json();
}

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "muted";
}

function text(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => (typeof p === "string" ? p : p.text || "")).join("");
  return "";
}

function bubble(kind, body) {
  const div = document.createElement("div");
  div.className = `msg ${kind}`;
  div.textContent = body;
  $("messages").appendChild(div);
  $("messages").scrollTop = $("messages").scrollHeight;
  return div;
}

function toolCallLine(div, call) {
  const span = document.createElement("span");
  span.className = "tool-call";
  span.textContent = `→ ${call.name || "tool"}(${typeof call.args === "string" ? call.args : JSON.stringify(call.args || {})})`;
  div.appendChild(span);
}

// Where compaction happened in each thread, kept across redraws (every `values` event
// redraws the messages) and reloads: one marker after the message that was the newest
// when the compacted request was sent. The thread's state keeps every message, so the
// marker is the only trace of it in the conversation.
function markers(thread) {
  try { return JSON.parse(localStorage.getItem(`keel-compactions-${thread}`) || "[]"); } catch (_) { return []; }
}

function addMarker(thread, marker) {
  const list = markers(thread);
  list.push(marker);
  localStorage.setItem(`keel-compactions-${thread}`, JSON.stringify(list.slice(-200)));
}

function markerNote(marker) {
  const div = document.createElement("div");
  div.className = "compaction-marker";
  div.setAttribute("role", "note");
  div.textContent = marker.text;
  div.title = `compacted at ${marker.at}`;
  return div;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

// Draws a thread's messages from its values (the truth once a step has finished), with
// the compaction markers where they happened.
function render(messages) {
  $("messages").textContent = "";
  state.bubbles.clear();
  const pending = state.thread ? markers(state.thread) : [];
  const after = (id) => {
    for (const marker of pending.filter((k) => k.after === id)) $("messages").appendChild(markerNote(marker));
  };
  after(null);
  state.lastMessageId = null;
  for (const m of messages || []) {
    if (m.type === "human") bubble("human", text(m.content));
    else if (m.type === "tool") bubble("tool", `${m.name || "tool"}: ${text(m.content)}`);
    else if (m.type === "ai") {
      const div = bubble("ai", text(m.content));
      for (const call of m.tool_calls || []) toolCallLine(div, call);
    } else continue;
    state.lastMessageId = m.id || null;
    if (m.id) after(m.id);
  }
  // A marker whose message is not in this thread's state (an edited branch) goes last.
  const ids = new Set((messages || []).map((m) => m.id));
  for (const marker of pending.filter((k) => k.after !== null && !ids.has(k.after))) $("messages").appendChild(markerNote(marker));
  $("messages").scrollTop = $("messages").scrollHeight;
}

function showToast(message) {
  const toast = $("toast");
  toast.textContent = "";
  const spinner = document.createElement("span");
  spinner.className = "spinner";
  toast.append(spinner, message);
  toast.hidden = false;
  document.body.dataset.toasts = String(Number(document.body.dataset.toasts) + 1);
  clearTimeout(state.toastTimer);
}

function hideToast(after) {
  clearTimeout(state.toastTimer);
  state.toastTimer = setTimeout(() => { $("toast").hidden = true; }, after);
}

// The pending review of a run paused before tool calls, from `__interrupt__` (values)
// or the thread state's `interrupts`: one row per call, a button per allowed decision.
function showReview(interrupts) {
  const box = $("review");
  box.textContent = "";
  const pending = (interrupts || [])[0];
  const value = pending && pending.value;
  if (!value || !Array.isArray(value.action_requests)) {
    box.hidden = true;
    return;
  }
  const title = document.createElement("strong");
  title.textContent = "Waiting for your review";
  box.appendChild(title);
  const decisions = value.action_requests.map(() => null);
  value.action_requests.forEach((request, i) => {
    const row = document.createElement("div");
    row.className = "review-call";
    const what = document.createElement("code");
    what.textContent = `${request.name}(${JSON.stringify(request.args || {})})`;
    row.appendChild(what);
    const allowed = ((value.review_configs || [])[i] || {}).allowed_decisions || ["approve", "reject"];
    // An edit sends the arguments as changed in this box (JSON), for the same tool.
    let args = null;
    if (allowed.includes("edit")) {
      args = document.createElement("textarea");
      args.className = "review-args";
      args.rows = 2;
      args.value = JSON.stringify(request.args || {});
    }
    const decide = (decision, kind) => {
      decisions[i] = decision;
      row.dataset.decided = kind;
      if (decisions.every(Boolean)) resume(decisions);
    };
    for (const kind of allowed.filter((k) => k === "approve" || k === "edit" || k === "reject")) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = `decide ${kind}`;
      button.textContent = kind;
      button.addEventListener("click", () => {
        if (kind === "approve") decide({ type: "approve" }, kind);
        else if (kind === "reject") decide({ type: "reject", message: "Rejected from the chat page." }, kind);
        else {
          let edited;
          try { edited = JSON.parse(args.value); } catch (err) { status(`the arguments are not JSON: ${err.message}`, true); return; }
          decide({ type: "edit", edited_action: { name: request.name, args: edited } }, kind);
        }
      });
      row.appendChild(button);
    }
    box.appendChild(row);
    if (args) box.appendChild(args);
  });
  box.hidden = false;
}

function onEvent(event, data) {
  if (event === "values") {
    render(data.messages);
    showReview(data.__interrupt__);
  } else if (event === "messages") {
    const [chunk] = data;
    if (chunk.type === "AIMessageChunk") {
      let div = state.bubbles.get(chunk.id);
      if (!div) {
        div = bubble("ai streaming", "");
        div.appendChild(document.createTextNode(""));
        state.bubbles.set(chunk.id, div);
      }
      if (chunk.content) div.firstChild.textContent += text(chunk.content);
      for (const c of chunk.tool_call_chunks || []) if (c.name) toolCallLine(div, { name: c.name, args: c.args });
      $("messages").scrollTop = $("messages").scrollHeight;
    }
  } else if (event === "custom") {
    if (data.type === "context_compacting") showToast(data.message || "Compacting conversation context…");
    if (data.type === "context_compacted") {
      const at = new Date().toLocaleTimeString();
      const marker = {
        after: state.lastMessageId,
        at,
        text: `Context compacted at ${at}: ${plural(data.summarized, "earlier message")} summarized, ` +
          `${plural(data.kept, "recent message")} kept verbatim (${data.tokens_before} → ${data.tokens_after} tokens sent${data.cache_hit ? ", summary reused" : ""}). ` +
          "The thread keeps every message.",
      };
      if (state.thread) addMarker(state.thread, marker);
      $("messages").appendChild(markerNote(marker));
      $("messages").scrollTop = $("messages").scrollHeight;
      // Left up long enough to be read even when the summary was quick.
      hideToast(2500);
    }
  } else if (event === "error") {
    status(`run failed: ${data.message || data.error}`, true);
  }
}

// Reads a server-sent event stream: blocks separated by a blank line, `event:` and
// `data:` fields (the SSE format of the HTML standard).
async function readEvents(res) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(event, JSON.parse(data.join("\n")));
    }
  }
}

async function send(message) {
  if (state.streaming || !message.trim()) return;
  await run(async () => {
    if (!state.thread) await newThread();
    bubble("human", message);
    return { input: { messages: [{ type: "human", content: message }] } };
  });
}

// Continues a paused run with one decision per reviewed call.
async function resume(decisions) {
  if (state.streaming) return;
  $("review").hidden = true;
  await run(async () => ({ command: { resume: { decisions } } }));
}

// Streams one run of the current thread; `prepare` returns the run's input or command.
async function run(prepare) {
  state.streaming = true;
  document.body.dataset.busy = "true";
  $("send").disabled = true;
  status("streaming…");
  try {
    const what = await prepare();
    const res = await fetch(`/threads/${encodeURIComponent(state.thread)}/runs/stream`, {
      method: "POST",
      headers: headers(),
      body: JSON.stringify({
        assistant_id: state.assistant,
        ...what,
        stream_mode: ["values", "messages-tuple", "custom"],
        multitask_strategy: "reject",
      }),
    });
    if (!res.ok) {
      let detail = res.statusText;
      try { detail = (await res.json()).detail; } catch (_) { /* not JSON */ }
      throw new Error(`${res.status}: ${detail}`);
    }
    await readEvents(res);
    status("");
  } catch (err) {
    status(String(err.message || err), true);
  } finally {
    state.streaming = false;
    document.body.dataset.busy = "false";
    $("send").disabled = false;
    hideToast(2500);
    await Promise.all([loadThreads(), loadHistory()]).catch(() => {});
  }
}

async function newThread() {
  const thread = await api("POST", "/threads", { metadata: { source: "keel-chat-page" } });
  state.thread = thread.thread_id;
  render([]);
  showReview(null);
  await loadThreads();
  await loadHistory();
}

async function openThread(id) {
  state.thread = id;
  const snapshot = await api("GET", `/threads/${encodeURIComponent(id)}/state`);
  render(snapshot.values.messages || []);
  showReview(snapshot.interrupts);
  await loadThreads();
  await loadHistory();
}

async function loadThreads() {
  const threads = await api("POST", "/threads/search", { limit: 50, sort_by: "updated_at" });
  const list = $("threads");
  list.textContent = "";
  for (const t of threads) {
    const li = document.createElement("li");
    const first = ((t.values && t.values.messages) || []).find((m) => m.type === "human");
    li.textContent = first ? text(first.content).slice(0, 60) : `(empty) ${t.thread_id.slice(0, 8)}`;
    li.title = t.thread_id;
    li.dataset.threadId = t.thread_id;
    if (t.thread_id === state.thread) li.className = "active";
    li.addEventListener("click", () => openThread(t.thread_id).catch((e) => status(e.message, true)));
    list.appendChild(li);
  }
}

async function loadHistory() {
  const list = $("history");
  list.textContent = "";
  if (!state.thread) return;
  const states = await api("POST", `/threads/${encodeURIComponent(state.thread)}/history`, { limit: 20 });
  for (const s of states) {
    const li = document.createElement("li");
    const count = ((s.values && s.values.messages) || []).length;
    // LangGraph numbers the empty checkpoint a thread starts from -1 (node `input`).
    li.textContent = s.metadata.step < 0
      ? "start · empty thread"
      : `step ${s.metadata.step} · ${s.metadata.node} · ${plural(count, "message")}`;
    list.appendChild(li);
  }
}

async function start() {
  $("api-key").value = localStorage.getItem("keel-api-key") || "";
  try {
    const assistants = await api("POST", "/assistants/search", { limit: 1 });
    if (!assistants.length) throw new Error("the server lists no assistant");
    state.assistant = assistants[0].assistant_id;
    $("assistant").textContent = `assistant: ${assistants[0].name}`;
    await loadThreads();
    status("");
  } catch (err) {
    status(`${err.message} — set the API key if the server needs one`, true);
  }
}

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const message = $("input").value;
  $("input").value = "";
  send(message);
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
$("api-key").addEventListener("change", () => {
  localStorage.setItem("keel-api-key", $("api-key").value.trim());
  state.thread = null;
  render([]);
  start();
});
$("new-thread").addEventListener("click", () => newThread().catch((e) => status(e.message, true)));
start();
