"""examples/member.py: several copies share the shards, and Ctrl-C ends each cleanly."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workgroup.testing import run_coordinator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "member.py"
SHARDS = {("shard", key) for key in range(12)}
Shard = tuple[str, int]


class Copy:
    """One running copy of the example and what its output says it owns."""

    def __init__(self, bootstrap: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKGROUP_")}
        self.process = subprocess.Popen(
            [sys.executable, str(EXAMPLE), bootstrap],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.owned: set[Shard] = set()
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n"))
                if line.startswith("now own "):
                    listed = line.removeprefix("now own ").rsplit(" generation ", 1)[0]
                    self.owned |= set(ast.literal_eval(listed))
                elif line.startswith("give up "):
                    self.owned -= set(ast.literal_eval(line.removeprefix("give up ")))

    def snapshot(self) -> tuple[set[Shard], list[str]]:
        with self.lock:
            return set(self.owned), list(self.lines)

    def stderr(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read()


def test_three_copies_share_the_shards_and_stop_on_ctrl_c() -> None:
    with run_coordinator("--initial-rebalance-delay-ms", "0") as coordinator:
        copies = [Copy(coordinator.bootstrap) for _ in range(3)]
        try:
            deadline = time.monotonic() + 25
            while True:
                owned = [copy.snapshot()[0] for copy in copies]
                if sorted(map(len, owned)) == [4, 4, 4] and set().union(*owned) == SHARDS:
                    break
                for copy in copies:
                    assert copy.process.poll() is None, copy.stderr()
                assert time.monotonic() < deadline, [copy.snapshot()[1] for copy in copies]
                time.sleep(0.1)
            for copy in copies:
                copy.process.send_signal(signal.SIGINT)
            for copy, owned_then in zip(copies, owned, strict=True):
                assert copy.process.wait(15) == 0
                copy.reader.join(5)
                stderr = copy.stderr()
                assert "Traceback" not in stderr, stderr
                left, lines = copy.snapshot()
                assert left == set(), lines  # everything revoked on the way out
                assert lines[-1].startswith("give up "), lines
                assert set(ast.literal_eval(lines[-1].removeprefix("give up "))) == owned_then
        finally:
            for copy in copies:
                if copy.process.poll() is None:
                    copy.process.kill()
                copy.process.wait()
                for pipe in (copy.process.stdout, copy.process.stderr):
                    if pipe is not None:
                        pipe.close()


def test_the_readme_shows_the_example_as_it_is() -> None:
    """The README's "A member in Python" is the program this file runs."""
    readme = (EXAMPLE.parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## A member in Python", 1)[1]
    shown = section.split("```python\n", 1)[1].split("```", 1)[0]
    source = EXAMPLE.read_text(encoding="utf-8")
    assert shown == source[source.index("import asyncio") :]
