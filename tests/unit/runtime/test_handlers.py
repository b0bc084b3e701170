"""Handlers: start after the token, restart with back-off, stop within the grace period."""

from __future__ import annotations

import asyncio
import threading
import time

from tests.unit.runtime.test_lease import HEADER, FakeStore, lease
from workgroup.runtime.handlers import HandlerRun, HandlerStats, RestartPolicy
from workgroup.runtime.lease import Lease
from workgroup.testing import capture_logs

FAST = RestartPolicy(initial_s=0.01, max_s=0.05)


def run_of(held: Lease, handler: object, stats: HandlerStats | None = None) -> HandlerRun:
    return HandlerRun(held, handler, name="g", restart=FAST, stats=stats or HandlerStats())  # type: ignore[arg-type]


async def test_the_handler_runs_with_its_token() -> None:
    seen: list[int] = []

    async def handler(lease: Lease) -> None:
        seen.append(lease.token)

    run = run_of(lease(FakeStore()), handler)
    run.start()
    await run.stop("done", grace_s=1.0)
    assert seen in ([], [1])  # it may be stopped before the acquisition completes
    run = run_of(lease(FakeStore()), handler)
    run.start()
    await asyncio.sleep(0.05)
    assert seen[-1] == 1


async def test_a_failing_handler_is_restarted_with_back_off_and_logged_in_one_line() -> None:
    calls = 0
    stats = HandlerStats()

    async def handler(lease: Lease) -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ValueError(f"failure {calls}")
        await lease.wait_revoked()

    with capture_logs() as logs:
        run = run_of(lease(FakeStore()), handler, stats)
        run.start()
        for _ in range(100):
            if calls >= 3:
                break
            await asyncio.sleep(0.01)
        await run.stop("revoked", grace_s=1.0)
    assert calls == 3
    assert (stats.failures, stats.restarts) == (2, 2)
    failed = [e for e in logs if e["event"] == "worker.failed"]
    assert [e["error"] for e in failed] == ["ValueError: failure 1", "ValueError: failure 2"]
    assert all("exc_info" not in e for e in failed)


async def test_a_revoked_handler_finishes_its_step_within_the_grace_period() -> None:
    finished = asyncio.Event()

    async def handler(lease: Lease) -> None:
        await lease.wait_revoked()
        await asyncio.sleep(0.05)  # the last step
        finished.set()

    run = run_of(lease(FakeStore()), handler)
    run.start()
    await asyncio.sleep(0.05)
    await run.stop("revoked", grace_s=2.0)
    assert finished.is_set()


async def test_a_handler_past_its_grace_period_is_cancelled() -> None:
    cancelled = asyncio.Event()

    async def handler(lease: Lease) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    run = run_of(lease(FakeStore()), handler)
    run.start()
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await run.stop("revoked", grace_s=0.1)
    assert cancelled.is_set()
    assert time.monotonic() - started < 1.0


async def test_plain_functions_run_in_a_thread() -> None:
    threads: list[threading.Thread] = []

    def handler(lease: Lease) -> None:
        threads.append(threading.current_thread())
        lease.commit_sync("from the thread", 5)
        while not lease.revoked:
            time.sleep(0.01)

    store = FakeStore()
    run = run_of(lease(store), handler)
    run.start()
    for _ in range(100):
        if threads:
            break
        await asyncio.sleep(0.01)
    await run.stop("revoked", grace_s=2.0)
    assert threads
    assert threads[0] is not threading.main_thread()
    assert store.commits[-1][2] == HEADER + "from the thread"


async def test_a_blocked_thread_is_reported_and_its_lease_refuses_commits() -> None:
    release = threading.Event()

    def handler(lease: Lease) -> None:
        release.wait(10)

    held = lease(FakeStore())
    with capture_logs() as logs:
        run = run_of(held, handler)
        run.start()
        await asyncio.sleep(0.05)
        await run.stop("revoked", grace_s=0.05)
    release.set()
    assert any(e["event"] == "worker.outlived_grace" for e in logs)
    assert held.revoked


async def test_a_thread_past_its_grace_period_is_finished_only_when_it_returns() -> None:
    release = threading.Event()
    started = threading.Event()

    def handler(lease: Lease) -> None:
        started.set()
        release.wait(10)

    run = run_of(lease(FakeStore()), handler)
    run.start()
    assert await asyncio.to_thread(started.wait, 5)
    assert threading.current_thread().daemon is False  # the loop's own thread
    handler_threads = [t for t in threading.enumerate() if t.name.startswith("workgroup-handler")]
    assert handler_threads
    assert all(t.daemon for t in handler_threads)  # the process may end with them
    await run.stop("revoked", grace_s=0.05)
    assert run.thread_running
    assert not run.finished
    finished = asyncio.create_task(run.wait_finished())
    await asyncio.sleep(0.1)
    assert not finished.done()  # the resource may not be released yet
    release.set()
    await asyncio.wait_for(finished, 5)
    assert run.finished


async def test_a_run_handed_back_starts_only_after_the_old_run_finished() -> None:
    events: list[str] = []
    old_started, new_started = asyncio.Event(), asyncio.Event()

    async def slow(lease: Lease) -> None:
        events.append("old start")
        old_started.set()
        try:
            await lease.wait_revoked()
            await asyncio.sleep(0.2)  # its step, within the grace period
        finally:
            events.append("old end")

    async def handler(lease: Lease) -> None:
        events.append("new start")
        new_started.set()
        await lease.wait_revoked()

    store = FakeStore()
    old = run_of(lease(store), slow)
    old.start()
    await asyncio.wait_for(old_started.wait(), 5)
    stopping = asyncio.create_task(old.stop("revoked", grace_s=1.0))
    new = HandlerRun(lease(store), handler, name="g", restart=FAST, stats=HandlerStats(), after=old)
    new.start()
    await stopping
    await asyncio.wait_for(new_started.wait(), 5)
    assert events == ["old start", "old end", "new start"]
    await new.stop("revoked", grace_s=1.0)
