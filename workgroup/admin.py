"""What an operator asks a coordinator: describe, list, delete a group, reset a checkpoint.

Works against the embedded coordinator, Tansu and any Kafka cluster (the
requests of the classic protocol).  Each call opens one connection of the
client layer (:mod:`workgroup.client`) and closes it; readers that poll keep a
:class:`~workgroup.client.connection.ClientConnection` and a
:class:`~workgroup.client.reader.GroupReader` instead.  The description
(:mod:`workgroup.client.describe`) and the lease slots
(:mod:`workgroup.client.slots`) are decoded there, and named here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from workgroup.assignors.standby import active_kind
from workgroup.client.connection import ClientConnection
from workgroup.client.describe import (
    CONSUMER_PROTOCOL_TYPE,
    GroupDescription,
    GroupNotFoundError,
    MemberDescription,
    decode_assignment,
    decode_warming,
)
from workgroup.client.keyspaces import UnknownKeyspaceError, newest_maps
from workgroup.client.reader import describe, read_loads, read_slots
from workgroup.client.slice_slots import (
    UnknownSliceError,
    find_slice,
    kept_keyspaces,
    keyspace_map,
)
from workgroup.client.slots import LeaseSlot
from workgroup.errors import ConfigError, ErrorCode, WorkgroupError
from workgroup.kafka.messages import (
    CommitPartition,
    CommitTopic,
    DeleteGroups,
    DeleteGroupsResult,
    GroupRequest,
    GroupResult,
    ListGroups,
    ListGroupsResult,
    OffsetCommit,
    OffsetCommitResult,
)
from workgroup.runtime.slots import (
    NO_TOKEN,
    Slot,
    check_value,
    same_key,
    slot_header,
    slot_of,
)
from workgroup.security import PLAINTEXT, Security
from workgroup.types import Key


class GroupNotEmptyError(WorkgroupError):
    """The group has members: deleting it or resetting a checkpoint is refused."""

    exit_code = 3


class UnknownResourceError(ConfigError):
    """A reset names a kind the group does not serve, or a key that has no slot."""


@dataclass(frozen=True)
class GroupListing:
    group: str
    protocol_type: str
    state: str

    def as_json(self) -> dict[str, Any]:
        return {"group": self.group, "protocol_type": self.protocol_type, "state": self.state}


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
    async with ClientConnection(bootstrap, security=security, timeout_s=timeout_s) as connection:
        return await connection.request(group, request, what=what)


async def describe_group(
    bootstrap: str | Sequence[str],
    group: str,
    *,
    security: Security = PLAINTEXT,
    timeout_s: float = 10.0,
) -> GroupDescription:
    """Describe ``group`` (:mod:`workgroup.client.describe`)."""
    async with ClientConnection(bootstrap, security=security, timeout_s=timeout_s) as connection:
        return await describe(connection, group)


async def list_groups(
    bootstrap: str | Sequence[str], *, security: Security = PLAINTEXT, timeout_s: float = 10.0
) -> list[GroupListing]:
    """The groups every bootstrap broker coordinates (ListGroups on each)."""
    connection = ClientConnection(bootstrap, security=security, timeout_s=timeout_s)
    return await list_groups_on(connection)


async def list_groups_on(connection: ClientConnection) -> list[GroupListing]:
    """:func:`list_groups` through ``connection``'s settings."""
    found: dict[str, GroupListing] = {}
    for host, port in connection.hosts():
        request = ListGroups()
        result = await connection.request_bootstrap(
            host, port, request, what=f"listing the groups of {host}:{port}"
        )
        assert isinstance(result, ListGroupsResult)
        if result.error is not ErrorCode.NONE:
            raise WorkgroupError(f"listing the groups of {host}:{port}: {result.error.name}")
        for g in result.groups:
            found[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.state)
    return [found[name] for name in sorted(found)]


async def read_lease_slots(
    bootstrap: str | Sequence[str],
    group: str,
    *,
    security: Security = PLAINTEXT,
    timeout_s: float = 10.0,
) -> list[LeaseSlot]:
    """Every lease slot ``group`` has committed (OffsetFetch of all its offsets),
    sorted by key.  They outlive the group's members: an empty group keeps them."""
    async with ClientConnection(bootstrap, security=security, timeout_s=timeout_s) as connection:
        return await read_slots(connection, group)


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
    async with ClientConnection(bootstrap, security=security, timeout_s=timeout_s) as connection:
        return await read_loads(connection, group)


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
    key: Key | None,
    value: str | None,
    *,
    kind: str | None = None,
    force: bool = False,
    create: bool = False,
    slice_of: Key | None = None,
    security: Security = PLAINTEXT,
    timeout_s: float = 10.0,
) -> LeaseSlot:
    """Set ``key``'s checkpoint to ``value`` (``None``: clear it); the slot as it
    was before.

    In a keyspace's group (``kind`` a keyspace, or the group's only one) ``key``
    is a slice id, or ``key`` is ``None`` and ``slice_of`` a key of the
    keyspace: the slice holding it.  Either resolves to the slice's slot in the
    keyspace's pool through the newest map (:mod:`workgroup.client.slice_slots`);
    an unknown keyspace or slice is refused with one line (exit status 2).

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
    if value is not None and key is not None:
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
    slots = await read_lease_slots(bootstrap, group, security=security, timeout_s=timeout_s)
    target = _slice_target(group, kind, key, slice_of, described, slots)
    found: LeaseSlot | None
    if target is not None:
        slice_id, slot = target
        key = slice_id
        if value is not None:
            check_value(value, key)
        # The pool slot, whichever slice its header names (an earlier one: the
        # slot is handed on, its token kept, its checkpoint not this slice's).
        found = next((s for s in slots if s.topic == slot.topic), None)
        if found is not None and found.key != slice_id:
            found = replace(found, key=slice_id, checkpoint=None)
    else:
        if key is None:
            raise UnknownResourceError("name the resource's key (--key)")
        slot = slot_of(group, key)
        found = next((s for s in slots if s.key is not None and same_key(s.key, key)), None)
    if found is None and not create:
        raise UnknownResourceError(
            f"key {key!r} has no slot in group {group!r} (no holder ever took it): pass "
            "--create to make one"
        )
    was = found if found is not None else LeaseSlot(slot.topic, key, NO_TOKEN, None)
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


def _slice_target(
    group: str,
    kind: str | None,
    key: Key | None,
    slice_of: Key | None,
    described: GroupDescription | None,
    slots: Sequence[LeaseSlot],
) -> tuple[int, Slot] | None:
    """The slice a reset names and its pool slot; ``None``: not a keyspace's
    slice (``kind`` is no keyspace, or the group has none)."""
    carried, _ = newest_maps(described)
    kept = kept_keyspaces(slots)
    names = {*carried, *kept}
    if kind is not None:
        keyspace: str | None = active_kind(kind) if active_kind(kind) in names else None
    else:
        keyspace = next(iter(names)) if len(names) == 1 else None
    if keyspace is None:
        if slice_of is None:
            return None
        if kind is not None:
            raise UnknownKeyspaceError(
                f"group {group!r} has no keyspace {kind!r} "
                f"(its keyspaces: {', '.join(sorted(names)) or 'none'})"
            )
        raise UnknownKeyspaceError(
            f"group {group!r} has {len(names)} keyspaces ({', '.join(sorted(names)) or 'none'}): "
            "name one with --kind"
        )
    smap = keyspace_map(group, keyspace, carried, kept)
    if slice_of is not None:
        if key is not None:
            raise UnknownResourceError("name a slice by --key or by --slice-of, not both")
        piece, slot = find_slice(group, smap, key=slice_of)
    else:
        if type(key) is not int:
            raise UnknownSliceError(
                f"keyspace {keyspace!r} of group {group!r} names its slices by int ids, "
                f"not {key!r}: pass --slice-of to name the slice holding a key"
            )
        piece, slot = find_slice(group, smap, slice_id=key)
    return piece.id, slot


__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
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
