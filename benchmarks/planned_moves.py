"""Planned moves: warm-up before cut-over against today's plain moves, side by side.

A planned move is a resource moved while its owner still runs: a process joins, a
process leaves with ``--leave-on-stop``, a process is drained.  With a warm-up
(``@app.worker(kind, warm_up=True)``) the next owner prepares while the owner
keeps working, and the move is cut over once it is ready; a plain move revokes
first and the next owner prepares afterwards.

**Plain handlers** (the default section).  In-process runners (``AppRunner``, one
asyncio loop in this process: the same code as ``workgroup run`` without process
start-up) against an embedded coordinator run as a separate process.  Each
handler prepares for ``--prepare-s`` (load state, open connections), then works in
steps of ``--step-s`` until revoked.  One repetition, for each mode (warm-up and
plain, in the same run, alternating): process A owns ``--shards`` shards; B joins
(half the shards move to B); B stops with ``drain_on_stop`` (``--drain-on-stop``:
it drains first, its shards move back with warm-ups, then it stops); a new B
joins and stops with ``leave_on_stop`` (``--leave-on-stop``, which drains first
too where the worker warms up).
Measured per planned move:

* **unowned s / move**: the time a moved shard had no working handler, from its
  old handler's last step to its new handler's first one (what a user of the
  shard sees; includes the new owner's preparation when it was not warmed up);
* **lease gap s / move**: the same from the ownership event log
  (:mod:`workgroup.runtime.events`: ``revoked`` .. ``acquired``);
* **double owned**: overlapping ownership in the event log
  (:func:`workgroup.testing.ownership.check_ownership`), and overlapping work
  (two handlers stepping on one shard at once): both must be 0;
* **warm-up s**: how long the warm-ups took (``warming`` .. ``acquired`` in the
  event log: preparation, ready, the cut-over round).

Best of ``--repetitions`` (the lowest unowned per move, per mode and move
type); the load average is printed with the table.

**Spark shards** (``--spark``): ``workgroup run`` daemons of
``examples/sharded_etl`` (the Spark plugin; ``--spark-layouts``: a JVM each,
and thin daemons on one Spark Connect server), a coordinator and input
arriving, all on loopback.  Daemon A owns ``--spark-shards`` shards; daemon B
joins (half move to B: with warm-up, B's SparkSession starts and runs a warm-up
query before it joins, and each moved shard's checkpoint is read before the
cut-over), then B stops with ``--leave-on-stop`` (which drains first where the
worker warms up).  Plain moves are the same daemons with
``WORKGROUP_MAX_WARMUPS=0``.  Per planned move: **query gap** (the old owner's
``spark.query_stopped`` to the new owner's ``spark.query_started``), **write gap**
(the shard's last batch written by the old owner to the first by the new one,
from the output files' modification times; mean and max) and **lease gap** (event log).

**Rolling restart of Spark daemons** (``--spark-rolling``): ``--rolling-daemons``
JVM daemons with ``--drain-on-stop``; each in turn gets SIGTERM (it drains: its
shards move to the others, then it stops) and is started again at once; the next
one goes once the restarted daemon owns a shard and every shard writes under its
newest token.  Total unowned shard-seconds over the whole restart, from the
output batches (write gaps) and from the event logs (lease gaps), with and
without warm-ups.

Usage::

    .venv/bin/python benchmarks/planned_moves.py                      # plain handlers
    .venv/bin/python benchmarks/planned_moves.py --shards 4 --repetitions 1   # quick
    .venv/bin/python benchmarks/planned_moves.py --spark --skip-plain --spark-repetitions 1
    .venv/bin/python benchmarks/planned_moves.py --skip-plain --spark-rolling
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "plugins" / "spark"))

import workgroup  # noqa: E402
from workgroup.runtime.app import Settings  # noqa: E402
from workgroup.runtime.events import read_events  # noqa: E402
from workgroup.runtime.runner import AppRunner  # noqa: E402
from workgroup.testing.ownership import MemberLog, check_ownership  # noqa: E402
from workgroup.testing.servers import run_coordinator  # noqa: E402
from workgroup.testing.signals import interrupt_on_termination  # noqa: E402

MODES = ("warm-up", "plain")
PLAIN_MOVES = ("join", "drain-on-stop", "leave-on-stop")
WAIT_S = 60.0


# --- measuring ----------------------------------------------------------------------


@dataclass
class WorkLog:
    """When each process worked on each shard (monotonic clock of this process)."""

    spans: dict[str, list[tuple[str, float, float | None]]] = field(default_factory=dict)

    def open(self, key: str, who: str) -> int:
        self.spans.setdefault(key, []).append((who, time.monotonic(), None))
        return len(self.spans[key]) - 1

    def close(self, key: str, index: int) -> None:
        who, start, _ = self.spans[key][index]
        self.spans[key][index] = (who, start, time.monotonic())

    def holders(self) -> dict[str, str]:
        return {k: s[-1][0] for k, s in self.spans.items() if s and s[-1][2] is None}


@dataclass
class MoveRow:
    mode: str
    move: str
    moves: int
    unowned_per_move_s: float
    max_unowned_s: float
    lease_gap_per_move_s: float
    double_owned: int
    work_overlap_s: float
    warmups: int
    warmup_median_s: float | None
    load: float


def lease_figures(
    paths: Sequence[Path], since: float, until: float, group: str | None = None
) -> tuple[float, int, int, list[float]]:
    """From the ownership event logs (of ``group``, or all): (lease gap seconds of the
    moves in [since, until], moves, double-ownership violations over the whole logs,
    warm-up durations)."""
    logs, merged = [], []
    for path in paths:
        events = read_events(path) if path.exists() else []
        events = [e for e in events if group is None or e["group"] == group]
        merged.extend(events)
        converted = [
            {
                "event": {"acquired": "assigned"}.get(e["event"], e["event"]),
                "resources": [[e["kind"], e["key"]]],
                "t": e["time"],
            }
            for e in events
            if e["event"] in ("acquired", "revoked", "lost")
        ]
        logs.append(MemberLog(path.stem, converted))
    report = check_ownership(logs)
    double = sum(1 for v in report.violations if v.kind == "overlap")
    gap, moves = 0.0, 0
    released: dict[str, float] = {}
    warming: dict[tuple[str, str], float] = {}
    warmups: list[float] = []
    for e in sorted(merged, key=lambda e: e["time"]):
        key = str(e["key"])
        if e["event"] in ("revoked", "lost"):
            released[key] = e["time"]
        elif e["event"] == "warming":
            warming[(e["member"], key)] = e["time"]
        elif e["event"] == "acquired":
            began = warming.pop((e["member"], key), None)
            if began is not None and since <= e["time"] <= until:
                warmups.append(e["time"] - began)
            ended = released.pop(key, None)
            if ended is not None and since <= ended <= until:
                gap += e["time"] - ended
                moves += 1
    return gap, moves, double, warmups


# --- plain handlers -------------------------------------------------------------------


def make_app(name: str, who: str, shards: list[str], work: WorkLog, args: Any, warm: bool) -> Any:
    app = workgroup.App(name, grace_ms=1_000)

    @app.resources("shard")
    def listed() -> list[str]:
        return shards

    @app.worker("shard", warm_up=warm)
    async def handle(lease: workgroup.Lease) -> None:
        key = str(lease.key)
        await asyncio.sleep(args.prepare_s)  # load state, open connections
        if lease.warming and not await lease.ready():
            return  # the move was called off: the owner carries on
        if lease.revoked:
            return
        index = work.open(key, who)
        try:
            while not lease.revoked:  # one step of work, or the revocation
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lease.wait_revoked(), args.step_s)
        finally:
            work.close(key, index)

    return app


@asynccontextmanager
async def running(
    app: Any, bootstrap: str, event_log: Path, **settings: Any
) -> AsyncIterator[tuple[AppRunner, asyncio.Event]]:
    runner = AppRunner(
        app,
        Settings(
            bootstrap=bootstrap,
            session_timeout_ms=6_000,
            heartbeat_interval_ms=500,
            grace_ms=1_000,
            event_log=str(event_log),
            **settings,
        ),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    try:
        yield runner, stop
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT_S)


async def wait_until(condition: Any, what: str, quiet_s: float = 0.3) -> None:
    """Until ``condition()`` held for ``quiet_s`` (:class:`TimeoutError` after ``WAIT_S``)."""
    deadline = time.monotonic() + WAIT_S
    since: float | None = None
    while True:
        now = time.monotonic()
        if condition():
            since = now if since is None else since
            if now - since >= quiet_s:
                return
        else:
            since = None
        if now > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def one_repetition(bootstrap: str, directory: Path, mode: str, args: Any) -> list[MoveRow]:
    """A joins; B joins (moves), B is drained then stops (moves); B joins again and
    leaves with --leave-on-stop (moves)."""
    warm = mode == "warm-up"
    shards = [f"shard-{i}" for i in range(args.shards)]
    name = f"moves-{mode}-{uuid.uuid4().hex[:6]}"
    work = WorkLog()
    logs = [directory / f"{name}-{who}.jsonl" for who in ("a", "b", "b2")]
    half = args.shards // 2
    windows: dict[str, tuple[float, float, float, float]] = {}  # monotonic, wall: from, to
    on_a = lambda: list(work.holders().values()).count("a") == args.shards  # noqa: E731
    settings = {"max_warmups": args.max_warmups if warm else 0}

    async with running(
        make_app(name, "a", shards, work, args, warm), bootstrap, logs[0], **settings
    ):
        await wait_until(on_a, "a works on every shard")
        began = time.monotonic()
        wall = time.time()
        async with running(
            make_app(name, "b", shards, work, args, warm),
            bootstrap,
            logs[1],
            drain_on_stop=True,
            **settings,
        ) as (_, stop_b):
            await wait_until(
                lambda: (
                    list(work.holders().values()).count("b") == half
                    and len(work.holders()) == args.shards
                ),
                "b works on half the shards",
            )
            windows["join"] = (began, wall, time.monotonic(), time.time())
            began, wall = time.monotonic(), time.time()
            stop_b.set()  # drains first (drain_on_stop), then stops
            await wait_until(on_a, "a works on every shard again")
            windows["drain-on-stop"] = (began, wall, time.monotonic(), time.time())
        async with running(
            make_app(name, "b2", shards, work, args, warm),
            bootstrap,
            logs[2],
            leave_on_stop=True,
            **settings,
        ) as (_, stop_b2):
            await wait_until(
                lambda: list(work.holders().values()).count("b2") == half, "b2 works on half"
            )
            began, wall = time.monotonic(), time.time()
            stop_b2.set()
            await wait_until(on_a, "a works on every shard after b2 left")
            windows["leave-on-stop"] = (began, wall, time.monotonic(), time.time())
    load = os.getloadavg()[0]
    rows = []
    for move, (began, wall, until_mono, until_wall) in windows.items():
        # Only the handovers of this step: those that began before the next step.
        handovers = _handovers_between(work, began, until_mono)
        gaps = [g for g, _ in handovers]
        lease_gap, lease_moves, double, warmups = lease_figures(logs, wall, until_wall)
        moves = len(handovers)
        rows.append(
            MoveRow(
                mode=mode,
                move=move,
                moves=moves,
                unowned_per_move_s=sum(gaps) / max(moves, 1),
                max_unowned_s=max(gaps, default=0.0),
                lease_gap_per_move_s=lease_gap / max(lease_moves, 1),
                double_owned=double,
                work_overlap_s=sum(o for _, o in handovers),
                warmups=len(warmups),
                warmup_median_s=statistics.median(warmups) if warmups else None,
                load=load,
            )
        )
    return rows


def _handovers_between(work: WorkLog, since: float, until: float) -> list[tuple[float, float]]:
    out = []
    for spans in work.spans.values():
        ordered = sorted(spans, key=lambda s: s[1])
        for (who_a, _, end), (who_b, start, _) in itertools.pairwise(ordered):
            if not since <= start <= until or who_a == who_b:
                continue
            if end is None:
                out.append((0.0, until - start))
            else:
                out.append((max(start - end, 0.0), max(end - start, 0.0)))
    return out


async def plain_section(args: Any, directory: Path) -> list[MoveRow]:
    rows: list[MoveRow] = []
    with run_coordinator(log=directory / "coordinator.log") as coordinator:
        for repetition in range(args.repetitions):
            for mode in args.modes if repetition % 2 == 0 else args.modes[::-1]:
                rows.extend(await one_repetition(coordinator.bootstrap, directory, mode, args))
    return rows


def best_rows(rows: Iterable[MoveRow]) -> list[MoveRow]:
    """Per (move, mode): the repetition with the lowest unowned time per move; double
    ownership and overlap as the worst of every repetition (they must all be 0)."""
    grouped: dict[tuple[str, str], list[MoveRow]] = {}
    for row in rows:
        grouped.setdefault((row.move, row.mode), []).append(row)
    best = []
    for _, group in sorted(
        grouped.items(), key=lambda item: (PLAIN_MOVES.index(item[0][0]), MODES.index(item[0][1]))
    ):
        chosen = min(group, key=lambda r: r.unowned_per_move_s)
        best.append(
            MoveRow(
                **{
                    **asdict(chosen),
                    "double_owned": max(r.double_owned for r in group),
                    "work_overlap_s": max(r.work_overlap_s for r in group),
                }
            )
        )
    return best


def print_plain(rows: list[MoveRow], args: Any, repetitions: int) -> None:
    load = max(r.load for r in rows)
    print(
        f"\nPlanned moves, plain handlers (prepare {args.prepare_s:g} s, steps of "
        f"{args.step_s * 1000:g} ms), {args.shards} shards, in-process runners, embedded "
        f"coordinator; best of {repetitions}, load average up to {load:.2f}"
    )
    header = (
        f"{'move':<14} {'mode':<8} {'moves':>5} {'unowned s/move':>15} {'max s':>6} "
        f"{'lease gap s/move':>17} {'double owned':>12} {'work overlap s':>14} "
        f"{'warm-ups':>8} {'warm-up s (median)':>18}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        warm = "-" if r.warmup_median_s is None else f"{r.warmup_median_s:.3f}"
        print(
            f"{r.move:<14} {r.mode:<8} {r.moves:>5} {r.unowned_per_move_s:>15.3f} "
            f"{r.max_unowned_s:>6.3f} {r.lease_gap_per_move_s:>17.3f} {r.double_owned:>12} "
            f"{r.work_overlap_s:>14.3f} {r.warmups:>8} {warm:>18}"
        )


# --- Spark ---------------------------------------------------------------------------


@dataclass
class SparkRow:
    mode: str
    move: str
    moves: int
    query_gap_per_move_s: float
    write_gap_per_move_s: float | None
    lease_gap_per_move_s: float
    double_owned: int
    warmup_median_s: float | None
    load: float
    layout: str = "jvm"
    write_gap_max_s: float | None = None
    #: Where the write gap goes, mean seconds per move (``GAP_PARTS``); moves
    #: whose old owner's stop or new owner's start was not logged are left out.
    gap_parts_s: dict[str, float] | None = None


#: The write gap's parts, in order: the old owner's last output to its query's
#: stop (the rest of its batch, then ``stop()``); that stop to the lease taken
#: by the new owner (the hand-over); the lease to the new query's start
#: (``build()``, ``start()``); that start to the new owner's first output.
GAP_PARTS = ("old batch + stop", "hand-over", "start", "first batch")


def _log_events(path: Path, *names: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and event.get("event") in names:
                out.append(event)
    return out


def _stamp(event: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


def spark_section(args: Any, directory: Path) -> list[SparkRow]:
    rows: list[SparkRow] = []
    for layout in args.spark_layouts:
        with contextlib.ExitStack() as stack:
            remote = None
            if layout == "connect":
                remote = stack.enter_context(connect_server(args, directory / "connect"))
            for repetition in range(args.spark_repetitions):
                for mode in args.modes if repetition % 2 == 0 else args.modes[::-1]:
                    data = directory / f"spark-{layout}-{mode}-{repetition}"
                    data.mkdir(parents=True, exist_ok=True)
                    rows.extend(spark_run(args, data, mode, remote))
    return best_spark_rows(rows)


@contextlib.contextmanager
def connect_server(args: Any, logs: Path) -> Iterator[str]:
    """One Spark Connect server for the thin daemons of ``--spark-layouts connect``:
    its ``remote`` URL.  ``--cold-workers``: without its warm worker pool."""
    from workgroup_spark.connect_server import run_connect_server

    path = os.pathsep.join(
        filter(None, [str(REPO_ROOT), str(REPO_ROOT / "plugins" / "spark"),
                      os.environ.get("PYTHONPATH")])
    )  # fmt: skip
    options = {} if not args.cold_workers else {"warm_workers": False}
    with run_connect_server(
        logs / "spark-connect.log", env={"PYTHONPATH": path}, **options
    ) as server:
        yield server.remote


def spark_run(args: Any, data: Path, mode: str, remote: str | None = None) -> list[SparkRow]:
    """Daemon A owns every shard; B joins (half move to B); B stops with
    --leave-on-stop (they move back).  JVM daemons, or thin daemons on the
    Connect server ``remote``."""
    from examples.sharded_etl.cluster import EtlCluster
    from examples.sharded_etl.feed import Feeder

    env = {"WORKGROUP_SPARK_WARM_UP": "1" if mode == "warm-up" else "0"}
    if remote:
        env["WORKGROUP_SPARK_REMOTE"] = remote
    else:
        env["WORKGROUP_SPARK_MASTER"] = "local[1]"  # two daemons, two cores: one each
    half = args.spark_shards // 2
    windows: dict[str, tuple[float, float]] = {}
    with run_coordinator(log=data / "coordinator.log") as coordinator:
        cluster = EtlCluster(
            data, coordinator.bootstrap, shards=args.spark_shards, session_ms=6_000, extra_env=env
        )
        feeder = Feeder(data, args.spark_shards, rate=100 * args.spark_shards, files_per_s=2.0)
        try:
            cluster.start("etl-a")
            feeder.start(seconds=3_600)
            cluster.wait_for("every shard to write", lambda: cluster.all_committing(0), 600, 1.0)
            time.sleep(3)

            def moved_to(member: str, count: int, since: float) -> bool:
                owners = cluster.owners()
                mine = [k for k, (m, _, t) in owners.items() if m == member and t >= since]
                return len(mine) >= count and all(
                    cluster.committing(k, since, owners[k][1]) for k in mine
                )

            began = time.time()
            cluster.start("etl-b", "--leave-on-stop")
            cluster.wait_for("b to write its shards", lambda: moved_to("etl-b", half, began), 600)
            windows["join"] = (began, time.time())
            time.sleep(3)
            began = time.time()
            cluster.stop("etl-b", timeout_s=60)
            cluster.wait_for(
                "a to write every shard again",
                lambda: moved_to("etl-a", half, began),
                600,
            )
            windows["leave-on-stop"] = (began, time.time())
            cluster.stop_all()
        finally:
            feeder.stop()
            cluster.kill_all()
    load = os.getloadavg()[0]
    stopped = [*cluster.daemon_log_events("spark.query_stopped")]
    started = [*cluster.daemon_log_events("spark.query_started")]
    batches = cluster.batches()
    logs = sorted(cluster.events_dir.glob("*.jsonl"))
    rows = []
    for move, (since, until) in windows.items():
        acquired = [
            e
            for e in cluster.events()
            if e["group"] == "etl.shard"
            and e["event"] == "acquired"
            and since <= e["time"] <= until
        ]
        query_gaps, write_gaps = [], []
        parts: list[tuple[float, ...]] = []
        for event in acquired:
            key, token = str(event["key"]), event["token"]
            name = f"etl.shard.{key}"
            start = min(
                (_stamp(e) for e in started if e.get("query") == name and e.get("token") == token),
                default=None,
            )
            stop = max(
                (_stamp(e) for e in stopped if e.get("query") == name and e.get("token") != token
                 and since - 1 <= _stamp(e) <= (start or until)),
                default=None,
            )  # fmt: skip
            if start is not None and stop is not None:
                query_gaps.append(max(start - stop, 0.0))
            first_new = min(
                (b["time"] for b in batches if b["shard"] == key and b["token"] == token),
                default=None,
            )
            last_old = max(
                (b["time"] for b in batches if b["shard"] == key and b["token"] < token),
                default=None,
            )
            if first_new is not None and last_old is not None:
                write_gaps.append(max(first_new - last_old, 0.0))
                if start is not None and stop is not None and stop >= last_old:
                    marks = (last_old, stop, event["time"], start, first_new)
                    parts.append(tuple(b - a for a, b in itertools.pairwise(marks)))
        lease_gap, lease_moves, double, warmups = lease_figures(logs, since, until, "etl.shard")
        rows.append(
            SparkRow(
                mode=mode,
                move=move,
                moves=len(acquired),
                query_gap_per_move_s=sum(query_gaps) / max(len(query_gaps), 1),
                write_gap_per_move_s=sum(write_gaps) / len(write_gaps) if write_gaps else None,
                write_gap_max_s=max(write_gaps, default=None),
                layout="connect" if remote else "jvm",
                lease_gap_per_move_s=lease_gap / max(lease_moves, 1),
                double_owned=double,
                warmup_median_s=statistics.median(warmups) if warmups else None,
                load=load,
                gap_parts_s=(
                    dict(
                        zip(
                            GAP_PARTS,
                            (statistics.mean(p) for p in zip(*parts, strict=True)),
                            strict=True,
                        )
                    )
                    if parts
                    else None
                ),
            )
        )
    return rows


@dataclass
class RollingRow:
    mode: str
    daemons: int
    moves: int
    write_gap_total_s: float
    lease_gap_total_s: float
    double_owned: int
    seconds: float
    load: float
    #: Daemons that were not back with every shard writing within --rolling-step-s.
    unsettled: list[str] = field(default_factory=list)


def spark_rolling(args: Any, directory: Path) -> list[RollingRow]:
    """A rolling restart of ``--rolling-daemons`` JVM daemons through drain
    (``--drain-on-stop``), with and without warm-ups."""
    rows = []
    for mode in args.modes:
        data = directory / f"rolling-{mode}"
        data.mkdir(parents=True, exist_ok=True)
        rows.append(_rolling_run(args, data, mode))
    return rows


def _rolling_run(args: Any, data: Path, mode: str) -> RollingRow:
    from examples.sharded_etl.cluster import EtlCluster
    from examples.sharded_etl.feed import Feeder

    env = {
        "WORKGROUP_SPARK_MASTER": "local[1]",
        "WORKGROUP_SPARK_WARM_UP": "1" if mode == "warm-up" else "0",
    }
    names = [f"etl-{chr(ord('a') + i)}" for i in range(args.rolling_daemons)]
    with run_coordinator(log=data / "coordinator.log") as coordinator:
        cluster = EtlCluster(
            data, coordinator.bootstrap, shards=args.spark_shards, session_ms=6_000, extra_env=env
        )
        feeder = Feeder(data, args.spark_shards, rate=100 * args.spark_shards, files_per_s=2.0)
        try:
            for name in names:
                cluster.start(name, "--drain-on-stop")
            feeder.start(seconds=3_600)
            cluster.wait_for("every shard to write", lambda: cluster.all_committing(0), 900, 1.0)
            time.sleep(3)
            since = time.time()
            unsettled: list[str] = []
            for name in names:
                cluster.stop(name, timeout_s=150)  # drains first (--drain-on-stop)
                cluster.start(name, "--drain-on-stop")
                restarted = time.time()
                try:
                    cluster.wait_for(
                        f"{name} back, every shard writing",
                        lambda n=name, r=restarted: (  # type: ignore[misc]
                            any(m == n and t >= r for m, _, t in cluster.owners().values())
                            and cluster.all_committing(r, owners_only=True)
                        ),
                        args.rolling_step_s,
                        1.0,
                    )
                except TimeoutError:
                    unsettled.append(name)  # recorded; the restart goes on
            until = time.time()
            cluster.stop_all()
        finally:
            feeder.stop()
            cluster.kill_all()
    batches = cluster.batches()
    acquired = [
        e
        for e in cluster.events()
        if e["group"] == "etl.shard" and e["event"] == "acquired" and since <= e["time"] <= until
    ]
    write_gaps = []
    for event in acquired:
        key, token = str(event["key"]), event["token"]
        first_new = min(
            (b["time"] for b in batches if b["shard"] == key and b["token"] == token), default=None
        )
        last_old = max(
            (b["time"] for b in batches if b["shard"] == key and b["token"] < token), default=None
        )
        if first_new is not None and last_old is not None:
            write_gaps.append(max(first_new - last_old, 0.0))
    logs = sorted(cluster.events_dir.glob("*.jsonl"))
    lease_gap, _, double, _ = lease_figures(logs, since, until, "etl.shard")
    return RollingRow(
        mode=mode,
        daemons=len(names),
        moves=len(acquired),
        write_gap_total_s=sum(write_gaps),
        lease_gap_total_s=lease_gap,
        double_owned=double,
        seconds=until - since,
        load=os.getloadavg()[0],
        unsettled=unsettled,
    )


def print_rolling(rows: list[RollingRow], args: Any) -> None:
    print(
        f"\nRolling restart through drain (--drain-on-stop), {rows[0].daemons} JVM daemons, "
        f"{args.spark_shards} shards, input arriving; load average up to "
        f"{max(r.load for r in rows):.2f}"
    )
    header = (
        f"{'mode':<8} {'moves':>5} {'unowned shard-s (writes)':>24} "
        f"{'unowned shard-s (leases)':>24} {'double owned':>12} {'restart s':>9}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.mode:<8} {r.moves:>5} {r.write_gap_total_s:>24.1f} {r.lease_gap_total_s:>24.2f} "
            f"{r.double_owned:>12} {r.seconds:>9.0f}"
            + (f"  not settled after {', '.join(r.unsettled)}'s restart" if r.unsettled else "")
        )


def best_spark_rows(rows: Iterable[SparkRow]) -> list[SparkRow]:
    """Per (move, mode): the run with the lowest query gap; double ownership and
    the write gap's maximum as the worst of all runs."""
    grouped: dict[tuple[str, str, str], list[SparkRow]] = {}
    for row in rows:
        grouped.setdefault((row.layout, row.move, row.mode), []).append(row)
    best = []
    for (_, _, _), group in sorted(
        grouped.items(),
        key=lambda item: (item[0][0], item[0][1] != "join", MODES.index(item[0][2])),
    ):
        chosen = min(group, key=lambda r: r.query_gap_per_move_s)
        maxima = [r.write_gap_max_s for r in group if r.write_gap_max_s is not None]
        worst = {
            "double_owned": max(r.double_owned for r in group),
            "write_gap_max_s": max(maxima) if maxima else None,
        }
        best.append(SparkRow(**{**asdict(chosen), **worst}))
    return best


def print_spark(rows: list[SparkRow], args: Any) -> None:
    load = max(r.load for r in rows)
    print(
        f"\nPlanned moves, Spark shards ({args.spark_shards} shards, `workgroup run` daemons: "
        f"jvm = a JVM each, connect = thin, one Connect server"
        f"{' without its warm workers' if args.cold_workers else ''}; input arriving); "
        f"best of {args.spark_repetitions} (write gap max and double owned: the worst of "
        f"all), load average up to {load:.2f}"
    )
    header = (
        f"{'layout':<8} {'move':<14} {'mode':<8} {'moves':>5} {'query gap s/move':>17} "
        f"{'write gap s/move':>17} {'write gap max s':>16} {'lease gap s/move':>17} "
        f"{'double owned':>12} {'warm-up s (median)':>18}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        write = "-" if r.write_gap_per_move_s is None else f"{r.write_gap_per_move_s:.2f}"
        write_max = "-" if r.write_gap_max_s is None else f"{r.write_gap_max_s:.2f}"
        warm = "-" if r.warmup_median_s is None else f"{r.warmup_median_s:.1f}"
        print(
            f"{r.layout:<8} {r.move:<14} {r.mode:<8} {r.moves:>5} {r.query_gap_per_move_s:>17.2f} "
            f"{write:>17} {write_max:>16} {r.lease_gap_per_move_s:>17.2f} {r.double_owned:>12} "
            f"{warm:>18}"
        )
    print("\nWhere each write gap goes, mean s per move (from the daemons' logs and output):")
    header = f"{'layout':<8} {'move':<14} {'mode':<8} " + " ".join(f"{p:>16}" for p in GAP_PARTS)
    print(header)
    print("-" * len(header))
    for r in rows:
        cells = ["-" if r.gap_parts_s is None else f"{r.gap_parts_s[p]:.2f}" for p in GAP_PARTS]
        print(f"{r.layout:<8} {r.move:<14} {r.mode:<8} " + " ".join(f"{c:>16}" for c in cells))


# --- main ----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--prepare-s", type=float, default=1.0)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--max-warmups", type=int, default=4)
    parser.add_argument("--skip-plain", action="store_true")
    parser.add_argument("--spark", action="store_true", help="also measure Spark shards")
    parser.add_argument("--spark-shards", type=int, default=4)
    parser.add_argument("--spark-repetitions", type=int, default=1)
    parser.add_argument(
        "--spark-layouts",
        default="jvm,connect",
        help="jvm (a JVM per daemon), connect (thin daemons, one Connect server) or both",
    )
    parser.add_argument(
        "--cold-workers",
        action="store_true",
        help="the Connect server without its warm worker pool (to compare)",
    )
    parser.add_argument(
        "--spark-rolling", action="store_true", help="a rolling restart of JVM daemons via drain"
    )
    parser.add_argument("--rolling-daemons", type=int, default=3)
    parser.add_argument("--rolling-step-s", type=float, default=240.0)
    parser.add_argument("--json-out", type=Path)
    parser.add_argument(
        "--modes", default=",".join(MODES), help="warm-up, plain or both (comma-separated)"
    )
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (logs)")
    args = parser.parse_args(argv)
    args.modes = tuple(m for m in args.modes.split(",") if m)
    args.spark_layouts = tuple(x for x in args.spark_layouts.split(",") if x)
    if not args.spark_layouts or set(args.spark_layouts) - {"jvm", "connect"}:
        parser.error("--spark-layouts: one or both of jvm, connect")
    if not args.modes or set(args.modes) - set(MODES):
        parser.error(f"--modes: one or both of {', '.join(MODES)}")
    if args.shards < 2 or args.shards % 2:
        parser.error("--shards must be an even number >= 2")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.getLogger("workgroup").setLevel(logging.WARNING)
    results: dict[str, Any] = {"load_average": os.getloadavg()}
    with contextlib.ExitStack() as stack:
        stack.enter_context(interrupt_on_termination())
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            directory = args.keep
        else:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="moves-")))
        if not args.skip_plain:
            plain = asyncio.run(plain_section(args, directory))
            best = best_rows(plain)
            print_plain(best, args, args.repetitions)
            results["plain"] = [asdict(r) for r in best]
        if args.spark:
            spark = spark_section(args, directory)
            print_spark(spark, args)
            results["spark"] = [asdict(r) for r in spark]
        if args.spark_rolling:
            rolling = spark_rolling(args, directory)
            print_rolling(rolling, args)
            results["spark_rolling"] = [asdict(r) for r in rolling]
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
