"""A test app: 12 shards whose handlers record when they start and end (JSON
lines in ``$SLOW_STOP_OUT``).  Once ``$SLOW_STOP_ARMED`` exists, the handlers of
even shards are slow to stop: they run on after ``lease.revoked`` until they are
cancelled at the end of the grace period (a coroutine), or finish a long step
that outlives it (a thread), or are terminated (a child process).  Odd shards
stop as soon as ``lease.revoked`` turns true.

``$SLOW_STOP_STYLE``: ``async`` (coroutine), ``thread`` (plain function) or
``process`` (plain function with ``isolation="process"``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from types import FrameType

import workgroup

#: The issue's scenario: SLOW_STOP_SESSION_MS=6000 SLOW_STOP_GRACE_MS=10000.
SESSION_MS = int(os.environ.get("SLOW_STOP_SESSION_MS", "3000"))
GRACE_MS = int(os.environ.get("SLOW_STOP_GRACE_MS", "4500"))
#: A thread's long step: it outlives the grace period by this much.
THREAD_OVERRUN_S = float(os.environ.get("SLOW_STOP_THREAD_OVERRUN_S", "1.5"))
STYLE = os.environ.get("SLOW_STOP_STYLE", "async")

app = workgroup.App(
    os.environ.get("SLOW_STOP_APP", "slowstop"),
    session_timeout_ms=SESSION_MS,
    rebalance_timeout_ms=GRACE_MS + 15_000,
    grace_ms=GRACE_MS,
)


def record(event: str, key: str) -> None:
    # A process-isolated handler records its daemon's pid (its parent's).
    pid = os.getppid() if STYLE == "process" else os.getpid()
    line = json.dumps({"pid": pid, "time": time.time(), "event": event, "key": key})
    with open(os.environ["SLOW_STOP_OUT"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


def slow(key: str) -> bool:
    return int(key[1:]) % 2 == 0 and Path(os.environ["SLOW_STOP_ARMED"]).exists()


@app.resources("shard")
def shards() -> list[str]:
    return [f"s{i}" for i in range(12)]


async def coroutine_handler(lease: workgroup.Lease) -> None:
    key = str(lease.key)
    record("start", key)
    try:
        await lease.wait_revoked()
        if slow(key):
            await asyncio.sleep(3600)  # a step that ends only when cancelled
    finally:
        record("end", key)


def thread_handler(lease: workgroup.Lease) -> None:
    key = str(lease.key)
    record("start", key)
    try:
        while not lease.revoked:
            time.sleep(0.01)
        if slow(key):
            time.sleep(GRACE_MS / 1000 + THREAD_OVERRUN_S)  # cannot be interrupted
    finally:
        record("end", key)


def process_handler(lease: workgroup.Lease) -> None:
    key = str(lease.key)

    def terminated(signum: int, frame: FrameType | None) -> None:
        record("end", key)
        os._exit(0)

    signal.signal(signal.SIGTERM, terminated)
    record("start", key)
    while not lease.revoked:
        time.sleep(0.01)
    if slow(key):
        time.sleep(3600)  # ends only when the parent terminates the process
    record("end", key)


if STYLE == "process":
    app.worker("shard", isolation="process")(process_handler)
elif STYLE == "thread":
    app.worker("shard")(thread_handler)
else:
    app.worker("shard")(coroutine_handler)
