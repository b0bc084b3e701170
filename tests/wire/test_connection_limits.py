"""Limits that keep one bad client from hurting the rest: a connection limit, an
idle-connection timeout and a per-connection request rate, on the embedded coordinator."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.server import CoordinatorServer

API_VERSIONS = 18


def api_versions(correlation_id: int) -> bytes:
    """An ApiVersions v0 request frame (header v1, empty body)."""
    client = b"limits-test"
    body = struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(client)) + client
    return struct.pack(">i", len(body)) + body


async def read_reply(reader: asyncio.StreamReader) -> int:
    """The correlation id of the next response."""
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    body = await reader.readexactly(size)
    (correlation_id,) = struct.unpack_from(">i", body)
    return int(correlation_id)


@asynccontextmanager
async def coordinator(**limits: object) -> AsyncIterator[CoordinatorServer]:
    async with CoordinatorServer(CoordinatorConfig(**limits)) as server:  # type: ignore[arg-type]
        yield server


async def connect(server: CoordinatorServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = server.address
    return await asyncio.open_connection(host, port)


async def closed_by_peer(reader: asyncio.StreamReader, timeout_s: float) -> bool:
    """True if the coordinator closed the connection (EOF or reset) within ``timeout_s``."""
    try:
        return await asyncio.wait_for(reader.read(1), timeout_s) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


async def test_connections_beyond_the_limit_are_closed_and_the_others_served() -> None:
    async with coordinator(max_connections=2) as server:
        kept = [await connect(server) for _ in range(2)]
        extra_reader, extra_writer = await connect(server)
        assert await closed_by_peer(extra_reader, 2.0)
        for n, (reader, writer) in enumerate(kept):
            writer.write(api_versions(n))
            assert await asyncio.wait_for(read_reply(reader), 2.0) == n
        assert server.refused_connections == 1
        for _, writer in [*kept, (extra_reader, extra_writer)]:
            writer.close()


async def test_an_idle_connection_is_closed_and_an_active_one_kept() -> None:
    async with coordinator(connections_max_idle_ms=300) as server:
        idle_reader, idle_writer = await connect(server)
        active_reader, active_writer = await connect(server)
        began = time.monotonic()
        for n in range(8):  # one request every 100 ms for 0.8 s
            active_writer.write(api_versions(n))
            assert await read_reply(active_reader) == n
            await asyncio.sleep(0.1)
        assert await closed_by_peer(idle_reader, 1.0)
        assert time.monotonic() - began >= 0.3
        active_writer.write(api_versions(99))
        assert await asyncio.wait_for(read_reply(active_reader), 1.0) == 99
        assert server.idle_closed == 1
        for writer in (idle_writer, active_writer):
            writer.close()


async def test_a_flooding_connection_is_slowed_and_a_polite_one_is_not() -> None:
    rate = 20.0
    async with coordinator(max_requests_per_second=rate) as server:
        flood_reader, flood_writer = await connect(server)
        polite_reader, polite_writer = await connect(server)
        requests = 60
        began = time.monotonic()
        flood_writer.write(b"".join(api_versions(n) for n in range(requests)))

        async def drain() -> float:
            for n in range(requests):
                assert await read_reply(flood_reader) == n
            return time.monotonic() - began

        flooding = asyncio.create_task(drain())
        await asyncio.sleep(0.2)
        polite_began = time.monotonic()
        polite_writer.write(api_versions(1))
        assert await asyncio.wait_for(read_reply(polite_reader), 1.0) == 1
        assert time.monotonic() - polite_began < 0.5  # not queued behind the flood
        elapsed = await asyncio.wait_for(flooding, 10.0)
        # A burst of `rate` requests, then `rate` a second.
        assert elapsed >= (requests - rate) / rate * 0.9
        assert server.throttled_requests > 0
        for writer in (flood_writer, polite_writer):
            writer.close()


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("max_connections", 0, "max connections must be >= 1"),
        ("connections_max_idle_ms", 0, "connections max idle must be >= 1 ms"),
        ("max_requests_per_second", -1.0, "max requests per second must be >= 0"),
    ],
)
def test_limits_are_validated(setting: str, value: object, message: str) -> None:
    from workgroup.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        CoordinatorConfig(**{setting: value})  # type: ignore[arg-type]
