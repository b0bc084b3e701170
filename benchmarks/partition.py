"""A member cut off by a network partition: how long until it reports its
resources lost, until they run on the other member, and the gap between the
two (the fence's safety margin), with and without the session margin.

The embedded coordinator advertises a :class:`~workgroup.testing.FaultProxy`;
two members (cooperative-sticky, 6 shards) reach it through the proxy.  Each
round partitions member ``a`` (its Kafka client id: every byte held, nothing
closed), times the end of ``a``'s ``on_lost`` (a plain function: it runs in a
worker thread, as a thread handler stops), the start of ``b``'s ``on_assigned``
for ``a``'s shards and the moment ``b`` owns all 6, then heals and waits for
3 + 3 again.  The gap is ``b`` starting minus ``a`` stopping: it must be
positive, and the margin is what keeps it so when ``a`` runs late.  The default
heartbeat is the daemon's (a third of the session, at most 250 ms).
``python benchmarks/partition.py --help``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from workgroup import Resource
from workgroup.member import GroupMember
from workgroup.protocol import Protocol
from workgroup.testing import FaultProxy, free_port, run_coordinator
from workgroup.testing.signals import interrupt_on_termination

SHARDS = {"shard": range(6)}


@dataclass(frozen=True)
class Round:
    #: From the cut to the end of ``a``'s ``on_lost``.
    lost_s: float
    #: From the cut to ``b`` owning all 6 shards.
    moved_s: float
    #: ``b``'s first ``on_assigned`` of ``a``'s shards minus the end of ``a``'s ``on_lost``.
    gap_s: float


async def settled(*owners: tuple[GroupMember, int], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(m.stable and len(m.assignment) == n for m, n in owners):
        if time.monotonic() > deadline:
            raise TimeoutError([len(m.assignment) for m, _ in owners])
        await asyncio.sleep(0.01)


async def measure(args: argparse.Namespace, margin_ms: int | None) -> tuple[int, list[Round]]:
    """Rounds with ``margin_ms`` (``None``: the default); returns the margin in force too."""
    port = free_port()
    stopped_at: list[float] = []
    started_at: list[float] = []
    watched: set[Resource] = set()
    lost = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_lost(resources: tuple[Resource, ...], generation: int) -> None:
        stopped_at.append(time.monotonic())  # in a worker thread, as a thread handler
        loop.call_soon_threadsafe(lost.set)

    async def on_assigned(resources: tuple[Resource, ...], generation: int) -> None:
        if watched.intersection(resources):
            started_at.append(time.monotonic())

    def member(proxy: FaultProxy, name: str) -> GroupMember:
        return GroupMember(
            proxy.bootstrap,
            "partition-bench",
            [Protocol.of("cooperative-sticky")],
            resources=SHARDS,
            client_id=f"partition-bench-{name}",
            session_timeout_ms=args.session_ms,
            heartbeat_interval_ms=args.heartbeat_ms or min(args.session_ms // 3, 500),
            rebalance_timeout_ms=10_000,
            session_margin_ms=margin_ms,
            on_lost=on_lost if name == "a" else None,
            on_assigned=on_assigned if name == "b" else None,
        )

    rounds: list[Round] = []
    with run_coordinator("--advertised-listener", f"127.0.0.1:{port}") as coordinator:
        async with FaultProxy(coordinator.bootstrap, listen_port=port) as proxy:
            a, b = member(proxy, "a"), member(proxy, "b")
            async with a, b:
                await settled((a, 3), (b, 3))
                for _ in range(args.rounds):
                    await asyncio.sleep(1.0)
                    stopped_at.clear()
                    started_at.clear()
                    watched.clear()
                    watched.update(a.assignment)
                    lost.clear()
                    cut = time.monotonic()
                    proxy.partition("partition-bench-a")
                    await settled((b, 6))
                    moved = time.monotonic() - cut
                    await asyncio.wait_for(lost.wait(), args.session_ms / 1000 + 5)
                    rounds.append(Round(stopped_at[0] - cut, moved, started_at[0] - stopped_at[0]))
                    proxy.unpartition("partition-bench-a")
                    await settled((a, 3), (b, 3))
            return a.config.effective_session_margin_ms, rounds


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--session-ms", type=int, default=6_000)
    parser.add_argument(
        "--heartbeat-ms", type=int, default=None, help="default: a third of the session, ≤ 500"
    )
    parser.add_argument(
        "--margins",
        default="0,default",
        help="comma-separated session margins in ms ('default': the member's own)",
    )
    args = parser.parse_args()
    margins = [None if m.strip() == "default" else int(m) for m in args.margins.split(",")]
    results = [asyncio.run(measure(args, margin)) for margin in margins]
    heartbeat_ms = args.heartbeat_ms or min(args.session_ms // 3, 500)
    title = (
        f"a partitioned member, session {args.session_ms / 1000:.1f} s, heartbeat {heartbeat_ms} ms"
    )
    table = Table(title=title)
    for column in ("margin", "round", "on_lost (a stopped)", "b owns all 6", "gap: b started - a"):
        table.add_column(column, justify="right")
    for (margin_ms, rounds), given in zip(results, margins, strict=True):
        label = f"{margin_ms} ms" + (" (default)" if given is None else "")
        for i, r in enumerate(rounds, 1):
            table.add_row(label, str(i), f"{r.lost_s:.3f} s", f"{r.moved_s:.3f} s", ms(r.gap_s))
        gaps = [r.gap_s for r in rounds]
        table.add_row(
            label,
            "median",
            f"{statistics.median(r.lost_s for r in rounds):.3f} s",
            f"{statistics.median(r.moved_s for r in rounds):.3f} s",
            f"{ms(statistics.median(gaps))} (min {ms(min(gaps))})",
            end_section=True,
        )
    Console(width=120).print(table)


if __name__ == "__main__":
    # SIGTERM and SIGHUP (timeout, CI, a closed terminal) clean up as Ctrl-C does.
    with interrupt_on_termination():
        main()
