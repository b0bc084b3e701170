"""A daemon stopped while a start-up function waits on an engine that never
answers (a Spark Connect server that is gone) exits at once: the thread the
engine's client started cannot keep the process alive (``daemon.py`` rule 2)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workgroup.testing import run_coordinator

pytestmark = [pytest.mark.timeout(120)]

APP = """
import threading

import workgroup

app = workgroup.App("stuck")


@app.resources("shard")
def shards():
    return ["a"]


@app.worker("shard")
async def work(lease):
    await lease.wait_revoked()


def connect_to_an_engine_that_never_answers():
    # As a client library's worker thread: not a daemon thread.
    waiting = threading.Thread(target=threading.Event().wait, name="engine-client")
    waiting.start()
    print("start-up waiting", flush=True)
    waiting.join()


app.add_startup(connect_to_an_engine_that_never_answers)
"""


def test_a_daemon_stopped_during_a_stuck_start_up_exits_at_once(tmp_path: Path) -> None:
    (tmp_path / "stuck_app.py").write_text(APP)
    log = tmp_path / "daemon.log"
    with run_coordinator(log=tmp_path / "coordinator.log") as coordinator, log.open("w") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "workgroup", "run", "stuck_app:app",
             "--bootstrap", coordinator.bootstrap, "--log-format", "json"],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while "start-up waiting" not in log.read_text():
                assert daemon.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the start-up never began"
                time.sleep(0.1)
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(10) == 0  # before: it waited for the engine, forever
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
    text = log.read_text()
    assert "app.startup_abandoned" in text
    assert "member.joined" not in text  # it never joined: nothing to hand over
