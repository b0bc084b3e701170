"""A stopping or revoking daemon never overlaps its successor (``workgroup run``
daemons as real processes on the embedded coordinator).

Three daemons share 12 shards (session 3 s, grace 4.5 s: longer than the
session).  Odd shards' handlers stop as soon as ``lease.revoked`` turns true;
even shards' handlers are slow (``tests/e2e/apps/slow_stop.py``).  Every
handler records its start and end: no shard may start in one process before
its previous holder's handler ended, prompt shards move at once, slow ones
when they stop.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from workgroup.testing import run_coordinator

ROOT = Path(__file__).resolve().parents[2]
#: As the app reads them (the issue's own figures: SLOW_STOP_SESSION_MS=6000
#: SLOW_STOP_GRACE_MS=10000; the defaults keep the grace beyond the session).
GRACE_S = int(os.environ.get("SLOW_STOP_GRACE_MS", "4500")) / 1000
SHARDS = 12
#: A slow shard moves within this of its handler's end (the measured hand-over is
#: ~0.5 s; a new process's start under "process" isolation adds up to seconds).
PROMPT_MOVE_S = 3.5

pytestmark = pytest.mark.slow

Record = dict[str, Any]
#: (pid, start, end or None) per shard, in start order.
Intervals = dict[str, list[tuple[int, float, float | None]]]


class Daemons:
    def __init__(self, bootstrap: str, tmp_path: Path, style: str, **env: str) -> None:
        self.bootstrap = bootstrap
        self.dir = tmp_path
        self.out = tmp_path / "records.jsonl"
        self.armed = tmp_path / "armed"
        self.env = {
            **os.environ,
            "SLOW_STOP_OUT": str(self.out),
            "SLOW_STOP_ARMED": str(self.armed),
            "SLOW_STOP_STYLE": style,
            "SLOW_STOP_APP": f"slowstop-{tmp_path.name}",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, *extra: str, instance_id: str | None = None) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable, "-m", "workgroup", "run", "tests.e2e.apps.slow_stop:app",
            "--bootstrap", self.bootstrap, "--log-format", "json",
        ]  # fmt: skip
        if instance_id:
            argv += ["--instance-id", instance_id]
        argv += extra
        with (self.dir / f"daemon-{len(self.processes)}.log").open("wb") as log:
            process = subprocess.Popen(
                argv,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=self.env,
            )
        self.processes.append(process)
        return process

    def records(self) -> list[Record]:
        if not self.out.exists():
            return []
        lines = self.out.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def intervals(self) -> Intervals:
        open_runs: dict[tuple[int, str], list[tuple[int, float, float | None]]] = {}
        found: Intervals = {}
        for r in sorted(self.records(), key=lambda r: r["time"]):
            key = r["key"]
            runs = found.setdefault(key, [])
            if r["event"] == "start":
                runs.append((r["pid"], r["time"], None))
                open_runs.setdefault((r["pid"], key), []).append(runs[-1])
            else:
                started = open_runs[(r["pid"], key)].pop(0)
                runs[runs.index(started)] = (started[0], started[1], r["time"])
        for runs in found.values():
            runs.sort(key=lambda run: run[1])
        return found

    def holders(self) -> dict[str, int]:
        """The process running each shard now."""
        return {
            key: runs[-1][0]
            for key, runs in self.intervals().items()
            if runs and runs[-1][2] is None
        }

    def wait_for(self, what: str, condition: Callable[[], Any], timeout: float = 40.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = condition()
            if found:
                return found
            time.sleep(0.05)
        logs = "\n".join(p.read_text()[-3000:] for p in sorted(self.dir.glob("daemon-*.log")))
        raise AssertionError(f"timed out waiting for {what}; holders {self.holders()}\n{logs}")

    def wait_spread(self, processes: list[subprocess.Popen[bytes]]) -> dict[str, int]:
        """Every shard runs, evenly over ``processes``, unchanged for a second."""
        pids = {p.pid for p in processes}
        share = SHARDS // len(pids)
        seen: list[dict[str, int]] = []

        def spread() -> dict[str, int] | None:
            holders = self.holders()
            counts = [list(holders.values()).count(pid) for pid in pids]
            even = len(holders) == SHARDS and set(holders.values()) <= pids
            even = even and all(c == share for c in counts)
            if not even or (seen and seen[-1][0] != holders):
                seen[:] = []
            if even:
                seen.append((holders, time.monotonic()))  # type: ignore[arg-type]
                if time.monotonic() - seen[0][1] >= 1.0:  # type: ignore[index]
                    return holders
            return None

        result: dict[str, int] = self.wait_for(f"{SHARDS} shards over {len(pids)}", spread)
        return result

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)


def assert_no_overlap(intervals: Intervals) -> None:
    """No shard started anywhere before its previous holder's handler ended."""
    for key, runs in intervals.items():
        for previous, following in itertools.pairwise(runs):
            pid, _, ended = previous
            assert ended is not None, f"shard {key}: {pid}'s handler never ended"
            assert following[1] >= ended, (
                f"shard {key}: started in {following[0]} at {following[1]:.3f} while "
                f"{pid}'s handler ran (ended {ended})"
            )


def moved_after(intervals: Intervals, key: str, pid: int, since: float) -> tuple[float, float]:
    """When ``pid``'s run of ``key`` (running at ``since``) ended, and when the next
    run, in another process, started."""
    runs = intervals[key]
    index = next(
        i
        for i, (p, start, end) in enumerate(runs)
        if p == pid and start <= since and (end is None or end >= since)
    )
    _, _, ended = runs[index]
    assert ended is not None, f"shard {key} still runs in {pid}"
    following = runs[index + 1]
    assert following[0] != pid
    return ended, following[1]


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with run_coordinator(
        "--min-session-timeout-ms", "500", "--initial-rebalance-delay-ms", "0"
    ) as server:
        yield server.bootstrap


def started(daemons: Daemons, count: int, **options: Any) -> list[subprocess.Popen[bytes]]:
    processes = [
        daemons.start(
            *options.get("extra", ()),
            instance_id=f"{options['static']}-{i}" if options.get("static") else None,
        )
        for i in range(count)
    ]
    daemons.wait_spread(processes)
    daemons.armed.touch()
    return processes


def mixed(daemons: Daemons, processes: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """A process that runs both slow and prompt shards (12 over 3: there is one)."""
    holders = daemons.holders()
    for process in processes:
        keys = [int(k[1:]) for k, pid in holders.items() if pid == process.pid]
        if {k % 2 for k in keys} == {0, 1}:
            return process
    raise AssertionError(f"no process runs both kinds of shards: {holders}")


def check_stop(daemons: Daemons, victim: subprocess.Popen[bytes], signum: int) -> None:
    """Stop ``victim`` with ``signum``; check the hand-over of each of its shards."""
    mine = sorted(k for k, pid in daemons.holders().items() if pid == victim.pid)
    assert len(mine) == SHARDS // 3
    stopped_at = time.time()
    victim.send_signal(signum)
    assert victim.wait(GRACE_S + 15) == 0
    survivors = [p for p in daemons.processes if p.poll() is None]
    daemons.wait_spread(survivors)
    intervals = daemons.intervals()
    assert_no_overlap(intervals)
    slow_ends: list[float] = []
    prompt_starts: list[float] = []
    for key in mine:
        ended, next_start = moved_after(intervals, key, victim.pid, stopped_at)
        if int(key[1:]) % 2:  # prompt: moved at once, held back by no slow shard
            prompt_starts.append(next_start)
        else:  # slow: ran its grace period (or its long step), moved when it stopped
            assert ended - stopped_at >= GRACE_S - 0.5, (key, ended - stopped_at)
            assert next_start - ended < PROMPT_MOVE_S, (key, next_start - ended)
            slow_ends.append(ended)
        print(f"{key}: ended {ended - stopped_at:.2f} s, next {next_start - stopped_at:.2f} s")
    assert slow_ends
    assert prompt_starts
    # Held back by no slow shard: every prompt shard runs again before the first slow
    # one has even stopped.  (An absolute bound would also count the start of the
    # successor's handler, a new process under "process" isolation: seconds on a
    # loaded 2-core machine.)
    assert max(prompt_starts) < min(slow_ends), (prompt_starts, slow_ends)


@pytest.mark.parametrize(
    ("style", "signum"),
    [("async", signal.SIGTERM), ("thread", signal.SIGINT), ("process", signal.SIGTERM)],
)
def test_a_stopped_daemon_moves_each_shard_when_its_own_handler_stopped(
    bootstrap: str, tmp_path: Path, style: str, signum: int
) -> None:
    daemons = Daemons(bootstrap, tmp_path, style)
    try:
        processes = started(daemons, 3)
        check_stop(daemons, mixed(daemons, processes), signum)
    finally:
        daemons.close()


def test_a_static_daemon_told_to_leave_on_stop_hands_each_shard_over(
    bootstrap: str, tmp_path: Path
) -> None:
    daemons = Daemons(bootstrap, tmp_path, "async")
    try:
        processes = started(daemons, 3, static="leave", extra=("--leave-on-stop",))
        check_stop(daemons, mixed(daemons, processes), signal.SIGTERM)
    finally:
        daemons.close()


def test_a_rolling_restart_of_static_daemons_never_overlaps(bootstrap: str, tmp_path: Path) -> None:
    daemons = Daemons(bootstrap, tmp_path, "async")
    try:
        processes = started(daemons, 3, static="roll")
        for i in range(3):
            victim = processes[i]
            victim.send_signal(signal.SIGTERM)
            assert victim.wait(GRACE_S + 15) == 0
            processes[i] = daemons.start(instance_id=f"roll-{i}")
            daemons.wait_spread(processes)
        assert_no_overlap(daemons.intervals())
    finally:
        daemons.close()


def test_a_daemon_joining_never_overlaps_the_slow_handlers_it_takes_over(
    bootstrap: str, tmp_path: Path
) -> None:
    daemons = Daemons(bootstrap, tmp_path, "thread")
    try:
        processes = started(daemons, 2)
        joined_at = time.time()
        newcomer = daemons.start()
        holders = daemons.wait_spread([*processes, newcomer])
        intervals = daemons.intervals()
        assert_no_overlap(intervals)
        taken = [k for k, pid in holders.items() if pid == newcomer.pid]
        slow_taken = [k for k in taken if int(k[1:]) % 2 == 0]
        for key in slow_taken:  # it waited for the old thread's long step
            runs = intervals[key]
            previous = runs[-2]
            assert previous[2] is not None
            assert previous[2] - joined_at >= GRACE_S
    finally:
        daemons.close()


def test_a_thread_that_outlives_the_stop_ends_with_the_process_before_its_shard_moves(
    bootstrap: str, tmp_path: Path
) -> None:
    # The long step (grace + 30 s) outlives the member's close timeout (grace + 5 s).
    daemons = Daemons(bootstrap, tmp_path, "thread", SLOW_STOP_THREAD_OVERRUN_S="30")
    try:
        processes = started(daemons, 3)
        victim = mixed(daemons, processes)
        mine = sorted(k for k, pid in daemons.holders().items() if pid == victim.pid)
        victim.send_signal(signal.SIGTERM)
        assert victim.wait(GRACE_S + 15) == 0
        exited_at = time.time()
        log = (tmp_path / f"daemon-{processes.index(victim)}.log").read_text()
        assert "app.threads_abandoned" in log
        daemons.wait_spread([p for p in processes if p is not victim])
        intervals = daemons.intervals()
        for key in mine:
            runs = intervals[key]
            if int(key[1:]) % 2 == 0:  # the thread never ended: the process ended it
                killed = next(r for r in runs if r[0] == victim.pid)
                assert killed[2] is None
                successor = runs[runs.index(killed) + 1]
                assert successor[1] >= exited_at
        assert_no_overlap({k: [r for r in v if r[0] != victim.pid] for k, v in intervals.items()})
    finally:
        daemons.close()


def test_a_grace_period_that_cannot_fit_in_the_rebalance_timeout_is_refused_at_start() -> None:
    argv = [sys.executable, "-m", "workgroup", "run", "tests.e2e.apps.slow_stop:app"]
    result = subprocess.run(
        [*argv, "--grace-ms", "60000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SLOW_STOP_OUT": os.devnull, "SLOW_STOP_ARMED": os.devnull},
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "grace_ms (60000)" in lines[0]
    assert f"rebalance_timeout_ms ({int(GRACE_S * 1000) + 15_000})" in lines[0]
