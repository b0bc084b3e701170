"""The app benchmarks/failover.py runs under ``workgroup run``.

``FAILOVER_OUT``: a file where the leader appends ``{"pid", "time", "token"}``
when it becomes active (its first action).  ``FAILOVER_ITEMS``: how many idle
``item`` resources the app also owns (0: none).
"""

from __future__ import annotations

import json
import os
import time

import workgroup

app = workgroup.App("failover", session_timeout_ms=6_000, grace_ms=0)
ITEMS = int(os.environ.get("FAILOVER_ITEMS", "0"))


def record(line: str) -> None:
    with open(os.environ["FAILOVER_OUT"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


@app.leader("active")
async def active(lease: workgroup.Lease) -> None:
    # The time is taken first: the handler's first action.
    record(json.dumps({"pid": os.getpid(), "time": time.time(), "token": lease.token}))
    await lease.wait_revoked()


if ITEMS:

    @app.resources("item")
    def items() -> list[int]:
        return list(range(ITEMS))

    @app.worker("item")
    async def idle(lease: workgroup.Lease) -> None:
        await lease.wait_revoked()
