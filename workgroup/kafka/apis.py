"""The one table of the Kafka APIs workgroup speaks: keys, versions, schemas, codecs.

Both sides read it: the embedded coordinator accepts and advertises each API's
``coordinator_versions`` (``workgroup.coordinator.wire``); a member sends the
highest of its ``member_versions`` that the broker also speaks
(``workgroup.kafka.adapter``).  Each row names the API's :class:`Codec`
(``workgroup.kafka.codec``), whose four functions convert between records and
kio's entities; the round-trip tests are generated from this table.

Rules:

* One row per API key; ``coordinator_versions`` is exactly what ApiVersions
  advertises.  ``member_versions`` is ``None`` for an API a member does not send
  through this codec (aiokafka speaks those itself: ApiVersions, Metadata,
  FindCoordinator, SASL).
* A version is flexible (compact strings, tagged fields, request header v2,
  response header v1) from ``first_flexible`` on.
* ``instance_id_since`` is the first version that carries
  ``group_instance_id`` (static membership, KIP-345); a member with an
  instance id never sends an older version.
* Schemas come from kio, except OffsetCommit v0-1 requests (Kafka 4.0 removed
  them, KIP-896; ``_legacy_schema``), and versions whose bytes are another's:
  OffsetFetch v0 is v1 (offsets in Kafka rather than ZooKeeper), the responses
  of OffsetCommit v0-1 are v2's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema

from workgroup.kafka import codec
from workgroup.kafka import messages as m
from workgroup.kafka._legacy_schema import OFFSET_COMMIT_REQUESTS
from workgroup.kafka.codec import Codec

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

#: ``first_flexible`` of an API none of whose versions is flexible.
NEVER_FLEXIBLE: Final = 1 << 15


@dataclass(frozen=True, slots=True)
class Api:
    """One Kafka API: its key, versions on each side, and its codec."""

    key: int
    name: str  # Kafka's name, e.g. "JoinGroup"
    schema: str  # kio's schema package, e.g. "join_group"
    request: type[Any]  # the request record (workgroup.kafka.messages)
    result: type[Any]  # the result record
    coordinator_versions: range  # accepted and advertised by the embedded coordinator
    member_versions: range | None  # sent by a member; None: never through this codec
    first_flexible: int
    codec: Codec
    instance_id_since: int | None = None

    def flexible(self, version: int) -> bool:
        return version >= self.first_flexible

    def request_entity(self, record: m.Request, version: int) -> Any:
        """``record`` as the kio request entity of ``version``."""
        return self.codec.encode_request(version, request_schema(self.key, version), record)

    def request_record(
        self, version: int, entity: Any, client: m.ClientInfo | None = None
    ) -> m.Request:
        """The record of a kio request entity of ``version``."""
        return self.codec.decode_request(version, entity, client or _NO_CLIENT)

    def result_entity(self, result: m.Result, version: int) -> Any:
        """``result`` as the kio response entity of ``version``."""
        return self.codec.encode_result(version, response_schema(self.key, version), result)

    def result_record(self, version: int, entity: Any, request: m.Request) -> m.Result:
        """The result in a kio response entity of ``version`` that answers ``request``."""
        return self.codec.decode_result(version, entity, request)


_NO_CLIENT: Final = m.ClientInfo()

#: Every API workgroup speaks, by key.
APIS: Final[dict[int, Api]] = {
    api.key: api
    for api in (
        Api(
            API_VERSIONS, "ApiVersions", "api_versions", m.ApiVersions, m.ApiVersionsResult,
            coordinator_versions=range(0, 4), member_versions=None, first_flexible=3,
            codec=codec.API_VERSIONS,
        ),
        Api(
            METADATA, "Metadata", "metadata", m.Metadata, m.MetadataResult,
            coordinator_versions=range(0, 13), member_versions=None, first_flexible=9,
            codec=codec.METADATA,
        ),
        Api(
            FIND_COORDINATOR, "FindCoordinator", "find_coordinator",
            m.FindCoordinator, m.FindCoordinatorResult,
            coordinator_versions=range(0, 6), member_versions=None, first_flexible=3,
            codec=codec.FIND_COORDINATOR,
        ),
        Api(
            JOIN_GROUP, "JoinGroup", "join_group", m.JoinGroup, m.JoinGroupResult,
            coordinator_versions=range(0, 10), member_versions=range(0, 10), first_flexible=6,
            codec=codec.JOIN_GROUP, instance_id_since=5,
        ),
        Api(
            SYNC_GROUP, "SyncGroup", "sync_group", m.SyncGroup, m.SyncGroupResult,
            coordinator_versions=range(0, 6), member_versions=range(0, 6), first_flexible=4,
            codec=codec.SYNC_GROUP, instance_id_since=3,
        ),
        Api(
            HEARTBEAT, "Heartbeat", "heartbeat", m.Heartbeat, m.HeartbeatResult,
            coordinator_versions=range(0, 5), member_versions=range(0, 5), first_flexible=4,
            codec=codec.HEARTBEAT, instance_id_since=3,
        ),
        Api(
            LEAVE_GROUP, "LeaveGroup", "leave_group", m.LeaveGroup, m.LeaveGroupResult,
            coordinator_versions=range(0, 6), member_versions=range(0, 6), first_flexible=4,
            codec=codec.LEAVE_GROUP, instance_id_since=3,
        ),
        # Leases commit and read checkpoints: OffsetCommit v7-8 (with the instance
        # id; v9 is KIP-848's) and OffsetFetch v8 (several groups, Kafka 3.0+).
        Api(
            OFFSET_COMMIT, "OffsetCommit", "offset_commit", m.OffsetCommit, m.OffsetCommitResult,
            coordinator_versions=range(0, 10), member_versions=range(7, 9), first_flexible=8,
            codec=codec.OFFSET_COMMIT, instance_id_since=7,
        ),
        Api(
            OFFSET_FETCH, "OffsetFetch", "offset_fetch", m.OffsetFetch, m.OffsetFetchResult,
            coordinator_versions=range(0, 10), member_versions=range(8, 9), first_flexible=6,
            codec=codec.OFFSET_FETCH,
        ),
        # Operators' views and commands (workgroup describe / list / delete).
        Api(
            DESCRIBE_GROUPS, "DescribeGroups", "describe_groups",
            m.DescribeGroups, m.DescribeGroupsResult,
            coordinator_versions=range(0, 6), member_versions=range(0, 6), first_flexible=5,
            codec=codec.DESCRIBE_GROUPS,
        ),
        Api(
            LIST_GROUPS, "ListGroups", "list_groups", m.ListGroups, m.ListGroupsResult,
            coordinator_versions=range(0, 6), member_versions=range(0, 5), first_flexible=3,
            codec=codec.LIST_GROUPS,
        ),
        Api(
            DELETE_GROUPS, "DeleteGroups", "delete_groups", m.DeleteGroups, m.DeleteGroupsResult,
            coordinator_versions=range(0, 3), member_versions=range(0, 3), first_flexible=2,
            codec=codec.DELETE_GROUPS,
        ),
        # Handshake v0 (raw tokens without Kafka headers, pre-1.0 clients) is not spoken.
        Api(
            SASL_HANDSHAKE, "SaslHandshake", "sasl_handshake",
            m.SaslHandshake, m.SaslHandshakeResult,
            coordinator_versions=range(1, 2), member_versions=None,
            first_flexible=NEVER_FLEXIBLE, codec=codec.SASL_HANDSHAKE,
        ),
        Api(
            SASL_AUTHENTICATE, "SaslAuthenticate", "sasl_authenticate",
            m.SaslAuthenticate, m.SaslAuthenticateResult,
            coordinator_versions=range(0, 3), member_versions=None, first_flexible=2,
            codec=codec.SASL_AUTHENTICATE,
        ),
    )
}  # fmt: skip

#: The API of each request and result record.
API_OF: Final[dict[type[Any], Api]] = {
    **{api.request: api for api in APIS.values()},
    **{api.result: api for api in APIS.values()},
}


@cache
def request_schema(api_key: int, version: int) -> type[Any]:
    """kio's request entity class of ``api_key`` at ``version``."""
    if api_key == OFFSET_FETCH and version == 0:
        version = 1
    if api_key == OFFSET_COMMIT and version < 2:
        return OFFSET_COMMIT_REQUESTS[version]
    schema: type[Any] = load_request_schema(api_key, version)
    return schema


@cache
def response_schema(api_key: int, version: int) -> type[Any]:
    """kio's response entity class of ``api_key`` at ``version``."""
    if api_key == OFFSET_COMMIT and version < 2:
        version = 2
    if api_key == OFFSET_FETCH and version == 0:
        version = 1
    schema: type[Any] = load_response_schema(api_key, version)
    return schema


def has_schema(api_key: int, version: int) -> bool:
    """kio knows both directions of ``api_key`` at ``version``."""
    try:
        request_schema(api_key, version)
        response_schema(api_key, version)
    except Exception:  # kio raises several types for an unknown key or version
        return False
    return True
