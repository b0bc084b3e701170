"""The aiokafka adapter: a record sent through ``AIOKafkaConnection.send``'s interface."""

from __future__ import annotations

import datetime
import importlib
import io

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32, i32Timedelta

from workgroup.errors import ErrorCode, ProtocolError, UnsupportedVersionError
from workgroup.kafka.adapter import KafkaRequest, choose_version, to_result
from workgroup.kafka.apis import APIS, response_schema
from workgroup.kafka.codec import write_entity
from workgroup.kafka.messages import (
    CommitPartition,
    CommitTopic,
    DeleteGroups,
    DescribedGroup,
    DescribedMember,
    DescribeGroups,
    DescribeGroupsResult,
    FetchTopic,
    FindCoordinator,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    LeavingMember,
    ListGroups,
    OffsetCommit,
    OffsetFetch,
    OffsetFetchGroup,
    SyncGroup,
    SyncGroupResult,
)
from workgroup.member.errors import describe_group_summary

JOIN = JoinGroup("g", 10_000, 30_000, "m-1", "workgroup", (("sticky.v1", b"meta"),))
SYNC = SyncGroup("g", 3, "m-1", (("m-1", b"a"), ("m-2", b"b")), None, "workgroup", "sticky.v1")
HEARTBEAT = Heartbeat("g", 3, "m-1")
LEAVE = LeaveGroup("g", (LeavingMember("m-1", None, "closing"),))
MEMBER_REQUESTS = {
    11: JOIN,
    14: SYNC,
    12: HEARTBEAT,
    13: LEAVE,
    8: OffsetCommit("g", 3, "m-1", (CommitTopic("t", (CommitPartition(0, 42, "m"),)),)),
    9: OffsetFetch((OffsetFetchGroup("g", (FetchTopic("t", (0, 1)),)),)),
    15: DescribeGroups(("g",)),
    16: ListGroups(),
    42: DeleteGroups(("g",)),
}


def _decode_request(struct: object) -> object:
    entity = struct.entity  # type: ignore[attr-defined]
    body = struct.encode()  # type: ignore[attr-defined]
    return entity_reader(type(entity))(body, 0)[0]


@pytest.mark.parametrize("version", range(10))
def test_join_group_every_version(version: int) -> None:
    struct = KafkaRequest(JOIN).prepare({11: (0, version)})
    assert version == struct.API_VERSION
    assert (version >= 6) == struct.FLEXIBLE_VERSION
    decoded = _decode_request(struct)
    assert decoded.group_id == "g"  # type: ignore[attr-defined]
    assert decoded.member_id == "m-1"  # type: ignore[attr-defined]
    assert decoded.protocols[0].metadata == b"meta"  # type: ignore[attr-defined]
    if version >= 1:
        assert decoded.rebalance_timeout.total_seconds() == 30  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("request_record", "key", "versions"),
    [(SYNC, 14, range(6)), (HEARTBEAT, 12, range(5)), (LEAVE, 13, range(6))],
)
def test_other_requests_every_version(request_record: object, key: int, versions: range) -> None:
    for version in versions:
        struct = KafkaRequest(request_record).prepare({key: (0, version)})  # type: ignore[arg-type]
        decoded = _decode_request(struct)
        assert decoded.group_id == "g"  # type: ignore[attr-defined]
        header = struct.build_request_header(correlation_id=7, client_id="c").encode()
        assert header[:4] == key.to_bytes(2, "big") + version.to_bytes(2, "big")


def test_highest_common_version_is_chosen() -> None:
    assert choose_version(JOIN, (0, 9)) == 9
    assert choose_version(JOIN, (2, 42)) == 9
    assert choose_version(HEARTBEAT, (0, 2)) == 2


def test_no_common_version_is_a_clear_error() -> None:
    with pytest.raises(UnsupportedVersionError, match="no common JoinGroup version"):
        choose_version(JOIN, (10, 12))
    with pytest.raises(UnsupportedVersionError, match="does not support"):
        choose_version(JOIN, None)


def test_static_membership_needs_new_enough_versions() -> None:
    static = JoinGroup("g", 10_000, 30_000, "", "workgroup", (), group_instance_id="w-1")
    assert choose_version(static, (0, 5)) == 5
    with pytest.raises(UnsupportedVersionError, match="static membership"):
        choose_version(static, (0, 4))
    with pytest.raises(UnsupportedVersionError, match="static membership"):
        choose_version(Heartbeat("g", 1, "m", "w-1"), (0, 2))


def _frame(version_module: str, cls_name: str, entity_kwargs: dict[str, object]) -> tuple:  # type: ignore[type-arg]
    module = importlib.import_module(version_module)
    cls = getattr(module, cls_name)
    entity = cls(**entity_kwargs)
    out = io.BytesIO()
    entity_writer(cls)(out, entity)
    return cls, out.getvalue()


def test_join_response_v9_decodes_to_a_result() -> None:
    module = importlib.import_module("kio.schema.join_group.v9.response")
    member = module.JoinGroupResponseMember(member_id="m-2", group_instance_id="w-2", metadata=b"x")
    _, body = _frame(
        "kio.schema.join_group.v9.response",
        "JoinGroupResponse",
        {
            "throttle_time": i32Timedelta.parse(datetime.timedelta(0)),
            "error_code": KioErrorCode.none,
            "generation_id": i32(4),
            "protocol_type": "workgroup",
            "protocol_name": "sticky.v1",
            "leader": "m-2",
            "skip_assignment": False,
            "member_id": "m-1",
            "members": (member,),
        },
    )
    struct = KafkaRequest(JOIN).prepare({11: (0, 9)})
    header_cls = response_schema(11, 9).__header_schema__
    header = io.BytesIO()
    entity_writer(header_cls)(header, header_cls(correlation_id=i32(5)))
    frame = io.BytesIO(header.getvalue() + body)
    assert struct.parse_response_header(frame).correlation_id == 5
    result = to_result(JOIN, struct.RESPONSE_TYPE.decode(frame))
    assert isinstance(result, JoinGroupResult)
    assert result.error is ErrorCode.NONE
    assert result.generation_id == 4
    assert result.protocol_type == "workgroup"
    assert result.members[0].group_instance_id == "w-2"


def test_old_versions_decode_with_defaults() -> None:
    _, body = _frame(
        "kio.schema.sync_group.v0.response",
        "SyncGroupResponse",
        {"error_code": KioErrorCode.rebalance_in_progress, "assignment": b""},
    )
    struct = KafkaRequest(SYNC).prepare({14: (0, 0)})
    result = to_result(SYNC, struct.RESPONSE_TYPE.decode(io.BytesIO(body)))
    assert result == SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS, b"", None, None)
    _, body = _frame(
        "kio.schema.heartbeat.v0.response",
        "HeartbeatResponse",
        {"error_code": KioErrorCode.unknown_member_id},
    )
    struct = KafkaRequest(HEARTBEAT).prepare({12: (0, 0)})
    assert to_result(HEARTBEAT, struct.RESPONSE_TYPE.decode(body)) == HeartbeatResult(
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    _, body = _frame(
        "kio.schema.leave_group.v0.response",
        "LeaveGroupResponse",
        {"error_code": KioErrorCode.none},
    )
    struct = KafkaRequest(LEAVE).prepare({13: (0, 0)})
    assert to_result(LEAVE, struct.RESPONSE_TYPE.decode(body)) == LeaveGroupResult(ErrorCode.NONE)


def test_error_codes_workgroup_does_not_name_map_to_unknown_server_error() -> None:
    _, body = _frame(
        "kio.schema.heartbeat.v4.response",
        "HeartbeatResponse",
        {
            "throttle_time": i32Timedelta.parse(datetime.timedelta(0)),
            "error_code": KioErrorCode.throttling_quota_exceeded,
        },
    )
    struct = KafkaRequest(HEARTBEAT).prepare({12: (0, 4)})
    result = to_result(HEARTBEAT, struct.RESPONSE_TYPE.decode(body))
    assert result == HeartbeatResult(ErrorCode.UNKNOWN_SERVER_ERROR)


def test_malformed_response_is_a_protocol_error() -> None:
    struct = KafkaRequest(JOIN).prepare({11: (0, 9)})
    with pytest.raises(ProtocolError, match="malformed JoinGroupResponse"):
        struct.RESPONSE_TYPE.decode(io.BytesIO(b"\x00\x01"))


def test_the_request_header_is_kafkas_v1_or_v2() -> None:
    old = KafkaRequest(HEARTBEAT).prepare({12: (0, 3)})
    assert old.build_request_header(7, "cid").encode() == (
        b"\x00\x0c\x00\x03\x00\x00\x00\x07\x00\x03cid"
    )
    flexible = KafkaRequest(HEARTBEAT).prepare({12: (0, 4)})
    assert flexible.FLEXIBLE_VERSION
    # v2: v1 plus an empty tagged-field section (the client id stays an int16 string).
    assert flexible.build_request_header(7, "cid").encode() == (
        b"\x00\x0c\x00\x04\x00\x00\x00\x07\x00\x03cid\x00"
    )


def test_every_member_api_is_sent_in_each_of_its_versions() -> None:
    for api in APIS.values():
        if api.member_versions is None:
            continue
        for version in api.member_versions:
            record = MEMBER_REQUESTS[api.key]
            struct = KafkaRequest(record).prepare({api.key: (version, version)})
            assert (api.key, version) == (struct.API_KEY, struct.API_VERSION)
            decoded = _decode_request(struct)
            assert api.request_record(version, decoded).api_version == version  # type: ignore[union-attr]


def test_apis_a_member_does_not_send_are_refused() -> None:
    with pytest.raises(TypeError, match="does not send FindCoordinator"):
        choose_version(FindCoordinator(0, ("g",)), (0, 4))


def test_describe_groups_answer_explains_an_inconsistent_protocol() -> None:
    request = DescribeGroups(("g",))
    struct = KafkaRequest(request).prepare({15: (0, 5)})
    assert struct.API_VERSION == 5
    member = DescribedMember("m-1", None, "cid", "/h", b"", b"")
    group = DescribedGroup(ErrorCode.NONE, "g", "Stable", "consumer", "range", (member,))
    entity = APIS[15].result_entity(DescribeGroupsResult((group,)), 5)
    result = to_result(request, struct.RESPONSE_TYPE.decode(write_entity(entity)))
    assert isinstance(result, DescribeGroupsResult)
    assert describe_group_summary(result, "g") == (
        "the group uses protocol type 'consumer' with protocol 'range' and has 1 member"
    )
    assert describe_group_summary(result, "other") is None
    # Tansu answers with an empty protocol name: nothing useful to add.
    tansu = DescribeGroupsResult((DescribedGroup(ErrorCode.NONE, "g", "Stable", "consumer", ""),))
    assert describe_group_summary(tansu, "g") is None


def test_a_null_client_id_is_a_null_string() -> None:
    struct = KafkaRequest(HEARTBEAT).prepare({12: (0, 0)})
    assert (
        struct.build_request_header(1, None).encode() == b"\x00\x0c\x00\x00\x00\x00\x00\x01\xff\xff"
    )
