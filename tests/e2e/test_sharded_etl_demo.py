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
