"""A worker app: 8 shards processed with checkpoints, and one publisher at a time.

Run a coordinator and two or three daemons, then stop and kill them at will::

    workgroup coordinator --listen 127.0.0.1:9092 &
    workgroup run examples.billing:app --instance-id worker-1 &
    workgroup run examples.billing:app --instance-id worker-2 &

Each shard's position is committed through the group's coordinator: it carries
on from where the previous owner stopped, and a process that lost the shard
(paused past its session, replaced) cannot commit over its successor.
"""

from __future__ import annotations

import asyncio
import os

import workgroup

app = workgroup.App(
    "billing",
    bootstrap=os.environ.get("BILLING_BOOTSTRAP"),
    session_timeout_ms=6_000,
    grace_ms=2_000,
)


@app.resources("shard")
def shards() -> list[str]:
    return [f"shard-{i}" for i in range(8)]


@app.worker("shard")
async def run_shard(lease: workgroup.Lease) -> None:
    position = int(await lease.checkpoint() or 0)
    print(f"{lease.kind}/{lease.key}: from {position} (token {lease.token})", flush=True)
    while not lease.revoked:
        position += 1  # one batch of the shard's work
        await lease.commit(str(position))
        await asyncio.sleep(0.5)


@app.leader("publisher")
async def publish(lease: workgroup.Lease) -> None:
    print(f"publisher: active (token {lease.token})", flush=True)
    await lease.wait_revoked()
    print("publisher: handing over", flush=True)
