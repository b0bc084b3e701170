"""Length-prefixed Kafka frames on an asyncio stream.

Every Kafka request and response is an int32 size followed by that many bytes.
The size is checked against the configured limit *before* anything is read or
allocated for the frame, so a client declaring a 2 GB request costs nothing.
"""

from __future__ import annotations

import asyncio
import struct

from workgroup.errors import MessageTooLargeError, ProtocolError

_SIZE = struct.Struct(">i")
SIZE_BYTES = _SIZE.size


def check_frame_size(size: int, max_bytes: int) -> int:
    """Validate a declared frame size; raise before anything is allocated."""
    if size < 0:
        raise ProtocolError(f"negative frame size {size}")
    if size > max_bytes:
        raise MessageTooLargeError(f"frame of {size} bytes exceeds the limit of {max_bytes} bytes")
    return size


async def read_frame(reader: asyncio.StreamReader, max_bytes: int) -> bytes | None:
    """Read one frame's payload; ``None`` at a clean end of stream.

    Raises :class:`ProtocolError` for a bad size and
    :class:`asyncio.IncompleteReadError` when the peer goes away mid-frame.
    """
    try:
        prefix = await reader.readexactly(SIZE_BYTES)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise
    (size,) = _SIZE.unpack(prefix)
    check_frame_size(size, max_bytes)
    return await reader.readexactly(size)


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its size."""
    return _SIZE.pack(len(payload)) + payload
