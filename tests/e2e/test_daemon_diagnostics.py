"""What a user of ``workgroup run`` sees when something goes wrong: a wrong port,
a coordinator that goes away, output that nobody reads any more, two daemons
with one instance id, and the one name a process goes by everywhere."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from workgroup.admin import describe_group
from workgroup.runtime.events import read_events
from workgroup.testing import free_port, run_coordinator

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.e2e.apps.diag_app:app"
TIMEOUT_S = 30.0

pytestmark = pytest.mark.slow


def env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WORKGROUP_")}
    return {**clean, "PYTHONUNBUFFERED": "1", **extra}


def daemon(
    *args: str,
    app: str = APP,
    stdout: Any = subprocess.DEVNULL,
    stderr: Any = subprocess.PIPE,
    **extra: str,
) -> subprocess.Popen[str]:
    """``workgroup run APP --log-format json ARGS`` with a clean environment plus ``extra``."""
    return subprocess.Popen(
        [sys.executable, "-m", "workgroup", "run", app, "--log-format", "json", *args],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        text=True,
        env=env(**extra),
    )


def events(stderr: str) -> list[dict[str, Any]]:
    """The JSON log lines (every line but the final ``error:`` one and its ``hint:``
    must be JSON)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if lines and lines[-1].startswith("hint: "):
        lines.pop()
    body = lines[:-1] if lines and lines[-1].startswith("error: ") else lines
    return [json.loads(line) for line in body]


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def coordinator() -> Iterator[Any]:
    with run_coordinator("--min-session-timeout-ms", "1000") as server:
        yield server


def test_a_wrong_port_exits_1_at_once_with_a_hint_and_json_only() -> None:
    port = free_port()
    started = time.monotonic()
    process = daemon("--bootstrap", f"127.0.0.1:{port}")
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert time.monotonic() - started < 15
    error, hint = stderr.strip().splitlines()[-2:]
    assert error == f"error: nothing answers at 127.0.0.1:{port}: Connection refused"
    assert hint.startswith("hint: is a coordinator running at that address?")
    logged = events(stderr)  # raises if a plain-text (aiokafka) line slipped in
    assert [e["event"] for e in logged] == ["app.starting"]


def test_connect_timeout_waits_says_so_once_and_gives_up() -> None:
    port = free_port()
    started = time.monotonic()
    process = daemon("--bootstrap", f"127.0.0.1:{port}", "--connect-timeout-ms", "2500")
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert time.monotonic() - started >= 2.5
    error = stderr.strip().splitlines()[-2]
    assert error.endswith("Connection refused (waited 2500 ms)"), error
    unreachable = [e for e in events(stderr) if e["event"] == "app.coordinator_unreachable"]
    assert len(unreachable) == 1
    assert (
        unreachable[0]["hint"]
        == f"nothing answers at 127.0.0.1:{port}; is the coordinator running?"
    )
    assert not [e for e in events(stderr) if e["event"] == "lease.topic_failed"]


def test_a_coordinator_that_comes_up_within_the_connect_timeout_is_joined(
    tmp_path: Path,
) -> None:
    port = free_port()
    log = tmp_path / "events.jsonl"
    process = daemon(
        "--bootstrap", f"127.0.0.1:{port}", "--connect-timeout-ms", "20000",
        "--event-log", str(log),
    )  # fmt: skip
    try:
        time.sleep(1.5)
        assert process.poll() is None
        with run_coordinator("--listen", f"127.0.0.1:{port}", "--min-session-timeout-ms", "1000"):
            wait_for(lambda: log.exists() and len(read_events(log)) == 2, "both shards acquired")
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    names = [e["event"] for e in events(stderr)]
    assert "app.coordinator_reachable" in names
    assert "lease.topic_failed" not in names


def test_a_daemon_whose_coordinator_is_gone_gives_up_after_the_unreachable_timeout(
    tmp_path: Path,
) -> None:
    log = tmp_path / "events.jsonl"
    process: subprocess.Popen[str] | None = None
    try:
        with run_coordinator("--min-session-timeout-ms", "1000") as coordinator:
            process = daemon(
                "--bootstrap", coordinator.bootstrap, "--event-log", str(log),
                "--unreachable-timeout-ms", "3000",
            )  # fmt: skip
            wait_for(lambda: log.exists() and len(read_events(log)) == 2, "both shards acquired")
        gone_at = time.monotonic()
        _, stderr = process.communicate(timeout=60)
    finally:
        if process is not None and process.poll() is None:
            process.kill()
    assert process.returncode == 1
    # The give-up comes 3 s after the member last looked for its coordinator in vain.
    assert time.monotonic() - gone_at < 30
    last = stderr.strip().splitlines()[-1]
    assert re.match(r"error: no coordinator reachable for \d+ ms \(groups diag.shard;", last), last
    assert last.endswith(f"nothing answers at {coordinator.bootstrap}; is the coordinator running?")
    logged = events(stderr)
    assert "lease.topic_failed" not in [e["event"] for e in logged]
    # aiokafka's per-connection errors are not repeated (workgroup reports them).
    assert not [e for e in logged if e.get("logger", "").startswith("aiokafka")]


def test_one_identity_in_client_ids_logs_and_the_event_log(
    coordinator: Any, tmp_path: Path
) -> None:
    log = tmp_path / "events.jsonl"
    process = daemon("--bootstrap", coordinator.bootstrap, "--event-log", str(log))
    try:
        wait_for(lambda: log.exists() and len(read_events(log)) == 2, "both shards acquired")
        identity = f"{socket.gethostname()}-{process.pid}"
        described = asyncio.run(describe_group(coordinator.bootstrap, "diag.shard"))
        assert [m.client_id for m in described.members] == [f"workgroup-{identity}"]
        assert {e["member"] for e in read_events(log)} == {identity}
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    without = [e for e in events(stderr) if e.get("process") != identity]
    assert without == []


def test_the_info_metric_names_the_process(coordinator: Any, tmp_path: Path) -> None:
    port = free_port()
    process = daemon("--bootstrap", coordinator.bootstrap, "--metrics-port", str(port))
    try:

        def served() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    return b"workgroup_process_info" in r.read()
            except OSError:
                return False

        wait_for(served, "the metrics")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
        line = next(x for x in text.splitlines() if x.startswith("workgroup_process_info{"))
        identity = f"{socket.gethostname()}-{process.pid}"
        assert f'identity="{identity}"' in line
        assert f'pid="{process.pid}"' in line
        assert 'app="diag"' in line
        assert line.endswith(" 1.0")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


def test_a_closed_stdout_stops_the_daemon_once_said(coordinator: Any) -> None:
    """``workgroup run ... | head -1``: head exits after one line."""
    process = daemon("--bootstrap", coordinator.bootstrap, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert re.fullmatch(r"[ab] \d+\n", first)
        process.stdout.close()  # what head does when it has its line
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 120
    logged = events(stderr)
    closed = [e for e in logged if e["event"] == "app.output_closed"]
    assert len(closed) == 1
    assert closed[0]["stream"] == "stdout"
    assert stderr.strip().splitlines()[-1] == "error: stdout was closed by its reader; stopped"
    # At most the prints of the last second failed before the stop: no restart loop.
    failures = [e for e in logged if e["event"] == "worker.failed"]
    assert len(failures) <= 4, failures


def test_the_newer_of_two_daemons_with_one_instance_id_says_it_replaced_the_other(
    coordinator: Any, tmp_path: Path
) -> None:
    log = tmp_path / "events.jsonl"
    older = daemon(
        "--bootstrap", coordinator.bootstrap, "--instance-id", "w1", "--event-log", str(log)
    )
    newer: subprocess.Popen[str] | None = None
    try:
        wait_for(lambda: log.exists() and len(read_events(log)) == 2, "the older to own both")
        newer = daemon("--bootstrap", coordinator.bootstrap, "--instance-id", "w1")
        _, older_err = older.communicate(timeout=60)
        assert older.returncode == 1
        newer.send_signal(signal.SIGTERM)
        _, newer_err = newer.communicate(timeout=30)
    finally:
        for process in (older, newer):
            if process is not None and process.poll() is None:
                process.kill()
    replacing = [e for e in events(newer_err) if e["event"] == "app.replacing"]
    assert len(replacing) == 1, newer_err
    assert replacing[0]["previous_pid"] == older.pid
    assert replacing[0]["previous_running"] is True
    assert replacing[0]["level"] == "warning"
    assert replacing[0]["what"] == (
        f"replaces the running process {older.pid} with the same instance id: the "
        "coordinator fences it and it exits 1"
    )
    assert replacing[0]["previous_client"] == f"workgroup-w1@{socket.gethostname()}-{older.pid}"
    # The older says in plain words what happened, and which process took over (the
    # coordinator still names the older as the place's client: the newer's metadata
    # names it).
    assert older_err.strip().splitlines()[-1] == (
        "error: another process took over instance id 'w1' in group 'diag.shard' (process "
        f"{newer.pid} on host {socket.gethostname()}): this one stops; give each process "
        "its own instance id"
    )


def test_a_restarted_static_daemon_says_it_took_its_previous_place(coordinator: Any) -> None:
    def start() -> subprocess.Popen[str]:
        process = daemon(
            "--bootstrap", coordinator.bootstrap, "--instance-id", "w2",
            "--session-timeout-ms", "20000", stdout=subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None
        assert process.stdout.readline()  # a handler runs: joined
        return process

    first = start()
    first.send_signal(signal.SIGTERM)  # a static member keeps its place (no leave)
    first.communicate(timeout=30)
    second = start()
    second.send_signal(signal.SIGTERM)
    _, stderr = second.communicate(timeout=30)
    replacing = [e for e in events(stderr) if e["event"] == "app.replacing"]
    assert len(replacing) == 1
    assert replacing[0]["level"] == "info"
    assert replacing[0]["what"] == (
        f"takes the place of its previous run (process {first.pid}, no longer running)"
    )
