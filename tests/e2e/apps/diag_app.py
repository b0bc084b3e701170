"""A test app for the daemon's diagnostics: one worker kind whose keys are
``$DIAG_KEYS`` (comma-separated, may be empty); each handler prints a line to
stdout every 100 ms until it is stopped."""

from __future__ import annotations

import asyncio
import os

import workgroup

app = workgroup.App(
    "diag",
    session_timeout_ms=int(os.environ.get("DIAG_SESSION_MS", "3000")),
    grace_ms=200,
    resource_poll_interval_ms=200,
)


@app.resources("shard")
def shards() -> list[str]:
    return [key for key in os.environ.get("DIAG_KEYS", "a,b").split(",") if key]


@app.worker("shard")
async def work(lease: workgroup.Lease) -> None:
    n = 0
    while True:
        n += 1
        print(f"{lease.key} {n}", flush=True)
        await asyncio.sleep(0.1)
