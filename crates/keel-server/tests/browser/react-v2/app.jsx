// A chat page on @langchain/react's useStream, the hook that speaks the thread-centric
// streaming protocol (POST /threads/{id}/commands, POST /threads/{id}/stream/events):
// react_v2_test.mjs drives it in Chromium. Query: ?api=URL[&thread=ID].
import React, { useState } from "react";
import { createRoot } from "react-dom/client";
import { useStream } from "@langchain/react";

const params = new URLSearchParams(location.search);
const apiUrl = params.get("api");

function text(message) {
  const content = message.content ?? message.text ?? "";
  return typeof content === "string" ? content : content.map((p) => p.text ?? "").join("");
}

function kind(message) {
  return message.type ?? (typeof message.getType === "function" ? message.getType() : message.role);
}

function Chat() {
  const [threadId, setThreadId] = useState(params.get("thread"));
  const stream = useStream({
    apiUrl,
    assistantId: "agent",
    threadId,
    onThreadId: setThreadId,
  });
  const [draft, setDraft] = useState("");
  return (
    <div>
      <div id="status" data-loading={String(stream.isLoading)} data-thread={threadId ?? ""}>
        {stream.isLoading ? "answering" : "idle"}
      </div>
      {stream.error ? <p id="error">{String(stream.error)}</p> : null}
      <ol id="messages">
        {(stream.messages ?? []).map((m, i) => (
          <li key={m.id ?? i} className="message" data-type={kind(m)}>
            {text(m)}
          </li>
        ))}
      </ol>
      <input id="input" value={draft} onChange={(e) => setDraft(e.target.value)} />
      <button
        id="send"
        disabled={stream.isLoading}
        onClick={() => {
          const content = draft;
          setDraft("");
          void stream.submit({ messages: [{ type: "human", content }] });
        }}
      >
        send
      </button>
    </div>
  );
}

createRoot(document.getElementById("root")).render(<Chat />);
