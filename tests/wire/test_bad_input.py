"""Bad bytes on one connection: that connection gets an error or is closed, nobody else notices.

Each case runs against a live in-process coordinator while a well-behaved
client, connected before the bad one, keeps being served (before, during and
after), and the coordinator's memory does not follow lengths read from the wire.
"""

from __future__ import annotations

import asyncio
import random
import struct
import tracemalloc
from collections.abc import AsyncIterator

import pytest

from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.server import CoordinatorServer
from workgroup.testing import capture_logs

from .raw_client import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    RawClient,
    encode,
)

MAX_REQUEST_BYTES = 64 * 1024


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def header_v1(api_key: int, version: int, correlation_id: int = 1) -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, 3) + b"bad"


def join_group_v5(protocol_count: int, protocols: bytes = b"") -> bytes:
    """A JoinGroup v5 body with a declared protocol count and the given protocol bytes."""

    def string(text: bytes) -> bytes:
        return struct.pack(">h", len(text)) + text

    return (
        header_v1(11, 5)
        + string(b"g")
        + struct.pack(">ii", 10_000, 10_000)
        + string(b"")
        + struct.pack(">h", -1)  # no group instance id
        + string(b"consumer")
        + struct.pack(">i", protocol_count)
        + protocols
    )


VALID_JOIN = join_group_v5(1, struct.pack(">h", 5) + b"range" + struct.pack(">i", 2) + b"md")


@pytest.fixture
async def server() -> AsyncIterator[CoordinatorServer]:
    server = CoordinatorServer(
        CoordinatorConfig(initial_rebalance_delay_ms=0, max_request_bytes=MAX_REQUEST_BYTES)
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def bystander(server: CoordinatorServer) -> AsyncIterator[RawClient]:
    client = await RawClient.connect(*server.address)
    assert (
        await client.call(
            ApiVersionsRequest[3](client_software_name="raw-client", client_software_version="1.0"),
            3,
        )
    ).error_code == 0
    try:
        yield client
    finally:
        await client.close()


async def still_served(client: RawClient) -> None:
    response = await client.call(
        ApiVersionsRequest[3](client_software_name="raw-client", client_software_version="1.0"),
        3,
        within=5,
    )
    assert response.error_code == 0
    hb = await client.call(HeartbeatRequest[4](group_id="g", generation_id=1, member_id="x"), 4)
    assert hb.error_code != 0  # an unknown member, answered as such


BAD_INPUTS = {
    "http request": b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "negative frame size": struct.pack(">i", -1) + b"\x00" * 16,
    "2 GB frame size": struct.pack(">i", 2**31 - 1) + b"\x00" * 16,
    "frame over max_request_bytes": frame(b"\x00" * (MAX_REQUEST_BYTES + 1)),
    "empty frame": frame(b""),
    "frame shorter than a header": frame(b"\x00\x0b\x00"),
    "unknown api key": frame(header_v1(9999, 0)),
    "api key not served (Produce)": frame(header_v1(0, 9) + b"\x00" * 32),
    "client id longer than the frame": frame(struct.pack(">hhih", 12, 0, 1, 1000) + b"x"),
    "truncated JoinGroup": frame(VALID_JOIN[:-5]),
    "absurd protocol count": frame(join_group_v5(2**31 - 1)),
    "negative protocol count": frame(join_group_v5(-7)),
    "absurd string length": frame(join_group_v5(1, struct.pack(">h", 32767) + b"range")),
    "invalid utf-8 group id": frame(header_v1(12, 0) + struct.pack(">h", 2) + b"\xff\xfe"),
    "random garbage": frame(bytes(range(256)) * 3),
}


@pytest.mark.parametrize("data", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
async def test_bad_input_closes_only_its_connection(
    server: CoordinatorServer, bystander: RawClient, data: bytes
) -> None:
    bad = await RawClient.connect(*server.address)
    try:
        await bad.write_raw(data)
        await still_served(bystander)
        assert await bad.closed_by_peer()
        await still_served(bystander)
    finally:
        await bad.close()
    # A fresh connection is served as well.
    fresh = await RawClient.connect(*server.address)
    try:
        await still_served(fresh)
    finally:
        await fresh.close()


async def test_valid_requests_before_the_bad_one_are_answered(
    server: CoordinatorServer, bystander: RawClient
) -> None:
    client = await RawClient.connect(*server.address)
    try:
        await client.send(ApiVersionsRequest[2](), 2)
        await client.write_raw(frame(join_group_v5(2**31 - 1)))
        assert (await client.receive()).error_code == 0
        assert await client.closed_by_peer()
        await still_served(bystander)
    finally:
        await client.close()


async def test_unsupported_version_gets_an_error_and_the_connection_stays(
    server: CoordinatorServer, bystander: RawClient
) -> None:
    client = await RawClient.connect(*server.address)
    try:
        # ApiVersions v4 (Kafka 4) is answered in v0 with our versions.
        await client.write_raw(encode(ApiVersionsRequest[4](), 4, correlation_id=5))
        (size,) = struct.unpack(">i", await client.reader.readexactly(4))
        answer = ApiVersionsResponse[0].decode(await client.reader.readexactly(size), header=True)
        assert answer.header.correlation_id == 5
        assert answer.error_code == 35
        assert {a.api_key for a in answer.api_keys} >= {11, 12, 13, 14}
        # A version no schema knows cannot be answered in its own format: closed.
        await still_served(client)
        await client.write_raw(frame(header_v1(12, 99) + b"\x00" * 8))
        assert await client.closed_by_peer()
        await still_served(bystander)
    finally:
        await client.close()


async def test_peer_vanishing_mid_frame_is_harmless(
    server: CoordinatorServer, bystander: RawClient
) -> None:
    client = await RawClient.connect(*server.address)
    await client.write_raw(struct.pack(">i", 1000) + b"\x00" * 10)
    await client.close()
    await still_served(bystander)


async def test_declared_lengths_do_not_allocate(server: CoordinatorServer) -> None:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        for data in (
            struct.pack(">i", 2**31 - 1) + b"\x00" * 64,
            frame(join_group_v5(2**31 - 1)),
            frame(join_group_v5(1, struct.pack(">h", 32767))),
        ):
            bad = await RawClient.connect(*server.address)
            try:
                await bad.write_raw(data)
                assert await bad.closed_by_peer()
            finally:
                await bad.close()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, f"peak traced memory {peak} bytes"


async def test_many_bad_clients_while_a_group_forms(server: CoordinatorServer) -> None:
    proto = JoinGroupRequest.JoinGroupRequestProtocol

    async def member() -> int:
        client = await RawClient.connect(*server.address)
        try:
            request = JoinGroupRequest[5](
                group_id="busy",
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                member_id="",
                group_instance_id=None,
                protocol_type="consumer",
                protocols=[proto(name="range", metadata=b"")],
            )
            first = await client.call(request, 5)
            request.member_id = first.member_id
            joined = await client.call(request, 5)
            return int(joined.generation_id)
        finally:
            await client.close()

    async def vandal(data: bytes) -> None:
        bad = await RawClient.connect(*server.address)
        try:
            await bad.write_raw(data)
            assert await bad.closed_by_peer()
        finally:
            await bad.close()

    results = await asyncio.gather(
        *(member() for _ in range(5)),
        *(vandal(data) for data in BAD_INPUTS.values()),
    )
    generations = results[:5]
    assert all(isinstance(g, int) and g >= 1 for g in generations)


async def test_byte_by_byte_delivery_is_reassembled(
    server: CoordinatorServer, bystander: RawClient
) -> None:
    client = await RawClient.connect(*server.address)
    try:
        data = encode(
            ApiVersionsRequest[3](client_software_name="slow", client_software_version="1"),
            3,
            correlation_id=1,
        )
        for index in range(len(data)):
            await client.write_raw(data[index : index + 1])
            if index == len(data) // 2:  # half a request is pending meanwhile
                await still_served(bystander)
        (size,) = struct.unpack(">i", await client.reader.readexactly(4))
        answer = ApiVersionsResponse[3].decode(await client.reader.readexactly(size), header=True)
        assert answer.error_code == 0
    finally:
        await client.close()


async def test_frame_at_the_size_limit_is_served(server: CoordinatorServer) -> None:
    proto = JoinGroupRequest.JoinGroupRequestProtocol

    def join(metadata_size: int) -> bytes:
        return encode(
            JoinGroupRequest[5](
                group_id="big",
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                member_id="",
                group_instance_id=None,
                protocol_type="consumer",
                protocols=[proto(name="range", metadata=b"\x00" * metadata_size)],
            ),
            5,
            correlation_id=1,
        )

    overhead = len(join(0)) - 4
    client = await RawClient.connect(*server.address)
    try:
        await client.write_raw(join(MAX_REQUEST_BYTES - overhead))  # exactly the limit
        (size,) = struct.unpack(">i", await client.reader.readexactly(4))
        assert size > 0
        await client.reader.readexactly(size)
        await client.write_raw(join(MAX_REQUEST_BYTES - overhead + 1))  # one byte over
        assert await client.closed_by_peer()
    finally:
        await client.close()


async def test_random_frames_never_hurt_the_coordinator(
    server: CoordinatorServer, bystander: RawClient
) -> None:
    rng = random.Random(20261122)
    valid = [VALID_JOIN, header_v1(12, 0) + b"\x00\x01g\x00\x00\x00\x01\x00\x01m"]

    def random_frame() -> bytes:
        choice = rng.random()
        if choice < 0.4:  # random bytes behind a plausible size
            return frame(rng.randbytes(rng.randint(0, 200)))
        payload = bytearray(rng.choice(valid))
        if choice < 0.8:  # a valid request with a few bytes changed
            for _ in range(rng.randint(1, 4)):
                payload[rng.randrange(len(payload))] = rng.randrange(256)
            return frame(bytes(payload))
        return frame(bytes(payload[: rng.randrange(len(payload))]))  # truncated

    async def attempt(data: bytes) -> None:
        client = await RawClient.connect(*server.address)
        try:
            await client.write_raw(data)
            # Either an answer or a close, within the time limit; never a hang.
            async with asyncio.timeout(10):
                head = await client.reader.read(4)
                if len(head) == 4:
                    (size,) = struct.unpack(">i", head)
                    assert 0 <= size < MAX_REQUEST_BYTES
        except ConnectionError:
            pass
        finally:
            await client.close()

    for _ in range(4):
        await asyncio.gather(*(attempt(random_frame()) for _ in range(50)))
        await still_served(bystander)


@pytest.mark.parametrize(
    ("data", "event"),
    [
        (struct.pack(">i", -5), "coordinator.bad_frame"),
        (frame(join_group_v5(2**31 - 1)), "coordinator.bad_request"),
        (frame(header_v1(9999, 0)), "coordinator.unknown_api"),
    ],
)
async def test_bad_input_is_logged(server: CoordinatorServer, data: bytes, event: str) -> None:
    with capture_logs() as logs:
        bad = await RawClient.connect(*server.address)
        try:
            await bad.write_raw(data)
            assert await bad.closed_by_peer()
        finally:
            await bad.close()
    (entry,) = (e for e in logs if e["event"] == event)
    assert entry["log_level"] == "warning"
    assert entry["peer"].startswith("127.0.0.1:")
