"""A member cut off by a network partition: how long until it reports its
resources lost, and until they run on the other member, against the session
timeout.

The embedded coordinator advertises a :class:`~workgroup.testing.FaultProxy`;
two members (cooperative-sticky, 6 shards) reach it through the proxy.  Each
round partitions member ``a`` (its Kafka client id: every byte held, nothing
closed), times ``a``'s ``on_lost`` and the moment ``b`` owns all 6 shards, then
heals and waits for 3 + 3 again.  ``python benchmarks/partition.py --help``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from rich.console import Console
from rich.table import Table

from workgroup import GroupMember, Protocol, Resource
from workgroup.testing import FaultProxy, free_port, run_coordinator

SHARDS = {"shard": range(6)}


async def settled(*owners: tuple[GroupMember, int], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(m.stable and len(m.assignment) == n for m, n in owners):
        if time.monotonic() > deadline:
            raise TimeoutError([len(m.assignment) for m, _ in owners])
        await asyncio.sleep(0.01)


async def measure(args: argparse.Namespace) -> list[tuple[float, float]]:
    port = free_port()
    lost_at: list[float] = []
    lost = asyncio.Event()

    async def on_lost(resources: tuple[Resource, ...], generation: int) -> None:
        lost_at.append(time.monotonic())
        lost.set()

    def member(proxy: FaultProxy, name: str) -> GroupMember:
        return GroupMember(
            proxy.bootstrap,
            "partition-bench",
            [Protocol.of("cooperative-sticky")],
            resources=SHARDS,
            client_id=f"partition-bench-{name}",
            session_timeout_ms=args.session_ms,
            heartbeat_interval_ms=args.session_ms // 3,
            rebalance_timeout_ms=10_000,
            on_lost=on_lost if name == "a" else None,
        )

    rounds: list[tuple[float, float]] = []
    with run_coordinator("--advertised-listener", f"127.0.0.1:{port}") as coordinator:
        async with FaultProxy(coordinator.bootstrap, listen_port=port) as proxy:
            a, b = member(proxy, "a"), member(proxy, "b")
            async with a, b:
                await settled((a, 3), (b, 3))
                for _ in range(args.rounds):
                    await asyncio.sleep(1.0)
                    lost_at.clear()
                    lost.clear()
                    cut = time.monotonic()
                    proxy.partition("partition-bench-a")
                    await settled((b, 6))
                    moved = time.monotonic() - cut
                    await asyncio.wait_for(lost.wait(), args.session_ms / 1000 + 5)
                    rounds.append((lost_at[0] - cut, moved))
                    proxy.unpartition("partition-bench-a")
                    await settled((a, 3), (b, 3))
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--session-ms", type=int, default=6_000)
    args = parser.parse_args()
    rounds = asyncio.run(measure(args))
    table = Table(title=f"a partitioned member, session timeout {args.session_ms / 1000:.1f} s")
    for column in ("", "on_lost on the cut-off member", "its shards run on the other"):
        table.add_column(column, justify="right")
    for i, (lost, moved) in enumerate(rounds, 1):
        table.add_row(f"round {i}", f"{lost:.2f} s", f"{moved:.2f} s")
    lost_s = [r[0] for r in rounds]
    moved_s = [r[1] for r in rounds]
    table.add_row(
        "median / max",
        f"{statistics.median(lost_s):.2f} / {max(lost_s):.2f} s",
        f"{statistics.median(moved_s):.2f} / {max(moved_s):.2f} s",
    )
    Console().print(table)


if __name__ == "__main__":
    main()
