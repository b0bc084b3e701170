"""The embedded coordinator's frames: request headers, responses, the heartbeat fast path.

The bodies are the shared codec's (``workgroup.kafka.apis``, one table of APIs,
versions and codecs for both sides); this module adds what only a broker does:
reading request headers, checking declared lengths before kio allocates,
answering with framed responses, and the answers Kafka gives to requests it
refuses.  It does no I/O.

Rules:

* A request frame is ``request header + body``.  The header is v1 (client id as
  a nullable int16 string) for a non-flexible API version and v2 (v1 plus tagged
  fields) for a flexible one; the client id stays a non-compact string in v2.
* A response is ``response header + body``: header v0 (correlation id) for a
  non-flexible version, v1 (plus tagged fields) for a flexible one — except
  ApiVersions, whose response header is always v0 so that a client that asked
  for a version the broker does not know can still read the answer.
* The table's ``coordinator_versions`` are what is implemented; ApiVersions
  advertises exactly them (:data:`ADVERTISED_VERSIONS`).
* An API key outside the table raises :class:`UnknownApiKeyError` (Kafka closes
  the connection).  A version outside the table raises
  :class:`~workgroup.errors.UnsupportedVersionError`; the caller answers with
  UNSUPPORTED_VERSION when :func:`unsupported_version_response` can encode one.
* A body that does not parse raises :class:`~workgroup.errors.ProtocolError`.
  :func:`~workgroup.coordinator.lengths.check_lengths` checks every declared
  length against the bytes actually present first, so an absurd array or
  string length fails without allocating.
* Heartbeats (one per member every few seconds) take a fast path: a decoder
  without kio for the shapes clients send, and answers cached per version and
  error code.  Responses are written by the compiled writers of ``writers.py``,
  an OffsetFetch v8 answer (a big group's every slot) by the codec's direct
  writer (:mod:`workgroup.kafka.direct`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import cache, lru_cache
from io import BytesIO
from typing import Any, Final, NamedTuple

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from workgroup.coordinator import broker as b
from workgroup.coordinator.lengths import check_header_tagged_fields, check_lengths
from workgroup.coordinator.writers import compile_writer
from workgroup.errors import ErrorCode, ProtocolError, UnsupportedVersionError
from workgroup.kafka import messages as m
from workgroup.kafka.apis import (
    API_VERSIONS,
    APIS,
    HEARTBEAT,
    Api,
    has_schema,
    request_schema,
    response_schema,
)
from workgroup.kafka.direct import DIRECT_WRITERS

Request = m.Request
Result = m.Result


class UnknownApiKeyError(ProtocolError):
    """A request for an API the coordinator does not implement."""


ADVERTISED_VERSIONS: Final = tuple(
    b.ApiVersionRange(api.key, api.coordinator_versions[0], api.coordinator_versions[-1])
    for api in sorted(APIS.values(), key=lambda api: api.key)
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
    def api(self) -> Api | None:
        return APIS.get(self.api_key)


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
    api = APIS.get(api_key)
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


# --- readers and writers ---------------------------------------------------------


@cache
def _reader(api_key: int, version: int) -> Callable[[bytes, int], tuple[Any, int]]:
    reader: Callable[[bytes, int], tuple[Any, int]] = entity_reader(
        request_schema(api_key, version)
    )
    return reader


@cache
def _encoder(api_key: int, version: int) -> Callable[[Any], bytes]:
    """The compiled writer of a response schema, or kio's where it cannot compile one."""
    cls = response_schema(api_key, version)
    compiled = compile_writer(cls)
    if compiled is not None:
        return compiled
    write: Callable[[BytesIO, Any], None] = entity_writer(cls)

    def encode(entity: Any) -> bytes:
        out = BytesIO()
        write(out, entity)
        return out.getvalue()

    return encode


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
    supported = version in api.coordinator_versions
    if not supported and not has_schema(header.api_key, version):
        raise UnsupportedVersionError(_unsupported(api, version))
    check_lengths(request_schema(header.api_key, version), payload, offset)
    try:
        body, _end = _reader(header.api_key, version)(payload, offset)
        client = _client_info(header.client_id or "", client_host)
        request = api.codec.decode_request(version, body, client)
    except Exception as exc:  # kio raises several types for bad bytes
        raise ProtocolError(f"cannot decode {api.schema} v{version}: {exc}") from exc
    if not supported:
        raise _UnsupportedWithRequest(request, api, version)
    return request


def _unsupported(api: Api, version: int) -> str:
    versions = api.coordinator_versions
    return f"{api.schema} v{version} is not supported (versions {versions[0]}-{versions[-1]})"


_HEARTBEAT_MAX_VERSION: Final = APIS[HEARTBEAT].coordinator_versions[-1]
_FIRST_FLEXIBLE_HEARTBEAT: Final = APIS[HEARTBEAT].first_flexible
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

    def __init__(self, request: Request, api: Api, version: int) -> None:
        super().__init__(_unsupported(api, version))
        self.request = request


def request_of(error: UnsupportedVersionError) -> Request | None:
    """The decoded request behind an unsupported-version error, if it could be read."""
    return error.request if isinstance(error, _UnsupportedWithRequest) else None


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
    direct = DIRECT_WRITERS.get((api_key, version))
    if direct is not None:  # a big group's OffsetFetch of every slot: no kio entities
        return direct(result)
    cls = response_schema(api_key, version)
    return _encoder(api_key, version)(APIS[api_key].codec.encode_result(version, cls, result))


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


__all__ = [
    "ADVERTISED_VERSIONS",
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
