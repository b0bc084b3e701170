"""The local coordinator an app without a bootstrap address starts: detached,
durable, and one for daemons that start at the same time."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workgroup.runtime.local import answers
from workgroup.testing.servers import free_port

pytestmark = pytest.mark.slow

START = (
    "import sys; from pathlib import Path; "
    "from workgroup.runtime.local import ensure_local_coordinator; "
    "print(ensure_local_coordinator(port=int(sys.argv[1]), directory=Path(sys.argv[2])))"
)


def test_daemons_starting_together_end_up_with_one_detached_coordinator(tmp_path: Path) -> None:
    port = free_port()
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", START, str(port), str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [s.communicate(timeout=30)[0].strip() for s in starters]
    pids = [int(o) for o in outputs if o != "None"]
    try:
        assert len(pids) == 1, outputs
        assert all(s.returncode == 0 for s in starters)
        # The starters are gone; the coordinator runs on in its own session.
        assert answers("127.0.0.1", port)
        assert os.getsid(pids[0]) != os.getsid(0)
        assert (tmp_path / "coordinator.pid").read_text().strip() == str(pids[0])
        assert (tmp_path / "coordinator").is_dir()
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while answers("127.0.0.1", port) and time.monotonic() < deadline:
            time.sleep(0.05)


def test_coordinator_status_and_stop_show_and_stop_the_auto_started_one(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "WORKGROUP_STATE_DIR": str(tmp_path)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "workgroup", "coordinator", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    before = cli("--status")
    assert before.returncode == 1
    assert before.stdout.splitlines()[0] == "local coordinator: not running"
    started = subprocess.run(
        [sys.executable, "-c", START, str(port), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    pid = int(started.stdout.strip())
    try:
        status = cli("--status")
        assert status.returncode == 0, status.stdout + status.stderr
        lines = status.stdout.splitlines()
        assert lines[0] == f"local coordinator: running (pid {pid})"
        assert f"address: 127.0.0.1:{port} (answers)" in lines
        assert f"log: {tmp_path / 'coordinator.log'}" in lines
        assert "settings: --min-session-timeout-ms 1000 --log-level info" in lines
        assert "stop it: workgroup coordinator --stop" in lines
        stopped = cli("--stop")
        assert stopped.returncode == 0
        assert stopped.stdout.strip() == f"local coordinator (pid {pid}): stopped"
        assert not answers("127.0.0.1", port)
        assert cli("--status").returncode == 1
        assert cli("--stop").stdout.startswith("local coordinator: not running")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
