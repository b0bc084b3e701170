"""The rolling-bounce benchmark runs end to end on the embedded coordinator.

A smoke test: timings are never asserted, only what must hold on any machine —
every step settles, no resource ever has two owners, a static restart causes no
rebalance while a dynamic one does, and the JSON output matches the table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "rolling_bounce.py"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_quick_bounce_on_the_embedded_coordinator(tmp_path: Path) -> None:
    json_out = tmp_path / "bounce.json"
    completed = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--backends",
            "embedded",
            "--clients",
            "workgroup",
            "--json-out",
            str(json_out),
        ],
        capture_output=True,
        text=True,
        timeout=220,
        check=False,
    )
    output = completed.stdout
    assert completed.returncode == 0, completed.stderr + output
    assert "Rolling bounce" in output
    assert "Traceback" not in completed.stderr

    report = json.loads(json_out.read_text())
    members = report["settings"]["members"]
    rows = {row["mode"]: row for row in report["results"]}
    assert set(rows) == {"eager", "cooperative", "cooperative+static"}
    for mode, row in rows.items():
        assert row["client"] == "workgroup"
        assert row["backend"] == "embedded"
        assert row["status"] == "ok", (mode, row["detail"], row["steps"])
        assert row["settled_steps"] == members
        assert len(row["steps"]) == members
        assert row["double"] == 0.0, f"{mode}: a resource had two owners"
        assert row["pause"] > 0.0, f"{mode}: a bounced member's resources wait for it"
        assert row["pause"] == pytest.approx(sum(s["pause"] for s in row["steps"]), abs=0.5)
    # A graceful stop and restart of a dynamic member rebalances at least once...
    assert rows["eager"]["rebalances"] >= members
    assert rows["cooperative"]["rebalances"] >= members
    # ...a static member takes its place back without one.
    assert rows["cooperative+static"]["rebalances"] == 0
    # Eager revokes everything in each rebalance; cooperative only the bounced member's share.
    assert rows["eager"]["max_unowned"] == report["settings"]["resources"]
    assert rows["cooperative"]["max_unowned"] < report["settings"]["resources"]
    target = "target: workgroup cooperative+static"
    assert any(line.startswith(target) for line in report["verdicts"])
