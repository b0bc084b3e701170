"""The chaos suite's app: shards listed in ``$CHAOS_SHARDS`` (one per line, read
at every resource poll, so the suite changes the list) and a leader; each
handler commits a counter every 50 ms as ``"<key>:<token>:<n>"`` through its
lease and records (JSON lines in ``$CHAOS_OUT``) what it reads and from which
slot, what it is about to commit, what is accepted or refused, and its end.

Once its lease is revoked a handler stops at once, unless its shard is listed
in ``$CHAOS_SLOW`` (read at the revocation): then it finishes a slow step of
``SLOW_STEP_S`` first, longer than the session and shorter than the shard
worker's grace period, as a handler stuck in a long write does.
``$CHAOS_ASSIGNORS`` lists the shard worker's assignors in preference order (a
rolling change of assignor is a restart with the next list).  With
``$CHAOS_WARM_UP=1`` the shard worker warms up (``warm_up=True``): a warming
handler prepares for ``WARM_UP_S``, then awaits ``lease.ready()``; it counts as
entered only once active (the checks' ownership starts there)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import workgroup

SESSION_TIMEOUT_MS = 3_000
#: The shard worker's grace period: longer than the session, so that a slow
#: handler outlives the session its member must keep alive while it runs.
SHARD_GRACE_MS = 5_000
SLOW_STEP_S = 4.0
#: How long a warming shard handler prepares before it says it is ready.
WARM_UP_S = 0.5
#: The longest a revoked handler waits for the answer to its last commit.
LAST_COMMIT_WAIT_S = 0.3
app = workgroup.App(
    "chaos",
    session_timeout_ms=SESSION_TIMEOUT_MS,
    heartbeat_interval_ms=300,
    rebalance_timeout_ms=10_000,
    grace_ms=200,
    resource_poll_interval_ms=500,
)


def record(**fields: object) -> None:
    line = json.dumps({"pid": os.getpid(), "time": time.time(), **fields})
    with open(os.environ["CHAOS_OUT"], "a", encoding="utf-8") as out:
        out.write(line + "\n")


def is_slow(key: str) -> bool:
    path = os.environ.get("CHAOS_SLOW")
    return bool(path) and Path(path).exists() and key in Path(path).read_text().split()


def counter(key: str, read: str | None) -> int:
    """Where this key's counter continues: its own checkpoint's, else 0."""
    if read is None:
        return 0
    named, _, n = read.rpartition(":")
    return int(n) if named.rpartition(":")[0] == key else 0


async def work(lease: workgroup.Lease) -> None:
    resource = f"{lease.kind}/{lease.key}"
    if lease.role == "warming":
        record(event="warming", resource=resource)
        await asyncio.sleep(WARM_UP_S)
        if not await lease.ready():
            record(event="warmup_called_off", resource=resource)
            return
    entered = time.time()
    try:
        checkpoint = await lease.checkpoint()
        record(
            event="start",
            resource=resource,
            token=lease.token,
            read=checkpoint,
            slot=str(lease.slot),
            entered=entered,
        )
        n = counter(str(lease.key), checkpoint)
        while not lease.revoked:
            n += 1
            if not await commit(lease, resource, n):
                return
            await asyncio.sleep(0.05)
        if lease.kind == "shard" and is_slow(str(lease.key)):
            record(event="slow", resource=resource, token=lease.token)
            await asyncio.sleep(SLOW_STEP_S)
        # Where the step ended, within the grace period (refused once it is over).
        await commit(lease, resource, n + 1)
    finally:
        record(event="end", resource=resource, token=lease.token)


async def commit(lease: workgroup.Lease, resource: str, n: int) -> bool:
    """Commit ``"<key>:<token>:<n>"``; False once refused, or unanswered
    ``LAST_COMMIT_WAIT_S`` after the lease ended (a revoked lease retries a
    commit until its grace period ends: a prompt handler does not wait that long)."""
    sent = time.time()
    # Before sending: a commit the coordinator takes may never be answered to
    # this handler (killed, or cancelled as its lease ends).
    record(event="sending", resource=resource, token=lease.token, n=n, sent=sent)
    sending = asyncio.ensure_future(lease.commit(f"{lease.key}:{lease.token}:{n}"))
    revoked = asyncio.ensure_future(lease.wait_revoked())
    try:
        await asyncio.wait({sending, revoked}, return_when=asyncio.FIRST_COMPLETED)
        if not sending.done():
            await asyncio.wait({sending}, timeout=LAST_COMMIT_WAIT_S)
        if not sending.done():
            return False
        sending.result()
    except workgroup.LeaseLostError:
        record(event="refused", resource=resource, token=lease.token, sent=sent)
        return False
    finally:
        for task in (sending, revoked):
            task.cancel()
        await asyncio.gather(sending, revoked, return_exceptions=True)
    record(event="commit", resource=resource, token=lease.token, n=n, sent=sent)
    return True


@app.resources("shard")
def shards() -> list[str]:
    path = Path(os.environ["CHAOS_SHARDS"])
    return [line for line in path.read_text().split() if line]


app.worker(
    "shard",
    assignor=os.environ.get("CHAOS_ASSIGNORS", "cooperative-sticky").split(","),
    grace_ms=SHARD_GRACE_MS,
    warm_up=os.environ.get("CHAOS_WARM_UP") == "1",
)(work)
app.leader("writer")(work)
