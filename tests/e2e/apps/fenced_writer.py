"""A test app: one leader that commits a counter every 50 ms, recording every
commit (accepted or refused) as a JSON line in ``$RUNTIME_APP_OUT``."""

from __future__ import annotations

import asyncio
import json
import os
import time

import workgroup

app = workgroup.App(
    "fenced",
    session_timeout_ms=int(os.environ.get("RUNTIME_APP_SESSION_MS", "3000")),
    heartbeat_interval_ms=int(os.environ.get("RUNTIME_APP_HEARTBEAT_MS", "500")),
    grace_ms=200,
)


def record(**fields: object) -> None:
    with open(os.environ["RUNTIME_APP_OUT"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"pid": os.getpid(), "time": time.time(), **fields}) + "\n")


@app.leader("writer")
async def writer(lease: workgroup.Lease) -> None:
    record(event="active", token=lease.token, checkpoint=await lease.checkpoint())
    n = 0
    while True:
        n += 1
        value = f"{os.getpid()}:{n}"
        sent = time.time()
        try:
            await lease.commit(value)
        except workgroup.LeaseLostError as exc:
            record(event="refused", token=lease.token, sent=sent, why=str(exc))
            return
        record(event="committed", token=lease.token, sent=sent, value=value)
        await asyncio.sleep(0.05)
