"""The client layer's cost: one kept connection, slots read only where owners changed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from tests.wire.runtime.test_readers_agree import RawMember, rebalance
from workgroup.client.connection import ClientConnection
from workgroup.client.reader import FIRST_TOKEN_WAIT_S, GroupReader
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.server import CoordinatorServer
from workgroup.directory import Directory
from workgroup.testing import FakeClock

TIMEOUT_S = 30


@pytest.fixture
async def coordinator() -> AsyncIterator[CoordinatorServer]:
    async with CoordinatorServer(CoordinatorConfig(initial_rebalance_delay_ms=300)) as server:
        yield server


async def test_readers_keep_one_connection_and_read_only_the_slots_that_moved(
    coordinator: CoordinatorServer,
) -> None:
    bootstrap = coordinator.bootstrap
    group = f"reader-{uuid.uuid4().hex[:8]}"
    a, b = RawMember(bootstrap, group, "a"), RawMember(bootstrap, group, "b")
    try:
        async with asyncio.timeout(TIMEOUT_S), ClientConnection(bootstrap) as connection:
            await rebalance([a, b], {"a": ((0, 1), None), "b": ((2, 3), None)})
            for member, keys in ((a, (0, 1)), (b, (2, 3))):
                for key in keys:
                    await member.take(key, 1)
            reader = GroupReader(connection, group, settle_s=60.0, clock=FakeClock())
            other = GroupReader(connection, f"{group}-empty")
            first = await reader.read()
            assert (first.changed, reader.slots_fetched) == (True, 4)
            assert (await other.read()).description is None
            for _ in range(3):
                again = await reader.read()
                assert (again.changed, reader.slots_fetched) == (False, 0)
                # Nothing to join again: the last reading's owners and slots, as they were.
                assert again.resources is first.resources
                assert again.slots is first.slots
            # Key 1 moves to b: only its slot is read, again until b takes its token.
            await rebalance([a, b], {"a": ((0,), None), "b": ((1, 2, 3), None)})
            moved = await reader.read()
            assert (moved.changed, reader.slots_fetched) == (True, 1)
            one = moved.resource("shard", 1)
            assert one is not None
            assert (one.token, one.token_pending) == (None, True)
            await reader.read()
            assert reader.slots_fetched == 1  # still pending: read again
            await b.take(1, 2)
            taken = (await reader.read()).resource("shard", 1)
            assert taken is not None
            assert (taken.token, taken.token_pending) == (2, False)
            await reader.read()
            assert reader.slots_fetched == 0  # nothing pending any more
            # Two groups, a dozen reads: the one connection opened at first.
            assert connection.opened == 1
        directory = Directory(bootstrap, group)
        try:
            for _ in range(5):
                await directory.refresh()
            assert directory._connection.opened == 1
        finally:
            await directory.close()
    finally:
        await a.connection.close()
        await b.connection.close()


async def test_a_token_committed_after_the_settling_time_is_still_seen(
    coordinator: CoordinatorServer,
) -> None:
    """A new owner whose handler starts slowly commits its token after the
    settling time: the reader reads its slot once per settling time from then
    on, not every read, and not never."""
    bootstrap = coordinator.bootstrap
    group = f"reader-{uuid.uuid4().hex[:8]}"
    a, b = RawMember(bootstrap, group, "a"), RawMember(bootstrap, group, "b")
    clock = FakeClock()
    try:
        async with asyncio.timeout(TIMEOUT_S), ClientConnection(bootstrap) as connection:
            await rebalance([a, b], {"a": ((0, 1), None), "b": ((2, 3), None)})
            for member, keys in ((a, (0, 1)), (b, (2, 3))):
                for key in keys:
                    await member.take(key, 1)
            reader = GroupReader(connection, group, settle_s=5.0, clock=clock)
            await reader.read()
            await rebalance([a, b], {"a": ((0,), None), "b": ((1, 2, 3), None)})
            await reader.read()  # the change: key 1's slot is read, its token pending
            assert reader.slots_fetched == 1
            clock.advance(6.0)  # past the settling time: read once more, then every 5 s
            await reader.read()
            assert reader.slots_fetched == 1
            clock.advance(1.0)
            await reader.read()
            assert reader.slots_fetched == 0
            await b.take(1, 2)  # the slow handler's token, late
            clock.advance(4.5)
            taken = (await reader.read()).resource("shard", 1)
            assert reader.slots_fetched == 1
            assert taken is not None
            assert (taken.token, taken.token_pending) == (2, False)
            clock.advance(18.5)
            await reader.read()
            assert reader.slots_fetched == 0  # nothing pending any more
    finally:
        await a.connection.close()
        await b.connection.close()


async def test_a_first_token_committed_after_the_first_reading_is_seen(
    coordinator: CoordinatorServer,
) -> None:
    """A reader that reads the group between its first assignment and its
    handlers' first tokens (a service's directory, started with the group)
    reads those slots again until the tokens come: not never, as before; and a
    group that takes no leases stops costing reads after a while."""
    bootstrap = coordinator.bootstrap
    group = f"reader-{uuid.uuid4().hex[:8]}"
    a, b = RawMember(bootstrap, group, "a"), RawMember(bootstrap, group, "b")
    clock = FakeClock()
    try:
        async with asyncio.timeout(TIMEOUT_S), ClientConnection(bootstrap) as connection:
            await rebalance([a, b], {"a": ((0, 1), None), "b": ((2, 3), None)})
            await a.take(0, 1)
            await a.take(1, 1)
            reader = GroupReader(connection, group, settle_s=5.0, clock=clock)
            first = await reader.read()
            assert [r.token for r in first.resources] == [1, 1, None, None]
            await reader.read()
            assert reader.slots_fetched == 2  # b's starting handlers: read again
            await b.take(2, 1)
            clock.advance(6.0)  # past the settling time: once per settling time
            await reader.read()
            assert reader.slots_fetched == 2
            clock.advance(5.0)
            await b.take(3, 1)
            taken = await reader.read()
            assert [r.token for r in taken.resources] == [1, 1, 1, 1]
            clock.advance(5.0)
            await reader.read()
            assert reader.slots_fetched == 0  # nothing to wait for any more
            # A resource whose owner never takes a token (a group without
            # leases) is read again only for FIRST_TOKEN_WAIT_S after the change.
            await rebalance([a, b], {"a": ((0, 1, 4), None), "b": ((2, 3), None)})
            await reader.read()
            clock.advance(FIRST_TOKEN_WAIT_S - 10.0)
            await reader.read()
            assert reader.slots_fetched == 1
            clock.advance(20.0)
            await reader.read()
            assert reader.slots_fetched == 0
    finally:
        await a.connection.close()
        await b.connection.close()


async def test_slots_read_again_take_their_place_in_key_order(
    coordinator: CoordinatorServer,
) -> None:
    """After a move only the moved resources' slots are read: each takes its place
    in the slot list, in key order (a new list: the last reading keeps its own),
    and a slot committed for the first time sorts in."""
    bootstrap = coordinator.bootstrap
    group = f"reader-{uuid.uuid4().hex[:8]}"
    a, b = RawMember(bootstrap, group, "a"), RawMember(bootstrap, group, "b")
    try:
        async with asyncio.timeout(TIMEOUT_S), ClientConnection(bootstrap) as connection:
            await rebalance([a, b], {"a": ((2, 10), None), "b": ((9, 30), None)})
            await a.take(2, 1)
            await a.take(10, 1)
            await b.take(9, 1)  # 30 has no slot yet
            reader = GroupReader(connection, group, settle_s=60.0, clock=FakeClock())
            first = await reader.read()
            assert [(s.key, s.token) for s in first.slots] == [(2, 1), (9, 1), (10, 1)]
            await rebalance([a, b], {"a": ((2,), None), "b": ((9, 10, 30), None)})
            await b.take(10, 2)
            moved = await reader.read()
            assert reader.slots_fetched == 2  # 10 moved; 30 still waits for its first token
            assert [(s.key, s.token) for s in moved.slots] == [(2, 1), (9, 1), (10, 2)]
            assert [(s.key, s.token) for s in first.slots] == [(2, 1), (9, 1), (10, 1)]
            await rebalance([a, b], {"a": ((2, 30), None), "b": ((9, 10), None)})
            await a.take(30, 1)
            third = await reader.read()
            assert [(s.key, s.token) for s in third.slots] == [(2, 1), (9, 1), (10, 2), (30, 1)]
            thirty = third.resource("shard", 30)
            assert thirty is not None
            assert (thirty.token, thirty.token_pending) == (1, False)
    finally:
        await a.connection.close()
        await b.connection.close()
