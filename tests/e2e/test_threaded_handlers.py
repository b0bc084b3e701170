"""Handlers that block in ``asyncio.to_thread`` for as long as they own their shard,
more of them than asyncio's default executor has threads, in ``workgroup run``
daemons: every handler's work starts, and a daemon that joins gets its share
(the leader's rounds do not wait for the handlers' threads); a call that outlives
its grace period does not keep a stopped daemon alive."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from workgroup.testing import run_coordinator

ROOT = Path(__file__).resolve().parents[2]
SHARDS = 12  # twice asyncio's default executor on 2 cores (6 threads)
TIMEOUT_S = 30

pytestmark = pytest.mark.slow


def records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def working(path: Path) -> dict[str, int]:
    """``key -> pid`` of the blocking work running now."""
    now: dict[str, int] = {}
    for entry in records(path):
        if entry["event"] == "start":
            now[entry["key"]] = entry["pid"]
        elif now.get(entry["key"]) == entry["pid"]:
            del now[entry["key"]]
    return now


def wait_until(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def start(tmp_path: Path, bootstrap: str, name: str, **env: str) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "workgroup", "run", "tests.e2e.apps.threaded_shards:app",
        "--bootstrap", bootstrap, "--instance-id", name, "--log-format", "json",
        "--leave-on-stop",
    ]  # fmt: skip
    environment = {
        **os.environ,
        "THREADED_OUT": str(tmp_path / "threaded.jsonl"),
        "THREADED_SHARDS": str(SHARDS),
        "THREADED_APP": f"threaded-{tmp_path.name}",
        "PYTHONUNBUFFERED": "1",
        **env,
    }
    with (tmp_path / f"{name}.log").open("wb") as log:
        return subprocess.Popen(argv, cwd=ROOT, env=environment, stdout=log, stderr=log)


@pytest.fixture
def bootstrap() -> Iterator[str]:
    with run_coordinator(
        "--initial-rebalance-delay-ms", "0", "--min-session-timeout-ms", "1000"
    ) as coordinator:
        yield coordinator.bootstrap


@pytest.fixture
def daemons() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for daemon in started:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def test_every_threaded_handler_works_and_a_joining_daemon_gets_its_share(
    tmp_path: Path, bootstrap: str, daemons: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "threaded.jsonl"
    daemons.append(start(tmp_path, bootstrap, "a"))
    wait_until("a's 12 handlers to work", lambda: len(working(out)) == SHARDS)
    daemons.append(start(tmp_path, bootstrap, "b"))
    a, b = (d.pid for d in daemons)
    wait_until(
        "b to work on its share",
        lambda: (
            sorted(working(out).values()).count(b) == SHARDS // 2 and len(working(out)) == SHARDS
        ),
    )
    assert sorted(working(out).values()).count(a) == SHARDS // 2
    for daemon in daemons:
        daemon.send_signal(signal.SIGTERM)
    for daemon in daemons:
        assert daemon.wait(TIMEOUT_S) == 0
    assert working(out) == {}  # every blocking loop saw its revocation and ended


def test_a_to_thread_call_that_outlives_the_grace_period_ends_with_the_process(
    tmp_path: Path, bootstrap: str, daemons: list[subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "threaded.jsonl"
    daemon = start(tmp_path, bootstrap, "a", THREADED_STUBBORN="shard-0")
    daemons.append(daemon)
    wait_until("a's 12 handlers to work", lambda: len(working(out)) == SHARDS)
    stopped = time.monotonic()
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(TIMEOUT_S) == 0  # not held by the thread it cannot stop
    assert time.monotonic() - stopped < 10  # the grace period (1 s) and the stop
    assert "app.threads_abandoned" in (tmp_path / "a.log").read_text()
    assert list(working(out)) == ["shard-0"]  # it never ended: the process ended it
