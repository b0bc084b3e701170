"""``workgroup run`` daemons as real processes on the embedded coordinator: failover
after SIGTERM and SIGKILL, and fencing of a paused leader (dynamic, and replaced
by a static member with the same instance id)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from workgroup.admin import describe_group
from workgroup.errors import WorkgroupError
from workgroup.runtime.events import read_events
from workgroup.testing import run_coordinator

ROOT = Path(__file__).resolve().parents[2]
SESSION_MS = 3_000
TIMEOUT_S = 20.0

pytestmark = pytest.mark.slow


class Daemons:
    """``workgroup run tests.e2e.apps.fenced_writer:app`` processes of one test."""

    def __init__(self, bootstrap: str, out: Path, events: Path) -> None:
        self.bootstrap = bootstrap
        self.out = out
        self.events = events
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, instance_id: str | None = None, *extra: str) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable, "-m", "workgroup", "run", "tests.e2e.apps.fenced_writer:app",
            "--bootstrap", self.bootstrap, "--event-log", str(self.events), "--log-format", "json",
        ]  # fmt: skip
        if instance_id:
            argv += ["--instance-id", instance_id]
        argv += extra
        with (self.out.parent / f"daemon-{len(self.processes)}.log").open("wb") as log:
            process = subprocess.Popen(
                argv,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, "RUNTIME_APP_OUT": str(self.out), "PYTHONUNBUFFERED": "1"},
            )
        self.processes.append(process)
        return process

    def records(self) -> list[dict[str, Any]]:
        return read_events(self.out) if self.out.exists() else []

    def wait_for(self, what: str, condition: Callable[[list[dict[str, Any]]], Any]) -> Any:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            found = condition(self.records())
            if found:
                return found
            time.sleep(0.02)
        logs = "\n".join(
            p.read_text()[-2000:] for p in sorted(self.out.parent.glob("daemon-*.log"))
        )
        raise AssertionError(
            f"timed out waiting for {what}; last records: {self.records()[-10:]}\n{logs}"
        )

    def active(self, pid: int | None = None, *, after: float = 0.0) -> dict[str, Any] | None:
        return next(
            (
                r
                for r in self.records()
                if r["event"] == "active"
                and r["time"] >= after
                and (pid is None or r["pid"] == pid)
            ),
            None,
        )

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                with_signal(process, signal.SIGCONT)
                process.kill()
            process.wait(10)


def with_signal(process: subprocess.Popen[bytes], signum: int) -> None:
    if process.poll() is None:
        os.kill(process.pid, signum)


@pytest.fixture
def bootstrap() -> Iterator[str]:
    # A coordinator per test: every test's group starts empty (tokens from 1), in
    # whatever order and on whichever worker the tests run.
    with run_coordinator(
        "--min-session-timeout-ms", "500", "--initial-rebalance-delay-ms", "0"
    ) as server:
        yield server.bootstrap


@pytest.fixture
def daemons(bootstrap: str, tmp_path: Path) -> Iterator[Daemons]:
    group = Daemons(bootstrap, tmp_path / "records.jsonl", tmp_path / "events.jsonl")
    try:
        yield group
    finally:
        group.close()


def wait_for_members(bootstrap: str, group: str, count: int) -> None:
    """Until ``group`` is stable with ``count`` members (DescribeGroups)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            described = asyncio.run(describe_group(bootstrap, group, timeout_s=TIMEOUT_S))
        except WorkgroupError:
            described = None
        if described is not None and (described.state, len(described.members)) == (
            "Stable",
            count,
        ):
            return
        assert time.monotonic() < deadline, f"{group} never had {count} members: {described}"
        time.sleep(0.1)


def first_active(daemons: Daemons) -> dict[str, Any]:
    found: dict[str, Any] = daemons.wait_for("a leader", lambda _: daemons.active())
    return found


def continues_from(checkpoint: str, last_recorded: str) -> bool:
    """The next holder read the last commit its predecessor recorded, or the one
    after it: a commit the coordinator accepted while the predecessor was being
    stopped, before it could record it."""
    pid, n = last_recorded.split(":")
    return checkpoint in (last_recorded, f"{pid}:{int(n) + 1}")


def committed(records: list[dict[str, Any]], pid: int) -> list[dict[str, Any]]:
    return [r for r in records if r["event"] == "committed" and r["pid"] == pid]


def test_sigterm_hands_the_leader_over_with_its_checkpoint(daemons: Daemons) -> None:
    a = daemons.start()
    leader = first_active(daemons)
    assert leader["pid"] == a.pid
    assert leader["token"] == 1
    b = daemons.start()
    daemons.wait_for("commits", lambda records: len(committed(records, a.pid)) >= 3)
    wait_for_members(daemons.bootstrap, "fenced.writer", 2)  # b is in the group
    stopped_at = time.time()
    with_signal(a, signal.SIGTERM)
    assert a.wait(10) == 0
    successor = daemons.wait_for("the successor", lambda _: daemons.active(b.pid))
    failover_s = successor["time"] - stopped_at
    assert successor["token"] == 2
    # Nothing committed is lost: the successor starts from the last accepted value.
    assert continues_from(successor["checkpoint"], committed(daemons.records(), a.pid)[-1]["value"])
    assert failover_s < SESSION_MS / 1000, f"graceful handover took {failover_s:.2f} s"
    events = read_events(daemons.events)
    assert [(e["event"], e["token"]) for e in events if e["pid"] == a.pid] == [
        ("acquired", 1),
        ("revoked", 1),
    ]


def test_sigkill_moves_the_leader_within_the_session_timeout(daemons: Daemons) -> None:
    a = daemons.start()
    first_active(daemons)
    b = daemons.start()
    # The bound is for a group of two: b is a member before a dies (a process
    # start on a loaded machine can take longer than any fixed sleep).
    wait_for_members(daemons.bootstrap, "fenced.writer", 2)
    killed_at = time.time()
    a.kill()
    successor = daemons.wait_for("the successor", lambda _: daemons.active(b.pid))
    assert successor["time"] - killed_at <= SESSION_MS / 1000 + 2.0
    assert continues_from(successor["checkpoint"], committed(daemons.records(), a.pid)[-1]["value"])


@pytest.mark.parametrize("replacement", ["dynamic", "static"])
def test_a_paused_leader_never_commits_after_its_successor(
    daemons: Daemons, replacement: str
) -> None:
    """SIGSTOP past the session (dynamic), or a new process with the same instance
    id (static); then SIGCONT: no commit of the old leader is accepted after that."""
    instance = "writer-1" if replacement == "static" else None
    a = daemons.start(instance)
    first_active(daemons)
    daemons.wait_for("commits", lambda records: len(committed(records, a.pid)) >= 3)
    if replacement == "dynamic":
        b = daemons.start()
        wait_for_members(daemons.bootstrap, "fenced.writer", 2)
        with_signal(a, signal.SIGSTOP)
    else:
        with_signal(a, signal.SIGSTOP)
        b = daemons.start(instance)
    successor = daemons.wait_for("the successor", lambda _: daemons.active(b.pid))
    daemons.wait_for("its commits", lambda records: committed(records, b.pid))
    with_signal(a, signal.SIGCONT)
    # Resumed, the old leader either notices first that its session is over (its
    # lease is lost and its handler cancelled before it sends anything) or has a
    # commit refused by the coordinator.
    daemons.wait_for(
        "the old leader to stop",
        lambda records: (
            [r for r in records if r["event"] == "refused" and r["pid"] == a.pid]
            or [
                e
                for e in read_events(daemons.events)
                if e["pid"] == a.pid and e["event"] in ("lost", "revoked")
            ]
        ),
    )
    records = daemons.records()
    successor_first = committed(records, b.pid)[0]
    zombie = committed(records, a.pid)
    assert successor["token"] > zombie[-1]["token"]
    assert all(r["sent"] < successor_first["time"] for r in zombie), (
        "a commit of the paused leader was accepted after its successor's first commit"
    )
    assert continues_from(successor["checkpoint"], zombie[-1]["value"])
    time.sleep(0.5)
    assert committed(daemons.records(), a.pid) == zombie


@pytest.mark.parametrize("leave", [False, True], ids=["keeps-its-place", "leave-on-stop"])
def test_a_stopped_static_leader_keeps_its_place_unless_told_to_leave(
    daemons: Daemons, leave: bool
) -> None:
    a = daemons.start("writer-a", "--leave-on-stop") if leave else daemons.start("writer-a")
    first_active(daemons)
    b = daemons.start("writer-b")
    # The bounds are for a group of two: a process start on a loaded machine can
    # take longer than any fixed sleep, and b joining after a stopped is another case.
    wait_for_members(daemons.bootstrap, "fenced.writer", 2)
    stopped_at = time.time()
    with_signal(a, signal.SIGTERM)
    assert a.wait(10) == 0
    successor = daemons.wait_for("the successor", lambda _: daemons.active(b.pid))
    handover_s = successor["time"] - stopped_at
    if leave:
        assert handover_s < SESSION_MS / 1000, f"took {handover_s:.2f} s"
    else:  # its instance id holds the place until its session expires
        assert handover_s >= SESSION_MS / 1000 - 0.5, f"took {handover_s:.2f} s"


def test_the_daemon_serves_metrics_and_health(daemons: Daemons, tmp_path: Path) -> None:
    daemon = daemons.start(None, "--metrics-port", "0", "--log-level", "info")
    first_active(daemons)
    log_path = tmp_path / "daemon-0.log"
    listening = daemons.wait_for(
        "the metrics address",
        lambda _: [
            json.loads(line)
            for line in log_path.read_text().splitlines()
            if '"app.metrics_listening"' in line
        ],
    )[0]
    port = listening["port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
        assert (answer.status, answer.read()) == (200, b"ok\n")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    assert (
        'workgroup_owned_resources{group="fenced.writer",kind="leader",role="active"} 1.0' in text
    )
    with_signal(daemon, signal.SIGTERM)
    assert daemon.wait(10) == 0
