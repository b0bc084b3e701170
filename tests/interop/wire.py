"""Group-protocol requests through two third-party encoders.

The interop tests state each rule once and run it through both encoders, so one
``GroupWire`` interface hides which library builds the bytes:

- ``KafkaPythonWire``: kafka-python 3.x's schema-generated messages and its
  sans-I/O ``KafkaProtocol`` framer over an asyncio stream. It speaks the newest
  version both sides support (flexible versions included), capped at the versions
  whose layout these helpers know.
- ``AiokafkaWire``: aiokafka's ``AIOKafkaClient`` and its ``Struct`` classes at the
  versions aiokafka ships (JoinGroup v5, SyncGroup v3, Heartbeat v1, LeaveGroup v1,
  OffsetCommit/Fetch v3, DescribeGroups v1, ListGroups v1, DeleteGroups v1).
  aiokafka has no Heartbeat or LeaveGroup with a group instance id, so the v3
  structs are declared here with aiokafka's ``Schema`` types.

Each member of a group gets its own connection: a broker answers one request per
connection at a time, and JoinGroup/SyncGroup are held until the group completes.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import itertools
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.admin import (
    ApiVersionRequest_v1,
    DeleteGroupsRequest_v1,
    DescribeGroupsRequest_v1,
    ListGroupsRequest_v1,
)
from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.commit import OffsetCommitRequest_v3, OffsetFetchRequest_v3
from aiokafka.protocol.coordination import FindCoordinatorRequest_v1
from aiokafka.protocol.group import (
    HeartbeatRequest_v1,
    JoinGroupRequest_v5,
    LeaveGroupRequest_v1,
    SyncGroupRequest_v3,
)
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

# kafka-python 3.x loads its message schemas with importlib.resources.read_text,
# deprecated on Python 3.11; the suite turns warnings into errors.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin.groups import (
        DeleteGroupsRequest,
        DescribeGroupsRequest,
        ListGroupsRequest,
    )
    from kafka.protocol.admin.topics import CreateTopicsRequest
    from kafka.protocol.consumer import (
        HeartbeatRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        OffsetCommitRequest,
        OffsetFetchRequest,
        SyncGroupRequest,
    )
    from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest
    from kafka.protocol.parser import KafkaProtocol

# Kafka error codes the tests name.
NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
COORDINATOR_NOT_AVAILABLE = 15
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
GROUP_ID_NOT_FOUND = 69
NON_EMPTY_GROUP = 68
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
GROUP_MAX_SIZE_REACHED = 81

# API keys of the group protocol.
API_KEYS = {
    "OffsetCommit": 8,
    "OffsetFetch": 9,
    "FindCoordinator": 10,
    "JoinGroup": 11,
    "Heartbeat": 12,
    "LeaveGroup": 13,
    "SyncGroup": 14,
    "DescribeGroups": 15,
    "ListGroups": 16,
    "ApiVersions": 18,
    "DeleteGroups": 42,
}

GROUP_COORDINATOR = 0

Protocols = Sequence[tuple[str, bytes]]


@dataclass
class Joined:
    error: int
    generation: int
    protocol_name: str | None
    leader: str
    member_id: str
    #: member id -> metadata of the chosen protocol; only the leader gets these.
    members: dict[str, bytes] = field(default_factory=dict)
    #: member id -> group instance id (JoinGroup v5+).
    instance_ids: dict[str, str | None] = field(default_factory=dict)
    #: protocol type echoed back (JoinGroup v7+), None before.
    protocol_type: str | None = None

    @property
    def is_leader(self) -> bool:
        return self.error == NONE and self.leader == self.member_id


@dataclass
class Synced:
    error: int
    assignment: bytes


@dataclass
class LeftMember:
    member_id: str
    instance_id: str | None
    error: int


@dataclass
class Left:
    error: int
    members: list[LeftMember] = field(default_factory=list)


@dataclass
class DescribedMember:
    member_id: str
    instance_id: str | None
    client_id: str
    metadata: bytes
    assignment: bytes


@dataclass
class Described:
    error: int
    state: str
    protocol_type: str
    protocol: str
    members: list[DescribedMember]

    def member_ids(self) -> set[str]:
        return {m.member_id for m in self.members}


@dataclass
class FetchedOffset:
    partition: int
    offset: int
    metadata: str | None
    error: int


@dataclass
class Coordinator:
    error: int
    node_id: int
    host: str
    port: int


class GroupWire(abc.ABC):
    """One connection to a broker, speaking the group protocol."""

    encoder: ClassVar[str]

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port

    @classmethod
    async def connect(cls, host: str, port: int) -> Self:
        wire = cls(host, port)
        await wire._open()
        return wire

    @abc.abstractmethod
    async def _open(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def api_versions(self) -> dict[int, tuple[int, int]]: ...

    @abc.abstractmethod
    async def find_coordinator(self, group: str) -> Coordinator: ...

    @abc.abstractmethod
    async def join(
        self,
        group: str,
        *,
        member_id: str = "",
        instance_id: str | None = None,
        protocol_type: str = "consumer",
        protocols: Protocols = (("range", b"r"),),
        session_timeout_ms: int = 3000,
        rebalance_timeout_ms: int = 3000,
        version: int | None = None,
    ) -> Joined: ...

    @abc.abstractmethod
    async def sync(
        self,
        group: str,
        generation: int,
        member_id: str,
        *,
        instance_id: str | None = None,
        assignments: dict[str, bytes] | None = None,
    ) -> Synced: ...

    @abc.abstractmethod
    async def heartbeat(
        self, group: str, generation: int, member_id: str, *, instance_id: str | None = None
    ) -> int: ...

    @abc.abstractmethod
    async def leave(self, group: str, member_id: str) -> Left:
        """LeaveGroup v0-2: one member by member id."""

    @abc.abstractmethod
    async def leave_batch(self, group: str, members: Sequence[tuple[str, str | None]]) -> Left:
        """LeaveGroup v3+: (member id, instance id) pairs, member id may be empty."""

    @abc.abstractmethod
    async def commit(
        self,
        group: str,
        generation: int,
        member_id: str,
        offsets: Mapping[tuple[str, int], tuple[int, str | None]],
    ) -> dict[tuple[str, int], int]: ...

    @abc.abstractmethod
    async def fetch(
        self, group: str, partitions: dict[str, list[int]]
    ) -> dict[tuple[str, int], FetchedOffset]: ...

    @abc.abstractmethod
    async def describe(self, group: str) -> Described: ...

    @abc.abstractmethod
    async def list_groups(self) -> tuple[int, dict[str, str]]: ...

    @abc.abstractmethod
    async def delete_groups(self, groups: Sequence[str]) -> dict[str, int]: ...

    async def join_new(self, group: str, **kwargs: Any) -> Joined:
        """A new dynamic member's join: on MEMBER_ID_REQUIRED, rejoin with the given id."""
        first = await self.join(group, **kwargs)
        if first.error != MEMBER_ID_REQUIRED:
            return first
        kwargs["member_id"] = first.member_id
        return await self.join(group, **kwargs)


# --------------------------------------------------------------------------- kafka-python


class KafkaPythonWire(GroupWire):
    encoder = "kafka-python"

    #: Newest version of each API whose layout these helpers handle.
    CAPS: ClassVar[dict[int, int]] = {
        8: 8,  # OffsetCommit (v9+ is the consumer protocol of KIP-848)
        9: 7,  # OffsetFetch (v8+ batches groups)
        10: 3,  # FindCoordinator (v4+ batches keys)
        11: 9,
        12: 4,
        13: 5,
        14: 5,
        15: 5,
        16: 4,
        18: 3,
        42: 2,
    }
    _client_ids = itertools.count()

    async def _open(self) -> None:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        self._protocol = KafkaProtocol(client_id=f"interop-kp-{next(self._client_ids)}")
        self._lock = asyncio.Lock()
        self._versions: dict[int, tuple[int, int]] = {}
        self._versions = await self.api_versions()

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()

    def version_for(self, api_key: int, wanted: int | None = None) -> int:
        if wanted is not None:
            return wanted
        low, high = self._versions[api_key]
        version = min(high, self.CAPS[api_key])
        assert version >= low, f"no common version for API {api_key}"
        return version

    async def request(self, message: Any) -> Any:
        async with self._lock:
            self._protocol.send_request(message)
            self._writer.write(self._protocol.send_bytes())
            await self._writer.drain()
            while True:
                data = await self._reader.read(65536)
                if not data:
                    raise ConnectionError("broker closed the connection")
                responses = self._protocol.receive_bytes(data)
                if responses:
                    ((_, response),) = responses
                    return response

    async def create_topic(self, name: str, partitions: int) -> int:
        topic = CreateTopicsRequest.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=1,
            assignments=[],
            configs=[],
        )
        r = await self.request(
            CreateTopicsRequest(topics=[topic], timeout_ms=10_000, validate_only=False, version=4)
        )
        (result,) = r.topics
        return int(result.error_code)

    async def api_versions(self) -> dict[int, tuple[int, int]]:
        request = ApiVersionsRequest(
            client_software_name="interop", client_software_version="1", version=3
        )
        response = await self.request(request)
        assert response.error_code == NONE, response
        return {a.api_key: (a.min_version, a.max_version) for a in response.api_keys}

    async def find_coordinator(self, group: str) -> Coordinator:
        response = await self.request(
            FindCoordinatorRequest(
                key=group, key_type=GROUP_COORDINATOR, version=self.version_for(10)
            )
        )
        return Coordinator(response.error_code, response.node_id, response.host, response.port)

    async def join(
        self,
        group: str,
        *,
        member_id: str = "",
        instance_id: str | None = None,
        protocol_type: str = "consumer",
        protocols: Protocols = (("range", b"r"),),
        session_timeout_ms: int = 3000,
        rebalance_timeout_ms: int = 3000,
        version: int | None = None,
    ) -> Joined:
        v = self.version_for(11, version)
        request = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=[
                JoinGroupRequest.JoinGroupRequestProtocol(name=name, metadata=metadata)
                for name, metadata in protocols
            ],
            version=v,
        )
        r = await self.request(request)
        return Joined(
            error=r.error_code,
            generation=r.generation_id,
            protocol_name=r.protocol_name,
            leader=r.leader,
            member_id=r.member_id,
            members={m.member_id: bytes(m.metadata) for m in r.members},
            instance_ids={m.member_id: m.group_instance_id for m in r.members},
            protocol_type=r.protocol_type if v >= 7 else None,
        )

    async def sync(
        self,
        group: str,
        generation: int,
        member_id: str,
        *,
        instance_id: str | None = None,
        assignments: dict[str, bytes] | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Synced:
        request = SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
            version=self.version_for(14),
        )
        r = await self.request(request)
        return Synced(r.error_code, bytes(r.assignment))

    async def heartbeat(
        self, group: str, generation: int, member_id: str, *, instance_id: str | None = None
    ) -> int:
        r = await self.request(
            HeartbeatRequest(
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance_id,
                version=self.version_for(12),
            )
        )
        return int(r.error_code)

    async def leave(self, group: str, member_id: str) -> Left:
        r = await self.request(LeaveGroupRequest(group_id=group, member_id=member_id, version=0))
        return Left(r.error_code)

    async def leave_batch(self, group: str, members: Sequence[tuple[str, str | None]]) -> Left:
        v = self.version_for(13)
        assert v >= 3, "batch leave needs LeaveGroup v3+"
        r = await self.request(
            LeaveGroupRequest(
                group_id=group,
                members=[
                    LeaveGroupRequest.MemberIdentity(
                        member_id=m, group_instance_id=i, reason="interop test"
                    )
                    for m, i in members
                ],
                version=v,
            )
        )
        return Left(
            r.error_code,
            [LeftMember(m.member_id, m.group_instance_id, m.error_code) for m in r.members],
        )

    async def commit(
        self,
        group: str,
        generation: int,
        member_id: str,
        offsets: Mapping[tuple[str, int], tuple[int, str | None]],
    ) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), (offset, metadata) in offsets.items():
            by_topic.setdefault(topic, []).append(
                OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    committed_metadata=metadata,
                )
            )
        r = await self.request(
            OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=generation,
                member_id=member_id,
                group_instance_id=None,
                retention_time_ms=-1,
                topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()
                ],
                version=self.version_for(8),
            )
        )
        return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}

    async def fetch(
        self, group: str, partitions: dict[str, list[int]]
    ) -> dict[tuple[str, int], FetchedOffset]:
        r = await self.request(
            OffsetFetchRequest(
                group_id=group,
                topics=[
                    OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                    for t, ps in partitions.items()
                ],
                require_stable=False,
                version=self.version_for(9),
            )
        )
        assert r.error_code == NONE, r
        return {
            (t.name, p.partition_index): FetchedOffset(
                p.partition_index, p.committed_offset, p.metadata, p.error_code
            )
            for t in r.topics
            for p in t.partitions
        }

    async def describe(self, group: str) -> Described:
        r = await self.request(
            DescribeGroupsRequest(
                groups=[group], include_authorized_operations=False, version=self.version_for(15)
            )
        )
        (g,) = r.groups
        return Described(
            g.error_code,
            g.group_state,
            g.protocol_type,
            g.protocol_data,
            [
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    bytes(m.member_metadata),
                    bytes(m.member_assignment),
                )
                for m in g.members
            ],
        )

    async def list_groups(self) -> tuple[int, dict[str, str]]:
        r = await self.request(ListGroupsRequest(states_filter=[], version=self.version_for(16)))
        return r.error_code, {g.group_id: g.protocol_type for g in r.groups}

    async def delete_groups(self, groups: Sequence[str]) -> dict[str, int]:
        r = await self.request(
            DeleteGroupsRequest(groups_names=list(groups), version=self.version_for(42))
        )
        return {x.group_id: x.error_code for x in r.results}


# --------------------------------------------------------------------------- aiokafka


class HeartbeatResponse_v3(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 12
    API_VERSION = 3
    SCHEMA = Schema(("throttle_time_ms", Int32), ("error_code", Int16))


class HeartbeatRequest_v3(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    """Heartbeat v3 (KIP-345): adds the group instance id aiokafka lacks."""

    API_KEY = 12
    API_VERSION = 3
    RESPONSE_TYPE = HeartbeatResponse_v3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("generation_id", Int32),
        ("member_id", String("utf-8")),
        ("group_instance_id", String("utf-8")),
    )


class LeaveGroupResponse_v3(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class LeaveGroupRequest_v3(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    """LeaveGroup v3 (KIP-345): batch leave by member identity."""

    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class _Exact:
    """Hands aiokafka's connection a request struct of one fixed version.

    aiokafka's ``Request`` builders negotiate the version themselves; the tests
    need to choose it.
    """

    def __init__(self, struct: RequestStruct) -> None:
        self._struct = struct

    def prepare(self, versions: dict[int, tuple[int, int]]) -> RequestStruct:
        return self._struct


class AiokafkaWire(GroupWire):
    encoder = "aiokafka"

    async def _open(self) -> None:
        self._client = AIOKafkaClient(
            bootstrap_servers=f"{self.host}:{self.port}",
            request_timeout_ms=60_000,
            metadata_max_age_ms=600_000,
        )
        try:
            await self._client.bootstrap()
        except BaseException:
            await self._client.close()
            raise
        (broker,) = self._client.cluster.brokers()
        self._node_id = broker.nodeId

    async def close(self) -> None:
        await self._client.close()

    async def request(self, struct: RequestStruct) -> Any:
        return await self._client.send(self._node_id, _Exact(struct))

    async def api_versions(self) -> dict[int, tuple[int, int]]:
        r = await self.request(ApiVersionRequest_v1())
        assert r.error_code == NONE, r
        return {key: (low, high) for key, low, high in r.api_versions}

    async def find_coordinator(self, group: str) -> Coordinator:
        r = await self.request(FindCoordinatorRequest_v1(group, GROUP_COORDINATOR))
        return Coordinator(r.error_code, r.coordinator_id, r.host, r.port)

    async def join(
        self,
        group: str,
        *,
        member_id: str = "",
        instance_id: str | None = None,
        protocol_type: str = "consumer",
        protocols: Protocols = (("range", b"r"),),
        session_timeout_ms: int = 3000,
        rebalance_timeout_ms: int = 3000,
        version: int | None = None,
    ) -> Joined:
        assert version in (None, 5), "aiokafka ships JoinGroup v5 for the tests' needs"
        r = await self.request(
            JoinGroupRequest_v5(
                group,
                session_timeout_ms,
                rebalance_timeout_ms,
                member_id,
                instance_id,
                protocol_type,
                list(protocols),
            )
        )
        return Joined(
            error=r.error_code,
            generation=r.generation_id,
            protocol_name=r.group_protocol,
            leader=r.leader_id,
            member_id=r.member_id,
            members={m: bytes(md) for m, _i, md in r.members},
            instance_ids={m: i for m, i, _md in r.members},
        )

    async def sync(
        self,
        group: str,
        generation: int,
        member_id: str,
        *,
        instance_id: str | None = None,
        assignments: dict[str, bytes] | None = None,
    ) -> Synced:
        r = await self.request(
            SyncGroupRequest_v3(
                group, generation, member_id, instance_id, list((assignments or {}).items())
            )
        )
        return Synced(r.error_code, bytes(r.member_assignment or b""))

    async def heartbeat(
        self, group: str, generation: int, member_id: str, *, instance_id: str | None = None
    ) -> int:
        if instance_id is None:
            r = await self.request(HeartbeatRequest_v1(group, generation, member_id))
        else:
            r = await self.request(HeartbeatRequest_v3(group, generation, member_id, instance_id))
        return int(r.error_code)

    async def leave(self, group: str, member_id: str) -> Left:
        r = await self.request(LeaveGroupRequest_v1(group, member_id))
        return Left(r.error_code)

    async def leave_batch(self, group: str, members: Sequence[tuple[str, str | None]]) -> Left:
        r = await self.request(LeaveGroupRequest_v3(group, list(members)))
        return Left(r.error_code, [LeftMember(m, i, e) for m, i, e in r.members])

    async def commit(
        self,
        group: str,
        generation: int,
        member_id: str,
        offsets: Mapping[tuple[str, int], tuple[int, str | None]],
    ) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[tuple[int, int, str | None]]] = {}
        for (topic, partition), (offset, metadata) in offsets.items():
            by_topic.setdefault(topic, []).append((partition, offset, metadata))
        r = await self.request(
            OffsetCommitRequest_v3(group, generation, member_id, -1, list(by_topic.items()))
        )
        return {(t, p): e for t, parts in r.topics for p, e in parts}

    async def fetch(
        self, group: str, partitions: dict[str, list[int]]
    ) -> dict[tuple[str, int], FetchedOffset]:
        r = await self.request(OffsetFetchRequest_v3(group, list(partitions.items())))
        assert r.error_code == NONE, r
        return {
            (t, p): FetchedOffset(p, o, md, e) for t, parts in r.topics for p, o, md, e in parts
        }

    async def describe(self, group: str) -> Described:
        r = await self.request(DescribeGroupsRequest_v1([group]))
        ((error, _group, state, protocol_type, protocol, members),) = r.groups
        return Described(
            error,
            state,
            protocol_type,
            protocol,
            [
                DescribedMember(m, None, c, bytes(md or b""), bytes(a or b""))
                for m, c, _h, md, a in members
            ],
        )

    async def list_groups(self) -> tuple[int, dict[str, str]]:
        r = await self.request(ListGroupsRequest_v1())
        return r.error_code, dict(r.groups)

    async def delete_groups(self, groups: Sequence[str]) -> dict[str, int]:
        r = await self.request(DeleteGroupsRequest_v1(list(groups)))
        return dict(r.results)


ENCODERS: dict[str, type[GroupWire]] = {
    KafkaPythonWire.encoder: KafkaPythonWire,
    AiokafkaWire.encoder: AiokafkaWire,
}
