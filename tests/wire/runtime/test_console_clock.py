"""The console reads its time from the clock it is given: its readers' settling
and full re-reads, the view's timestamps, and the wait between refreshes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from tests.wire.runtime.test_readers_agree import RawMember, rebalance
from workgroup.console.server import SETTLE_S, SLOTS_EVERY_S, ConsoleServer
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.server import CoordinatorServer
from workgroup.testing import FakeClock
from workgroup.testing.clock import settle

TIMEOUT_S = 30


@pytest.fixture
async def coordinator() -> AsyncIterator[CoordinatorServer]:
    async with CoordinatorServer(CoordinatorConfig(initial_rebalance_delay_ms=300)) as server:
        yield server


async def test_the_consoles_settling_full_reads_and_timestamps_follow_its_clock(
    coordinator: CoordinatorServer,
) -> None:
    bootstrap = coordinator.bootstrap
    group = f"console-{uuid.uuid4().hex[:8]}"
    a, b = RawMember(bootstrap, group, "a"), RawMember(bootstrap, group, "b")
    clock = FakeClock(wall_start_s=1_000.0)
    console = ConsoleServer(bootstrap, port=0, clock=clock)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await rebalance([a, b], {"a": ((0, 1), None), "b": ((2, 3), None)})
            for member, keys in ((a, (0, 1)), (b, (2, 3))):
                for key in keys:
                    await member.take(key, 1)

            async def slots_read() -> int | None:
                await console.refresh()
                assert console.error is None
                return console._readers[group].slots_fetched

            assert await slots_read() == 4  # the first read: every slot
            assert console.summary()["time"] == 1_000.0
            assert console.model.started == 1_000.0
            assert console.last_refresh_s == 0.0  # measured on the clock, which stood
            assert await slots_read() == 0
            # Key 1 moves to b, whose token comes late: its slot is read at the change
            # and on every refresh while pending, until the settling time has passed
            # on the console's clock; then once per settling time.
            await rebalance([a, b], {"a": ((0,), None), "b": ((1, 2, 3), None)})
            assert await slots_read() == 1
            assert await slots_read() == 1
            clock.advance(SETTLE_S + 0.5)
            assert await slots_read() == 1
            assert await slots_read() == 0
            assert console.summary()["time"] == 1_000.0 + SETTLE_S + 0.5
            await b.take(1, 2)
            # Every slot again once SLOTS_EVERY_S passed since the first full read
            # (key 1's late token among them: nothing pending after it).
            clock.advance(SLOTS_EVERY_S - SETTLE_S)
            assert await slots_read() == 4
            assert await slots_read() == 0
    finally:
        await console.close()
        await a.connection.close()
        await b.connection.close()


async def test_the_console_waits_between_refreshes_on_its_clock(
    coordinator: CoordinatorServer,
) -> None:
    clock = FakeClock()
    console = ConsoleServer(coordinator.bootstrap, port=0, refresh_ms=1_000, clock=clock)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await console.start()
            assert console.refreshes == 1
            await clock.wait_for_sleepers(1)
            await settle()
            assert console.refreshes == 1  # the clock stands: no refresh
            clock.advance(0.999)
            await settle()
            assert console.refreshes == 1
            clock.advance(0.001)
            await clock.wait_for_sleepers(1)  # refreshed, and waits on the clock again
            assert console.refreshes == 2
    finally:
        await console.close()
