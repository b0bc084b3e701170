"""Length-prefixed Kafka frames, cut out of the byte chunks a connection receives.

Every Kafka request and response is an int32 size followed by that many bytes.
The size is checked against the configured limit *before* anything is read or
allocated for the frame, so a client declaring a 2 GB request costs nothing.
"""

from __future__ import annotations

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


class FrameSplitter:
    """Cuts the chunks a transport delivers into frame payloads.

    Chunks end anywhere: in a size prefix, inside a frame, or after many
    frames.  Bytes of an incomplete frame are kept until the rest arrives; a
    frame's declared size is checked as soon as its prefix is complete, before
    its body is waited for.  A bad size stops splitting for good: the payloads
    before it are still returned and :attr:`error` says what was wrong.
    """

    __slots__ = ("_buffer", "_max_bytes", "_need", "error")

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._buffer = bytearray()
        #: Buffered bytes needed before the next frame (or size prefix) is complete.
        self._need = SIZE_BYTES
        self.error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received that are not part of a returned payload yet."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """Take one chunk; return the payloads of the frames it completes, in order."""
        if self.error is not None:
            return []
        buffer = self._buffer
        if buffer:
            buffer += data
            if len(buffer) < self._need:
                return []
            data = bytes(buffer)
            buffer.clear()
        frames: list[bytes] = []
        end_of_data = len(data)
        max_bytes = self._max_bytes
        unpack_size = _SIZE.unpack_from
        position = 0
        while end_of_data - position >= SIZE_BYTES:
            (size,) = unpack_size(data, position)
            if size < 0 or size > max_bytes:
                try:
                    check_frame_size(size, max_bytes)
                except ProtocolError as exc:
                    self.error = exc
                return frames
            end = position + SIZE_BYTES + size
            if end > end_of_data:
                self._need = end - position
                buffer += memoryview(data)[position:]
                return frames
            frames.append(data[position + SIZE_BYTES : end])
            position = end
        self._need = SIZE_BYTES
        if position < end_of_data:
            buffer += memoryview(data)[position:]
        return frames


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its size."""
    return _SIZE.pack(len(payload)) + payload
