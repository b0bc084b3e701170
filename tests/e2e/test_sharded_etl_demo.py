"""``make demo`` (examples/sharded_etl/demo.py) without Java: one line that says what
to install, exit 2, nothing started.  (The pipeline itself is tested in tests/e2e/spark.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_missing_java_is_one_clear_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.sharded_etl.demo", "--output", str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "JAVA_HOME": str(tmp_path / "no-jdk"), "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 2
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith("error: Spark needs Java (JAVA_HOME has no bin/java)")
    assert "openjdk-17-jre-headless" in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_daemon_without_java_stops_before_joining_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "workgroup", "run", "examples.sharded_etl.app:app",
         "--bootstrap", "127.0.0.1:1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "JAVA_HOME": str(tmp_path / "no-jdk"), "ETL_DATA": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [line for line in done.stderr.splitlines() if line.strip()], done.stderr
    assert len(errors) == 1
    assert "Spark needs Java (JAVA_HOME has no bin/java)" in errors[0]
