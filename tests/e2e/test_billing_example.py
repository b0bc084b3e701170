"""examples/billing.py under ``workgroup run``, as the README shows it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workgroup.testing import run_coordinator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "billing.py"
STARTED = re.compile(r"shard/(shard-\d+): from (\d+) \(token (\d+)\)")


class Daemon:
    def __init__(self, bootstrap: str, instance: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKGROUP_")}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "workgroup",
                "run",
                "examples.billing:app",
                "--bootstrap",
                bootstrap,
                "--instance-id",
                instance,
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def started(self) -> dict[str, tuple[int, int]]:
        """Shard -> (position it started from, token), latest start per shard."""
        found = {}
        for line in list(self.lines):
            match = STARTED.fullmatch(line)
            if match:
                found[match[1]] = (int(match[2]), int(match[3]))
        return found


def wait_for(condition: object, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_shards_carry_on_from_their_checkpoints_and_sigterm_exits_cleanly() -> None:
    with run_coordinator("--min-session-timeout-ms", "1000") as server:
        first = Daemon(server.bootstrap, "worker-1")
        second: Daemon | None = None
        try:
            wait_for(lambda: len(first.started()) == 8, "worker-1 to run every shard")
            assert "publisher: active (token 1)" in first.lines
            time.sleep(1.5)  # a few commits per shard
            second = Daemon(server.bootstrap, "worker-2")
            wait_for(lambda: len(second.started()) == 4, "worker-2 to take half of the shards")
            # Taken over from their checkpoints, with the next token.
            assert all(pos > 0 and token == 2 for pos, token in second.started().values())
            first.process.send_signal(signal.SIGTERM)
            assert first.process.wait(20) == 0
            assert "publisher: handing over" in first.lines
            wait_for(lambda: len(second.started()) == 8, "worker-2 to run every shard")
            # The publisher is another group: its hand-over ends on its own round.
            wait_for(
                lambda: any(
                    line.startswith("publisher: active (token 2)") for line in second.lines
                ),
                "worker-2 to publish with the next token",
            )
            second.process.send_signal(signal.SIGTERM)
            assert second.process.wait(20) == 0
            assert second.process.stderr is not None
            assert "Traceback" not in second.process.stderr.read()
        finally:
            for daemon in (first, second):
                if daemon is not None and daemon.process.poll() is None:
                    daemon.process.kill()
                    daemon.process.wait()
                if daemon is not None:
                    for stream in (daemon.process.stdout, daemon.process.stderr):
                        if stream is not None:
                            stream.close()


def test_the_readme_shows_the_example_as_it_is() -> None:
    readme = (ROOT / "README.md").read_text()
    source = EXAMPLE.read_text()
    body = source[source.index("import asyncio") :]
    assert f"```python\n{body}```" in readme
