"""The app benchmarks/live_balance.py runs under ``workgroup run``.

``LIVE_BALANCE_SHARDS`` shards (default 64) of kind ``shard``; each handler
reports its shard's Zipf load with ``lease.report_load`` every
``LIVE_BALANCE_REPORT_S`` seconds (default 1) until its lease ends.  The load of
shard ``k`` is ``1000 / (rank + 1) ** LIVE_BALANCE_ZIPF_S`` (default 1.1), the
ranks shuffled with ``random.Random(LIVE_BALANCE_SEED)`` as in
``benchmarks/balance.py``, so every daemon and the benchmark agree on them.
The group is ``<LIVE_BALANCE_APP>.shard`` (default ``livebalance``).
"""

from __future__ import annotations

import asyncio
import os
import random

import workgroup


def zipf_loads(shards: int, seed: int, exponent: float) -> list[float]:
    """Load of each shard: Zipf over ranks shuffled by ``seed``."""
    ranks = list(range(shards))
    random.Random(seed).shuffle(ranks)
    return [1000.0 / (rank + 1) ** exponent for rank in ranks]


SHARDS = int(os.environ.get("LIVE_BALANCE_SHARDS", "64"))
LOADS = zipf_loads(
    SHARDS,
    int(os.environ.get("LIVE_BALANCE_SEED", "1")),
    float(os.environ.get("LIVE_BALANCE_ZIPF_S", "1.1")),
)
REPORT_S = float(os.environ.get("LIVE_BALANCE_REPORT_S", "1.0"))

app = workgroup.App(
    os.environ.get("LIVE_BALANCE_APP", "livebalance"), session_timeout_ms=6_000, grace_ms=1_000
)


@app.resources("shard")
def shards() -> list[int]:
    return list(range(SHARDS))


@app.worker("shard")
async def shard(lease: workgroup.Lease) -> None:
    load = LOADS[int(lease.key)]
    while not lease.revoked:
        lease.report_load(load)
        try:
            async with asyncio.timeout(REPORT_S):
                await lease.wait_revoked()
        except TimeoutError:
            pass
