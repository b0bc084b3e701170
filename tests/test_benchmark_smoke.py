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


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_failover_benchmark_prints_its_tables() -> None:
    script = SCRIPT.parent / "failover.py"
    completed = subprocess.run(
        [sys.executable, str(script), "--trials", "1", "--items", "100", "--rest-s", "1"],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
        cwd=SCRIPT.parent.parent,
    )
    output = completed.stdout
    assert completed.returncode == 0, completed.stderr + output
    assert "SIGTERM → next leader acts" in output
    assert "SIGKILL → next leader acts" in output
    assert "100 idle resources" in output
    assert "sessions lost          0 while starting, 0 at rest" in output


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_tls_benchmark_prints_its_table() -> None:
    script = SCRIPT.parent / "tls.py"
    completed = subprocess.run(
        [
            sys.executable,
            str(script),
            "--connections",
            "20",
            "--members",
            "5",
            "--seconds",
            "1",
            "--logins",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "heartbeats/s" in completed.stdout
    assert "TLS: set-up x" in completed.stdout
    assert "SCRAM-SHA-512" in completed.stdout


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_planned_moves_benchmark_prints_its_table() -> None:
    script = SCRIPT.parent / "planned_moves.py"
    completed = subprocess.run(
        [sys.executable, str(script), "--shards", "2", "--repetitions", "1", "--prepare-s", "0.3"],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
        cwd=SCRIPT.parent.parent,
    )
    output = completed.stdout
    assert completed.returncode == 0, completed.stderr[-2000:] + output
    assert "Planned moves, plain handlers" in output
    rows = [
        line.split()
        for line in output.splitlines()
        if line.split()[:1] in (["join"], ["drain-on-stop"])
    ]
    assert sorted((r[0], r[1]) for r in rows) == [
        ("drain-on-stop", "plain"), ("drain-on-stop", "warm-up"),
        ("join", "plain"), ("join", "warm-up"),
    ]  # fmt: skip
    for row in rows:
        assert int(row[2]) == 1  # one planned move each
        assert row[6] == "0"  # never owned twice


@pytest.mark.timeout(120)
def test_keyspace_lookup_benchmark_routes_every_key_through_the_directory() -> None:
    script = SCRIPT.parent / "keyspace_lookup.py"
    completed = subprocess.run(
        [sys.executable, str(script), "--only", "directory", "--keys", "2000",
         "--repeat", "1", "--slices", "100,1000"],
        capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    output = completed.stdout
    assert completed.returncode == 0, completed.stderr + output
    assert "Directory.owner(keyspace, key)" in output  # the title (wrapped to the table)
    # Every key of both tables answered (an owner for each: no slice moves).
    rows = [line for line in output.splitlines() if " str " in line or " int " in line]
    assert len(rows) == 4
    assert all("100%" in row for row in rows), output


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_keyspace_balance_benchmark_compares_the_three_layouts() -> None:
    script = SCRIPT.parent / "keyspace_balance.py"
    completed = subprocess.run(
        [sys.executable, str(script), "--daemons", "2", "--keys", "10000", "--moves", "1",
         "--move-every-s", "4", "--requests-per-tick", "2000", "--per-key-budget-s", "5"],
        capture_output=True, text=True, timeout=150, check=False, cwd=SCRIPT.parent.parent,
    )  # fmt: skip
    output = completed.stdout
    assert completed.returncode == 0, completed.stderr[-2000:] + output
    assert "load simulated in-process" in output
    assert "(a) keyspace: 2 daemons" in output
    assert "(b) consistent hashing: 64 shards" in output
    assert "(c) one lease per key" in output
    # A row per hot spot in (a) and (b), each with a measured ratio.
    for label in ("start", "move 1"):
        rows = [line for line in output.splitlines() if f" {label} " in line]
        assert len(rows) == 2, output
    # (c) catalogued 1,000 and 10,000 keys.
    assert " 10,000 " in output
    assert "Directory.owner lookups/s" in output
