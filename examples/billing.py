"""A worker app: 8 shards processed with checkpoints, and one publisher at a time.

Run a coordinator and two or three daemons, then stop and kill them at will::

    workgroup run examples.billing:app --instance-id worker-1 &
    workgroup run examples.billing:app --instance-id worker-2 &

(without ``--bootstrap``, the first daemon starts the local coordinator).

Each shard's position is committed through the group's coordinator: it carries
on from where the previous owner stopped, and a process that lost the shard
(paused past its session, replaced) cannot commit over its successor.
"""

from __future__ import annotations

import asyncio

import workgroup

app = workgroup.App("billing", session_timeout_ms=6_000, grace_ms=2_000)


@app.resources("shard")
def shards() -> list[str]:  # may be async; re-read every 5 s
    return [f"shard-{i}" for i in range(8)]


@app.worker("shard", assignor="cooperative-sticky")
async def run_shard(lease: workgroup.Lease) -> None:  # while this process owns the shard
    position = int(await lease.checkpoint() or 0)  # where the last owner stopped
    print(f"{lease.kind}/{lease.key}: from {position} (token {lease.token})", flush=True)
    while not lease.revoked:
        position += 1  # one batch of the shard's work
        await lease.commit(str(position))  # refused once the lease is lost
        await asyncio.sleep(0.5)


@app.leader("publisher")
async def publish(lease: workgroup.Lease) -> None:  # one process in the group at a time
    print(f"publisher: active (token {lease.token})", flush=True)
    await lease.wait_revoked()
    print("publisher: handing over", flush=True)
