"""Group requests on the wire: kio entities wrapped for aiokafka's connections.

aiokafka 0.14 ships JoinGroup v0-2/5, SyncGroup v0/1/3, Heartbeat v0/1 and
LeaveGroup v0/1 only (no instance id on heartbeats or leaves, no flexible
versions).  kio generates every version of every message from Kafka's JSON
specs, including flexible versions with compact strings and tagged fields, so
the member encodes with kio and hands aiokafka an object with the interface its
``AIOKafkaConnection.send`` uses: ``prepare(versions)`` picks the highest version
both sides speak (from the connection's ApiVersions answer) and returns a
struct with ``build_request_header``, ``encode``, ``parse_response_header`` and
``RESPONSE_TYPE.decode``.

Requests and results are the version-independent records of
``workgroup.kafka.messages``; :func:`to_result` converts kio's responses.

One request is not the group protocol's: :class:`DescribeGroupRequest`, sent
once when the coordinator refuses the member's protocols, to say in the error
which protocols the group speaks (:func:`describe_group_summary`).
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
from typing import Any, ClassVar

from aiokafka.protocol.admin import DescribeGroupsRequest_v0, DescribeGroupsRequest_v1
from aiokafka.protocol.api import Request
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i32Timedelta, i64

from workgroup.errors import ErrorCode, ProtocolError, UnsupportedVersionError
from workgroup.kafka.messages import (
    CommitPartitionResult,
    CommitTopicResult,
    DeletedGroup,
    DeleteGroups,
    DeleteGroupsResult,
    DescribedGroup,
    DescribedMember,
    DescribeGroups,
    DescribeGroupsResult,
    FetchedGroup,
    FetchedPartition,
    FetchedTopic,
    GroupResult,
    Heartbeat,
    HeartbeatResult,
    JoinedMember,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    LeftMember,
    ListedGroup,
    ListGroups,
    ListGroupsResult,
    OffsetCommit,
    OffsetCommitResult,
    OffsetFetch,
    OffsetFetchResult,
    SyncGroup,
    SyncGroupResult,
)
from workgroup.log import get_logger

log = get_logger(__name__)

MemberRequest = (
    JoinGroup
    | SyncGroup
    | Heartbeat
    | LeaveGroup
    | OffsetCommit
    | OffsetFetch
    | DescribeGroups
    | ListGroups
    | DeleteGroups
)


@dataclasses.dataclass(frozen=True, slots=True)
class _Api:
    key: int
    module: str  # kio.schema.<module>.v<N>
    response: str  # the response entity's class name
    versions: range
    #: First version that carries group_instance_id (static membership, KIP-345).
    instance_id_since: int


_APIS: dict[type, _Api] = {
    JoinGroup: _Api(11, "join_group", "JoinGroupResponse", range(0, 10), 5),
    SyncGroup: _Api(14, "sync_group", "SyncGroupResponse", range(0, 6), 3),
    Heartbeat: _Api(12, "heartbeat", "HeartbeatResponse", range(0, 5), 3),
    LeaveGroup: _Api(13, "leave_group", "LeaveGroupResponse", range(0, 6), 3),
    # Leases commit and read checkpoints: OffsetCommit v7-8 (with the instance
    # id; v9 is KIP-848's) and OffsetFetch v8 (several groups, Kafka 3.0+).
    OffsetCommit: _Api(8, "offset_commit", "OffsetCommitResponse", range(7, 9), 7),
    OffsetFetch: _Api(9, "offset_fetch", "OffsetFetchResponse", range(8, 9), 0),
    # Operators' views (workgroup describe / list): kio decodes every version.
    DescribeGroups: _Api(15, "describe_groups", "DescribeGroupsResponse", range(0, 6), 0),
    ListGroups: _Api(16, "list_groups", "ListGroupsResponse", range(0, 5), 0),
    DeleteGroups: _Api(42, "delete_groups", "DeleteGroupsResponse", range(0, 3), 0),
}


def _entities(api: _Api, version: int) -> tuple[Any, Any]:
    request = importlib.import_module(f"kio.schema.{api.module}.v{version}.request")
    response = importlib.import_module(f"kio.schema.{api.module}.v{version}.response")
    return request, response


def choose_version(request: MemberRequest, broker: tuple[int, int] | None) -> int:
    """The highest version both sides speak; ``None``: the broker did not list the API."""
    api = _APIS[type(request)]
    name = type(request).__name__
    if broker is None:
        raise UnsupportedVersionError(f"the broker does not support {name} at all")
    low, high = broker
    common = [v for v in api.versions if low <= v <= high]
    if not common:
        raise UnsupportedVersionError(
            f"no common {name} version: broker speaks {low}..{high}, "
            f"workgroup {api.versions.start}..{api.versions.stop - 1}"
        )
    version = max(common)
    instance_id = getattr(request, "group_instance_id", None)
    if isinstance(request, LeaveGroup):
        instance_id = next(
            (m.group_instance_id for m in request.members if m.group_instance_id), None
        )
        if len(request.members) != 1 and version < 3:
            raise UnsupportedVersionError("LeaveGroup for several members needs v3+")
    if instance_id is not None and version < api.instance_id_since:
        raise UnsupportedVersionError(
            f"static membership (instance id) needs {name} v{api.instance_id_since}+, "
            f"the broker speaks up to v{high}"
        )
    return version


def _ms(value: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


def build_entity(request: MemberRequest, version: int) -> Any:
    """The kio request entity of ``request`` at ``version``."""
    api = _APIS[type(request)]
    mod, _ = _entities(api, version)
    if isinstance(request, JoinGroup):
        cls = mod.JoinGroupRequest
        values: dict[str, Any] = {
            "group_id": request.group_id,
            "session_timeout": _ms(request.session_timeout_ms),
            "rebalance_timeout": _ms(request.rebalance_timeout_ms),
            "member_id": request.member_id,
            "group_instance_id": request.group_instance_id,
            "protocol_type": request.protocol_type,
            "protocols": tuple(
                mod.JoinGroupRequestProtocol(name=name, metadata=metadata)
                for name, metadata in request.protocols
            ),
            "reason": request.reason,
        }
    elif isinstance(request, SyncGroup):
        cls = mod.SyncGroupRequest
        values = {
            "group_id": request.group_id,
            "generation_id": i32(request.generation_id),
            "member_id": request.member_id,
            "group_instance_id": request.group_instance_id,
            "protocol_type": request.protocol_type,
            "protocol_name": request.protocol_name,
            "assignments": tuple(
                mod.SyncGroupRequestAssignment(member_id=member_id, assignment=blob)
                for member_id, blob in request.assignments
            ),
        }
    elif isinstance(request, Heartbeat):
        cls = mod.HeartbeatRequest
        values = {
            "group_id": request.group_id,
            "generation_id": i32(request.generation_id),
            "member_id": request.member_id,
            "group_instance_id": request.group_instance_id,
        }
    elif isinstance(request, OffsetCommit):
        cls = mod.OffsetCommitRequest
        values = {
            "group_id": request.group_id,
            "generation_id_or_member_epoch": i32(request.generation_id),
            "member_id": request.member_id,
            "group_instance_id": request.group_instance_id,
            "topics": tuple(
                mod.OffsetCommitRequestTopic(
                    name=topic.name,
                    partitions=tuple(
                        mod.OffsetCommitRequestPartition(
                            partition_index=i32(p.partition),
                            committed_offset=i64(p.offset),
                            committed_leader_epoch=i32(p.leader_epoch),
                            committed_metadata=p.metadata,
                        )
                        for p in topic.partitions
                    ),
                )
                for topic in request.topics
            ),
        }
    elif isinstance(request, OffsetFetch):
        cls = mod.OffsetFetchRequest
        values = {
            "groups": tuple(
                mod.OffsetFetchRequestGroup(
                    group_id=group.group_id,
                    topics=None
                    if group.topics is None
                    else tuple(
                        mod.OffsetFetchRequestTopics(
                            name=t.name, partition_indexes=tuple(i32(p) for p in t.partitions)
                        )
                        for t in group.topics
                    ),
                )
                for group in request.groups
            ),
            "require_stable": request.require_stable,
        }
    elif isinstance(request, DescribeGroups):
        cls = mod.DescribeGroupsRequest
        values = {"groups": request.group_ids, "include_authorized_operations": False}
    elif isinstance(request, ListGroups):
        cls = mod.ListGroupsRequest
        values = {"states_filter": request.states_filter}
    elif isinstance(request, DeleteGroups):
        cls = mod.DeleteGroupsRequest
        values = {"groups_names": request.group_ids}
    else:
        cls = mod.LeaveGroupRequest
        values = {"group_id": request.group_id}
        if version >= 3:
            identity = mod.MemberIdentity
            names = {f.name for f in dataclasses.fields(identity)}
            values["members"] = tuple(
                identity(
                    **{
                        k: v
                        for k, v in (
                            ("member_id", m.member_id),
                            ("group_instance_id", m.group_instance_id),
                            ("reason", m.reason),
                        )
                        if k in names
                    }
                )
                for m in request.members
            )
        else:
            values["member_id"] = request.members[0].member_id
    fields = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in fields})


class _Header:
    def __init__(self, entity: Any) -> None:
        self._entity = entity

    def encode(self) -> bytes:
        return _write(self._entity)


class _ResponseHeader:
    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id


class _ResponseDecoder:
    def __init__(self, entity_type: Any) -> None:
        self._reader = entity_reader(entity_type)
        self._type = entity_type

    def decode(self, buffer: io.BytesIO | bytes) -> Any:
        data = buffer.read() if isinstance(buffer, io.BytesIO) else buffer
        try:
            entity, _size = self._reader(data, 0)
        except Exception as exc:  # kio raises several types for malformed input
            raise ProtocolError(
                f"malformed {self._type.__name__} v{self._type.__version__}: {exc}"
            ) from exc
        return entity


class KioRequestStruct:
    """One encoded request version, in the shape aiokafka's connection expects."""

    def __init__(self, entity: Any, response_type: Any) -> None:
        self.entity = entity
        self.API_KEY = int(entity.__api_key__)
        self.API_VERSION = int(entity.__version__)
        self.FLEXIBLE_VERSION = bool(entity.__flexible__)
        self.RESPONSE_TYPE = _ResponseDecoder(response_type)
        self._response_header = response_type.__header_schema__

    def build_request_header(self, correlation_id: int, client_id: str) -> _Header:
        header_cls = self.entity.__header_schema__
        return _Header(
            header_cls(
                request_api_key=i16(self.API_KEY),
                request_api_version=i16(self.API_VERSION),
                correlation_id=i32(correlation_id),
                client_id=client_id,
            )
        )

    def encode(self) -> bytes:
        return _write(self.entity)

    def parse_response_header(self, buffer: io.BytesIO | bytes) -> _ResponseHeader:
        if isinstance(buffer, bytes):
            buffer = io.BytesIO(buffer)
        start = buffer.tell()
        data = buffer.read()
        header, size = entity_reader(self._response_header)(data, 0)
        buffer.seek(start + size)
        return _ResponseHeader(int(header.correlation_id))

    def __repr__(self) -> str:
        return f"{type(self.entity).__name__}_v{self.API_VERSION}"


class KioRequest:
    """An aiokafka-compatible request for one of the member's records."""

    ALLOW_UNKNOWN_API_VERSION: ClassVar[bool] = False

    def __init__(self, request: MemberRequest) -> None:
        self.request = request
        self.API_KEY = _APIS[type(request)].key
        self.version: int | None = None

    def prepare(self, versions: dict[int, tuple[int, int]]) -> KioRequestStruct:
        self.version = choose_version(self.request, versions.get(self.API_KEY))
        entity = build_entity(self.request, self.version)
        api = _APIS[type(self.request)]
        _, response = _entities(api, self.version)
        return KioRequestStruct(entity, getattr(response, api.response))


def _write(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def error_code(value: Any) -> ErrorCode:
    code = int(getattr(value, "value", value))
    try:
        return ErrorCode(code)
    except ValueError:
        log.warning("member.unknown_error_code", code=code)
        return ErrorCode.UNKNOWN_SERVER_ERROR


def to_result(request: MemberRequest, response: Any) -> GroupResult:
    """Convert a kio response entity to the record that answers ``request``."""
    if isinstance(request, JoinGroup):
        return JoinGroupResult(
            error=error_code(response.error_code),
            generation_id=int(response.generation_id),
            protocol_type=getattr(response, "protocol_type", None),
            protocol_name=response.protocol_name,
            leader=response.leader,
            member_id=response.member_id,
            members=tuple(
                JoinedMember(
                    member_id=m.member_id,
                    group_instance_id=getattr(m, "group_instance_id", None),
                    metadata=bytes(m.metadata),
                )
                for m in response.members
            ),
            skip_assignment=bool(getattr(response, "skip_assignment", False)),
        )
    if isinstance(request, SyncGroup):
        return SyncGroupResult(
            error=error_code(response.error_code),
            assignment=bytes(response.assignment),
            protocol_type=getattr(response, "protocol_type", None),
            protocol_name=getattr(response, "protocol_name", None),
        )
    if isinstance(request, Heartbeat):
        return HeartbeatResult(error=error_code(response.error_code))
    if isinstance(request, DescribeGroups):
        return DescribeGroupsResult(
            groups=tuple(
                DescribedGroup(
                    error=error_code(g.error_code),
                    group_id=g.group_id,
                    state=g.group_state,
                    protocol_type=g.protocol_type,
                    protocol_data=g.protocol_data,
                    members=tuple(
                        DescribedMember(
                            member_id=m.member_id,
                            group_instance_id=getattr(m, "group_instance_id", None),
                            client_id=m.client_id,
                            client_host=m.client_host,
                            metadata=bytes(m.member_metadata),
                            assignment=bytes(m.member_assignment),
                        )
                        for m in g.members
                    ),
                )
                for g in response.groups
            )
        )
    if isinstance(request, DeleteGroups):
        return DeleteGroupsResult(
            tuple(DeletedGroup(r.group_id, error_code(r.error_code)) for r in response.results)
        )
    if isinstance(request, ListGroups):
        return ListGroupsResult(
            error=error_code(response.error_code),
            groups=tuple(
                ListedGroup(g.group_id, g.protocol_type, getattr(g, "group_state", ""))
                for g in response.groups
            ),
        )
    if isinstance(request, OffsetCommit):
        return OffsetCommitResult(
            topics=tuple(
                CommitTopicResult(
                    t.name,
                    tuple(
                        CommitPartitionResult(int(p.partition_index), error_code(p.error_code))
                        for p in t.partitions
                    ),
                )
                for t in response.topics
            )
        )
    if isinstance(request, OffsetFetch):
        return OffsetFetchResult(
            groups=tuple(
                FetchedGroup(
                    g.group_id,
                    tuple(
                        FetchedTopic(
                            t.name,
                            tuple(
                                FetchedPartition(
                                    partition=int(p.partition_index),
                                    offset=int(p.committed_offset),
                                    metadata=p.metadata,
                                    leader_epoch=int(p.committed_leader_epoch),
                                    error=error_code(p.error_code),
                                )
                                for p in t.partitions
                            ),
                        )
                        for t in g.topics
                    ),
                    error_code(g.error_code),
                )
                for g in response.groups
            )
        )
    return LeaveGroupResult(
        error=error_code(response.error_code),
        members=tuple(
            LeftMember(m.member_id, m.group_instance_id, error_code(m.error_code))
            for m in getattr(response, "members", ())
        ),
    )


class DescribeGroupRequest(Request[DescribeGroupsRequest_v0 | DescribeGroupsRequest_v1]):  # type: ignore[misc]
    """DescribeGroups for one group, v0 or v1 (aiokafka's structs).

    aiokafka decodes v3 answers about several groups wrongly; v0/v1 carry all
    that :func:`describe_group_summary` needs and every broker speaks them.
    """

    API_KEY = 15

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id

    def build(
        self, request_struct_class: type[DescribeGroupsRequest_v0 | DescribeGroupsRequest_v1]
    ) -> DescribeGroupsRequest_v0 | DescribeGroupsRequest_v1:
        return request_struct_class([self.group_id])


def describe_group_summary(response: Any, group_id: str) -> str | None:
    """What a DescribeGroups v0/v1 answer says about the group's protocol, as a
    clause for an error message; ``None`` if it says nothing useful (an error, an
    empty group, or no protocol name, as Tansu answers)."""
    for error, group, _state, protocol_type, protocol, members in response.groups:
        if group != group_id or error != ErrorCode.NONE or not protocol_type or not protocol:
            continue
        count = len(members)
        return (
            f"the group uses protocol type {protocol_type!r} with protocol {protocol!r} "
            f"and has {count} member{'' if count == 1 else 's'}"
        )
    return None
