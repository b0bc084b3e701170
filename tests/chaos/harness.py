"""A seeded chaos run: ``workgroup run`` daemons and a coordinator under random
faults, and the checks of what the handlers recorded.

The daemons reach the coordinator through a :class:`~workgroup.testing.FaultProxy`
(the coordinator advertises the proxy), so network faults hit heartbeats,
rebalances and lease commits alike.  Faults, drawn from one seeded generator:

* ``kill``: SIGKILL a daemon, restart it (static: same instance id; dynamic: none);
* ``term``: SIGTERM a daemon (it finishes its handlers), restart it;
* ``slowstop``: a graceful stop (SIGTERM, sometimes SIGINT) of a daemon some of
  whose handlers finish a slow step, longer than the session, once revoked
  (the app's ``$CHAOS_SLOW``); done in a quiet, settled group, so that nothing
  excuses a successor that starts before the slow handler ended;
* ``pause``: SIGSTOP a daemon past its session timeout, then SIGCONT;
* ``twin``: freeze a static daemon and start another with the same instance id;
  when the original resumes it must find itself fenced;
* ``coordinator``: SIGKILL the coordinator, restart it from its data directory;
* ``partition``: cut one daemon off the coordinator (its Kafka client id), heal it;
* ``delay`` / ``drop``: slow or lose every daemon's traffic for a while;
* ``cut``: close every connection at once;
* ``upgrade``: restart one daemon with the next assignor list of a rolling
  change of assignor (cooperative-sticky, then round-robin, and back);
* ``add`` / ``remove`` / ``reorder``: the shard list changes anywhere: a new
  key or a removed one restored, inserted at any position; a key removed from
  any position; the list shuffled or reversed;
* ``probe``: a SIGKILL in a settled group followed by a quiet period, to
  measure how long the killed daemon's resources stay unowned.

Faults overlap: the undo of one (resume, heal, restart) comes later while others
start.  The harness records every list change (``catalog.jsonl``), the time each
daemon died (SIGKILL, or exit) and each fault's real extent (``Disturbance``),
so that :func:`check` judges the records against what really happened (see its
docstring for the guarantees).
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

from tests.chaos.app import SESSION_TIMEOUT_MS, SHARD_GRACE_MS
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
    "reorder",
    "probe",
    "slowstop",
)
SESSION_S = SESSION_TIMEOUT_MS / 1000
#: A resource of a killed daemon must run elsewhere within this (probe faults):
#: its session, a rebalance, and the handler's first checkpoint read.
RECOVERY_BOUND_S = SESSION_S + 4.0
#: How long a fault's effect on a member may outlast the fault: the member learns
#: that its session ended (a heartbeat, a request that times out), and a rebalance.
AFTERMATH_S = SESSION_S + 1.0
#: A holder whose run overlaps its successor's is a zombie only if a fault hit it
#: (frozen, cut off) from this long before the successor started (its session
#: expired meanwhile) to the overlap's end.
LOOKBACK_S = SESSION_S + 1.0
#: Quiet before a slow graceful stop: no fault's aftermath reaches back from the
#: successor's start to excuse the stopped daemon.
SLOWSTOP_QUIET_S = AFTERMATH_S + LOOKBACK_S
#: The graceful stop of a daemon with slow handlers must end within this
#: (the slowest handler's grace period, a rebalance) before it is killed.
STOP_WAIT_S = SHARD_GRACE_MS / 1000 + 10.0
#: Shard-list size limits of the ``add`` / ``remove`` faults.
MIN_SHARDS, MAX_SHARDS = 4, 10
#: Resources held by one process at a time (standbys aside).
EXCLUSIVE_KINDS = ("shard/", "leader/")


@dataclass
class Fault:
    at: float
    kind: str
    target: str = ""
    pid: int | None = None
    owned: list[str] = field(default_factory=list)
    #: Size of the records file when the fault was applied.
    records_at: int = 0
    #: slowstop: the shards whose handlers were slow, and the signal sent.
    slow: list[str] = field(default_factory=list)
    signal: str = ""


@dataclass
class Disturbance:
    """A fault's real extent: whom it hit (one process, every process of an
    instance id, or every daemon) from ``start`` until ``end`` (``None``: in force)."""

    kind: str
    start: float
    end: float | None = None
    instance: str = ""
    pid: int | None = None

    def hits(self, pid: int, instance: str, since: float, until: float) -> bool:
        """Whether it hit process ``pid`` of ``instance`` between ``since`` and
        ``until``, its aftermath (``AFTERMATH_S``) included."""
        if self.pid is not None and self.pid != pid:
            return False
        if self.instance and self.instance != instance:
            return False
        end = float("inf") if self.end is None else self.end
        return self.start <= until and end + AFTERMATH_S >= since


def change_list(shards: list[str], removed: list[str], kind: str, rng: random.Random) -> bool:
    """Change ``shards`` in place as fault ``kind`` does (``add``: a new key, or
    one of ``removed`` restored, at any position; ``remove``: a key from any
    position, kept in ``removed``; ``reorder``: reversed or shuffled); False if
    ``kind`` does not apply (the list is at its size limit)."""
    if kind == "add":
        if len(shards) >= MAX_SHARDS:
            return False
        if removed and rng.random() < 0.5:
            key = removed.pop(rng.randrange(len(removed)))
        else:
            key = f"s{max((int(k[1:]) for k in shards + removed), default=-1) + 1}"
        shards.insert(rng.randint(0, len(shards)), key)
    elif kind == "remove":
        if len(shards) <= MIN_SHARDS:
            return False
        removed.append(shards.pop(rng.randrange(len(shards))))
    elif rng.random() < 0.5:
        shards.reverse()
    else:
        rng.shuffle(shards)
    return True


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
            # Links accepted while closing: end their tasks before the loop goes
            # (a link's tasks may start others as they end: a few rounds).
            for _ in range(5):
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                if not tasks:
                    break
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
        # A loaded machine can take long to start a Python process.
        deadline = time.monotonic() + 60
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
        self.slow_file = workdir / "slow.txt"
        self.shards = [f"s{i}" for i in range(6)]
        #: Keys removed from the list, which an ``add`` may restore.
        self.removed: list[str] = []
        #: (when, the full list): every version of the shard list.
        self.catalog: list[tuple[float, list[str]]] = []
        self.write_shards()
        proxy_port, coordinator_port = free_port(), free_port()
        self.coordinator = Coordinator(workdir, coordinator_port, f"127.0.0.1:{proxy_port}")
        self.coordinator.start()
        self.net = ProxyThread(self.coordinator.bootstrap, proxy_port, rng.randrange(1 << 30))
        self.bootstrap = self.net.proxy.bootstrap
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        #: Every daemon started, so that none outlives the run.
        self.every_process: list[subprocess.Popen[bytes]] = []
        #: pid -> instance id (a twin's is its original's).
        self.instances: dict[int, str] = {}
        #: pid -> when it died: SIGKILL sent, or its exit seen.
        self.deaths: dict[int, float] = {}
        self.disturbances: list[Disturbance] = []
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
        # After the replace: a handler that starts after this time may see the new list.
        self.catalog.append((time.time(), list(self.shards)))
        with (self.workdir / "catalog.jsonl").open("a") as log:
            log.write(json.dumps({"time": self.catalog[-1][0], "shards": self.shards}) + "\n")

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
            "CHAOS_SLOW": str(self.slow_file),
            "CHAOS_ASSIGNORS": STAGES[stage],
            # Every other process warms up: planned moves to it are staged, to the
            # others plain, in the same group.
            "CHAOS_WARM_UP": "1" if self.started % 2 == 0 else "0",
        }
        with (self.workdir / f"daemon-{self.started}-{slot}.log").open("wb") as log:
            self.processes[slot] = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        self.every_process.append(self.processes[slot])
        self.instances[self.processes[slot].pid] = instance
        self.static[slot] = static
        self.started += 1

    def send(self, slot: str, signum: int) -> None:
        process = self.processes.get(slot)
        if process is not None and process.poll() is None:
            if signum == signal.SIGKILL:
                self.deaths.setdefault(process.pid, time.time())
            os.kill(process.pid, signum)

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            self.deaths.setdefault(process.pid, time.time())
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
        process.wait(10)
        self.reap()

    def reap(self) -> None:
        """Note the death of every daemon that exited (at the latest now)."""
        now = time.time()
        for process in self.every_process:
            if process.poll() is not None:
                self.deaths.setdefault(process.pid, now)

    def stop(self, slot: str, signum: int = signal.SIGKILL, wait_s: float = 15.0) -> None:
        self.send(slot, signal.SIGCONT)
        self.send(slot, signum)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.processes[slot].wait(wait_s)
        self.reap()
        self.kill(self.processes[slot])
        self.paused.discard(slot)

    def close(self) -> None:
        for process in self.every_process:
            self.kill(process)
        self.end_disturbances()
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
        self.reap()

    def disturb(self, kind: str, *, instance: str = "", pid: int | None = None) -> Disturbance:
        """A fault starts to hit a process, or an instance id's, or every daemon."""
        disturbance = Disturbance(kind, time.time(), instance=instance, pid=pid)
        self.disturbances.append(disturbance)
        return disturbance

    @staticmethod
    def ended(disturbance: Disturbance) -> None:
        if disturbance.end is None:
            disturbance.end = time.time()

    def end_disturbances(self) -> None:
        for disturbance in self.disturbances:
            self.ended(disturbance)

    def quiet_since(self) -> float:
        """When the last fault that hit anyone ended (``inf``: one still in force)."""
        ends = [d.end for d in self.disturbances]
        if any(end is None for end in ends):
            return float("inf")
        return max((end for end in ends if end is not None), default=0.0)

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
        if kind in ("kill", "term", "pause", "twin", "partition", "upgrade", "probe", "slowstop"):
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
        elif kind == "slowstop":
            holding = {s: self.owned_by(self.processes[s].pid) for s in running}
            with_shards = [s for s in running if any(r.startswith("shard/") for r in holding[s])]
            if not with_shards:
                return None
            slot = fault.target = rng.choice(with_shards)
            fault.pid = self.processes[slot].pid
            fault.owned = holding[slot]
            shards = [r.split("/", 1)[1] for r in fault.owned if r.startswith("shard/")]
            fault.slow = sorted(rng.sample(shards, (len(shards) + 1) // 2))
            self.slow_file.write_text("\n".join(fault.slow) + "\n")
            signum = signal.SIGINT if rng.random() < 0.3 else signal.SIGTERM
            fault.signal = signum.name
            self.stop(slot, signum, wait_s=STOP_WAIT_S)
            self.slow_file.write_text("")
            static = rng.random() < 0.7
            self.later(rng.uniform(0.0, 2.0), lambda: self.start(slot, static=static))
        elif kind == "pause":
            self.send(slot, signal.SIGSTOP)
            self.paused.add(slot)
            frozen = self.disturb(kind, pid=self.processes[slot].pid)
            frozen_s = SESSION_S + rng.uniform(0.5, 3.0)
            self.later(frozen_s, lambda: self._resume(slot, frozen))
        elif kind == "twin":
            if not self.static.get(slot) or f"{slot}+twin" in self.processes:
                return None
            self.send(slot, signal.SIGSTOP)
            self.paused.add(slot)
            # The original is frozen, then fenced, until it is retired.
            frozen = self.disturb(kind, pid=self.processes[slot].pid)
            twin = f"{slot}+twin"
            self.stage[twin] = self.stage[slot]
            self.start(twin)
            self.later(rng.uniform(2.0, 6.0), lambda: self._twin_wins(slot, twin, frozen))
        elif kind == "coordinator":
            self.coordinator.kill()
            down = self.disturb(kind)
            self.later(rng.uniform(0.3, 3.0), lambda: self._restart_coordinator(down))
        elif kind == "partition":
            client = f"workgroup-{slot}"
            if not self.static.get(slot):
                return None
            self.network(lambda proxy: proxy.partition(client))
            cut_off = self.disturb(kind, instance=slot)

            def heal_partition() -> None:
                self.network(lambda proxy: proxy.unpartition(client))
                self.ended(cut_off)

            self.later(rng.uniform(1.0, 8.0), heal_partition)
        elif kind == "delay":
            ms, jitter = rng.uniform(20, 400), rng.uniform(0, 200)
            self.network(lambda proxy: proxy.delay(ms, jitter_ms=jitter))
            slowed = self.disturb(kind)
            self.later(
                rng.uniform(1.0, 5.0),
                lambda: (self.network(lambda proxy: proxy.delay(0)), self.ended(slowed)),
            )
        elif kind == "drop":
            p = rng.uniform(0.05, 0.3)
            self.network(lambda proxy: proxy.drop(p))
            lossy = self.disturb(kind)
            self.later(
                rng.uniform(1.0, 4.0),
                lambda: (self.network(lambda proxy: proxy.drop(0.0)), self.ended(lossy)),
            )
        elif kind == "cut":
            self.network(lambda proxy: proxy.cut())
            self.ended(self.disturb(kind))
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
        elif kind in ("add", "remove", "reorder") and not self.change_list(kind):
            return None
        self.faults.append(fault)
        with (self.workdir / "faults.jsonl").open("a") as log:
            log.write(json.dumps(dataclasses.asdict(fault)) + "\n")
        return fault

    def change_list(self, kind: str) -> bool:
        """Change the shard list anywhere; False if ``kind`` does not apply now."""
        if not change_list(self.shards, self.removed, kind, self.rng):
            return False
        self.write_shards()
        return True

    def settle(self, timeout_s: float = 30.0) -> None:
        """Until the group is stable, each resource owned once (undo actions run meanwhile)."""
        settle(self.coordinator.bootstrap, set(self.shards), timeout_s)

    def quiet(self, seconds: float) -> None:
        """Sleep until no fault has hit anyone for ``seconds``."""
        while (wait := self.quiet_since() + seconds - time.time()) > 0:
            time.sleep(min(wait, 1.0))
            self.run_due(time.monotonic())

    def wait_recovered(self, fault: Fault, within_s: float) -> None:
        """Quiet until the stopped daemon's resources started elsewhere (at most
        ``within_s``; check() judges the time)."""
        deadline = time.monotonic() + within_s
        offset = fault.records_at
        started: set[str] = set()
        listed = {f"shard/{s}" for s in self.shards} | {"leader/writer"}
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
            if set(fault.owned) & listed <= started:
                return
            time.sleep(0.2)

    def _resume(self, slot: str, frozen: Disturbance) -> None:
        self.send(slot, signal.SIGCONT)
        self.paused.discard(slot)
        self.ended(frozen)

    def _restart_coordinator(self, down: Disturbance) -> None:
        self.coordinator.start()
        self.ended(down)

    def _twin_wins(self, slot: str, twin: str, frozen: Disturbance) -> None:
        """The frozen original resumes next to its twin, then goes; the twin takes the slot."""
        self.send(slot, signal.SIGCONT)
        self.paused.discard(slot)
        original = self.processes[slot]

        def retire() -> None:
            if self.processes.get(slot) is original:
                self.kill(original)
                self.processes[slot] = self.processes.pop(twin)
            else:  # the slot was restarted meanwhile: the twin goes instead
                self.stop(twin)
                self.processes.pop(twin)
            self.ended(frozen)

        self.later(3.0, retire)

    def save(self) -> None:
        """What the records do not say, for :func:`load_result`."""
        facts = {
            "shards": self.shards,
            "deaths": self.deaths,
            "instances": self.instances,
            "disturbances": [dataclasses.asdict(d) for d in self.disturbances],
        }
        (self.workdir / "run.json").write_text(json.dumps(facts))

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
        self.end_disturbances()
        self.reap()


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
            if applied == events // 2 and all(f.kind != "slowstop" for f in cluster.faults):
                kind = "slowstop"  # every run has one
            if kind in ("probe", "slowstop"):
                # A clean measurement: nothing else in force, the group settled
                # (no rebalance left hanging by an earlier fault), then quiet.
                cluster.heal()
                cluster.settle()
                cluster.quiet(SLOWSTOP_QUIET_S if kind == "slowstop" else 1.0)
            fault = cluster.apply(kind)
            if fault is None:
                continue
            applied += 1
            progress(fault)
            if kind in ("probe", "slowstop"):
                cluster.wait_recovered(fault, RECOVERY_BOUND_S + 1)
                cluster.run_due(time.monotonic())
        cluster.heal()
        final = settle(cluster.coordinator.bootstrap, set(cluster.shards))
    finally:
        cluster.close()
        cluster.save()
    return load_result(workdir, final)


def load_result(workdir: Path, final: dict[str, set[str]] | None = None) -> Result:
    """A run's result from its directory (``final``: the owners after the chaos;
    by default what was listed, to check a run's records again)."""
    facts = json.loads((workdir / "run.json").read_text())
    shards = set(facts["shards"])
    faults_log, catalog_log = workdir / "faults.jsonl", workdir / "catalog.jsonl"
    lines = faults_log.read_text().splitlines() if faults_log.exists() else []
    faults = [Fault(**json.loads(line)) for line in lines]
    versions = map(json.loads, catalog_log.read_text().splitlines())
    catalog = [(version["time"], version["shards"]) for version in versions]
    if final is None:
        final = {r: {"?"} for r in {f"shard/{s}" for s in shards} | {"leader/writer"}}
    return Result(
        faults,
        read_records(workdir / "records.jsonl"),
        final,
        shards,
        catalog=catalog,
        deaths={int(pid): at for pid, at in facts["deaths"].items()},
        disturbances=[Disturbance(**d) for d in facts["disturbances"]],
        instances={int(pid): name for pid, name in facts["instances"].items()},
    )


@dataclass
class Result:
    faults: list[Fault]
    records: list[dict[str, Any]]
    final: dict[str, set[str]]
    shards: set[str]
    #: (when, the full list): every version of the shard list, the first at the start.
    catalog: list[tuple[float, list[str]]] = field(default_factory=list)
    #: pid -> when it died (SIGKILL sent, or its exit seen).
    deaths: dict[int, float] = field(default_factory=dict)
    disturbances: list[Disturbance] = field(default_factory=list)
    #: pid -> instance id.
    instances: dict[int, str] = field(default_factory=dict)

    def listed(self, resource: str, at: float) -> bool:
        """Whether ``resource`` was in its list at ``at`` (a leader always is)."""
        if not resource.startswith("shard/"):
            return True
        versions = [shards for when, shards in self.catalog if when <= at]
        if not versions:  # hand-made records without a catalog: the final list
            return resource.split("/", 1)[1] in self.shards
        return resource.split("/", 1)[1] in versions[-1]

    def delisted_between(self, resource: str, since: float, until: float) -> bool:
        """Whether ``resource`` was out of its list at some time in [since, until]."""
        if not self.listed(resource, since):
            return True
        return any(
            since < when <= until and not self.listed(resource, when) for when, _ in self.catalog
        )

    def disturbed(self, pid: int, since: float, until: float) -> Disturbance | None:
        """A fault that hit process ``pid`` between ``since`` and ``until``: one
        aimed at it (frozen) before one at its instance id, before one at all."""
        instance = self.instances.get(pid, "")
        hits = [d for d in self.disturbances if d.hits(pid, instance, since, until)]
        hits.sort(key=lambda d: (d.pid is None, not d.instance))
        return hits[0] if hits else None


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
    raise AssertionError(f"(d) the group did not settle within {timeout_s:.0f} s: {last}")


@dataclass
class Run:
    """One handler run: from entering the handler (its lease taken) to its end."""

    resource: str
    pid: int
    token: int
    entered: float
    end: float
    start: dict[str, Any]


def handler_runs(result: Result) -> dict[str, list[Run]]:
    """Every handler run per resource, by entry time.  A run without an ``end``
    record ends when its process died (killed, or exited), else never."""
    runs: dict[str, list[Run]] = {}
    ends: dict[tuple[str, int, int], list[float]] = {}
    for e in result.records:
        if e["event"] == "end":
            ends.setdefault((e["resource"], e["pid"], e["token"]), []).append(e["time"])
    for e in sorted(result.records, key=lambda e: e["time"]):
        if e["event"] != "start":
            continue
        entered = e.get("entered", e["time"])
        mine = ends.get((e["resource"], e["pid"], e["token"]), [])
        after = [t for t in mine if t >= entered]
        if after:
            end = min(after)
            mine.remove(end)
        else:
            end = result.deaths.get(e["pid"], float("inf"))
        runs.setdefault(e["resource"], []).append(
            Run(e["resource"], e["pid"], e["token"], entered, end, e)
        )
    for resource_runs in runs.values():
        resource_runs.sort(key=lambda r: r.entered)
    return runs


def named_key(value: str) -> str | None:
    """The key a checkpoint ``"<key>:<token>:<n>"`` names (``None``: unreadable)."""
    parts = value.rsplit(":", 2)
    return parts[0] if len(parts) == 3 else None


def check(result: Result) -> dict[str, float]:
    """The guarantees, from the handlers' records; returns figures, or raises
    AssertionError listing every violation.

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
        flight), across coordinator restarts and list changes;
    (d) after the chaos every resource is owned by exactly one member;
    (e) after a ``probe`` kill (in a settled group), each resource the killed
        daemon held runs elsewhere within ``RECOVERY_BOUND_S``: counted only
        for a resource in the list from the kill until it runs again, and only
        if no other fault overlapped that time;
    (f) no holder reads another key's checkpoint;
    (g) no two keys share a slot: a slot used by one key is never used by
        another while the first is in the list;
    (h) per resource, tokens strictly rise across handler starts, except for a
        zombie (as in (a)) whose process a fault hit (frozen, cut off) between
        its successor's start less ``LOOKBACK_S`` and its own start;
    (i) no two processes run an exclusive resource's handler at once (runs from
        entering the handler to its end, or the process's death), except a
        zombie: the older token's process was hit by a fault from the newer
        run's start less ``LOOKBACK_S`` to the overlap's end.  A graceful stop
        (SIGTERM, SIGINT) is never an excuse.
    """
    __tracebackhide__ = True  # the violations say it all, not this function's source
    violations: list[str] = []
    expected = {f"shard/{s}" for s in result.shards} | {"leader/writer"}
    if set(result.final) != expected:
        violations.append(f"(d) owned {sorted(result.final)}, listed {sorted(expected)}")
    by_resource: dict[str, list[dict[str, Any]]] = {}
    zombies = 0
    for entry in result.records:
        by_resource.setdefault(entry["resource"], []).append(entry)
    for resource, events in by_resource.items():
        key = resource.split("/", 1)[1]
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
            if progress:
                violations.append(
                    f"(a) {resource}: token {start['token']} (pid {start['pid']}) started after "
                    f"token {newer[0]['token']} and committed {progress[0]}"
                )
            zombies += 1
        first_accepted: dict[int, float] = {}
        for c in commits:
            first_accepted[c["token"]] = min(first_accepted.get(c["token"], c["time"]), c["time"])
        for c in commits:
            stale = [t for t, at in first_accepted.items() if t > c["token"] and at < c["sent"]]
            if stale:
                violations.append(f"(b) {resource}: {c} sent after token {stale[0]} committed")
        attempts = [e for e in events if e["event"] == "sending"]
        for start in starts[1:]:
            older = [c for c in commits if c["token"] < start["token"]]
            if not older:
                continue
            last = max(older, key=lambda c: (c["token"], c["n"]))
            accepted = f"{key}:{last['token']}:{last['n']}"
            allowed = {accepted} | {
                f"{key}:{a['token']}:{a['n']}"
                for a in attempts
                if a["token"] < start["token"]
                and (a["token"], a["n"]) > (last["token"], last["n"])
                and a["sent"] < start["time"]
            }
            if start["read"] not in allowed:
                violations.append(
                    f"(c) {resource}: token {start['token']} read {start['read']}, "
                    f"last accepted {accepted}, later ones sent: {sorted(allowed - {accepted})}"
                )
        for start in starts:
            read = start["read"]
            if read is not None and named_key(read) != key:
                violations.append(
                    f"(f) {resource}: token {start['token']} (pid {start['pid']}) read "
                    f"{read!r}, another key's checkpoint, from {start.get('slot')}"
                )
    violations += slot_violations(result)
    runs = handler_runs(result)
    violations += token_violations(result, runs)
    violations += overlap_violations(result, runs)
    recoveries, probes_skipped = [], 0
    for fault in result.faults:
        if fault.kind != "probe":
            continue
        for resource in fault.owned:
            later = [
                e["time"] for e in by_resource.get(resource, [])
                if e["event"] == "start" and e["pid"] != fault.pid and e["time"] > fault.at
            ]  # fmt: skip
            if not later:
                if result.listed(resource, float("inf")):
                    violations.append(
                        f"(e) {resource} never ran again after probe kill at {fault.at}"
                    )
                continue
            took = min(later) - fault.at
            if result.delisted_between(resource, fault.at, fault.at + took):
                probes_skipped += 1  # out of the list meanwhile: nothing to recover
                continue
            overlapping = [
                d for d in result.disturbances
                if d.start <= fault.at + took and (d.end is None or d.end >= fault.at)
            ]  # fmt: skip
            if overlapping:
                probes_skipped += 1
                continue
            if took > RECOVERY_BOUND_S:
                violations.append(f"(e) {resource} unowned {took:.2f} s after a kill")
            recoveries.append(took)
    if violations:
        raise AssertionError(summary(violations))
    commits = sum(1 for e in result.records if e["event"] == "commit")
    return {
        "faults": len(result.faults),
        "zombies_fenced": zombies,
        "commits": commits,
        "handler_runs": sum(len(r) for r in runs.values()),
        "list_changes": max(len(result.catalog) - 1, 0),
        "slow_stops": sum(1 for f in result.faults if f.kind == "slowstop"),
        "recoveries": len(recoveries),
        "recoveries_not_bounded": probes_skipped,
        "recovery_max_s": max(recoveries, default=0.0),
        "recovery_median_s": sorted(recoveries)[len(recoveries) // 2] if recoveries else 0.0,
    }


def summary(violations: list[str], per_rule: int = 4) -> str:
    """How many violations of each rule, and the first few of each."""
    by_rule: dict[str, list[str]] = {}
    for violation in violations:
        by_rule.setdefault(violation[:3], []).append(violation)
    lines = [
        f"{len(violations)} violations: "
        + ", ".join(f"{rule} {len(found)}" for rule, found in sorted(by_rule.items()))
    ]
    for _, found in sorted(by_rule.items()):
        lines += found[:per_rule]
        if len(found) > per_rule:
            lines.append(f"    ... and {len(found) - per_rule} more")
    return "\n".join(lines)


def slot_violations(result: Result) -> list[str]:
    """(g): a slot used by two keys while both are listed."""
    users: dict[str, dict[str, list[float]]] = {}
    for e in result.records:
        if e["event"] == "start" and e.get("slot") is not None:
            entered = e.get("entered", e["time"])
            users.setdefault(e["slot"], {}).setdefault(e["resource"], []).append(entered)
    violations = []
    for slot, by_resource in users.items():
        for resource, times in by_resource.items():
            for other in by_resource:
                if other == resource:
                    continue
                shared = [t for t in times if result.listed(other, t)]
                if shared:
                    violations.append(
                        f"(g) {slot}: {resource} started on it at {shared[0]:.2f}, while "
                        f"{other}, which uses it too, was listed"
                    )
    return violations


def token_violations(result: Result, runs: dict[str, list[Run]]) -> list[str]:
    """(h): tokens rise across starts, zombies aside."""
    violations = []
    for resource, resource_runs in runs.items():
        for i, run in enumerate(resource_runs):
            earlier = [
                r for r in resource_runs[:i]
                if r.token >= run.token and (r.pid, r.token) != (run.pid, run.token)
            ]  # fmt: skip
            if not earlier:
                continue
            since = min(r.entered for r in earlier) - LOOKBACK_S
            if result.disturbed(run.pid, since, run.entered) is None:
                violations.append(
                    f"(h) {resource}: token {run.token} (pid {run.pid}) started at "
                    f"{run.entered:.2f}, after token {earlier[0].token} (pid {earlier[0].pid}) "
                    f"at {earlier[0].entered:.2f}, and no fault hit it"
                )
    return violations


def overlap_violations(result: Result, runs: dict[str, list[Run]]) -> list[str]:
    """(i): two processes' runs of an exclusive resource overlap, zombies aside."""
    graceful = {
        f.pid: f"{f.signal or 'SIGTERM'} at {f.at:.2f}"
        for f in result.faults
        if f.kind in ("term", "upgrade", "slowstop") and f.pid is not None
    }
    violations = []
    for resource, resource_runs in runs.items():
        if not resource.startswith(EXCLUSIVE_KINDS):
            continue
        for i, later in enumerate(resource_runs):
            for earlier in resource_runs[:i]:
                if earlier.pid == later.pid or earlier.end <= later.entered:
                    continue
                old, new = (earlier, later) if earlier.token <= later.token else (later, earlier)
                overlap_end = min(earlier.end, later.end)
                since = new.entered - LOOKBACK_S
                if result.disturbed(old.pid, since, overlap_end) is not None:
                    continue
                how = graceful.get(old.pid, "no fault hit it")
                violations.append(
                    f"(i) {resource}: pid {old.pid} (token {old.token}) ran until "
                    f"{old.end:.2f} while pid {new.pid} (token {new.token}) ran from "
                    f"{new.entered:.2f}: overlap {overlap_end - later.entered:.2f} s ({how})"
                )
    return violations
