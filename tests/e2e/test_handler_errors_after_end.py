"""A handler that fails after its lease ended, in a daemon logging JSON: its
error is one JSON line like any other, never a raw traceback from asyncio
(``Task exception was never retrieved``) that would break the log."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_daemon_diagnostics import daemon as start_daemon
from workgroup.testing import run_coordinator

APP = "tests.e2e.apps.fails_after_end:app"

pytestmark = pytest.mark.slow


@pytest.fixture
def bootstrap() -> Iterator[str]:
    with run_coordinator(
        "--min-session-timeout-ms", "500", "--initial-rebalance-delay-ms", "0"
    ) as server:
        yield server.bootstrap


def test_a_handler_failing_after_its_lease_ended_is_logged_as_one_json_line(
    bootstrap: str, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    stderr = tmp_path / "stderr"
    with stderr.open("wb") as out:
        daemon = start_daemon(
            "--bootstrap", bootstrap, app=APP, stderr=out, STARTED_LOG=str(started)
        )
    try:
        deadline = time.monotonic() + 60
        while not (started.exists() and len(started.read_text().split()) == 2):
            assert daemon.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.05)
        daemon.send_signal(signal.SIGTERM)  # revokes both leases: both handlers raise
        assert daemon.wait(60) == 0, stderr.read_text()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    lines = [line for line in stderr.read_text(encoding="utf-8").splitlines() if line.strip()]
    not_json = [line for line in lines if not _is_json_object(line)]
    assert not not_json, "\n".join(not_json)
    failures = [json.loads(line) for line in lines if "failed after its lease ended" in line]
    assert {event["key"] for event in failures} == {"a", "b"}, failures


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False
