"""What an operator asks a coordinator: describe a group, list groups.

Works against the embedded coordinator, Tansu and any Kafka cluster (the
DescribeGroups and ListGroups requests of the classic protocol).  Member
assignments are decoded when their protocol type is workgroup's (the binary
assignment codec: resources by kind, and the generation) or Kafka consumers'
(topics and partitions); bytes that do not decode are reported, never fatal.

DescribeGroups does not return the group's generation or leader: the
generation is read from workgroup assignments (each carries it), the leader is
not known (``None``).

Planned moves show per workgroup member: the resources it warms up (its
assignment's ``warming``) and those of them it reported ready (its last
JoinGroup metadata), and whether it drains (``workgroup.draining``) or leaves
(``workgroup.leaving``): it takes nothing and hands its resources over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import KafkaError

from workgroup.assignors.standby import active_kind
from workgroup.errors import ConfigError, ErrorCode, ProtocolError, WorkgroupError
from workgroup.kafka.adapter import KafkaRequest, to_result
from workgroup.kafka.messages import (
    CommitPartition,
    CommitTopic,
    DeleteGroups,
    DeleteGroupsResult,
    DescribeGroups,
    DescribeGroupsResult,
    GroupRequest,
    GroupResult,
    ListGroups,
    ListGroupsResult,
    OffsetCommit,
    OffsetCommitResult,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
)
from workgroup.member.driver import CoordinatorConnection, map_kafka_error, parse_bootstrap
from workgroup.member.leader import DRAINING_TAG, LEAVING_TAG
from workgroup.protocol.endpoint import ENDPOINT_TAG
from workgroup.protocol.metadata import BinaryCodec, MemberMetadata
from workgroup.protocol.process import PROCESS_TAG
from workgroup.protocol.protocol import DEFAULT_PROTOCOL_TYPE
from workgroup.runtime.slots import (
    LEASE_TOPIC_PREFIX,
    NO_TOKEN,
    check_value,
    decode_metadata,
    encode_key,
    same_key,
    slot_header,
    slot_of,
)
from workgroup.security import PLAINTEXT, Security
from workgroup.types import Key, Resource, sorted_resources

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupNotFoundError(WorkgroupError):
    """The coordinator knows no such group (DescribeGroups answers it Dead)."""


class GroupNotEmptyError(WorkgroupError):
    """The group has members: deleting it or resetting a checkpoint is refused."""

    exit_code = 3


class UnknownResourceError(ConfigError):
    """A reset names a kind the group does not serve, or a key that has no slot."""


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

    @property
    def endpoint(self) -> str | None:
        """The ``HOST:PORT`` the member advertised (``--advertise``), if any."""
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
        meta = self.workgroup_metadata()
        return meta is not None and DRAINING_TAG in dict(meta.tags)

    @property
    def leaving(self) -> bool:
        """It is closing: it hands everything over before it leaves."""
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


@dataclass(frozen=True)
class GroupListing:
    group: str
    protocol_type: str
    state: str

    def as_json(self) -> dict[str, Any]:
        return {"group": self.group, "protocol_type": self.protocol_type, "state": self.state}


def _by_kind(resources: Iterable[Resource]) -> dict[str, list[Key]]:
    by_kind: dict[str, list[Key]] = {}
    for kind, key in sorted_resources(resources):
        by_kind.setdefault(kind, []).append(key)
    return by_kind


def decode_warming(protocol_type: str, blob: bytes) -> dict[str, list[Key]]:
    """``{kind: [keys]}`` a workgroup assignment hands its member to warm up
    (empty for other protocol types and for bytes that do not decode)."""
    if not blob or protocol_type != DEFAULT_PROTOCOL_TYPE:
        return {}
    try:
        return _by_kind(BinaryCodec().decode_assignment(blob).value.warming)
    except Exception:  # reported by decode_assignment already
        return {}


def decode_assignment(
    protocol_type: str, blob: bytes
) -> tuple[dict[str, list[Key]] | None, int | None, str | None]:
    """``(assignment by kind, generation, error)`` of one member's assignment bytes."""
    if not blob:
        return {}, None, None
    try:
        if protocol_type == DEFAULT_PROTOCOL_TYPE:
            data = BinaryCodec().decode_assignment(blob).value
            return _by_kind(data.assigned), data.generation, None
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


async def _ask(
    bootstrap: str | Sequence[str],
    group: str,
    request: GroupRequest,
    *,
    security: Security,
    timeout_s: float,
    what: str,
) -> GroupResult:
    """One request to ``group``'s coordinator, on a connection of its own."""
    connection = CoordinatorConnection(
        bootstrap,
        client_id="workgroup-admin",
        request_timeout_ms=int(timeout_s * 1000),
        security=security,
    )
    try:
        async with asyncio.timeout(timeout_s):
            await connection.find(group)
            return to_result(request, await connection.send(KafkaRequest(request)))
    except (KafkaError, OSError, TimeoutError) as exc:
        raise map_kafka_error(exc, what) from exc
    finally:
        await connection.close()


async def describe_group(
    bootstrap: str | Sequence[str],
    group: str,
    *,
    security: Security = PLAINTEXT,
    timeout_s: float = 10.0,
) -> GroupDescription:
    """Describe ``group`` (see the module docstring)."""
    result = await _ask(
        bootstrap,
        group,
        DescribeGroups((group,)),
        security=security,
        timeout_s=timeout_s,
        what=f"describing group {group!r}",
    )
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
                # Kafka's client host is an InetAddress's text: "/127.0.0.1".
                m.client_host.removeprefix("/"),
                assignment,
                error,
                generation,
                m.metadata,
                decode_warming(described.protocol_type, m.assignment),
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


@dataclass(frozen=True)
class LeaseSlot:
    """One lease slot of a group, read back from its committed offsets.

    ``key`` is the key its header names (``None``: no header, e.g. a broker that
    keeps no commit metadata, or unreadable: see ``error``); ``token`` the
    fencing token (the committed offset); ``checkpoint`` the last checkpoint.
    """

    topic: str
    key: Key | None
    token: int
    checkpoint: str | None
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "topic": self.topic,
            "key": self.key,
            "token": self.token,
            "checkpoint": self.checkpoint,
        }
        if self.error is not None:
            out["error"] = self.error
        return out


async def read_lease_slots(
    bootstrap: str | Sequence[str],
    group: str,
    *,
    security: Security = PLAINTEXT,
    timeout_s: float = 10.0,
) -> list[LeaseSlot]:
    """Every lease slot ``group`` has committed (OffsetFetch of all its offsets),
    sorted by key.  They outlive the group's members: an empty group keeps them."""
    request = OffsetFetch(groups=(OffsetFetchGroup(group, None),))
    result = await _ask(
        bootstrap,
        group,
        request,
        security=security,
        timeout_s=timeout_s,
        what=f"reading the lease slots of group {group!r}",
    )
    assert isinstance(result, OffsetFetchResult)
    fetched = result.groups[0] if len(result.groups) == 1 else None
    if fetched is None:
        raise ProtocolError(f"OffsetFetch answered {len(result.groups)} groups, asked for 1")
    if fetched.error not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
        raise WorkgroupError(
            f"reading the lease slots of group {group!r}: {fetched.error.name}",
            retriable=fetched.error.retriable,
        )
    prefix = f"{LEASE_TOPIC_PREFIX}{group}."
    slots = []
    for topic in fetched.topics:
        if not topic.name.startswith(prefix):
            continue  # the legacy layout's topic, or a consumer's offsets
        for p in topic.partitions:
            if p.error is not ErrorCode.NONE or p.offset < 0:
                continue
            try:
                contents = decode_metadata(p.metadata)
            except ValueError as exc:
                slots.append(LeaseSlot(topic.name, None, p.offset, None, str(exc)))
                continue
            error = None
            if contents.key is not None and slot_of(group, contents.key).topic != topic.name:
                error = "its header names a key whose slot is another one"
            slots.append(LeaseSlot(topic.name, contents.key, p.offset, contents.checkpoint, error))
    return sorted(slots, key=lambda s: (s.key is None, encode_key(s.key or ""), s.topic))


async def read_current_loads(
    bootstrap: str | Sequence[str],
    group: str,
    *,
    security: Security = PLAINTEXT,
    timeout_s: float = 10.0,
) -> dict[str, float]:
    """The loads ``group``'s members reported since they joined, by lease slot
    topic (:mod:`workgroup.runtime.loads`; join them with
    :func:`~workgroup.runtime.loads.current_load`); empty when none did."""
    from workgroup.runtime.loads import decode_load, load_group

    request = OffsetFetch(groups=(OffsetFetchGroup(load_group(group), None),))
    result = await _ask(
        bootstrap,
        load_group(group),
        request,
        security=security,
        timeout_s=timeout_s,
        what=f"reading the current loads of group {group!r}",
    )
    assert isinstance(result, OffsetFetchResult)
    fetched = result.groups[0] if len(result.groups) == 1 else None
    if fetched is None or fetched.error not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
        error = "no answer" if fetched is None else fetched.error.name
        raise WorkgroupError(
            f"reading the current loads of group {group!r}: {error}",
            retriable=fetched is None or fetched.error.retriable,
        )
    return {
        topic.name: decode_load(p.offset)
        for topic in fetched.topics
        for p in topic.partitions
        if p.error is ErrorCode.NONE and p.offset >= 0
    }


async def delete_group(
    bootstrap: str | Sequence[str],
    group: str,
    *,
    security: Security = PLAINTEXT,
    timeout_s: float = 10.0,
) -> None:
    """Delete ``group`` and its committed offsets (its tokens and checkpoints),
    its drain requests (:mod:`workgroup.runtime.drains`) and its members' current
    loads (:mod:`workgroup.runtime.loads`): other groups, that a coordinator may
    refuse to delete alone, e.g. without the ACL's ``drain``.

    Coordinators delete only a group without members: :class:`GroupNotEmptyError`
    otherwise; :class:`GroupNotFoundError` for a group they do not know.
    """
    # Imported here: the drains module runs a member, which the admin tools need not.
    from workgroup.runtime.drains import drain_group
    from workgroup.runtime.loads import load_group

    result = await _ask(
        bootstrap,
        group,
        DeleteGroups((group, drain_group(group), load_group(group))),
        security=security,
        timeout_s=timeout_s,
        what=f"deleting group {group!r}",
    )
    assert isinstance(result, DeleteGroupsResult)
    errors = {g.group_id: g.error for g in result.groups}
    error = errors.get(group, ErrorCode.NONE)
    if error is ErrorCode.NONE:
        return
    if error is ErrorCode.NON_EMPTY_GROUP:
        raise GroupNotEmptyError(
            f"group {group!r} has members: stop its daemons first (a coordinator deletes "
            "only a group without members)"
        )
    if error is ErrorCode.GROUP_ID_NOT_FOUND:
        raise GroupNotFoundError(f"no group {group!r} on this coordinator")
    raise WorkgroupError(f"deleting group {group!r}: {error.name}", retriable=error.retriable)


def group_kinds(group: str, members: Iterable[MemberDescription]) -> set[str]:
    """The kinds ``group`` serves: those its members declare, else those its name
    says (the runtime names a kind's group ``APP.KIND``: every dotted suffix of
    the name is a candidate); standby kinds count as their active kind."""
    declared = {
        active_kind(kind)
        for m in members
        if (metadata := m.workgroup_metadata()) is not None
        for kind in metadata.kinds
    }
    if declared:
        return declared
    parts = group.split(".")
    return {".".join(parts[i:]) for i in range(1, len(parts))}


async def reset_checkpoint(
    bootstrap: str | Sequence[str],
    group: str,
    key: Key,
    value: str | None,
    *,
    kind: str | None = None,
    force: bool = False,
    create: bool = False,
    security: Security = PLAINTEXT,
    timeout_s: float = 10.0,
) -> LeaseSlot:
    """Set ``key``'s checkpoint to ``value`` (``None``: clear it); the slot as it
    was before.

    The token is kept: the next holder takes the next one, as after any
    hand-over.  Refused while the group has members (their holders would
    overwrite it, and a holder may be reading it): :class:`GroupNotEmptyError`,
    unless ``force``; even then a coordinator accepts a commit from outside the
    group only while it has no members, so ``force`` only skips this check (for
    members it still lists but that are gone).

    A slot is named by the group and the key alone (one group serves one kind),
    so ``kind``, when given, is only checked against :func:`group_kinds`; a key
    without a slot is refused unless ``create`` (a typo would otherwise add a
    resource owned by nobody).  Both refusals are :class:`UnknownResourceError`.
    """
    if value is not None:
        check_value(value, key)
    try:
        described = await describe_group(bootstrap, group, security=security, timeout_s=timeout_s)
    except GroupNotFoundError:
        described = None
    members = described.members if described is not None else []
    if members and not force:
        raise GroupNotEmptyError(
            f"group {group!r} has {len(members)} member(s): stop its daemons "
            "before resetting a checkpoint (or pass --force if they are gone)"
        )
    if kind is not None:
        kinds = group_kinds(group, members)
        if active_kind(kind) not in kinds:
            known = ", ".join(sorted(kinds)) or "none known: no member declares one"
            raise UnknownResourceError(
                f"group {group!r} serves no kind {kind!r} (its kinds: {known}); "
                "leave --kind out to reset the key's slot whatever the kind"
            )
    before = {
        s.key: s
        for s in await read_lease_slots(bootstrap, group, security=security, timeout_s=timeout_s)
        if s.key is not None and same_key(s.key, key)
    }
    if key not in before and not create:
        raise UnknownResourceError(
            f"key {key!r} has no slot in group {group!r} (no holder ever took it): pass "
            "--create to make one"
        )
    slot = slot_of(group, key)
    was = before.get(key, LeaseSlot(slot.topic, key, NO_TOKEN, None))
    metadata = slot_header(key) + (value or "")
    request = OffsetCommit(
        group,
        -1,
        "",
        (CommitTopic(slot.topic, (CommitPartition(slot.partition, was.token, metadata),)),),
    )
    result = await _ask(
        bootstrap,
        group,
        request,
        security=security,
        timeout_s=timeout_s,
        what=f"resetting the checkpoint of {key!r} in group {group!r}",
    )
    assert isinstance(result, OffsetCommitResult)
    errors = sorted(
        {p.error.name for t in result.topics for p in t.partitions if p.error is not ErrorCode.NONE}
    )
    if errors:
        raise GroupNotEmptyError(
            f"the coordinator refused to reset the checkpoint of {key!r} in group {group!r} "
            f"({', '.join(errors)}): a group with members accepts commits only from them"
        )
    return was


__all__ = [
    "GroupDescription",
    "GroupListing",
    "GroupNotEmptyError",
    "GroupNotFoundError",
    "LeaseSlot",
    "MemberDescription",
    "UnknownResourceError",
    "decode_assignment",
    "decode_warming",
    "delete_group",
    "describe_group",
    "group_kinds",
    "list_groups",
    "read_current_loads",
    "read_lease_slots",
    "reset_checkpoint",
]
