"""A daemon's leader across a coordinator SIGKILL (durable ``--data-dir``): no
checkpoint is lost and tokens keep increasing."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.e2e.test_runtime_daemon import (
    Daemons,
    committed,
    continues_from,
    wait_for_members,
    with_signal,
)
from workgroup.testing import run_coordinator
from workgroup.testing.servers import free_port

pytestmark = pytest.mark.slow


def test_checkpoints_and_tokens_survive_a_coordinator_sigkill(tmp_path: Path) -> None:
    port = free_port()
    data = tmp_path / "coordinator-data"
    args = ("--data-dir", str(data), "--min-session-timeout-ms", "500")
    listen = f"127.0.0.1:{port}"
    work = tmp_path / "daemons"
    work.mkdir()
    daemons = Daemons(listen, work / "records.jsonl", work / "events.jsonl")
    try:
        with run_coordinator(*args, listen=listen) as server:
            a = daemons.start()
            daemons.wait_for("commits", lambda records: len(committed(records, a.pid)) >= 5)
            server.process.kill()
            server.process.wait()
            killed_at = time.time()
        time.sleep(1.0)
        with run_coordinator(*args, listen=listen):
            # The leader carries on (or takes its lease again) after the restart.
            daemons.wait_for(
                "commits after the restart",
                lambda records: [r for r in committed(records, a.pid) if r["sent"] > killed_at + 1],
            )
            before_kill = [r for r in committed(daemons.records(), a.pid) if r["time"] < killed_at]
            restarts = [r for r in daemons.records() if r["event"] == "active"][1:]
            for active in restarts:  # a new lease after the restart
                assert active["token"] > 1
                _, n = active["checkpoint"].split(":")
                assert int(n) >= int(before_kill[-1]["value"].split(":")[1])
            # Hand over: the next holder starts from the last accepted checkpoint
            # with a higher token than any before.
            b = daemons.start()
            wait_for_members(listen, "fenced.writer", 2)
            stopped_at = time.time()
            with_signal(a, signal.SIGTERM)
            assert a.wait(15) == 0
            successor = daemons.wait_for("the successor", lambda _: daemons.active(b.pid))
            assert successor["time"] > stopped_at
            last = committed(daemons.records(), a.pid)[-1]
            assert continues_from(successor["checkpoint"], last["value"])
            assert successor["token"] > max(r["token"] for r in committed(daemons.records(), a.pid))
    finally:
        daemons.close()
