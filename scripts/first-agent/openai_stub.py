#!/usr/bin/env python3
"""A small OpenAI-compatible chat-completions server for scripts/first-agent-tests.sh.

Speaks the protocol a real server speaks (POST /v1/chat/completions, streamed as
server-sent events or not, tool calls, usage) with deterministic answers, so the guide's
agent can be checked offline:

- a user message naming an order (ORD-1234) in a request that offers tools gets a
  `lookup_order` tool call;
- a request ending with a tool result gets an answer quoting it;
- anything else (including summary requests) gets a short answer built from the last
  message.

Usage: openai_stub.py PORT_FILE  (binds 127.0.0.1 on a free port, writes the port to
PORT_FILE, serves until killed). Every request is logged to stderr as one JSON line.
"""

import json
import re
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "stub-model"


def text_of(message):
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def answer(body):
    """The assistant message for a request: (content, tool_calls)."""
    messages = body.get("messages", [])
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return f"Here is what I found: {text_of(last)}.", None
    text = text_of(last)
    order = re.search(r"ORD-\d+", text)
    if body.get("tools") and last.get("role") == "user" and order:
        call = {
            "id": f"call_{order.group(0).replace('-', '_').lower()}_{int(time.time() * 1000) % 100000}",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": order.group(0)})},
        }
        return None, [call]
    if not body.get("tools") and "summar" in text.lower():
        return "Summary: Ada from Northwind asked about orders held at customs; EU warehouse in Rotterdam.", None
    first = " ".join(text.split()[:12])
    return f"Understood ({len(messages)} messages so far): {first}", None


def usage(body, content):
    prompt = sum(len(text_of(m)) for m in body.get("messages", [])) // 4 + 1
    completion = len(content or "") // 4 + 1
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # the JSON line below replaces the access log
        pass

    def send(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            self.send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        else:
            self.send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as e:
            self.send(400, {"error": {"message": f"invalid JSON: {e}", "type": "invalid_request_error"}})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self.send(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return
        content, calls = answer(body)
        print(json.dumps({"messages": len(body.get("messages", [])), "tools": bool(body.get("tools")),
                          "stream": bool(body.get("stream")), "tool_call": bool(calls)}),
              file=sys.stderr, flush=True)
        created = int(time.time())
        model = body.get("model", MODEL)
        if not body.get("stream"):
            message = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            self.send(200, {
                "id": "chatcmpl-stub", "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": usage(body, content),
            })
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()

        def chunk(delta, finish=None, extra=None):
            payload = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": created,
                       "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if extra:
                payload.update(extra)
            self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            self.wfile.flush()

        chunk({"role": "assistant", "content": ""})
        if calls:
            chunk({"tool_calls": [dict(call, index=i) for i, call in enumerate(calls)]})
            chunk({}, "tool_calls")
        else:
            words = content.split(" ")
            for i, word in enumerate(words):
                chunk({"content": word if i == 0 else " " + word})
            chunk({}, "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            payload = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": created,
                       "model": model, "choices": [], "usage": usage(body, content)}
            self.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: openai_stub.py PORT_FILE")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1], "w") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
