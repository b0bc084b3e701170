"""examples/active_producer against Tansu: the active writer is SIGKILLed, another takes
over, and a fenced reader sees one gap-free sequence from increasing tokens.

Tansu has no transactions, so the example fences on the read side (lease tokens in
the records); on a Kafka cluster the same app uses a transactional producer.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from examples.active_producer.consume import fence, read_all
from workgroup.testing import run_tansu

pytestmark = [pytest.mark.slow, pytest.mark.tansu, pytest.mark.timeout(150)]

ROOT = Path(__file__).resolve().parents[2]


class Daemon:
    def __init__(self, bootstrap: str, name: str, log: Path) -> None:
        # Dynamic members: Tansu's static membership deviates from Kafka's
        # (docs/compatibility.md); this test is about the example, not about that.
        self.lines: list[str] = []
        self.log = log.open("wb")
        self.reader: threading.Thread
        self.process = subprocess.Popen(
            [sys.executable, "-m", "workgroup", "run", "examples.active_producer.app:app",
             "--log-format", "json"],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=self.log, text=True,
            env={**os.environ, "WORKGROUP_BOOTSTRAP": bootstrap, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(20)
        self.reader.join(5)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self.log.close()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def active(self) -> bool:
        return any(line.startswith("writer: active") for line in self.lines)


def wait(condition: object, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_killed_writer_is_replaced_and_readers_see_one_sequence(tmp_path: Path) -> None:
    with run_tansu(log=tmp_path / "tansu.log") as tansu:
        first = Daemon(tansu.bootstrap, "w1", tmp_path / "w1.log")
        wait(lambda: first.active, "the first writer")
        second = Daemon(tansu.bootstrap, "w2", tmp_path / "w2.log")
        try:
            time.sleep(3)  # the first writer writes; the second joins and waits
            assert not second.active
            first.process.send_signal(signal.SIGKILL)
            first.process.wait()
            wait(lambda: second.active, "the second writer to take over", 30)
            time.sleep(2)
        finally:
            for daemon in (first, second):
                daemon.close()
        records = asyncio.run(read_all(tansu.bootstrap))
    reading = fence(records)
    assert reading.accepted, "nothing was written"
    assert reading.gaps == []
    assert reading.tokens == sorted(reading.tokens)
    assert len(reading.tokens) == 2, reading.tokens  # two writers, one after the other
