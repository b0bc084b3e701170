"""Signals in tools that start processes: SIGTERM and SIGHUP interrupt as Ctrl-C
does, and an interrupt while a process starts waits until the process is recorded
for the clean-up (a CI run's demo left a daemon running: the signal came between
its start and its record)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from examples.sharded_etl import cluster as etl_cluster
from workgroup.testing import servers
from workgroup.testing.signals import interrupt_on_termination, interrupts_deferred

#: ``subprocess.Popen`` itself: the tests below replace it in the module.
REAL_POPEN = subprocess.Popen
#: What the stand-in process keeps of the real start's arguments (not its program's env or cwd).
STREAM_AND_SESSION_ARGS = ("stdin", "stdout", "stderr", "start_new_session")
#: Long enough for the handler of a signal sent to this process to run.
SIGNAL_SETTLE_S = 0.2


class Interrupted(Exception):
    """What these tests' SIGHUP handler raises (not KeyboardInterrupt: that would
    end the whole test session if it escaped)."""


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


@pytest.fixture
def sighup_raises() -> Iterator[None]:
    previous = signal.signal(signal.SIGHUP, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


def _signal_self(signum: signal.Signals = signal.SIGHUP) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(SIGNAL_SETTLE_S)  # Python runs the handler between bytecodes


def test_sigterm_interrupts_as_ctrl_c_does() -> None:
    def run() -> None:
        with interrupt_on_termination():
            _signal_self(signal.SIGTERM)
            pytest.fail("the signal did not interrupt")

    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        run()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_signal_in_the_block_is_delivered_after_it(sighup_raises: None) -> None:
    done = []

    def run() -> None:
        with interrupts_deferred():
            _signal_self()
            done.append("the block ran to its end")

    with pytest.raises(Interrupted, match="SIGHUP"):
        run()
    assert done == ["the block ran to its end"]
    assert signal.getsignal(signal.SIGHUP) is _raise_interrupted


def test_each_signal_is_delivered_once(sighup_raises: None) -> None:
    delivered = []

    def run() -> None:
        with interrupts_deferred():
            _signal_self(signal.SIGTERM)
            _signal_self(signal.SIGTERM)
            _signal_self(signal.SIGHUP)

    previous = signal.signal(signal.SIGTERM, lambda signum, _: delivered.append(signum))
    try:
        with pytest.raises(Interrupted):
            run()
        time.sleep(SIGNAL_SETTLE_S)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert delivered == [signal.SIGTERM]


def test_no_signal_no_interrupt(sighup_raises: None) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with interrupts_deferred():
        pass
    assert {s: signal.getsignal(s) for s in before} == before


def test_off_the_main_thread_it_does_nothing() -> None:
    failures: list[BaseException] = []

    def run() -> None:
        try:
            with interrupts_deferred():
                pass
        except BaseException as exc:  # signal.signal() off the main thread: ValueError
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert failures == []


class _SignalledAfterStart:
    """``subprocess.Popen`` that starts a harmless long process instead, then
    sends this process SIGHUP: the interrupt lands right after the start."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[bytes]] = []

    def __call__(self, _argv: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        streams = {k: v for k, v in kwargs.items() if k in STREAM_AND_SESSION_ARGS}
        process = REAL_POPEN([sys.executable, "-c", "import time; time.sleep(60)"], **streams)
        self.started.append(process)
        _signal_self()
        return process


def test_a_server_interrupted_as_it_starts_is_stopped(
    sighup_raises: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    popen = _SignalledAfterStart()
    monkeypatch.setattr(servers.subprocess, "Popen", popen)
    with pytest.raises(Interrupted), servers.run_tansu(log=tmp_path / "tansu.log"):
        pytest.fail("the server was used after the interrupt")
    [process] = popen.started
    assert process.poll() is not None  # stopped on the way out, not left running


def test_a_daemon_interrupted_as_it_starts_is_known_to_the_clean_up(
    sighup_raises: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    popen = _SignalledAfterStart()
    monkeypatch.setattr(etl_cluster.subprocess, "Popen", popen)
    cluster = etl_cluster.EtlCluster(tmp_path, "127.0.0.1:9", shards=1)
    try:
        with pytest.raises(Interrupted):
            cluster.start("etl-1")
        [process] = popen.started
        assert [d.pid for d in cluster.history] == [process.pid]
    finally:
        cluster.kill_all()
    assert process.poll() is not None
