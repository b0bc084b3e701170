"""The app benchmarks/failover.py runs under ``workgroup run``.

``FAILOVER_OUT``: a file where the leader appends ``{"pid", "time", "token"}``
when it becomes active (its first action).  ``FAILOVER_ITEMS``: how many idle
``item`` resources the app also owns (0: none); ``FAILOVER_ITEMS_FILE``: a file
holding that number instead, re-read with the catalog (to add resources); the
wall-clock time of the first read that sees a new number is written to
``<FAILOVER_ITEMS_FILE>.read``.  ``FAILOVER_STANDBYS``: the leader's standby
candidates (0: none); a standby warms up for ``FAILOVER_PREPARE_S`` seconds,
appends ``{"pid", "ready": time}`` and awaits ``lease.ready()``; once it leads
it appends its first action as above.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import workgroup

app = workgroup.App("failover", session_timeout_ms=6_000, grace_ms=0)
ITEMS = int(os.environ.get("FAILOVER_ITEMS", "0"))
ITEMS_FILE = os.environ.get("FAILOVER_ITEMS_FILE")
STANDBYS = int(os.environ.get("FAILOVER_STANDBYS", "0"))
PREPARE_S = float(os.environ.get("FAILOVER_PREPARE_S", "0.5"))


def record(line: str) -> None:
    with open(os.environ["FAILOVER_OUT"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


@app.leader("active", standbys=STANDBYS)
async def active(lease: workgroup.Lease) -> None:
    if lease.role == "standby":
        await asyncio.sleep(PREPARE_S)  # replay state, build caches
        record(json.dumps({"pid": os.getpid(), "ready": time.time()}))
        if not await lease.ready():
            return
    # The time is taken first: the handler's first action.
    record(json.dumps({"pid": os.getpid(), "time": time.time(), "token": lease.token}))
    await lease.wait_revoked()


if ITEMS:

    @app.resources("item")
    def items() -> list[int]:
        if ITEMS_FILE:
            with open(ITEMS_FILE, encoding="utf-8") as count:
                n = int(count.read())
            if n != ITEMS:
                seen = ITEMS_FILE + ".read"
                if not os.path.exists(seen):
                    with open(seen, "w", encoding="utf-8") as out:
                        out.write(str(time.time()))
            return list(range(n))
        return list(range(ITEMS))

    @app.worker("item")
    async def idle(lease: workgroup.Lease) -> None:
        await lease.wait_revoked()
