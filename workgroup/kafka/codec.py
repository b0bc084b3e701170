"""One codec per Kafka API: records to kio entities and back, for every version.

Each API has one :class:`Codec`, four functions between the version-independent
records of :mod:`workgroup.kafka.messages` and kio's generated entities (one
class per API, version and direction, built from Kafka's JSON message specs):

* ``encode_request(version, cls, record)``: a request record as the entity
  ``cls`` (the request schema of ``version``), what a client sends;
* ``decode_request(version, entity, client)``: a request entity as its record,
  what the coordinator reads (``client`` says who sent it);
* ``encode_result(version, cls, result)``: a result as the response entity
  ``cls``, what the coordinator answers;
* ``decode_result(version, entity, request)``: a response entity as its result,
  what a client reads (``request`` supplies what old versions do not repeat:
  the group of an OffsetFetch before v8, the key of a FindCoordinator before v4).

:mod:`workgroup.kafka.apis` holds the table that names each API's codec, key,
versions and schemas.  kio's readers and writers turn entities into bytes.

Rules:

* An encoder fills the fields the version has and drops the others (``_make``);
  a field a version lacks decodes to the value Kafka assumes for that version
  (``rebalance_timeout_ms`` = ``session_timeout_ms`` for JoinGroup v0).
* A record whose *shape* a version cannot carry (several groups, keys or
  leaving members where the version has room for one, an OffsetFetch of every
  topic before v2) raises :class:`~workgroup.errors.UnsupportedVersionError`
  rather than losing part of it.
* Encoders pass plain ints where kio annotates ``i32`` etc.: the writers only
  pack them, and calling kio's checked constructors per field would cost more
  than the encoding itself (out-of-range values fail in ``struct.pack``).
* A response error code workgroup does not name decodes as
  UNKNOWN_SERVER_ERROR, with a ``member.unknown_error_code`` warning.
* No I/O: this module is safe under a fake clock.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from io import BytesIO
from typing import Any, Final, TypeVar

from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32, i32Timedelta, i64Timedelta

from workgroup.errors import ErrorCode, UnsupportedVersionError
from workgroup.kafka import messages as m


@dataclass(frozen=True, slots=True)
class Codec:
    """The four conversions of one API (see the module's docstring)."""

    encode_request: Callable[[int, type[Any], Any], Any]
    decode_request: Callable[[int, Any, m.ClientInfo], m.Request]
    encode_result: Callable[[int, type[Any], Any], Any]
    decode_result: Callable[[int, Any, Any], m.Result]


# --- helpers --------------------------------------------------------------------

_FIELD_NAMES: dict[Any, frozenset[str]] = {}
_ITEM_TYPES: dict[tuple[Any, str], type[Any]] = {}


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return names


def _item_type(cls: type[Any], name: str) -> type[Any]:
    """The entity class of the elements of the array field ``name`` of ``cls``."""
    item = _ITEM_TYPES.get((cls, name))
    if item is None:
        (found,) = (f for f in dataclasses.fields(cls) if f.name == name)
        annotation: Any = found.type
        if isinstance(annotation, types.UnionType):  # strip "| None"
            (annotation,) = (a for a in typing.get_args(annotation) if a is not type(None))
        (element,) = {a for a in typing.get_args(annotation) if a is not Ellipsis}
        item = _ITEM_TYPES[(cls, name)] = typing.cast(type[Any], element)
    return item


def _make(cls: type[Any], **values: Any) -> Any:
    """Build an entity from the values its version has fields for."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


_ZERO_MS = i32Timedelta.parse(datetime.timedelta(0))
_KIO_ERRORS: Final = {code: KioErrorCode(int(code)) for code in ErrorCode}
#: Sentinel Kafka sends when authorized operations were not requested.
_NO_AUTHORIZED_OPERATIONS = i32(-(2**31))


def _err(code: ErrorCode) -> KioErrorCode:
    kio_code = _KIO_ERRORS.get(code)
    return KioErrorCode(int(code)) if kio_code is None else kio_code


def error_code(value: Any) -> ErrorCode:
    """A response's error code as workgroup's; one it does not name is UNKNOWN_SERVER_ERROR."""
    code = int(getattr(value, "value", value))
    try:
        return ErrorCode(code)
    except ValueError:
        # Loaded here: the codec is imported by the fence, which needs no logging setup.
        from workgroup.log import get_logger

        get_logger(__name__).warning("member.unknown_error_code", code=code)
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _ms(delta: datetime.timedelta) -> int:
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def _delta(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def _one(items: tuple[Any, ...], what: str, api: str, version: int) -> Any:
    if len(items) != 1:
        raise UnsupportedVersionError(
            f"{api} v{version} carries one {what}, not {len(items)}: needs a newer version"
        )
    return items[0]


_T = TypeVar("_T")


def _expect(result: Any, kind: type[_T]) -> _T:
    if not isinstance(result, kind):
        raise TypeError(f"expected {kind.__name__}, got {type(result).__name__}")
    return result


# --- ApiVersions ------------------------------------------------------------------


def _encode_api_versions(version: int, cls: type[Any], r: m.ApiVersions) -> Any:
    return _make(
        cls,
        client_software_name=r.client_software_name,
        client_software_version=r.client_software_version,
    )


def _decode_api_versions(version: int, body: Any, client: m.ClientInfo) -> m.ApiVersions:
    return m.ApiVersions(
        getattr(body, "client_software_name", ""),
        getattr(body, "client_software_version", ""),
        api_version=version,
    )


def _encode_api_versions_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.ApiVersionsResult)
    item = _item_type(cls, "api_keys")
    return _make(
        cls,
        error_code=_err(r.error),
        api_keys=tuple(
            item(api_key=a.api_key, min_version=a.min_version, max_version=a.max_version)
            for a in r.api_keys
        ),
        throttle_time=_ZERO_MS,
    )


def _decode_api_versions_result(version: int, body: Any, request: Any) -> m.ApiVersionsResult:
    return m.ApiVersionsResult(
        error_code(body.error_code),
        tuple(
            m.ApiVersionRange(int(a.api_key), int(a.min_version), int(a.max_version))
            for a in body.api_keys
        ),
    )


API_VERSIONS: Final = Codec(
    _encode_api_versions,
    _decode_api_versions,
    _encode_api_versions_result,
    _decode_api_versions_result,
)

# --- Metadata -----------------------------------------------------------------------


def _encode_metadata(version: int, cls: type[Any], r: m.Metadata) -> Any:
    topic_cls = _item_type(cls, "topics")
    topics = (
        None
        if r.topics is None
        else tuple(_make(topic_cls, topic_id=None, name=t) for t in r.topics)
    )
    if version == 0 and topics is None:
        topics = ()  # v0: an empty list means all topics
    return _make(
        cls,
        topics=topics,
        allow_auto_topic_creation=r.allow_auto_topic_creation,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def _decode_metadata(version: int, body: Any, client: m.ClientInfo) -> m.Metadata:
    topics = None if body.topics is None else tuple(t.name for t in body.topics)
    if version == 0 and not topics:
        topics = None  # v0: an empty list means all topics
    return m.Metadata(
        topics,
        # Before v4 every Metadata request may auto-create topics.
        getattr(body, "allow_auto_topic_creation", True),
        api_version=version,
    )


def _encode_metadata_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.MetadataResult)
    broker_cls = _item_type(cls, "brokers")
    topic_cls = _item_type(cls, "topics")
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        brokers=tuple(
            _make(broker_cls, node_id=x.node_id, host=x.host, port=x.port, rack=None)
            for x in r.brokers
        ),
        cluster_id=r.cluster_id,
        controller_id=r.controller_id,
        topics=tuple(
            _make(
                topic_cls,
                error_code=_err(t.error),
                name=t.name,
                topic_id=None,
                is_internal=False,
                partitions=(),
                topic_authorized_operations=_NO_AUTHORIZED_OPERATIONS,
            )
            for t in r.topics
        ),
        cluster_authorized_operations=_NO_AUTHORIZED_OPERATIONS,
        error_code=_err(ErrorCode.NONE),
    )


def _decode_metadata_result(version: int, body: Any, request: Any) -> m.MetadataResult:
    return m.MetadataResult(
        brokers=tuple(m.BrokerAddress(int(x.node_id), x.host, int(x.port)) for x in body.brokers),
        controller_id=int(getattr(body, "controller_id", -1)),  # v1+
        cluster_id=getattr(body, "cluster_id", None) or "",  # v2+
        topics=tuple(m.MetadataTopic(t.name or "", error_code(t.error_code)) for t in body.topics),
    )


METADATA: Final = Codec(
    _encode_metadata, _decode_metadata, _encode_metadata_result, _decode_metadata_result
)

# --- FindCoordinator ------------------------------------------------------------------


def _encode_find_coordinator(version: int, cls: type[Any], r: m.FindCoordinator) -> Any:
    if version >= 4:
        return cls(key_type=r.key_type, coordinator_keys=r.keys)
    key = _one(r.keys, "key", "FindCoordinator", version)
    if version == 0 and r.key_type != 0:
        raise UnsupportedVersionError("FindCoordinator v0 finds group coordinators only")
    return _make(cls, key=key, key_type=r.key_type)


def _decode_find_coordinator(version: int, body: Any, client: m.ClientInfo) -> m.FindCoordinator:
    keys = tuple(body.coordinator_keys) if version >= 4 else (body.key,)
    return m.FindCoordinator(int(getattr(body, "key_type", 0)), keys, api_version=version)


def _encode_find_coordinator_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.FindCoordinatorResult)
    if version >= 4:
        item = _item_type(cls, "coordinators")
        return cls(
            throttle_time=_ZERO_MS,
            coordinators=tuple(
                item(
                    key=c.key,
                    node_id=c.node_id,
                    host=c.host,
                    port=c.port,
                    error_code=_err(c.error),
                    error_message=c.error_message,
                )
                for c in r.coordinators
            ),
        )
    c = _one(r.coordinators, "coordinator", "FindCoordinator", version)
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        error_code=_err(c.error),
        error_message=c.error_message,
        node_id=c.node_id,
        host=c.host,
        port=c.port,
    )


def _decode_find_coordinator_result(
    version: int, body: Any, request: m.FindCoordinator
) -> m.FindCoordinatorResult:
    if version >= 4:
        return m.FindCoordinatorResult(
            tuple(
                m.CoordinatorAnswer(
                    c.key,
                    error_code(c.error_code),
                    int(c.node_id),
                    c.host,
                    int(c.port),
                    c.error_message,
                )
                for c in body.coordinators
            )
        )
    return m.FindCoordinatorResult(
        (
            m.CoordinatorAnswer(
                request.keys[0],  # before v4 the answer does not repeat the key
                error_code(body.error_code),
                int(body.node_id),
                body.host,
                int(body.port),
                getattr(body, "error_message", None),
            ),
        )
    )


FIND_COORDINATOR: Final = Codec(
    _encode_find_coordinator,
    _decode_find_coordinator,
    _encode_find_coordinator_result,
    _decode_find_coordinator_result,
)

# --- JoinGroup ----------------------------------------------------------------------


def _encode_join_group(version: int, cls: type[Any], r: m.JoinGroup) -> Any:
    protocol_cls = _item_type(cls, "protocols")
    return _make(
        cls,
        group_id=r.group_id,
        session_timeout=_delta(r.session_timeout_ms),
        rebalance_timeout=_delta(r.rebalance_timeout_ms),
        member_id=r.member_id,
        group_instance_id=r.group_instance_id,
        protocol_type=r.protocol_type,
        protocols=tuple(protocol_cls(name=name, metadata=meta) for name, meta in r.protocols),
        reason=r.reason,
    )


def _decode_join_group(version: int, body: Any, client: m.ClientInfo) -> m.JoinGroup:
    session = _ms(body.session_timeout)
    return m.JoinGroup(
        group_id=body.group_id,
        session_timeout_ms=session,
        rebalance_timeout_ms=_ms(body.rebalance_timeout) if version >= 1 else session,
        member_id=body.member_id,
        protocol_type=body.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in body.protocols),
        group_instance_id=getattr(body, "group_instance_id", None),
        reason=getattr(body, "reason", None),
        api_version=version,
        client=client,
    )


def _encode_join_group_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.JoinGroupResult)
    item = _item_type(cls, "members")
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        error_code=_err(r.error),
        generation_id=r.generation_id,
        protocol_type=r.protocol_type,
        # Before v7 the protocol name is not nullable.
        protocol_name=r.protocol_name if version >= 7 else (r.protocol_name or ""),
        leader=r.leader,
        skip_assignment=r.skip_assignment,
        member_id=r.member_id,
        members=tuple(
            _make(
                item,
                member_id=x.member_id,
                group_instance_id=x.group_instance_id,
                metadata=x.metadata,
            )
            for x in r.members
        ),
    )


def _decode_join_group_result(version: int, body: Any, request: Any) -> m.JoinGroupResult:
    return m.JoinGroupResult(
        error=error_code(body.error_code),
        generation_id=int(body.generation_id),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=body.protocol_name,
        leader=body.leader,
        member_id=body.member_id,
        members=tuple(
            m.JoinedMember(
                member_id=x.member_id,
                group_instance_id=getattr(x, "group_instance_id", None),
                metadata=bytes(x.metadata),
            )
            for x in body.members
        ),
        skip_assignment=bool(getattr(body, "skip_assignment", False)),
    )


JOIN_GROUP: Final = Codec(
    _encode_join_group, _decode_join_group, _encode_join_group_result, _decode_join_group_result
)

# --- SyncGroup ----------------------------------------------------------------------


def _encode_sync_group(version: int, cls: type[Any], r: m.SyncGroup) -> Any:
    item = _item_type(cls, "assignments")
    return _make(
        cls,
        group_id=r.group_id,
        generation_id=r.generation_id,
        member_id=r.member_id,
        group_instance_id=r.group_instance_id,
        protocol_type=r.protocol_type,
        protocol_name=r.protocol_name,
        assignments=tuple(item(member_id=k, assignment=blob) for k, blob in r.assignments),
    )


def _decode_sync_group(version: int, body: Any, client: m.ClientInfo) -> m.SyncGroup:
    return m.SyncGroup(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        assignments=tuple((a.member_id, a.assignment) for a in body.assignments),
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        api_version=version,
    )


def _encode_sync_group_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.SyncGroupResult)
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        error_code=_err(r.error),
        protocol_type=r.protocol_type,
        protocol_name=r.protocol_name,
        assignment=r.assignment,
    )


def _decode_sync_group_result(version: int, body: Any, request: Any) -> m.SyncGroupResult:
    return m.SyncGroupResult(
        error=error_code(body.error_code),
        assignment=bytes(body.assignment),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
    )


SYNC_GROUP: Final = Codec(
    _encode_sync_group, _decode_sync_group, _encode_sync_group_result, _decode_sync_group_result
)

# --- Heartbeat ----------------------------------------------------------------------


def _encode_heartbeat(version: int, cls: type[Any], r: m.Heartbeat) -> Any:
    return _make(
        cls,
        group_id=r.group_id,
        generation_id=r.generation_id,
        member_id=r.member_id,
        group_instance_id=r.group_instance_id,
    )


def _decode_heartbeat(version: int, body: Any, client: m.ClientInfo) -> m.Heartbeat:
    return m.Heartbeat(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        api_version=version,
        client=client,
    )


def _encode_heartbeat_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.HeartbeatResult)
    if version == 0:
        return cls(error_code=_err(r.error))
    return cls(throttle_time=_ZERO_MS, error_code=_err(r.error))


def _decode_heartbeat_result(version: int, body: Any, request: Any) -> m.HeartbeatResult:
    return m.HeartbeatResult(error_code(body.error_code))


HEARTBEAT: Final = Codec(
    _encode_heartbeat, _decode_heartbeat, _encode_heartbeat_result, _decode_heartbeat_result
)

# --- LeaveGroup ---------------------------------------------------------------------


def _encode_leave_group(version: int, cls: type[Any], r: m.LeaveGroup) -> Any:
    if version < 3:
        member = _one(r.members, "leaving member", "LeaveGroup", version)
        return cls(group_id=r.group_id, member_id=member.member_id)
    identity = _item_type(cls, "members")
    return cls(
        group_id=r.group_id,
        members=tuple(
            _make(
                identity,
                member_id=x.member_id,
                group_instance_id=x.group_instance_id,
                reason=x.reason,
            )
            for x in r.members
        ),
    )


def _decode_leave_group(version: int, body: Any, client: m.ClientInfo) -> m.LeaveGroup:
    if version < 3:
        members: tuple[m.LeavingMember, ...] = (m.LeavingMember(body.member_id),)
    else:
        members = tuple(
            m.LeavingMember(x.member_id, x.group_instance_id, getattr(x, "reason", None))
            for x in body.members
        )
    return m.LeaveGroup(body.group_id, members, api_version=version)


def _encode_leave_group_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.LeaveGroupResult)
    error = r.error
    if version < 3 and error is ErrorCode.NONE and r.members:
        # Before v3 a single member leaves and its error is the response's.
        error = r.members[0].error
    if version < 3:
        return _make(cls, throttle_time=_ZERO_MS, error_code=_err(error))
    item = _item_type(cls, "members")
    return cls(
        throttle_time=_ZERO_MS,
        error_code=_err(error),
        members=tuple(
            item(
                member_id=x.member_id,
                group_instance_id=x.group_instance_id,
                error_code=_err(x.error),
            )
            for x in r.members
        ),
    )


def _decode_leave_group_result(version: int, body: Any, request: Any) -> m.LeaveGroupResult:
    return m.LeaveGroupResult(
        error=error_code(body.error_code),
        members=tuple(
            m.LeftMember(x.member_id, x.group_instance_id, error_code(x.error_code))
            for x in getattr(body, "members", ())
        ),
    )


LEAVE_GROUP: Final = Codec(
    _encode_leave_group,
    _decode_leave_group,
    _encode_leave_group_result,
    _decode_leave_group_result,
)

# --- OffsetCommit -------------------------------------------------------------------


def _encode_offset_commit(version: int, cls: type[Any], r: m.OffsetCommit) -> Any:
    topic_cls = _item_type(cls, "topics")
    partition_cls = _item_type(topic_cls, "partitions")
    return _make(
        cls,
        group_id=r.group_id,
        generation_id_or_member_epoch=r.generation_id,
        member_id=r.member_id,
        group_instance_id=r.group_instance_id,
        retention_time=_delta(r.retention_time_ms),
        topics=tuple(
            topic_cls(
                name=t.name,
                partitions=tuple(
                    _make(
                        partition_cls,
                        partition_index=p.partition,
                        committed_offset=p.offset,
                        committed_leader_epoch=p.leader_epoch,
                        commit_timestamp=-1,  # v1: -1 lets the broker stamp it
                        committed_metadata=p.metadata,
                    )
                    for p in t.partitions
                ),
            )
            for t in r.topics
        ),
    )


def _decode_offset_commit(version: int, body: Any, client: m.ClientInfo) -> m.OffsetCommit:
    retention = getattr(body, "retention_time", None)
    return m.OffsetCommit(
        group_id=body.group_id,
        # v0 commits come from outside any group.
        generation_id=getattr(body, "generation_id_or_member_epoch", -1),
        member_id=getattr(body, "member_id", ""),
        topics=tuple(
            m.CommitTopic(
                t.name,
                tuple(
                    m.CommitPartition(
                        p.partition_index,
                        p.committed_offset,
                        p.committed_metadata,
                        getattr(p, "committed_leader_epoch", -1),
                    )
                    for p in t.partitions
                ),
            )
            for t in body.topics
        ),
        group_instance_id=getattr(body, "group_instance_id", None),
        retention_time_ms=-1 if retention is None else _ms(retention),
        api_version=version,
        client=client,
    )


def _encode_offset_commit_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.OffsetCommitResult)
    topic_cls = _item_type(cls, "topics")
    partition_cls = _item_type(topic_cls, "partitions")
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        topics=tuple(
            topic_cls(
                name=t.name,
                partitions=tuple(
                    partition_cls(partition_index=p.partition, error_code=_err(p.error))
                    for p in t.partitions
                ),
            )
            for t in r.topics
        ),
    )


def _decode_offset_commit_result(version: int, body: Any, request: Any) -> m.OffsetCommitResult:
    return m.OffsetCommitResult(
        topics=tuple(
            m.CommitTopicResult(
                t.name,
                tuple(
                    m.CommitPartitionResult(int(p.partition_index), error_code(p.error_code))
                    for p in t.partitions
                ),
            )
            for t in body.topics
        )
    )


OFFSET_COMMIT: Final = Codec(
    _encode_offset_commit,
    _decode_offset_commit,
    _encode_offset_commit_result,
    _decode_offset_commit_result,
)

# --- OffsetFetch --------------------------------------------------------------------


def _fetch_topics_entity(
    topic_cls: type[Any], topics: tuple[m.FetchTopic, ...] | None
) -> tuple[Any, ...] | None:
    if topics is None:
        return None
    return tuple(topic_cls(name=t.name, partition_indexes=t.partitions) for t in topics)


def _encode_offset_fetch(version: int, cls: type[Any], r: m.OffsetFetch) -> Any:
    if version >= 8:
        group_cls = _item_type(cls, "groups")
        topic_cls = _item_type(group_cls, "topics")
        groups = tuple(
            _make(
                group_cls,
                group_id=g.group_id,
                member_id=None,  # v9: KIP-848 members only
                member_epoch=-1,
                topics=_fetch_topics_entity(topic_cls, g.topics),
            )
            for g in r.groups
        )
        return cls(groups=groups, require_stable=r.require_stable)
    group = _one(r.groups, "group", "OffsetFetch", version)
    if group.topics is None and version < 2:
        raise UnsupportedVersionError(f"OffsetFetch v{version} cannot fetch every topic")
    return _make(
        cls,
        group_id=group.group_id,
        topics=_fetch_topics_entity(_item_type(cls, "topics"), group.topics),
        require_stable=r.require_stable,
    )


def _fetch_topics(topics: Any) -> tuple[m.FetchTopic, ...] | None:
    if topics is None:
        return None
    return tuple(m.FetchTopic(t.name, tuple(t.partition_indexes)) for t in topics)


def _decode_offset_fetch(version: int, body: Any, client: m.ClientInfo) -> m.OffsetFetch:
    if version >= 8:
        groups = tuple(m.OffsetFetchGroup(g.group_id, _fetch_topics(g.topics)) for g in body.groups)
    else:
        groups = (m.OffsetFetchGroup(body.group_id, _fetch_topics(body.topics)),)
    return m.OffsetFetch(
        groups, require_stable=getattr(body, "require_stable", False), api_version=version
    )


def _fetched_topics_entity(
    topic_cls: type[Any], version: int, topics: tuple[m.FetchedTopic, ...], group_error: ErrorCode
) -> tuple[Any, ...]:
    partition_cls = _item_type(topic_cls, "partitions")
    # v0-1 have no group-level error: Kafka reports it on every partition.
    override = group_error if version < 2 and group_error is not ErrorCode.NONE else None
    return tuple(
        topic_cls(
            name=t.name,
            partitions=tuple(
                _make(
                    partition_cls,
                    partition_index=p.partition,
                    committed_offset=p.offset,
                    committed_leader_epoch=p.leader_epoch,
                    metadata=p.metadata,
                    error_code=_err(override or p.error),
                )
                for p in t.partitions
            ),
        )
        for t in topics
    )


def _encode_offset_fetch_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.OffsetFetchResult)
    if version >= 8:
        group_cls = _item_type(cls, "groups")
        topic_cls = _item_type(group_cls, "topics")
        return cls(
            throttle_time=_ZERO_MS,
            groups=tuple(
                group_cls(
                    group_id=g.group_id,
                    topics=_fetched_topics_entity(topic_cls, version, g.topics, g.error),
                    error_code=_err(g.error),
                )
                for g in r.groups
            ),
        )
    g = _one(r.groups, "group", "OffsetFetch", version)
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        topics=_fetched_topics_entity(_item_type(cls, "topics"), version, g.topics, g.error),
        error_code=_err(g.error),
    )


def _fetched_topics(topics: Any) -> tuple[m.FetchedTopic, ...]:
    return tuple(
        m.FetchedTopic(
            t.name,
            tuple(
                m.FetchedPartition(
                    partition=int(p.partition_index),
                    offset=int(p.committed_offset),
                    metadata=p.metadata,
                    leader_epoch=int(getattr(p, "committed_leader_epoch", -1)),
                    error=error_code(p.error_code),
                )
                for p in t.partitions
            ),
        )
        for t in topics
    )


def _decode_offset_fetch_result(
    version: int, body: Any, request: m.OffsetFetch
) -> m.OffsetFetchResult:
    if version >= 8:
        return m.OffsetFetchResult(
            tuple(
                m.FetchedGroup(g.group_id, _fetched_topics(g.topics), error_code(g.error_code))
                for g in body.groups
            )
        )
    # Before v8 the answer is about the one group asked for and does not name it;
    # before v2 it has no group-level error (it is on every partition).
    error = error_code(getattr(body, "error_code", ErrorCode.NONE))
    group_id = request.groups[0].group_id
    return m.OffsetFetchResult((m.FetchedGroup(group_id, _fetched_topics(body.topics), error),))


OFFSET_FETCH: Final = Codec(
    _encode_offset_fetch,
    _decode_offset_fetch,
    _encode_offset_fetch_result,
    _decode_offset_fetch_result,
)

# --- DescribeGroups -----------------------------------------------------------------


def _encode_describe_groups(version: int, cls: type[Any], r: m.DescribeGroups) -> Any:
    return _make(cls, groups=r.group_ids, include_authorized_operations=False)


def _decode_describe_groups(version: int, body: Any, client: m.ClientInfo) -> m.DescribeGroups:
    return m.DescribeGroups(tuple(body.groups), api_version=version)


def _encode_describe_groups_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.DescribeGroupsResult)
    group_cls = _item_type(cls, "groups")
    member_cls = _item_type(group_cls, "members")
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        groups=tuple(
            _make(
                group_cls,
                error_code=_err(g.error),
                error_message=None,
                group_id=g.group_id,
                group_state=g.state,
                protocol_type=g.protocol_type,
                protocol_data=g.protocol_data,
                members=tuple(
                    _make(
                        member_cls,
                        member_id=x.member_id,
                        group_instance_id=x.group_instance_id,
                        client_id=x.client_id,
                        client_host=x.client_host,
                        member_metadata=x.metadata,
                        member_assignment=x.assignment,
                    )
                    for x in g.members
                ),
                authorized_operations=_NO_AUTHORIZED_OPERATIONS,
            )
            for g in r.groups
        ),
    )


def _decode_describe_groups_result(version: int, body: Any, request: Any) -> m.DescribeGroupsResult:
    return m.DescribeGroupsResult(
        groups=tuple(
            m.DescribedGroup(
                error=error_code(g.error_code),
                group_id=g.group_id,
                state=g.group_state,
                protocol_type=g.protocol_type,
                protocol_data=g.protocol_data,
                members=tuple(
                    m.DescribedMember(
                        member_id=x.member_id,
                        group_instance_id=getattr(x, "group_instance_id", None),
                        client_id=x.client_id,
                        client_host=x.client_host,
                        metadata=bytes(x.member_metadata),
                        assignment=bytes(x.member_assignment),
                    )
                    for x in g.members
                ),
            )
            for g in body.groups
        )
    )


DESCRIBE_GROUPS: Final = Codec(
    _encode_describe_groups,
    _decode_describe_groups,
    _encode_describe_groups_result,
    _decode_describe_groups_result,
)

# --- ListGroups ---------------------------------------------------------------------


def _encode_list_groups(version: int, cls: type[Any], r: m.ListGroups) -> Any:
    return _make(cls, states_filter=r.states_filter, types_filter=r.types_filter)


def _decode_list_groups(version: int, body: Any, client: m.ClientInfo) -> m.ListGroups:
    return m.ListGroups(
        tuple(getattr(body, "states_filter", ())),
        tuple(getattr(body, "types_filter", ())),
        api_version=version,
    )


def _encode_list_groups_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.ListGroupsResult)
    item = _item_type(cls, "groups")
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        error_code=_err(r.error),
        groups=tuple(
            _make(
                item,
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.state,
                group_type="classic",
            )
            for g in r.groups
        ),
    )


def _decode_list_groups_result(version: int, body: Any, request: Any) -> m.ListGroupsResult:
    return m.ListGroupsResult(
        error=error_code(body.error_code),
        groups=tuple(
            m.ListedGroup(g.group_id, g.protocol_type, getattr(g, "group_state", ""))
            for g in body.groups
        ),
    )


LIST_GROUPS: Final = Codec(
    _encode_list_groups,
    _decode_list_groups,
    _encode_list_groups_result,
    _decode_list_groups_result,
)

# --- DeleteGroups -------------------------------------------------------------------


def _encode_delete_groups(version: int, cls: type[Any], r: m.DeleteGroups) -> Any:
    return cls(groups_names=r.group_ids)


def _decode_delete_groups(version: int, body: Any, client: m.ClientInfo) -> m.DeleteGroups:
    return m.DeleteGroups(tuple(body.groups_names), api_version=version)


def _encode_delete_groups_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.DeleteGroupsResult)
    item = _item_type(cls, "results")
    return cls(
        throttle_time=_ZERO_MS,
        results=tuple(item(group_id=g.group_id, error_code=_err(g.error)) for g in r.groups),
    )


def _decode_delete_groups_result(version: int, body: Any, request: Any) -> m.DeleteGroupsResult:
    return m.DeleteGroupsResult(
        tuple(m.DeletedGroup(g.group_id, error_code(g.error_code)) for g in body.results)
    )


DELETE_GROUPS: Final = Codec(
    _encode_delete_groups,
    _decode_delete_groups,
    _encode_delete_groups_result,
    _decode_delete_groups_result,
)

# --- SaslHandshake, SaslAuthenticate -------------------------------------------------


def _encode_sasl_handshake(version: int, cls: type[Any], r: m.SaslHandshake) -> Any:
    return cls(mechanism=r.mechanism)


def _decode_sasl_handshake(version: int, body: Any, client: m.ClientInfo) -> m.SaslHandshake:
    return m.SaslHandshake(body.mechanism, api_version=version)


def _encode_sasl_handshake_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.SaslHandshakeResult)
    return _make(cls, error_code=_err(r.error), mechanisms=r.mechanisms)


def _decode_sasl_handshake_result(version: int, body: Any, request: Any) -> m.SaslHandshakeResult:
    return m.SaslHandshakeResult(error_code(body.error_code), tuple(body.mechanisms))


SASL_HANDSHAKE: Final = Codec(
    _encode_sasl_handshake,
    _decode_sasl_handshake,
    _encode_sasl_handshake_result,
    _decode_sasl_handshake_result,
)


def _encode_sasl_authenticate(version: int, cls: type[Any], r: m.SaslAuthenticate) -> Any:
    return cls(auth_bytes=r.auth_bytes)


def _decode_sasl_authenticate(version: int, body: Any, client: m.ClientInfo) -> m.SaslAuthenticate:
    return m.SaslAuthenticate(bytes(body.auth_bytes), api_version=version)


def _encode_sasl_authenticate_result(version: int, cls: type[Any], result: Any) -> Any:
    r = _expect(result, m.SaslAuthenticateResult)
    return _make(
        cls,
        error_code=_err(r.error),
        error_message=r.error_message,
        auth_bytes=r.auth_bytes,
        session_lifetime=i64Timedelta.parse(_delta(r.session_lifetime_ms)),
    )


def _decode_sasl_authenticate_result(
    version: int, body: Any, request: Any
) -> m.SaslAuthenticateResult:
    lifetime = getattr(body, "session_lifetime", None)  # v1+
    return m.SaslAuthenticateResult(
        error_code(body.error_code),
        body.error_message,
        bytes(body.auth_bytes),
        0 if lifetime is None else _ms(lifetime),
    )


SASL_AUTHENTICATE: Final = Codec(
    _encode_sasl_authenticate,
    _decode_sasl_authenticate,
    _encode_sasl_authenticate_result,
    _decode_sasl_authenticate_result,
)

# --- entities and bytes ---------------------------------------------------------------

_WRITERS: dict[type[Any], Callable[[BytesIO, Any], None]] = {}
_READERS: dict[type[Any], Callable[[bytes, int], tuple[Any, int]]] = {}


def write_entity(entity: Any) -> bytes:
    """The bytes of a kio entity (kio's writer, cached per class)."""
    cls = type(entity)
    write = _WRITERS.get(cls)
    if write is None:
        write = _WRITERS[cls] = entity_writer(cls)
    out = BytesIO()
    write(out, entity)
    return out.getvalue()


def read_entity(cls: type[Any], data: bytes, offset: int = 0) -> tuple[Any, int]:
    """Read one ``cls`` entity from ``data`` at ``offset``; the entity and where it ends.

    kio raises several exception types for malformed bytes; callers map them.
    """
    read = _READERS.get(cls)
    if read is None:
        read = _READERS[cls] = entity_reader(cls)
    return read(data, offset)
