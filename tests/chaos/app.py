"""The chaos suite's app: shards listed in ``$CHAOS_SHARDS`` (one per line, read
at every resource poll, so the suite adds and removes them) and a leader; each
handler commits a counter every 50 ms as ``"<token>:<n>"`` through its lease and
records what it reads, is about to commit, commits and is refused (JSON lines in
``$CHAOS_OUT``).
``$CHAOS_ASSIGNORS`` lists the shard worker's assignors in preference order (a
rolling change of assignor is a restart with the next list)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import workgroup

SESSION_TIMEOUT_MS = 3_000
app = workgroup.App(
    "chaos",
    session_timeout_ms=SESSION_TIMEOUT_MS,
    heartbeat_interval_ms=300,
    rebalance_timeout_ms=10_000,
    grace_ms=200,
    resource_poll_interval_ms=500,
)


def record(**fields: object) -> None:
    line = json.dumps({"pid": os.getpid(), "time": time.time(), **fields})
    with open(os.environ["CHAOS_OUT"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


async def work(lease: workgroup.Lease) -> None:
    resource = f"{lease.kind}/{lease.key}"
    checkpoint = await lease.checkpoint()
    record(event="start", resource=resource, token=lease.token, read=checkpoint)
    n = int(checkpoint.split(":")[1]) if checkpoint else 0
    try:
        while True:
            n += 1
            value = f"{lease.token}:{n}"
            sent = time.time()
            # Before sending: a commit the coordinator takes may never be answered
            # to this handler (killed, or cancelled as its lease ends).
            record(event="sending", resource=resource, token=lease.token, n=n, sent=sent)
            try:
                await lease.commit(value)
            except workgroup.LeaseLostError:
                record(event="refused", resource=resource, token=lease.token, sent=sent)
                return
            record(event="commit", resource=resource, token=lease.token, n=n, sent=sent)
            await asyncio.sleep(0.05)
    finally:
        record(event="end", resource=resource, token=lease.token)


@app.resources("shard")
def shards() -> list[str]:
    path = Path(os.environ["CHAOS_SHARDS"])
    return [line for line in path.read_text().split() if line]


app.worker("shard", assignor=os.environ.get("CHAOS_ASSIGNORS", "cooperative-sticky").split(","))(
    work
)
app.leader("writer")(work)
