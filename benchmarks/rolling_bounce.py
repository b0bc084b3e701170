"""Rolling bounce: how long resources go unowned while every member restarts in turn.

The seed benchmark of incremental cooperative rebalancing (10 instances, rolling
bounce; eager 37,138 ms total pause vs cooperative 3,522 ms), redone for
workgroup.  For each row the script starts a fresh back-end, forms a group of
``--members`` members sharing ``--resources`` resources, waits until it is stable,
and then bounces every member once, in order: a graceful stop (callbacks run,
dynamic members send LeaveGroup, static ones do not) followed at once by a
start of a new member with the same configuration (and the same instance id
when static).  Before the next member is bounced the group must be *settled*:
every member reports a steady state, every resource has exactly one owner, the
load is balanced (max - min <= 1), and all of that held for ``--quiet-ms``.

Measured from the members' own ownership callbacks, timestamped in this process
(``time.monotonic``), from the first stop to the last settled step:

* **pause** — the seed's metric: the sum over resources of the time they had no
  owner, in resource-seconds;
* **double-owned** — the sum over resources of the time they had two or more
  owners (must be 0 for an exclusive protocol);
* **rebalances** — generations completed during the bounce (workgroup: the
  members' generations; librdkafka: the GenerationId of its JoinGroup answers,
  read from its ``cgrp`` debug log).

Rows: workgroup's ``GroupMember`` (in this process, one asyncio loop) in three
modes — eager (``range``), cooperative (``cooperative-sticky``) and cooperative
with static membership — on the embedded coordinator and on Tansu; and
confluent-kafka (librdkafka) consumers on Tansu on a topic with ``--resources``
partitions: cooperative-sticky with static membership, cooperative-sticky, and
eager (``range``).  A restart is a new client object in the same process for
every row, so process start-up time (the same for every client) is left out.
Every row uses the same session timeout, heartbeat interval and rebalance
timeout.  A step that does not settle within ``--step-cap-s`` is recorded as
such and the bounce goes on; a row stops when it exceeds ``--row-cap-s``.

Usage::

    .venv/bin/python benchmarks/rolling_bounce.py                 # everything (about 10 min)
    .venv/bin/python benchmarks/rolling_bounce.py --quick         # smoke test, small group
    .venv/bin/python benchmarks/rolling_bounce.py --backends embedded --json-out bounce.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from workgroup import log as wlog  # noqa: E402
from workgroup.assignors.registry import get_assignor  # noqa: E402
from workgroup.member.driver import GroupMember  # noqa: E402
from workgroup.protocol import Protocol  # noqa: E402
from workgroup.testing.servers import (  # noqa: E402
    ServerProcess,
    ServerStartError,
    run_coordinator,
    run_tansu,
)
from workgroup.testing.signals import interrupt_on_termination  # noqa: E402

KIND = "r"
TOPIC = "bounce"
POLL_S = 0.05

err = Console(stderr=True, highlight=False)
# Piped or redirected output gets room for the whole table.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 150)


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    members: int
    resources: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    rebalance_timeout_ms: int
    quiet_ms: int
    form_cap_s: float
    step_cap_s: float
    row_cap_s: float
    max_unsettled_steps: int
    callback_ms: int = 0


@dataclass(frozen=True)
class Row:
    client: str  # "workgroup" | "librdkafka"
    backend: str  # "embedded" | "tansu"
    mode: str  # "eager" | "cooperative" | "cooperative+static"

    @property
    def label(self) -> str:
        return f"{self.client} {self.mode} on {self.backend}"

    @property
    def static(self) -> bool:
        return self.mode.endswith("+static")


ROWS = (
    Row("workgroup", "embedded", "eager"),
    Row("workgroup", "embedded", "cooperative"),
    Row("workgroup", "embedded", "cooperative+static"),
    Row("workgroup", "tansu", "eager"),
    Row("workgroup", "tansu", "cooperative"),
    Row("workgroup", "tansu", "cooperative+static"),
    Row("librdkafka", "tansu", "cooperative+static"),
    Row("librdkafka", "tansu", "cooperative"),
    Row("librdkafka", "tansu", "eager"),
)


# --------------------------------------------------------------------------- ownership


class Ownership:
    """Who owns what, from callbacks of any thread, with time integrals.

    ``pause`` integrates the number of resources without an owner, ``double``
    the number with two or more, both from :meth:`open_window` on.
    """

    def __init__(self, resources: int) -> None:
        self._lock = threading.Lock()
        self._owners: list[set[str]] = [set() for _ in range(resources)]
        self._held: dict[str, set[int]] = {}
        self._unowned = resources
        self._doubled = 0
        self._window_start: float | None = None
        self._last = time.monotonic()
        self.pause = 0.0
        self.double = 0.0
        self.max_unowned = 0
        self.events = 0
        #: (monotonic time, owner, "+"/"-", count, unowned after) when tracing.
        self.trace: list[tuple[float, str, str, int, int]] | None = None

    def _advance(self, now: float) -> None:
        if self._window_start is not None and now > self._last:
            self.pause += self._unowned * (now - self._last)
            self.double += self._doubled * (now - self._last)
        self._last = max(self._last, now)

    def _add(self, owner: str, resource: int) -> None:
        owners = self._owners[resource]
        if owner in owners:
            return
        owners.add(owner)
        if len(owners) == 1:
            self._unowned -= 1
        elif len(owners) == 2:
            self._doubled += 1
        self._held.setdefault(owner, set()).add(resource)

    def _remove(self, owner: str, resource: int) -> None:
        owners = self._owners[resource]
        if owner not in owners:
            return
        owners.discard(owner)
        if not owners:
            self._unowned += 1
        elif len(owners) == 1:
            self._doubled -= 1
        self._held[owner].discard(resource)

    def assigned(self, owner: str, resources: Iterable[int], replace: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            self._advance(now)
            resources = set(resources)
            if replace:
                for resource in self._held.get(owner, set()) - resources:
                    self._remove(owner, resource)
            for resource in resources:
                self._add(owner, resource)
            self.events += 1
            if self.trace is not None:
                self.trace.append((now, owner, "+", len(resources), self._unowned))
            if self._window_start is not None:
                self.max_unowned = max(self.max_unowned, self._unowned)

    def released(self, owner: str, resources: Iterable[int] | None = None) -> None:
        """``resources`` given up by ``owner`` (all it holds when ``None``)."""
        now = time.monotonic()
        with self._lock:
            self._advance(now)
            held = self._held.get(owner, set())
            released = list(held if resources is None else resources)
            for resource in released:
                self._remove(owner, resource)
            self.events += 1
            if self.trace is not None and released:
                self.trace.append((now, owner, "-", len(released), self._unowned))
            if self._window_start is not None:
                self.max_unowned = max(self.max_unowned, self._unowned)

    def open_window(self) -> None:
        with self._lock:
            now = time.monotonic()
            self._last = now
            self._window_start = now
            self.pause = self.double = 0.0
            self.max_unowned = self._unowned

    def totals(self) -> tuple[float, float]:
        with self._lock:
            self._advance(time.monotonic())
            return self.pause, self.double

    def settled(self, owners: Sequence[str]) -> bool:
        """Every resource owned once, only by ``owners``, with loads within one."""
        with self._lock:
            if self._unowned or self._doubled:
                return False
            loads = [len(self._held.get(owner, ())) for owner in owners]
            held = sum(len(v) for v in self._held.values())
            return held == len(self._owners) and max(loads) - min(loads) <= 1

    def loads(self, owners: Sequence[str]) -> list[int]:
        with self._lock:
            return [len(self._held.get(owner, ())) for owner in owners]


# --------------------------------------------------------------------------- back-ends


class Backend:
    """A back-end process on a free loopback port; its output goes to a log file."""

    def __init__(self, name: str, log_dir: Path, label: str) -> None:
        self.name = name
        self.log_path = log_dir / f"{label}.log"
        self.bootstrap = ""
        self._server: ServerProcess | None = None
        self._running = contextlib.ExitStack()

    def start(self) -> None:
        log = self._running.enter_context(self.log_path.open("wb"))
        if self.name == "embedded":
            runner = run_coordinator("--log-level", "warning", log=log, startup_timeout_s=30.0)
        else:
            runner = run_tansu(log=log, startup_timeout_s=20.0)
        try:
            self._server = self._running.enter_context(runner)
        except ServerStartError as exc:
            # The table shows one line per failure; the log has the details.
            raise RuntimeError(f"{self.name} did not start: {self.log_path}") from exc
        self.bootstrap = self._server.bootstrap

    def check_alive(self) -> None:
        if self._server is not None and self._server.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with code {self._server.process.returncode}")

    def stop(self) -> None:
        self._running.close()


# --------------------------------------------------------------------------- members


class Slot:
    """One position in the group; each (re)start is a new incarnation of it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.incarnation = 0

    @property
    def owner(self) -> str:
        return f"m{self.index}.{self.incarnation}"

    @property
    def instance_id(self) -> str:
        return f"bounce-{self.index}"


class Client:
    """What the bounce needs from a member, whatever its library."""

    owner: str

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    def steady(self) -> bool:
        raise NotImplementedError

    def generations(self) -> set[int]:
        raise NotImplementedError

    def problem(self) -> str | None:
        """A fatal error of the member, if any."""
        return None


class WorkgroupClient(Client):
    def __init__(
        self, row: Row, settings: Settings, bootstrap: str, group: str, slot: Slot, own: Ownership
    ) -> None:
        self.owner = slot.owner
        self._own = own
        self._work_s = settings.callback_ms / 1000
        self._generations: set[int] = set()
        if row.mode == "eager":
            protocol = Protocol("range", get_assignor("range"), rebalance="eager")
        else:
            protocol = Protocol("cooperative-sticky", get_assignor("cooperative-sticky"))
        self.member = GroupMember(
            bootstrap,
            group,
            [protocol],
            instance_id=slot.instance_id if row.static else None,
            session_timeout_ms=settings.session_timeout_ms,
            rebalance_timeout_ms=settings.rebalance_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            resources={KIND: range(settings.resources)},
            on_assigned=self._assigned,
            on_revoked=self._released,
            on_lost=self._released,
            client_id=f"bounce-{slot.owner}",
        )
        self._watch: asyncio.Task[None] | None = None

    async def _assigned(self, resources: tuple[tuple[str, Any], ...], generation: int) -> None:
        if self._work_s:
            await asyncio.sleep(self._work_s)
        self._own.assigned(self.owner, (int(key) for _, key in resources))

    async def _released(self, resources: tuple[tuple[str, Any], ...], generation: int) -> None:
        self._own.released(self.owner, [int(key) for _, key in resources])
        if self._work_s:
            await asyncio.sleep(self._work_s)

    async def _watch_generations(self) -> None:
        member = self.member
        while True:
            seen = member.generation
            if seen >= 0:
                self._generations.add(seen)
            await member.wait_for(lambda m: m.generation != seen)  # noqa: B023

    async def start(self) -> None:
        await self.member.start()
        self._watch = asyncio.create_task(self._watch_generations())

    async def stop(self) -> None:
        await self.member.close()
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        self._own.released(self.owner)  # anything a callback did not give back

    def steady(self) -> bool:
        return self.member.stable

    def generations(self) -> set[int]:
        return set(self._generations)

    def problem(self) -> str | None:
        error = self.member.error
        return None if error is None else f"{type(error).__name__}: {error}"


_GENERATION = re.compile(r"JoinGroup response: GenerationId (-?\d+)")


class LibrdkafkaClient(Client):
    """A confluent-kafka consumer polled by its own thread (callbacks run in poll)."""

    def __init__(
        self, row: Row, settings: Settings, bootstrap: str, group: str, slot: Slot, own: Ownership
    ) -> None:
        self.owner = slot.owner
        self._own = own
        self._work_s = settings.callback_ms / 1000
        self._cooperative = row.mode != "eager"
        self._generations: set[int] = set()
        self._join_state = "init"
        self._errors: list[str] = []
        self._stop = threading.Event()
        self._started = threading.Event()
        logger = logging.getLogger(f"bounce.librdkafka.{slot.owner}")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.handlers = [_GenerationLog(self._generations)]
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": f"bounce-{slot.owner}",
            "session.timeout.ms": settings.session_timeout_ms,
            "heartbeat.interval.ms": settings.heartbeat_interval_ms,
            "max.poll.interval.ms": settings.rebalance_timeout_ms,
            "partition.assignment.strategy": "cooperative-sticky" if self._cooperative else "range",
            "enable.auto.commit": False,
            "statistics.interval.ms": 100,
            "stats_cb": self._on_stats,
            "error_cb": lambda error: self._errors.append(str(error)),
            "debug": "cgrp",
            "logger": logger,
        }
        if row.static:
            self.config["group.instance.id"] = slot.instance_id
        self._thread = threading.Thread(target=self._run, name=f"bounce-{slot.owner}", daemon=True)

    def _on_stats(self, payload: str) -> None:
        self._join_state = json.loads(payload).get("cgrp", {}).get("join_state", "?")

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        if self._work_s:
            time.sleep(self._work_s)
        keys = [p.partition for p in partitions]
        self._own.assigned(self.owner, keys, replace=not self._cooperative)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self._own.released(self.owner, [p.partition for p in partitions])
        if self._work_s:
            time.sleep(self._work_s)

    def _run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(self.config)
        try:
            consumer.subscribe(
                [TOPIC],
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_revoke,
            )
            self._started.set()
            while not self._stop.is_set():
                message = consumer.poll(POLL_S)
                if message is not None and message.error():
                    self._errors.append(str(message.error()))
        finally:
            consumer.close()
            self._own.released(self.owner)

    async def start(self) -> None:
        self._thread.start()
        await asyncio.to_thread(self._started.wait, 10)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 60)
        if self._thread.is_alive():
            raise RuntimeError(f"librdkafka consumer {self.owner} did not close within 60 s")

    def steady(self) -> bool:
        return self._join_state == "steady"

    def generations(self) -> set[int]:
        return set(self._generations)


class _GenerationLog(logging.Handler):
    def __init__(self, generations: set[int]) -> None:
        super().__init__()
        self._generations = generations

    def emit(self, record: logging.LogRecord) -> None:
        match = _GENERATION.search(record.getMessage())
        if match and int(match[1]) >= 0:
            self._generations.add(int(match[1]))


def create_topic(bootstrap: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, partitions, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {TOPIC} did not show {partitions} partitions")


# --------------------------------------------------------------------------- one row


@dataclass
class Step:
    member: int
    settled: bool
    seconds: float
    pause: float
    double: float
    rebalances: int
    detail: str = ""


@dataclass
class RowResult:
    client: str
    backend: str
    mode: str
    #: "ok"; "unsettled" (did not form, or a step did not settle: a result);
    #: "failed" (the run broke: a back-end or a member crashed).
    status: str
    pause: float | None = None
    double: float | None = None
    rebalances: int | None = None
    settled_steps: int = 0
    steps_run: int = 0
    bounce_seconds: float | None = None
    form_seconds: float | None = None
    max_unowned: int | None = None
    steps: list[Step] = field(default_factory=list)
    detail: str = ""
    #: With ``--repeat``: every run; the fields above are then the median run's.
    runs: list[RowResult] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.client} {self.mode} on {self.backend}"

    @property
    def pause_range(self) -> tuple[float, float] | None:
        pauses = [r.pause for r in self.runs if r.status == "ok" and r.pause is not None]
        return (min(pauses), max(pauses)) if len(pauses) > 1 else None


def summarise(runs: list[RowResult]) -> RowResult:
    """The median run (by pause) among complete ones, carrying every run."""
    if len(runs) == 1:
        return runs[0]
    complete = sorted(
        (r for r in runs if r.status == "ok" and r.pause is not None),
        key=lambda r: r.pause or 0.0,
    )
    chosen = complete[(len(complete) - 1) // 2] if complete else runs[-1]
    summary = RowResult(**{k: v for k, v in vars(chosen).items() if k != "runs"})
    summary.runs = runs
    if len(complete) < len(runs):
        summary.detail = (
            f"{len(runs) - len(complete)} of {len(runs)} runs incomplete; " + summary.detail
        ).rstrip("; ")
    return summary


class Bounce:
    def __init__(self, row: Row, settings: Settings, bootstrap: str, backend: Backend) -> None:
        self.row = row
        self.settings = settings
        self.bootstrap = bootstrap
        self.backend = backend
        self.group = f"bounce-{row.client}-{row.mode.replace('+', '-')}"
        self.own = Ownership(settings.resources)
        self.slots = [Slot(i) for i in range(settings.members)]
        self.clients: dict[int, Client] = {}
        self.retired: list[Client] = []

    def _new_client(self, slot: Slot) -> Client:
        factory: type[Client] = (
            WorkgroupClient if self.row.client == "workgroup" else LibrdkafkaClient
        )
        return factory(self.row, self.settings, self.bootstrap, self.group, slot, self.own)  # type: ignore[call-arg]

    async def start(self, index: int) -> None:
        slot = self.slots[index]
        slot.incarnation += 1
        client = self._new_client(slot)
        self.clients[index] = client
        await client.start()

    async def stop(self, index: int) -> None:
        client = self.clients.pop(index)
        self.retired.append(client)
        await client.stop()

    def generations(self) -> set[int]:
        seen: set[int] = set()
        for client in [*self.clients.values(), *self.retired]:
            seen |= client.generations()
        return seen

    def _settled_now(self) -> bool:
        clients = list(self.clients.values())
        if not all(client.steady() for client in clients):
            return False
        if self.row.client == "workgroup":
            generations = {c.member.generation for c in clients if isinstance(c, WorkgroupClient)}
            if len(generations) != 1:
                return False
        return self.own.settled([client.owner for client in clients])

    def state(self) -> str:
        clients = list(self.clients.values())
        steady = sum(client.steady() for client in clients)
        loads = self.own.loads([client.owner for client in clients])
        return f"{steady}/{len(clients)} steady, loads {loads}"

    async def wait_settled(self, cap_s: float) -> bool:
        """True once settled for ``quiet_ms``; False at the cap."""
        deadline = time.monotonic() + cap_s
        since: float | None = None
        quiet_s = self.settings.quiet_ms / 1000
        while time.monotonic() < deadline:
            self.backend.check_alive()
            for client in self.clients.values():
                problem = client.problem()
                if problem is not None:
                    raise RuntimeError(f"member {client.owner} failed: {problem}")
            if self._settled_now():
                since = since if since is not None else time.monotonic()
                if time.monotonic() - since >= quiet_s:
                    return True
            else:
                since = None
            await asyncio.sleep(POLL_S)
        return False

    async def close(self) -> None:
        for index in list(self.clients):
            with contextlib.suppress(Exception):
                await self.stop(index)

    async def run(self, result: RowResult) -> None:
        settings = self.settings
        t0 = time.monotonic()
        await asyncio.gather(*(self.start(i) for i in range(settings.members)))
        if not await self.wait_settled(settings.form_cap_s):
            # A result, not a crash: the back-end could not settle this group.
            result.status = "unsettled"
            result.detail = (
                f"the group did not form within {settings.form_cap_s:g} s: {self.state()}"
            )
            return
        result.form_seconds = time.monotonic() - t0
        before = self.generations()
        self.own.open_window()
        start = time.monotonic()
        unsettled_in_a_row = 0
        for index in range(settings.members):
            if time.monotonic() - start > settings.row_cap_s:
                result.detail = f"stopped: row cap {settings.row_cap_s:g} s reached"
                break
            if unsettled_in_a_row >= settings.max_unsettled_steps:
                result.detail = f"stopped after {unsettled_in_a_row} unsettled steps in a row"
                break
            pause0, double0 = self.own.totals()
            generations0 = self.generations()
            step_start = time.monotonic()
            await self.stop(index)
            await self.start(index)
            settled = await self.wait_settled(settings.step_cap_s)
            pause1, double1 = self.own.totals()
            step = Step(
                member=index,
                settled=settled,
                seconds=time.monotonic() - step_start,
                pause=pause1 - pause0,
                double=double1 - double0,
                rebalances=len(self.generations() - generations0),
                detail=""
                if settled
                else f"not settled in {settings.step_cap_s:g} s: {self.state()}",
            )
            result.steps.append(step)
            unsettled_in_a_row = 0 if settled else unsettled_in_a_row + 1
            err.print(
                f"  step {index + 1}/{settings.members}: "
                + ("settled" if settled else "[yellow]NOT settled[/]")
                + f" in {step.seconds:.1f} s, pause {step.pause:.1f} res-s, "
                f"rebalances {step.rebalances}" + (f" ({step.detail})" if step.detail else "")
            )
        result.bounce_seconds = time.monotonic() - start
        result.pause, result.double = self.own.totals()
        result.max_unowned = self.own.max_unowned
        result.rebalances = len(self.generations() - before)
        result.steps_run = len(result.steps)
        result.settled_steps = sum(step.settled for step in result.steps)
        complete = result.steps_run == settings.members and result.settled_steps == settings.members
        result.status = "ok" if complete else "unsettled"


async def run_row(row: Row, settings: Settings, log_dir: Path) -> RowResult:
    result = RowResult(row.client, row.backend, row.mode, status="failed")
    label = f"{row.client}-{row.backend}-{row.mode.replace('+', '-')}"
    backend = Backend(row.backend, log_dir, label)
    bounce: Bounce | None = None
    try:
        await asyncio.to_thread(backend.start)
        if row.client == "librdkafka":
            await asyncio.to_thread(create_topic, backend.bootstrap, settings.resources)
        bounce = Bounce(row, settings, backend.bootstrap, backend)
        await bounce.run(result)
    except Exception as exc:  # one row failing must not lose the others
        result.status = "failed"
        result.detail = f"{type(exc).__name__}: {exc}"
    finally:
        if bounce is not None:
            await bounce.close()
        await asyncio.to_thread(backend.stop)
    return result


# --------------------------------------------------------------------------- report


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.{digits}f}"


def _fmt_pause(value: float | None) -> str:
    return _fmt(value, 2 if value is not None and value < 10 else 1)


def baseline(results: Sequence[RowResult], result: RowResult) -> RowResult | None:
    """The eager row of the same client and back-end."""
    return next(
        (
            r
            for r in results
            if r.client == result.client and r.backend == result.backend and r.mode == "eager"
        ),
        None,
    )


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or not base:
        return None
    return 100 * value / base


def render(results: Sequence[RowResult], settings: Settings) -> None:
    table = Table(
        title=(
            f"Rolling bounce: {settings.members} members, {settings.resources} resources, "
            f"session {settings.session_timeout_ms} ms, "
            f"heartbeat {settings.heartbeat_interval_ms} ms"
            + (f", callbacks {settings.callback_ms} ms" if settings.callback_ms else "")
            + (
                "; median run by pause (range over complete runs)"
                if any(len(r.runs) > 1 for r in results)
                else ""
            )
        ),
        title_justify="left",
    )
    for name, justify in [
        ("client", "left"),
        ("back-end", "left"),
        ("mode", "left"),
        ("pause res-s", "right"),
        ("% of eager", "right"),
        ("rebalances", "right"),
        ("double-owned res-s", "right"),
        ("max unowned", "right"),
        ("settled steps", "right"),
        ("bounce s", "right"),
        ("status", "left"),
    ]:
        table.add_column(name, justify=justify, no_wrap=name in ("mode", "pause res-s", "status"))  # type: ignore[arg-type]
    notes: list[str] = []
    for result in results:
        base = baseline(results, result)
        share = ratio(result.pause, base.pause if base else None)
        table.add_row(
            result.client,
            result.backend,
            result.mode,
            _fmt_pause(result.pause)
            + ("" if result.status == "ok" else " †")
            + (
                f" ({_fmt_pause(result.pause_range[0])}..{_fmt_pause(result.pause_range[1])})"
                if result.pause_range
                else ""
            ),
            _fmt(share, 2) + (" %" if share is not None else ""),
            "-" if result.rebalances is None else str(result.rebalances),
            _fmt(result.double),
            "-" if result.max_unowned is None else str(result.max_unowned),
            f"{result.settled_steps}/{settings.members}",
            _fmt(result.bounce_seconds),
            result.status + (f" ({len(notes) + 1})" if result.detail else ""),
        )
        if result.detail:
            notes.append(f"({len(notes) + 1}) {result.label}: {result.detail}")
    out.print(table)
    if any(r.status != "ok" and r.pause is not None for r in results):
        out.print("† partial: measured over the steps run before the row stopped")
    for note in notes:
        out.print(note)
    for line in verdicts(results):
        out.print(line)


def verdicts(results: Sequence[RowResult]) -> list[str]:
    """The issue's targets (cooperative + static <= 1 % of eager, and below
    librdkafka's pause), checked against this run."""
    lines = []
    rdkafka = [r for r in results if r.client == "librdkafka"]
    for backend in ("embedded", "tansu"):
        row = next(
            (
                r
                for r in results
                if r.client == "workgroup"
                and r.backend == backend
                and r.mode == "cooperative+static"
            ),
            None,
        )
        if row is None:
            continue
        if row.status != "ok" or row.pause is None:
            lines.append(
                f"workgroup cooperative+static on {backend}: {row.status} ({row.detail}); "
                "no comparable pause"
            )
            continue
        base = baseline(results, row)
        share = ratio(row.pause, base.pause if base else None)
        if share is not None:
            verdict = "met" if share <= 1.0 else "MISSED"
            lines.append(
                f"target: workgroup cooperative+static <= 1 % of workgroup eager on {backend}: "
                f"{row.pause:.1f} / {base.pause:.1f} res-s = {share:.2f} % → {verdict}"  # type: ignore[union-attr]
            )
        for other in rdkafka:
            if other.status != "ok" or other.pause is None:
                lines.append(
                    f"  librdkafka {other.mode} on {other.backend}: {other.status} "
                    f"({other.detail}); no pause to compare with"
                )
                continue
            verdict = "below" if row.pause < other.pause else "NOT below"
            lines.append(
                f"  workgroup cooperative+static on {backend} ({row.pause:.1f} res-s) is {verdict} "
                f"librdkafka {other.mode} on {other.backend} ({other.pause:.1f} res-s)"
            )
    return lines


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small group, short caps (smoke test)")
    parser.add_argument("--members", type=int, default=None, help="members (10; quick: 4)")
    parser.add_argument("--resources", type=int, default=None, help="resources (100; quick: 24)")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=None, help="2000; quick: 500")
    parser.add_argument("--rebalance-timeout-ms", type=int, default=30_000)
    parser.add_argument(
        "--quiet-ms", type=int, default=500, help="how long a settled group must stay so"
    )
    parser.add_argument("--form-cap-s", type=float, default=None, help="60; quick: 30")
    parser.add_argument("--step-cap-s", type=float, default=None, help="30; quick: 20")
    parser.add_argument("--row-cap-s", type=float, default=None, help="150; quick: 60")
    parser.add_argument(
        "--max-unsettled-steps",
        type=int,
        default=2,
        help="stop a row after this many unsettled steps in a row (2)",
    )
    parser.add_argument(
        "--backends", default="embedded,tansu", help="comma-separated: embedded,tansu"
    )
    parser.add_argument(
        "--clients", default="workgroup,librdkafka", help="comma-separated: workgroup,librdkafka"
    )
    parser.add_argument(
        "--modes",
        default="eager,cooperative,cooperative+static",
        help="comma-separated: eager,cooperative,cooperative+static",
    )
    parser.add_argument(
        "--callback-ms",
        type=int,
        default=0,
        help="work each ownership callback does (0): a revoked resource stops at once, an "
        "assigned one runs once its callback returned",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per row (1); the table shows the median run and the range of pauses",
    )
    parser.add_argument("--json-out", type=Path, default=None, help="write the results as JSON")
    parser.add_argument("--log-dir", type=Path, default=None, help="keep the back-ends' logs here")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    quick = args.quick
    return Settings(
        members=args.members or (4 if quick else 10),
        resources=args.resources or (24 if quick else 100),
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms or (500 if quick else 2000),
        rebalance_timeout_ms=args.rebalance_timeout_ms,
        quiet_ms=args.quiet_ms,
        form_cap_s=args.form_cap_s or (30.0 if quick else 60.0),
        step_cap_s=args.step_cap_s or (20.0 if quick else 30.0),
        row_cap_s=args.row_cap_s or (60.0 if quick else 150.0),
        max_unsettled_steps=args.max_unsettled_steps,
        callback_ms=args.callback_ms,
    )


def select_rows(args: argparse.Namespace) -> list[Row]:
    def parse(value: str, allowed: Iterable[str], what: str) -> set[str]:
        chosen = {v.strip() for v in value.split(",") if v.strip()}
        unknown = chosen - set(allowed)
        if unknown:
            raise SystemExit(f"unknown {what}: {', '.join(sorted(unknown))}")
        return chosen

    backends = parse(args.backends, ("embedded", "tansu"), "back-end")
    clients = parse(args.clients, ("workgroup", "librdkafka"), "client")
    modes = parse(args.modes, ("eager", "cooperative", "cooperative+static"), "mode")
    return [r for r in ROWS if r.backend in backends and r.client in clients and r.mode in modes]


async def main_async(
    rows: Sequence[Row], settings: Settings, log_dir: Path, repeat: int
) -> list[RowResult]:
    results = []
    for row in rows:
        runs = []
        for run in range(repeat):
            err.print(
                f"[bold]{row.label}[/]" + (f" (run {run + 1}/{repeat})" if repeat > 1 else "")
            )
            result = await run_row(row, settings, log_dir)
            if result.status == "failed":
                err.print(f"  [red]failed[/]: {result.detail}")
            runs.append(result)
            if result.status != "ok":
                break  # an incomplete run is not repeated: the next would wait out the caps too
        results.append(summarise(runs))
    return results


def environment() -> dict[str, Any]:
    """What the numbers were measured with."""
    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    with contextlib.suppress(ImportError):
        import confluent_kafka

        info["confluent_kafka"] = confluent_kafka.__version__
        info["librdkafka"] = confluent_kafka.libversion()[0]
    return info


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_from(args)
    rows = select_rows(args)
    if not rows:
        raise SystemExit("no rows selected")
    # librdkafka logs through Python's logging; keep aiokafka's reconnect noise out of the report.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    wlog.configure("error")
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="workgroup-bounce-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        results = asyncio.run(main_async(rows, settings, log_dir, args.repeat))
    finally:
        if args.log_dir is None:
            shutil.rmtree(log_dir, ignore_errors=True)
    render(results, settings)
    out.print(f"total {time.monotonic() - started:.0f} s")
    if args.json_out is not None:
        payload = {
            "environment": environment(),
            "settings": asdict(settings),
            "results": [asdict(r) for r in results],
            "verdicts": verdicts(results),
        }
        args.json_out.write_text(json.dumps(payload, indent=2))
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    # SIGTERM and SIGHUP (timeout, CI, a closed terminal) clean up as Ctrl-C does.
    with interrupt_on_termination():
        sys.exit(main())
