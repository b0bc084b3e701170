"""Declared lengths are checked before the codec allocates for them.

kio's native reader aborts the process (it does not raise) when an array's
declared element count makes its reservation fail; these inputs used to kill
the coordinator.
"""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workgroup.coordinator import wire
from workgroup.errors import ProtocolError
from workgroup.kafka import apis

OFFSET_FETCH, JOIN_GROUP, HEARTBEAT = 9, 11, 12


def header(api_key: int, version: int, *, tags: bytes = b"\x00") -> bytes:
    api = apis.APIS[api_key]
    flexible = api.flexible(version)
    return struct.pack(">hhih", api_key, version, 7, 2) + b"id" + (tags if flexible else b"")


def uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode(payload: bytes) -> object:
    parsed, offset = wire.decode_header(payload)
    return wire.decode_request(parsed, payload, offset, "127.0.0.1")


def test_huge_compact_array_count_is_refused_not_allocated() -> None:
    # OffsetFetch v8: groups is a compact array; 2**60 elements cannot fit the frame.
    payload = header(OFFSET_FETCH, 8) + uvarint(2**60) + b"\x00" * 16
    with pytest.raises(ProtocolError, match="exceeds"):
        decode(payload)


def test_huge_classic_array_count_is_refused() -> None:
    # JoinGroup v1: protocols is an int32-counted array.
    body = (
        struct.pack(">h", 1)
        + b"g"
        + struct.pack(">ii", 10_000, 10_000)
        + struct.pack(">h", 0)
        + struct.pack(">h", 8)
        + b"consumer"
        + struct.pack(">i", 2**31 - 1)
    )
    with pytest.raises(ProtocolError, match="exceeds"):
        decode(header(JOIN_GROUP, 1) + body)


def test_huge_tagged_field_count_in_the_header_is_refused() -> None:
    payload = header(JOIN_GROUP, 9, tags=uvarint(2**62)) + b"\x00" * 8
    with pytest.raises(ProtocolError):
        decode(payload)


@settings(max_examples=300, deadline=None)
@given(
    api_key=st.sampled_from(sorted(apis.APIS)),
    version=st.integers(0, 12),
    count=st.integers(2**20, 2**63),
    tail=st.binary(max_size=64),
)
def test_any_body_starting_with_a_huge_varint_is_refused_cleanly(
    api_key: int, version: int, count: int, tail: bytes
) -> None:
    if version not in apis.APIS[api_key].coordinator_versions:
        return
    with contextlib.suppress(ProtocolError):
        decode(header(api_key, version) + uvarint(count) + tail)
