"""The sharded ETL's shape with plain asyncio handlers, no Spark.

Each shard is a directory of JSON-lines event files (``<data>/input/<shard>/``).
The daemon that owns a shard processes its files in name order: per file, the
per-customer totals go to ``<data>/output/<shard>/<file>`` (written aside, then
renamed in), then the file's name is committed as the shard's checkpoint
through the lease.  A moved shard resumes after its last committed file; a
file whose output was written but whose checkpoint was not is processed again
and its output replaced with the same content, so every event counts once.

One process at a time, the publisher, sums every shard's outputs into
``<data>/summary.json``, refusing to replace a summary a newer token wrote.

    ASYNC_DATA=/tmp/shards workgroup run examples.async_shards.app:app --instance-id a &
    ASYNC_DATA=/tmp/shards workgroup run examples.async_shards.app:app --instance-id b &
    ASYNC_DATA=/tmp/shards python -m examples.async_shards.feed --seconds 30
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import time
from collections import Counter
from pathlib import Path

import workgroup

DATA = Path(os.environ.get("ASYNC_DATA", "demo-output/async-shards")).resolve()
SHARDS = int(os.environ.get("ASYNC_SHARDS", "4"))
POLL_S = 0.2

app = workgroup.App("async-shards", session_timeout_ms=6_000, grace_ms=5_000)


@app.resources("shard")
def shards() -> list[str]:
    return [f"shard-{i}" for i in range(SHARDS)]


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def aggregate(path: Path) -> dict[str, dict[str, int]]:
    """Per customer in one input file: events and amount."""
    events: Counter[str] = Counter()
    amounts: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        if line:
            event = json.loads(line)
            events[event["customer"]] += 1
            amounts[event["customer"]] += event["amount_cents"]
    return {c: {"events": events[c], "amount_cents": amounts[c]} for c in sorted(events)}


@app.worker("shard", assignor="cooperative-sticky")
async def process_shard(lease: workgroup.Lease) -> None:
    shard = str(lease.key)
    source, output = DATA / "input" / shard, DATA / "output" / shard
    done = await lease.checkpoint() or ""  # the last file the previous owner committed
    while not lease.revoked:
        pending = (
            sorted(p for p in source.glob("*.json") if p.name > done) if source.exists() else []
        )
        for path in pending:
            if lease.revoked:
                break
            totals = await asyncio.to_thread(aggregate, path)
            await asyncio.to_thread(write_atomically, output / path.name, json.dumps(totals))
            await lease.commit(path.name)  # refused once the lease is lost: stop there
            done = path.name
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(lease.wait_revoked(), POLL_S)


def summarize() -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {}
    for path in sorted((DATA / "output").glob("*/*.json")):
        for customer, row in json.loads(path.read_text()).items():
            entry = totals.setdefault(customer, {"events": 0, "amount_cents": 0})
            entry["events"] += row["events"]
            entry["amount_cents"] += row["amount_cents"]
    return totals


def publish(token: int) -> None:
    """Replace the summary under a lock, unless a newer token wrote it."""
    totals = summarize()
    DATA.mkdir(parents=True, exist_ok=True)
    with (DATA / ".summary.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        summary = DATA / "summary.json"
        previous = json.loads(summary.read_text()) if summary.exists() else {"token": 0}
        if previous["token"] > token:
            raise workgroup.LeaseLostError(f"token {token} is older than {previous['token']}")
        events = sum(row["events"] for row in totals.values())
        write_atomically(
            summary,
            json.dumps(
                {"token": token, "time": time.time(), "events": events, "customers": totals}
            ),
        )


@app.leader("publisher")
async def publisher(lease: workgroup.Lease) -> None:
    while not lease.revoked:
        await lease.commit(f"{time.time():.3f}")
        await asyncio.to_thread(publish, lease.token)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(lease.wait_revoked(), 1.0)
