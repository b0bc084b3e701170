"""Handlers that do blocking work in ``asyncio.to_thread`` for as long as they own
their shard (``tests/e2e/test_threaded_handlers.py``).  More shards than asyncio's
default executor has threads (the CPU count plus 4).  Each records when its
blocking work starts and ends, as JSON lines in ``THREADED_OUT``."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import workgroup

SHARDS = int(os.environ.get("THREADED_SHARDS", "12"))
OUT = os.environ.get("THREADED_OUT", "threaded.jsonl")
#: This shard's blocking work ignores its revocation: it outlives the grace period.
STUBBORN = os.environ.get("THREADED_STUBBORN", "")
_write = threading.Lock()

app = workgroup.App(
    os.environ.get("THREADED_APP", "threaded"), session_timeout_ms=3_000, grace_ms=1_000
)


@app.resources("shard")
def shards() -> list[str]:
    return [f"shard-{i}" for i in range(SHARDS)]


def record(event: str, key: object) -> None:
    line = json.dumps({"event": event, "key": str(key), "pid": os.getpid(), "at": time.time()})
    with _write, open(OUT, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def blocking_work(lease: workgroup.Lease) -> None:
    """A client library's blocking loop, until the lease is revoked."""
    record("start", lease.key)
    while not lease.revoked or lease.key == STUBBORN:
        time.sleep(0.02)
    record("end", lease.key)


@app.worker("shard")
async def run_shard(lease: workgroup.Lease) -> None:
    await asyncio.to_thread(blocking_work, lease)
