"""isolation="process": handlers in child processes, with a forwarding lease, killed
after the grace period."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from tests.unit.runtime import process_handlers
from tests.unit.runtime.test_lease import SLOT, FakeStore, lease
from workgroup.runtime.handlers import HandlerRun, HandlerStats, RestartPolicy
from workgroup.runtime.isolation import ProcessHandler
from workgroup.testing import capture_logs

pytestmark = pytest.mark.timeout(60)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def wait_committed(store: FakeStore, what: str) -> str:
    async with asyncio.timeout(30):
        while SLOT not in store.offsets or store.offsets[SLOT].metadata in ("", None):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    value = store.offsets[SLOT].metadata
    assert value is not None, what
    return value


async def test_a_child_process_commits_and_reads_through_the_parents_lease() -> None:
    store = FakeStore()
    held = lease(store)
    run = HandlerRun(
        held,
        ProcessHandler(process_handlers.commit_and_wait),
        name="g",
        restart=RestartPolicy(),
        stats=HandlerStats(),
    )
    run.start()
    value = await wait_committed(store, "the child's commit")
    assert value.startswith("None>shard/3@1 pid ")
    child = int(value.rsplit(" ", 1)[1])
    assert child != os.getpid()
    started = time.monotonic()
    await run.stop("revoked", grace_s=5.0)
    assert time.monotonic() - started < 3.0  # it returned when told, no kill
    assert not pid_alive(child)


async def test_a_runaway_child_is_killed_after_the_grace_period() -> None:
    store = FakeStore()
    run = HandlerRun(
        lease(store),
        ProcessHandler(process_handlers.runaway),
        name="g",
        restart=RestartPolicy(),
        stats=HandlerStats(),
    )
    run.start()
    child = int((await wait_committed(store, "the child's commit")).split()[1])
    with capture_logs() as logs:
        await run.stop("revoked", grace_s=0.2)
    assert not pid_alive(child)
    assert any(e["event"] == "worker.process_killed" for e in logs)


async def test_a_failing_child_is_restarted() -> None:
    store = FakeStore()
    stats = HandlerStats()
    run = HandlerRun(
        lease(store),
        ProcessHandler(process_handlers.fail_once),
        name="g",
        restart=RestartPolicy(initial_s=0.01, max_s=0.05),
        stats=stats,
    )
    with capture_logs() as logs:
        run.start()
        async with asyncio.timeout(30):
            while store.offsets.get(SLOT) is None or store.offsets[SLOT].metadata != "second run":  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        await run.stop("revoked", grace_s=5.0)
    assert stats.restarts == 1
    failed = [e for e in logs if e["event"] == "worker.failed"]
    assert failed[0]["error"] == "HandlerFailed: RuntimeError: first run fails"
