"""A request record in the shape aiokafka's ``AIOKafkaConnection.send`` expects.

aiokafka 0.14 ships JoinGroup v0-2/5, SyncGroup v0/1/3, Heartbeat v0/1 and
LeaveGroup v0/1 only (no instance id on heartbeats or leaves, no flexible
versions).  So a member encodes with the codec of :mod:`workgroup.kafka.apis`
(kio's entities, every version) and hands aiokafka one :class:`KafkaRequest`:

* ``send`` calls ``prepare(versions)`` with the connection's ApiVersions answer;
  it picks the highest version both sides speak (:func:`choose_version`) and
  returns the request itself, now holding the entity of that version;
* ``send`` then uses ``build_request_header(...).encode()``, ``encode()``,
  ``parse_response_header(buffer)`` and ``RESPONSE_TYPE.decode(buffer)``, which
  returns kio's response entity; :func:`to_result` turns it into the result
  record (outside aiokafka's reader task, so that a surprise there reaches the
  caller rather than the connection).  A response the codec reads without kio
  (:mod:`workgroup.kafka.direct`, e.g. OffsetFetch v8) is decoded straight
  into its result record, which :func:`to_result` passes through.

Rules:

* A request is never sent in a version that cannot carry it: static members
  (an instance id) need ``instance_id_since``, several leaving members need
  LeaveGroup v3; otherwise :class:`~workgroup.errors.UnsupportedVersionError`.
* A response that does not parse is a :class:`~workgroup.errors.ProtocolError`.
"""

from __future__ import annotations

import io
import struct
from typing import Any, ClassVar, cast, overload

from workgroup.errors import ProtocolError, UnsupportedVersionError
from workgroup.kafka import messages as m
from workgroup.kafka.apis import API_OF, response_schema
from workgroup.kafka.codec import read_entity, write_entity
from workgroup.kafka.direct import DIRECT_READERS

_REQUEST_PREFIX = struct.Struct(">hhih")  # api key, version, correlation id, client id size


def choose_version(request: m.GroupRequest, broker: tuple[int, int] | None) -> int:
    """The highest version of ``request`` both sides speak.

    ``broker`` is the broker's range for the API; ``None``: it did not list it.
    """
    api = API_OF[type(request)]
    if api.member_versions is None:
        raise TypeError(f"a member does not send {api.name} through the codec")
    if broker is None:
        raise UnsupportedVersionError(f"the broker does not support {api.name} at all")
    low, high = broker
    ours = api.member_versions
    common = [v for v in ours if low <= v <= high]
    if not common:
        raise UnsupportedVersionError(
            f"no common {api.name} version: broker speaks {low}..{high}, "
            f"workgroup {ours.start}..{ours.stop - 1}"
        )
    version = max(common)
    instance_id = getattr(request, "group_instance_id", None)
    if isinstance(request, m.LeaveGroup):
        instance_id = next(
            (x.group_instance_id for x in request.members if x.group_instance_id), None
        )
        if len(request.members) != 1 and version < 3:
            raise UnsupportedVersionError("LeaveGroup for several members needs v3+")
    since = api.instance_id_since
    if instance_id is not None and since is not None and version < since:
        raise UnsupportedVersionError(
            f"static membership (instance id) needs {api.name} v{since}+, "
            f"the broker speaks up to v{high}"
        )
    return version


class _Encoded:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def encode(self) -> bytes:
        return self._data


class _ResponseHeader:
    def __init__(self, correlation_id: int) -> None:
        self.correlation_id = correlation_id


class KafkaRequest:
    """One request record for aiokafka's connection: it is its own request struct
    (``prepare`` returns it) and its own response type (``RESPONSE_TYPE``)."""

    ALLOW_UNKNOWN_API_VERSION: ClassVar[bool] = False

    def __init__(self, request: m.GroupRequest) -> None:
        self.request = request
        self.api = API_OF[type(request)]
        self.API_KEY = self.api.key
        #: The version chosen by :meth:`prepare` (``None`` before).
        self.version: int | None = None
        self.API_VERSION = -1
        self.FLEXIBLE_VERSION = False
        self.RESPONSE_TYPE = self
        self.entity: Any = None

    def prepare(self, versions: dict[int, tuple[int, int]]) -> KafkaRequest:
        version = choose_version(self.request, versions.get(self.API_KEY))
        self.entity = self.api.request_entity(self.request, version)
        self.version = self.API_VERSION = version
        self.FLEXIBLE_VERSION = self.api.flexible(version)
        return self

    def build_request_header(self, correlation_id: int, client_id: str | None) -> _Encoded:
        # Request header v1, plus an empty tagged-field section in v2 (flexible
        # versions); the client id stays a non-compact nullable string in both.
        client = b"" if client_id is None else client_id.encode()
        size = -1 if client_id is None else len(client)
        header = _REQUEST_PREFIX.pack(self.API_KEY, self.API_VERSION, correlation_id, size)
        return _Encoded(header + client + (b"\x00" if self.FLEXIBLE_VERSION else b""))

    def encode(self) -> bytes:
        return write_entity(self.entity)

    def parse_response_header(self, buffer: io.BytesIO | bytes) -> _ResponseHeader:
        if isinstance(buffer, bytes):
            buffer = io.BytesIO(buffer)
        start = buffer.tell()
        cls = self._response_type().__header_schema__
        try:
            header, size = read_entity(cls, buffer.read(), 0)
        except Exception as exc:  # kio raises several types for malformed input
            raise ProtocolError(f"malformed response header of {self!r}: {exc}") from exc
        buffer.seek(start + size)
        return _ResponseHeader(int(header.correlation_id))

    def decode(self, buffer: io.BytesIO | bytes) -> Any:
        """kio's response entity, or the result record itself for a response read
        without kio (aiokafka calls this as ``RESPONSE_TYPE.decode``)."""
        data = buffer.read() if isinstance(buffer, io.BytesIO) else buffer
        direct = DIRECT_READERS.get((self.API_KEY, self.API_VERSION))
        if direct is not None:
            return direct(data)  # its errors are one-line ProtocolErrors already
        cls = self._response_type()
        try:
            entity, _end = read_entity(cls, data, 0)
        except Exception as exc:  # kio raises several types for malformed input
            raise ProtocolError(f"malformed {cls.__name__} v{self.API_VERSION}: {exc}") from exc
        return entity

    def _response_type(self) -> type[Any]:
        return response_schema(self.API_KEY, self.API_VERSION)

    def __repr__(self) -> str:
        return f"{self.api.name}Request_v{self.API_VERSION}"


@overload
def to_result(request: m.DescribeGroups, response: Any) -> m.DescribeGroupsResult: ...
@overload
def to_result(request: m.GroupRequest, response: Any) -> m.GroupResult: ...


def to_result(request: m.GroupRequest, response: Any) -> m.GroupResult:
    """The result record in kio's response entity ``response`` to ``request``
    (a response read without kio is its result record already)."""
    api = API_OF[type(request)]
    if isinstance(response, api.result):
        return cast(m.GroupResult, response)
    result = api.result_record(int(response.__version__), response, request)
    return cast(m.GroupResult, result)  # the codec of a group request answers with its result
