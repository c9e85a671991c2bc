// A chat page on the LangGraph SDK's React hook, useStream, wired as agent-chat-ui wires
// it (fetchStateHistory, regenerate and edit from a message's parent checkpoint, resume
// of an interrupt, threads found by graph_id): usestream_test.mjs drives it in Chromium.
// Query: ?api=URL[&thread=ID].
import React, { useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { useStream } from "@langchain/langgraph-sdk/react";
import { Client } from "@langchain/langgraph-sdk";

const params = new URLSearchParams(location.search);
const apiUrl = params.get("api");

function text(message) {
  return typeof message.content === "string"
    ? message.content
    : message.content.map((p) => p.text ?? "").join("");
}

function Threads({ onPick }) {
  const [threads, setThreads] = useState(null);
  useEffect(() => {
    new Client({ apiUrl })
      .threads.search({ metadata: { graph_id: "agent" }, limit: 50 })
      .then(setThreads, (e) => setThreads({ error: String(e) }));
  }, []);
  if (!threads) return <p>loading threads</p>;
  if (threads.error) return <p id="threads-error">{threads.error}</p>;
  return (
    <ul id="threads">
      {threads.map((t) => (
        <li key={t.thread_id}>
          <button data-thread={t.thread_id} onClick={() => onPick(t.thread_id)}>
            {t.thread_id}
          </button>
        </li>
      ))}
    </ul>
  );
}

function Chat({ threadId, setThreadId }) {
  const stream = useStream({
    apiUrl,
    assistantId: "agent",
    messagesKey: "messages",
    threadId,
    onThreadId: setThreadId,
    fetchStateHistory: true,
  });
  const [draft, setDraft] = useState("");
  const [editing, setEditing] = useState(null);
  const send = (content) =>
    stream.submit(
      { messages: [{ type: "human", content }] },
      {
        streamMode: ["values"],
        optimisticValues: (prev) => ({
          ...prev,
          messages: [...(prev.messages ?? []), { type: "human", content }],
        }),
      },
    );
  const regenerate = (message) => {
    const meta = stream.getMessagesMetadata(message);
    stream.submit(undefined, {
      checkpoint: meta?.firstSeenState?.parent_checkpoint,
      streamMode: ["values"],
    });
  };
  const edit = (message, content) => {
    const meta = stream.getMessagesMetadata(message);
    stream.submit(
      { messages: [{ type: "human", content }] },
      { checkpoint: meta?.firstSeenState?.parent_checkpoint, streamMode: ["values"] },
    );
  };
  return (
    <div>
      <div id="status" data-loading={String(stream.isLoading)} data-thread={threadId ?? ""}>
        {stream.isLoading ? "answering" : "idle"}
      </div>
      {stream.error ? <div id="error">{String(stream.error)}</div> : null}
      <ol id="messages">
        {stream.messages.map((m, i) => (
          <li key={m.id ?? i} className="msg" data-type={m.type}>
            <span className="text">{text(m)}</span>
            {m.type === "ai" && !m.tool_calls?.length ? (
              <button className="regenerate" onClick={() => regenerate(m)}>regenerate</button>
            ) : null}
            {m.type === "human" ? (
              <button className="edit" onClick={() => setEditing(m)}>edit</button>
            ) : null}
          </li>
        ))}
      </ol>
      {stream.interrupt ? (
        <div id="interrupt">
          {JSON.stringify(stream.interrupt.value)}
          <button
            id="approve"
            onClick={() =>
              stream.submit(undefined, {
                command: { resume: { decisions: [{ type: "approve" }] } },
              })
            }
          >
            approve
          </button>
        </div>
      ) : null}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (editing) edit(editing, draft);
          else send(draft);
          setEditing(null);
          setDraft("");
        }}
      >
        <input id="input" value={draft} onChange={(e) => setDraft(e.target.value)} />
        <button id="send" type="submit">{editing ? "save edit" : "send"}</button>
      </form>
    </div>
  );
}

function App() {
  const [threadId, setThreadId] = useState(params.get("thread"));
  const [picking, setPicking] = useState(params.has("pick"));
  if (picking) return <Threads onPick={(id) => { setThreadId(id); setPicking(false); }} />;
  return <Chat threadId={threadId} setThreadId={setThreadId} />;
}

createRoot(document.getElementById("root")).render(<App />);
