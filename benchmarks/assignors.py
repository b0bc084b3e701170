"""Assignor benchmark: big groups with identical subscriptions.

Two group sizes (uniform subscriptions: every member subscribes to every kind):

* 1,000 members x 100,000 resources (100 kinds x 1,000 keys)
* 2,000 members x 1,000,000 resources (1,000 kinds x 1,000 keys)

and three situations per size: a fresh group (nobody owns anything), one member
leaves (everyone else reports what the fresh assignment gave it), one member joins
(everyone reports its fresh assignment, the newcomer nothing).  For each we time
``assign()`` (the first call, then the best of ``--repeat`` calls; the garbage
collector runs before each call and its cost during the call is included), and
report max - min load, the resources moved and the fewest moves possible
(``total - sum(min(owned, load))``).

Kafka's Java ``CooperativeStickyAssignor`` (3.9.1) measured on this machine for
the same shapes is printed alongside.

    .venv/bin/python benchmarks/assignors.py [--scale small|large|all] [--repeat N]
        [--assignor NAME ...]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.assignors.registry import get_assignor

SCALES = {
    "small": (1_000, 100, 1_000),
    "large": (2_000, 1_000, 1_000),
}
#: Kafka 3.9.1 CooperativeStickyAssignor on this machine, seconds.
KAFKA = {
    ("small", "fresh"): 0.075,
    ("small", "one leaves"): 0.188,
    ("small", "one joins"): 0.114,
    ("large", "fresh"): 0.6,
    ("large", "one leaves"): 5.2,
    ("large", "one joins"): 5.1,
}


@dataclass
class Row:
    scale: str
    assignor: str
    scenario: str
    first: float
    best: float
    spread: int
    moved: int
    minimum: int


def timed(call: Callable[[], Assignment]) -> tuple[float, Assignment]:
    gc.collect()
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def measure(name: str, data: AssignmentInput, repeat: int) -> tuple[float, float, Assignment]:
    assignor = get_assignor(name)
    first, result = timed(lambda: assignor.assign(data))
    times = [first]
    for _ in range(repeat - 1):
        del result
        elapsed, result = timed(lambda: assignor.assign(data))
        times.append(elapsed)
    return first, min(times), result


def movement(data: AssignmentInput, assignment: Assignment) -> tuple[int, int, int]:
    """(max - min load, resources moved, fewest moves possible); checks validity."""
    loads = [len(rs) for rs in assignment.values()]
    total = sum(loads)
    expected = sum(len(keys) for keys in data.resources.values())
    seen: set[tuple[str, object]] = set()
    for resources in assignment.values():
        seen.update(resources)
    if len(seen) != total or total != expected:
        raise AssertionError(f"invalid assignment: {total} handed out, {len(seen)} distinct")
    moved = 0
    keep_possible = 0
    for mid, resources in assignment.items():
        owned = data.members[mid].owned
        if owned:
            moved += len(set(resources).difference(owned))
        else:
            moved += len(resources)
        keep_possible += min(len(owned), len(resources))
    return max(loads) - min(loads), moved, total - keep_possible


def scenarios(scale: str) -> tuple[dict[str, list[str] | range], list[str], frozenset[str]]:
    members, kinds, keys = SCALES[scale]
    resources: dict[str, list[str] | range] = {f"topic-{k:04d}": range(keys) for k in range(kinds)}
    ids = [f"member-{i:05d}" for i in range(members)]
    return resources, ids, frozenset(resources)


def run(scale: str, names: list[str], repeat: int, console: Console) -> list[Row]:
    resources, ids, kinds = scenarios(scale)
    rows: list[Row] = []
    for name in names:
        fresh = AssignmentInput(resources, {m: MemberInfo(m, kinds) for m in ids})
        first, best, base = measure(name, fresh, repeat)
        rows.append(Row(scale, name, "fresh", first, best, *movement(fresh, base)))
        console.log(f"{scale} {name} fresh: {best:.3f} s")

        owners = {m: MemberInfo(m, kinds, owned=tuple(base[m]), generation=1) for m in ids}
        leaving = ids[len(ids) // 2]
        left = AssignmentInput(resources, {m: i for m, i in owners.items() if m != leaving})
        first, best, result = measure(name, left, repeat)
        rows.append(Row(scale, name, "one leaves", first, best, *movement(left, result)))
        console.log(f"{scale} {name} one leaves: {best:.3f} s")
        del result, left

        joined = AssignmentInput(
            resources, {**owners, "member-new": MemberInfo("member-new", kinds, generation=-1)}
        )
        first, best, result = measure(name, joined, repeat)
        rows.append(Row(scale, name, "one joins", first, best, *movement(joined, result)))
        console.log(f"{scale} {name} one joins: {best:.3f} s")
        del result, joined, owners, base, fresh
    return rows


def table(rows: list[Row]) -> Table:
    out = Table(title="Assignors: identical subscriptions (time per assign())")
    for column in ("group", "assignor", "situation", "first s", "best s", "Kafka Java s"):
        out.add_column(column, justify="right" if column.endswith("s") else "left")
    for column in ("max-min", "moved", "min moves"):
        out.add_column(column, justify="right")
    for row in rows:
        members, kinds, keys = SCALES[row.scale]
        kafka = (
            KAFKA.get((row.scale, row.scenario)) if row.assignor == "cooperative-sticky" else None
        )
        out.add_row(
            f"{members:,} x {kinds * keys:,}",
            row.assignor,
            row.scenario,
            f"{row.first:.3f}",
            f"{row.best:.3f}",
            f"{kafka:.3f}" if kafka is not None else "",
            str(row.spread),
            f"{row.moved:,}",
            f"{row.minimum:,}",
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=["small", "large", "all"], default="all")
    parser.add_argument("--repeat", type=int, default=3, help="calls per situation (best kept)")
    parser.add_argument(
        "--assignor",
        action="append",
        dest="assignors",
        help="assignor to run (repeatable; default: cooperative-sticky, plus range "
        "and round-robin on the small group)",
    )
    args = parser.parse_args()
    console = Console(width=max(Console().width, 140))
    scales = ["small", "large"] if args.scale == "all" else [args.scale]
    rows: list[Row] = []
    for scale in scales:
        names = args.assignors or (
            ["cooperative-sticky", "range", "round-robin"]
            if scale == "small"
            else ["cooperative-sticky"]
        )
        rows.extend(run(scale, names, max(1, args.repeat), console))
    console.print(table(rows))
    console.print(
        "first = first call in the process (cold caches); best = fastest of "
        f"{max(1, args.repeat)} calls; moved = resources whose owner changed (a resource "
        "of a departed member counts as moved); min moves = total - sum(min(owned, load))."
    )
    if rows:
        console.print(f"median best: {statistics.median(r.best for r in rows):.3f} s")


if __name__ == "__main__":
    main()
