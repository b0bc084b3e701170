"""``make demo`` ended by SIGTERM or SIGHUP (``timeout``, a CI runner, a closed
terminal) stops what it started, daemons and their JVMs included, as Ctrl-C does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def started_by(data: Path) -> dict[int, str]:
    """pid -> command of every process of this user whose environment names ``data``
    (the demo's daemons, and its Spark Connect server, or the JVMs the daemons
    start with ``--layout jvm``, have ``ETL_DATA``)."""
    marker = f"ETL_DATA={data}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
    return {pid: command.decode(errors="replace") for pid, command in found.items() if command}


def wait_until(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_the_demo_stops_its_daemons_and_jvms_on_a_termination_signal(
    tmp_path: Path, signum: signal.Signals
) -> None:
    output = tmp_path / "out"
    demo = subprocess.Popen(
        [sys.executable, "-m", "examples.sharded_etl.demo", "--output", str(output)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )
    data = output / "data"
    try:
        # Three daemons in their own sessions, and at least one JVM under them.
        wait_until(
            lambda: sum("workgroup run" in c for c in started_by(data).values()) == 3,
            120,
            "three daemons",
        )
        wait_until(
            lambda: any("java" in c.split(" ")[0] for c in started_by(data).values()),
            180,
            "a Spark JVM",
        )
        assert {os.getsid(pid) for pid in started_by(data)} - {os.getsid(demo.pid)}
        demo.send_signal(signum)
        assert demo.wait(60) == 130
        try:
            wait_until(lambda: not started_by(data), 30, "every daemon and JVM to exit")
        except AssertionError as exc:
            left = "; ".join(f"{pid}: {command[:200]}" for pid, command in started_by(data).items())
            raise AssertionError(f"{exc}; still running: {left}") from None
    finally:
        if demo.poll() is None:
            demo.kill()
        for pid in started_by(data):
            os.kill(pid, signal.SIGKILL)
