"""`keel serve` as an attacker and a bad day would meet it, over raw HTTP (no SDK
shaping the requests).

- Tenant matrix: alice's thread and run, addressed by bob through every endpoint that
  takes a thread or run id, answers 404 (never 200, 403 or 409), and nothing of
  alice's shows in any answer; alice's own requests keep working.
- Bad-input corpus: malformed JSON, bodies of the wrong type or shape, values out of
  range, ids no backend can store, unknown enums, oversized bodies and metadata, bad
  event and checkpoint ids, wrong content types. Each answers 4xx with a JSON `detail`
  and never 5xx; the server stays up (`/ok`) after all of it.
- Crash: the server is killed with SIGKILL in the middle of a run and started again
  on the same database; the run is then final (error), the thread idle, and a new run
  on it succeeds.

    python adversarial_test.py KEEL_BINARY CONFIG WORKDIR [--repeat N]

`--repeat N` sends the corpus N times (CI: 1; the documented full size: 20, with
concurrent senders).
"""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

BINARY, CONFIG, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
REPEAT = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 1
KEYS = "alice-key-1=alice,bob-key-22=bob"
ALICE, BOB = "alice-key-1", "bob-key-22"
SECRET = "ADVERSARIAL-SECRET-0042"


def start(db):
    log = open(os.path.join(WORK, "adversarial.log"), "a")
    proc = subprocess.Popen(
        [BINARY, "serve", "--config", CONFIG, "--port", "0", "--database", f"sqlite://{db}", "--api-keys", KEYS],
        stdout=subprocess.PIPE, stderr=log, text=True,
    )
    line = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not m:
        raise RuntimeError(f"keel serve did not start: {line!r}")
    return proc, int(m.group(1))


class Client:
    def __init__(self, port):
        self.port = port

    def send(self, method, path, body=None, key=None, headers=None, raw=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        h = {"Host": f"127.0.0.1:{self.port}"}
        if key:
            h["x-api-key"] = key
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        conn.close()
        return resp.status, text


def main():
    passed = failed = 0

    def check(name, cond, detail=""):
        nonlocal passed, failed
        if cond:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {name}: {str(detail)[:300]}")

    os.makedirs(WORK, exist_ok=True)
    db = os.path.join(WORK, "adversarial.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    proc, port = start(db)
    c = Client(port)
    try:
        # --- tenant matrix ---
        s, t = c.send("POST", "/threads", {"thread_id": "alice-thread", "metadata": {"owner_note": SECRET}}, ALICE)
        check("alice creates a thread", s == 200, t)
        s, t = c.send("POST", "/threads/alice-thread/runs/wait", {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": SECRET}]}}, ALICE)
        check("alice runs it", s == 200, t)
        s, t = c.send("GET", "/threads/alice-thread/runs", key=ALICE)
        run = json.loads(t)[0]["run_id"]
        s, t = c.send("GET", "/threads/alice-thread/history", key=ALICE)
        checkpoint = json.loads(t)[0]["checkpoint"]["checkpoint_id"]
        matrix = [
            ("GET", "/threads/alice-thread", None),
            ("PATCH", "/threads/alice-thread", {"metadata": {"x": 1}}),
            ("DELETE", "/threads/alice-thread", None),
            ("GET", "/threads/alice-thread/state", None),
            ("GET", f"/threads/alice-thread/state/{checkpoint}", None),
            ("GET", "/threads/alice-thread/history", None),
            ("POST", "/threads/alice-thread/history", {"limit": 5}),
            ("GET", "/threads/alice-thread/runs", None),
            ("POST", "/threads/alice-thread/runs", {"assistant_id": "agent", "input": {"messages": []}}),
            ("POST", "/threads/alice-thread/runs/wait", {"assistant_id": "agent", "input": {"messages": []}}),
            ("POST", "/threads/alice-thread/runs/stream", {"assistant_id": "agent", "input": {"messages": []}}),
            ("GET", f"/threads/alice-thread/runs/{run}", None),
            ("DELETE", f"/threads/alice-thread/runs/{run}", None),
            ("POST", f"/threads/alice-thread/runs/{run}/cancel", None),
            ("GET", f"/threads/alice-thread/runs/{run}/join", None),
            ("GET", f"/threads/alice-thread/runs/{run}/stream", None),
        ]
        for method, path, body in matrix:
            s, t = c.send(method, path, body, BOB)
            check(f"bob {method} {path} answers 404", s == 404, (s, t))
            check(f"bob {method} {path} shows nothing of alice's", SECRET not in t and run not in t, t)
        s, t = c.send("POST", "/threads/search", {"limit": 100}, BOB)
        check("bob's search lists none of alice's threads", s == 200 and "alice-thread" not in t, t)
        s, t = c.send("POST", "/threads", {"thread_id": "alice-thread"}, BOB)
        check("bob may use alice's id for a thread of his own", s == 200, t)
        s, t = c.send("GET", "/threads/alice-thread", key=BOB)
        check("bob's thread of that id has none of alice's metadata", s == 200 and SECRET not in t, t)
        s, t = c.send("GET", "/threads/alice-thread/state", key=ALICE)
        check("alice's thread is untouched", s == 200 and SECRET in t, t)
        s, t = c.send("GET", "/threads/alice-thread", key=None)
        check("no key: 401", s == 401, t)
        s, t = c.send("GET", "/threads/alice-thread", key="wrong-key-123")
        check("a wrong key: 401", s == 401, t)

        # --- bad-input corpus ---
        thread = "bad-input-thread"
        c.send("POST", "/threads", {"thread_id": thread}, ALICE)
        runs = f"/threads/{thread}/runs"
        big = "x" * (3 * 1024 * 1024)
        corpus = [
            ("POST", "/threads", None, b"{not json"),
            ("POST", "/threads", None, b'"a string"'),
            ("POST", "/threads", None, b"[1, 2, 3]"),
            ("POST", "/threads", None, b"null"),
            ("POST", "/threads", {"thread_id": ""}, None),
            ("POST", "/threads", {"thread_id": "a\u0000b"}, None),
            ("POST", "/threads", {"thread_id": "tab\there"}, None),
            ("POST", "/threads", {"thread_id": "y" * 300}, None),
            ("POST", "/threads", {"thread_id": 42}, None),
            ("POST", "/threads", {"metadata": "not an object"}, None),
            ("POST", "/threads", {"metadata": {"blob": "m" * (70 * 1024)}}, None),
            ("POST", "/threads", {"if_exists": "explode"}, None),
            ("POST", "/threads", {"ttl": {"strategy": "delete", "ttl": 1}}, None),
            ("POST", "/threads", None, big.encode()),
            ("POST", "/threads/search", {"limit": -1}, None),
            ("POST", "/threads/search", {"limit": "ten"}, None),
            ("POST", "/threads/search", {"status": "sleeping"}, None),
            ("POST", "/threads/search", {"sort_by": "DROP TABLE"}, None),
            ("POST", "/threads/search", {"sort_order": "sideways"}, None),
            ("POST", "/threads/search", {"values": {"a": 1}}, None),
            ("POST", runs, {"assistant_id": "agent", "input": "hello"}, None),
            ("POST", runs, {"assistant_id": "agent", "input": {"messages": 5}}, None),
            ("POST", runs, {"assistant_id": "agent", "input": {"messages": [{"role": "wizard", "content": "x"}]}}, None),
            ("POST", runs, {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": 5}]}}, None),
            ("POST", runs, {"assistant_id": "no-such-assistant", "input": {"messages": []}}, None),
            ("POST", runs, {"assistant_id": "agent", "multitask_strategy": "chaos", "input": {"messages": []}}, None),
            ("POST", runs, {"assistant_id": "agent", "stream_mode": ["telepathy"], "input": {"messages": []}}, None),
            ("POST", runs, {"assistant_id": "agent", "command": {"resume": {"decisions": []}}}, None),
            ("POST", runs, {"assistant_id": "agent", "checkpoint_id": "not-a-checkpoint", "input": {"messages": []}}, None),
            ("POST", runs, {"assistant_id": "agent", "on_disconnect": "explode", "input": {"messages": []}}, None),
            ("POST", runs, {"assistant_id": "agent", "input": {"messages": []}, "metadata": [1]}, None),
            ("GET", f"/threads/{thread}/state/not-a-checkpoint", None, None),
            ("GET", f"/threads/{thread}/history?limit=lots", None, None),
            ("GET", f"/threads/{thread}/runs?status=flying", None, None),
            ("GET", f"/threads/{thread}/runs/not-a-run", None, None),
            ("GET", "/threads/a%00b", None, None),
            ("GET", "/no/such/endpoint", None, None),
            ("PUT", "/threads", None, None),
        ]
        text_plain = [
            ("POST", "/threads", b"{}", {"Content-Type": "text/plain"}),
            ("POST", "/runs/wait", b'{"assistant_id": "agent", "input": {"messages": []}}', {"Content-Type": "application/x-www-form-urlencoded"}),
            ("POST", "/threads", b"{}", {"Origin": "https://evil.example", "Content-Type": "application/json"}),
        ]

        def send_corpus(_):
            results = []
            for method, path, body, raw in corpus:
                results.append((method, path, *c.send(method, path, body, ALICE, raw=raw)))
            for method, path, raw, headers in text_plain:
                results.append((method, path, *c.send(method, path, key=None if "Origin" in headers else ALICE, headers=headers, raw=raw)))
            return results

        with ThreadPoolExecutor(max_workers=min(REPEAT, 8)) as pool:
            rounds = list(pool.map(send_corpus, range(REPEAT)))
        for results in rounds:
            for method, path, s, t in results:
                label = f"{method} {path[:60]}"
                check(f"{label} answers 4xx", 400 <= s < 500, (s, t))
                try:
                    detail = json.loads(t).get("detail")
                except (ValueError, AttributeError):
                    detail = None
                check(f"{label} answers a JSON detail", isinstance(detail, str) and detail, t)
        s, t = c.send("GET", "/ok")
        check("the server is up after the corpus", s == 200, t)

        # Origin without keys is refused only when keys are off; here keys are on, so
        # the request above was refused by the missing key (401), not by the origin.

        # --- kill -9 in the middle of a run, then restart on the same database ---
        c.send("POST", "/threads", {"thread_id": "crash-thread"}, ALICE)
        s, t = c.send("POST", "/threads/crash-thread/runs", {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "a long one " + "y " * 2000}]}}, ALICE)
        check("a run starts before the crash", s == 200, t)
        crashed = json.loads(t)["run_id"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc, port = start(db)
        c = Client(port)
        s, t = c.send("GET", f"/threads/crash-thread/runs/{crashed}", key=ALICE)
        status = json.loads(t).get("status") if s == 200 else None
        check("after kill -9 and a restart the run is final", status in ("error", "success"), (s, t))
        s, t = c.send("GET", "/threads/crash-thread", key=ALICE)
        check("and the thread is idle", s == 200 and json.loads(t)["status"] == "idle", t)
        s, t = c.send("POST", "/threads/crash-thread/runs/wait", {"assistant_id": "agent", "input": {"messages": [{"role": "user", "content": "after the crash"}]}}, ALICE)
        check("a new run on it succeeds", s == 200 and "__error__" not in t, t)
        s, t = c.send("GET", "/threads/alice-thread/state", key=ALICE)
        check("what was stored before the crash is still there", s == 200 and SECRET in t, t)
    finally:
        proc.kill()
        proc.wait()
    print(f"{passed} passed, {failed} failed")
    return failed


if __name__ == "__main__":
    try:
        sys.exit(1 if main() else 0)
    except Exception:
        traceback.print_exc()
        sys.exit(1)
