"""Responses read straight from their bytes into result records, and written
straight from records into bytes, bypassing kio.

The codec (:mod:`workgroup.kafka.codec`) reads a response into kio's entities
and then into records (and writes a record through kio's entities): two objects
per element and kio's generic readers.  For the one answer that can be huge, an
OffsetFetch of every lease slot of a group (100,000 topics of one partition
each for a big group), that costs seconds on each side.  This module reads that
answer in one pass into the same records, and the embedded coordinator writes
it in one pass from them.

Rules:

* It is part of the codec, not a second one: for the versions in
  :data:`DIRECT_READERS` a response reads into exactly the record the codec's
  ``decode_result`` gives, and for those in :data:`DIRECT_WRITERS` a record
  writes exactly the bytes the codec writes (the tests check both against the
  codec on generated answers); every other API and version goes through the
  codec.
* Malformed bytes (truncated, a length past the end, bytes left over, text that
  is not UTF-8) raise a one-line :class:`~workgroup.errors.ProtocolError`
  saying where.
* A response error code workgroup does not name reads as UNKNOWN_SERVER_ERROR,
  as in the codec (:func:`~workgroup.kafka.codec.error_code`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

from workgroup.collector import collector_paused
from workgroup.errors import ErrorCode, ProtocolError
from workgroup.kafka import messages as m
from workgroup.kafka.apis import OFFSET_FETCH
from workgroup.kafka.codec import error_code

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
#: A fetched partition up to its metadata: index, committed offset, leader epoch.
_PARTITION_HEAD = struct.Struct(">iqi")
_ERRORS: Final = {int(code): code for code in ErrorCode}
#: A null compact string (a fetched partition with no metadata).
_NULL_STRING = b"\x00"
#: A fetched partition's or a group's end: its error code and no tagged fields.
_TAIL = struct.Struct(">hB")


class _Truncated(Exception):
    """A read past the end of the response (turned into a ProtocolError)."""


class _Reader:
    """A cursor over one response body in Kafka's flexible (compact) encoding."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.end = len(data)

    def uvarint(self) -> int:
        data, pos, value, shift = self.data, self.pos, 0, 0
        while True:
            if pos >= self.end:
                raise _Truncated
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos
                return value
            shift += 7
            if shift > 28:
                raise ValueError("a varint longer than 5 bytes")

    def take(self, size: int) -> bytes:
        start, stop = self.pos, self.pos + size
        if stop > self.end:
            raise _Truncated
        self.pos = stop
        return self.data[start:stop]

    def unpack(self, shape: struct.Struct) -> tuple[int, ...]:
        start = self.pos
        if start + shape.size > self.end:
            raise _Truncated
        self.pos = start + shape.size
        return shape.unpack_from(self.data, start)

    def compact_string(self) -> str:
        size = self.uvarint() - 1
        if size < 0:
            raise ValueError("a null string where the schema has none")
        return self.take(size).decode()

    def compact_nullable_string(self) -> str | None:
        size = self.uvarint() - 1
        return None if size < 0 else self.take(size).decode()

    def compact_array_size(self) -> int:
        size = self.uvarint() - 1
        if size < 0:
            raise ValueError("a null array where the schema has none")
        return size

    def error(self) -> ErrorCode:
        (code,) = self.unpack(_I16)
        known = _ERRORS.get(code)
        return self.unknown_error(code) if known is None else known

    def unknown_error(self, code: int) -> ErrorCode:
        return error_code(code)

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # the tag
            self.take(self.uvarint())


def read_offset_fetch_v8(data: bytes) -> m.OffsetFetchResult:
    """An OffsetFetch v8 response body (after its header) as its result record."""
    reader = _Reader(data)
    try:
        reader.unpack(_I32)  # throttle time: not a result
        groups = []
        for _ in range(reader.compact_array_size()):
            group_id = reader.compact_string()
            with collector_paused():  # 100,000 records of a big group's slots
                topics = _read_fetched_topics(reader)
            error = reader.error()
            reader.skip_tagged_fields()
            groups.append(m.FetchedGroup(group_id, tuple(topics), error))
        reader.skip_tagged_fields()
    except (_Truncated, IndexError, struct.error):
        raise ProtocolError(
            f"malformed OffsetFetchResponse v8: it ends at byte {reader.end}, "
            f"inside a field at byte {reader.pos}"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        reason = exc.reason if isinstance(exc, UnicodeDecodeError) else str(exc)
        raise ProtocolError(
            f"malformed OffsetFetchResponse v8 near byte {reader.pos}: {reason}"
        ) from None
    if reader.pos != reader.end:
        raise ProtocolError(
            f"malformed OffsetFetchResponse v8: {reader.end - reader.pos} bytes left over "
            f"after byte {reader.pos}"
        )
    return m.OffsetFetchResult(tuple(groups))


def _read_fetched_topics(reader: _Reader) -> list[m.FetchedTopic]:
    """The topics of one group of an OffsetFetch v8 response.

    The hot loop of a big group's answer: a length or count under 127 (one
    byte, the usual case) and an empty tagged-field section are read inline;
    anything else through the reader's methods.
    """
    data, end = reader.data, reader.end
    head, errors = _PARTITION_HEAD, _ERRORS
    topics = []
    for _ in range(reader.compact_array_size()):
        pos = reader.pos
        size = data[pos] - 1
        if 0 <= size < 0x7F:
            pos += 1
            if pos + size > end:
                raise _Truncated
            name = data[pos : pos + size].decode()
            reader.pos = pos + size
        else:
            name = reader.compact_string()
        count = data[reader.pos] - 1
        if 0 <= count < 0x7F:
            reader.pos += 1
        else:
            count = reader.compact_array_size()
        partitions = []
        for _ in range(count):
            pos = reader.pos
            if pos + head.size >= end:
                raise _Truncated
            index, offset, epoch = head.unpack_from(data, pos)
            pos += head.size
            size = data[pos] - 1
            if 0 <= size < 0x7F:
                pos += 1
                if pos + size > end:
                    raise _Truncated
                metadata: str | None = data[pos : pos + size].decode()
                reader.pos = pos + size
            else:
                reader.pos = pos
                metadata = reader.compact_nullable_string()
            (code,) = _I16.unpack_from(data, reader.pos)  # struct.error past the end
            error = errors.get(code)
            if error is None:
                error = reader.unknown_error(code)
            reader.pos += 2
            if data[reader.pos] == 0:  # no tagged fields (IndexError past the end)
                reader.pos += 1
            else:
                reader.skip_tagged_fields()
            partitions.append(m.FetchedPartition(index, offset, metadata, epoch, error))
        if data[reader.pos] == 0:
            reader.pos += 1
        else:
            reader.skip_tagged_fields()
        topics.append(m.FetchedTopic(name, tuple(partitions)))
    return topics


def uvarint(value: int) -> bytes:
    """An unsigned varint of the flexible versions (compact lengths)."""
    if value < 0x80:
        return _SMALL_UVARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_UVARINTS: Final = tuple(bytes((n,)) for n in range(0x80))


def write_offset_fetch_v8(result: m.Result) -> bytes:
    """An OffsetFetch v8 response body (after its header): the codec's bytes for
    ``result`` (an :class:`~workgroup.kafka.messages.OffsetFetchResult`)."""
    if not isinstance(result, m.OffsetFetchResult):
        raise TypeError(f"expected OffsetFetchResult, got {type(result).__name__}")
    out = bytearray(4)  # throttle time 0
    out += uvarint(len(result.groups) + 1)
    head, tail, small = _PARTITION_HEAD.pack, _TAIL.pack, _SMALL_UVARINTS
    for group in result.groups:
        name = group.group_id.encode()
        out += uvarint(len(name) + 1)
        out += name
        out += uvarint(len(group.topics) + 1)
        for topic in group.topics:
            name = topic.name.encode()
            size = len(name) + 1
            out += small[size] if size < 0x80 else uvarint(size)
            out += name
            count = len(topic.partitions) + 1
            out += small[count] if count < 0x80 else uvarint(count)
            for p in topic.partitions:
                out += head(p.partition, p.offset, p.leader_epoch)
                if p.metadata is None:
                    out += _NULL_STRING
                else:
                    metadata = p.metadata.encode()
                    size = len(metadata) + 1
                    out += small[size] if size < 0x80 else uvarint(size)
                    out += metadata
                out += tail(p.error, 0)  # the error code, no tagged fields
            out.append(0)  # the topic's tagged fields: none
        out += tail(group.error, 0)
    out.append(0)
    return bytes(out)


#: ``(api key, version) -> reader`` of the responses read without kio.
DIRECT_READERS: Final[dict[tuple[int, int], Callable[[bytes], m.Result]]] = {
    (OFFSET_FETCH, 8): read_offset_fetch_v8,
}

#: ``(api key, version) -> writer`` of the responses written without kio.
DIRECT_WRITERS: Final[dict[tuple[int, int], Callable[[m.Result], bytes]]] = {
    (OFFSET_FETCH, 8): write_offset_fetch_v8,
}

__all__ = [
    "DIRECT_READERS",
    "DIRECT_WRITERS",
    "read_offset_fetch_v8",
    "uvarint",
    "write_offset_fetch_v8",
]
