"""Splitting received chunks into frames, and the Heartbeat decoding fast path."""

from __future__ import annotations

import io
import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.heartbeat.v0.request import HeartbeatRequest as HeartbeatRequestV0
from kio.schema.heartbeat.v3.request import HeartbeatRequest as HeartbeatRequestV3
from kio.schema.heartbeat.v4.request import HeartbeatRequest as HeartbeatRequestV4
from kio.serial import entity_writer

from workgroup.coordinator import wire
from workgroup.coordinator.framing import FrameSplitter, frame
from workgroup.errors import MessageTooLargeError, ProtocolError
from workgroup.kafka.messages import FENCE_CLIENT_ID, Heartbeat

LIMIT = 1024

payloads = st.lists(st.binary(max_size=300), max_size=12)


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` cut at ``points`` (any order, repeats allowed: empty chunks)."""
    bounds = [0, *sorted(p % (len(data) + 1) for p in points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@given(payloads, st.lists(st.integers(min_value=0), max_size=40))
def test_any_chunking_yields_the_frames_in_order(frames: list[bytes], points: list[int]) -> None:
    splitter = FrameSplitter(LIMIT)
    stream = b"".join(frame(p) for p in frames)
    out: list[bytes] = []
    for chunk in cut(stream, points):
        out.extend(splitter.feed(chunk))
    assert out == frames
    assert splitter.buffered == 0
    assert splitter.error is None


def test_a_frame_split_across_many_chunks_is_returned_once_complete() -> None:
    splitter = FrameSplitter(LIMIT)
    data = frame(b"x" * 100)
    for index in range(len(data) - 1):
        assert splitter.feed(data[index : index + 1]) == []
    assert splitter.buffered == len(data) - 1
    assert splitter.feed(data[-1:]) == [b"x" * 100]
    assert splitter.buffered == 0


def test_many_frames_in_one_chunk_and_a_partial_tail() -> None:
    splitter = FrameSplitter(LIMIT)
    body = [bytes([i]) * i for i in range(50)]
    tail = frame(b"tail")
    assert splitter.feed(b"".join(frame(p) for p in body) + tail[:6]) == body
    assert splitter.buffered == 6
    assert splitter.feed(tail[6:]) == [b"tail"]


def test_an_oversized_size_is_refused_before_its_body_arrives() -> None:
    splitter = FrameSplitter(LIMIT)
    assert splitter.feed(frame(b"ok") + struct.pack(">i", LIMIT + 1)[:2]) == [b"ok"]
    assert splitter.error is None
    # The prefix completes: refused at once, nothing of the body is awaited.
    assert splitter.feed(struct.pack(">i", LIMIT + 1)[2:]) == []
    assert isinstance(splitter.error, MessageTooLargeError)
    assert splitter.feed(b"more") == []  # splitting stopped for good


def test_frames_before_a_bad_size_are_still_returned() -> None:
    splitter = FrameSplitter(LIMIT)
    assert splitter.feed(frame(b"a") + frame(b"b") + struct.pack(">i", -1) + b"junk") == [
        b"a",
        b"b",
    ]
    assert isinstance(splitter.error, ProtocolError)
    assert "negative" in str(splitter.error)


def test_a_frame_at_the_limit_is_accepted() -> None:
    splitter = FrameSplitter(LIMIT)
    assert splitter.feed(frame(b"z" * LIMIT)) == [b"z" * LIMIT]
    assert splitter.error is None


# --- the Heartbeat fast path decodes exactly what kio decodes ------------------------

HEARTBEAT_SCHEMAS = {
    0: HeartbeatRequestV0,
    1: HeartbeatRequestV0,  # v1, v2 have the bytes of v0
    2: HeartbeatRequestV0,
    3: HeartbeatRequestV3,
    4: HeartbeatRequestV4,
}

texts = st.text(max_size=200)


def heartbeat_body(
    version: int, group: str, generation: int, member: str, instance: str | None
) -> bytes:
    cls = HEARTBEAT_SCHEMAS[version]
    fields: dict[str, object] = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
    }
    if version >= 3:
        fields["group_instance_id"] = instance
    out = io.BytesIO()
    entity_writer(cls)(out, cls(**fields))
    return out.getvalue()


def request(version: int, body: bytes) -> tuple[wire.RequestHeader, bytes, int]:
    flexible = version >= 4
    client = b"client"
    payload = (
        struct.pack(">hhih", wire.HEARTBEAT, version, 7, len(client))
        + client
        + (b"\x00" if flexible else b"")
        + body
    )
    header, offset = wire.decode_header(payload)
    return header, payload, offset


def via_kio(header: wire.RequestHeader, payload: bytes, offset: int) -> object:
    body, _ = wire._reader(header.api_key, header.api_version)(payload, offset)
    client = wire._client_info(header.client_id or "", "")
    return wire._DECODERS[header.api_key](header.api_version, body, client)


@given(
    st.integers(min_value=0, max_value=4),
    texts,
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    texts,
    st.none() | texts,
)
def test_heartbeat_fast_path_matches_kio(
    version: int, group: str, generation: int, member: str, instance: str | None
) -> None:
    header, payload, offset = request(
        version, heartbeat_body(version, group, generation, member, instance)
    )
    decoded = wire.decode_request(header, payload, offset)
    assert decoded == via_kio(header, payload, offset)
    assert decoded == Heartbeat(
        group, generation, member, instance if version >= 3 else None, version
    )


@pytest.mark.parametrize("version", [0, 3, 4])
def test_a_fences_heartbeat_keeps_its_client_id(version: int) -> None:
    # The coordinator extends no session for a fence (workgroup.fence, rule 5).
    flexible = version >= 4
    client = FENCE_CLIENT_ID.encode()
    payload = (
        struct.pack(">hhih", wire.HEARTBEAT, version, 7, len(client))
        + client
        + (b"\x00" if flexible else b"")
        + heartbeat_body(version, "g", 3, "m-1", None)
    )
    header, offset = wire.decode_header(payload)
    decoded = wire.decode_request(header, payload, offset, "127.0.0.1")
    assert isinstance(decoded, Heartbeat)
    assert decoded.client.client_id == FENCE_CLIENT_ID
    assert decoded == Heartbeat("g", 3, "m-1", None, version)


def test_heartbeat_fast_path_is_taken_for_the_common_shape() -> None:
    _, payload, offset = request(4, heartbeat_body(4, "g", 3, "m-1", None))
    assert wire._decode_heartbeat_fast(payload, offset, 4) == Heartbeat("g", 3, "m-1", None, 4)
    _, payload, offset = request(3, heartbeat_body(3, "g", 3, "m-1", "i-1"))
    assert wire._decode_heartbeat_fast(payload, offset, 3) == Heartbeat("g", 3, "m-1", "i-1", 3)


@given(st.integers(min_value=0, max_value=4), st.data())
def test_truncated_heartbeats_are_refused_as_before(version: int, data: st.DataObject) -> None:
    body = heartbeat_body(version, "group", 5, "member-1", "instance" if version >= 3 else None)
    cut_at = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
    header, payload, offset = request(version, body[:cut_at])
    with pytest.raises(ProtocolError):
        wire.decode_request(header, payload, offset)


def test_heartbeat_with_tagged_fields_is_left_to_kio() -> None:
    body = heartbeat_body(4, "g", 1, "m", None)
    assert body[-1] == 0
    header, payload, offset = request(4, body[:-1] + b"\x01\x05\x01\x00")  # unknown tag 5
    assert wire._decode_heartbeat_fast(payload, offset, 4) is None
    with pytest.raises(ProtocolError, match="tagged field"):  # kio's verdict, as before
        wire.decode_request(header, payload, offset)


def test_long_compact_strings_are_left_to_kio() -> None:
    member = "m" * 200  # a two-byte varint length
    header, payload, offset = request(4, heartbeat_body(4, "g", 1, member, None))
    assert wire._decode_heartbeat_fast(payload, offset, 4) is None
    assert wire.decode_request(header, payload, offset) == Heartbeat("g", 1, member, None, 4)
