"""A test app whose handlers fail once their lease ended: each records its key
in ``$STARTED_LOG`` when it starts, then, once ``lease.revoked`` turns true,
raises (as a step whose last commit failed would).  Nothing restarts a handler
of an ended lease, so its error is the handler task's own."""

from __future__ import annotations

import os

import workgroup

app = workgroup.App("fails-after-end", session_timeout_ms=3000, grace_ms=2000)


@app.resources("shard")
def shards() -> list[str]:
    return ["a", "b"]


@app.worker("shard")
async def work(lease: workgroup.Lease) -> None:
    with open(os.environ["STARTED_LOG"], "a", encoding="utf-8") as out:  # noqa: ASYNC230 (tiny)
        out.write(f"{lease.key}\n")
    await lease.wait_revoked()
    raise RuntimeError(f"the last step of {lease.key} failed after its lease ended")
