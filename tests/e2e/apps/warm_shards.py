"""A test app: 4 shards whose worker warms up (``warm_up=True``, 0.5 s of
preparation) and records when each process is active on each shard (JSON lines
in ``$WARM_SHARDS_OUT``: pid, instance, event ``active``/``ended``, key, time)."""

from __future__ import annotations

import asyncio
import json
import os
import time

import workgroup

app = workgroup.App(
    os.environ.get("WARM_SHARDS_APP", "warmshards"),
    session_timeout_ms=3_000,
    grace_ms=1_000,
)
PREPARE_S = 0.5


def record(event: str, key: str) -> None:
    line = json.dumps(
        {
            "pid": os.getpid(),
            "instance": os.environ.get("WORKGROUP_INSTANCE_ID"),
            "time": time.time(),
            "event": event,
            "key": key,
        }
    )
    with open(os.environ["WARM_SHARDS_OUT"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


@app.resources("shard")
def shards() -> list[str]:
    return [f"s{i}" for i in range(4)]


@app.worker("shard", warm_up=True)
async def work(lease: workgroup.Lease) -> None:
    await asyncio.sleep(PREPARE_S)  # load state; a cold start prepares as well
    if lease.role == "warming" and not await lease.ready():
        return  # the move was called off
    record("active", str(lease.key))
    try:
        await lease.wait_revoked()
    finally:
        record("ended", str(lease.key))
