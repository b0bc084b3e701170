"""A command leaves the directory it runs in as it was: no ``.hypothesis``
directory (kio would build hypothesis strategies, and their cache, at import)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def workgroup(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workgroup", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    "args",
    [["--help"], ["describe", "g", "--bootstrap"], ["coordinator", "--help"]],
    ids=["help", "describe", "coordinator-help"],
)
def test_a_command_leaves_no_hypothesis_directory(args: list[str], tmp_path: Path) -> None:
    if args[-1] == "--bootstrap":
        args = [*args, f"127.0.0.1:{closed_port()}"]
    done = workgroup(*args, cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    assert sorted(os.listdir(tmp_path)) == []


def test_the_library_loads_kio_without_hypothesis(tmp_path: Path) -> None:
    # Every module that speaks the wire: the member, the fence, the coordinator.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, workgroup.fence, workgroup.coordinator.wire, workgroup.admin; "
            "print('hypothesis' in sys.modules)",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "False", done.stderr
    assert os.listdir(tmp_path) == []
