"""The Kafka wire format of the embedded coordinator.

This module turns request frames into the version-independent records of
``workgroup.kafka.messages`` / ``broker.py`` and results back into response bytes of the
version the client asked for.  It does no I/O; kio's generated entities (one
per API and version, built from Kafka's JSON message specs) do the byte-level
work.

Rules:

* A request frame is ``request header + body``.  The header is v1 (client id as
  a nullable int16 string) for a non-flexible API version and v2 (v1 plus tagged
  fields) for a flexible one; the client id stays a non-compact string in v2.
* A response is ``response header + body``: header v0 (correlation id) for a
  non-flexible version, v1 (plus tagged fields) for a flexible one — except
  ApiVersions, whose response header is always v0 so that a client that asked
  for a version the broker does not know can still read the answer.
* :data:`SUPPORTED_APIS` is the one table of what is implemented; ApiVersions
  advertises exactly it.
* An API key outside the table raises :class:`UnknownApiKeyError` (Kafka closes
  the connection).  A version outside the table raises
  :class:`~workgroup.errors.UnsupportedVersionError`; the caller answers with
  UNSUPPORTED_VERSION when :func:`unsupported_version_response` can encode one.
* A body that does not parse raises :class:`~workgroup.errors.ProtocolError`.
  kio's reader checks every declared length against the bytes actually present,
  so an absurd array or string length fails without allocating.
* Fields a version lacks take the values Kafka assumes for that version.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from io import BytesIO
from typing import Any, Final, NamedTuple, TypeVar

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32, i32Timedelta, i64Timedelta

from workgroup.coordinator import _legacy_schema
from workgroup.coordinator import broker as b
from workgroup.coordinator.lengths import check_header_tagged_fields, check_lengths
from workgroup.coordinator.writers import compile_writer
from workgroup.errors import ErrorCode, ProtocolError, UnsupportedVersionError
from workgroup.kafka import messages as m

Request = m.GroupRequest | b.BrokerRequest
Result = m.GroupResult | b.BrokerResult


class UnknownApiKeyError(ProtocolError):
    """A request for an API the coordinator does not implement."""


# --- the table of supported APIs ---------------------------------------------


@dataclass(frozen=True, slots=True)
class ApiSupport:
    api_key: int
    name: str  # kio's schema package name
    min_version: int
    max_version: int
    #: First version using flexible encoding (compact strings, tagged fields, header v2).
    first_flexible: int

    def flexible(self, version: int) -> bool:
        return version >= self.first_flexible


API_VERSIONS = 18
METADATA = 3
FIND_COORDINATOR = 10
JOIN_GROUP = 11
SYNC_GROUP = 14
HEARTBEAT = 12
LEAVE_GROUP = 13
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
DELETE_GROUPS = 42
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

#: Every API and version the embedded coordinator implements (and advertises).
SUPPORTED_APIS: Final[dict[int, ApiSupport]] = {
    s.api_key: s
    for s in (
        ApiSupport(API_VERSIONS, "api_versions", 0, 3, 3),
        ApiSupport(METADATA, "metadata", 0, 12, 9),
        ApiSupport(FIND_COORDINATOR, "find_coordinator", 0, 5, 3),
        ApiSupport(JOIN_GROUP, "join_group", 0, 9, 6),
        ApiSupport(SYNC_GROUP, "sync_group", 0, 5, 4),
        ApiSupport(HEARTBEAT, "heartbeat", 0, 4, 4),
        ApiSupport(LEAVE_GROUP, "leave_group", 0, 5, 4),
        ApiSupport(OFFSET_COMMIT, "offset_commit", 0, 9, 8),
        ApiSupport(OFFSET_FETCH, "offset_fetch", 0, 9, 6),
        ApiSupport(DESCRIBE_GROUPS, "describe_groups", 0, 5, 5),
        ApiSupport(LIST_GROUPS, "list_groups", 0, 5, 3),
        ApiSupport(DELETE_GROUPS, "delete_groups", 0, 2, 2),
        # Handshake v0 (raw tokens without Kafka headers, pre-1.0 clients) is not spoken.
        ApiSupport(SASL_HANDSHAKE, "sasl_handshake", 1, 1, 99),
        ApiSupport(SASL_AUTHENTICATE, "sasl_authenticate", 0, 2, 2),
    )
}

ADVERTISED_VERSIONS: Final = tuple(
    b.ApiVersionRange(s.api_key, s.min_version, s.max_version)
    for s in sorted(SUPPORTED_APIS.values(), key=lambda s: s.api_key)
)


# --- headers ----------------------------------------------------------------


class RequestHeader(NamedTuple):
    # A named tuple rather than a frozen dataclass: built for every request, and
    # a frozen dataclass costs several times as much to construct.
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None

    @property
    def api(self) -> ApiSupport | None:
        return SUPPORTED_APIS.get(self.api_key)


_HEADER_FIXED = struct.Struct(">hhih")  # api key, version, correlation id, client id size
_RESPONSE_PREFIX = struct.Struct(">ii")  # frame size, correlation id
_read_header_v1 = entity_reader(RequestHeaderV1)
_read_header_v2 = entity_reader(RequestHeaderV2)


def decode_header(payload: bytes) -> tuple[RequestHeader, int]:
    """Decode the request header of a frame; return it and the body's offset.

    The header is decoded even for an unknown API or version (as v1) so that
    the caller can log and answer it.
    """
    if len(payload) < _HEADER_FIXED.size:
        raise ProtocolError(f"request of {len(payload)} bytes has no header")
    api_key, api_version, correlation_id, client_id_size = _HEADER_FIXED.unpack_from(payload)
    api = SUPPORTED_APIS.get(api_key)
    flexible = api is not None and api.flexible(api_version)
    # Fast path for the common header (hot: every heartbeat); kio reads the rest.
    offset = _HEADER_FIXED.size + max(client_id_size, 0)
    if (
        client_id_size >= -1
        and offset + flexible <= len(payload)
        and (not flexible or payload[offset] == 0)  # no tagged fields
    ):
        try:
            client_id = (
                None if client_id_size < 0 else payload[_HEADER_FIXED.size : offset].decode("utf-8")
            )
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"cannot decode request header: {exc}") from exc
        return (
            RequestHeader(api_key, api_version, correlation_id, client_id),
            offset + flexible,
        )
    if flexible and client_id_size >= -1:
        check_header_tagged_fields(payload, offset)
    try:
        header, offset = (_read_header_v2 if flexible else _read_header_v1)(payload, 0)
    except Exception as exc:  # kio raises several types for bad bytes
        raise ProtocolError(f"cannot decode request header: {exc}") from exc
    return (
        RequestHeader(api_key, api_version, header.correlation_id, header.client_id),
        offset,
    )


# --- kio schemas --------------------------------------------------------------


@cache
def _request_schema(api_key: int, version: int) -> type[Any]:
    # OffsetFetch v0 is v1 (offsets in Kafka rather than ZooKeeper, same bytes).
    if api_key == OFFSET_FETCH and version == 0:
        version = 1
    if api_key == OFFSET_COMMIT and version < 2:
        return _legacy_schema.OFFSET_COMMIT_REQUESTS[version]
    return load_request_schema(api_key, version)


@cache
def _response_schema(api_key: int, version: int) -> type[Any]:
    # Responses of OffsetCommit v0-1 and OffsetFetch v0 are the bytes of the next version.
    if api_key == OFFSET_COMMIT and version < 2:
        version = 2
    if api_key == OFFSET_FETCH and version == 0:
        version = 1
    return load_response_schema(api_key, version)


def _schema_exists(api_key: int, version: int) -> bool:
    try:
        _request_schema(api_key, version)
        _response_schema(api_key, version)
    except Exception:
        return False
    return True


@cache
def _reader(api_key: int, version: int) -> Callable[[bytes, int], tuple[Any, int]]:
    reader: Callable[[bytes, int], tuple[Any, int]] = entity_reader(
        _request_schema(api_key, version)
    )
    return reader


@cache
def _encoder(api_key: int, version: int) -> Callable[[Any], bytes]:
    """The compiled writer of a response schema, or kio's where it cannot compile one."""
    cls = _response_schema(api_key, version)
    compiled = compile_writer(cls)
    if compiled is not None:
        return compiled
    write: Callable[[BytesIO, Any], None] = entity_writer(cls)

    def encode(entity: Any) -> bytes:
        out = BytesIO()
        write(out, entity)
        return out.getvalue()

    return encode


_FIELD_NAMES: dict[Any, frozenset[str]] = {}
_ITEM_TYPES: dict[tuple[Any, str], type[Any]] = {}


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return names


def _item_type(cls: type[Any], name: str) -> type[Any]:
    """The entity class of the elements of the array field ``name``."""
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
    """Build an entity from the values its version has fields for.

    Encoders pass plain ints where kio annotates ``i32`` etc.: the writers only
    pack them, and calling kio's checked constructors per field would cost more
    than the encoding itself.  (Out-of-range values fail in ``struct.pack``.)
    """
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


_ZERO_MS = i32Timedelta.parse(datetime.timedelta(0))
_KIO_ERRORS: Final = {code: KioErrorCode(int(code)) for code in ErrorCode}
#: Sentinel Kafka sends when authorized operations were not requested.
_NO_AUTHORIZED_OPERATIONS = i32(-(2**31))


def _err(code: ErrorCode) -> KioErrorCode:
    kio_code = _KIO_ERRORS.get(code)
    return KioErrorCode(int(code)) if kio_code is None else kio_code


def _ms(delta: datetime.timedelta) -> int:
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


# --- decoding requests ----------------------------------------------------------


def decode_request(
    header: RequestHeader, payload: bytes, offset: int, client_host: str = ""
) -> Request:
    """Decode the body of a request whose header :func:`decode_header` returned.

    Raises :class:`UnknownApiKeyError`, :class:`UnsupportedVersionError` or
    :class:`ProtocolError`.
    """
    version = header.api_version
    if (
        header.api_key == HEARTBEAT
        and 0 <= version <= _HEARTBEAT_MAX_VERSION
        # A fence's heartbeat must keep its client id (it extends no session).
        and header.client_id != m.FENCE_CLIENT_ID
    ):
        heartbeat = _decode_heartbeat_fast(payload, offset, version)
        if heartbeat is not None:
            return heartbeat
    api = header.api
    if api is None:
        raise UnknownApiKeyError(f"unknown API key {header.api_key}")
    supported = api.min_version <= version <= api.max_version
    if not supported and not _schema_exists(header.api_key, version):
        raise UnsupportedVersionError(
            f"{api.name} v{version} is not supported (versions {api.min_version}-{api.max_version})"
        )
    check_lengths(_request_schema(header.api_key, version), payload, offset)
    try:
        body, _end = _reader(header.api_key, version)(payload, offset)
        client = _client_info(header.client_id or "", client_host)
        request = _DECODERS[header.api_key](version, body, client)
    except Exception as exc:  # kio raises several types for bad bytes
        raise ProtocolError(f"cannot decode {api.name} v{version}: {exc}") from exc
    if not supported:
        raise _UnsupportedWithRequest(request, api, version)
    return request


_HEARTBEAT_MAX_VERSION: Final = SUPPORTED_APIS[HEARTBEAT].max_version
_FIRST_FLEXIBLE_HEARTBEAT: Final = SUPPORTED_APIS[HEARTBEAT].first_flexible
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def _decode_heartbeat_fast(payload: bytes, offset: int, version: int) -> m.Heartbeat | None:
    """Decode a Heartbeat body without kio (hot: one per member every few seconds).

    Handles the shapes clients send: strings shorter than 127 bytes in flexible
    versions and no tagged fields.  Anything else, including every malformed
    body, returns ``None`` and goes through kio, which decides and reports.
    """
    try:
        if version >= _FIRST_FLEXIBLE_HEARTBEAT:
            # Compact strings: unsigned varint length + 1 (0 is null), here one byte.
            size = payload[offset] - 1
            if size < 0 or size >= 0x7F:
                return None
            end = offset + 1 + size
            group_id = payload[offset + 1 : end].decode()
            (generation_id,) = _INT32.unpack_from(payload, end)
            position = end + 4
            size = payload[position] - 1
            if size < 0 or size >= 0x7F:
                return None
            end = position + 1 + size
            member_id = payload[position + 1 : end].decode()
            size = payload[end] - 1
            if size >= 0x7F:
                return None
            if size < 0:
                group_instance_id = None
                end += 1
            else:
                position = end + 1
                end = position + size
                group_instance_id = payload[position:end].decode()
            if payload[end] != 0:  # tagged fields: kio reads them
                return None
        else:
            (size,) = _INT16.unpack_from(payload, offset)
            if size < 0:
                return None
            end = offset + 2 + size
            group_id = payload[offset + 2 : end].decode()
            (generation_id,) = _INT32.unpack_from(payload, end)
            position = end + 4
            (size,) = _INT16.unpack_from(payload, position)
            if size < 0:
                return None
            end = position + 2 + size
            member_id = payload[position + 2 : end].decode()
            group_instance_id = None
            if version >= 3:
                (size,) = _INT16.unpack_from(payload, end)
                if size < -1:
                    return None
                if size >= 0:
                    position = end + 2
                    end = position + size
                    group_instance_id = payload[position:end].decode()
                else:
                    end += 2
        if end > len(payload):  # a string cut short
            return None
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    return m.Heartbeat(group_id, generation_id, member_id, group_instance_id, version)


@lru_cache(maxsize=4096)
def _client_info(client_id: str, client_host: str) -> m.ClientInfo:
    return m.ClientInfo(client_id, client_host)


class _UnsupportedWithRequest(UnsupportedVersionError):
    """A version kio can read but we do not implement; carries the request for the error."""

    def __init__(self, request: Request, api: ApiSupport, version: int) -> None:
        super().__init__(
            f"{api.name} v{version} is not supported (versions {api.min_version}-{api.max_version})"
        )
        self.request = request


def request_of(error: UnsupportedVersionError) -> Request | None:
    """The decoded request behind an unsupported-version error, if it could be read."""
    return error.request if isinstance(error, _UnsupportedWithRequest) else None


def _decode_api_versions(version: int, body: Any, client: m.ClientInfo) -> b.ApiVersions:
    return b.ApiVersions(
        getattr(body, "client_software_name", ""),
        getattr(body, "client_software_version", ""),
        api_version=version,
    )


def _decode_metadata(version: int, body: Any, client: m.ClientInfo) -> b.Metadata:
    topics = None if body.topics is None else tuple(t.name for t in body.topics)
    if version == 0 and not topics:
        topics = None  # v0: an empty list means all topics
    return b.Metadata(
        topics,
        # Before v4 every Metadata request may auto-create topics.
        getattr(body, "allow_auto_topic_creation", True),
        api_version=version,
    )


def _decode_find_coordinator(version: int, body: Any, client: m.ClientInfo) -> b.FindCoordinator:
    keys = tuple(body.coordinator_keys) if version >= 4 else (body.key,)
    return b.FindCoordinator(int(getattr(body, "key_type", 0)), keys, api_version=version)


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


def _decode_heartbeat(version: int, body: Any, client: m.ClientInfo) -> m.Heartbeat:
    return m.Heartbeat(
        group_id=body.group_id,
        generation_id=body.generation_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        api_version=version,
        client=client,
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


def _decode_describe_groups(version: int, body: Any, client: m.ClientInfo) -> m.DescribeGroups:
    return m.DescribeGroups(tuple(body.groups), api_version=version)


def _decode_list_groups(version: int, body: Any, client: m.ClientInfo) -> m.ListGroups:
    return m.ListGroups(
        tuple(getattr(body, "states_filter", ())),
        tuple(getattr(body, "types_filter", ())),
        api_version=version,
    )


def _decode_delete_groups(version: int, body: Any, client: m.ClientInfo) -> m.DeleteGroups:
    return m.DeleteGroups(tuple(body.groups_names), api_version=version)


def _decode_sasl_handshake(version: int, body: Any, client: m.ClientInfo) -> b.SaslHandshake:
    return b.SaslHandshake(body.mechanism, api_version=version)


def _decode_sasl_authenticate(version: int, body: Any, client: m.ClientInfo) -> b.SaslAuthenticate:
    return b.SaslAuthenticate(bytes(body.auth_bytes), api_version=version)


_DECODERS: Final[dict[int, Callable[[int, Any, m.ClientInfo], Request]]] = {
    API_VERSIONS: _decode_api_versions,
    METADATA: _decode_metadata,
    FIND_COORDINATOR: _decode_find_coordinator,
    JOIN_GROUP: _decode_join_group,
    SYNC_GROUP: _decode_sync_group,
    HEARTBEAT: _decode_heartbeat,
    LEAVE_GROUP: _decode_leave_group,
    OFFSET_COMMIT: _decode_offset_commit,
    OFFSET_FETCH: _decode_offset_fetch,
    DESCRIBE_GROUPS: _decode_describe_groups,
    LIST_GROUPS: _decode_list_groups,
    DELETE_GROUPS: _decode_delete_groups,
    SASL_HANDSHAKE: _decode_sasl_handshake,
    SASL_AUTHENTICATE: _decode_sasl_authenticate,
}


# --- encoding responses ---------------------------------------------------------


def encode_response(header: RequestHeader, result: Result) -> bytes:
    """Encode ``result`` as the framed response to the request with ``header``."""
    api = header.api
    if api is None:
        raise UnknownApiKeyError(f"unknown API key {header.api_key}")
    version = header.api_version
    if type(result) is m.HeartbeatResult:
        # Hot path: a heartbeat answer depends only on version and error code.
        key = (version, result.error)
        body = _HEARTBEAT_BODIES.get(key)
        if body is None:
            body = _HEARTBEAT_BODIES[key] = encode_body(header.api_key, version, result)
    else:
        body = encode_body(header.api_key, version, result)
    if api.flexible(version) and header.api_key != API_VERSIONS:
        # Response header v1: correlation id and no tagged fields.
        return _RESPONSE_PREFIX.pack(len(body) + 5, header.correlation_id) + b"\x00" + body
    return _RESPONSE_PREFIX.pack(len(body) + 4, header.correlation_id) + body


_HEARTBEAT_BODIES: dict[tuple[int, ErrorCode], bytes] = {}


def encode_body(api_key: int, version: int, result: Result) -> bytes:
    """Encode the body (no header, no size) of a response."""
    cls = _response_schema(api_key, version)
    return _encoder(api_key, version)(_ENCODERS[api_key](version, cls, result))


def unsupported_version_response(header: RequestHeader, request: Request | None) -> bytes | None:
    """The UNSUPPORTED_VERSION answer to a request of a version we do not implement.

    ApiVersions is answered in v0 with the supported versions (what a client
    expects before it knows what the broker speaks).  Other APIs are answered in
    the requested version when its format is known; ``None`` means it cannot be
    answered and the connection should be closed, as Kafka does.
    """
    if header.api_key == API_VERSIONS:
        v0 = RequestHeader(API_VERSIONS, 0, header.correlation_id, header.client_id)
        return encode_response(
            v0, b.ApiVersionsResult(ErrorCode.UNSUPPORTED_VERSION, ADVERTISED_VERSIONS)
        )
    if request is None:
        return None
    try:
        return encode_response(header, error_result(request, ErrorCode.UNSUPPORTED_VERSION))
    except Exception:
        return None


def error_result(request: Request, code: ErrorCode) -> Result:
    """The answer Kafka gives to ``request`` when it fails as a whole with ``code``."""
    match request:
        case b.ApiVersions():
            return b.ApiVersionsResult(code, ADVERTISED_VERSIONS)
        case b.Metadata():
            return b.MetadataResult((), -1, b.CLUSTER_ID, ())
        case b.FindCoordinator():
            return b.FindCoordinatorResult(
                tuple(b.CoordinatorAnswer(k, code) for k in request.keys)
            )
        case b.SaslHandshake():
            return b.SaslHandshakeResult(code)
        case b.SaslAuthenticate():
            return b.SaslAuthenticateResult(code)
        case m.JoinGroup():
            return m.JoinGroupResult(code, member_id=request.member_id)
        case m.SyncGroup():
            return m.SyncGroupResult(code)
        case m.Heartbeat():
            return m.HeartbeatResult(code)
        case m.LeaveGroup():
            return m.LeaveGroupResult(code)
        case m.OffsetCommit():
            return m.OffsetCommitResult(
                tuple(
                    m.CommitTopicResult(
                        t.name,
                        tuple(m.CommitPartitionResult(p.partition, code) for p in t.partitions),
                    )
                    for t in request.topics
                )
            )
        case m.OffsetFetch():
            return m.OffsetFetchResult(
                tuple(m.FetchedGroup(g.group_id, (), code) for g in request.groups)
            )
        case m.DescribeGroups():
            return m.DescribeGroupsResult(
                tuple(m.DescribedGroup(code, g, "Dead") for g in request.group_ids)
            )
        case m.ListGroups():
            return m.ListGroupsResult(code)
        case m.DeleteGroups():
            return m.DeleteGroupsResult(tuple(m.DeletedGroup(g, code) for g in request.group_ids))
    raise TypeError(f"not a request: {request!r}")


_T = TypeVar("_T")


def _expect(result: Result, kind: type[_T]) -> _T:
    if not isinstance(result, kind):
        raise TypeError(f"expected {kind.__name__}, got {type(result).__name__}")
    return result


def _encode_api_versions(version: int, cls: type[Any], result: Result) -> Any:
    r = _expect(result, b.ApiVersionsResult)
    item = _item_type(cls, "api_keys")
    return _make(
        cls,
        error_code=_err(r.error),
        api_keys=tuple(
            item(
                api_key=a.api_key,
                min_version=a.min_version,
                max_version=a.max_version,
            )
            for a in r.api_keys
        ),
        throttle_time=_ZERO_MS,
    )


def _encode_metadata(version: int, cls: type[Any], result: Result) -> Any:
    r = _expect(result, b.MetadataResult)
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


def _encode_find_coordinator(version: int, cls: type[Any], result: Result) -> Any:
    r = _expect(result, b.FindCoordinatorResult)
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
    (c,) = r.coordinators
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        error_code=_err(c.error),
        error_message=c.error_message,
        node_id=c.node_id,
        host=c.host,
        port=c.port,
    )


def _encode_join_group(version: int, cls: type[Any], result: Result) -> Any:
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


def _encode_sync_group(version: int, cls: type[Any], result: Result) -> Any:
    r = _expect(result, m.SyncGroupResult)
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        error_code=_err(r.error),
        protocol_type=r.protocol_type,
        protocol_name=r.protocol_name,
        assignment=r.assignment,
    )


def _encode_heartbeat(version: int, cls: type[Any], result: Result) -> Any:
    r = _expect(result, m.HeartbeatResult)
    if version == 0:
        return cls(error_code=_err(r.error))
    return cls(throttle_time=_ZERO_MS, error_code=_err(r.error))


def _encode_leave_group(version: int, cls: type[Any], result: Result) -> Any:
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


def _encode_offset_commit(version: int, cls: type[Any], result: Result) -> Any:
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


def _fetched_topics(
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


def _encode_offset_fetch(version: int, cls: type[Any], result: Result) -> Any:
    r = _expect(result, m.OffsetFetchResult)
    if version >= 8:
        group_cls = _item_type(cls, "groups")
        topic_cls = _item_type(group_cls, "topics")
        return cls(
            throttle_time=_ZERO_MS,
            groups=tuple(
                group_cls(
                    group_id=g.group_id,
                    topics=_fetched_topics(topic_cls, version, g.topics, g.error),
                    error_code=_err(g.error),
                )
                for g in r.groups
            ),
        )
    (g,) = r.groups
    return _make(
        cls,
        throttle_time=_ZERO_MS,
        topics=_fetched_topics(_item_type(cls, "topics"), version, g.topics, g.error),
        error_code=_err(g.error),
    )


def _encode_describe_groups(version: int, cls: type[Any], result: Result) -> Any:
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


def _encode_list_groups(version: int, cls: type[Any], result: Result) -> Any:
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


def _encode_delete_groups(version: int, cls: type[Any], result: Result) -> Any:
    r = _expect(result, m.DeleteGroupsResult)
    item = _item_type(cls, "results")
    return cls(
        throttle_time=_ZERO_MS,
        results=tuple(item(group_id=g.group_id, error_code=_err(g.error)) for g in r.groups),
    )


def _encode_sasl_handshake(version: int, cls: type[Any], result: Result) -> Any:
    r = _expect(result, b.SaslHandshakeResult)
    return _make(cls, error_code=_err(r.error), mechanisms=r.mechanisms)


def _encode_sasl_authenticate(version: int, cls: type[Any], result: Result) -> Any:
    r = _expect(result, b.SaslAuthenticateResult)
    return _make(
        cls,
        error_code=_err(r.error),
        error_message=r.error_message,
        auth_bytes=r.auth_bytes,
        session_lifetime=i64Timedelta.parse(datetime.timedelta(milliseconds=r.session_lifetime_ms)),
    )


_ENCODERS: Final[dict[int, Callable[[int, type[Any], Result], Any]]] = {
    API_VERSIONS: _encode_api_versions,
    METADATA: _encode_metadata,
    FIND_COORDINATOR: _encode_find_coordinator,
    JOIN_GROUP: _encode_join_group,
    SYNC_GROUP: _encode_sync_group,
    HEARTBEAT: _encode_heartbeat,
    LEAVE_GROUP: _encode_leave_group,
    OFFSET_COMMIT: _encode_offset_commit,
    OFFSET_FETCH: _encode_offset_fetch,
    DESCRIBE_GROUPS: _encode_describe_groups,
    LIST_GROUPS: _encode_list_groups,
    DELETE_GROUPS: _encode_delete_groups,
    SASL_HANDSHAKE: _encode_sasl_handshake,
    SASL_AUTHENTICATE: _encode_sasl_authenticate,
}

__all__ = [
    "ADVERTISED_VERSIONS",
    "SUPPORTED_APIS",
    "ApiSupport",
    "Request",
    "RequestHeader",
    "Result",
    "UnknownApiKeyError",
    "decode_header",
    "decode_request",
    "encode_response",
    "error_result",
    "request_of",
    "unsupported_version_response",
]
