"""``workgroup member`` processes for end-to-end tests.

A :class:`MemberProcess` runs ``python -m workgroup member ...``, collects the
JSON event lines it prints (in a reader thread) and records what the test did
to it (kill time, SIGSTOP/SIGCONT intervals) so that the ownership checker can
be given every log afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from workgroup.testing.ownership import MemberLog
from workgroup.testing.servers import free_port as free_port  # the tests import it from here
from workgroup.testing.servers import run_tansu

Event = dict[str, Any]
Resource = tuple[str, Any]


class MemberProcess:
    """One ``workgroup member`` process and its event log."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        *args: str,
        resources: Sequence[str] = ("shard=12",),
        session_timeout_ms: int = 3000,
        heartbeat_interval_ms: int = 300,
        rebalance_timeout_ms: int = 10_000,
        instance_id: str | None = None,
        log_level: str = "info",
    ) -> None:
        self.name = name
        self.instance_id = instance_id
        argv = [
            sys.executable,
            "-m",
            "workgroup",
            "member",
            "--bootstrap",
            bootstrap,
            "--group",
            group,
            "--session-timeout-ms",
            str(session_timeout_ms),
            "--heartbeat-interval-ms",
            str(heartbeat_interval_ms),
            "--rebalance-timeout-ms",
            str(rebalance_timeout_ms),
            "--log-level",
            log_level,
            *(a for r in resources for a in ("--resources", r)),
            *args,
        ]
        if instance_id is not None:
            argv += ["--instance-id", instance_id]
        self.argv = argv
        self.events: list[Event] = []
        self.started_at = time.time()
        self.killed_at: float | None = None
        self.paused: list[tuple[float, float]] = []
        self._paused_at: float | None = None
        self._changed = threading.Condition()
        log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix=f"workgroup-member-{name}-", suffix=".log", delete=False
        )
        self.log_path = Path(log.name)
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log)
        log.close()
        self._reader = threading.Thread(target=self._read, name=f"events-{name}", daemon=True)
        self._reader.start()

    def __repr__(self) -> str:
        return f"MemberProcess({self.name}, pid={self.process.pid})"

    # --- events -------------------------------------------------------------

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            if not line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "unparsable", "line": line, "t": time.time()}
            with self._changed:
                self.events.append(event)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def snapshot(self) -> list[Event]:
        with self._changed:
            return list(self.events)

    def wait_for(
        self, predicate: Callable[[list[Event]], bool], timeout: float, what: str = ""
    ) -> list[Event]:
        """Wait until ``predicate(events)`` holds; fail with the log on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self.events):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"{self.name}: timed out waiting for {what or predicate}; events:\n"
                        + "\n".join(json.dumps(e) for e in self.events[-15:])
                        + f"\nstderr tail:\n{self.stderr_tail()}"
                    )
                self._changed.wait(min(remaining, 0.2))
            return list(self.events)

    def last_stable(self) -> Event | None:
        for event in reversed(self.snapshot()):
            if event["event"] == "stable":
                return event
        return None

    def owned(self) -> set[Resource]:
        """What the member owns according to its latest event."""
        events = self.snapshot()
        return {(k, v) for k, v in events[-1]["assignment"]} if events else set()

    def stderr_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # --- what the test does to it ---------------------------------------------

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM (clean close) and wait for the exit code."""
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout)
        self._reader.join(5)
        return code

    def kill(self) -> None:
        """SIGKILL; ownership ends when the process is gone (recorded after the wait)."""
        if self._paused_at is not None:
            self.resume()
        self.process.kill()
        self.process.wait()
        self.killed_at = time.time()
        self._reader.join(5)

    def pause(self) -> None:
        """SIGSTOP; the pause is dated from after the process is seen stopped."""
        os.kill(self.process.pid, signal.SIGSTOP)
        _wait_for_state(self.process.pid, "T")
        self._paused_at = time.time()

    def resume(self) -> None:
        """SIGCONT; the pause is dated up to just before the signal."""
        assert self._paused_at is not None
        resumed_at = time.time()
        os.kill(self.process.pid, signal.SIGCONT)
        self.paused.append((self._paused_at, resumed_at))
        self._paused_at = None

    def close(self) -> None:
        """Make sure the process is gone and its pipes closed."""
        try:
            if self.alive:
                if self._paused_at is not None:
                    self.resume()
                self.process.kill()
                self.process.wait()
                if self.killed_at is None:
                    self.killed_at = time.time()
        finally:
            self._reader.join(5)
            if self.process.stdout is not None:
                self.process.stdout.close()
            self.log_path.unlink(missing_ok=True)

    def member_log(self) -> MemberLog:
        return MemberLog(
            name=self.name,
            events=self.snapshot(),
            killed_at=self.killed_at,
            paused=tuple(self.paused),
        )


def _wait_for_state(pid: int, state: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        if fields[0] == state:
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not reach state {state}")


def stable_events(events: Iterable[Event]) -> list[Event]:
    return [e for e in events if e["event"] == "stable"]


def resources_of(event: Event) -> set[Resource]:
    return {(k, v) for k, v in event["assignment"]}


# --- back-ends ------------------------------------------------------------------

#: Sessions in these tests are short (2-3 s), so the coordinator must allow them.
MIN_SESSION_TIMEOUT_MS = 1000


@contextlib.contextmanager
def embedded_coordinator(*extra: str) -> Iterator[str]:
    """``workgroup coordinator`` on a free port; yields its bootstrap address."""
    from conftest import start_coordinator

    with start_coordinator(
        "--initial-rebalance-delay-ms",
        "0",
        "--min-session-timeout-ms",
        str(MIN_SESSION_TIMEOUT_MS),
        *extra,
    ) as coordinator:
        yield coordinator.bootstrap


class Members:
    """Every member process a test started; closes them all at the end."""

    def __init__(self, bootstrap: str, group: str, **defaults: Any) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.defaults = defaults
        self.all: list[MemberProcess] = []
        self._counts: dict[str, int] = {}
        #: Name of the back-end the test runs on, for back-end specific expectations.
        self.backend = "embedded"

    def start(self, name: str, *args: str, **options: Any) -> MemberProcess:
        """Start a process; restarts of one name get ``name#2``, ``name#3``..."""
        self._counts[name] = self._counts.get(name, 0) + 1
        label = name if self._counts[name] == 1 else f"{name}#{self._counts[name]}"
        merged = {**self.defaults, **options}
        process = MemberProcess(label, self.bootstrap, self.group, *args, **merged)
        self.all.append(process)
        return process

    @property
    def running(self) -> list[MemberProcess]:
        return [p for p in self.all if p.alive]

    def logs(self) -> list[MemberLog]:
        return [p.member_log() for p in self.all]

    def close(self) -> None:
        for process in self.all:
            process.close()

    def __enter__(self) -> Members:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_converged(
    processes: Sequence[MemberProcess],
    expected: set[Resource],
    timeout: float,
    *,
    protocol: str | None = None,
    balanced: bool = True,
) -> dict[str, Event]:
    """Wait until the processes' latest ``stable`` events share one generation and
    partition ``expected`` (balanced to within one resource); return them by name."""
    deadline = time.monotonic() + timeout
    latest: dict[str, Event | None] = {}
    while True:
        latest = {p.name: p.last_stable() for p in processes}
        if _converged(processes, latest, expected, protocol, balanced):
            return {name: event for name, event in latest.items() if event is not None}
        if time.monotonic() > deadline:
            summary = {
                name: (e["generation"], e["protocol"], len(e["assignment"])) if e else None
                for name, e in latest.items()
            }
            tails = "\n".join(f"--- {p.name}\n{p.stderr_tail(8)}" for p in processes)
            raise AssertionError(f"no convergence in {timeout} s: {summary}\n{tails}")
        time.sleep(0.05)


def _converged(
    processes: Sequence[MemberProcess],
    latest: Mapping[str, Event | None],
    expected: set[Resource],
    protocol: str | None,
    balanced: bool,
) -> bool:
    events = list(latest.values())
    if any(e is None for e in events):
        return False
    stables = [e for e in events if e is not None]
    if len({e["generation"] for e in stables}) != 1:
        return False
    if protocol is not None and any(e["protocol"] != protocol for e in stables):
        return False
    # The latest stable must still be the member's view (nothing happened since).
    for process in processes:
        events_now = process.snapshot()
        if not events_now or events_now[-1]["event"] != "stable":
            return False
    owned = [resources_of(e) for e in stables]
    union: set[Resource] = set().union(*owned)
    if union != expected or sum(len(o) for o in owned) != len(expected):
        return False
    sizes = [len(o) for o in owned]
    return not balanced or max(sizes) - min(sizes) <= 1


def shards(n: int, kind: str = "shard") -> set[Resource]:
    return {(kind, k) for k in range(n)}


@contextlib.contextmanager
def tansu() -> Iterator[str]:
    """A Tansu broker (in-memory storage) on a free port; yields its bootstrap address.

    Fails the test with the tail of Tansu's output if the broker died meanwhile.
    """
    with run_tansu() as broker:
        yield broker.bootstrap
        broker.check_alive()


@contextlib.contextmanager
def backend(name: str) -> Iterator[str]:
    """``embedded`` or ``tansu``; yields the bootstrap address."""
    runner = tansu() if name == "tansu" else embedded_coordinator()
    with runner as address:
        yield address
