"""examples/rolling_upgrade runs as written: v1 until the last member has v2, then v2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

ROOT = Path(__file__).resolve().parents[2]


def test_the_rolling_upgrade_moves_the_group_to_v2_with_the_last_member() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.rolling_upgrade.run"],
        cwd=ROOT, capture_output=True, text=True, timeout=140, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "all on release 1: the group speaks cooperative-sticky.v1"
    assert lines[1].endswith("cooperative-sticky.v1")  # a has v2, b and c do not
    assert lines[2].endswith("cooperative-sticky.v1")
    assert lines[3] == "c on release 2 (a=2, b=2, c=2): the group speaks cooperative-sticky.v2"
    assert lines[-1].startswith("upgraded:")
