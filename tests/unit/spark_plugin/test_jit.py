"""A JVM's JIT compiler threads at a lower priority than its work, on a real JVM
(a single-file Java program waiting on its standard input)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import threads
from workgroup_spark import jit

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
    pytest.mark.skipif(not shutil.which("java"), reason="needs java"),
]

WAITER = """
public class Waiter {
    public static void main(String[] args) throws Exception {
        System.out.println("ready");
        System.in.read();
    }
}
"""


def compilers(pid: int) -> dict[int, int]:
    return {tid: nice for tid, (name, nice) in threads(pid).items() if "CompilerThre" in name}


@pytest.fixture
def jvm(tmp_path: Path) -> Iterator[int]:
    source = tmp_path / "Waiter.java"
    source.write_text(WAITER)
    with subprocess.Popen(
        ["java", str(source)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        try:
            assert process.stdout.readline().strip() == "ready"
            yield process.pid
        finally:
            process.stdin.close()  # the program ends
            process.wait(30)


def test_only_the_compiler_threads_are_made_nicer(jvm: int) -> None:
    before = threads(jvm)
    assert compilers(jvm), f"no compiler thread among {sorted(n for n, _ in before.values())}"
    assert jit.lower_compiler_priority(jvm) >= 1
    # A suite run under `nice` starts the JVM nicer still: never lowered (rule 3).
    started = os.getpriority(os.PRIO_PROCESS, jvm)
    assert set(compilers(jvm).values()) == {max(jit.COMPILER_NICENESS, started)}
    for tid, (name, nice) in threads(jvm).items():
        if "CompilerThre" not in name and tid in before:
            assert nice == before[tid][1], f"{name} went from {before[tid][1]} to {nice}"


def test_a_niceness_is_raised_never_lowered(jvm: int) -> None:
    first = min(compilers(jvm))  # HotSpot keeps its first compiler threads
    lowered = max(jit.COMPILER_NICENESS, os.getpriority(os.PRIO_PROCESS, jvm))
    os.setpriority(os.PRIO_PROCESS, first, 19)  # the user's, or an earlier pass's
    jit.lower_compiler_priority(jvm)
    jit.lower_compiler_priority(jvm)  # again: nothing changes
    niceness = compilers(jvm)
    assert niceness.pop(first) == 19
    assert set(niceness.values()) <= {lowered}


def test_a_process_without_compiler_threads_or_gone_is_left_alone() -> None:
    mine = os.getpriority(os.PRIO_PROCESS, os.getpid())
    assert jit.lower_compiler_priority(os.getpid()) == 0  # Python: no such threads
    assert os.getpriority(os.PRIO_PROCESS, os.getpid()) == mine
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert jit.lower_compiler_priority(gone.pid) == 0
