"""examples/async_shards: two daemons, input arriving, one SIGKILLed; every event counts
once in the outputs and in the publisher's summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from examples.sharded_etl.feed import Feeder
from workgroup.testing import run_coordinator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]


def daemon(bootstrap: str, data: Path, name: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "workgroup", "run", "examples.async_shards.app:app",
             "--bootstrap", bootstrap, "--instance-id", name, "--log-format", "json"],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            env={**os.environ, "ASYNC_DATA": str(data), "ASYNC_SHARDS": "4"},
        )  # fmt: skip


def outputs(data: Path) -> Counter[str]:
    totals: Counter[str] = Counter()
    for path in (data / "output").glob("*/*.json"):
        for customer, row in json.loads(path.read_text()).items():
            totals[customer] += row["events"]
    return totals


def wait(condition: object, what: str, timeout_s: float = 40.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_every_event_counts_once_across_a_sigkill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    feeder = Feeder(data, 4, rate=400)
    with run_coordinator(log=tmp_path / "coordinator.log") as coordinator:
        a = daemon(coordinator.bootstrap, data, "a", tmp_path / "a.log")
        b = daemon(coordinator.bootstrap, data, "b", tmp_path / "b.log")
        try:
            feeder.start(seconds=60)
            wait(lambda: sum(outputs(data).values()) > 500, "outputs")
            a.send_signal(signal.SIGKILL)
            a.wait()
            time.sleep(3)
            feeder.stop()
            wait(lambda: sum(outputs(data).values()) == feeder.written, "every event processed")
            summary = data / "summary.json"
            wait(
                lambda: (
                    summary.exists() and json.loads(summary.read_text())["events"] == feeder.written
                ),
                "the summary",
            )
        finally:
            feeder.stop()
            for process in (a, b):
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    process.wait(20)
    expected: Counter[str] = Counter()
    for path in (data / "input").glob("shard-*/*.json"):
        for line in path.read_text().splitlines():
            expected[json.loads(line)["customer"]] += 1
    assert outputs(data) == expected
    summary = json.loads((data / "summary.json").read_text())
    assert {c: row["events"] for c, row in summary["customers"].items()} == dict(expected)
    assert summary["token"] >= 1
