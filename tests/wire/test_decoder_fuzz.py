"""Hypothesis fuzzing of the request decoder: bad bytes raise ProtocolError, nothing else."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from workgroup.coordinator import wire
from workgroup.errors import ProtocolError
from workgroup.kafka import apis

from .raw_client import (
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    encode,
)


def decode_all(payload: bytes) -> wire.Request | None:
    """Run the whole decoding path the server runs; ``None`` for a clean rejection."""
    try:
        header, offset = wire.decode_header(payload)
        return wire.decode_request(header, payload, offset, "127.0.0.1")
    except ProtocolError:  # includes unknown APIs and unsupported versions
        return None


def _valid_payloads() -> list[bytes]:
    proto = JoinGroupRequest.JoinGroupRequestProtocol
    assignment = SyncGroupRequest.SyncGroupRequestAssignment
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    part = topic.OffsetCommitRequestPartition
    group = OffsetFetchRequest.OffsetFetchRequestGroup
    fetch_topic = group.OffsetFetchRequestTopics
    payloads = []
    for version in (0, 5, 6, 9):
        request = JoinGroupRequest[version](
            group_id="group",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="member",
            group_instance_id="instance" if version >= 5 else None,
            protocol_type="consumer",
            protocols=[proto(name="range", metadata=b"\x00\x01metadata")],
        )
        payloads.append(encode(request, version, 1)[4:])
    for version in (0, 4):
        request = SyncGroupRequest[version](
            group_id="group",
            generation_id=1,
            member_id="member",
            assignments=[assignment(member_id="member", assignment=b"abc")],
        )
        payloads.append(encode(request, version, 2)[4:])
    for version in (0, 4):
        request = HeartbeatRequest[version](group_id="g", generation_id=1, member_id="m")
        payloads.append(encode(request, version, 3)[4:])
    for version in (2, 8):
        p = part(partition_index=0, committed_offset=5, committed_metadata="x")
        request = OffsetCommitRequest[version](
            group_id="g",
            generation_id_or_member_epoch=1,
            member_id="m",
            topics=[topic(name="t", partitions=[p])],
        )
        payloads.append(encode(request, version, 4)[4:])
    request = OffsetFetchRequest[8](
        groups=[group(group_id="g", topics=[fetch_topic(name="t", partition_indexes=[0, 1])])]
    )
    payloads.append(encode(request, 8, 5)[4:])
    return payloads


VALID = _valid_payloads()


def test_valid_payloads_decode() -> None:
    assert all(decode_all(payload) is not None for payload in VALID)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes(payload: bytes) -> None:
    decode_all(payload)


@settings(max_examples=500, deadline=None)
@given(
    api_key=st.sampled_from([*sorted(apis.APIS), 0, 1, 17, 32767, -1]),
    version=st.integers(-2, 20),
    body=st.binary(max_size=256),
)
def test_known_headers_with_random_bodies(api_key: int, version: int, body: bytes) -> None:
    api = apis.APIS.get(api_key)
    flexible = api is not None and api.flexible(version)
    header = struct.pack(">hhih", api_key, version, 7, 2) + b"id" + (b"\x00" if flexible else b"")
    decode_all(header + body)


@settings(max_examples=500, deadline=None)
@given(
    index=st.integers(0, len(VALID) - 1),
    data=st.data(),
)
def test_mutated_valid_requests(index: int, data: st.DataObject) -> None:
    payload = bytearray(VALID[index])
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(payload) - 1))
        payload[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(payload)))
    decode_all(bytes(payload[:cut]))


@settings(max_examples=200, deadline=None)
@given(index=st.integers(0, len(VALID) - 1), data=st.data())
def test_every_truncation_is_rejected_cleanly(index: int, data: st.DataObject) -> None:
    payload = VALID[index]
    cut = data.draw(st.integers(0, len(payload) - 1))
    assert decode_all(payload[:cut]) is None
