"""The runner's ownership event log when a resource is handed back while its
revoked handler still stops (the runner's rule 4)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.unit.runtime.test_lease import FakeStore
from tests.unit.runtime.test_slots import CatalogSource, make_runner
from workgroup.runtime.events import OwnershipLog, read_events
from workgroup.runtime.lease import EndReason, Lease
from workgroup.types import Resource


async def test_a_run_ended_after_its_resource_was_handed_back_is_recorded(
    tmp_path: Path,
) -> None:
    """A leader that moves a resource away and back (a plan changed by fresh
    loads) before the old handler has stopped: the old run's end is in the log
    (its lease ended), then the new run's acquisition, and nothing is released
    for the resource, which is owned again."""
    may_stop = asyncio.Event()
    starts: list[int] = []

    async def handler(lease: Lease) -> None:
        starts.append(lease.token)
        await lease.wait_revoked()
        await may_stop.wait()  # a slow stop: a query finishing its batch

    log = OwnershipLog(tmp_path / "events.jsonl", "m1")
    runner = await make_runner(CatalogSource(["a"]), handler=handler, grace_s=30.0, events=log)
    runner._store = FakeStore()  # type: ignore[assignment]
    released: list[tuple[Resource, ...]] = []
    runner.member.release_done = lambda resources: released.append(tuple(resources))  # type: ignore[method-assign]
    resource = ("shard", "a")
    try:
        await runner._read_catalog()
        await runner._assigned((resource,), generation=1)
        async with asyncio.timeout(5):
            while starts != [1]:  # noqa: ASYNC110 (the handler runs in a task of the runner)
                await asyncio.sleep(0.01)
        await runner._revoked((resource,), generation=2)
        await runner._assigned((resource,), generation=3)  # handed back: rule 4
        may_stop.set()
        async with asyncio.timeout(5):
            while starts != [1, 2]:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            while runner._releases:  # noqa: ASYNC110 (the old run's end is recorded in a task)
                await asyncio.sleep(0.01)
        assert released == []
        assert [(e["event"], e["token"]) for e in read_events(log.path)] == [
            ("acquired", 1),
            ("revoked", 1),
            ("acquired", 2),
        ]
    finally:
        await runner.stop_all(EndReason.LOST)
        log.close()
