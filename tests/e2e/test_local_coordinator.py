"""The local coordinator an app without a bootstrap address starts: detached,
durable, and one for daemons that start at the same time."""

from __future__ import annotations

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
