"""The protocol tour (examples/protocol_tour/demo.py, the first `make demo`): it runs every
step, fails loudly, and cleans up."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

DEMO = Path(__file__).resolve().parents[2] / "examples" / "protocol_tour" / "demo.py"


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(DEMO), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=DEMO.parents[2],
    )


def stopped_pids(output: str) -> list[int]:
    match = re.search(r"^stopped processes ([\d, ]+)$", output, re.MULTILINE)
    assert match, f"the demo did not report what it stopped:\n{output}"
    return [int(pid) for pid in match[1].split(", ")]


def assert_gone(pids: list[int]) -> None:
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_demo_runs_every_step_and_rolls_to_v2() -> None:
    process = spawn()
    try:
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
    assert "Traceback" not in output
    summaries = re.findall(
        r"^generation (\d+) · protocol (\S+) · coordinator: Stable, 3 members · took ([\d.]+) s$",
        output,
        re.MULTILINE,
    )
    assert len(summaries) == 6, output
    protocols = [protocol for _, protocol, _ in summaries]
    # The group stays on v1 until the last member advertises v2.
    assert protocols == ["cooperative-sticky.v1"] * 5 + ["cooperative-sticky.v2"], output
    generations = [int(g) for g, _, _ in summaries]
    assert generations[5] > generations[4], "moving to v2 takes a rebalance"
    # A SIGKILLed static member restarted with its instance id takes its place back.
    assert re.search(r"c took back the same shards; generation unchanged", output), output
    # Every table lists all 12 shards exactly once.
    for table in re.findall(r"┡.*?└", output, re.DOTALL):
        owned = [
            int(key)
            for row in re.findall(r"^│ [abc] .*$", table, re.MULTILINE)
            for key in row.split("│")[6].split()
        ]
        assert sorted(owned) == list(range(12)), table
    assert "demo complete" in output
    assert_gone(stopped_pids(output))


def test_ctrl_c_stops_every_process() -> None:
    process = spawn()
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 90
    try:
        for line in process.stdout:
            lines.append(line)
            if line.startswith("2. SIGKILL c"):
                break
            assert time.monotonic() < deadline, "".join(lines)
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = "".join(lines) + rest
    assert process.returncode == 130, output
    assert "interrupted" in output
    pids = stopped_pids(output)
    assert len(pids) >= 4  # the coordinator and the members started so far
    assert_gone(pids)


def test_a_step_that_does_not_converge_fails_the_demo() -> None:
    process = spawn("--step-timeout", "0.2")
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 1, output
    assert "step failed" in output
    assert "did not converge within" in output
    assert_gone(stopped_pids(output))
    kept = re.search(r"^logs in (\S+)$", output, re.MULTILINE)
    assert kept, "a failed demo keeps the processes' logs"
    shutil.rmtree(kept[1])
