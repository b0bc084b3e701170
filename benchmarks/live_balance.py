"""Live load balancing of ``workgroup run`` daemons on the embedded coordinator.

Four daemons of ``benchmarks/apps/live_balance_app.py`` (64 shards; each
handler reports its shard's Zipf(1.1) load with ``lease.report_load`` every
second, ranks shuffled by ``--seed``) run against a fresh ``workgroup
coordinator`` per scenario (initial rebalance delay 3 s, Kafka's default, so
that daemons started at once form the first generation together even when a
busy machine starts them a second apart), with ``--balance-interval-ms`` 5 s:

* **together**: all 4 started at once, capacity 1 each;
* **rolling**: one started every ``--stagger-s`` seconds (10);
* **capacities**: capacities 2, 1, 1, 1, started at once (the figure is
  utilisation, load / capacity).

The group is described (``workgroup.admin.describe_group``) every
``--sample-s`` seconds.  For each scenario the table gives max/mean at the end
of the window (``--window-s`` after the last daemon started), the leader's
first round (its generation and members), the group's generation at the end,
the leader's balancing rounds and moves (its ``member.load_balanced`` and
``member.moves`` log events), the shard owner changes seen between samples,
and the time from the last start until max/mean was first within the target
(1.10).  The best achievable max/mean is printed
beside it: LPT (largest shard first onto the process with the lowest
utilisation after taking it), improved by single moves and pairwise swaps
while the busiest process gets lighter (an upper bound on the optimum; the
lower bound is max(1, the biggest shard / the biggest capacity / the mean)).

The daemons and the coordinator run the ``workgroup`` package this script
imports (``PYTHONPATH``), with ``python -P`` so that the current directory does
not shadow it: ``PYTHONPATH=/tmp/old .venv/bin/python benchmarks/live_balance.py``
measures another checkout's code.  Every process is stopped at the end, on an
error and on Ctrl-C or SIGTERM.  Usage::

    .venv/bin/python benchmarks/live_balance.py                        # ≈ 4 min
    .venv/bin/python benchmarks/live_balance.py --scenarios together --window-s 30
    .venv/bin/python benchmarks/live_balance.py --log-dir /tmp/lb     # keep the daemons' JSON logs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import workgroup
from workgroup.admin import GroupDescription, describe_group
from workgroup.errors import WorkgroupError
from workgroup.testing import run_coordinator
from workgroup.testing.signals import interrupt_on_termination

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "apps"))
from live_balance_app import zipf_loads  # noqa: E402  (the app's own loads)

#: The checkout whose ``workgroup`` the daemons and the coordinator run.
CODE_ROOT = Path(workgroup.__file__).resolve().parents[1]
APP = "livebalance"
GROUP = f"{APP}.shard"
TARGET = 1.10


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    capacities: tuple[float, ...]
    #: Seconds after the scenario's start at which each daemon starts.
    starts: tuple[float, ...]


@dataclass
class Sample:
    #: Seconds since the last daemon started (negative before).
    at: float
    generation: int | None
    #: ``member id -> (capacity, shards)``.
    members: dict[str, tuple[float, list[int]]]


@dataclass
class Result:
    scenario: Scenario
    samples: list[Sample] = field(default_factory=list)
    leader_events: list[dict[str, Any]] = field(default_factory=list)
    load_before: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)
    #: Wall-clock time of the last daemon's start (log timestamps are wall clock).
    last_start_wall: float = 0.0
    errors: list[str] = field(default_factory=list)


def ratio(loads: Sequence[float], members: Mapping[str, tuple[float, list[int]]]) -> float | None:
    """Max/mean utilisation (load / capacity) when every shard is assigned
    exactly once (``None``: a rebalance is under way, or nobody is there)."""
    owned = [k for _, keys in members.values() for k in keys]
    if not members or len(owned) != len(loads) or set(owned) != set(range(len(loads))):
        return None
    mean = sum(loads) / sum(capacity for capacity, _ in members.values())
    return max(sum(loads[k] for k in keys) / capacity for capacity, keys in members.values()) / mean


def best_ratio(loads: Sequence[float], capacities: Sequence[float]) -> float:
    """LPT, then single moves and pairwise swaps while they lower the busiest
    process's utilisation (see the module docstring)."""
    bins: list[list[int]] = [[] for _ in capacities]
    totals = [0.0] * len(capacities)
    for k in sorted(range(len(loads)), key=lambda k: -loads[k]):
        i = min(range(len(bins)), key=lambda i: (totals[i] + loads[k]) / capacities[i])
        bins[i].append(k)
        totals[i] += loads[k]

    def utilisation(i: int) -> float:
        return totals[i] / capacities[i]

    improved = True
    while improved:
        improved = False
        top = max(range(len(bins)), key=utilisation)
        peak = utilisation(top)
        for other in range(len(bins)):
            if other == top:
                continue
            for k in bins[top]:  # a move
                if (
                    max(
                        (totals[top] - loads[k]) / capacities[top],
                        (totals[other] + loads[k]) / capacities[other],
                    )
                    < peak - 1e-9
                ):
                    bins[top].remove(k)
                    bins[other].append(k)
                    totals[top] -= loads[k]
                    totals[other] += loads[k]
                    improved = True
                    break
            if improved:
                break
            for k in bins[top]:  # a swap
                for j in bins[other]:
                    delta = loads[k] - loads[j]
                    if (
                        delta > 0
                        and max(
                            (totals[top] - delta) / capacities[top],
                            (totals[other] + delta) / capacities[other],
                        )
                        < peak - 1e-9
                    ):
                        bins[top].remove(k)
                        bins[other].remove(j)
                        bins[top].append(j)
                        bins[other].append(k)
                        totals[top] -= delta
                        totals[other] += delta
                        improved = True
                        break
                if improved:
                    break
            if improved:
                break
    mean = sum(loads) / sum(capacities)
    return max(utilisation(i) for i in range(len(bins))) / mean


def lower_bound(loads: Sequence[float], capacities: Sequence[float]) -> float:
    mean = sum(loads) / sum(capacities)
    return max(1.0, max(loads) / max(capacities) / mean)


class Daemons:
    """The scenario's ``workgroup run`` processes, JSON logs in ``workdir``."""

    def __init__(self, bootstrap: str, workdir: Path, args: argparse.Namespace) -> None:
        self.bootstrap = bootstrap
        self.workdir = workdir
        self.args = args
        self.processes: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKGROUP_")}
        env.update(
            PYTHONPATH=str(CODE_ROOT),
            PYTHONUNBUFFERED="1",
            LIVE_BALANCE_APP=APP,
            LIVE_BALANCE_SEED=str(self.args.seed),
            LIVE_BALANCE_SHARDS=str(self.args.shards),
        )
        return env

    def start(self, capacity: float) -> None:
        argv = [sys.executable, "-P", "-m", "workgroup", "run", "live_balance_app:app"]
        argv += ["--bootstrap", self.bootstrap, "--capacity", str(capacity)]
        argv += ["--balance-interval-ms", str(self.args.balance_interval_ms)]
        argv += ["--log-format", "json", "--log-level", "info"]
        log_path = self.workdir / f"daemon-{len(self.processes)}.log"
        with log_path.open("wb") as log:
            # The app's directory is the working directory (the loader imports
            # from there); -P keeps it from shadowing PYTHONPATH's workgroup.
            process = subprocess.Popen(
                argv,
                cwd=HERE / "apps",
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # Ctrl-C reaches the script only; it stops them
            )
        self.processes.append(process)

    def check(self) -> None:
        """A daemon that exited during the window is a failed run."""
        for index, process in enumerate(self.processes):
            if process.poll() is not None:
                log = (self.workdir / f"daemon-{index}.log").read_text().splitlines()
                tail = "\n".join(log[-5:])
                raise RuntimeError(f"daemon {index} exited with {process.returncode}:\n{tail}")

    def close(self) -> None:
        """SIGTERM to all, then SIGKILL to any still running after 15 s."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def events(self, names: set[str]) -> list[dict[str, Any]]:
        found = []
        for index in range(len(self.processes)):
            for line in (self.workdir / f"daemon-{index}.log").read_text().splitlines():
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if entry.get("event") in names and entry.get("group") == GROUP:
                    found.append({**entry, "daemon": index})
        return sorted(found, key=lambda e: e.get("timestamp", ""))


def members_of(description: GroupDescription) -> dict[str, tuple[float, list[int]]]:
    members = {}
    for member in description.members:
        meta = member.workgroup_metadata()
        capacity = meta.capacity if meta is not None else 1.0
        keys = [int(k) for k in (member.assignment or {}).get("shard", [])]
        members[member.member_id] = (capacity, keys)
    return members


async def run_scenario(
    scenario: Scenario, bootstrap: str, workdir: Path, args: argparse.Namespace
) -> Result:
    result = Result(scenario, load_before=os.getloadavg())
    daemons = Daemons(bootstrap, workdir, args)
    begin = time.monotonic()
    last_start = begin + max(scenario.starts)
    result.last_start_wall = time.time() + max(scenario.starts)
    pending = sorted(zip(scenario.starts, scenario.capacities, strict=True))
    try:
        while True:
            now = time.monotonic()
            while pending and now - begin >= pending[0][0]:
                daemons.start(pending.pop(0)[1])
            daemons.check()
            if now - last_start >= args.window_s:
                break
            try:
                description = await describe_group(bootstrap, GROUP, timeout_s=5.0)
            except WorkgroupError as error:  # not formed yet
                result.errors.append(str(error))
            else:
                generations = [m.generation for m in description.members if m.generation]
                result.samples.append(
                    Sample(
                        time.monotonic() - last_start,
                        max(generations) if generations else None,
                        members_of(description),
                    )
                )
            await asyncio.sleep(args.sample_s)
    finally:
        daemons.close()
    result.load_after = os.getloadavg()
    result.leader_events = daemons.events({"member.load_balanced", "member.moves", "member.joined"})
    return result


def owner_changes(samples: Sequence[Sample]) -> int:
    """Shards seen with an owner other than their last one (an unassigned
    spell in between, as in a cooperative move, is looked through)."""
    last: dict[int, str] = {}
    changes = 0
    for sample in samples:
        for member_id, (_, keys) in sample.members.items():
            for k in keys:
                if k in last and last[k] != member_id:
                    changes += 1
                last[k] = member_id
    return changes


def summary(result: Result, loads: Sequence[float]) -> dict[str, Any]:
    samples = result.samples
    ratios = [(s, ratio(loads, s.members)) for s in samples]
    complete = [(s, r) for s, r in ratios if r is not None]
    full = len(result.scenario.capacities)
    end = next((pair for pair in reversed(complete) if len(pair[0].members) == full), None)
    reached = next(
        (s.at for s, r in complete if s.at >= 0 and len(s.members) == full and r <= TARGET),
        None,
    )
    balanced = [e for e in result.leader_events if e["event"] == "member.load_balanced"]
    first_join = next(
        (e for e in result.leader_events if e["event"] == "member.joined" and e.get("leader")),
        None,
    )
    moves: dict[str, int] = {}
    for event in result.leader_events:
        if event["event"] == "member.moves":
            for reason in ("join", "rebalance", "balance", "drain", "leave", "failover"):
                moves[reason] = moves.get(reason, 0) + int(event.get(reason, 0))
    capacities = result.scenario.capacities
    return {
        "scenario": result.scenario.name,
        "end_max_over_mean": end[1] if end else None,
        "end_generation": end[0].generation if end else None,
        #: ``(generation, members)`` of the group's first round.
        "first_round": (
            (first_join["generation"], first_join.get("members")) if first_join else None
        ),
        "first_within_target_s": reached,
        "balancing_rounds": len(balanced),
        "balance_moves": moves.get("balance", 0),
        "other_moves": sum(n for reason, n in moves.items() if reason != "balance"),
        "owner_changes_seen": owner_changes(samples),
        "best_lpt": best_ratio(loads, capacities),
        "lower_bound": lower_bound(loads, capacities),
        "timeline": [(round(s.at, 1), s.generation, r) for s, r in ratios],
        "load_balanced": [
            {
                "at": datetime.fromisoformat(e["timestamp"]).timestamp() - result.last_start_wall,
            }
            | {
                k: e.get(k)
                for k in (
                    "daemon",
                    "generation",
                    "moves",
                    "returned",
                    "max_over_mean_before",
                    "max_over_mean_after",
                    "probe_in_ms",
                )
            }
            for e in balanced
        ],
        "load_average": [result.load_before, result.load_after],
        "describe_errors": len(result.errors),
    }


def at_offsets(
    timeline: Sequence[tuple[float, int | None, float | None]], step: float, end: float
) -> str:
    """Max/mean at every ``step`` seconds after the last start (the last
    complete sample at or before it; '~': a rebalance under way then)."""
    parts = []
    t = 0.0
    while t <= end + 1e-9:
        before = [(at, r) for at, _, r in timeline if at <= t]
        value = before[-1][1] if before else None
        parts.append("~" if value is None else f"{value:.2f}")
        t += step
    return " ".join(parts)


@contextmanager
def workdir(log_dir: Path | None) -> Iterator[Path]:
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        yield log_dir
    else:
        with tempfile.TemporaryDirectory(prefix="live-balance-") as tmp:
            yield Path(tmp)


def code_version() -> str:
    try:
        commit = subprocess.run(
            ["git", "-C", str(CODE_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "?"
    return f"{CODE_ROOT} at {commit}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--scenarios", default="together,rolling,capacities")
    parser.add_argument(
        "--window-s",
        type=float,
        default=60.0,
        help="measured until this long after the last daemon started",
    )
    parser.add_argument("--stagger-s", type=float, default=10.0, help="rolling start: gap")
    parser.add_argument("--balance-interval-ms", type=int, default=5_000)
    parser.add_argument("--sample-s", type=float, default=0.5)
    parser.add_argument(
        "--initial-rebalance-delay-ms",
        type=int,
        default=3_000,
        help="the coordinator's (Kafka's default): daemons started at once form the first "
        "generation together even when a busy machine starts them a second apart",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--log-dir", type=Path, help="keep the daemons' and coordinators' logs")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    catalog = {
        "together": Scenario("together", "4 started at once", (1, 1, 1, 1), (0, 0, 0, 0)),
        "rolling": Scenario(
            "rolling",
            f"rolling start, one every {args.stagger_s:g} s",
            (1, 1, 1, 1),
            tuple(i * args.stagger_s for i in range(4)),
        ),
        "capacities": Scenario(
            "capacities", "capacities 2,1,1,1 at once", (2, 1, 1, 1), (0, 0, 0, 0)
        ),
    }
    for option in ("shards", "window_s", "sample_s", "balance_interval_ms"):
        if not getattr(args, option) > 0:
            parser.error(f"--{option.replace('_', '-')} must be > 0")
    if args.stagger_s < 0 or args.initial_rebalance_delay_ms < 0:
        parser.error("--stagger-s and --initial-rebalance-delay-ms must be >= 0")
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in catalog]
    if unknown:
        parser.error(f"unknown scenario {', '.join(unknown)} (known: {', '.join(catalog)})")
    loads = zipf_loads(args.shards, args.seed, 1.1)
    console = Console(stderr=True)
    console.print(f"workgroup: {code_version()}")
    summaries = []
    with workdir(args.log_dir) as root:
        for name in names:
            scenario = catalog[name]
            directory = root / name
            directory.mkdir(exist_ok=True)
            console.print(f"[bold]{scenario.what}[/]: {args.window_s:g} s after the last start")
            with run_coordinator(
                "--initial-rebalance-delay-ms",
                str(args.initial_rebalance_delay_ms),
                log=directory / "coordinator.log",
                command=[sys.executable, "-P", "-m", "workgroup", "coordinator"],
            ) as server:
                result = asyncio.run(run_scenario(scenario, server.bootstrap, directory, args))
            summaries.append(summary(result, loads))
    print_tables(summaries, args, loads)
    if args.json_out:
        args.json_out.write_text(json.dumps(summaries, indent=2))


def fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def print_tables(
    summaries: list[dict[str, Any]], args: argparse.Namespace, loads: Sequence[float]
) -> None:
    # Wide enough for the table when the output is a file or a pipe.
    console = Console(width=None if sys.stdout.isatty() else 180)
    table = Table(
        title=(
            f"Live balance: 4 daemons, {args.shards} shards, Zipf(1.1) seed {args.seed}, "
            f"balance interval {args.balance_interval_ms / 1000:g} s, "
            f"initial rebalance delay {args.initial_rebalance_delay_ms / 1000:g} s, "
            f"{args.window_s:g} s after the last start ({code_version()})"
        )
    )
    for column in (
        "scenario",
        "max/mean at end",
        "first round: gen, members",
        "generation at end",
        "balancing rounds",
        "moves: balance / other",
        "owner changes seen",
        f"first ≤ {TARGET:.2f}",
        "best (LPT+swaps) / bound",
        "load avg before → after",
    ):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for s in summaries:
        table.add_row(
            s["scenario"],
            fmt(s["end_max_over_mean"], 3),
            "—" if s["first_round"] is None else "{}, {}".format(*s["first_round"]),
            str(s["end_generation"]),
            str(s["balancing_rounds"]),
            f"{s['balance_moves']} / {s['other_moves']}",
            str(s["owner_changes_seen"]),
            "never"
            if s["first_within_target_s"] is None
            else f"{s['first_within_target_s']:.1f} s",
            f"{s['best_lpt']:.4f} / {s['lower_bound']:.4f}",
            f"{s['load_average'][0][0]:.2f} → {s['load_average'][1][0]:.2f}",
        )
    console.print(table)
    timeline = Table(title="max/mean every 10 s from the last start (~: a rebalance under way)")
    timeline.add_column("scenario")
    timeline.add_column("0 s … end")
    for s in summaries:
        timeline.add_row(s["scenario"], at_offsets(s["timeline"], 10.0, args.window_s))
    console.print(timeline)
    rounds = Table(title="the leader's member.load_balanced events")
    for column in (
        "scenario",
        "at (s)",
        "generation",
        "moves",
        "returned",
        "before",
        "after",
        "next probe",
    ):
        rounds.add_column(column, justify="left" if column == "scenario" else "right")
    for s in summaries:
        for e in s["load_balanced"]:
            rounds.add_row(
                s["scenario"],
                f"{e['at']:.1f}",
                str(e["generation"]),
                str(e["moves"]),
                str(e["returned"]),
                str(e["max_over_mean_before"]),
                str(e["max_over_mean_after"]),
                "—" if e["probe_in_ms"] is None else f"{e['probe_in_ms'] / 1000:g} s",
            )
    console.print(rounds)


if __name__ == "__main__":
    # SIGTERM and SIGHUP (timeout, CI, a closed terminal) clean up as Ctrl-C does.
    try:
        with interrupt_on_termination():
            main()
    except KeyboardInterrupt as interrupt:
        # The finally blocks have stopped every daemon and the coordinator.
        why = str(interrupt) or "Ctrl-C"
        print(f"interrupted ({why}): daemons and coordinator stopped", file=sys.stderr)
        sys.exit(130)
