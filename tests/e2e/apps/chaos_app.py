"""The chaos test's app: 6 shards and a leader, each committing a counter every
50 ms as ``"<token>:<n>"``, and recording what it reads and commits (JSON
lines in ``$CHAOS_OUT``)."""

from __future__ import annotations

import asyncio
import json
import os
import time

import workgroup

app = workgroup.App("chaos", session_timeout_ms=3_000, heartbeat_interval_ms=300, grace_ms=200)


def record(**fields: object) -> None:
    with open(os.environ["CHAOS_OUT"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"pid": os.getpid(), "time": time.time(), **fields}) + "\n")


async def work(lease: workgroup.Lease) -> None:
    resource = f"{lease.kind}/{lease.key}"
    checkpoint = await lease.checkpoint()
    record(event="start", resource=resource, token=lease.token, read=checkpoint)
    n = int(checkpoint.split(":")[1]) if checkpoint else 0
    while True:
        n += 1
        value = f"{lease.token}:{n}"
        sent = time.time()
        try:
            await lease.commit(value)
        except workgroup.LeaseLostError:
            record(event="refused", resource=resource, token=lease.token, sent=sent)
            return
        record(event="commit", resource=resource, token=lease.token, n=n, sent=sent)
        await asyncio.sleep(0.05)


@app.resources("shard")
def shards() -> list[str]:
    return [f"s{i}" for i in range(6)]


app.worker("shard")(work)
app.leader("writer")(work)
