"""Rounds to balance a keyspace after a hot-spot move: the planner alone, in process.

The loads ``benchmarks/keyspace_balance.py`` produces, fed to the leader's
planner (:func:`~workgroup.keyspaces.planner.plan_next_map`) round after round
on a simulated clock, with no daemon, coordinator or network: Zipf(``--exponent``)
requests over ``--keys`` int keys (``examples.sharded_service.load.ZipfKeys``),
``--requests-per-tick`` every ``--tick-s``, ``--ticks-per-round`` ticks between
two rounds (the balancing interval).  Between rounds each member reports what
the benchmark's daemons report: each slice's rate (``report_load``) and, every
tick, its ``HOT_KEYS_PER_DAEMON`` busiest keys sampled one request in
``KEY_SAMPLE_EVERY`` (``report_key_load``: the latest value per key, 0 for a key
no longer among them), of which the leader sees the ``max_sampled_keys`` (64)
heaviest in the member's own slices.  The hot spot moves ``--moves`` times,
after the map has settled.

Per round the table gives the busiest member's load over the mean (the exact
Zipf loads under the new map, and as the planner estimated it), what the round
did (splits, merges, moves, share of the key space moved) and what bound it:

- ``budget``: the churn budget was spent (less than the narrowest slice of the
  busiest member is left);
- ``hot key``: the hottest key is not yet alone in its slice;
- ``estimate``: the planner saw the busiest member within the tolerance, the
  loads say otherwise (its model of the slices it split, or sampling);
- ``stuck``: the planner sees the busiest above the tolerance, budget left, and
  made no move that helps.

    .venv/bin/python benchmarks/keyspace_rounds.py                   # 4 and 8 members
    .venv/bin/python benchmarks/keyspace_rounds.py --members 8 --moves 5 --seed 3
"""

from __future__ import annotations

import argparse
import heapq
import itertools
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

from examples.sharded_service.load import ZipfKeys
from workgroup.keyspaces import HASH_SPACE, KeyspaceLoads, PlannerSettings, SliceMap, key_hash
from workgroup.keyspaces.planner import handing_over, plan_next_map

TARGET = 1.10
#: As in keyspace_balance.py: one request in this many is sampled for its key's load.
KEY_SAMPLE_EVERY = 8
#: As in keyspace_balance.py: the busiest sampled keys a daemon reports per tick.
HOT_KEYS_PER_DAEMON = 16
#: What a member's report carries at most (``KeyspaceConfig.max_sampled_keys``).
MAX_SAMPLED_KEYS = 64


class ExactLoads:
    """The expected share of the requests per hash range, for the current hot spot."""

    def __init__(self, zipf: ZipfKeys) -> None:
        count = zipf.count
        self.count = count
        # Keys in hash order, once: a move only changes which rank each one has.
        self.order = sorted(range(count), key=key_hash)
        self.points = [key_hash(key) for key in self.order]
        weights = [zipf.cumulative[0]] + [b - a for a, b in itertools.pairwise(zipf.cumulative)]
        self.weights = [w / zipf.cumulative[-1] for w in weights]
        self.prefix: list[float] = []
        self.hottest = 0
        self.at(zipf.offset)

    def at(self, offset: int) -> None:
        count, weights = self.count, self.weights
        shares = [weights[(key - offset) % count] for key in self.order]
        self.prefix = [0.0, *itertools.accumulate(shares)]
        self.hottest = key_hash(offset)

    def of(self, start: int, end: int) -> float:
        return (
            self.prefix[bisect_left(self.points, end)]
            - self.prefix[bisect_left(self.points, start)]
        )

    def per_member(self, smap: SliceMap) -> dict[str, float]:
        out: dict[str, float] = dict.fromkeys((p.owner or "-" for p in smap.slices), 0.0)
        for piece in smap.slices:
            out[piece.owner or "-"] += self.of(piece.start, piece.end)
        return out


def ratio(per_member: dict[str, float], members: list[str]) -> float:
    total = sum(per_member.get(m, 0.0) for m in members)
    return max(per_member.get(m, 0.0) for m in members) * len(members) / total if total else 0.0


@dataclass
class MemberReports:
    """One member's sampled keys, as ``MemberKeyspace`` keeps them."""

    keys: dict[int, float] = field(default_factory=dict)
    reported: set[int] = field(default_factory=set)


def measure(
    smap: SliceMap,
    zipf: ZipfKeys,
    reports: dict[str, MemberReports],
    args: argparse.Namespace,
) -> KeyspaceLoads:
    """The loads the members would report over one round's ticks under ``smap``."""
    per_slice: Counter[int] = Counter()
    for _ in range(args.ticks_per_round):
        sampled: dict[str, Counter[int]] = {}
        for n, key in enumerate(zipf.keys(args.requests_per_tick)):
            piece = smap.slice_for_key(key)
            per_slice[piece.id] += 1
            if n % KEY_SAMPLE_EVERY == 0 and piece.owner is not None:
                sampled.setdefault(piece.owner, Counter())[key] += 1
        for member, report in reports.items():
            counts = sampled.get(member, Counter())
            hot = heapq.nlargest(HOT_KEYS_PER_DAEMON, counts.items(), key=lambda kv: kv[1])
            now = {key for key, _ in hot}
            for key in report.reported - now:
                report.keys[key_hash(key)] = 0.0
            for key, count in hot:
                report.keys[key_hash(key)] = count * KEY_SAMPLE_EVERY / args.tick_s
            report.reported = now
    seconds = args.ticks_per_round * args.tick_s
    keys: dict[int, float] = {}
    for member, report in reports.items():
        mine = [(p, x) for p, x in report.keys.items() if smap.slice_of(p).owner == member]
        report.keys = dict(mine)
        for point, load in heapq.nlargest(MAX_SAMPLED_KEYS, mine, key=lambda kv: kv[1]):
            keys[point] = keys.get(point, 0.0) + load
    return KeyspaceLoads({i: n / seconds for i, n in per_slice.items()}, keys)


def estimated(smap: SliceMap, before: SliceMap, loads: KeyspaceLoads) -> dict[str, float]:
    """Each member's load as the planner's model puts it: a slice's reported load
    (at least its sampled keys), the rest spread evenly over its range."""
    points = sorted(loads.keys.items())
    old = []
    for piece in before.slices:
        lo = bisect_left(points, (piece.start, -1.0))
        hi = bisect_left(points, (piece.end, -1.0))
        sampled = sum(x for _, x in points[lo:hi])
        load = max(loads.slices.get(piece.id, 0.0), sampled)
        old.append((piece.start, piece.end, max(load - sampled, 0.0) / piece.width))
    starts = [s for s, _, _ in old]
    out: dict[str, float] = dict.fromkeys((p.owner or "-" for p in smap.slices), 0.0)
    for piece in smap.slices:
        i = bisect_left(starts, piece.start + 1) - 1
        load = 0.0
        while i < len(old) and old[i][0] < piece.end:
            start, end, density = old[i]
            load += density * (min(end, piece.end) - max(start, piece.start))
            i += 1
        lo = bisect_left(points, (piece.start, -1.0))
        hi = bisect_left(points, (piece.end, -1.0))
        out[piece.owner or "-"] += load + sum(x for _, x in points[lo:hi])
    return out


def plan_waits(smap: SliceMap, capacities: dict[str, float], claimed: frozenset[int]) -> bool:
    return handing_over(smap, frozenset(capacities), claimed)


def handed_over(before: SliceMap, after: SliceMap) -> frozenset[int]:
    """The slices of ``after`` a member takes from another (withheld until that
    one has let go of it: a cooperative round's follow-up hands them out)."""
    old = before.by_id()
    return frozenset(
        p.id
        for p in after.slices
        if p.id in old and old[p.id].owner is not None and old[p.id].owner != p.owner
    )


def in_handover(
    smap: SliceMap, measured: KeyspaceLoads, moving: frozenset[int]
) -> tuple[KeyspaceLoads, frozenset[int]]:
    """What the follow-up round of a cooperative hand-over sees, at once (no
    tick between): a moving slice is held and reported by nobody (its former
    owner let go, its keys are not its own by the new map; its new owner has
    not measured it); a slice born in the last round is held, not yet measured,
    its keys still reported by its owner."""
    slices = {i: x for i, x in measured.slices.items() if i not in moving}
    keys = {p: x for p, x in measured.keys.items() if smap.slice_of(p).id not in moving}
    claimed = frozenset(p.id for p in smap.slices if p.id not in moving)
    return KeyspaceLoads(slices, keys), claimed


def bound_by(
    smap: SliceMap,
    truth: float,
    seen: float,
    moved: float,
    settings: PlannerSettings,
    exact: ExactLoads,
    busiest: str,
) -> str:
    reasons = []
    hot = smap.slice_of(exact.hottest)
    if hot.width > 1:
        reasons.append("hot key")
    if truth > TARGET:
        narrowest = min((p.width for p in smap.slices if p.owner == busiest), default=0)
        if (settings.churn_budget - moved) * HASH_SPACE < narrowest:
            reasons.append("budget")
        if seen <= 1 + settings.imbalance_tolerance:
            reasons.append("estimate")
        elif not reasons:
            reasons.append("stuck")
    return ", ".join(reasons) or "-"


def run(members_count: int, args: argparse.Namespace, exact: ExactLoads, console: Console) -> None:
    zipf = ZipfKeys(args.keys, args.exponent, args.seed)
    exact.at(zipf.offset)
    settings = PlannerSettings()
    members = [f"m{i}" for i in range(members_count)]
    capacities = dict.fromkeys(members, 1.0)
    reports = {m: MemberReports() for m in members}
    smap = SliceMap.uniform("users", 1)
    loads = KeyspaceLoads()
    summary = Table(title=f"{members_count} members: rounds (map epochs) to <= {TARGET}")
    for column in (
        "hot spot", "busiest/mean first", "rounds to <= 1.10", "busiest/mean last",
        "rounds", "max moved/round",
    ):  # fmt: skip
        summary.add_column(column, justify="right")
    for move in range(args.moves + 1):
        if move:
            zipf.move()
            exact.at(zipf.offset)
        table = Table(title=f"{members_count} members, {'start' if not move else f'move {move}'}")
        for column in (
            "round", "epoch", "busiest/mean", "planner's view", "slices", "splits",
            "merges", "moves", "moved", "hot key slice", "bound by",
        ):  # fmt: skip
            table.add_column(column, justify="right")
        first = ratio(exact.per_member(smap), members)
        table.add_row("0", str(smap.epoch), f"{first:.2f}", "", str(len(smap)), *[""] * 6)
        rounds_to: str = "0" if first <= TARGET and move else "not reached"
        epochs = 0
        quiet = 0
        most_moved = 0.0
        handing_over: frozenset[int] | None = None
        for number in range(1, args.rounds + 1):
            if handing_over is None:
                loads = measure(smap, zipf, reports, args)
                claimed = frozenset(p.id for p in smap.slices)
                kind = "full"
            else:
                loads, claimed = in_handover(smap, loads, handing_over)
                kind = "follow-up"
            if kind == "follow-up" and plan_waits(smap, capacities, claimed):
                kind = "follow-up (waits)"
            plan = plan_next_map(smap, loads, capacities, settings, claimed=claimed)
            before, smap = smap, plan.map
            epochs += plan.changed
            per_member = exact.per_member(smap)
            truth = ratio(per_member, members)
            view = estimated(smap, before, loads)
            seen = ratio(view, members)
            busiest = max(members, key=lambda m: per_member.get(m, 0.0))
            most_moved = max(most_moved, plan.moved)
            hot = smap.slice_of(exact.hottest)
            handing_over = handed_over(before, smap) if args.handover else None
            if handing_over is not None and not handing_over:
                handing_over = None
            table.add_row(
                f"{number} {kind}",
                str(smap.epoch),
                f"{truth:.2f}",
                f"{seen:.2f}",
                str(len(smap)),
                str(plan.splits),
                str(plan.merges),
                str(plan.moves),
                f"{plan.moved:.1%}",
                "1 point" if hot.width == 1 else f"{hot.width / HASH_SPACE:.2e}",
                bound_by(smap, truth, seen, plan.moved, settings, exact, busiest),
            )
            if truth <= TARGET and rounds_to == "not reached":
                rounds_to = str(epochs)
            quiet = quiet + 1 if not plan.changed else 0
            if quiet >= 2:
                break
        console.print(table)
        summary.add_row(
            "start" if not move else f"move {move}",
            f"{first:.2f}",
            rounds_to,
            f"{ratio(exact.per_member(smap), members):.2f}",
            str(epochs),
            f"{most_moved:.1%}",
        )
    console.print(summary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--exponent", type=float, default=1.1)
    parser.add_argument("--moves", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=15, help="the most rounds per hot spot")
    parser.add_argument("--tick-s", type=float, default=0.5)
    parser.add_argument("--ticks-per-round", type=int, default=2)
    parser.add_argument("--requests-per-tick", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--no-handover",
        dest="handover",
        action="store_false",
        help="no follow-up round for slices handed over (every round sees measured loads)",
    )
    args = parser.parse_args()
    if min(args.members) < 1 or args.keys < 1 or args.rounds < 1 or args.ticks_per_round < 1:
        parser.error("--members, --keys, --rounds and --ticks-per-round must be at least 1")
    if args.tick_s <= 0 or args.requests_per_tick < 1:
        parser.error("--tick-s must be above 0 and --requests-per-tick at least 1")
    console = Console(width=140)
    exact = ExactLoads(ZipfKeys(args.keys, args.exponent, args.seed))
    for count in args.members:
        run(count, args, exact, console)


if __name__ == "__main__":
    main()
