"""Codec round trips against kafka-python 3.x's protocol classes, every API and version.

Requests are encoded by kafka-python (header included) and decoded by our
wire layer; results are encoded by our wire layer and decoded by kafka-python.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

# kafka-python loads its message schemas with a deprecated importlib call.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin.groups import (
        DeleteGroupsRequest,
        DeleteGroupsResponse,
        DescribeGroupsRequest,
        DescribeGroupsResponse,
        ListGroupsRequest,
        ListGroupsResponse,
    )
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
    from kafka.protocol.sasl import (
        SaslAuthenticateRequest,
        SaslAuthenticateResponse,
        SaslHandshakeRequest,
        SaslHandshakeResponse,
    )

from workgroup.coordinator import broker as b
from workgroup.coordinator import wire
from workgroup.errors import ErrorCode
from workgroup.kafka import apis
from workgroup.kafka import messages as m


def versions(api_key: int) -> list[int]:
    return list(apis.APIS[api_key].coordinator_versions)


def decode(request: Any, version: int) -> wire.Request:
    request.with_header(correlation_id=4242, client_id="kp-client")
    payload = bytes(request.encode(version=version, header=True))
    header, offset = wire.decode_header(payload)
    assert header.api_key == request.API_KEY
    assert header.api_version == version
    assert header.correlation_id == 4242
    assert header.client_id == "kp-client"
    return wire.decode_request(header, payload, offset, "10.0.0.7")


def respond(response_cls: Any, api_key: int, version: int, result: wire.Result) -> Any:
    header = wire.RequestHeader(api_key, version, 99, "kp-client")
    framed = wire.encode_response(header, result)
    assert int.from_bytes(framed[:4], "big") == len(framed) - 4
    decoded = response_cls[version].decode(framed[4:], header=True)
    assert decoded.header.correlation_id == 99
    return decoded


# --- ApiVersions, Metadata, FindCoordinator -----------------------------------


@pytest.mark.parametrize("version", versions(apis.API_VERSIONS))
def test_api_versions(version: int) -> None:
    req = ApiVersionsRequest[version](
        client_software_name="kafka-python", client_software_version="3.0"
    )
    decoded = decode(req, version)
    assert isinstance(decoded, b.ApiVersions)
    if version >= 3:
        assert decoded.client_software_name == "kafka-python"
    response = respond(
        ApiVersionsResponse,
        apis.API_VERSIONS,
        version,
        b.ApiVersionsResult(ErrorCode.NONE, wire.ADVERTISED_VERSIONS),
    )
    assert response.error_code == 0
    got = {a.api_key: (a.min_version, a.max_version) for a in response.api_keys}
    assert got == {
        a.key: (a.coordinator_versions[0], a.coordinator_versions[-1]) for a in apis.APIS.values()
    }


@pytest.mark.parametrize("version", versions(apis.METADATA))
def test_metadata(version: int) -> None:
    topic = MetadataRequest.MetadataRequestTopic
    kwargs: dict[str, Any] = {"topics": [topic(name="orders"), topic(name="audit")]}
    if version >= 4:
        kwargs["allow_auto_topic_creation"] = False
    decoded = decode(MetadataRequest[version](**kwargs), version)
    assert decoded == b.Metadata(("orders", "audit"), version < 4, api_version=version)
    me = b.BrokerAddress(0, "127.0.0.1", 9092)
    result = b.answer_metadata(decoded, me)
    response = respond(MetadataResponse, apis.METADATA, version, result)
    assert [(x.node_id, x.host, x.port) for x in response.brokers] == [(0, "127.0.0.1", 9092)]
    assert [(t.name, t.error_code, list(t.partitions)) for t in response.topics] == [
        ("orders", 3, []),
        ("audit", 3, []),
    ]
    if version >= 1:
        assert response.controller_id == 0
    if version >= 2:
        assert response.cluster_id == b.CLUSTER_ID


@pytest.mark.parametrize("version", [v for v in versions(apis.METADATA) if v >= 1])
def test_metadata_all_topics_is_empty(version: int) -> None:
    decoded = decode(MetadataRequest[version](topics=None), version)
    assert isinstance(decoded, b.Metadata)
    assert decoded.topics is None
    result = b.answer_metadata(decoded, b.BrokerAddress(0, "h", 1))
    assert respond(MetadataResponse, apis.METADATA, version, result).topics == []


@pytest.mark.parametrize("version", versions(apis.FIND_COORDINATOR))
def test_find_coordinator(version: int) -> None:
    if version >= 4:
        req = FindCoordinatorRequest[version](key_type=0, coordinator_keys=["g1", "g2"])
    elif version >= 1:
        req = FindCoordinatorRequest[version](key="g1", key_type=0)
    else:
        req = FindCoordinatorRequest[version](key="g1")
    decoded = decode(req, version)
    keys = ("g1", "g2") if version >= 4 else ("g1",)
    assert decoded == b.FindCoordinator(0, keys, api_version=version)
    me = b.BrokerAddress(7, "localhost", 1234)
    response = respond(
        FindCoordinatorResponse,
        apis.FIND_COORDINATOR,
        version,
        b.answer_find_coordinator(decoded, me),
    )
    if version >= 4:
        assert [
            (c.key, c.node_id, c.host, c.port, c.error_code) for c in response.coordinators
        ] == [
            ("g1", 7, "localhost", 1234, 0),
            ("g2", 7, "localhost", 1234, 0),
        ]
    else:
        assert (response.error_code, response.node_id, response.host, response.port) == (
            0,
            7,
            "localhost",
            1234,
        )


@pytest.mark.parametrize("version", [v for v in versions(apis.FIND_COORDINATOR) if v >= 1])
def test_find_coordinator_transaction_key_is_not_available(version: int) -> None:
    if version >= 4:
        req = FindCoordinatorRequest[version](key_type=1, coordinator_keys=["txn"])
    else:
        req = FindCoordinatorRequest[version](key="txn", key_type=1)
    decoded = decode(req, version)
    assert isinstance(decoded, b.FindCoordinator)
    result = b.answer_find_coordinator(decoded, b.BrokerAddress(0, "h", 1))
    response = respond(FindCoordinatorResponse, apis.FIND_COORDINATOR, version, result)
    entry = response.coordinators[0] if version >= 4 else response
    assert entry.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert "transactions" in entry.error_message


# --- group membership -------------------------------------------------------------


@pytest.mark.parametrize("version", versions(apis.JOIN_GROUP))
def test_join_group(version: int) -> None:
    proto = JoinGroupRequest.JoinGroupRequestProtocol
    kwargs: dict[str, Any] = {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "member_id": "m-1",
        "protocol_type": "consumer",
        "protocols": [proto(name="range", metadata=b"\x00\x01"), proto(name="rr", metadata=b"")],
    }
    if version >= 1:
        kwargs["rebalance_timeout_ms"] = 30_000
    if version >= 5:
        kwargs["group_instance_id"] = "instance-1"
    if version >= 8:
        kwargs["reason"] = "rejoin"
    decoded = decode(JoinGroupRequest[version](**kwargs), version)
    assert decoded == m.JoinGroup(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000 if version >= 1 else 10_000,
        member_id="m-1",
        protocol_type="consumer",
        protocols=(("range", b"\x00\x01"), ("rr", b"")),
        group_instance_id="instance-1" if version >= 5 else None,
        reason="rejoin" if version >= 8 else None,
        api_version=version,
        client=m.ClientInfo("kp-client", "10.0.0.7"),
    )
    result = m.JoinGroupResult(
        ErrorCode.NONE,
        generation_id=3,
        protocol_type="consumer",
        protocol_name="range",
        leader="m-1",
        member_id="m-1",
        members=(
            m.JoinedMember("m-1", "instance-1", b"md1"),
            m.JoinedMember("m-2", None, b"md2"),
        ),
        skip_assignment=False,
    )
    r = respond(JoinGroupResponse, apis.JOIN_GROUP, version, result)
    assert (r.error_code, r.generation_id, r.protocol_name, r.leader, r.member_id) == (
        0,
        3,
        "range",
        "m-1",
        "m-1",
    )
    assert [(x.member_id, x.metadata) for x in r.members] == [("m-1", b"md1"), ("m-2", b"md2")]
    if version >= 5:
        assert [x.group_instance_id for x in r.members] == ["instance-1", None]
    if version >= 7:
        assert r.protocol_type == "consumer"


@pytest.mark.parametrize("version", versions(apis.JOIN_GROUP))
def test_join_group_error_without_protocol(version: int) -> None:
    result = m.JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, member_id="new-id")
    r = respond(JoinGroupResponse, apis.JOIN_GROUP, version, result)
    assert (r.error_code, r.member_id, r.generation_id, r.members) == (79, "new-id", -1, [])
    assert r.protocol_name == ("" if version < 7 else None)


@pytest.mark.parametrize("version", versions(apis.SYNC_GROUP))
def test_sync_group(version: int) -> None:
    assignment = SyncGroupRequest.SyncGroupRequestAssignment
    kwargs: dict[str, Any] = {
        "group_id": "g",
        "generation_id": 4,
        "member_id": "m-1",
        "assignments": [
            assignment(member_id="m-1", assignment=b"a1"),
            assignment(member_id="m-2", assignment=b""),
        ],
    }
    if version >= 3:
        kwargs["group_instance_id"] = "i-1"
    if version >= 5:
        kwargs["protocol_type"] = "consumer"
        kwargs["protocol_name"] = "range"
    decoded = decode(SyncGroupRequest[version](**kwargs), version)
    assert decoded == m.SyncGroup(
        group_id="g",
        generation_id=4,
        member_id="m-1",
        assignments=(("m-1", b"a1"), ("m-2", b"")),
        group_instance_id="i-1" if version >= 3 else None,
        protocol_type="consumer" if version >= 5 else None,
        protocol_name="range" if version >= 5 else None,
        api_version=version,
    )
    result = m.SyncGroupResult(ErrorCode.NONE, b"my-assignment", "consumer", "range")
    r = respond(SyncGroupResponse, apis.SYNC_GROUP, version, result)
    assert (r.error_code, r.assignment) == (0, b"my-assignment")
    if version >= 5:
        assert (r.protocol_type, r.protocol_name) == ("consumer", "range")


@pytest.mark.parametrize("version", versions(apis.HEARTBEAT))
def test_heartbeat(version: int) -> None:
    kwargs: dict[str, Any] = {"group_id": "g", "generation_id": 9, "member_id": "m"}
    if version >= 3:
        kwargs["group_instance_id"] = "i"
    decoded = decode(HeartbeatRequest[version](**kwargs), version)
    assert decoded == m.Heartbeat("g", 9, "m", "i" if version >= 3 else None, api_version=version)
    for code in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.FENCED_INSTANCE_ID):
        r = respond(HeartbeatResponse, apis.HEARTBEAT, version, m.HeartbeatResult(code))
        assert r.error_code == code


@pytest.mark.parametrize("version", versions(apis.SASL_HANDSHAKE))
def test_sasl_handshake(version: int) -> None:
    decoded = decode(SaslHandshakeRequest[version](mechanism="SCRAM-SHA-512"), version)
    assert decoded == b.SaslHandshake("SCRAM-SHA-512", api_version=version)
    result = b.SaslHandshakeResult(ErrorCode.UNSUPPORTED_SASL_MECHANISM, ("PLAIN", "SCRAM-SHA-256"))
    r = respond(SaslHandshakeResponse, apis.SASL_HANDSHAKE, version, result)
    assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert list(r.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]


@pytest.mark.parametrize("version", versions(apis.SASL_AUTHENTICATE))
def test_sasl_authenticate(version: int) -> None:
    token = b"n,,n=alice,r=abc\x00\xff"
    decoded = decode(SaslAuthenticateRequest[version](auth_bytes=token), version)
    assert decoded == b.SaslAuthenticate(token, api_version=version)
    for result in (
        b.SaslAuthenticateResult(ErrorCode.NONE, None, b"r=abcdef,s=c2FsdA==,i=4096"),
        b.SaslAuthenticateResult(ErrorCode.SASL_AUTHENTICATION_FAILED, "failed", b""),
    ):
        r = respond(SaslAuthenticateResponse, apis.SASL_AUTHENTICATE, version, result)
        assert r.error_code == result.error
        assert r.error_message == result.error_message
        assert bytes(r.auth_bytes) == result.auth_bytes
        if version >= 1:
            assert r.session_lifetime_ms == 0


@pytest.mark.parametrize("version", versions(apis.LEAVE_GROUP))
def test_leave_group(version: int) -> None:
    if version < 3:
        req = LeaveGroupRequest[version](group_id="g", member_id="m-1")
        expected = (m.LeavingMember("m-1"),)
    else:
        identity = LeaveGroupRequest.MemberIdentity
        members = [
            identity(member_id="m-1", group_instance_id=None),
            identity(member_id="", group_instance_id="i-2"),
        ]
        if version >= 5:
            members[0].reason = "shutting down"
        req = LeaveGroupRequest[version](group_id="g", members=members)
        expected = (
            m.LeavingMember("m-1", None, "shutting down" if version >= 5 else None),
            m.LeavingMember("", "i-2"),
        )
    decoded = decode(req, version)
    assert decoded == m.LeaveGroup("g", expected, api_version=version)
    result = m.LeaveGroupResult(
        ErrorCode.NONE,
        (
            m.LeftMember("m-1", None, ErrorCode.UNKNOWN_MEMBER_ID),
            m.LeftMember("m-2", "i-2", ErrorCode.NONE),
        ),
    )
    r = respond(LeaveGroupResponse, apis.LEAVE_GROUP, version, result)
    if version < 3:
        # One member leaves; its error is the response's.
        assert r.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    else:
        assert r.error_code == 0
        assert [(x.member_id, x.group_instance_id, x.error_code) for x in r.members] == [
            ("m-1", None, 25),
            ("m-2", "i-2", 0),
        ]


# --- offsets ------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(apis.OFFSET_COMMIT))
def test_offset_commit(version: int) -> None:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    partition = topic.OffsetCommitRequestPartition

    def part(index: int, offset: int, metadata: str | None) -> Any:
        p = partition(partition_index=index, committed_offset=offset, committed_metadata=metadata)
        if version >= 6:
            p.committed_leader_epoch = 5
        if version == 1:
            p.commit_timestamp = 123
        return p

    kwargs: dict[str, Any] = {
        "group_id": "g",
        "topics": [
            topic(name="t1", partitions=[part(0, 10, "meta"), part(1, 11, None)]),
            topic(name="t2", partitions=[part(3, 0, "")]),
        ],
    }
    if version >= 1:
        kwargs["generation_id_or_member_epoch"] = 6
        kwargs["member_id"] = "m-1"
    if 2 <= version <= 4:
        kwargs["retention_time_ms"] = 60_000
    if version >= 7:
        kwargs["group_instance_id"] = "i-1"
    decoded = decode(OffsetCommitRequest[version](**kwargs), version)
    epoch = 5 if version >= 6 else -1
    assert decoded == m.OffsetCommit(
        group_id="g",
        generation_id=6 if version >= 1 else -1,
        member_id="m-1" if version >= 1 else "",
        topics=(
            m.CommitTopic(
                "t1",
                (m.CommitPartition(0, 10, "meta", epoch), m.CommitPartition(1, 11, None, epoch)),
            ),
            m.CommitTopic("t2", (m.CommitPartition(3, 0, "", epoch),)),
        ),
        group_instance_id="i-1" if version >= 7 else None,
        retention_time_ms=60_000 if 2 <= version <= 4 else -1,
        api_version=version,
    )
    result = m.OffsetCommitResult(
        (
            m.CommitTopicResult(
                "t1",
                (
                    m.CommitPartitionResult(0, ErrorCode.NONE),
                    m.CommitPartitionResult(1, ErrorCode.ILLEGAL_GENERATION),
                ),
            ),
        )
    )
    r = respond(OffsetCommitResponse, apis.OFFSET_COMMIT, version, result)
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics
    ] == [("t1", [(0, 0), (1, 22)])]


def _fetch_result(error: ErrorCode = ErrorCode.NONE, group: str = "g") -> m.FetchedGroup:
    return m.FetchedGroup(
        group,
        (
            m.FetchedTopic(
                "t1",
                (
                    m.FetchedPartition(0, 10, "meta", 5),
                    m.FetchedPartition(1, -1, None, -1),
                ),
            ),
        ),
        error,
    )


@pytest.mark.parametrize("version", versions(apis.OFFSET_FETCH))
def test_offset_fetch(version: int) -> None:
    if version >= 8:
        group = OffsetFetchRequest.OffsetFetchRequestGroup
        topics = group.OffsetFetchRequestTopics
        req = OffsetFetchRequest[version](
            groups=[
                group(group_id="g", topics=[topics(name="t1", partition_indexes=[0, 1])]),
                group(group_id="h", topics=None),
            ],
            require_stable=True,
        )
        expected_groups: tuple[m.OffsetFetchGroup, ...] = (
            m.OffsetFetchGroup("g", (m.FetchTopic("t1", (0, 1)),)),
            m.OffsetFetchGroup("h", None),
        )
    else:
        topic = OffsetFetchRequest.OffsetFetchRequestTopic
        kwargs: dict[str, Any] = {
            "group_id": "g",
            "topics": [topic(name="t1", partition_indexes=[0, 1])],
        }
        if version >= 7:
            kwargs["require_stable"] = True
        req = OffsetFetchRequest[version](**kwargs)
        expected_groups = (m.OffsetFetchGroup("g", (m.FetchTopic("t1", (0, 1)),)),)
    decoded = decode(req, version)
    assert decoded == m.OffsetFetch(
        expected_groups, require_stable=version >= 7, api_version=version
    )

    groups = (_fetch_result(), _fetch_result(group="h")) if version >= 8 else (_fetch_result(),)
    r = respond(OffsetFetchResponse, apis.OFFSET_FETCH, version, m.OffsetFetchResult(groups))
    response_groups = r.groups if version >= 8 else [r]
    for g in response_groups:
        (t,) = g.topics
        assert t.name == "t1"
        got = [
            (p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in t.partitions
        ]
        assert got == [(0, 10, "meta", 0), (1, -1, None, 0)]
        if version >= 5:
            assert [p.committed_leader_epoch for p in t.partitions] == [5, -1]
        if version >= 2:
            assert g.error_code == 0


@pytest.mark.parametrize("version", versions(apis.OFFSET_FETCH))
def test_offset_fetch_group_error(version: int) -> None:
    result = m.OffsetFetchResult((_fetch_result(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),))
    r = respond(OffsetFetchResponse, apis.OFFSET_FETCH, version, result)
    group = r.groups[0] if version >= 8 else r
    if version >= 2:
        assert group.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    else:  # no group-level error before v2: it is on every partition
        assert {p.error_code for p in group.topics[0].partitions} == {14}


@pytest.mark.parametrize("version", [v for v in versions(apis.OFFSET_FETCH) if v >= 2])
def test_offset_fetch_all_topics(version: int) -> None:
    if version >= 8:
        group = OffsetFetchRequest.OffsetFetchRequestGroup
        req = OffsetFetchRequest[version](groups=[group(group_id="g", topics=None)])
    else:
        req = OffsetFetchRequest[version](group_id="g", topics=None)
    decoded = decode(req, version)
    assert isinstance(decoded, m.OffsetFetch)
    assert decoded.groups == (m.OffsetFetchGroup("g", None),)


# --- group administration --------------------------------------------------------


@pytest.mark.parametrize("version", versions(apis.DESCRIBE_GROUPS))
def test_describe_groups(version: int) -> None:
    kwargs: dict[str, Any] = {"groups": ["g", "missing"]}
    if version >= 3:
        kwargs["include_authorized_operations"] = False
    decoded = decode(DescribeGroupsRequest[version](**kwargs), version)
    assert decoded == m.DescribeGroups(("g", "missing"), api_version=version)
    result = m.DescribeGroupsResult(
        (
            m.DescribedGroup(
                ErrorCode.NONE,
                "g",
                "Stable",
                "consumer",
                "range",
                (m.DescribedMember("m-1", "i-1", "client", "/10.0.0.7", b"md", b"as"),),
            ),
            m.DescribedGroup(ErrorCode.NONE, "missing", "Dead"),
        )
    )
    r = respond(DescribeGroupsResponse, apis.DESCRIBE_GROUPS, version, result)
    g, missing = r.groups
    assert (g.error_code, g.group_id, g.group_state, g.protocol_type, g.protocol_data) == (
        0,
        "g",
        "Stable",
        "consumer",
        "range",
    )
    (member,) = g.members
    assert (
        member.member_id,
        member.client_id,
        member.client_host,
        member.member_metadata,
        member.member_assignment,
    ) == ("m-1", "client", "/10.0.0.7", b"md", b"as")
    if version >= 4:
        assert member.group_instance_id == "i-1"
    assert (missing.group_id, missing.group_state, missing.members) == ("missing", "Dead", [])


@pytest.mark.parametrize("version", versions(apis.LIST_GROUPS))
def test_list_groups(version: int) -> None:
    kwargs: dict[str, Any] = {}
    if version >= 4:
        kwargs["states_filter"] = ["Stable"]
    if version >= 5:
        kwargs["types_filter"] = ["classic"]
    decoded = decode(ListGroupsRequest[version](**kwargs), version)
    assert decoded == m.ListGroups(
        ("Stable",) if version >= 4 else (),
        ("classic",) if version >= 5 else (),
        api_version=version,
    )
    result = m.ListGroupsResult(
        ErrorCode.NONE,
        (m.ListedGroup("g", "consumer", "Stable"), m.ListedGroup("h", "workgroup", "Empty")),
    )
    r = respond(ListGroupsResponse, apis.LIST_GROUPS, version, result)
    assert r.error_code == 0
    assert [(g.group_id, g.protocol_type) for g in r.groups] == [
        ("g", "consumer"),
        ("h", "workgroup"),
    ]
    if version >= 4:
        assert [g.group_state for g in r.groups] == ["Stable", "Empty"]
    if version >= 5:
        assert [g.group_type for g in r.groups] == ["classic", "classic"]


@pytest.mark.parametrize("version", versions(apis.DELETE_GROUPS))
def test_delete_groups(version: int) -> None:
    decoded = decode(DeleteGroupsRequest[version](groups_names=["g", "h"]), version)
    assert decoded == m.DeleteGroups(("g", "h"), api_version=version)
    result = m.DeleteGroupsResult(
        (m.DeletedGroup("g", ErrorCode.NONE), m.DeletedGroup("h", ErrorCode.NON_EMPTY_GROUP))
    )
    r = respond(DeleteGroupsResponse, apis.DELETE_GROUPS, version, result)
    assert [(x.group_id, x.error_code) for x in r.results] == [("g", 0), ("h", 68)]


# --- versions we do not implement ------------------------------------------------


def test_every_supported_version_has_a_test() -> None:
    tested: dict[int, Callable[..., None]] = {
        apis.API_VERSIONS: test_api_versions,
        apis.METADATA: test_metadata,
        apis.FIND_COORDINATOR: test_find_coordinator,
        apis.JOIN_GROUP: test_join_group,
        apis.SYNC_GROUP: test_sync_group,
        apis.HEARTBEAT: test_heartbeat,
        apis.LEAVE_GROUP: test_leave_group,
        apis.OFFSET_COMMIT: test_offset_commit,
        apis.OFFSET_FETCH: test_offset_fetch,
        apis.DESCRIBE_GROUPS: test_describe_groups,
        apis.LIST_GROUPS: test_list_groups,
        apis.DELETE_GROUPS: test_delete_groups,
        apis.SASL_HANDSHAKE: test_sasl_handshake,
        apis.SASL_AUTHENTICATE: test_sasl_authenticate,
    }
    assert set(tested) == set(apis.APIS)


@pytest.mark.parametrize("version", [4])
def test_unsupported_api_versions_version_gets_v0_answer(version: int) -> None:
    req = ApiVersionsRequest[version](client_software_name="x", client_software_version="1")
    req.with_header(correlation_id=8, client_id="kp")
    payload = bytes(req.encode(version=version, header=True))
    header, offset = wire.decode_header(payload)
    with pytest.raises(wire.UnsupportedVersionError) as info:
        wire.decode_request(header, payload, offset)
    answer = wire.unsupported_version_response(header, wire.request_of(info.value))
    assert answer is not None
    r = ApiVersionsResponse[0].decode(answer[4:], header=True)
    assert r.header.correlation_id == 8
    assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {a.api_key for a in r.api_keys} == set(apis.APIS)


@pytest.mark.parametrize(
    ("request_cls", "response_cls", "version", "kwargs"),
    [
        (DescribeGroupsRequest, DescribeGroupsResponse, 6, {"groups": ["g"]}),
        (
            OffsetCommitRequest,
            OffsetCommitResponse,
            10,
            {"group_id": "g", "member_id": "m", "topics": []},
        ),
        (MetadataRequest, MetadataResponse, 13, {"topics": None}),
    ],
)
def test_unsupported_version_gets_unsupported_version_error(
    request_cls: Any, response_cls: Any, version: int, kwargs: dict[str, Any]
) -> None:
    req = request_cls[version](**kwargs)
    req.with_header(correlation_id=8, client_id="kp")
    payload = bytes(req.encode(version=version, header=True))
    header, offset = wire.decode_header(payload)
    with pytest.raises(wire.UnsupportedVersionError) as info:
        wire.decode_request(header, payload, offset)
    answer = wire.unsupported_version_response(header, wire.request_of(info.value))
    assert answer is not None
    response = response_cls[version].decode(answer[4:], header=True)
    assert response.header.correlation_id == 8
    if request_cls is DescribeGroupsRequest:
        assert response.groups[0].error_code == ErrorCode.UNSUPPORTED_VERSION


@pytest.mark.parametrize("version", [1, 9, 12])
def test_metadata_empty_topics_reports_existing_topics_without_partitions(version: int) -> None:
    topic = MetadataRequest.MetadataRequestTopic
    decoded = decode(MetadataRequest[version](topics=[topic(name="orders")]), version)
    assert isinstance(decoded, b.Metadata)
    me = b.BrokerAddress(0, "h", 1)
    result = b.answer_metadata(decoded, me, empty_topics=True)
    response = respond(MetadataResponse, apis.METADATA, version, result)
    assert [(t.name, t.error_code, list(t.partitions)) for t in response.topics] == [
        ("orders", 0, [])
    ]
