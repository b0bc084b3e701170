"""DescribeGroups decoded, once for every reader (sans-I/O).

Member assignments are decoded when their protocol type is workgroup's (the
binary assignment codec: resources by kind, and the generation) or Kafka
consumers' (topics and partitions); bytes that do not decode are reported,
never fatal.

DescribeGroups does not return the group's generation or leader: the generation
is read from workgroup assignments (each carries it; the group's is the newest),
the leader is not known (``None``).

Planned moves show per workgroup member: the resources it warms up (its
assignment's ``warming``) and those of them it reported ready (its last
JoinGroup metadata), and whether it drains (``workgroup.draining``) or leaves
(``workgroup.leaving``): it takes nothing and hands its resources over.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from workgroup.errors import ErrorCode, ProtocolError, WorkgroupError
from workgroup.kafka.messages import DescribeGroupsResult
from workgroup.protocol.endpoint import ENDPOINT_TAG
from workgroup.protocol.metadata import BinaryCodec, MemberMetadata
from workgroup.protocol.process import PROCESS_TAG
from workgroup.protocol.protocol import DEFAULT_PROTOCOL_TYPE
from workgroup.types import Key, Resource

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
    #: The member's metadata for the group's protocol (its advertised endpoint).
    metadata: bytes = field(default=b"", repr=False)
    #: ``{kind: [keys]}`` it warms up for a planned move (another member owns them).
    warming: dict[str, list[Key]] = field(default_factory=dict)
    #: The ``user_data`` of its workgroup assignment (a keyspace's map, the
    #: leader's: :mod:`workgroup.client.keyspaces`).
    assignment_user_data: bytes = field(default=b"", repr=False)

    def workgroup_metadata(self) -> MemberMetadata | None:
        """The metadata as a workgroup member wrote it (``None``: none, or another
        protocol type's, or a layout this version cannot read)."""
        return self._decoded_metadata

    @cached_property
    def _decoded_metadata(self) -> MemberMetadata | None:
        if not self.metadata:
            return None
        try:
            return BinaryCodec().decode_metadata(self.metadata).value
        except WorkgroupError:
            return None

    @cached_property
    def endpoint(self) -> str | None:
        """The ``HOST:PORT`` the member advertised (``--advertise``), if any (kept:
        a reader asks it once per resource the member owns)."""
        meta = self.workgroup_metadata()
        return None if meta is None else dict(meta.tags).get(ENDPOINT_TAG)

    @property
    def process(self) -> str:
        """The process that holds the member's place now (``HOST-PID`` from its
        metadata, :mod:`workgroup.protocol.process`), else its client id: a static
        member's client id is its first process's, even after a replacement."""
        meta = self.workgroup_metadata()
        tagged = None if meta is None else dict(meta.tags).get(PROCESS_TAG)
        return tagged or self.client_id

    @property
    def ready(self) -> dict[str, list[Key]]:
        """``{kind: [keys]}`` of :attr:`warming` it reported ready (cut over next)."""
        meta = self.workgroup_metadata()
        if meta is None or not self.warming:
            return {}
        warming = {(kind, key) for kind, keys in self.warming.items() for key in keys}
        return _by_kind(r for r in meta.ready if r in warming)

    @property
    def draining(self) -> bool:
        """It drains: it stays in the group and hands everything over."""
        from workgroup.member.round_plan import DRAINING_TAG  # the leader's; loaded on use

        meta = self.workgroup_metadata()
        return meta is not None and DRAINING_TAG in dict(meta.tags)

    @property
    def leaving(self) -> bool:
        """It is closing: it hands everything over before it leaves."""
        from workgroup.member.round_plan import LEAVING_TAG  # the leader's; loaded on use

        meta = self.workgroup_metadata()
        return meta is not None and LEAVING_TAG in dict(meta.tags)

    @property
    def status(self) -> str:
        """``leaving``, ``draining``, ``warming`` (warm-ups under way) or ``member``."""
        if self.leaving:
            return "leaving"
        if self.draining:
            return "draining"
        return "warming" if self.warming else "member"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "member_id": self.member_id,
            "instance_id": self.instance_id,
            "client_id": self.client_id,
            "client_host": self.client_host,
            "process": self.process,
            "assignment": self.assignment,
            "warming": self.warming,
            "ready": self.ready,
            "draining": self.draining,
            "leaving": self.leaving,
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


def _by_kind(resources: Iterable[Resource]) -> dict[str, list[Key]]:
    """``{kind: [keys]}`` in :func:`~workgroup.types.resource_sort_key` order."""
    by_kind: dict[str, list[Key]] = {}
    for kind, key in resources:
        by_kind.setdefault(kind, []).append(key)
    for keys in by_kind.values():
        try:
            keys.sort()  # the common case, keys of one type: no function called per key
        except TypeError:  # ints and strs: ints first
            keys.sort(key=lambda key: (isinstance(key, str), key))
    return {kind: by_kind[kind] for kind in sorted(by_kind)}


def decode_warming(protocol_type: str, blob: bytes) -> dict[str, list[Key]]:
    """``{kind: [keys]}`` a workgroup assignment hands its member to warm up
    (empty for other protocol types and for bytes that do not decode)."""
    return _decode(protocol_type, blob)[3]


def decode_assignment_user_data(protocol_type: str, blob: bytes) -> bytes:
    """The ``user_data`` of a workgroup assignment (empty for other protocol types
    and for bytes that do not decode)."""
    return _decode(protocol_type, blob)[4]


def decode_assignment(
    protocol_type: str, blob: bytes
) -> tuple[dict[str, list[Key]] | None, int | None, str | None]:
    """``(assignment by kind, generation, error)`` of one member's assignment bytes."""
    return _decode(protocol_type, blob)[:3]


_Decoded = tuple[dict[str, list[Key]] | None, int | None, str | None, dict[str, list[Key]], bytes]


def _decode(protocol_type: str, blob: bytes) -> _Decoded:
    """One member's assignment bytes, decoded once: by kind, its generation, the
    error if they do not decode, what it warms up, and its ``user_data``."""
    if not blob:
        return {}, None, None, {}, b""
    try:
        if protocol_type == DEFAULT_PROTOCOL_TYPE:
            data = BinaryCodec().decode_assignment(blob).value
            assigned, warming = _by_kind(data.assigned), _by_kind(data.warming)
            return assigned, data.generation, None, warming, data.user_data
        if protocol_type == CONSUMER_PROTOCOL_TYPE:
            # aiokafka's decoder, loaded only for a consumer group.
            from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

            decoded = ConsumerProtocolMemberAssignment.decode(blob)
            topics: dict[str, list[Key]] = {
                topic: sorted(map(int, parts)) for topic, parts in decoded.assignment
            }
            return topics, None, None, {}, b""
    except Exception as exc:  # any malformed bytes: reported, not fatal
        why = f"undecodable {protocol_type} assignment: {type(exc).__name__}: {exc}"
        return None, None, why, {}, b""
    return None, None, f"protocol type {protocol_type!r}: assignment format unknown", {}, b""


def decode_description(result: DescribeGroupsResult, group: str) -> GroupDescription:
    """``group`` as a DescribeGroups answer about it describes it;
    :class:`GroupNotFoundError` for a group the coordinator does not know."""
    if len(result.groups) != 1:
        raise ProtocolError(f"DescribeGroups answered {len(result.groups)} groups, asked for 1")
    described = result.groups[0]
    if described.error is not ErrorCode.NONE:
        raise WorkgroupError(
            f"describing group {group!r}: {described.error.name}",
            retriable=described.error.retriable,
        )
    if described.state == "Dead" and not described.members:
        raise GroupNotFoundError(f"no group {group!r} on this coordinator")
    members = []
    generations = []
    for m in described.members:
        assignment, generation, error, warming, user_data = _decode(
            described.protocol_type, m.assignment
        )
        if generation is not None and generation >= 0:
            generations.append(generation)
        members.append(
            MemberDescription(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                # Kafka's client host is an InetAddress's text: "/127.0.0.1".
                m.client_host.removeprefix("/"),
                assignment,
                error,
                generation,
                m.metadata,
                warming,
                user_data,
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


__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "GroupDescription",
    "GroupNotFoundError",
    "MemberDescription",
    "decode_assignment",
    "decode_assignment_user_data",
    "decode_description",
    "decode_warming",
]
