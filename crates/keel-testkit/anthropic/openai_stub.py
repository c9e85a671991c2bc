"""A recording OpenAI-compatible chat-completions server, the backend LiteLLM's proxy
translates Anthropic's Messages API to in scripts/anthropic-tests.sh. Test double only.

It answers by what the request asks, so a whole agent turn runs through it:

- a `tool_choice` naming a function (a forced tool: Keel's structured summary or fold
  call, translated by LiteLLM) -> a call of that function whose arguments fill the
  schema's required string fields;
- tools offered and the last message from the user -> a call of the first tool;
- otherwise -> the text "All green." followed by the last tool result, if any.

Streaming (`stream: true`) answers in OpenAI's chunk format. Every request body is
appended to the JSONL file given as the second argument.

    python openai_stub.py PORT RECORD.jsonl
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1])
RECORD = sys.argv[2]


def answer(body):
    messages = body.get("messages", [])
    tools = body.get("tools") or []
    choice = body.get("tool_choice")
    last = messages[-1] if messages else {}
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = choice["function"]["name"]
        schema = next(
            (t["function"].get("parameters", {}) for t in tools if t["function"]["name"] == name),
            {},
        )
        args = {
            key: "Summary: the user asked for the status; the echo tool said all green."
            for key in schema.get("required", [])
        }
        return {"tool_calls": [(name, args)]}
    if tools and last.get("role") == "user":
        name = tools[0]["function"]["name"]
        return {"tool_calls": [(name, {"text": "status"})]}
    results = [m for m in messages if m.get("role") == "tool"]
    text = "All green."
    if results:
        content = results[-1].get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content)
        text += " " + str(content)
    return {"text": text}


def usage(body):
    prompt = len(json.dumps(body.get("messages", []))) // 4
    return {"prompt_tokens": prompt, "completion_tokens": 12, "total_tokens": prompt + 12}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path.endswith("/models"):
            self.send_json({"object": "list", "data": [{"id": "stub-model", "object": "model"}]})
        else:
            self.send_error(404)

    def send_json(self, doc, status=200):
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        if not self.path.endswith("/chat/completions"):
            self.send_error(404)
            return
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        with open(RECORD, "a") as f:
            f.write(json.dumps(body) + "\n")
        reply = answer(body)
        calls = [
            {"id": f"call_{i}_{int(time.time() * 1000)}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in enumerate(reply.get("tool_calls", []))
        ]
        finish = "tool_calls" if calls else "stop"
        base = {"id": "chatcmpl-stub", "created": int(time.time()), "model": body.get("model", "stub-model")}
        if not body.get("stream"):
            message = {"role": "assistant", "content": reply.get("text")}
            if calls:
                message["tool_calls"] = calls
            self.send_json({**base, "object": "chat.completion",
                            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                            "usage": usage(body)})
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()

        def chunk(delta, finish_reason=None, **extra):
            doc = {**base, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}], **extra}
            self.wfile.write(f"data: {json.dumps(doc)}\n\n".encode())
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""})
        text = reply.get("text") or ""
        for i in range(0, len(text), 4):
            chunk({"content": text[i:i + 4]})
        for i, call in enumerate(calls):
            args = call["function"]["arguments"]
            chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                   "function": {"name": call["function"]["name"], "arguments": ""}}]})
            for j in range(0, len(args), 8):
                chunk({"tool_calls": [{"index": i, "function": {"arguments": args[j:j + 8]}}]})
        chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            doc = {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage(body)}
            self.wfile.write(f"data: {json.dumps(doc)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    print(f"listening on http://127.0.0.1:{PORT}", flush=True)
    server.serve_forever()
