#!/usr/bin/env python3
"""Generate the bundled support session `examples/sessions/support-prj123.jsonl`.

The scenario of the Langflow feature request #15799 made concrete: a support engineer and an assistant spend an
hour on project PRJ-123 on the EU cluster. The first user message names the project and
the cluster; then 60 exchanges of troubleshooting follow, with tool calls (some of them
parallel), a pasted error log of several thousand words, skill-file reads under
/mnt/skills, and decisions along the way; the last question is "Which cluster were we on
again?".

Output is one message per line in Keel's JSONL shape: the serde form of
`keel_core::message::Message` (OpenAI chat shape plus a stable `id`). Keys come in the
order serde writes them and tool-call arguments are compact JSON with sorted keys, so the
file round-trips byte for byte through `Message` (checked by keel-replay's tests).

Deterministic: the same `--seed` and `--exchanges` always give the same bytes. Vary them
to get other sessions of the same shape:

    python3 scripts/gen_session.py                       # the bundled session
    python3 scripts/gen_session.py --seed 7 --exchanges 90 -o /tmp/long.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "examples/sessions/support-prj123.jsonl"

SYSTEM_PROMPT = (
    "You are the on-call support assistant for Acme Cloud's managed platform team. "
    "You help support engineers troubleshoot customer deployments. Use the tools to look "
    "at pods, logs, metrics and deploy history instead of guessing; read the matching "
    "skill file under /mnt/skills before following a procedure. Keep answers concrete: "
    "commands, numbers, next steps. Never run a destructive action without the engineer's "
    "explicit go-ahead."
)

# ---------------------------------------------------------------------------------------
# Skill files: what `read_file` returns for /mnt/skills/<skill>/SKILL.md.
# ---------------------------------------------------------------------------------------

SKILLS = {
    "incident-triage": {
        "description": "First response for a customer-reported production problem.",
        "sections": [
            ("When to use", [
                "A customer or monitor reports errors, latency or data loss in a managed deployment.",
                "You do not yet know whether the problem is in the customer's code, our platform, or a dependency.",
            ]),
            ("Steps", [
                "Confirm scope: project id, cluster, namespace, affected services, first error time (UTC).",
                "Check recent changes first: deploy history for the affected services over the last 24 hours, config map edits, node pool upgrades.",
                "Look at pod health: restarts, OOMKilled, CrashLoopBackOff, pending pods. Note the node each failing pod runs on.",
                "Pull the last 30 minutes of logs for one failing pod and one healthy pod; compare the first error, not the loudest one.",
                "Check the golden signals for the service: request rate, error rate, p50/p99 latency, saturation (CPU, memory, connection pools).",
                "If errors started within 15 minutes of a deploy, treat the deploy as the prime suspect until ruled out.",
                "Decide severity with the matrix below and open an incident if it is SEV-2 or worse.",
                "Tell the customer what you know within 30 minutes of the report, even if it is only 'we are investigating'.",
            ]),
            ("Severity matrix", [
                "SEV-1: full outage or data loss for a production workload; page the platform on-call immediately.",
                "SEV-2: a major function is degraded (failed jobs, error rate above 5%) with no workaround.",
                "SEV-3: degraded with a workaround, or a single non-critical job failing.",
                "SEV-4: cosmetic or questions.",
            ]),
            ("Do not", [
                "Do not restart pods before you have captured their logs; a restart loses the evidence.",
                "Do not scale a database-bound service up before checking the database's connection limit.",
                "Do not promise a root cause to the customer before it is confirmed by two independent signals.",
            ]),
        ],
    },
    "postgres-diagnostics": {
        "description": "Diagnose connection, lock and latency problems between a service and managed PostgreSQL.",
        "sections": [
            ("Connection exhaustion", [
                "Compare the pool size of every client (HikariCP maximumPoolSize, pgbouncer default_pool_size) times the number of replicas with max_connections on the server.",
                "Query pg_stat_activity grouped by application_name and state; many 'idle in transaction' sessions point at a leak, many 'active' ones at slow queries.",
                "A pool timeout ('Connection is not available, request timed out after 30000ms') means the client pool is exhausted, not the server: check pool size and how long each borrower holds a connection.",
                "If the server rejects connections ('FATAL: sorry, too many clients already'), the sum of pools is above max_connections.",
            ]),
            ("Locks", [
                "Look for blocked queries with pg_blocking_pids(); a long-running migration or an explicit LOCK TABLE is the usual cause.",
                "Never kill a backend that holds locks for a migration without the owner's consent.",
            ]),
            ("Latency", [
                "Compare p99 query time in pg_stat_statements before and after the incident window.",
                "Check replica lag if the service reads from replicas; lag above 5 seconds makes read-after-write flows fail.",
                "TLS handshake failures to a replica after a certificate rotation show as 'SSL error: certificate verify failed' on the client.",
            ]),
            ("Commands", [
                "psql \"$DATABASE_URL\" -c \"select application_name, state, count(*) from pg_stat_activity group by 1,2 order by 3 desc\"",
                "psql \"$DATABASE_URL\" -c \"select pid, pg_blocking_pids(pid), wait_event, left(query, 80) from pg_stat_activity where cardinality(pg_blocking_pids(pid)) > 0\"",
                "kubectl -n <ns> exec deploy/<svc> -- env | grep -i -E 'pool|jdbc|database'",
            ]),
        ],
    },
    "kubernetes-rollback": {
        "description": "Roll a managed service back to its previous release safely.",
        "sections": [
            ("Preconditions", [
                "The engineer on the ticket has approved the rollback in writing (the ticket or this conversation).",
                "The previous release is known good: it ran for at least 24 hours without a SEV-2 or worse.",
                "Database migrations shipped with the new release are backward compatible; if not, stop and escalate to the service owner.",
            ]),
            ("Procedure", [
                "Record the current revision: kubectl -n <ns> rollout history deploy/<svc>.",
                "Freeze deploys for the service in the release tool so CI does not roll forward again during the incident.",
                "Roll back: kubectl -n <ns> rollout undo deploy/<svc> --to-revision=<n>.",
                "Watch the rollout: kubectl -n <ns> rollout status deploy/<svc> --timeout=10m.",
                "Verify: error rate back under 1% and p99 latency within 20% of last week's baseline for 15 minutes.",
                "Post the before/after numbers in the incident channel and the ticket.",
            ]),
            ("After the rollback", [
                "Keep the deploy freeze until a fix-forward release is reviewed.",
                "Backlogs built up during the incident must be replayed deliberately, in bounded batches, never all at once.",
                "Write down which feature flags were on during the bad release; a fix-forward must not silently flip them.",
            ]),
        ],
    },
    "kafka-consumer-lag": {
        "description": "Read and reduce consumer lag on the platform's managed Kafka.",
        "sections": [
            ("Reading lag", [
                "Lag is per partition: the log-end offset minus the group's committed offset. Sum it per topic for the dashboard, but act on the worst partition.",
                "A lag that grows linearly means the consumer is down or stuck; a lag that grows with traffic means it is too slow.",
                "Rebalances show as lag spikes on every partition at once; check the consumer logs for 'Revoking previously assigned partitions'.",
            ]),
            ("Reducing lag", [
                "Do not add consumers beyond the partition count; extra consumers sit idle.",
                "If the consumer is database-bound, more consumers make it worse: fix the database side first.",
                "Replaying a backlog: pause the live consumer only if ordering matters; otherwise replay in batches with a rate limit the database can absorb.",
            ]),
            ("Commands", [
                "kafka-consumer-groups --bootstrap-server $KAFKA --describe --group <group>",
                "kafka-consumer-groups --bootstrap-server $KAFKA --reset-offsets --group <group> --topic <t> --to-datetime <iso> --dry-run",
            ]),
        ],
    },
    "customer-comms": {
        "description": "Write incident updates to customers.",
        "sections": [
            ("Tone and content", [
                "Lead with impact in the customer's terms (orders not synced, jobs failed), then what we did, then what happens next and when.",
                "Give times in UTC. Give numbers, not adjectives.",
                "Never name another customer, never blame a person, never speculate about root cause before it is confirmed.",
                "Say when the next update will come and keep that promise even if there is nothing new.",
            ]),
            ("Cadence", [
                "SEV-1: every 30 minutes. SEV-2: every hour, or as agreed with the customer's contact. SEV-3: daily.",
            ]),
            ("Template", [
                "Subject: [<SEV>] <service> - <one-line impact> - update <n>",
                "Body: Impact / Timeline (UTC) / What we have done / Next steps / Next update at <time UTC>.",
            ]),
        ],
    },
    "postmortem": {
        "description": "Write a blameless postmortem after a SEV-2 or worse.",
        "sections": [
            ("Structure", [
                "Summary: three sentences a customer could read.",
                "Impact: duration, affected customers and projects, failed requests or jobs, data loss (or 'none').",
                "Timeline in UTC, from the triggering change to full recovery, with who noticed what.",
                "Root cause and contributing factors, each backed by evidence (graphs, log lines, config diffs).",
                "What went well, what went badly, where we were lucky.",
                "Action items: each with an owner, a due date and a ticket; prefer guardrails over reminders.",
            ]),
            ("Rules", [
                "Blameless: describe decisions and the information available at the time, not people's failings.",
                "Publish the draft within two business days of the incident.",
            ]),
        ],
    },
}


def skill_text(name: str) -> str:
    skill = SKILLS[name]
    out = [
        "---",
        f"name: {name}",
        f"description: {skill['description']}",
        "---",
        "",
        f"# {name.replace('-', ' ').title()}",
        "",
        skill["description"],
        "",
    ]
    for title, items in skill["sections"]:
        out.append(f"## {title}")
        out.append("")
        numbered = title in ("Steps", "Procedure")
        for i, item in enumerate(items, 1):
            out.append(f"{i}. {item}" if numbered else f"- {item}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------------------------------
# Tool results.
# ---------------------------------------------------------------------------------------

PODS = ["orders-sync-6f9c7d5b8-2kq4x", "orders-sync-6f9c7d5b8-7hnm2", "orders-sync-6f9c7d5b8-c8vzt",
        "orders-sync-6f9c7d5b8-jx5wd", "orders-sync-6f9c7d5b8-pq9rl", "orders-sync-6f9c7d5b8-w2t7f"]
NODES = ["ip-10-42-11-87", "ip-10-42-12-14", "ip-10-42-13-201", "ip-10-42-11-93"]


def pods_table(rng: random.Random, healthy: bool) -> str:
    rows = ["NAME                           READY   STATUS             RESTARTS   AGE    NODE"]
    for pod in PODS:
        if healthy:
            status, restarts, ready = "Running", rng.randint(0, 1), "1/1"
        else:
            status = rng.choice(["Running", "Running", "CrashLoopBackOff", "Running"])
            restarts = rng.randint(3, 14) if status != "Running" else rng.randint(0, 4)
            ready = "0/1" if status != "Running" else "1/1"
        rows.append(f"{pod:<30} {ready:<7} {status:<18} {restarts:<10} {rng.randint(20, 95)}m    {rng.choice(NODES)}")
    if not healthy:
        rows += ["", "EVENTS (last 45m)", "LAST SEEN   TYPE      REASON      OBJECT                             MESSAGE"]
        for _ in range(14):
            pod = rng.choice(PODS)
            reason, message = rng.choice([
                ("Unhealthy", "Liveness probe failed: Get \"http://10.42.12.31:8080/healthz\": context deadline exceeded"),
                ("Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503"),
                ("BackOff", "Back-off restarting failed container orders-sync in pod"),
                ("Killing", "Container orders-sync failed liveness probe, will be restarted"),
                ("Pulled", "Container image \"registry.acme.example/orders-sync:2.4.0\" already present on machine"),
                ("Started", "Started container orders-sync"),
            ])
            rows.append(f"{rng.randint(1, 44):>2}m         Warning   {reason:<11} pod/{pod:<31} {message}")
    return "\n".join(rows)


def deploy_history() -> str:
    return "\n".join([
        "REVISION  RELEASE   DEPLOYED (UTC)         BY                 STATUS",
        "14        v2.2.9    2026-10-28 09:12:44    ci/release-bot     superseded",
        "15        v2.3.0    2026-11-04 08:30:02    ci/release-bot     superseded",
        "16        v2.3.7    2026-11-18 10:05:51    ci/release-bot     superseded",
        "17        v2.4.0    2026-11-30 07:32:18    ci/release-bot     deployed",
        "",
        "v2.4.0 changelog: parallel order fetch (up to 32 concurrent requests per worker), "
        "config defaults moved to orders-sync-defaults.yaml, HikariCP 5.1 upgrade, feature flag batch_v2.",
    ])


def logs_tail(rng: random.Random, n: int, start_minute: int) -> str:
    lines = []
    for i in range(n):
        minute = start_minute + i // 6
        sec = rng.randint(0, 59)
        pod = rng.choice(PODS)
        kind = rng.random()
        if kind < 0.45:
            msg = (f"ERROR o.n.sync.OrderFetcher - fetch batch {rng.randint(40000, 49999)} failed: "
                   "java.sql.SQLTransientConnectionException: HikariPool-1 - Connection is not available, "
                   "request timed out after 30000ms.")
        elif kind < 0.65:
            msg = (f"WARN  com.zaxxer.hikari.pool.HikariPool - HikariPool-1 - Thread starvation or clock leap "
                   f"detected (housekeeper delta={rng.randint(45, 70)}s).")
        elif kind < 0.8:
            msg = (f"ERROR o.n.sync.api.GatewayClient - upstream returned 502 for POST /v1/orders/sync "
                   f"(attempt {rng.randint(1, 3)}/3, {rng.randint(29000, 31000)}ms)")
        else:
            msg = (f"INFO  o.n.sync.Worker - processed {rng.randint(0, 12)} orders in "
                   f"{rng.randint(800, 31000)}ms (queue depth {rng.randint(900, 4000)})")
        lines.append(f"2026-11-30T08:{minute:02d}:{sec:02d}.{rng.randint(0, 999):03d}Z {pod} {msg}")
    return "\n".join(lines)


def dlq_record(rng: random.Random) -> dict:
    """One dead-lettered order, as the queue stores it."""
    sku = rng.choice(["PAL-EUR-1200", "BOX-XL-09", "CRT-200-B"])
    return {
        "order_id": f"NW-{rng.randint(5000000, 5999999)}",
        "external_id": f"ERP-{rng.randint(100000, 999999)}",
        "error": f"validation: unknown SKU '{sku}'",
        "attempts": 5,
        "first_failed_at": f"2026-11-30T0{rng.randint(7, 9)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}Z",
        "payload": {
            "customer": "northwind-logistics",
            "warehouse": rng.choice(["HAM-01", "HAM-02", "BRE-01"]),
            "currency": "EUR",
            "lines": [
                {"sku": sku, "quantity": rng.randint(1, 40), "unit_price": round(rng.uniform(3, 90), 2)},
                {"sku": f"SKU-{rng.randint(10000, 99999)}", "quantity": rng.randint(1, 12),
                 "unit_price": round(rng.uniform(3, 90), 2)},
            ],
            "ship_to": {"name": "Northwind Logistics GmbH", "street": "Am Sandtorkai 48",
                        "postcode": "20457", "city": "Hamburg", "country": "DE"},
            "requested_delivery": f"2026-12-0{rng.randint(2, 9)}",
        },
    }


def pr_diff() -> str:
    """The part of PR #1893 a reviewer would have read: the config moved between files."""
    removed = [
        "spring.datasource.url: jdbc:postgresql://northwind-orders-db.internal:5432/orders",
        "spring.datasource.username: orders_sync",
        "spring.datasource.hikari.maximumPoolSize: 40",
        "spring.datasource.hikari.minimumIdle: 10",
        "spring.datasource.hikari.connectionTimeout: 30000",
        "spring.datasource.hikari.idleTimeout: 600000",
        "spring.datasource.hikari.maxLifetime: 1800000",
        "spring.datasource.hikari.leakDetectionThreshold: 20000",
        "orders.fetch.concurrency: 4",
        "orders.fetch.batchSize: 200",
        "orders.fetch.lockTimeoutSeconds: 30",
        "orders.replica.enabled: true",
        "orders.replica.url: jdbc:postgresql://northwind-orders-db-replica.internal:5432/orders",
        "orders.gateway.timeoutMs: 30000",
        "orders.gateway.retries: 3",
        "management.endpoints.web.exposure.include: health,info,prometheus",
    ]
    added = [
        "datasource:",
        "  url: jdbc:postgresql://northwind-orders-db.internal:5432/orders",
        "  username: orders_sync",
        "  hikari:",
        "    minimumIdle: 10",
        "    connectionTimeout: 30000",
        "    idleTimeout: 600000",
        "    maxLifetime: 1800000",
        "fetch:",
        "  concurrency: 32",
        "  batchSize: 200",
        "  lockTimeoutSeconds: 60",
        "replica:",
        "  enabled: true",
        "  url: jdbc:postgresql://northwind-orders-db-replica.internal:5432/orders",
        "gateway:",
        "  timeoutMs: 30000",
        "  retries: 3",
        "flags:",
        "  batch_v2: true",
    ]
    out = ["--- a/src/main/resources/application.yaml", "+++ /dev/null", "@@ -1,61 +0,0 @@"]
    out += ["-" + line for line in removed]
    out += ["--- /dev/null", "+++ b/src/main/resources/orders-sync-defaults.yaml", "@@ -0,0 +1,58 @@"]
    out += ["+" + line for line in added]
    return "\n".join(out)


def pasted_error_log(rng: random.Random) -> str:
    """A long log as a user would paste it: several thousand words, repetitive, with stack traces."""
    frames = [
        "at com.zaxxer.hikari.pool.HikariPool.createTimeoutException(HikariPool.java:686)",
        "at com.zaxxer.hikari.pool.HikariPool.getConnection(HikariPool.java:179)",
        "at com.zaxxer.hikari.pool.HikariPool.getConnection(HikariPool.java:144)",
        "at com.zaxxer.hikari.HikariDataSource.getConnection(HikariDataSource.java:99)",
        "at org.northwind.sync.db.OrderRepository.lockBatch(OrderRepository.java:212)",
        "at org.northwind.sync.OrderFetcher.fetchParallel(OrderFetcher.java:148)",
        "at org.northwind.sync.OrderFetcher.lambda$run$3(OrderFetcher.java:97)",
        "at java.base/java.util.concurrent.CompletableFuture$AsyncSupply.run(CompletableFuture.java:1768)",
        "at java.base/java.util.concurrent.ThreadPoolExecutor.runWorker(ThreadPoolExecutor.java:1136)",
        "at java.base/java.lang.Thread.run(Thread.java:1583)",
    ]
    out = ["Here's what I grabbed from the pod logs between 07:32 and 08:05 UTC, sorry it's long:", "", "```"]
    minute, sec = 32, 0
    words = 0
    batch = 41200
    while words < 4500:
        sec += rng.randint(1, 9)
        if sec >= 60:
            sec -= 60
            minute += 1
        ts = f"2026-11-30T07:{minute:02d}:{sec:02d}.{rng.randint(0, 999):03d}Z" if minute < 60 else \
            f"2026-11-30T08:{minute - 60:02d}:{sec:02d}.{rng.randint(0, 999):03d}Z"
        pod = rng.choice(PODS)
        thread = f"fetch-pool-{rng.randint(1, 32)}"
        kind = rng.random()
        batch += rng.randint(1, 7)
        if kind < 0.35:
            block = [
                f"{ts} {pod} [{thread}] ERROR o.n.sync.OrderFetcher - fetch batch {batch} failed",
                "java.sql.SQLTransientConnectionException: HikariPool-1 - Connection is not available, request timed out after 30000ms (total=10, active=10, idle=0, waiting=" + str(rng.randint(20, 31)) + ")",
            ] + ["    " + f for f in frames[: rng.randint(5, len(frames))]]
        elif kind < 0.5:
            block = [f"{ts} {pod} [HikariPool-1 housekeeper] WARN  c.z.hikari.pool.HikariPool - HikariPool-1 - "
                     f"Pool stats (total=10, active=10, idle=0, waiting={rng.randint(18, 32)})"]
        elif kind < 0.65:
            block = [f"{ts} {pod} [{thread}] ERROR o.n.sync.api.GatewayClient - upstream returned 502 Bad Gateway "
                     f"for POST /v1/orders/sync after {rng.randint(29000, 31000)}ms (attempt {rng.randint(1, 3)}/3) "
                     f"request_id={rng.getrandbits(64):016x}"]
        elif kind < 0.75:
            block = [
                f"{ts} {pod} [{thread}] ERROR o.n.sync.db.ReplicaRouter - replica read failed, falling back to primary",
                "org.postgresql.util.PSQLException: SSL error: Received fatal alert: handshake_failure",
                "    at org.postgresql.ssl.MakeSSL.convert(MakeSSL.java:43)",
                "    at org.postgresql.core.v3.ConnectionFactoryImpl.enableSSL(ConnectionFactoryImpl.java:584)",
                "    at org.postgresql.core.v3.ConnectionFactoryImpl.tryConnect(ConnectionFactoryImpl.java:168)",
            ]
        elif kind < 0.85:
            block = [f"{ts} {pod} [main] INFO  o.n.sync.Worker - processed {rng.randint(0, 9)} orders in "
                     f"{rng.randint(9000, 31000)}ms, queue depth {rng.randint(1200, 5200)}, "
                     f"retry queue {rng.randint(100, 900)}"]
        elif kind < 0.93:
            block = [f"{ts} {pod} [{thread}] WARN  o.n.sync.OrderFetcher - batch {batch} exceeded deadline "
                     f"({rng.randint(30, 60)}s), re-queueing {rng.randint(50, 200)} orders with backoff "
                     f"{rng.choice([2, 4, 8, 16])}s"]
        else:
            block = [f"{ts} {pod} [kubelet] Liveness probe failed: Get \"http://10.42.{rng.randint(11, 13)}."
                     f"{rng.randint(2, 250)}:8080/healthz\": context deadline exceeded (Client.Timeout exceeded "
                     f"while awaiting headers)"]
        out.extend(block)
        words += sum(len(line.split()) for line in block)
    out.append("```")
    out.append("")
    out.append("The 502s started at the same time as the pool timeouts as far as I can tell.")
    return "\n".join(out)


def metrics_table(rng: random.Random, metric: str, unit: str, lo: float, hi: float, start: str, points: int,
                  trend: str) -> str:
    """A metric per pod and in total, one row per 5-minute step, as `sum by (pod)` returns it."""
    h, m = map(int, start.split(":"))
    short = [p.rsplit("-", 1)[1] for p in PODS]
    rows = [f"query: {metric}{{service=\"orders-sync\",namespace=\"northwind-orders\"}} by (pod)   step: 5m   unit: {unit}",
            "TIME (UTC)  " + "  ".join(f"{p:>9}" for p in short) + "      TOTAL"]
    share = len(PODS) if unit in ("connections", "orders") else 1
    for i in range(points):
        t = m + 5 * i
        frac = i / max(points - 1, 1)
        if trend == "up":
            base = lo + (hi - lo) * frac
        elif trend == "down":
            base = hi - (hi - lo) * frac
        else:
            base = lo + (hi - lo) * rng.random()
        per_pod = [base / share * (1 + rng.uniform(-0.08, 0.08)) for _ in PODS]
        total = sum(per_pod) if share > 1 else sum(per_pod) / len(per_pod)
        rows.append(f"{h + t // 60:02d}:{t % 60:02d}       " + "  ".join(f"{v:>9,.1f}" for v in per_pod)
                    + f"  {total:>9,.1f}")
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------
# The session writer.
# ---------------------------------------------------------------------------------------


class Session:
    """Appends messages in the exact serde form of keel_core::message::Message."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0
        self.calls = 0

    def _id(self) -> str:
        self.count += 1
        return f"prj123-m{self.count:04d}"

    def _emit(self, obj: dict) -> None:
        self.lines.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))

    def system(self, text: str) -> None:
        self._emit({"role": "system", "content": text, "id": self._id()})

    def user(self, text: str) -> None:
        self._emit({"role": "user", "content": text, "id": self._id()})

    def ai(self, text: str) -> None:
        self._emit({"role": "assistant", "content": text, "id": self._id()})

    def tools(self, text: str, calls: list[tuple[str, dict, str]]) -> None:
        """One AI message with one or more (parallel) tool calls, then their results in order."""
        mid = self._id()
        wire = []
        ids = []
        for name, args, _ in calls:
            self.calls += 1
            call_id = f"call_{self.calls:03d}"
            ids.append(call_id)
            wire.append({
                "id": call_id,
                "type": "function",
                "function": {"name": name,
                             "arguments": json.dumps(args, sort_keys=True, separators=(",", ":"))},
            })
        self._emit({"role": "assistant", "content": text, "tool_calls": wire, "id": mid})
        for call_id, (name, _, result) in zip(ids, calls):
            self._emit({"role": "tool", "content": result, "tool_call_id": call_id, "id": self._id(),
                        "name": name})


def read_skill(name: str) -> tuple[str, dict, str]:
    return ("read_file", {"path": f"/mnt/skills/{name}/SKILL.md"}, skill_text(name))


# ---------------------------------------------------------------------------------------
# The story. Each function is one exchange: a user message, tool rounds, a final answer.
# ---------------------------------------------------------------------------------------


def story(s: Session, rng: random.Random, exchanges: int) -> None:
    s.system(SYSTEM_PROMPT)

    scripted = []

    def ex(fn):
        scripted.append(fn)
        return fn

    @ex
    def opening():
        s.user("Hi! I'm working on project PRJ-123 on the EU cluster. The customer is Northwind Logistics; "
               "their order sync jobs have been failing since this morning and their ops team is getting "
               "paged. Can you help me troubleshoot?")
        s.tools("I'll start with our incident triage procedure.", [read_skill("incident-triage")])
        s.ai("Sure. Following the triage procedure, here is the plan:\n\n"
             "1. Confirm scope: which services are affected and when the first error appeared (UTC).\n"
             "2. Check recent changes: deploy history of the sync services over the last 24 hours.\n"
             "3. Pod health: restarts, CrashLoopBackOff, pending pods.\n"
             "4. Logs from one failing and one healthy pod, looking for the *first* error.\n"
             "5. Golden signals: rate, errors, latency, saturation (including DB connection pools).\n\n"
             "Can you tell me which jobs fail, what error the customer sees, and roughly when it started?")

    @ex
    def symptoms():
        s.user("It's the orders-sync service in namespace northwind-orders. Customer sees HTTP 502 from our "
               "API gateway when their ERP pushes orders, and the hourly reconciliation job failed at 08:00. "
               "First alert fired at 07:41 UTC.")
        s.tools("", [
            ("get_pods", {"namespace": "northwind-orders", "selector": "app=orders-sync"}, pods_table(rng, False)),
            ("get_deploy_history", {"namespace": "northwind-orders", "service": "orders-sync"}, deploy_history()),
        ])
        s.ai("Two things stand out:\n\n"
             "- **A deploy 9 minutes before the first alert.** v2.4.0 went out at 07:32:18 UTC (revision 17). "
             "Its changelog adds parallel order fetch (up to 32 concurrent requests per worker), moves config "
             "defaults to a new file and upgrades HikariCP.\n"
             "- **Pods are unhealthy.** Some replicas are in CrashLoopBackOff with several restarts; the rest are "
             "Running but restarting occasionally.\n\n"
             "Per the triage rule, a deploy within 15 minutes of the first error is the prime suspect. Before "
             "touching anything, let's capture logs from a failing pod.")

    @ex
    def tail_logs():
        s.user("ok, pull the logs")
        s.tools("", [("get_logs", {"namespace": "northwind-orders", "pod": PODS[2], "since": "30m", "tail": 40},
                      logs_tail(rng, 40, 2))])
        s.ai("The recent logs are dominated by two errors:\n\n"
             "1. `HikariPool-1 - Connection is not available, request timed out after 30000ms`: the service's "
             "own DB connection pool is exhausted; requests wait 30 s for a connection and give up.\n"
             "2. `upstream returned 502` from the gateway client, with latencies right at 30 s, which looks like "
             "a consequence of (1): the request handler waits for a DB connection until the gateway times out.\n\n"
             "There are also Hikari 'thread starvation' warnings, typical when many threads block on the pool. "
             "Do you have the earlier logs, from right after the deploy? The first error matters more than the "
             "loudest one.")

    @ex
    def pasted_log():
        s.user(pasted_error_log(rng))
        s.ai("Thanks, that's very useful. Reading it from the top:\n\n"
             "- The first pool timeout appears about a minute after the rollout started, and every timeout "
             "reports the same pool stats: `total=10, active=10, idle=0, waiting=20-31`. The pool has **10** "
             "connections and 20-30 threads waiting for one.\n"
             "- The fetch threads are named `fetch-pool-1` to `fetch-pool-32`: that's the new parallel fetch "
             "from v2.4.0, up to 32 concurrent fetches per worker, each holding a connection while it locks a "
             "batch (`OrderRepository.lockBatch`).\n"
             "- 32 concurrent borrowers on a 10-connection pool, each holding its connection for seconds, "
             "explains the 30 s timeouts, the re-queued batches and, downstream, the 502s at the gateway.\n"
             "- Separately there are `SSL error: handshake_failure` lines from `ReplicaRouter`: replica reads "
             "fail and fall back to the primary, which adds load to the primary. That may be a second, "
             "independent problem.\n"
             "- The liveness probe failures are a symptom: the health endpoint also waits for a connection.\n\n"
             "Hypothesis: v2.4.0 raised concurrency to 32 while the pool stayed at (or dropped to) 10. "
             "Let me check the DB side next.")

    @ex
    def db_skill():
        s.user("Makes sense. What does the database side look like?")
        s.tools("Reading the PostgreSQL diagnostics skill first.", [read_skill("postgres-diagnostics")])
        s.tools("", [
            ("run_sql", {"database": "northwind-orders-db", "query": "select application_name, state, count(*) from pg_stat_activity group by 1,2 order by 3 desc"},
             "application_name   | state               | count\n"
             "-------------------+---------------------+------\n"
             "orders-sync        | active              | 52\n"
             "orders-sync        | idle in transaction | 8\n"
             "orders-api         | idle                | 24\n"
             "reporting          | idle                | 6\n"
             "(4 rows)\n\nmax_connections = 200"),
            ("query_metrics", {"metric": "db_connections_active", "service": "orders-sync", "from": "07:00", "to": "08:10"},
             metrics_table(rng, "db_connections_active", "connections", 14, 60, "07:00", 15, "up")),
        ])
        s.ai("The server is far from its limit: 90 connections in use out of `max_connections = 200`, so "
             "PostgreSQL is not refusing anything. Across the 6 replicas orders-sync holds 60 connections "
             "(52 active, 8 idle in transaction), which is 6 x 10: every pod's pool is completely full.\n\n"
             "So the bottleneck is the **client-side pool size (10 per pod)**, not the database. The 8 "
             "'idle in transaction' sessions suggest some fetchers hold a transaction open while waiting on "
             "the gateway, which makes the starvation worse.\n\n"
             "Next question: was the pool 10 before v2.4.0 too? The changelog says defaults moved to a new file.")

    @ex
    def config_diff():
        s.user("Can you diff the config between v2.3.7 and v2.4.0?")
        s.tools("", [("get_config_diff", {"namespace": "northwind-orders", "service": "orders-sync", "from": "v2.3.7", "to": "v2.4.0"},
                      "--- v2.3.7/application.yaml\n+++ v2.4.0/orders-sync-defaults.yaml\n"
                      "@@ datasource @@\n"
                      "-  hikari.maximumPoolSize: 40        # set explicitly in application.yaml\n"
                      "+  # maximumPoolSize not set: HikariCP default (10) applies\n"
                      "   hikari.connectionTimeout: 30000\n"
                      "-  hikari.leakDetectionThreshold: 20000\n"
                      "@@ fetch @@\n"
                      "-  fetch.concurrency: 4\n"
                      "+  fetch.concurrency: 32\n"
                      "+  fetch.batchLockTimeoutSeconds: 60\n"
                      "@@ features @@\n"
                      "+  flags.batch_v2: true\n")])
        s.ai("That confirms it. Moving the defaults to `orders-sync-defaults.yaml` dropped the explicit "
             "`maximumPoolSize: 40`, so HikariCP's default of **10** applies, and at the same time "
             "`fetch.concurrency` went from 4 to **32**. Before: 4 fetchers on 40 connections. Now: 32 "
             "fetchers on 10 connections.\n\n"
             "Two signals agree (pool stats in the logs, the config diff), so I'm fairly confident in this "
             "as the root cause of the 502s. The replica TLS errors are still unexplained. Also note "
             "`flags.batch_v2` was switched on by this release.")

    @ex
    def severity():
        s.user("How bad is it for them right now? I need to decide on severity.")
        s.tools("", [
            ("query_metrics", {"metric": "http_error_rate", "service": "orders-sync", "from": "07:00", "to": "08:15"},
             metrics_table(rng, "http_error_rate", "%", 0.2, 38.0, "07:00", 16, "up")),
            ("query_metrics", {"metric": "orders_backlog", "service": "orders-sync", "from": "07:00", "to": "08:15"},
             metrics_table(rng, "orders_backlog", "orders", 300, 11800, "07:00", 16, "up")),
            ("query_metrics", {"metric": "http_latency_p99", "service": "orders-sync", "from": "07:00", "to": "08:15"},
             metrics_table(rng, "http_latency_p99", "ms", 400, 30100, "07:00", 16, "up")),
        ])
        s.ai("Impact right now:\n\n"
             "- Error rate climbed from ~0.2% before the deploy to roughly **38%**.\n"
             "- p99 latency is pinned at ~30 s (the pool timeout).\n"
             "- The order backlog grew from ~300 to about **11,800** orders and is still growing.\n\n"
             "By the triage matrix this is **SEV-2**: a major function (order sync) is degraded, error rate "
             "well above 5%, no workaround on the customer's side. Not SEV-1: nothing is lost, orders are "
             "queued and can be replayed. I'd open a SEV-2 incident now.")

    @ex
    def open_incident():
        s.user("Agreed, SEV-2. Open the incident please, and put me as commander.")
        s.tools("", [("create_incident", {"project": "PRJ-123", "severity": "SEV-2", "commander": "me",
                                          "title": "orders-sync 502s and failed syncs after v2.4.0 deploy"},
                      "{\"incident_id\": \"INC-4471\", \"status\": \"open\", \"severity\": \"SEV-2\", "
                      "\"channel\": \"#inc-4471-orders-sync\", \"created_at\": \"2026-11-30T08:16:05Z\"}")])
        s.ai("Incident **INC-4471** is open (SEV-2), channel `#inc-4471-orders-sync`, you as commander. "
             "The triage procedure asks for a first customer update within 30 minutes of the report; do you "
             "want me to draft it?")

    @ex
    def customer_contact():
        s.user("Yes. Their contact is Dana Whitfield, platform lead at Northwind. She wants an update every "
               "hour, no jargon.")
        s.tools("Checking the comms guidelines.", [read_skill("customer-comms")])
        s.ai("Draft for Dana Whitfield:\n\n"
             "> **Subject:** [SEV-2] Order sync - orders delayed - update 1\n>\n"
             "> Hi Dana,\n>\n"
             "> **Impact:** since 07:41 UTC about a third of order pushes from your ERP are failing with "
             "errors, and roughly 11,800 orders are waiting to be synced. No orders have been lost; they are "
             "queued and will be processed once the issue is fixed.\n>\n"
             "> **What we have done:** we traced the problem to a platform release at 07:32 UTC and are "
             "preparing the fix now.\n>\n"
             "> **Next update:** 09:15 UTC at the latest.\n\n"
             "It states impact in her terms, gives UTC times and numbers, and doesn't speculate beyond what's "
             "confirmed. Shall I send it?")

    @ex
    def send_update():
        s.user("Send it.")
        s.tools("", [("send_customer_update", {"to": "dana.whitfield@northwind-logistics.example",
                                               "incident": "INC-4471", "update": 1},
                      "{\"sent\": true, \"message_id\": \"<upd-1-inc-4471@acme.example>\"}")])
        s.ai("Sent. Next update due at 09:15 UTC.")

    @ex
    def options():
        s.user("So what are our options? Roll back, or bump the pool size live?")
        s.ai("Three options:\n\n"
             "1. **Roll back to v2.3.7.** Known good (ran 12 days without incident). Restores pool 40 / "
             "concurrency 4 in one step. Risk: v2.4.0 may have shipped a DB migration; if it isn't backward "
             "compatible, a rollback breaks things differently. Needs checking.\n"
             "2. **Patch the config live** (set `maximumPoolSize: 40`, `fetch.concurrency: 4`) via config map "
             "and restart. Faster, but it runs an untested combination of new code with old settings, and "
             "`batch_v2` stays on.\n"
             "3. **Raise only the pool size.** 6 pods x 32 fetchers = 192 connections, which would eat almost "
             "all of `max_connections = 200`: it would move the problem to the database.\n\n"
             "I'd recommend the rollback if the migration check passes. Want me to check the migrations?")

    @ex
    def migrations():
        s.user("Check the migrations.")
        s.tools("", [("list_migrations", {"database": "northwind-orders-db", "since_release": "v2.3.7"},
                      "VERSION          DESCRIPTION                               RELEASE   REVERSIBLE   BACKWARD_COMPATIBLE\n"
                      "20261127_01      add column orders.fetch_attempts int null  v2.4.0    yes          yes\n"
                      "20261127_02      create index concurrently on orders(status, updated_at)  v2.4.0  yes  yes\n")])
        s.ai("Both v2.4.0 migrations are additive and backward compatible: a nullable column and a new "
             "index. v2.3.7 ignores the column and benefits from the index. A rollback is safe on the "
             "database side.")

    @ex
    def decide_rollback():
        s.user("OK. Decision: we roll back to v2.3 (v2.3.7). I approve it, log that in the incident.")
        s.tools("Reading the rollback procedure before I start.", [read_skill("kubernetes-rollback")])
        s.tools("", [
            ("add_incident_note", {"incident": "INC-4471", "note": "Decision 08:31 UTC: roll back orders-sync to v2.3.7 (revision 16). Approved by incident commander."},
             "{\"ok\": true}"),
            ("freeze_deploys", {"namespace": "northwind-orders", "service": "orders-sync", "reason": "INC-4471"},
             "{\"frozen\": true, \"until\": \"manual\"}"),
        ])
        s.ai("Logged in INC-4471: rollback to v2.3.7 approved at 08:31 UTC. Following the procedure, deploys "
             "for orders-sync are now frozen so CI can't roll forward during the incident. Current revision is "
             "17 (v2.4.0); the target is revision 16. Ready to run `rollout undo --to-revision=16` on your go.")

    @ex
    def do_rollback():
        s.user("Go.")
        s.tools("", [("run_command", {"command": "kubectl -n northwind-orders rollout undo deploy/orders-sync --to-revision=16"},
                      "deployment.apps/orders-sync rolled back")])
        s.tools("", [("run_command", {"command": "kubectl -n northwind-orders rollout status deploy/orders-sync --timeout=10m"},
                      "Waiting for deployment \"orders-sync\" rollout to finish: 2 of 6 updated replicas are available...\n"
                      "Waiting for deployment \"orders-sync\" rollout to finish: 4 of 6 updated replicas are available...\n"
                      "Waiting for deployment \"orders-sync\" rollout to finish: 5 of 6 updated replicas are available...\n"
                      "deployment \"orders-sync\" successfully rolled out")])
        s.ai("Rollback done: all 6 replicas run v2.3.7 (revision 16). Now we watch for 15 minutes: error "
             "rate under 1% and p99 within 20% of last week's baseline.")

    scripted_tail = []

    def tail(fn):
        scripted_tail.append(fn)
        return fn

    # The closing exchanges, after the middle section.
    @tail
    def action_items():
        s.user("Thanks, this was a long one. What's left on our list?")
        s.ai("Open items:\n\n"
             "1. Review and merge the v2.4.1 fix-forward (pool size 40 set explicitly, fetch concurrency 8, "
             "`batch_v2` off, startup check that pool size >= concurrency).\n"
             "2. Deploy v2.4.1 in Saturday's 02:00 UTC maintenance window, then lift the deploy freeze.\n"
             "3. Rotate the replica CA bundle in the service's trust store (the TLS handshake failures).\n"
             "4. Finish the postmortem draft within two business days.\n"
             "5. Send Dana the closing update once the backlog is confirmed at zero.")

    @tail
    def which_cluster():
        s.user("Which cluster were we on again?")
        s.ai("The EU cluster: everything today was project PRJ-123 (Northwind Logistics' orders-sync in "
             "namespace northwind-orders) on the EU cluster.")

    middle = middle_exchanges(s, rng)
    budget = exchanges - len(scripted) - len(scripted_tail)
    if budget < 0:
        raise SystemExit(f"--exchanges must be at least {len(scripted) + len(scripted_tail)}")
    for fn in scripted:
        fn()
    for fn in pick_middle(s, middle, rng, budget):
        fn()
    for fn in scripted_tail:
        fn()


def middle_exchanges(s: Session, rng: random.Random):
    """The middle of the hour: verification, backlog replay, root cause, fix-forward, comms.

    Returns (essential, fn) pairs in story order. Essential exchanges always run; the
    others (routine checks, side questions, small talk) are sampled to fill the requested
    number of exchanges.
    """
    ex = []

    def add(essential):
        def deco(fn):
            ex.append((essential, fn))
            return fn
        return deco

    check_times = ["09:30", "09:45", "10:00", "10:10", "10:20", "10:30"]
    remaining_at = []
    left = 12000
    for _ in check_times:
        left = max(0, left - 2000 - rng.randint(0, 400))
        remaining_at.append(left)

    def backlog_check(i):
        at, remaining = check_times[i], remaining_at[i]

        def check():
            phrasing = ["How's the backlog doing?", "backlog status?", f"Quick check on the drain at {at}?",
                        "Any errors during the replay so far?", "Still on track for 10:30?",
                        "Where are we with the queue?"][i]
            s.user(phrasing)
            per_partition = [remaining // 8 + rng.randint(-40, 40) for _ in range(8)]
            calls = [("query_metrics", {"metric": "orders_backlog", "service": "orders-sync", "at": at},
                      json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
                          {"metric": {"__name__": "kafka_consumergroup_lag", "group": "orders-sync",
                                      "topic": "northwind.orders.inbound", "partition": str(p)},
                           "value": [at, str(max(0, v))]} for p, v in enumerate(per_partition)]},
                          "stats": {"drain_rate_per_min": -rng.randint(180, 240)}}, sort_keys=True))]
            if i % 2 == 0:
                calls.append(("query_metrics", {"metric": "http_error_rate", "service": "orders-sync", "at": at},
                              f"metric: http_error_rate   at: {at} UTC   value: {rng.uniform(0.1, 0.6):.2f}%"))
            if i % 3 == 1:
                calls.append(("query_metrics", {"metric": "db_connections_active", "service": "orders-sync", "at": at},
                              f"metric: db_connections_active   at: {at} UTC   value: {rng.randint(70, 110)} of 200"))
            s.tools("", calls)
            detail = rng.choice([
                "Error rate stays under 1%, so the batches aren't hurting live traffic.",
                "DB connections stay well below the limit; the batch size looks right.",
                "At this rate the queue is empty in well under an hour.",
                "No retries or dead-lettered orders in this window.",
            ])
            s.ai(f"At {at} UTC the backlog is down to **{remaining:,}** orders. {detail}")

        ex.append((i in (0, 5), check))

    questions = [
        ("What's the difference between connectionTimeout and idleTimeout in Hikari again?",
         "`connectionTimeout` is how long a caller waits to *borrow* a connection before failing (30 s here, "
         "which is where our 30000ms errors came from). `idleTimeout` is how long an unused connection may sit "
         "in the pool before being closed (only applies when the pool is above `minimumIdle`)."),
        ("Should we lower connectionTimeout so it fails faster than the gateway?",
         "Worth considering: the gateway gives up at 30 s, the same as the pool timeout, so clients see a "
         "502 instead of a clean 503 from us. With `connectionTimeout: 5000` the service would return its own "
         "error quickly and retry with backoff. I'd put it in v2.4.1 only if it's tested; otherwise the next "
         "release."),
        ("Does the rollback affect the other tenants there at all?",
         "No: the rollback only touched `deploy/orders-sync` in the northwind-orders namespace. Other tenants "
         "run their own deployments; the shared pieces (ingress, the managed PostgreSQL instance class) were "
         "not changed."),
        ("How many connections does v2.3.7 use at steady state?",
         "From the metrics since the rollback: about 14-18 per pod at peak (6 pods, so ~100 in total), well "
         "inside the pool of 40 per pod and the server's 200."),
        ("Can leakDetectionThreshold cause problems if set too low?",
         "Only noise: it logs a warning with a stack trace when a connection is held longer than the "
         "threshold; it doesn't close the connection. At 20 s it would have pointed straight at "
         "`lockBatch` this morning."),
        ("Remind me why we didn't just scale the pods up?",
         "More pods means more pools: each extra pod adds 10 connections and 32 fetchers, so the ratio of "
         "fetchers to connections stays 3.2:1 and nothing improves, while the database gets more load. The "
         "triage skill says exactly that: check the DB connection limit before scaling a DB-bound service."),
        ("is the liveness probe config ok or should it change too?",
         "The probe hit `/healthz`, which borrows a DB connection, so pool starvation made healthy pods look "
         "dead and the restarts lost in-flight batches. Better: liveness checks only the process; readiness "
         "may check the DB. That's another action item."),
    ]

    def question(i):
        q, a = questions[i]

        def qa():
            s.user(q)
            s.ai(a)

        ex.append((False, qa))

    @add(True)
    def verify():
        s.user("How does it look now?")
        s.tools("", [
            ("query_metrics", {"metric": "http_error_rate", "service": "orders-sync", "from": "08:35", "to": "08:55"},
             metrics_table(rng, "http_error_rate", "%", 0.3, 6.0, "08:35", 5, "down")),
            ("query_metrics", {"metric": "http_latency_p99", "service": "orders-sync", "from": "08:35", "to": "08:55"},
             metrics_table(rng, "http_latency_p99", "ms", 420, 2900, "08:35", 5, "down")),
        ])
        s.ai("Recovering: the error rate fell from ~6% during the rollout to ~0.3%, and p99 is back around "
             "420 ms (last week's baseline is ~400 ms). That meets the verification bar so far; I'll keep "
             "an eye on it for the full 15 minutes.")

    @add(False)
    def ack1():
        s.user("nice")
        s.ai("Indeed. Next up is the backlog.")

    @add(True)
    def pods_after():
        s.user("And the pods? Any restarts since?")
        s.tools("", [("get_pods", {"namespace": "northwind-orders", "selector": "app=orders-sync"},
                      pods_table(rng, True))])
        s.ai("All 6 pods are Running and ready on v2.3.7, with at most one restart each (from the rollout "
             "itself). No CrashLoopBackOff since the rollback.")

    @add(True)
    def backlog_skill():
        s.user("The backlog is still there though, right? How do we drain it without hammering the DB?")
        s.tools("", [read_skill("kafka-consumer-lag"),
                     ("get_consumer_lag", {"group": "orders-sync", "topic": "northwind.orders.inbound"},
                      "\n".join(["TOPIC                        PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG"] +
                                [f"northwind.orders.inbound     {p:<10} {1200000 + p * 3111:<15} "
                                 f"{1200000 + p * 3111 + 1500 + p * 7:<15} {1500 + p * 7}"
                                 for p in range(8)]))])
        s.ai("Lag is ~1,500 per partition across 8 partitions, so about 12,000 orders, in line with the "
             "backlog metric. The skill's rules apply directly: don't add consumers beyond 8 partitions, and "
             "since the consumer is DB-bound, replay in bounded batches with a rate limit rather than all at "
             "once.")

    @add(True)
    def decide_batches():
        s.user("Let's drain it in batches of 500 and keep batch_v2 off for the whole replay. That's the "
               "decision, note it.")
        s.tools("", [("add_incident_note", {"incident": "INC-4471", "note": "Decision 08:52 UTC: drain backlog in batches of 500, feature flag batch_v2 stays off during replay."},
                      "{\"ok\": true}"),
                     ("set_feature_flag", {"namespace": "northwind-orders", "flag": "batch_v2", "value": False},
                      "{\"flag\": \"batch_v2\", \"value\": false, \"previous\": false}")])
        s.ai("Noted in INC-4471. `batch_v2` was already off under v2.3.7 (the flag only exists in v2.4.0's "
             "defaults); I've pinned it to `false` explicitly so a later deploy can't flip it during the "
             "replay. Batches of 500 it is.")

    @add(True)
    def other_tenants():
        s.user("Is anyone else running v2.4.0 of orders-sync?")
        s.tools("", [("list_deployments", {"service": "orders-sync", "release": "v2.4.0"},
                      "NAMESPACE            RELEASE   ROLLOUT\n"
                      "northwind-orders     v2.3.7    rolled back (was v2.4.0)\n"
                      "(no other namespace runs v2.4.0; release train paused by INC-4471 freeze)")])
        s.ai("Nobody else: Northwind was the first tenant on v2.4.0, and the freeze has paused the release "
             "train, so no other customer will get it before the fix.")

    @add(True)
    def tls():
        s.user("What about those SSL handshake errors from the replica router? Still happening after the "
               "rollback?")
        s.tools("", [("get_logs", {"namespace": "northwind-orders", "pod": PODS[0], "since": "15m", "grep": "SSL"},
                      "2026-11-30T08:49:12.381Z orders-sync-6f9c7d5b8-2kq4x [fetch-pool-2] ERROR o.n.sync.db.ReplicaRouter - replica read failed, falling back to primary\n"
                      "org.postgresql.util.PSQLException: SSL error: Received fatal alert: handshake_failure\n"
                      "2026-11-30T08:53:40.002Z orders-sync-6f9c7d5b8-2kq4x [fetch-pool-1] ERROR o.n.sync.db.ReplicaRouter - replica read failed, falling back to primary\n"
                      "org.postgresql.util.PSQLException: SSL error: Received fatal alert: handshake_failure"),
                     ("get_certificate", {"host": "northwind-orders-db-replica.internal", "port": 5432},
                      "subject: CN=northwind-orders-db-replica.internal\nissuer: CN=Acme Platform DB CA 2026\n"
                      "not_before: 2026-11-29T22:00:00Z\nnot_after: 2027-11-29T22:00:00Z\n"
                      "note: CA rotated 2026-11-29T22:00Z (platform change CHG-9912)")])
        s.ai("Yes, still happening, so it's independent of the release. The replica's certificate was "
             "re-issued last night at 22:00 UTC by a new CA ('Acme Platform DB CA 2026', change CHG-9912). "
             "The service's trust store most likely only has the old CA, so replica reads fail and fall back "
             "to the primary. Not urgent now that the pool is healthy, but it adds primary load and should be "
             "fixed: rotate the CA bundle in the service's trust store.")

    @add(False)
    def ack2():
        s.user("ugh, CA rotations. ok")
        s.ai("The classic. At least the fallback to the primary kept reads working.")

    @add(True)
    def followup_ticket():
        s.user("Make a ticket for the CA bundle, not part of the incident.")
        s.tools("", [("create_ticket", {"project": "PRJ-123", "title": "orders-sync: trust new DB CA (CHG-9912) for replica TLS",
                                        "priority": "P3", "labels": ["tls", "follow-up"]},
                      "{\"ticket\": \"OPS-20817\", \"status\": \"open\"}")])
        s.ai("Created OPS-20817 (P3) for the CA bundle, outside the incident.")

    @add(True)
    def update2():
        s.user("Time for Dana's second update. Draft it?")
        s.ai("Draft:\n\n"
             "> **Subject:** [SEV-2] Order sync - recovering - update 2\n>\n"
             "> Hi Dana,\n>\n"
             "> **Impact:** between 07:41 and 08:40 UTC about a third of order pushes failed. No orders were "
             "lost.\n>\n"
             "> **What we have done:** at 08:33 UTC we reverted the platform release that caused the problem. "
             "Since 08:40 UTC new orders sync normally (error rate back under 0.5%).\n>\n"
             "> **Next steps:** the roughly 12,000 orders that queued up this morning are being processed in "
             "controlled batches; we expect the queue to be empty by about 10:30 UTC.\n>\n"
             "> **Next update:** 10:15 UTC at the latest.")

    @add(True)
    def tweak_update():
        s.user("Change 'platform release' to 'a software update on our side', she won't know what a release "
               "means here. Then send.")
        s.tools("", [("send_customer_update", {"to": "dana.whitfield@northwind-logistics.example",
                                               "incident": "INC-4471", "update": 2},
                      "{\"sent\": true, \"message_id\": \"<upd-2-inc-4471@acme.example>\"}")])
        s.ai("Changed and sent as update 2. Next one due by 10:15 UTC.")

    backlog_check(0)
    question(0)

    @add(True)
    def root_cause_code():
        s.user("While it drains: why did nobody catch the pool default in review? Can you look at the PR?")
        s.tools("", [("get_pull_request", {"repo": "acme/orders-sync", "number": 1893},
                      "PR #1893 \"Move config defaults to orders-sync-defaults.yaml\" merged 2026-11-26 by j.okafor, "
                      "approved by 2 reviewers.\nFiles: application.yaml (-61 lines), orders-sync-defaults.yaml (+58 lines), "
                      "OrderFetcher.java (+140 -22)\nDescription: Consolidates defaults. No behaviour change intended.\n"
                      "Review comments: 4 (naming, a typo, one question on fetch.concurrency: 'is 32 safe?' answered "
                      "'load-tested in staging').\nCI: unit + integration green. Staging load test: 2 replicas, "
                      "staging DB with max_connections=50.\n\n" + pr_diff())])
        s.ai("The PR claimed 'no behaviour change intended', and 3 lines went missing in the move: "
             "`maximumPoolSize: 40` among them. A reviewer did ask 'is 32 safe?' and got 'load-tested in "
             "staging'. But staging ran 2 replicas against a small DB with little data, so batches locked fast "
             "and 10 connections happened to be enough. Contributing factors for the postmortem:\n\n"
             "1. A refactor that silently changed an effective setting (no diff of the *resolved* config).\n"
             "2. Concurrency raised 8x in the same release.\n"
             "3. Staging load test not representative (batch lock times, data volume).")

    @add(False)
    def small_question():
        s.user("Is there a way to see the resolved config in CI?")
        s.ai("Yes: Spring Boot can print it (`/actuator/configprops` or `--debug` at startup). A CI step that "
             "starts the app with the release's config and diffs the resolved `configprops` against the "
             "previous release would have flagged `maximumPoolSize: 40 -> 10`. Good action item.")

    @add(True)
    def owner():
        s.user("Who owns orders-sync? They need to know about all this.")
        s.tools("", [("get_service_owner", {"service": "orders-sync"},
                      "{\"team\": \"fulfilment-integrations\", \"lead\": \"j.okafor\", \"slack\": \"#team-fulfilment-int\", "
                      "\"oncall\": \"m.brandt\"}")])
        s.ai("Team fulfilment-integrations owns it: lead j.okafor (who also authored PR #1893), on-call "
             "m.brandt, channel `#team-fulfilment-int`.")

    @add(False)
    def ping_owner():
        s.user("Ping their on-call with a short summary and ask them to own v2.4.1.")
        s.tools("", [("send_slack_message", {"channel": "#team-fulfilment-int",
                                             "text": "@m.brandt INC-4471: orders-sync v2.4.0 dropped maximumPoolSize 40 (PR #1893, HikariCP default 10 applied) while raising fetch.concurrency to 32; rolled back to v2.3.7 at 08:33 UTC. Could your team own the v2.4.1 fix-forward? Details in #inc-4471-orders-sync."},
                      "{\"ok\": true, \"ts\": \"1764491711.004200\"}")])
        s.ai("Posted in `#team-fulfilment-int`, tagging m.brandt, with the cause, the rollback time and the "
             "ask to own v2.4.1.")

    backlog_check(1)
    question(1)

    @add(True)
    def fix_forward():
        s.user("Let's plan the fix-forward. What should v2.4.1 contain?")
        s.ai("Proposal for v2.4.1:\n\n"
             "1. Set `hikari.maximumPoolSize: 40` explicitly in `orders-sync-defaults.yaml`.\n"
             "2. Lower `fetch.concurrency` to **8** (2x the old value, not 8x), with a startup check that "
             "fails fast if concurrency > pool size.\n"
             "3. Keep `flags.batch_v2: false` by default; enable it per customer later.\n"
             "4. Restore `leakDetectionThreshold: 20000` (also lost in the move).\n"
             "5. Add the resolved-config diff step to CI.\n\n"
             "Budget check: 6 pods x 40 = 240 would exceed `max_connections = 200` if every pool filled. With "
             "concurrency 8 a pod uses ~10-12 connections in practice, but to be safe we could set "
             "`maximumPoolSize: 30` (180 total) instead.")

    @add(True)
    def decide_pool():
        s.user("Go with pool size 30 and concurrency 8. Deploy in Saturday's maintenance window, 02:00 UTC. "
               "Not before.")
        s.tools("", [("add_incident_note", {"incident": "INC-4471", "note": "Decision 09:20 UTC: fix-forward v2.4.1 with maximumPoolSize 30, fetch.concurrency 8, batch_v2 off; deploy Saturday 02:00 UTC maintenance window. Deploy freeze stays until then."},
                      "{\"ok\": true}")])
        s.ai("Noted: v2.4.1 = pool 30, concurrency 8, `batch_v2` off, deployed in Saturday's 02:00 UTC window; "
             "the deploy freeze stays until then.")

    @add(True)
    def change_request():
        s.user("File the change request for Saturday.")
        s.tools("", [("create_change_request", {"service": "orders-sync", "namespace": "northwind-orders",
                                                "release": "v2.4.1", "window": "2026-12-05T02:00:00Z",
                                                "duration_minutes": 60, "incident": "INC-4471"},
                      "{\"change\": \"CHG-9950\", \"status\": \"pending-approval\", \"approvers\": [\"cab-platform\"]}")])
        s.ai("Filed **CHG-9950** for v2.4.1 on Saturday 2026-12-05, 02:00-03:00 UTC, linked to INC-4471. "
             "It's pending approval by cab-platform.")

    @add(False)
    def berlin():
        s.user("What's 02:00 UTC in Dana's time? She's in Hamburg.")
        s.ai("03:00 in Hamburg (CET, UTC+1 in December).")

    backlog_check(2)

    @add(True)
    def dlq():
        s.user("Anything in the dead letter queue?")
        s.tools("", [("get_dlq_count", {"queue": "northwind.orders.dlq", "since": "2026-11-30T07:00:00Z"},
                      "{\"count\": 37, \"oldest\": \"2026-11-30T07:48:10Z\", \"newest\": \"2026-11-30T09:51:02Z\"}")])
        s.ai("37 messages since 07:00 UTC. Some arrived after the rollback, so not all of them can be "
             "incident failures. Want me to look at a sample?")

    @add(True)
    def dlq_look():
        s.user("yes, look at a few")
        s.tools("", [("peek_dlq", {"queue": "northwind.orders.dlq", "limit": 3},
                      "\n".join(json.dumps(dlq_record(rng), indent=2, sort_keys=True) for _ in range(3)))])
        s.ai("All three are validation failures: orders that reference SKUs unknown to the catalogue. That's "
             "a data problem on the customer's side, not the incident; these would have failed on any "
             "release. Worth mentioning to Dana so their team can fix the SKUs and resubmit.")

    question(2)

    @add(False)
    def coffee():
        s.user("brb, coffee")
        s.ai("Sure. Backlog keeps draining meanwhile.")

    backlog_check(3)

    @add(True)
    def duplicates():
        s.user("Dana replied, she's asking if the replay could create duplicate orders in their ERP.")
        s.tools("", [("run_sql", {"database": "northwind-orders-db", "query": "select count(*) from (select external_id from orders where updated_at > '2026-11-30 07:30' group by external_id having count(*) > 1) d"},
                      " count\n-------\n     0\n(1 row)")])
        s.ai("No duplicates: zero external ids appear twice since 07:30 UTC. The sync uses the order's "
             "external id as an idempotency key, so a replayed order updates the existing record instead of "
             "creating a new one. You can tell Dana that plainly.")

    question(3)

    @add(True)
    def postmortem_skill():
        s.user("Can you start the postmortem draft?")
        s.tools("Reading the postmortem skill.", [read_skill("postmortem")])
        s.ai("Postmortem draft (INC-4471), first pass:\n\n"
             "**Summary.** A software update to orders-sync at 07:32 UTC raised fetch concurrency from 4 to 32 "
             "while unintentionally lowering the database connection pool from 40 to 10. Fetchers starved "
             "for connections, order syncs failed with 502s for about an hour, and ~12,000 orders were delayed. "
             "No data was lost.\n\n"
             "**Impact.** 07:41-08:40 UTC, one customer, error rate peak ~38%, ~12,000 orders delayed, none "
             "lost.\n\n"
             "**Timeline (UTC).** 07:32 deploy v2.4.0 - 07:41 first alert - 08:16 INC-4471 opened (SEV-2) - "
             "08:31 rollback approved - 08:33 rollback to v2.3.7 - 08:40 error rate < 1% - backlog replay in "
             "batches of 500.\n\n"
             "**Root cause.** Config refactor (PR #1893) dropped `maximumPoolSize: 40`; HikariCP default 10 "
             "applied. Same release raised `fetch.concurrency` to 32.\n\n"
             "**Contributing factors.** No resolved-config diff in CI; unrepresentative staging load test; "
             "two risky changes in one release.\n\n"
             "**Action items.** (owners and dates to fill in) v2.4.1 fix-forward (CHG-9950); CI resolved-config "
             "diff; staging load test with production-like lock times; liveness probe must not borrow a DB "
             "connection; OPS-20817 CA bundle.")

    backlog_check(4)
    question(4)

    @add(False)
    def slack_summary():
        s.user("Write a 3-line status for the incident channel.")
        s.ai("**INC-4471 status:** mitigated. orders-sync rolled back to v2.3.7 at 08:33 UTC, error rate "
             "< 0.5% since 08:40.\n**Backlog:** draining in batches of 500, nearly empty, no duplicates, 37 "
             "DLQ items are customer SKU errors.\n**Next:** v2.4.1 (pool 30, concurrency 8) under CHG-9950, "
             "Saturday 02:00 UTC; deploy freeze until then.")

    question(5)

    @add(False)
    def gateway_logs():
        s.user("Did the gateway itself log anything weird, apart from the 502s?")
        s.tools("", [("get_gateway_logs", {"route": "/v1/orders/sync", "from": "07:30", "to": "08:45", "level": "warn"},
                      "\n".join(f"2026-11-30T08:{m:02d}:{rng.randint(0, 59):02d}Z gw-{rng.randint(1, 3)} WARN upstream "
                                f"orders-sync timed out after 30000ms, returned 502 (route /v1/orders/sync, tenant northwind)"
                                for m in range(0, 40, 4)))])
        s.ai("Only the upstream timeouts: each 502 is the gateway giving up after exactly 30 s, matching the "
             "pool timeout. No gateway-side errors, rate limiting or TLS issues.")

    @add(False)
    def db_cpu():
        s.user("What's the DB CPU doing during the replay?")
        s.tools("", [("query_metrics", {"metric": "db_cpu_utilization", "database": "northwind-orders-db", "from": "09:30", "to": "10:20"},
                      metrics_table(rng, "db_cpu_utilization", "%", 28, 46, "09:30", 11, "flat"))])
        s.ai("Between 28% and 46% during the replay: comfortable headroom. Batches of 500 were a good size.")

    backlog_check(5)

    @add(True)
    def update3():
        s.user("Backlog's basically gone. Draft Dana's update 3 (mention the SKU thing), then send it.")
        s.tools("", [("send_customer_update", {"to": "dana.whitfield@northwind-logistics.example",
                                               "incident": "INC-4471", "update": 3},
                      "{\"sent\": true, \"message_id\": \"<upd-3-inc-4471@acme.example>\"}")])
        s.ai("Sent update 3 to Dana:\n\n"
             "> **Subject:** [SEV-2] Order sync - resolved, queue cleared - update 3\n>\n"
             "> Hi Dana, all orders queued this morning have now been synced, with no duplicates; new orders "
             "have been syncing normally since 08:40 UTC. Separately, 37 orders were rejected because they "
             "reference unknown SKUs (for example PAL-EUR-1200); your team can correct and resubmit them. A "
             "permanent fix will be applied during Saturday's maintenance window (03:00 Hamburg time). We'll "
             "send a written incident report within two business days.")

    @add(True)
    def downgrade():
        s.user("Downgrade the incident to SEV-3 and keep it open until Saturday's deploy.")
        s.tools("", [("update_incident", {"incident": "INC-4471", "severity": "SEV-3", "status": "monitoring"},
                      "{\"incident_id\": \"INC-4471\", \"severity\": \"SEV-3\", \"status\": \"monitoring\"}")])
        s.ai("INC-4471 is now SEV-3, status 'monitoring', open until the v2.4.1 deploy on Saturday.")

    question(6)

    @add(False)
    def ack3():
        s.user("ok thanks")
        s.ai("You're welcome.")

    @add(False)
    def runbook_search():
        s.user("Do we have a runbook for 'pool exhausted' alerts? If not we should write one.")
        s.tools("", [("search_runbooks", {"query": "connection pool exhausted hikari"},
                      "1 result: 'DB connection limits per tenant' (2024, last edited 2025-02-10): "
                      "explains max_connections per instance class; no section on client pool exhaustion.")])
        s.ai("Only a general page on DB connection limits, nothing on client-side pool exhaustion. I'd add a "
             "runbook built from today: symptoms (30 s timeouts, `active=total, waiting>0`), the "
             "pool-vs-concurrency check, and the rule not to scale DB-bound services blindly.")

    @add(False)
    def saturday_commands():
        s.user("Give me the exact commands for Saturday so I can paste them into the change.")
        s.ai("For CHG-9950, in order:\n\n"
             "```\n"
             "kubectl -n northwind-orders rollout history deploy/orders-sync\n"
             "release-tool unfreeze orders-sync --namespace northwind-orders --change CHG-9950\n"
             "release-tool deploy orders-sync v2.4.1 --namespace northwind-orders\n"
             "kubectl -n northwind-orders rollout status deploy/orders-sync --timeout=10m\n"
             "kubectl -n northwind-orders exec deploy/orders-sync -- curl -s localhost:8080/actuator/configprops | jq '.. | .maximumPoolSize? // empty'\n"
             "```\n\n"
             "Rollback if the error rate passes 1% for 5 minutes: `kubectl -n northwind-orders rollout undo "
             "deploy/orders-sync --to-revision=16`.")

    return ex


def pick_middle(s: Session, middle, rng: random.Random, budget: int):
    essential = [fn for keep, fn in middle if keep]
    optional = [i for i, (keep, _) in enumerate(middle) if not keep]
    if budget < len(essential):
        raise SystemExit(f"--exchanges too small: the story needs at least {len(essential)} middle exchanges")
    extra = budget - len(essential)
    chosen = set(rng.sample(optional, min(extra, len(optional))))
    out = [fn for i, (keep, fn) in enumerate(middle) if keep or i in chosen]
    # More exchanges than the story has: repeat short checks at the end of the middle.
    for n in range(extra - len(chosen)):
        def filler(n=n):
            question, answer = FILLERS[n % len(FILLERS)]
            s.user(question)
            s.ai(answer)
        out.append(filler)
    return out


FILLERS = [
    ("anything new in the incident channel?", "Nothing new since the last note; metrics are steady."),
    ("still green?", "Still green: error rate under 0.5%, p99 around 400 ms."),
    ("ok", "Standing by."),
]

def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT, help="output file (- for stdout)")
    parser.add_argument("--seed", type=int, default=123, help="random seed (default 123)")
    parser.add_argument("--exchanges", type=int, default=60, help="user/assistant exchanges (default 60)")
    args = parser.parse_args(argv)

    rng = random.Random(args.seed)
    session = Session()
    story(session, rng, args.exchanges)
    text = "\n".join(session.lines) + "\n"
    if str(args.out) == "-":
        sys.stdout.write(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
        users = sum(1 for line in session.lines if line.startswith('{"role":"user"'))
        print(f"wrote {args.out}: {len(session.lines)} messages, {users} user turns", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
