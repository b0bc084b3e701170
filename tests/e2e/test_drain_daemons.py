"""``workgroup drain`` / ``undrain`` and ``workgroup run --drain-on-stop`` with real
daemons on the embedded coordinator: a drained daemon keeps running and owns
nothing, its shards move warmed up; SIGTERM with --drain-on-stop hands every
shard over before the process exits 0; no shard ever has two active holders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.apps.warm_shards import PREPARE_S
from workgroup.testing import run_coordinator

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with run_coordinator(
        "--min-session-timeout-ms", "500", "--initial-rebalance-delay-ms", "0"
    ) as server:
        yield server.bootstrap


class Daemons:
    def __init__(self, bootstrap: str, tmp: Path) -> None:
        self.bootstrap = bootstrap
        self.tmp = tmp
        self.out = tmp / "records.jsonl"
        self.app = f"warm{uuid.uuid4().hex[:8]}"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, instance: str, *extra: str) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable, "-m", "workgroup", "run", "tests.e2e.apps.warm_shards:app",
            "--bootstrap", self.bootstrap, "--instance-id", instance, "--log-format", "json",
            *extra,
        ]  # fmt: skip
        with (self.tmp / f"{instance}.log").open("wb") as log:
            process = subprocess.Popen(
                argv,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={
                    **os.environ,
                    "WARM_SHARDS_OUT": str(self.out),
                    "WARM_SHARDS_APP": self.app,
                    "WORKGROUP_INSTANCE_ID": instance,
                    "PYTHONUNBUFFERED": "1",
                },
            )
        self.processes[instance] = process
        return process

    def records(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line]

    def holders(self) -> dict[str, str]:
        """Each shard's active holder now (by instance)."""
        out: dict[str, str] = {}
        for r in self.records():
            if r["event"] == "active":
                out[r["key"]] = r["instance"]
            elif out.get(r["key"]) == r["instance"]:
                del out[r["key"]]
        return out

    def owned(self, instance: str) -> int:
        return sum(1 for who in self.holders().values() if who == instance)

    def wait_for(self, what: str, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.05)
        logs = "\n".join(p.read_text()[-3000:] for p in sorted(self.tmp.glob("*.log")))
        raise AssertionError(f"timed out waiting for {what}; holders {self.holders()}\n{logs}")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "workgroup", *args, "--bootstrap", self.bootstrap],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S + 30,
            check=False,
        )

    def log_events(self, instance: str) -> list[dict[str, Any]]:
        out = []
        for line in (self.tmp / f"{instance}.log").read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def check_exclusive(self) -> None:
        active: dict[str, str] = {}
        for r in sorted(self.records(), key=lambda r: r["time"]):
            if r["event"] == "active":
                assert r["key"] not in active, f"{r['key']}: two active holders"
                active[r["key"]] = r["instance"]
            elif active.get(r["key"]) == r["instance"]:
                del active[r["key"]]

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
            process.wait(10)


@pytest.fixture
def daemons(bootstrap: str, tmp_path: Path) -> Iterator[Daemons]:
    group = Daemons(bootstrap, tmp_path)
    try:
        yield group
    finally:
        group.close()


def test_drain_undrain_and_drain_on_stop_with_real_daemons(daemons: Daemons) -> None:
    group = f"{daemons.app}.shard"
    a = daemons.start("a", "--drain-on-stop")
    b = daemons.start("b")
    daemons.wait_for("two shards each", lambda: daemons.owned("a") == daemons.owned("b") == 2)
    drained = daemons.cli("drain", group, "--instance-id", "b", "--wait", "--wait-timeout-s", "50")
    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert "drained: group Stable, member draining, owns 0" in drained.stdout
    daemons.wait_for("a holds every shard", lambda: daemons.owned("a") == 4)
    assert b.poll() is None  # b runs on, owning nothing
    undrained = daemons.cli("undrain", group, "--instance-id", "b")
    assert undrained.returncode == 0, undrained.stdout + undrained.stderr
    daemons.wait_for("b works again", lambda: daemons.owned("b") == 2)
    # SIGTERM with --drain-on-stop: a hands its shards to b (warmed up) before it exits.
    held_by_a = sorted(k for k, who in daemons.holders().items() if who == "a")
    signalled = time.time()
    a.send_signal(signal.SIGTERM)
    assert a.wait(TIMEOUT_S) == 0
    events = [e["event"] for e in daemons.log_events("a")]
    assert "app.drained" in events, events
    assert events.index("app.drained") < events.index("app.stopped")
    daemons.wait_for("b holds every shard", lambda: daemons.owned("b") == 4)
    daemons.check_exclusive()
    # Each cut-over cost a round, not b's 0.5 s preparation: b had warmed up.
    records = [r for r in daemons.records() if r["time"] >= signalled]
    gaps = []
    for key in held_by_a:
        ended = next(r["time"] for r in records if r["key"] == key and r["instance"] == "a")
        started = next(
            r["time"]
            for r in records
            if r["key"] == key and r["instance"] == "b" and r["event"] == "active"
        )
        gaps.append(started - ended)
    print("drain-on-stop cut-over gaps (s):", sorted(round(g, 3) for g in gaps))
    assert len(gaps) == 2
    assert max(gaps) < PREPARE_S, gaps
