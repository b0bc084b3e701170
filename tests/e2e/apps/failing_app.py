"""A test app for what a user sees when their code fails: the keys are
``$FAIL_KEYS_ALL`` (default ``alpha,beta``); the handler of a key in
``$FAIL_KEYS`` raises ``ValueError`` at once (with a local variable holding a
secret, which must never be printed), one in ``$BLOCK_KEYS`` blocks the event
loop with ``time.sleep($BLOCK_S)`` once; the others append their key and the
process id to ``$WORK_LOG`` every 100 ms.  The resource function raises while
the file ``$SOURCE_FAILS`` exists."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import workgroup

app = workgroup.App(
    "failing",
    session_timeout_ms=int(os.environ.get("FAIL_SESSION_MS", "3000")),
    grace_ms=200,
    resource_poll_interval_ms=int(os.environ.get("FAIL_POLL_MS", "200")),
)
blocked: set[str] = set()


@app.resources("shard")
def shards() -> list[str]:
    flag = os.environ.get("SOURCE_FAILS")
    if flag and Path(flag).exists():
        password = "hunter2-source"
        raise RuntimeError(f"cannot list shards (connecting with {len(password)} chars)")
    return os.environ.get("FAIL_KEYS_ALL", "alpha,beta").split(",")


@app.worker("shard", restart_backoff_ms=50, max_restart_backoff_ms=200)
async def work(lease: workgroup.Lease) -> None:
    secret = "hunter2-handler"
    if lease.key in os.environ.get("FAIL_KEYS", "").split(","):
        raise ValueError(f"bad record in {lease.key} ({len(secret)})")
    if lease.key in os.environ.get("BLOCK_KEYS", "").split(",") and lease.key not in blocked:
        blocked.add(lease.key)
        time.sleep(float(os.environ.get("BLOCK_S", "3")))  # noqa: ASYNC251 (the mistake)
    log = os.environ.get("WORK_LOG")
    while True:
        if log:
            with open(log, "a", encoding="utf-8") as out:  # noqa: ASYNC230 (tiny)
                out.write(f"{lease.key} {os.getpid()}\n")
        await asyncio.sleep(0.1)
