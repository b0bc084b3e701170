"""The event-loop watch: a blocking coroutine handler is named, with its line
and the fix, while it blocks; a stall with no task running says so instead."""

from __future__ import annotations

import asyncio
import time

from workgroup.runtime.loopwatch import HINT, STARVED_HINT, LoopWatch
from workgroup.testing import capture_logs

BLOCK_S = 0.6


async def blocking_handler() -> None:
    time.sleep(BLOCK_S)  # noqa: ASYNC251 (the mistake under test)


async def watched(block: object) -> list[dict[str, object]]:
    with capture_logs() as logs:
        watch = LoopWatch(report_after_ms=300)
        watch.start()
        try:
            await asyncio.sleep(0.15)
            await block()  # type: ignore[operator]
            # The watchdog thread notices the loop runs again within its interval.
            async with asyncio.timeout(10):
                while not [e for e in logs if e["event"] == "app.event_loop_unblocked"]:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
        finally:
            watch.stop()
    return list(logs)


async def test_a_blocking_handler_is_named_with_its_line_and_the_fix() -> None:
    async def block() -> None:
        await asyncio.create_task(blocking_handler(), name="workgroup-handler-shard/beta")

    logs = await watched(block)
    [blocked] = [e for e in logs if e["event"] == "app.event_loop_blocked"]
    assert blocked["log_level"] == "warning"
    assert blocked["handler"] == "shard/beta"
    assert blocked["task"] == "workgroup-handler-shard/beta"
    line = blocking_handler.__code__.co_firstlineno + 1
    assert blocked["where"] == (
        f"{__file__}:{line} in blocking_handler: "
        "time.sleep(BLOCK_S)  # noqa: ASYNC251 (the mistake under test)"
    )
    assert blocked["hint"] == HINT
    assert "asyncio.to_thread" in HINT
    assert int(blocked["blocked_ms"]) >= 300  # type: ignore[call-overload]
    [unblocked] = [e for e in logs if e["event"] == "app.event_loop_unblocked"]
    assert int(unblocked["blocked_ms"]) >= BLOCK_S * 1000 - 100  # type: ignore[call-overload]


async def test_a_stall_without_a_running_task_does_not_blame_a_handler() -> None:
    async def block() -> None:
        done = asyncio.Event()

        def callback() -> None:  # a plain callback, not a task
            time.sleep(BLOCK_S)
            done.set()

        asyncio.get_running_loop().call_soon(callback)
        await done.wait()

    logs = await watched(block)
    [blocked] = [e for e in logs if e["event"] == "app.event_loop_blocked"]
    assert blocked["handler"] is None
    assert blocked["task"] is None
    assert blocked["hint"] == STARVED_HINT


async def test_a_loop_that_keeps_running_is_not_reported() -> None:
    async def busy_but_fine() -> None:
        for _ in range(20):
            time.sleep(0.02)  # noqa: ASYNC251 (short steps: the loop keeps running)
            await asyncio.sleep(0.02)

    with capture_logs() as logs:
        watch = LoopWatch()  # the default threshold, a second
        watch.start()
        await busy_but_fine()
        watch.stop()
    assert not [e for e in logs if e["event"].startswith("app.event_loop")]
