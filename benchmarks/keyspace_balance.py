"""Keyspace against consistent hashing against one lease per key, side by side.

Zipf(``--exponent``, 1.1) requests over ``--keys`` (1,000,000) int keys whose
hot spot moves every ``--move-every-s`` (the ranks land on other keys: a
random offset), the same requests going to three layouts at once:

* **(a) keyspace**: ``--daemons`` workgroup daemons (``App.serve``'s runner,
  in this process, on an embedded coordinator it starts) with one keyspace
  ``users`` (``PlannerSettings()`` defaults).  Each request is routed with
  ``Directory.owner("users", key)``; a daemon whose slices no longer own the
  key refuses it (the 421 of ``examples/sharded_service/users.py``), and the
  sender refreshes its directory and retries.  Each daemon reports each
  slice's request rate (``report_load``) and its busiest sampled keys
  (``report_key_load``); the leader re-plans when the loads move.
* **(b) consistent hashing**: ``--shards`` listed shards, a key's shard its
  hash modulo the shards, the shards placed on the same daemons by the
  ``consistent-hash`` assignor (run in this process: membership never changes,
  so neither does its assignment; it never reads loads).
* **(c) one lease per key**: what it costs to catalog the keys as listed
  resources: building the catalog, the ``cooperative-sticky`` assignment over
  the daemons, and encoding each member's assignment, at growing key counts
  until a step breaks (the 1 MiB assignment limit) or passes ``--per-key-budget-s``.

The load is simulated in this process, not sent over HTTP (two shared cores
cannot carry HTTP traffic for several daemons and measure them too): every
``--tick-s`` a batch of ``--requests-per-tick`` requests is drawn and routed,
and each daemon is charged the requests routed to its keys.  After each move
the tables give the busiest daemon's load / mean, the rounds (map epochs) until
it is at most 1.10, the share of keys each round moved, the 421s, and lookups/s.

    .venv/bin/python benchmarks/keyspace_balance.py [--daemons 8] [--moves 3]
        [--move-every-s 60] [--keys 1000000] [--shards 64] [--per-key-budget-s 60]
    # a quick run on two cores:
    .venv/bin/python benchmarks/keyspace_balance.py --daemons 4 --move-every-s 20
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import heapq
import time
import tracemalloc
import uuid
from collections import Counter
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

import workgroup
from examples.sharded_service.load import ZipfKeys
from workgroup.assignors.base import AssignmentInput, MemberInfo
from workgroup.assignors.consistent_hash import ConsistentHashAssignor
from workgroup.assignors.sticky import CooperativeStickyAssignor
from workgroup.directory import Directory, Owner
from workgroup.errors import WorkgroupError
from workgroup.keyspaces import PlannerSettings, SliceMap, key_hash
from workgroup.keyspaces.planner import moved_share
from workgroup.member.driver import member_keyspace
from workgroup.member.keyspace import KnownMap, same_map
from workgroup.protocol.metadata import AssignmentData, BinaryCodec, MemberMetadata
from workgroup.runtime.app import Settings
from workgroup.runtime.keyspaces import SliceLease
from workgroup.runtime.runner import AppRunner
from workgroup.testing import run_coordinator

KEYSPACE = "users"
TARGET = 1.10
#: One request in this many counts towards its key's sampled load.
KEY_SAMPLE_EVERY = 8
#: The busiest sampled keys each daemon reports per tick.
HOT_KEYS_PER_DAEMON = 16


class Daemon:
    """One daemon of the keyspace app: its runner and the slice leases it holds."""

    def __init__(self, name: str, app_name: str) -> None:
        self.name = name
        self.app = workgroup.App(app_name, grace_ms=100)
        self.leases: dict[int, SliceLease] = {}
        self.runner: AppRunner | None = None
        #: Keys this daemon reported a load for at its last report.
        self.reported: set[int] = set()

        @self.app.keyspace(KEYSPACE, settings=PlannerSettings())
        async def serve(lease: SliceLease) -> None:
            self.leases[lease.slice.id] = lease
            try:
                await lease.wait_revoked()
            finally:
                if self.leases.get(lease.slice.id) is lease:
                    del self.leases[lease.slice.id]

    def start(
        self, bootstrap: str, balance_interval_ms: int
    ) -> tuple[asyncio.Event, asyncio.Task[None]]:
        settings = Settings(
            bootstrap=bootstrap,
            instance_id=self.name,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
            grace_ms=100,
            balance_interval_ms=balance_interval_ms,
        )
        stop = asyncio.Event()
        self.runner = AppRunner(self.app, settings)
        return stop, asyncio.create_task(self.runner.run(stop))

    def map(self) -> KnownMap | None:
        """The map this daemon holds: whole if it carries it, else its part."""
        if self.runner is None or not self.runner.groups:
            return None
        keyspace = member_keyspace(self.runner.groups[0].member)
        return keyspace.map if keyspace is not None else None

    def member_id(self) -> str | None:
        if self.runner is None or not self.runner.groups:
            return None
        return self.runner.groups[0].member.member_id

    def owning(self, key: int) -> SliceLease | None:
        """The lease whose slice owns ``key`` here now (``None``: refused with 421)."""
        smap = self.map()
        piece = None if smap is None else smap.slice_for_key(key)
        if piece is None:
            return None
        lease = self.leases.get(piece.id)
        return lease if lease is not None and lease.owns(key) else None


@dataclass
class Period:
    """One hot spot: from a move (or the start) to the next move."""

    label: str
    ratios: list[tuple[int, float]] = field(default_factory=list)  # (rounds since, ratio)
    hash_ratios: list[float] = field(default_factory=list)
    #: Each observed change of map: the share of keys it moved, and the rounds
    #: (epochs) it spans (more than 1: rounds closer than the watcher's poll).
    moved: list[tuple[float, int]] = field(default_factory=list)
    refused: int = 0
    unrouted: int = 0
    requests: int = 0

    def rounds_to_target(self) -> str:
        for rounds, ratio in self.ratios:
            if ratio <= TARGET:
                return str(rounds)
        return "not reached"


@dataclass(frozen=True)
class Measured:
    """What the run of (a) and (b) measured."""

    periods: list[Period]
    lookups_per_s: float
    hash_lookups_per_s: float
    #: Slices in all, fewest and most per member, at the end.
    slices: tuple[int, int, int]
    #: Shards per member (consistent hashing).
    shards: Counter[str]


class MapWatcher:
    """Follows the newest map the daemons adopted, every ``poll_s``: the rounds
    (map epochs) since it started and the share of keys each one moved."""

    def __init__(self, daemons: list[Daemon], first: SliceMap, poll_s: float = 0.02) -> None:
        self.daemons = daemons
        self.current = first
        self.rounds = 0
        self.poll_s = poll_s
        self.steps: list[tuple[float, int]] = []

    async def run(self) -> None:
        while True:
            newest = newest_map(self.daemons)
            if newest is not None and newest.epoch > self.current.epoch:
                before = self.current
                live = frozenset(p.owner for p in before.slices if p.owner is not None)
                self.steps.append((moved_share(before, newest, live), newest.epoch - before.epoch))
                self.rounds += newest.epoch - before.epoch
                self.current = newest
            await asyncio.sleep(self.poll_s)

    def take_steps(self) -> list[tuple[float, int]]:
        steps, self.steps = self.steps, []
        return steps


def ratio_of(served: Counter[str], members: list[str]) -> float:
    total = sum(served[m] for m in members)
    return max(served[m] for m in members) * len(members) / total if total else 0.0


async def settle(daemons: list[Daemon], timeout_s: float) -> SliceMap:
    """Until every daemon holds the slices of one map."""
    async with asyncio.timeout(timeout_s):
        while True:
            maps = [d.map() for d in daemons]
            first = newest_map(daemons)
            if first is not None and all(m is not None and same_map(m, first) for m in maps):
                held = sorted(s for d in daemons for s in d.leases)
                if held == sorted(p.id for p in first.slices):
                    return first
            await asyncio.sleep(0.1)


def newest_map(daemons: list[Daemon]) -> SliceMap | None:
    """The newest whole map a daemon holds (two carry it whole)."""
    maps = [m for m in (d.map() for d in daemons) if isinstance(m, SliceMap)]
    return max(maps, key=lambda m: (m.epoch, m.max_token), default=None)


@dataclass
class Traffic:
    """One tick's requests as the daemons answered them."""

    served: Counter[str] = field(default_factory=Counter)
    #: daemon -> slice id -> requests.
    per_slice: dict[str, Counter[int]] = field(default_factory=dict)
    #: daemon -> key -> sampled requests (one in KEY_SAMPLE_EVERY).
    sampled: dict[str, Counter[int]] = field(default_factory=dict)


async def route(
    batch: list[int],
    owners: list[Owner | None],
    directory: Directory,
    by_name: dict[str, Daemon],
    period: Period,
) -> Traffic:
    """Send each key to the owner the directory names; a daemon that does not own
    it refuses (421), and the sender refreshes its directory and retries once
    (refused again, the request waits for the next tick: counted unrouted)."""
    traffic = Traffic()
    pending = list(zip(batch, owners, strict=True))
    for attempt in range(2):
        refused = []
        for n, (key, owner) in enumerate(pending):
            if owner is None or owner.instance_id is None:
                period.unrouted += 1  # moving: the sender retries later
                continue
            daemon = by_name[owner.instance_id]
            lease = daemon.owning(key)
            if lease is None:
                refused.append(key)
                continue
            traffic.served[daemon.name] += 1
            traffic.per_slice.setdefault(daemon.name, Counter())[lease.slice.id] += 1
            if n % KEY_SAMPLE_EVERY == 0:
                traffic.sampled.setdefault(daemon.name, Counter())[key] += 1
        period.refused += len(refused)
        if not refused:
            break
        if attempt:
            period.unrouted += len(refused)
            break
        with contextlib.suppress(WorkgroupError):
            await directory.refresh()
        pending = [(key, directory.owner(KEYSPACE, key)) for key in refused]
    return traffic


def report_loads(daemon: Daemon, traffic: Traffic, tick_s: float) -> None:
    per_slice = traffic.per_slice.get(daemon.name, Counter())
    sampled = traffic.sampled.get(daemon.name, Counter())
    for slice_id, lease in list(daemon.leases.items()):
        if lease.held:
            lease.report_load(per_slice[slice_id] / tick_s)
    hot = heapq.nlargest(HOT_KEYS_PER_DAEMON, sampled.items(), key=lambda kv: kv[1])
    now = {key for key, _ in hot}
    for key in daemon.reported - now:
        owner = daemon.owning(key)
        if owner is not None:
            owner.report_key_load(key, 0.0)  # no longer hot: the leader forgets it
    for key, count in hot:
        holder = daemon.owning(key)
        if holder is not None:
            holder.report_key_load(key, count * KEY_SAMPLE_EVERY / tick_s)
    daemon.reported = now


async def run_keyspace(args: argparse.Namespace, bootstrap: str, console: Console) -> Measured:
    names = [f"d{i}" for i in range(args.daemons)]
    app_name = f"bench-{uuid.uuid4().hex[:6]}"
    daemons = [Daemon(name, app_name) for name in names]
    by_name = {d.name: d for d in daemons}
    running = [d.start(bootstrap, args.balance_interval_ms) for d in daemons]
    keys = ZipfKeys(args.keys, args.exponent, args.seed)
    shard_owner = consistent_hash_owners(names, args.shards)
    periods: list[Period] = []
    lookups = 0
    lookup_s = 0.0
    hash_lookup_s = 0.0
    try:
        first = await settle(daemons, 120)
        console.print(
            f"(a) {args.daemons} daemons settled: {len(first)} slices, map epoch {first.epoch}"
        )
        async with Directory(bootstrap, f"{app_name}.{KEYSPACE}", refresh_ms=200) as directory:
            await directory.refresh()
            watcher = MapWatcher(daemons, first)
            watching = asyncio.create_task(watcher.run())
            try:
                started = time.monotonic()
                for move in range(args.moves + 1):
                    if move:
                        keys.move()
                    period = Period("start" if move == 0 else f"move {move}")
                    periods.append(period)
                    rounds_at_start = watcher.rounds
                    ends = started + (move + 1) * args.move_every_s
                    while (tick := time.monotonic()) < ends:
                        batch = keys.keys(args.requests_per_tick)
                        period.requests += len(batch)
                        began = time.perf_counter()
                        owners = [directory.owner(KEYSPACE, key) for key in batch]
                        lookup_s += time.perf_counter() - began
                        lookups += len(batch)
                        traffic = await route(batch, owners, directory, by_name, period)
                        # (b) the same requests over consistent hashing's shards.
                        began = time.perf_counter()
                        by_hash = Counter(shard_owner[key_hash(key) % args.shards] for key in batch)
                        hash_lookup_s += time.perf_counter() - began
                        period.hash_ratios.append(ratio_of(by_hash, names))
                        for daemon in daemons:
                            report_loads(daemon, traffic, args.tick_s)
                        period.moved.extend(watcher.take_steps())
                        since = watcher.rounds - rounds_at_start
                        period.ratios.append((since, ratio_of(traffic.served, names)))
                        await asyncio.sleep(max(0.0, args.tick_s - (time.monotonic() - tick)))
            finally:
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watching
        final = watcher.current
    finally:
        for stop, _ in running:
            stop.set()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)
    slices = Counter(p.owner for p in final.slices)
    return Measured(
        periods=periods,
        lookups_per_s=lookups / lookup_s if lookup_s else 0.0,
        hash_lookups_per_s=lookups / hash_lookup_s if hash_lookup_s else 0.0,
        slices=(len(final), min(slices.values()), max(slices.values())),
        shards=Counter(shard_owner.values()),
    )


def consistent_hash_owners(names: list[str], shards: int) -> dict[int, str]:
    members = {
        name: MemberInfo(member_id=name, kinds=frozenset({"shard"}), instance_id=name)
        for name in names
    }
    assignment = ConsistentHashAssignor().assign(
        AssignmentInput(resources={"shard": list(range(shards))}, members=members)
    )
    return {int(key): member for member, owned in assignment.items() for _, key in owned}


def per_key_leases(args: argparse.Namespace) -> Table:
    """(c): the cost of cataloguing every key as a listed resource."""
    table = Table(title=f"(c) one lease per key: cataloguing the keys ({args.daemons} members)")
    for column in (
        "keys", "catalog", "assign", "encode (assignments, metadata)", "memory",
        "largest assignment", "largest metadata", "verdict",
    ):  # fmt: skip
        table.add_column(column, justify="right")
    names = [f"d{i}" for i in range(args.daemons)]
    members = {
        name: MemberInfo(member_id=name, kinds=frozenset({KEYSPACE}), instance_id=name)
        for name in names
    }
    codec = BinaryCodec()
    count = 1_000
    while count <= args.keys:
        gc.collect()
        tracemalloc.start()
        began = time.perf_counter()
        catalog = list(range(count))
        cataloged = time.perf_counter()
        assignment = CooperativeStickyAssignor().assign(
            AssignmentInput(resources={KEYSPACE: catalog}, members=members)
        )
        assigned = time.perf_counter()
        verdict = "fits 1 MiB"
        largest = largest_meta = 0
        try:
            for member, owned in assignment.items():
                largest = max(
                    largest, len(codec.encode_assignment(AssignmentData(assigned=tuple(owned))))
                )
                # What the member sends back at the next round: what it owns, with a
                # load for each.
                meta = MemberMetadata(
                    kinds=(KEYSPACE,), owned=tuple(owned), owned_generation=1,
                    instance_id=member, loads=tuple(1.0 for _ in owned),
                )  # fmt: skip
                largest_meta = max(largest_meta, len(codec.encode_metadata(meta)))
        except WorkgroupError as error:
            verdict = f"breaks: {str(error)[:60]}"
        encoded = time.perf_counter()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        table.add_row(
            f"{count:,}",
            f"{cataloged - began:.2f} s",
            f"{assigned - cataloged:.2f} s",
            f"{encoded - assigned:.2f} s",
            f"{peak / 2**20:,.0f} MiB",
            f"{largest:,} B" if largest else "-",
            f"{largest_meta:,} B" if largest_meta else "-",
            verdict,
        )
        del catalog, assignment
        spent = encoded - began
        if verdict != "fits 1 MiB":
            break
        if spent * 10 > args.per_key_budget_s and count * 10 <= args.keys:
            table.add_row(
                f"{count * 10:,}", "", "", "", "", "", "", f"skipped: ~{spent * 10:.0f} s > budget"
            )
            break
        count *= 10
    return table


def period_table(title: str, periods: list[Period]) -> Table:
    table = Table(title=title)
    for column in (
        "hot spot", "busiest/mean first", "rounds to <= 1.10", "busiest/mean last",
        "rounds", "keys moved/round (max)", "421s", "unrouted",
    ):  # fmt: skip
        table.add_column(column, justify="right")
    for period in periods:
        ratios = [r for _, r in period.ratios]
        table.add_row(
            period.label,
            f"{ratios[0]:.2f}" if ratios else "-",
            period.rounds_to_target(),
            f"{ratios[-1]:.2f}" if ratios else "-",
            str(period.ratios[-1][0] if period.ratios else 0),
            moved_text(period.moved),
            f"{period.refused:,} ({period.refused / max(period.requests, 1):.1%})",
            f"{period.unrouted:,}",
        )
    return table


def moved_text(steps: list[tuple[float, int]]) -> str:
    """The most keys one round moved; a change seen only after several rounds
    is shown apart, with its rounds (its share is theirs together)."""
    single = [share for share, rounds in steps if rounds == 1]
    text = f"{max(single):.1%}" if single else "-"
    merged = [(share, rounds) for share, rounds in steps if rounds > 1]
    if merged:
        share, rounds = max(merged)
        text += f" ({share:.1%} over {rounds})"
    return text


def hash_table(periods: list[Period], shard_count: int) -> Table:
    table = Table(title=f"(b) consistent hashing: {shard_count} shards, the same requests")
    for column in (
        "hot spot",
        "busiest/mean first",
        "rounds to <= 1.10",
        "busiest/mean last",
        "keys moved",
        "421s",
    ):
        table.add_column(column, justify="right")
    for period in periods:
        ratios = period.hash_ratios
        reached = "0" if ratios and ratios[0] <= TARGET else "never (static)"
        table.add_row(period.label, f"{ratios[0]:.2f}", reached, f"{ratios[-1]:.2f}", "0", "0")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemons", type=int, default=8)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--exponent", type=float, default=1.1)
    parser.add_argument("--moves", type=int, default=3)
    parser.add_argument("--move-every-s", type=float, default=60.0)
    parser.add_argument("--tick-s", type=float, default=0.5)
    parser.add_argument("--requests-per-tick", type=int, default=20_000)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--balance-interval-ms", type=int, default=1_000)
    parser.add_argument("--per-key-budget-s", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    for name in ("daemons", "keys", "shards", "requests_per_tick"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.move_every_s <= 0 or args.tick_s <= 0:
        parser.error("--move-every-s and --tick-s must be above 0")
    console = Console(width=140)
    console.print(
        f"Zipf({args.exponent}) over {args.keys:,} keys, {args.requests_per_tick:,} requests "
        f"every {args.tick_s} s, hot spot moving every {args.move_every_s} s ({args.moves} moves); "
        "load simulated in-process (requests routed and charged to their owner, no HTTP)"
    )
    with run_coordinator(
        "--min-session-timeout-ms", "500", "--initial-rebalance-delay-ms", "200"
    ) as server:
        result = asyncio.run(run_keyspace(args, server.bootstrap, console))
    title = f"(a) keyspace: {args.daemons} daemons, PlannerSettings() defaults"
    console.print(period_table(title, result.periods))
    total, fewest, most = result.slices
    console.print(
        f"(a) slices: {total} in all, {fewest}-{most} per member; "
        f"Directory.owner lookups/s: {result.lookups_per_s:,.0f}"
    )
    console.print(hash_table(result.periods, args.shards))
    per_member = [result.shards.get(f"d{i}", 0) for i in range(args.daemons)]
    console.print(
        f"(b) shards per member: {min(per_member)}-{max(per_member)}; "
        f"key -> shard -> member lookups/s: {result.hash_lookups_per_s:,.0f}"
    )
    console.print(per_key_leases(args))


if __name__ == "__main__":
    main()
