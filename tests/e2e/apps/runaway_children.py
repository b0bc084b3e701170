"""A test app with 4 process-isolated handlers that append ``KEY PID`` (their
own pid) to ``$CHILD_PIDS`` when they start: odd shards stop once
``lease.revoked`` turns true; even shards are a blocking loop that never looks
at the lease.  ``$PARENT_DEATH_SIGNAL=off`` leaves out Linux's parent-death
signal, so that the children rely on the pipe and the poll of the parent."""

from __future__ import annotations

import os
import time

import workgroup
from workgroup.runtime import isolation

#: Long, so that a child still running after its daemon died is seen before
#: anything else could take its resource.
SESSION_MS = 10_000

if os.environ.get("PARENT_DEATH_SIGNAL") == "off":
    isolation.PARENT_DEATH_SIGNAL = False

app = workgroup.App("runaway", session_timeout_ms=SESSION_MS, grace_ms=1000)


@app.resources("shard")
def shards() -> list[str]:
    return ["s0", "s1", "s2", "s3"]


@app.worker("shard", isolation="process")
def work(lease: workgroup.Lease) -> None:
    with open(os.environ["CHILD_PIDS"], "a", encoding="utf-8") as out:
        out.write(f"{lease.key} {os.getpid()}\n")
    if int(str(lease.key)[1:]) % 2:
        while not lease.revoked:
            time.sleep(0.01)
        return
    while True:  # the runaway: never looks at the lease
        time.sleep(0.05)
