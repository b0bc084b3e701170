"""Handlers: start after the token, restart with back-off, stop within the grace period."""

from __future__ import annotations

import asyncio
import threading
import time

from tests.unit.runtime.test_lease import HEADER, FakeStore, lease
from workgroup.errors import ErrorCode
from workgroup.runtime.handlers import OUTLIVED_LOG_EVERY_S, HandlerRun, HandlerStats, RestartPolicy
from workgroup.runtime.lease import EndReason, Lease
from workgroup.testing import FakeClock, capture_logs
from workgroup.testing.clock import settle

FAST = RestartPolicy(initial_s=0.01, max_s=0.05)


def run_of(held: Lease, handler: object, stats: HandlerStats | None = None) -> HandlerRun:
    return HandlerRun(held, handler, name="g", restart=FAST, stats=stats or HandlerStats())  # type: ignore[arg-type]


async def test_the_handler_runs_with_its_token() -> None:
    seen: list[int] = []

    async def handler(lease: Lease) -> None:
        seen.append(lease.token)

    run = run_of(lease(FakeStore()), handler)
    run.start()
    await run.stop(EndReason.REVOKED, grace_s=1.0)
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
        await run.stop(EndReason.REVOKED, grace_s=1.0)
    assert calls == 3
    assert (stats.failures, stats.restarts) == (2, 2)
    failed = [e for e in logs if e["event"] == "worker.failed"]
    assert [e["error"] for e in failed] == ["ValueError: failure 1", "ValueError: failure 2"]
    assert all("exc_info" not in e for e in failed)


async def test_a_revoked_handler_finishes_its_step_within_the_grace_period() -> None:
    clock = FakeClock()
    started, finished = asyncio.Event(), asyncio.Event()

    async def handler(lease: Lease) -> None:
        started.set()
        await lease.wait_revoked()
        await clock.sleep(20)  # the last step
        lease.assert_can_commit()
        finished.set()

    run = run_of(lease(FakeStore(), clock=clock), handler)
    run.start()
    await asyncio.wait_for(started.wait(), 5)
    stopping = asyncio.create_task(run.stop(EndReason.REVOKED, grace_s=30.0))
    await clock.wait_for_sleepers(2)  # the step, and the grace period
    await clock.run_for(20)
    await asyncio.wait_for(stopping, 5)
    assert finished.is_set()
    assert clock.monotonic() == 20.0


async def test_a_handler_past_its_grace_period_is_cancelled() -> None:
    clock = FakeClock()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handler(lease: Lease) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # ignores the revocation
        except asyncio.CancelledError:
            cancelled.set()
            raise

    held = lease(FakeStore(), clock=clock)
    run = run_of(held, handler)
    run.start()
    await asyncio.wait_for(started.wait(), 5)
    stopping = asyncio.create_task(run.stop(EndReason.REVOKED, grace_s=30.0))
    await clock.wait_for_sleepers(1)
    await clock.run_for(29.9)
    assert not cancelled.is_set()  # still within its grace period
    assert held.can_commit
    await clock.run_for(0.1)
    await asyncio.wait_for(stopping, 5)
    assert cancelled.is_set()
    assert not held.can_commit


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
    await run.stop(EndReason.REVOKED, grace_s=2.0)
    assert threads
    assert threads[0] is not threading.main_thread()
    assert store.commits[-1][2] == HEADER + "from the thread"


async def test_a_blocked_thread_is_reported_and_its_lease_refuses_commits() -> None:
    release, started = threading.Event(), threading.Event()

    def handler(lease: Lease) -> None:
        started.set()
        release.wait(10)

    clock = FakeClock(autojump_threshold_s=0)  # the grace period passes at once
    held = lease(FakeStore(), clock=clock)
    try:
        with capture_logs() as logs:
            run = run_of(held, handler)
            run.start()
            assert await asyncio.to_thread(started.wait, 5)
            await run.stop(EndReason.REVOKED, grace_s=30.0)
        [line] = [e for e in logs if e["event"] == "worker.outlived_grace"]
        assert line["grace_s"] == 30.0
        assert clock.monotonic() == 30.0
        assert held.revoked
        assert not held.can_commit
        assert run.thread_running
    finally:
        release.set()


async def test_a_thread_past_its_grace_period_is_finished_only_when_it_returns() -> None:
    release = threading.Event()
    started = threading.Event()

    def handler(lease: Lease) -> None:
        started.set()
        release.wait(10)

    clock = FakeClock(autojump_threshold_s=0)  # the grace period passes at once
    run = run_of(lease(FakeStore(), clock=clock), handler)
    run.start()
    assert await asyncio.to_thread(started.wait, 5)
    assert threading.current_thread().daemon is False  # the loop's own thread
    handler_threads = [t for t in threading.enumerate() if t.name.startswith("workgroup-handler")]
    assert handler_threads
    assert all(t.daemon for t in handler_threads)  # the process may end with them
    await run.stop(EndReason.REVOKED, grace_s=30.0)
    assert run.thread_running
    assert not run.finished
    clock.autojump_threshold_s = None
    with capture_logs() as logs:
        finished = asyncio.create_task(run.wait_finished())
        await settle()
        clock.advance(OUTLIVED_LOG_EVERY_S)  # reported again while it runs on
        async with asyncio.timeout(5):  # at the next poll of the thread
            while not any(e["event"] == "worker.outlived_grace" for e in logs):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert not finished.done()  # the resource may not be released yet
        release.set()
        await asyncio.wait_for(finished, 5)
    assert run.finished
    [outlived] = [e for e in logs if e["event"] == "worker.outlived_grace"]
    assert outlived["outlived_s"] == OUTLIVED_LOG_EVERY_S
    [ended] = [e for e in logs if e["event"] == "worker.thread_ended"]
    assert ended["after_s"] == OUTLIVED_LOG_EVERY_S


async def test_a_run_handed_back_starts_only_after_the_old_run_finished() -> None:
    events: list[str] = []
    old_started, new_started = asyncio.Event(), asyncio.Event()

    clock = FakeClock()

    async def slow(lease: Lease) -> None:
        events.append("old start")
        old_started.set()
        try:
            await lease.wait_revoked()
            await clock.sleep(20)  # its step, within the grace period
        finally:
            events.append("old end")

    async def handler(lease: Lease) -> None:
        events.append("new start")
        new_started.set()
        await lease.wait_revoked()

    store = FakeStore()
    old = run_of(lease(store, clock=clock), slow)
    old.start()
    await asyncio.wait_for(old_started.wait(), 5)
    stopping = asyncio.create_task(old.stop(EndReason.REVOKED, grace_s=30.0))
    new = HandlerRun(
        lease(store, clock=clock), handler, name="g", restart=FAST, stats=HandlerStats(), after=old
    )
    new.start()
    await clock.wait_for_sleepers(2)  # the old run's step and its grace period
    await settle()
    assert events == ["old start"]  # the new run waits for the old one
    await clock.run_for(20)
    await stopping
    await asyncio.wait_for(new_started.wait(), 5)
    assert events == ["old start", "old end", "new start"]
    await new.stop(EndReason.REVOKED, grace_s=1.0)


async def test_a_token_not_taken_through_a_long_rebalance_is_tried_again() -> None:
    """The lease's own retries end (a rebalance that goes on longer than its
    commit timeout): the run tries again with back-off while the lease is held,
    instead of leaving the resource idle until it moves."""
    clock = FakeClock()
    store = FakeStore()
    # The commit timeout is 5 s of the fake clock; REBALANCE_IN_PROGRESS for longer.
    store.answers = [ErrorCode.REBALANCE_IN_PROGRESS] * 40
    held = lease(store, 5.0, clock=clock)
    started = asyncio.Event()

    async def handler(lease: Lease) -> None:
        started.set()
        await lease.wait_revoked()

    run = HandlerRun(held, handler, name="g", restart=FAST, stats=HandlerStats())
    with capture_logs() as logs:
        run.start()
        async with asyncio.timeout(5):
            while not started.is_set():
                await clock.wait_for_sleepers()
                await clock.run_for(1.0)
    assert held.token == 1
    assert "worker.acquire_retrying" in [e["event"] for e in logs]
    assert "worker.acquire_failed" not in [e["event"] for e in logs]
    held.end(EndReason.REVOKED)
    await run.stop(EndReason.REVOKED, 1.0)
