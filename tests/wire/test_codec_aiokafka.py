"""Codec round trips against aiokafka 0.14's protocol structs (the versions it ships).

aiokafka is the second, independent encoder: its hand-written structs predate
Kafka's JSON specs, so agreement with them checks our reading of the old
versions (including OffsetCommit v0/v1 and OffsetFetch v0, which kio no longer
ships).
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.protocol import admin, commit, coordination, group, metadata
from aiokafka.protocol.api import ResponseHeader_v0

from workgroup.coordinator import broker as b
from workgroup.coordinator import wire
from workgroup.errors import ErrorCode
from workgroup.kafka import apis
from workgroup.kafka import messages as m

CLIENT = m.ClientInfo("aiokafka-test", "10.1.2.3")


def decode(struct: Any) -> wire.Request:
    header = struct.build_request_header(correlation_id=77, client_id="aiokafka-test")
    payload = header.encode() + struct.encode()
    parsed, offset = wire.decode_header(payload)
    assert (parsed.api_key, parsed.api_version, parsed.correlation_id) == (
        struct.API_KEY,
        struct.API_VERSION,
        77,
    )
    return wire.decode_request(parsed, payload, offset, CLIENT.client_host)


def respond(struct: Any, result: wire.Result) -> Any:
    header = wire.RequestHeader(struct.API_KEY, struct.API_VERSION, 78, "aiokafka-test")
    framed = wire.encode_response(header, result)
    assert ResponseHeader_v0.decode(framed[4:8]).correlation_id == 78
    return struct.RESPONSE_TYPE.decode(framed[8:])


def test_api_versions() -> None:
    for struct in (
        admin.ApiVersionRequest_v0(),
        admin.ApiVersionRequest_v1(),
        admin.ApiVersionRequest_v2(),
    ):
        assert isinstance(decode(struct), b.ApiVersions)
        r = respond(struct, b.ApiVersionsResult(ErrorCode.NONE, wire.ADVERTISED_VERSIONS))
        assert r.error_code == 0
        assert {k: (lo, hi) for k, lo, hi in r.api_versions} == {
            a.key: (a.coordinator_versions[0], a.coordinator_versions[-1])
            for a in apis.APIS.values()
        }


@pytest.mark.parametrize("version", range(6))
def test_metadata(version: int) -> None:
    cls = getattr(metadata, f"MetadataRequest_v{version}")
    struct = cls(["t1"], False) if version >= 4 else cls(["t1"])
    decoded = decode(struct)
    assert isinstance(decoded, b.Metadata)
    assert decoded.topics == ("t1",)
    r = respond(struct, b.answer_metadata(decoded, b.BrokerAddress(0, "127.0.0.1", 9)))
    assert r.brokers[0][:3] == (0, "127.0.0.1", 9)
    assert r.topics[0][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert r.topics[0][1] == "t1"


def test_find_coordinator() -> None:
    me = b.BrokerAddress(0, "127.0.0.1", 9)
    v0 = coordination.FindCoordinatorRequest_v0("g")
    assert decode(v0) == b.FindCoordinator(0, ("g",), api_version=0)
    r0 = respond(v0, b.answer_find_coordinator(b.FindCoordinator(0, ("g",)), me))
    assert (r0.error_code, r0.coordinator_id, r0.host, r0.port) == (0, 0, "127.0.0.1", 9)
    v1 = coordination.FindCoordinatorRequest_v1("g", 0)
    assert decode(v1) == b.FindCoordinator(0, ("g",), api_version=1)
    r1 = respond(v1, b.answer_find_coordinator(b.FindCoordinator(0, ("g",)), me))
    assert (r1.error_code, r1.coordinator_id, r1.host, r1.port) == (0, 0, "127.0.0.1", 9)


@pytest.mark.parametrize("version", [0, 1, 2, 5])
def test_join_group(version: int) -> None:
    cls = getattr(group, f"JoinGroupRequest_v{version}")
    protocols = [("roundrobin", b"md-1"), ("range", b"md-2")]
    if version == 0:
        struct = cls("g", 10_000, "", "consumer", protocols)
    elif version < 5:
        struct = cls("g", 10_000, 40_000, "", "consumer", protocols)
    else:
        struct = cls("g", 10_000, 40_000, "m", "inst", "consumer", protocols)
    decoded = decode(struct)
    assert decoded == m.JoinGroup(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000 if version == 0 else 40_000,
        member_id="m" if version == 5 else "",
        protocol_type="consumer",
        protocols=(("roundrobin", b"md-1"), ("range", b"md-2")),
        group_instance_id="inst" if version == 5 else None,
        api_version=version,
        client=CLIENT,
    )
    result = m.JoinGroupResult(
        ErrorCode.NONE, 2, "consumer", "range", "m", "m", (m.JoinedMember("m", "inst", b"x"),)
    )
    r = respond(struct, result)
    assert (r.error_code, r.generation_id, r.group_protocol, r.leader_id, r.member_id) == (
        0,
        2,
        "range",
        "m",
        "m",
    )
    assert r.members == ([("m", "inst", b"x")] if version == 5 else [("m", b"x")])


@pytest.mark.parametrize("version", [0, 1, 3])
def test_sync_group(version: int) -> None:
    cls = getattr(group, f"SyncGroupRequest_v{version}")
    assignments = [("m", b"a"), ("n", b"b")]
    if version == 3:
        struct = cls("g", 2, "m", "inst", assignments)
    else:
        struct = cls("g", 2, "m", assignments)
    assert decode(struct) == m.SyncGroup(
        "g",
        2,
        "m",
        (("m", b"a"), ("n", b"b")),
        group_instance_id="inst" if version == 3 else None,
        api_version=version,
    )
    r = respond(struct, m.SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS, b""))
    assert (r.error_code, r.member_assignment) == (27, b"")
    r = respond(struct, m.SyncGroupResult(ErrorCode.NONE, b"mine"))
    assert (r.error_code, r.member_assignment) == (0, b"mine")


@pytest.mark.parametrize("version", [0, 1])
def test_heartbeat_and_leave(version: int) -> None:
    hb = getattr(group, f"HeartbeatRequest_v{version}")("g", 5, "m")
    assert decode(hb) == m.Heartbeat("g", 5, "m", api_version=version)
    assert respond(hb, m.HeartbeatResult(ErrorCode.ILLEGAL_GENERATION)).error_code == 22
    leave = getattr(group, f"LeaveGroupRequest_v{version}")("g", "m")
    assert decode(leave) == m.LeaveGroup("g", (m.LeavingMember("m"),), api_version=version)
    result = m.LeaveGroupResult(ErrorCode.NONE, (m.LeftMember("m", None, ErrorCode.NONE),))
    assert respond(leave, result).error_code == 0


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_offset_commit(version: int) -> None:
    cls = getattr(commit, f"OffsetCommitRequest_v{version}")
    if version == 0:
        struct = cls("g", [("t", [(0, 42, "meta"), (1, 43, "")])])
    elif version == 1:
        struct = cls("g", 3, "m", [("t", [(0, 42, 1_700_000_000_000, "meta"), (1, 43, -1, "")])])
    else:
        struct = cls("g", 3, "m", 86_400_000, [("t", [(0, 42, "meta"), (1, 43, "")])])
    assert decode(struct) == m.OffsetCommit(
        group_id="g",
        generation_id=-1 if version == 0 else 3,
        member_id="" if version == 0 else "m",
        topics=(
            m.CommitTopic("t", (m.CommitPartition(0, 42, "meta"), m.CommitPartition(1, 43, ""))),
        ),
        retention_time_ms=86_400_000 if version >= 2 else -1,
        api_version=version,
    )
    result = m.OffsetCommitResult(
        (
            m.CommitTopicResult(
                "t",
                (
                    m.CommitPartitionResult(0, ErrorCode.NONE),
                    m.CommitPartitionResult(1, ErrorCode.ILLEGAL_GENERATION),
                ),
            ),
        )
    )
    assert respond(struct, result).topics == [("t", [(0, 0), (1, 22)])]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_offset_fetch(version: int) -> None:
    struct = getattr(commit, f"OffsetFetchRequest_v{version}")("g", [("t", [0, 1])])
    assert decode(struct) == m.OffsetFetch(
        (m.OffsetFetchGroup("g", (m.FetchTopic("t", (0, 1)),)),), api_version=version
    )
    result = m.OffsetFetchResult(
        (
            m.FetchedGroup(
                "g",
                (
                    m.FetchedTopic(
                        "t", (m.FetchedPartition(0, 42, "meta"), m.FetchedPartition(1, -1, ""))
                    ),
                ),
            ),
        )
    )
    r = respond(struct, result)
    assert r.topics == [("t", [(0, 42, "meta", 0), (1, -1, "", 0)])]
    if version >= 2:
        assert r.error_code == 0


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_describe_groups(version: int) -> None:
    cls = getattr(admin, f"DescribeGroupsRequest_v{version}")
    struct = cls(["g"], False) if version == 3 else cls(["g"])
    assert decode(struct) == m.DescribeGroups(("g",), api_version=version)
    if version == 3:
        return  # aiokafka decodes v3 responses with its v2 type (see /work/shared/README.md)
    result = m.DescribeGroupsResult(
        (
            m.DescribedGroup(
                ErrorCode.NONE,
                "g",
                "Stable",
                "consumer",
                "range",
                (m.DescribedMember("m", None, "cid", "/h", b"md", b"as"),),
            ),
        )
    )
    (g,) = respond(struct, result).groups
    assert g[:5] == (0, "g", "Stable", "consumer", "range")
    assert g[5] == [("m", "cid", "/h", b"md", b"as")]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_list_groups(version: int) -> None:
    struct = getattr(admin, f"ListGroupsRequest_v{version}")()
    # aiokafka's ListGroupsRequest_v2 says API_VERSION = 1 on the wire.
    assert decode(struct) == m.ListGroups(api_version=struct.API_VERSION)
    r = respond(
        struct, m.ListGroupsResult(ErrorCode.NONE, (m.ListedGroup("g", "consumer", "Stable"),))
    )
    assert (r.error_code, r.groups) == (0, [("g", "consumer")])


@pytest.mark.parametrize("version", [0, 1])
def test_delete_groups(version: int) -> None:
    struct = getattr(admin, f"DeleteGroupsRequest_v{version}")(["g", "h"])
    assert decode(struct) == m.DeleteGroups(("g", "h"), api_version=version)
    result = m.DeleteGroupsResult(
        (m.DeletedGroup("g", ErrorCode.NONE), m.DeletedGroup("h", ErrorCode.GROUP_ID_NOT_FOUND))
    )
    assert respond(struct, result).results == [("g", 0), ("h", 69)]
