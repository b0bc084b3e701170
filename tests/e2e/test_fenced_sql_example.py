"""examples/fenced_sql: two daemons whose writers run in their own processes with
portable fences.  One daemon is frozen (SIGSTOP) past its session while its
writers go on: they are refused and stop by themselves, the other daemon takes
the accounts with higher tokens, and every counter equals the steps applied,
with no lower-token step applied after a higher one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from workgroup.testing import run_coordinator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

ROOT = Path(__file__).resolve().parents[2]
ACCOUNTS = [f"account-{i}" for i in range(4)]


def daemon(bootstrap: str, tmp: Path, name: str) -> subprocess.Popen[bytes]:
    with (tmp / f"{name}.log").open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "workgroup", "run", "examples.fenced_sql.app:app",
             "--bootstrap", bootstrap, "--instance-id", name, "--log-format", "json"],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
            env={**os.environ, "FENCED_SQL_DB": str(tmp / "fenced.db"),
                 "FENCED_SQL_LOG": str(tmp / "steps.jsonl"), "FENCED_SQL_ACCOUNTS": "4"},
        )  # fmt: skip


def entries(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "steps.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def wait(condition: object, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_frozen_daemons_writers_stop_and_every_step_counts_once(tmp_path: Path) -> None:
    with run_coordinator(log=tmp_path / "coordinator.log") as coordinator:
        a = daemon(coordinator.bootstrap, tmp_path, "a")
        wait(
            lambda: (
                {e["account"] for e in entries(tmp_path) if e["event"] == "step"} == set(ACCOUNTS)
            ),
            "a's writers on every account",
        )
        b = daemon(coordinator.bootstrap, tmp_path, "b")
        try:
            # b takes some accounts: a's writers for those stop when their lease ends.
            wait(lambda: len({e["pid"] for e in entries(tmp_path)}) > len(ACCOUNTS), "b writes")
            a.send_signal(signal.SIGSTOP)  # the daemon alone: its writers go on
            frozen_at = time.time()

            def a_writers_stopped() -> bool:
                log = entries(tmp_path)
                stopped = {e["pid"] for e in log if e["event"] in ("refused", "lost")}
                went_on = {e["pid"] for e in log if e["daemon"] == a.pid and e["time"] > frozen_at}
                return went_on <= stopped

            def b_has_everything() -> bool:
                late = [e for e in entries(tmp_path) if e["time"] > frozen_at]
                written = {e["account"] for e in late if e["daemon"] == b.pid}
                return written == set(ACCOUNTS)

            wait(b_has_everything, "b's writers on every account")
            wait(a_writers_stopped, "the frozen daemon's writers to stop")
            a.send_signal(signal.SIGCONT)
            time.sleep(1.0)
        finally:
            for process in (a, b):
                if process.poll() is None:
                    process.send_signal(signal.SIGCONT)
                    process.send_signal(signal.SIGTERM)
                    process.wait(30)
    log = entries(tmp_path)
    refusals = [e for e in log if e["event"] in ("refused", "lost")]
    assert refusals, "no writer of the frozen daemon was refused"
    # No step with a lower token applied after a step with a higher one.
    highest: dict[str, int] = defaultdict(int)
    for entry in log:
        if entry["event"] == "step":
            assert entry["token"] >= highest[entry["account"]], entry
            highest[entry["account"]] = entry["token"]
    checked = subprocess.run(
        [sys.executable, "-m", "examples.fenced_sql.check"],
        cwd=ROOT,
        env={
            **os.environ,
            "FENCED_SQL_DB": str(tmp_path / "fenced.db"),
            "FENCED_SQL_LOG": str(tmp_path / "steps.jsonl"),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert all(f"{account}:" in checked.stdout for account in ACCOUNTS)
