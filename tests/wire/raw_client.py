"""A minimal Kafka client over an asyncio stream, encoding with kafka-python's classes."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import warnings
from typing import Any

# kafka-python loads its message schemas with a deprecated importlib call.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse
    from kafka.protocol.consumer.group import (
        HeartbeatRequest,
        HeartbeatResponse,
        JoinGroupRequest,
        JoinGroupResponse,
        LeaveGroupRequest,
        LeaveGroupResponse,
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
        SyncGroupRequest,
        SyncGroupResponse,
    )
    from kafka.protocol.metadata import (
        ApiVersionsRequest,
        ApiVersionsResponse,
        FindCoordinatorRequest,
        FindCoordinatorResponse,
        MetadataRequest,
        MetadataResponse,
    )

__all__ = [
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "MetadataRequest",
    "MetadataResponse",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "RawClient",
    "SyncGroupRequest",
    "SyncGroupResponse",
]

_RESPONSES: dict[int, Any] = {
    cls.API_KEY: cls
    for cls in (
        ApiVersionsResponse,
        DescribeGroupsResponse,
        FindCoordinatorResponse,
        HeartbeatResponse,
        JoinGroupResponse,
        LeaveGroupResponse,
        MetadataResponse,
        OffsetCommitResponse,
        OffsetFetchResponse,
        SyncGroupResponse,
    )
}


def encode(request: Any, version: int, correlation_id: int, client_id: str = "raw") -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True))


class RawClient:
    """One connection; requests may be pipelined, responses are read in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._next_correlation_id = 1
        self._sent: list[tuple[int, int, int]] = []  # correlation id, api key, version

    @classmethod
    async def connect(cls, host: str, port: int, *, ssl: Any = None) -> RawClient:
        reader, writer = await asyncio.open_connection(host, port, ssl=ssl)
        return cls(reader, writer)

    async def send(self, request: Any, version: int) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id += 1
        self.writer.write(encode(request, version, correlation_id))
        await self.writer.drain()
        self._sent.append((correlation_id, request.API_KEY, version))
        return correlation_id

    async def receive(self, within: float = 10.0) -> Any:
        """The next response (checked to answer the oldest unanswered request)."""
        correlation_id, api_key, version = self._sent.pop(0)
        async with asyncio.timeout(within):
            (size,) = struct.unpack(">i", await self.reader.readexactly(4))
            payload = await self.reader.readexactly(size)
        response = _RESPONSES[api_key][version].decode(payload, header=True)
        assert response.header.correlation_id == correlation_id
        return response

    async def call(self, request: Any, version: int, within: float = 10.0) -> Any:
        await self.send(request, version)
        return await self.receive(within)

    async def write_raw(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def closed_by_peer(self, within: float = 5.0) -> bool:
        """Whether the server closes this connection (EOF or reset) within ``within`` s."""
        try:
            async with asyncio.timeout(within):
                while True:
                    data = await self.reader.read(65536)
                    if not data:
                        return True
        except ConnectionError:
            return True
        except TimeoutError:
            return False

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()
