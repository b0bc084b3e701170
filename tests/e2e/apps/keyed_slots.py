"""A test app whose keys come from a JSON file (``$SLOTS_KEYS``), re-read every
500 ms: each handler records where it started (token, checkpoint, slot), then
commits ``"<key>:<n>"`` every 100 ms, recording every commit as a JSON line in
``$SLOTS_OUT``."""

from __future__ import annotations

import asyncio
import json
import os
import time

import workgroup

app = workgroup.App(
    "slots",
    session_timeout_ms=int(os.environ.get("SLOTS_SESSION_MS", "3000")),
    heartbeat_interval_ms=300,
    resource_poll_interval_ms=500,
    grace_ms=300,
)


def record(**fields: object) -> None:
    with open(os.environ["SLOTS_OUT"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"pid": os.getpid(), "time": time.time(), **fields}) + "\n")


@app.resources("shard")
def keys() -> list[str]:
    with open(os.environ["SLOTS_KEYS"], encoding="utf-8") as source:
        loaded: list[str] = json.load(source)
    return loaded


@app.worker("shard")
async def work(lease: workgroup.Lease) -> None:
    checkpoint = await lease.checkpoint()
    record(
        event="started", key=lease.key, token=lease.token, checkpoint=checkpoint,
        slot=lease.slot.topic,
    )  # fmt: skip
    n = int(checkpoint.split(":")[1]) if checkpoint else 0
    while not lease.revoked:
        n += 1
        value = f"{lease.key}:{n}"
        sent = time.time()
        try:
            await lease.commit(value)
        except workgroup.LeaseLostError:
            return
        record(event="committed", key=lease.key, token=lease.token, value=value, sent=sent)
        await asyncio.sleep(0.1)
