"""Processes of a sharded-ETL run: the coordinator and ``workgroup run`` daemons.

Shared by the demo, the end-to-end tests and the benchmark.  Each daemon runs in
a process group of its own, so that its JVM (a child of the Python process)
receives the same signals: a SIGKILL or a SIGSTOP reaches the whole daemon, as a
crashed or frozen machine would.  :meth:`EtlCluster.terminate` signals the
daemon alone, as a service manager does.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from examples.sharded_etl import layout
from workgroup.runtime.events import read_events
from workgroup.testing.signals import interrupts_deferred

ROOT = Path(__file__).resolve().parents[2]
APP = "examples.sharded_etl.app:app"
#: A daemon exits when no coordinator answered for this long (the demo's is gone).
UNREACHABLE_TIMEOUT_MS = 30_000


@dataclass
class Daemon:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    started_at: float
    #: Stopped or killed on purpose (its exit is not a crash).
    expected_exit: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class Mark:
    """Something the run did to its daemons, for the report."""

    time: float
    what: str  # "start", "kill", "stop", "pause", "resume"
    daemon: str
    pid: int


@dataclass
class EtlCluster:
    """Daemons of one run, sharing a data directory and a bootstrap address."""

    data: Path
    bootstrap: str
    shards: int = 4
    session_ms: int = 6_000
    extra_env: dict[str, str] = field(default_factory=dict)
    daemons: dict[str, Daemon] = field(default_factory=dict)
    history: list[Daemon] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    #: Called with what is awaited on each poll of :meth:`wait_for` (progress display).
    on_poll: Callable[[str], None] | None = None
    _batch_cache: dict[Path, tuple[int, dict[str, Any] | None]] = field(default_factory=dict)

    @property
    def events_dir(self) -> Path:
        return self.data / "events"

    @property
    def logs_dir(self) -> Path:
        return self.data / "logs"

    def start(self, name: str, *extra: str) -> Daemon:
        """Start daemon ``name`` (a static member: ``--instance-id name``)."""
        self.events_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        log = self.logs_dir / f"{name}-{len(self.history)}.log"
        argv = [
            sys.executable, "-m", "workgroup", "run", APP,
            "--bootstrap", self.bootstrap, "--instance-id", name,
            "--event-log", str(self.events_dir / f"{name}.jsonl"),
            "--log-format", "json", "--grace-ms", "10000",
            # Orphaned (the demo killed with SIGKILL): exit once the coordinator is gone.
            "--unreachable-timeout-ms", str(UNREACHABLE_TIMEOUT_MS),
        ]  # fmt: skip
        env = {
            **os.environ,
            "ETL_DATA": str(self.data),
            "ETL_SHARDS": str(self.shards),
            "ETL_SESSION_MS": str(self.session_ms),
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            **self.extra_env,
        }
        # Recorded before an interrupt is let through: kill_all() stops what history has.
        with log.open("wb") as sink, interrupts_deferred():
            process = subprocess.Popen(
                [*argv, *extra],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
            daemon = Daemon(name, process, log, time.time())
            self.daemons[name] = daemon
            self.history.append(daemon)
        self.marks.append(Mark(daemon.started_at, "start", name, process.pid))
        return daemon

    def signal(self, name: str, sig: signal.Signals, what: str) -> Daemon:
        daemon = self.daemons[name]
        if what in ("kill", "stop"):
            daemon.expected_exit = True
        self.marks.append(Mark(time.time(), what, name, daemon.pid))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, sig)
        return daemon

    def kill(self, name: str) -> Daemon:
        daemon = self.signal(name, signal.SIGKILL, "kill")
        daemon.process.wait()
        return daemon

    def terminate(self, name: str) -> Daemon:
        """SIGTERM to the daemon alone, without waiting: as a service manager stops
        it (systemd's ``KillMode=mixed`` in ``deploy/``, a container's PID 1), its
        JVM keeps running the queries it hands over until the daemon stops it."""
        daemon = self.daemons[name]
        daemon.expected_exit = True
        self.marks.append(Mark(time.time(), "stop", name, daemon.pid))
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon.pid, signal.SIGTERM)
        return daemon

    def stop(self, name: str, timeout_s: float = 30.0) -> Daemon:
        """SIGTERM to the daemon's whole process group (its JVM included), as
        Ctrl-C ends a run: the demo's and the tests' way to end a daemon."""
        daemon = self.signal(name, signal.SIGTERM, "stop")
        try:
            daemon.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill(name)
        return daemon

    def pause(self, name: str) -> Daemon:
        return self.signal(name, signal.SIGSTOP, "pause")

    def resume(self, name: str) -> Daemon:
        return self.signal(name, signal.SIGCONT, "resume")

    def stop_all(self) -> None:
        for name, daemon in list(self.daemons.items()):
            if daemon.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(daemon.pid, signal.SIGCONT)
                self.stop(name)

    def kill_all(self) -> None:
        for daemon in self.history:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(daemon.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.process.wait(5)

    # --- what the daemons did ----------------------------------------------------

    def events(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        if self.events_dir.exists():
            for path in sorted(self.events_dir.glob("*.jsonl")):
                found.extend(read_events(path))
        return sorted(found, key=lambda e: e["time"])

    def owners(self, group: str = "etl.shard") -> dict[str, tuple[str, int, float]]:
        """``key -> (member, token, since)`` of the newest acquisition of each resource."""
        owners: dict[str, tuple[str, int, float]] = {}
        for event in self.events():
            if event["group"] == group and event["event"] == "acquired":
                owners[str(event["key"])] = (event["member"], event["token"], event["time"])
        return owners

    def batches(self) -> list[dict[str, Any]]:
        """Every committed output batch: shard, batch, token, time written, events."""
        import pyarrow.parquet as pq

        found = []
        for shard in layout.shard_names(self.shards):
            for path in layout.output_dir(self.data, shard).glob("batch-*.parquet"):
                try:
                    stamp = path.stat().st_mtime_ns
                    cached = self._batch_cache.get(path)
                    if cached is None or cached[0] != stamp:
                        columns = ["batch", "token", "written_at", "events"]
                        rows = pq.read_table(path, columns=columns).to_pylist()
                        summary = None
                        if rows:
                            summary = {
                                "shard": shard,
                                "batch": rows[0]["batch"],
                                "token": rows[0]["token"],
                                "time": rows[0]["written_at"],
                                "events": sum(r["events"] for r in rows),
                            }
                        cached = self._batch_cache[path] = (stamp, summary)
                except OSError:  # replaced while being read: the next poll sees it
                    continue
                if cached[1] is not None:
                    found.append(cached[1])
        return sorted(found, key=lambda b: b["time"])

    def processed(self) -> int:
        """Events in every committed output batch."""
        return sum(b["events"] for b in self.batches())

    def busiest(self) -> str:
        """The daemon that owns the most shards (the first by name on a tie)."""
        counts: dict[str, int] = {}
        for member, *_ in self.owners().values():
            counts[member] = counts.get(member, 0) + 1
        return max(sorted(counts), key=lambda m: counts[m])

    def wait_drained(self, written: int, timeout_s: float) -> None:
        """Wait until all ``written`` events are in the output and in the summary."""
        from examples.sharded_etl.summary import current

        self.wait_for("every event to be processed", lambda: self.processed() >= written, timeout_s)
        self.wait_for(
            "the publisher's summary to include every event",
            lambda: current(self.data).get("events") == written,
            timeout_s,
        )

    def daemon_log_events(self, event_name: str) -> Iterator[dict[str, Any]]:
        """Structured log events named ``event_name`` from every daemon's log."""
        for daemon in self.history:
            if not daemon.log.exists():
                continue
            for line in daemon.log.read_text(errors="replace").splitlines():
                if line.startswith("{") and f'"{event_name}"' in line:
                    with contextlib.suppress(json.JSONDecodeError):
                        yield {**json.loads(line), "daemon": daemon.name}

    def wait_for(
        self, what: str, condition: Callable[[], Any], timeout_s: float, poll_s: float = 0.25
    ) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            crashed = [d for d in self.daemons.values() if not d.alive() and not d.expected_exit]
            if crashed:
                deadline = 0.0  # a daemon exited by itself: say so now, with its log
                break
            result = condition()
            if result:
                return result
            if self.on_poll is not None:
                self.on_poll(what)
            time.sleep(poll_s)
        tails = "\n".join(
            f"--- {d.name} (pid {d.pid}) ---\n" + d.log.read_text(errors="replace")[-1500:]
            for d in self.history
            if d.log.exists()
        )
        if crashed:
            names = ", ".join(f"{d.name} (exit {d.process.returncode})" for d in crashed)
            raise TimeoutError(f"daemon(s) {names} exited while waiting for {what}\n{tails}")
        raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}\n{tails}")

    def committing(self, shard: str, after: float, token: int | None = None) -> bool:
        """A batch of ``shard`` was written after ``after`` (by ``token``, if given)."""
        return any(
            b["shard"] == shard and b["time"] > after and (token is None or b["token"] == token)
            for b in self.batches()
        )

    def all_committing(self, after: float, *, owners_only: bool = False) -> bool:
        """Every shard wrote a batch after ``after`` (``owners_only``: with the token
        of its newest acquisition, not a batch its previous owner finished)."""
        batches = self.batches()
        owners = self.owners() if owners_only else {}
        return all(
            any(
                b["shard"] == shard
                and b["time"] > after
                and (not owners_only or (shard in owners and b["token"] == owners[shard][1]))
                for b in batches
            )
            for shard in layout.shard_names(self.shards)
        )
