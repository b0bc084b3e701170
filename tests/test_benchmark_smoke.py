"""The coordinator benchmark script runs end to end and prints its tables.

Only a smoke test: the benchmark's numbers are never asserted in the suite.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "coordinator.py"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_benchmark_prints_tables_for_ten_embedded_members() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--sizes",
            "10",
            "--backends",
            "embedded",
            "--heartbeat-seconds",
            "1",
            "--join-timeout",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    output = completed.stdout
    assert completed.returncode == 0, completed.stderr + output
    assert "Join from empty" in output
    assert "Sustained heartbeats" in output
    assert "heartbeats/s" in output
    # The 10-member row reached a stable group and measured heartbeats.
    assert "not stable" not in output
    assert "skipped" not in output
    assert "failed" not in output
