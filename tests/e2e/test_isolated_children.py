"""Process-isolated handlers die with their daemon, whatever they are doing: a
``workgroup run`` daemon with two handlers that honour ``lease.revoked`` and two
blocking loops that never look at the lease is SIGKILLed (as by the OOM
killer); every child is gone long before the daemon's session could expire
(``docs/runtime.md``: with ``isolation="process"`` a runaway handler cannot
outlive its lease)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.apps.runaway_children import SESSION_MS
from tests.e2e.test_daemon_diagnostics import daemon as start_daemon
from tests.processes import is_running
from workgroup.runtime.isolation import PARENT_POLL_S
from workgroup.testing import run_coordinator

APP = "tests.e2e.apps.runaway_children:app"
#: Linux's parent-death signal is immediate; the pipe's end is too, the poll of
#: the parent's pid takes up to ``PARENT_POLL_S``; either way well under the session.
GONE_WITHIN_S = 2.0 + PARENT_POLL_S

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc"),
]


@pytest.fixture
def bootstrap() -> Iterator[str]:
    with run_coordinator("--initial-rebalance-delay-ms", "0") as server:
        yield server.bootstrap


def child_pids(path: Path) -> dict[str, int]:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return {key: int(pid) for key, pid in (line.split() for line in text.splitlines())}


@pytest.mark.parametrize("parent_death_signal", ["on", "off"])
def test_isolated_handlers_die_with_their_killed_daemon(
    bootstrap: str, tmp_path: Path, parent_death_signal: str
) -> None:
    pids_file = tmp_path / "children"
    stderr = tmp_path / "stderr"
    with stderr.open("wb") as out:
        daemon = start_daemon(
            "--bootstrap", bootstrap, app=APP, stderr=out,
            CHILD_PIDS=str(pids_file), PARENT_DEATH_SIGNAL=parent_death_signal,
        )  # fmt: skip
    children: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 60
        while len(children := child_pids(pids_file)) < 4:
            assert daemon.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.05)
        assert all(is_running(pid) for pid in children.values()), children
        daemon.kill()
        killed_at = time.monotonic()
        daemon.wait()
        while left := {k: p for k, p in children.items() if is_running(p)}:
            assert time.monotonic() - killed_at < GONE_WITHIN_S, (
                f"children still running {GONE_WITHIN_S} s after their daemon died: {left}"
            )
            time.sleep(0.02)
        gone_after_s = time.monotonic() - killed_at
        print(f"all 4 children gone {gone_after_s:.2f} s after the daemon's SIGKILL")
        assert gone_after_s < SESSION_MS / 1000 / 4
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        for pid in children.values():
            if is_running(pid):
                os.kill(pid, signal.SIGKILL)
