"""A recording pass-through in front of LiteLLM's proxy: every Messages API request
body Keel sends is appended to a JSONL file (so scripts/anthropic-tests.sh can check
it against the official `anthropic` SDK's request types), then forwarded unchanged,
and the answer (JSON or an event stream) relayed back as it arrives. Test double only.

    python recording_proxy.py PORT UPSTREAM RECORD.jsonl
"""

import json
import sys

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

PORT = int(sys.argv[1])
UPSTREAM = sys.argv[2].rstrip("/")
RECORD = sys.argv[3]
client = httpx.AsyncClient(timeout=120)
HOP = {"host", "content-length", "transfer-encoding", "connection"}


async def forward(request: Request):
    raw = await request.body()
    if request.url.path.endswith("/messages"):
        with open(RECORD, "a") as f:
            f.write(json.dumps({"path": request.url.path,
                                "headers": {k: v for k, v in request.headers.items()
                                            if k.startswith("anthropic-")},
                                "body": json.loads(raw)}) + "\n")
    headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
    upstream = client.build_request(request.method, UPSTREAM + request.url.path,
                                    headers=headers, content=raw)
    reply = await client.send(upstream, stream=True)
    out = {k: v for k, v in reply.headers.items() if k.lower() not in HOP | {"content-encoding"}}
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        async def relay():
            async for part in reply.aiter_bytes():
                yield part
            await reply.aclose()
        return StreamingResponse(relay(), status_code=reply.status_code, headers=out)
    data = await reply.aread()
    return Response(data, status_code=reply.status_code, headers=out)


app = Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST"])])

if __name__ == "__main__":
    print(f"listening on http://127.0.0.1:{PORT}", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning")
