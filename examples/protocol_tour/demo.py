"""The protocol tour: a live workgroup group, step by step (the first ``make demo``).

Starts the embedded coordinator and three ``workgroup member`` processes
(static members ``a``, ``b``, ``c``) that share 12 resources with the
cooperative-sticky assignor, then:

1. waits until the three own all 12 resources;
2. SIGKILLs ``c`` (no goodbye: the coordinator keeps its place for the session);
3. restarts ``c`` with the same instance id: it takes its place back, with its
   resources and without a rebalance;
4. rolls the group from protocol ``cooperative-sticky.v1`` to ``.v2``: each member
   in turn is stopped (SIGTERM) and restarted advertising ``[v2, v1]``; the group
   stays on v1 while any member lacks v2 and moves to v2 with the last upgrade.

After each step it prints the assignment table, the generation, the protocol the
group chose and how long the step took.  Everything printed comes from the
running group: the members' event lines (``workgroup member`` prints one JSON
line per event) and DescribeGroups answers from the coordinator, which must
agree.  A step that does not converge within ``--step-timeout`` seconds ends the
demo with exit status 1; every process it started is stopped on any exit,
Ctrl-C included.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.protocol.admin import DescribeGroupsRequest
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from workgroup.protocol.metadata import BinaryCodec
from workgroup.testing import ServerProcess, ServerStartError, run_coordinator
from workgroup.testing.signals import interrupt_on_termination

GROUP = "demo"
KIND = "shard"
RESOURCE_COUNT = 12
ASSIGNOR = "cooperative-sticky"
NAMES = ("a", "b", "c")
SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_INTERVAL_MS = 500
REBALANCE_TIMEOUT_MS = 10_000

ALL_RESOURCES = frozenset((KIND, key) for key in range(RESOURCE_COUNT))

# Piped output (tests, `make demo | tee`) gets room for the whole table.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 132)


class StepFailed(Exception):
    """A step did not converge in time."""


# --------------------------------------------------------------------------- processes


@dataclass
class Event:
    """One line of ``workgroup member`` output."""

    name: str
    member_id: str
    generation: int
    protocol: str | None
    resources: frozenset[tuple[str, Any]]
    assignment: frozenset[tuple[str, Any]]
    leader: bool
    t: float
    raw: dict[str, Any]

    @classmethod
    def parse(cls, line: str) -> Event:
        data = json.loads(line)
        return cls(
            name=data["event"],
            member_id=data.get("member_id") or "",
            generation=int(data.get("generation", -1)),
            protocol=data.get("protocol"),
            resources=frozenset((k, v) for k, v in data.get("resources", [])),
            assignment=frozenset((k, v) for k, v in data.get("assignment", [])),
            leader=bool(data.get("leader")),
            t=float(data.get("t", time.time())),
            raw=data,
        )


@dataclass
class MemberProcess:
    """One ``workgroup member`` process and what its event lines say."""

    name: str
    protocols: tuple[str, ...]
    process: asyncio.subprocess.Process
    log_path: Path
    events: list[Event] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.returncode is None and not self.closed

    @property
    def closed(self) -> bool:
        return any(e.name in ("closed", "fatal") for e in self.events)

    @property
    def last_stable(self) -> Event | None:
        return next((e for e in reversed(self.events) if e.name == "stable"), None)

    @property
    def owned(self) -> frozenset[tuple[str, Any]]:
        return self.events[-1].assignment if self.events else frozenset()

    def events_since(self, t: float) -> list[Event]:
        return [e for e in self.events if e.t >= t]


class Cluster:
    """The coordinator process, the member processes and a DescribeGroups client."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.coordinator: ServerProcess | None = None
        self.bootstrap = ""
        self.members: dict[str, MemberProcess] = {}
        self.retired: list[MemberProcess] = []
        self.changed = asyncio.Event()
        self.codec = BinaryCodec()
        self._admin: AIOKafkaClient | None = None
        self._coordinator_log = (workdir / "coordinator.log").open("wb")
        self._running = contextlib.ExitStack()

    # -- lifecycle ------------------------------------------------------------

    async def start_coordinator(self) -> None:
        # Started in the loop's thread (a second at most, before any member runs) so
        # that an interrupt can never leave a coordinator nobody will stop.
        try:
            self.coordinator = self._running.enter_context(
                run_coordinator(
                    "--initial-rebalance-delay-ms",
                    "1000",
                    log=self._coordinator_log,
                    startup_timeout_s=30,
                )
            )
        except ServerStartError as exc:
            raise StepFailed(f"the coordinator did not start: {exc}") from exc
        self.bootstrap = self.coordinator.bootstrap
        self._admin = AIOKafkaClient(bootstrap_servers=self.bootstrap, client_id="demo-describe")
        await self._admin.bootstrap()

    async def start_member(self, name: str, protocols: Sequence[str]) -> MemberProcess:
        log_path = self.workdir / f"member-{name}-{len(self.retired)}.log"
        with log_path.open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "workgroup",
                "member",
                "--bootstrap",
                self.bootstrap,
                "--group",
                GROUP,
                "--resources",
                f"{KIND}={RESOURCE_COUNT}",
                *(arg for protocol in protocols for arg in ("--protocol", protocol)),
                "--instance-id",
                name,
                "--session-timeout-ms",
                str(SESSION_TIMEOUT_MS),
                "--heartbeat-interval-ms",
                str(HEARTBEAT_INTERVAL_MS),
                "--rebalance-timeout-ms",
                str(REBALANCE_TIMEOUT_MS),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        member = MemberProcess(name, tuple(protocols), process, log_path)
        member.reader = asyncio.create_task(self._read_events(member))
        self.members[name] = member
        return member

    async def _read_events(self, member: MemberProcess) -> None:
        stdout = member.process.stdout
        assert stdout is not None
        async for line in stdout:
            text = line.decode(errors="replace").strip()
            if not text:
                continue
            try:
                member.events.append(Event.parse(text))
            except (ValueError, KeyError, TypeError):
                console.print(f"[red]member {member.name}: unreadable line {text!r}[/]")
            self.changed.set()
        await member.process.wait()
        self.changed.set()

    async def stop_member(self, name: str, sig: signal.Signals) -> MemberProcess:
        member = self.members[name]
        member.process.send_signal(sig)
        async with asyncio.timeout(15):
            await member.process.wait()
            if member.reader is not None:
                await member.reader
        self.changed.set()
        return member

    def retire(self, name: str) -> None:
        self.retired.append(self.members.pop(name))

    async def close(self) -> None:
        """Stop everything started (members first, then the coordinator)."""
        if self._admin is not None:
            await self._admin.close()
            self._admin = None
        processes = [m.process for m in [*self.members.values(), *self.retired]]
        for process in processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
        for process in processes:
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        readers = [m.reader for m in [*self.members.values(), *self.retired] if m.reader]
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        if self.coordinator is not None:
            await asyncio.to_thread(self.coordinator.stop, 10)
        self._running.close()
        self._coordinator_log.close()

    def name_of(self, member_id: str) -> str | None:
        """The member name of the process (running or not) that reported ``member_id``."""
        for member in [*self.members.values(), *self.retired]:
            if any(e.member_id == member_id for e in member.events):
                return member.name
        return None

    def all_pids(self) -> list[int]:
        pids = [m.pid for m in [*self.members.values(), *self.retired]]
        if self.coordinator is not None:
            pids.append(self.coordinator.pid)
        return pids

    def coordinator_log(self) -> str:
        self._coordinator_log.flush()
        return _tail(self.workdir / "coordinator.log")

    # -- DescribeGroups ------------------------------------------------------

    async def describe(self) -> Described:
        client = self._admin
        assert client is not None
        node = await client.coordinator_lookup(CoordinationType.GROUP, GROUP)
        response = await client.send(node, DescribeGroupsRequest([GROUP]))
        (error, _group, state, protocol_type, protocol, raw_members, *_) = response.groups[0]
        members = {}
        for member_id, client_id, client_host, _metadata, assignment in raw_members:
            assigned: frozenset[tuple[str, Any]] = frozenset()
            if assignment:
                assigned = frozenset(self.codec.decode_assignment(assignment).value.assigned)
            members[member_id] = DescribedMember(member_id, client_id, client_host, assigned)
        return Described(error, state, protocol_type, protocol, members)


@dataclass(frozen=True)
class DescribedMember:
    member_id: str
    client_id: str
    client_host: str
    assigned: frozenset[tuple[str, Any]]


@dataclass(frozen=True)
class Described:
    error: int
    state: str
    protocol_type: str
    protocol: str
    members: dict[str, DescribedMember]


# --------------------------------------------------------------------------- convergence


@dataclass
class Snapshot:
    """A converged group: what the members report and the coordinator agrees on."""

    generation: int
    protocol: str
    described: Described
    owners: dict[str, MemberProcess]  # member id -> process (alive ones)


def converged(
    cluster: Cluster, described: Described, protocol: str, dead: Iterable[str] = ()
) -> Snapshot | str:
    """The snapshot if the group converged, else what is still missing."""
    dead = set(dead)
    live = [m for name, m in cluster.members.items() if name not in dead]
    stables = {m.name: m.last_stable for m in live}
    waiting = [name for name, event in stables.items() if event is None]
    if waiting:
        return f"no stable event yet from {', '.join(waiting)}"
    events = {name: e for name, e in stables.items() if e is not None}
    generations = {e.generation for e in events.values()}
    if len(generations) != 1:
        return f"members report generations {sorted(generations)}"
    protocols = {e.protocol for e in events.values()}
    if protocols != {protocol}:
        return f"members report protocol {sorted(map(str, protocols))}, expected {protocol}"
    for m in live:
        if not m.alive:
            return f"member {m.name} exited"
        if m.owned != events[m.name].assignment:
            return f"member {m.name} is still changing its assignment"
    if described.state != "Stable":
        return f"the coordinator says the group is {described.state}"
    if described.protocol != protocol:
        return f"the coordinator says the protocol is {described.protocol!r}"
    by_id = {e.member_id: cluster.members[name] for name, e in events.items()}
    expected_ids = set(by_id) | {mid for mid in described.members if cluster.name_of(mid) in dead}
    if set(described.members) != expected_ids:
        return "the coordinator's member list differs from the running members"
    owned: list[tuple[str, Any]] = []
    for member_id, d in described.members.items():
        owned.extend(d.assigned)
        member = by_id.get(member_id)
        if member is not None and member.owned != d.assigned:
            return f"the coordinator's assignment of {member.name} differs from what it owns"
    if len(owned) != len(set(owned)) or set(owned) != ALL_RESOURCES:
        return "the resources are not covered exactly once"
    return Snapshot(generations.pop(), protocol, described, by_id)


async def wait_converged(
    cluster: Cluster, protocol: str, limit_s: float, dead: Iterable[str] = ()
) -> Snapshot:
    deadline = time.monotonic() + limit_s
    status: Snapshot | str = "not checked yet"
    while time.monotonic() < deadline:
        cluster.changed.clear()
        status = converged(cluster, await cluster.describe(), protocol, dead)
        if isinstance(status, Snapshot):
            return status
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(0.2, max(0.0, deadline - time.monotonic()))):
                await cluster.changed.wait()
    raise StepFailed(f"did not converge within {limit_s:g} s: {status}")


# --------------------------------------------------------------------------- output


def _keys(resources: Iterable[tuple[str, Any]]) -> str:
    return " ".join(str(key) for _, key in sorted(resources, key=lambda r: r[1])) or "-"


def show(
    cluster: Cluster,
    title: str,
    snapshot: Snapshot,
    took: float,
    previous: dict[str, frozenset[tuple[str, Any]]],
    since: float,
    note: str = "",
) -> dict[str, frozenset[tuple[str, Any]]]:
    """Print the step's table; return each instance's resources (per the coordinator)."""
    table = Table(title=escape(title), title_justify="left", title_style="bold", expand=False)
    table.add_column("member")
    table.add_column("pid", justify="right")
    table.add_column("member id", no_wrap=True)
    table.add_column("leader")
    table.add_column("advertises", no_wrap=True)
    table.add_column(f"{KIND}s owned", no_wrap=True)
    table.add_column("change", no_wrap=True)
    table.add_column("events this step (from the member)")
    now: dict[str, frozenset[tuple[str, Any]]] = {}
    rows = []
    for member_id, described in snapshot.described.members.items():
        process = snapshot.owners.get(member_id)
        name = process.name if process else cluster.name_of(member_id) or member_id
        rows.append((name, member_id, described, process))
    for name, member_id, described, process in sorted(rows):
        now[name] = described.assigned
        before = previous.get(name, frozenset())
        gained, lost = described.assigned - before, before - described.assigned
        change = " ".join(
            [f"+{_keys(gained)}" if gained else "", f"-{_keys(lost)}" if lost else ""]
        ).strip()
        if process is None:
            pid, leader, advertises = "killed", "", "-"
            events = "none: the process is gone"
            owned = f"[dim]{_keys(described.assigned)}[/]"
        else:
            stable = process.last_stable
            pid = str(process.pid)
            leader = "yes" if stable is not None and stable.leader else ""
            advertises = ",".join("v" + p.rpartition(":")[2] for p in process.protocols)
            owned = _keys(described.assigned)
            events = "; ".join(_describe_event(e) for e in process.events_since(since))
        table.add_row(
            name, pid, _short(member_id), leader, advertises, owned, change or "=", events or "-"
        )
    console.print(table)
    summary = (
        f"generation [bold]{snapshot.generation}[/] · protocol [bold]{snapshot.protocol}[/] · "
        f"coordinator: {snapshot.described.state}, {len(snapshot.described.members)} members · "
        f"took [bold]{took:.2f} s[/]"
    )
    console.print(summary)
    if note:
        console.print(note)
    console.print()
    return now


def _describe_event(event: Event) -> str:
    if event.name == "stable":
        return f"stable in generation {event.generation}"
    if event.name in ("assigned", "revoked", "lost"):
        return f"{event.name} {_keys(event.resources)}"
    return event.name


def _short(member_id: str) -> str:
    return member_id if len(member_id) <= 11 else member_id[:10] + "…"


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# --------------------------------------------------------------------------- the story


def protocol(version: int) -> str:
    return f"{ASSIGNOR}:{version}"


def wire(version: int) -> str:
    return f"{ASSIGNOR}.v{version}"


async def run(cluster: Cluster, step_timeout: float) -> None:
    started = time.monotonic()
    await cluster.start_coordinator()
    console.print(
        f"[bold]workgroup demo[/]: embedded coordinator on {cluster.bootstrap} "
        f"(pid {cluster.coordinator.pid if cluster.coordinator else '?'}), group {GROUP!r}, "
        f"{RESOURCE_COUNT} {KIND}s, assignor {ASSIGNOR}, static members {', '.join(NAMES)}, "
        f"session timeout {SESSION_TIMEOUT_MS / 1000:.0f} s\n"
    )

    # Step 1: three members join.
    t0, wall0 = time.monotonic(), time.time()
    for name in NAMES:
        await cluster.start_member(name, [protocol(1)])
    snap = await wait_converged(cluster, wire(1), step_timeout)
    owners = show(
        cluster,
        "1. a, b and c start and join",
        snap,
        time.monotonic() - t0,
        {},
        wall0,
        "(each member prints one JSON event line per callback; the table is checked "
        "against DescribeGroups)",
    )

    # Step 2: SIGKILL c.
    t0, wall0 = time.monotonic(), time.time()
    generation = snap.generation
    killed = await cluster.stop_member("c", signal.SIGKILL)
    killed_pid = killed.pid
    cluster.retire("c")
    snap = await wait_converged(cluster, wire(1), step_timeout, dead=["c"])
    owners = show(
        cluster,
        f"2. SIGKILL c (pid {killed_pid})",
        snap,
        time.monotonic() - t0,
        owners,
        wall0,
        f"c is gone without a LeaveGroup; as a static member its place and its {KIND}s are "
        f"kept for the session timeout ({SESSION_TIMEOUT_MS / 1000:.0f} s), "
        f"no rebalance (generation {'unchanged' if snap.generation == generation else 'changed'})",
    )

    # Step 3: restart c with the same instance id.
    t0, wall0 = time.monotonic(), time.time()
    generation = snap.generation
    before = owners["c"]
    await cluster.start_member("c", [protocol(1)])
    snap = await wait_converged(cluster, wire(1), step_timeout)
    owners_after = show(
        cluster,
        "3. restart c with instance id c",
        snap,
        time.monotonic() - t0,
        owners,
        wall0,
        "",
    )
    same = owners_after["c"] == before
    console.print(
        f"c took back {'the same' if same else 'different'} {KIND}s; generation "
        + (
            f"unchanged ({generation}): no rebalance"
            if snap.generation == generation
            else f"{generation} → {snap.generation}"
        )
        + "\n"
    )
    owners = owners_after

    # Steps 4-6: roll the group from v1 to v2, one member at a time.
    for index, name in enumerate(NAMES):
        last = index == len(NAMES) - 1
        t0, wall0 = time.monotonic(), time.time()
        old = await cluster.stop_member(name, signal.SIGTERM)
        cluster.retire(name)
        await cluster.start_member(name, [protocol(2), protocol(1)])
        expected = wire(2) if last else wire(1)
        snap = await wait_converged(cluster, expected, step_timeout)
        upgraded = ", ".join(NAMES[: index + 1])
        goodbye = "; ".join(_describe_event(e) for e in old.events_since(wall0))
        console.print(f"the old {name} (pid {old.pid}) on SIGTERM: {goodbye or 'no events'}")
        owners = show(
            cluster,
            f"{4 + index}. upgrade {name}: SIGTERM, restart advertising [{wire(2)}, {wire(1)}]",
            snap,
            time.monotonic() - t0,
            owners,
            wall0,
            (
                f"every member supports {wire(2)} now: the group moved to it"
                if last
                else f"upgraded: {upgraded}; the group stays on {wire(1)} until every member "
                f"supports {wire(2)}"
            ),
        )
    console.print(f"[bold green]demo complete[/] in {time.monotonic() - started:.1f} s")


async def main_async(workdir: Path, step_timeout: float) -> int:
    """Run the story; 0 if every step converged, 1 if not (the logs are then kept)."""
    cluster = Cluster(workdir)
    status = 1
    try:
        await run(cluster, step_timeout)
        status = 0
    except StepFailed as exc:
        console.print(f"[bold red]step failed[/]: {exc}")
        for member in [*cluster.members.values(), *cluster.retired]:
            tail = [e.raw for e in member.events[-3:]]
            console.print(f"  member {member.name} (pid {member.pid}): last events {tail}")
            log = _tail(member.log_path, 5)
            if log:
                console.print(f"  its log:\n{log}")
        console.print(f"coordinator log:\n{cluster.coordinator_log()}")
    finally:
        pids = cluster.all_pids()
        await cluster.close()
        console.print(f"stopped processes {', '.join(map(str, pids))}")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--step-timeout",
        type=float,
        default=20.0,
        help="seconds each step may take to converge (default 20)",
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="workgroup-demo-"))
    status = 1
    try:
        status = asyncio.run(main_async(workdir, args.step_timeout))
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: every process was stopped")
        status = 130
    finally:
        if status == 1 or args.keep_logs:
            console.print(f"logs in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return status


if __name__ == "__main__":
    # SIGTERM and SIGHUP (timeout, CI, a closed terminal) clean up as Ctrl-C does.
    with interrupt_on_termination():
        sys.exit(main())
