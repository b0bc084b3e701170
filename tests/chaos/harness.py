"""A seeded chaos run: ``workgroup run`` daemons and a coordinator under random
faults, and the checks of what the handlers recorded.

The daemons reach the coordinator through a :class:`~workgroup.testing.FaultProxy`
(the coordinator advertises the proxy), so network faults hit heartbeats,
rebalances and lease commits alike.  Faults, drawn from one seeded generator:

* ``kill``: SIGKILL a daemon, restart it (static: same instance id; dynamic: none);
* ``term``: SIGTERM a daemon (it finishes its handlers), restart it;
* ``pause``: SIGSTOP a daemon past its session timeout, then SIGCONT;
* ``twin``: freeze a static daemon and start another with the same instance id;
  when the original resumes it must find itself fenced;
* ``coordinator``: SIGKILL the coordinator, restart it from its data directory;
* ``partition``: cut one daemon off the coordinator (its Kafka client id), heal it;
* ``delay`` / ``drop``: slow or lose every daemon's traffic for a while;
* ``cut``: close every connection at once;
* ``upgrade``: restart one daemon with the next assignor list of a rolling
  change of assignor (cooperative-sticky, then round-robin, and back);
* ``add`` / ``remove``: a shard appears or goes (at the end of the catalog);
* ``probe``: a SIGKILL followed by a quiet period, to measure how long the
  killed daemon's resources stay unowned.

Faults overlap: the undo of one (resume, heal, restart) comes later while others
start.  :func:`check` then asserts the guarantees (see its docstring).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.app import SESSION_TIMEOUT_MS
from workgroup.admin import describe_group
from workgroup.testing import FaultProxy
from workgroup.testing.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
SLOTS = ("w1", "w2", "w3", "w4")
STAGES = (
    "cooperative-sticky",
    "round-robin,cooperative-sticky",
    "round-robin",
    "cooperative-sticky,round-robin",
)
FAULTS = (
    "kill",
    "term",
    "pause",
    "twin",
    "coordinator",
    "partition",
    "partition",
    "delay",
    "drop",
    "cut",
    "upgrade",
    "upgrade",
    "add",
    "remove",
    "probe",
)
#: A resource of a killed daemon must run elsewhere within this (probe faults):
#: its session, a rebalance, and the handler's first checkpoint read.
RECOVERY_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 4.0


@dataclass
class Fault:
    at: float
    kind: str
    target: str = ""
    pid: int | None = None
    owned: list[str] = field(default_factory=list)
    #: Size of the records file when the fault was applied.
    records_at: int = 0


class ProxyThread:
    """A FaultProxy on its own event loop thread, driven from the test's thread."""

    def __init__(self, upstream: str, port: int, seed: int) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.proxy: FaultProxy = self.call(
            lambda: FaultProxy(upstream, listen_port=port, seed=seed)
        )
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result(10)

    def call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def close(self) -> None:
        async def shutdown() -> None:
            await self.proxy.close()
            # Links accepted while closing: end their tasks before the loop goes.
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class Coordinator:
    """``workgroup coordinator`` on a fixed port with a data directory, restartable."""

    def __init__(self, workdir: Path, port: int, advertised: str) -> None:
        self.port = port
        self.argv = [
            sys.executable, "-m", "workgroup", "coordinator",
            "--listen", f"127.0.0.1:{port}",
            "--advertised-listener", advertised,
            "--data-dir", str(workdir / "coordinator-data"),
            "--min-session-timeout-ms", "1000",
        ]  # fmt: skip
        self.log = workdir / "coordinator.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return  # already up
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"the coordinator exited: see {self.log}")
            time.sleep(0.05)
        raise RuntimeError("the coordinator did not start listening")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class Cluster:
    def __init__(self, workdir: Path, rng: random.Random) -> None:
        self.workdir = workdir
        self.rng = rng
        self.out = workdir / "records.jsonl"
        self.shards_file = workdir / "shards.txt"
        self.shards = [f"s{i}" for i in range(6)]
        self._next_shard = 6
        self.write_shards()
        proxy_port, coordinator_port = free_port(), free_port()
        self.coordinator = Coordinator(workdir, coordinator_port, f"127.0.0.1:{proxy_port}")
        self.coordinator.start()
        self.net = ProxyThread(self.coordinator.bootstrap, proxy_port, rng.randrange(1 << 30))
        self.bootstrap = self.net.proxy.bootstrap
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        #: Every daemon started, so that none outlives the run.
        self.every_process: list[subprocess.Popen[bytes]] = []
        self.stage: dict[str, int] = {}
        self.target_stage = 0
        self.static: dict[str, bool] = {}
        self.paused: set[str] = set()
        self.started = 0
        self.faults: list[Fault] = []
        #: (when, what): undo actions of faults still in force.
        self.undo: list[tuple[float, Callable[[], None]]] = []

    # --- processes -----------------------------------------------------------------

    def write_shards(self) -> None:
        tmp = self.shards_file.with_suffix(".tmp")
        tmp.write_text("\n".join(self.shards) + "\n")
        tmp.replace(self.shards_file)

    def start(self, slot: str, *, static: bool = True) -> None:
        stage = self.stage.setdefault(slot, self.target_stage)
        instance = slot.split("+")[0]
        argv = [sys.executable, "-m", "workgroup", "run", "tests.chaos.app:app"]
        argv += ["--bootstrap", self.bootstrap, "--log-level", "warning", "--log-format", "json"]
        if static:
            argv += ["--instance-id", instance]
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKGROUP_")}
        env |= {
            "CHAOS_OUT": str(self.out),
            "CHAOS_SHARDS": str(self.shards_file),
            "CHAOS_ASSIGNORS": STAGES[stage],
        }
        with (self.workdir / f"daemon-{self.started}-{slot}.log").open("wb") as log:
            self.processes[slot] = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        self.every_process.append(self.processes[slot])
        self.static[slot] = static
        self.started += 1

    def send(self, slot: str, signum: int) -> None:
        process = self.processes.get(slot)
        if process is not None and process.poll() is None:
            os.kill(process.pid, signum)

    def stop(self, slot: str, signum: int = signal.SIGKILL) -> None:
        self.send(slot, signal.SIGCONT)
        self.send(slot, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.processes[slot].wait(15)
        if self.processes[slot].poll() is None:
            self.processes[slot].kill()
            self.processes[slot].wait(10)
        self.paused.discard(slot)

    def close(self) -> None:
        for process in self.every_process:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
            process.wait(10)
        with contextlib.suppress(Exception):
            self.net.close()
        self.coordinator.kill()

    # --- faults ----------------------------------------------------------------------

    def network(self, fault: Callable[[FaultProxy], object]) -> None:
        self.net.call(lambda: fault(self.net.proxy))

    def later(self, seconds: float, action: Callable[[], None]) -> None:
        self.undo.append((time.monotonic() + seconds, action))

    def run_due(self, now: float) -> None:
        due = [u for u in self.undo if u[0] <= now]
        self.undo = [u for u in self.undo if u[0] > now]
        for _, action in sorted(due, key=lambda u: u[0]):
            action()

    def running(self) -> list[str]:
        return sorted(
            s for s, p in self.processes.items()
            if p.poll() is None and s not in self.paused and "+" not in s
        )  # fmt: skip

    def owned_by(self, pid: int) -> list[str]:
        """What ``pid`` holds according to the records (started, not ended)."""
        holding: dict[str, int] = {}
        for entry in read_records(self.out):
            if entry["pid"] != pid:
                continue
            if entry["event"] == "start":
                holding[entry["resource"]] = entry["token"]
            elif entry["event"] in ("end", "refused"):
                holding.pop(entry["resource"], None)
        return sorted(holding)

    def apply(self, kind: str) -> Fault | None:
        rng = self.rng
        running = self.running()
        now = time.time()
        if kind in ("kill", "term", "pause", "twin", "partition", "upgrade", "probe"):
            if len(running) < 2:
                return None  # keep someone working
            slot = rng.choice(running)
        else:
            slot = ""
        size = self.out.stat().st_size if self.out.exists() else 0
        fault = Fault(now, kind, slot, records_at=size)
        if kind in ("kill", "term", "probe"):
            fault.pid = self.processes[slot].pid
            fault.owned = self.owned_by(fault.pid)
            self.stop(slot, signal.SIGKILL if kind != "term" else signal.SIGTERM)
            static = rng.random() < 0.7 or kind == "probe"
            self.later(rng.uniform(0.0, 2.0), lambda: self.start(slot, static=static))
        elif kind == "pause":
            self.send(slot, signal.SIGSTOP)
            self.paused.add(slot)
            frozen_s = SESSION_TIMEOUT_MS / 1000 + rng.uniform(0.5, 3.0)
            self.later(frozen_s, lambda: self._resume(slot))
        elif kind == "twin":
            if not self.static.get(slot) or f"{slot}+twin" in self.processes:
                return None
            self.send(slot, signal.SIGSTOP)
            self.paused.add(slot)
            twin = f"{slot}+twin"
            self.stage[twin] = self.stage[slot]
            self.start(twin)
            self.later(rng.uniform(2.0, 6.0), lambda: self._twin_wins(slot, twin))
        elif kind == "coordinator":
            self.coordinator.kill()
            self.later(rng.uniform(0.3, 3.0), self.coordinator.start)
        elif kind == "partition":
            client = f"workgroup-{slot}"
            if not self.static.get(slot):
                return None
            self.network(lambda proxy: proxy.partition(client))
            self.later(
                rng.uniform(1.0, 8.0), lambda: self.network(lambda proxy: proxy.unpartition(client))
            )
        elif kind == "delay":
            ms, jitter = rng.uniform(20, 400), rng.uniform(0, 200)
            self.network(lambda proxy: proxy.delay(ms, jitter_ms=jitter))
            self.later(rng.uniform(1.0, 5.0), lambda: self.network(lambda proxy: proxy.delay(0)))
        elif kind == "drop":
            p = rng.uniform(0.05, 0.3)
            self.network(lambda proxy: proxy.drop(p))
            self.later(rng.uniform(1.0, 4.0), lambda: self.network(lambda proxy: proxy.drop(0.0)))
        elif kind == "cut":
            self.network(lambda proxy: proxy.cut())
        elif kind == "upgrade":
            behind = [s for s in running if self.stage[s] != self.target_stage]
            if not behind:
                self.target_stage = (self.target_stage + 1) % len(STAGES)
                behind = running
            slot = fault.target = rng.choice(behind)
            fault.pid = self.processes[slot].pid
            self.stop(slot, signal.SIGTERM)
            self.stage[slot] = self.target_stage
            self.start(slot, static=self.static.get(slot, True))
        elif kind == "add":
            if len(self.shards) >= 10:
                return None
            self.shards.append(f"s{self._next_shard}")
            self._next_shard += 1
            self.write_shards()
        elif kind == "remove":
            if len(self.shards) <= 4:
                return None
            # Only from the end: a lease's slot is its key's position in the
            # catalog (workgroup/runtime/slots.py), so removing from the middle
            # would move checkpoints to other shards.
            self.shards.pop()
            self._next_shard -= 1
            self.write_shards()
        self.faults.append(fault)
        with (self.workdir / "faults.jsonl").open("a") as log:
            log.write(json.dumps(dataclasses.asdict(fault)) + "\n")
        return fault

    def wait_recovered(self, fault: Fault, within_s: float) -> None:
        """Quiet until the killed daemon's resources started elsewhere (at most
        ``within_s``; check() judges the time)."""
        deadline = time.monotonic() + within_s
        offset = fault.records_at
        started: set[str] = set()
        while time.monotonic() < deadline:
            self.run_due(time.monotonic())
            with self.out.open("rb") as records:
                records.seek(offset)
                chunk = records.read()
            complete = chunk.rfind(b"\n") + 1
            offset += complete
            for line in chunk[:complete].splitlines():
                with contextlib.suppress(ValueError):
                    e = json.loads(line)
                    if e["event"] == "start" and e["pid"] != fault.pid:
                        started.add(e["resource"])
            if set(fault.owned) <= started:
                return
            time.sleep(0.2)

    def _resume(self, slot: str) -> None:
        self.send(slot, signal.SIGCONT)
        self.paused.discard(slot)

    def _twin_wins(self, slot: str, twin: str) -> None:
        """The frozen original resumes next to its twin, then goes; the twin takes the slot."""
        self._resume(slot)
        original = self.processes[slot]

        def retire() -> None:
            if self.processes.get(slot) is original:
                if original.poll() is None:
                    original.kill()
                original.wait(10)
                self.processes[slot] = self.processes.pop(twin)
            else:  # the slot was restarted meanwhile: the twin goes instead
                self.stop(twin)
                self.processes.pop(twin)

        self.later(3.0, retire)

    def heal(self) -> None:
        """Undo every fault still in force, now; every slot runs."""
        while self.undo:
            pending, self.undo = sorted(self.undo, key=lambda u: u[0]), []
            for _, action in pending:
                action()  # may schedule more (a twin's retirement)
        self.network(lambda proxy: proxy.heal())
        if self.coordinator.process is None or self.coordinator.process.poll() is not None:
            self.coordinator.start()
        for slot in SLOTS:
            if slot not in self.processes or self.processes[slot].poll() is not None:
                self.start(slot)


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a torn line of a killed process
            continue
    return out


def run_chaos(
    workdir: Path,
    seed: int,
    events: int,
    *,
    progress: Callable[[Fault], None] = lambda fault: None,
) -> Result:
    """Start the cluster, apply ``events`` faults, heal, wait until it settles."""
    rng = random.Random(seed)
    cluster = Cluster(workdir, rng)
    try:
        for slot in SLOTS:
            cluster.start(slot)
        time.sleep(3)
        applied = 0
        while applied < events:
            time.sleep(rng.uniform(0.1, 0.9))
            cluster.run_due(time.monotonic())
            kind = rng.choice(FAULTS)
            if kind == "probe":
                # A clean measurement: nothing else in force, then quiet.
                cluster.heal()
                time.sleep(1.0)
            fault = cluster.apply(kind)
            if fault is None:
                continue
            applied += 1
            progress(fault)
            if kind == "probe":
                cluster.wait_recovered(fault, RECOVERY_BOUND_S + 1)
                cluster.run_due(time.monotonic())
        cluster.heal()
        final = settle(cluster.coordinator.bootstrap, set(cluster.shards))
    finally:
        cluster.close()
    return Result(cluster.faults, read_records(cluster.out), final, set(cluster.shards))


@dataclass
class Result:
    faults: list[Fault]
    records: list[dict[str, Any]]
    final: dict[str, set[str]]
    shards: set[str]


def settle(bootstrap: str, shards: set[str], timeout_s: float = 90) -> dict[str, set[str]]:
    """Wait until every resource has exactly one owner; owner sets per resource."""
    expected = {f"shard/{s}" for s in shards} | {"leader/writer"}

    async def owners() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for group, kind in (("chaos.shard", "shard"), ("chaos.writer", "leader")):
            described = await describe_group(bootstrap, group)
            if described.state != "Stable":
                return {}
            for m in described.members:
                for key in (m.assignment or {}).get(kind, []):
                    found.setdefault(f"{kind}/{key}", set()).add(m.member_id)
        return found

    deadline = time.monotonic() + timeout_s
    last: dict[str, set[str]] = {}
    while time.monotonic() < deadline:
        try:
            last = asyncio.run(owners())
        except Exception:
            last = {}
        if set(last) == expected and all(len(o) == 1 for o in last.values()):
            return last
        time.sleep(0.5)
    raise AssertionError(f"the group did not settle after the chaos: {last}")


def check(result: Result) -> dict[str, float]:
    """The guarantees, from the handlers' records; returns figures.

    (a) a resource's lease tokens never go back: every holder that starts
        after another has a newer token, unless it is a zombie (a holder frozen
        between taking its lease and starting its handler, which starts after
        its successor did): then none of its commits is accepted from the
        moment a newer token started;
    (b) no commit with a stale token is accepted: once a newer token's commit
        was accepted, no commit of an older token sent later is (so two live
        owners never both make progress);
    (c) no checkpoint is lost or rolled back: each new holder reads the last
        accepted checkpoint, or a later one an earlier holder sent before it
        started (the coordinator took it, but its holder never saw the answer:
        killed, or cancelled at the end of its lease, while the commit was in
        flight), across coordinator restarts;
    (d) after the chaos every resource is owned by exactly one member;
    (e) after a ``probe`` kill, each resource the killed daemon held runs
        elsewhere within ``RECOVERY_BOUND_S``.
    """
    expected = {f"shard/{s}" for s in result.shards} | {"leader/writer"}
    assert set(result.final) == expected, f"(d) owned {sorted(result.final)}"
    by_resource: dict[str, list[dict[str, Any]]] = {}
    zombies = 0
    for entry in result.records:
        by_resource.setdefault(entry["resource"], []).append(entry)
    for resource, events in by_resource.items():
        starts = sorted((e for e in events if e["event"] == "start"), key=lambda e: e["time"])
        commits = [e for e in events if e["event"] == "commit"]
        for i, start in enumerate(starts):
            newer = [s for s in starts[:i] if s["token"] > start["token"]]
            if not newer:
                continue
            superseded_at = min(s["time"] for s in newer)
            progress = [
                c for c in commits if c["token"] == start["token"] and c["time"] > superseded_at
            ]
            assert not progress, (
                f"(a) {resource}: token {start['token']} (pid {start['pid']}) started after "
                f"token {newer[0]['token']} and committed {progress[0]}"
            )
            zombies += 1
        first_accepted: dict[int, float] = {}
        for c in commits:
            first_accepted[c["token"]] = min(first_accepted.get(c["token"], c["time"]), c["time"])
        for c in commits:
            newer = [t for t, at in first_accepted.items() if t > c["token"] and at < c["sent"]]
            assert not newer, f"(b) {resource}: {c} sent after token {newer[0]} committed"
        attempts = [e for e in events if e["event"] == "sending"]
        for start in starts[1:]:
            older = [c for c in commits if c["token"] < start["token"]]
            if not older:
                continue
            last = max(older, key=lambda c: (c["token"], c["n"]))
            accepted = f"{last['token']}:{last['n']}"
            allowed = {accepted} | {
                f"{a['token']}:{a['n']}"
                for a in attempts
                if a["token"] < start["token"]
                and (a["token"], a["n"]) > (last["token"], last["n"])
                and a["sent"] < start["time"]
            }
            assert start["read"] in allowed, (
                f"(c) {resource}: token {start['token']} read {start['read']}, "
                f"last accepted {accepted}, later ones sent: {sorted(allowed - {accepted})}"
            )
    recoveries = []
    for fault in result.faults:
        if fault.kind != "probe":
            continue
        for resource in fault.owned:
            later = [
                e["time"] for e in by_resource.get(resource, [])
                if e["event"] == "start" and e["pid"] != fault.pid and e["time"] > fault.at
            ]  # fmt: skip
            if resource.startswith("shard/") and resource.split("/")[1] not in result.shards:
                continue
            assert later, f"(e) {resource} never ran again after probe kill at {fault.at}"
            took = min(later) - fault.at
            assert took <= RECOVERY_BOUND_S, f"(e) {resource} unowned {took:.2f} s after a kill"
            recoveries.append(took)
    commits = sum(1 for e in result.records if e["event"] == "commit")
    return {
        "faults": len(result.faults),
        "zombies_fenced": zombies,
        "commits": commits,
        "recoveries": len(recoveries),
        "recovery_max_s": max(recoveries, default=0.0),
        "recovery_median_s": sorted(recoveries)[len(recoveries) // 2] if recoveries else 0.0,
    }
