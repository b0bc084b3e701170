"""What an operator asks a coordinator: describe a group, list groups.

Works against the embedded coordinator, Tansu and any Kafka cluster (the
DescribeGroups and ListGroups requests of the classic protocol).  Member
assignments are decoded when their protocol type is workgroup's (the binary
assignment codec: resources by kind, and the generation) or Kafka consumers'
(topics and partitions); bytes that do not decode are reported, never fatal.

DescribeGroups does not return the group's generation or leader: the
generation is read from workgroup assignments (each carries it), the leader is
not known (``None``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import KafkaError

from workgroup.errors import ErrorCode, ProtocolError, WorkgroupError
from workgroup.kafka.adapter import KafkaRequest, to_result
from workgroup.kafka.messages import (
    DescribeGroups,
    DescribeGroupsResult,
    ListGroups,
    ListGroupsResult,
)
from workgroup.member.driver import CoordinatorConnection, map_kafka_error, parse_bootstrap
from workgroup.protocol.metadata import BinaryCodec
from workgroup.protocol.protocol import DEFAULT_PROTOCOL_TYPE
from workgroup.security import PLAINTEXT, Security
from workgroup.types import Key, sorted_resources

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupNotFoundError(WorkgroupError):
    """The coordinator knows no such group (DescribeGroups answers it Dead)."""


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    #: ``{kind: [keys]}`` (for consumers, ``{topic: [partitions]}``); ``None`` if
    #: the bytes could not be decoded (see ``assignment_error``).
    assignment: dict[str, list[Key]] | None
    assignment_error: str | None = None
    generation: int | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "member_id": self.member_id,
            "instance_id": self.instance_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "assignment": self.assignment,
        }
        if self.assignment_error is not None:
            out["assignment_error"] = self.assignment_error
        return out


@dataclass(frozen=True)
class GroupDescription:
    group: str
    state: str
    protocol_type: str
    protocol: str
    generation: int | None
    leader: str | None
    members: list[MemberDescription] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "state": self.state,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "generation": self.generation,
            "leader": self.leader,
            "members": [m.as_json() for m in self.members],
        }


@dataclass(frozen=True)
class GroupListing:
    group: str
    protocol_type: str
    state: str

    def as_json(self) -> dict[str, Any]:
        return {"group": self.group, "protocol_type": self.protocol_type, "state": self.state}


def decode_assignment(
    protocol_type: str, blob: bytes
) -> tuple[dict[str, list[Key]] | None, int | None, str | None]:
    """``(assignment by kind, generation, error)`` of one member's assignment bytes."""
    if not blob:
        return {}, None, None
    try:
        if protocol_type == DEFAULT_PROTOCOL_TYPE:
            data = BinaryCodec().decode_assignment(blob).value
            by_kind: dict[str, list[Key]] = {}
            for kind, key in sorted_resources(data.assigned):
                by_kind.setdefault(kind, []).append(key)
            return by_kind, data.generation, None
        if protocol_type == CONSUMER_PROTOCOL_TYPE:
            decoded = ConsumerProtocolMemberAssignment.decode(blob)
            return (
                {
                    topic: sorted(int(p) for p in partitions)
                    for topic, partitions in decoded.assignment
                },
                None,
                None,
            )
    except Exception as exc:  # any malformed bytes: reported, not fatal
        return None, None, f"undecodable {protocol_type} assignment: {type(exc).__name__}: {exc}"
    return None, None, f"protocol type {protocol_type!r}: assignment format unknown"


async def describe_group(
    bootstrap: str | Sequence[str],
    group: str,
    *,
    security: Security = PLAINTEXT,
    timeout_s: float = 10.0,
) -> GroupDescription:
    """Describe ``group`` (see the module docstring)."""
    connection = CoordinatorConnection(
        bootstrap,
        client_id="workgroup-admin",
        request_timeout_ms=int(timeout_s * 1000),
        security=security,
    )
    request = DescribeGroups((group,))
    try:
        async with asyncio.timeout(timeout_s):
            await connection.find(group)
            result = to_result(request, await connection.send(KafkaRequest(request)))
    except (KafkaError, OSError, TimeoutError) as exc:
        raise map_kafka_error(exc, f"describing group {group!r}") from exc
    finally:
        await connection.close()
    assert isinstance(result, DescribeGroupsResult)
    if len(result.groups) != 1:
        raise ProtocolError(f"DescribeGroups answered {len(result.groups)} groups, asked for 1")
    described = result.groups[0]
    if described.error is not ErrorCode.NONE:
        raise WorkgroupError(f"describing group {group!r}: {described.error.name}")
    if described.state == "Dead" and not described.members:
        raise GroupNotFoundError(f"no group {group!r} on this coordinator")
    members = []
    generations = []
    for m in described.members:
        assignment, generation, error = decode_assignment(described.protocol_type, m.assignment)
        if generation is not None and generation >= 0:
            generations.append(generation)
        members.append(
            MemberDescription(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                assignment,
                error,
                generation,
            )
        )
    return GroupDescription(
        group=described.group_id,
        state=described.state,
        protocol_type=described.protocol_type,
        protocol=described.protocol_data,
        generation=max(generations) if generations else None,
        leader=None,
        members=sorted(members, key=lambda m: m.member_id),
    )


async def list_groups(
    bootstrap: str | Sequence[str], *, security: Security = PLAINTEXT, timeout_s: float = 10.0
) -> list[GroupListing]:
    """The groups every bootstrap broker coordinates (ListGroups on each)."""
    found: dict[str, GroupListing] = {}
    for host, port in parse_bootstrap(bootstrap):
        connection = CoordinatorConnection(
            f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
            client_id="workgroup-admin",
            request_timeout_ms=int(timeout_s * 1000),
            security=security,
        )
        request = ListGroups()
        try:
            async with asyncio.timeout(timeout_s):
                response = await connection.send_to_bootstrap(KafkaRequest(request))
                result = to_result(request, response)
        except (KafkaError, OSError, TimeoutError) as exc:
            raise map_kafka_error(exc, f"listing the groups of {host}:{port}") from exc
        finally:
            await connection.close()
        assert isinstance(result, ListGroupsResult)
        if result.error is not ErrorCode.NONE:
            raise WorkgroupError(f"listing the groups of {host}:{port}: {result.error.name}")
        for g in result.groups:
            found[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.state)
    return [found[name] for name in sorted(found)]


__all__ = [
    "GroupDescription",
    "GroupListing",
    "GroupNotFoundError",
    "MemberDescription",
    "decode_assignment",
    "describe_group",
    "list_groups",
]
