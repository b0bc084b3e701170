"""The server's connection protocol: chunking, one write per batch, back-pressure."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

from workgroup.coordinator import server as server_module
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.server import MAX_IN_FLIGHT_PER_CONNECTION, CoordinatorServer

from .core_double import CoreDouble, serving_double
from .raw_client import HeartbeatRequest, JoinGroupRequest, RawClient, encode


def heartbeat(correlation_id: int) -> bytes:
    request = HeartbeatRequest[4](group_id="g", generation_id=1, member_id="m")
    return encode(request, 4, correlation_id)


def correlation_ids(data: bytes) -> list[int]:
    ids = []
    position = 0
    while position < len(data):
        size, correlation_id = struct.unpack_from(">ii", data, position)
        ids.append(correlation_id)
        position += 4 + size
    assert position == len(data)
    return ids


class FakeTransport(asyncio.Transport):
    """Records what the connection does with its transport."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.reading = True
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 9092)}.get(
            name, default
        )

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True


@pytest.fixture
async def connection() -> AsyncIterator[tuple[Any, FakeTransport, CoreDouble]]:
    core = CoreDouble()
    server = CoordinatorServer(CoordinatorConfig(), core=core)
    transport = FakeTransport()
    protocol = server_module._Connection(server)
    protocol.connection_made(transport)
    try:
        yield protocol, transport, core
    finally:
        protocol.connection_lost(None)
        await server.stop()


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_many_frames_in_one_chunk_get_one_write_in_order(
    connection: tuple[Any, FakeTransport, CoreDouble],
) -> None:
    protocol, transport, core = connection
    protocol.data_received(b"".join(heartbeat(i) for i in range(1, 51)))
    assert len(core.requests) == 50
    await settle()
    assert len(transport.writes) == 1
    assert correlation_ids(transport.writes[0]) == list(range(1, 51))


async def test_a_frame_split_across_many_chunks_is_handled_once_complete(
    connection: tuple[Any, FakeTransport, CoreDouble],
) -> None:
    protocol, transport, core = connection
    data = heartbeat(1) + heartbeat(2)
    for index in range(len(data)):
        protocol.data_received(data[index : index + 1])
        assert len(core.requests) == (index + 1) // (len(data) // 2)
    await settle()
    assert correlation_ids(b"".join(transport.writes)) == [1, 2]


async def test_a_peer_that_does_not_read_is_not_read_from(
    connection: tuple[Any, FakeTransport, CoreDouble],
) -> None:
    protocol, transport, core = connection
    protocol.data_received(heartbeat(1))
    # The transport's write buffer passed its high-water mark.
    protocol.pause_writing()
    protocol.data_received(heartbeat(2) + heartbeat(3))
    await settle()
    assert len(core.requests) == 1  # held, not handled
    assert not transport.reading
    protocol.resume_writing()
    await settle()
    assert len(core.requests) == 3
    assert transport.reading
    assert correlation_ids(b"".join(transport.writes)) == [1, 2, 3]


async def test_bad_size_after_good_frames_answers_them_then_closes(
    connection: tuple[Any, FakeTransport, CoreDouble],
) -> None:
    protocol, transport, core = connection
    protocol.data_received(heartbeat(1) + heartbeat(2) + struct.pack(">i", 2**31 - 1))
    assert len(core.requests) == 2
    assert transport.closing
    assert correlation_ids(b"".join(transport.writes)) == [1, 2]


@pytest.fixture
async def held_join_server() -> AsyncIterator[tuple[CoordinatorServer, CoreDouble]]:
    async with serving_double(join_delay_ms=1500) as running:
        yield running


async def test_too_many_unanswered_requests_stop_reading_until_answered(
    held_join_server: tuple[CoordinatorServer, CoreDouble],
) -> None:
    server, core = held_join_server
    client = await RawClient.connect(*server.address)
    try:
        proto = JoinGroupRequest.JoinGroupRequestProtocol
        join = JoinGroupRequest[5](
            group_id="g",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="m-1",
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[proto(name="range", metadata=b"md")],
        )
        await client.send(join, 5)
        count = 3 * MAX_IN_FLIGHT_PER_CONNECTION
        for i in range(count):
            await client.send(HeartbeatRequest[4](group_id="g", generation_id=i, member_id="m"), 4)
        for _ in range(500):  # up to 5 s on a busy machine
            if len(core.requests) >= MAX_IN_FLIGHT_PER_CONNECTION:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        # The held JoinGroup plus the heartbeats behind it fill the connection's
        # quota; the rest stays unread until the JoinGroup is answered.
        assert len(core.requests) == MAX_IN_FLIGHT_PER_CONNECTION
        assert (await client.receive()).error_code == 0
        for _ in range(count):
            assert (await client.receive()).error_code == 0
        assert len(core.requests) == count + 1
    finally:
        await client.close()


async def test_session_expires_although_heartbeats_did_not_rearm_the_timer() -> None:
    """Heartbeats postpone the session deadline without re-arming the timer; it still fires."""
    from .raw_client import SyncGroupRequest

    config = CoordinatorConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=100)
    server = CoordinatorServer(config)
    await server.start()
    client = await RawClient.connect(*server.address)
    try:
        proto = JoinGroupRequest.JoinGroupRequestProtocol
        join = await client.call(
            JoinGroupRequest[2](
                group_id="g",
                session_timeout_ms=400,
                rebalance_timeout_ms=400,
                member_id="",
                protocol_type="consumer",
                protocols=[proto(name="range", metadata=b"md")],
            ),
            2,
        )
        assert join.error_code == 0
        member, generation = join.member_id, join.generation_id
        sync = await client.call(
            SyncGroupRequest[1](
                group_id="g",
                generation_id=generation,
                member_id=member,
                assignments=[
                    SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"a")
                ],
            ),
            1,
        )
        assert sync.error_code == 0
        loop = asyncio.get_running_loop()
        started = loop.time()
        while loop.time() - started < 1.0:  # 2.5 sessions kept alive by heartbeats
            beat = HeartbeatRequest[0](group_id="g", generation_id=generation, member_id=member)
            assert (await client.call(beat, 0)).error_code == 0
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.8)  # silence: the session (400 ms) must expire
        beat = HeartbeatRequest[0](group_id="g", generation_id=generation, member_id=member)
        assert (await client.call(beat, 0)).error_code == 25  # UNKNOWN_MEMBER_ID
    finally:
        await client.close()
        await server.stop()
