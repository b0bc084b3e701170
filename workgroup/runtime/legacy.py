"""Lease state of the legacy layout: refused with one line, or migrated on request.

The legacy layout kept catalog key ``i`` in partition ``i`` of
``workgroup-leases.<group>`` (:func:`~workgroup.runtime.slots.legacy_lease_topic`),
so its slots followed positions, not keys.  Today's slots follow keys
(:mod:`workgroup.runtime.slots`).

Rules:

1. Before a group's member starts, the runtime reads the legacy partitions
   ``0..len(catalog)-1`` in one OffsetFetch.  A committed offset above 0 is
   legacy state; none: nothing to do.
2. Legacy state without ``migrate_lease_layout``: one ``lease.legacy_layout``
   error line saying what was found and what to do, and
   :class:`LegacyLayoutError` (``workgroup run`` exits 2).  Nothing is changed.
3. With ``migrate_lease_layout``: legacy slot ``i`` (token and checkpoint) is
   copied to the slot of the catalog's key ``i`` *as the catalog is now*, if that
   slot is still empty, and the legacy slot is committed away (offset 0,
   metadata ``"migrated"``) so that the check passes next time; both in one
   OffsetCommit from outside the group (generation -1), which the coordinator
   accepts only while the group has no members: stop every daemon of the group
   first.  A refused commit changes nothing (:class:`LegacyLayoutError`).
4. Offset 0 marks a migrated legacy slot: the legacy layout never committed 0
   (its first token was 1), and a broker that keeps no metadata (Tansu) keeps
   the offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from workgroup.client.connection import ClientConnection
from workgroup.errors import ErrorCode, WorkgroupError
from workgroup.kafka.messages import (
    CommitPartition,
    CommitTopic,
    FetchedGroup,
    FetchTopic,
    OffsetCommit,
    OffsetCommitResult,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
)
from workgroup.log import get_logger
from workgroup.runtime.errors import LegacyLayoutError
from workgroup.runtime.slots import (
    MAX_METADATA_BYTES,
    Slot,
    legacy_lease_topic,
    slot_header,
    slot_of,
)
from workgroup.security import PLAINTEXT, Security
from workgroup.types import Key

log = get_logger(__name__)

#: The offset of a legacy slot once migrated (rule 4).
MIGRATED_OFFSET = 0
MIGRATED_METADATA = "migrated"
#: How to ask for the migration, in every message that refuses.
HOW_TO_MIGRATE = (
    "stop every daemon of the group, then start one with --migrate-lease-layout "
    "(or WORKGROUP_MIGRATE_LEASE_LAYOUT=1)"
)


class GroupOffsets(Protocol):
    """OffsetFetch and OffsetCommit of one group from outside its membership."""

    async def fetch(self, topics: Sequence[FetchTopic]) -> FetchedGroup: ...

    async def commit(self, topics: Sequence[CommitTopic]) -> OffsetCommitResult: ...


class AdminOffsets:
    """:class:`GroupOffsets` over the client layer's connection
    (:class:`~workgroup.client.connection.ClientConnection`: kept open, found
    again when the coordinator moves)."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group_id: str,
        *,
        security: Security = PLAINTEXT,
        timeout_s: float = 30.0,
        client_id: str = "workgroup-lease-layout",
    ) -> None:
        self._group_id = group_id
        self._connection = ClientConnection(
            bootstrap, security=security, timeout_s=timeout_s, client_id=client_id
        )

    async def fetch(self, topics: Sequence[FetchTopic]) -> FetchedGroup:
        request = OffsetFetch(groups=(OffsetFetchGroup(self._group_id, tuple(topics)),))
        result = await self._send(request)
        assert isinstance(result, OffsetFetchResult)
        return result.groups[0]

    async def commit(self, topics: Sequence[CommitTopic]) -> OffsetCommitResult:
        request = OffsetCommit(self._group_id, -1, "", tuple(topics))
        result = await self._send(request)
        assert isinstance(result, OffsetCommitResult)
        return result

    async def _send(self, request: OffsetFetch | OffsetCommit) -> object:
        what = f"{type(request).__name__} of group {self._group_id!r}"
        return await self._connection.request(self._group_id, request, what=what)

    async def close(self) -> None:
        await self._connection.close()


async def check_lease_layout(
    offsets: GroupOffsets, group_id: str, keys: Sequence[Key], *, migrate: bool
) -> int:
    """Refuse or migrate legacy lease state (see the module's rules); the number
    of keys whose state was copied (0 when there was none)."""
    if not keys:
        return 0
    topic = legacy_lease_topic(group_id)
    fetched = await offsets.fetch([FetchTopic(topic, tuple(range(len(keys))))])
    _raise_unless_fine(fetched.error, f"reading legacy lease slots of group {group_id!r}")
    legacy = {
        p.partition: (p.offset, p.metadata)
        for t in fetched.topics
        for p in t.partitions
        if p.error is ErrorCode.NONE and p.offset > MIGRATED_OFFSET and p.partition < len(keys)
    }
    if not legacy:
        return 0
    if not migrate:
        log.error(
            "lease.legacy_layout",
            group=group_id,
            topic=topic,
            slots=len(legacy),
            fix=HOW_TO_MIGRATE,
        )
        raise LegacyLayoutError(
            f"group {group_id!r} has lease state in the legacy layout ({len(legacy)} slot(s) "
            f"of {topic}, by catalog position): {HOW_TO_MIGRATE}"
        )
    slots = {index: slot_of(group_id, keys[index]) for index in legacy}
    current = await offsets.fetch([FetchTopic(s.topic, (s.partition,)) for s in slots.values()])
    _raise_unless_fine(current.error, f"reading lease slots of group {group_id!r}")
    taken = {
        Slot(t.name, p.partition)
        for t in current.topics
        for p in t.partitions
        if p.error is ErrorCode.NONE and p.offset >= 0
    }
    commits = [
        CommitTopic(
            topic,
            tuple(CommitPartition(i, MIGRATED_OFFSET, MIGRATED_METADATA) for i in sorted(legacy)),
        )
    ]
    copied = 0
    for index, (offset, checkpoint) in sorted(legacy.items()):
        slot = slots[index]
        if slot in taken:
            continue  # the key has state of its own already: it wins
        metadata = slot_header(keys[index]) + (checkpoint or "")
        if len(metadata.encode("utf-8")) > MAX_METADATA_BYTES:
            raise LegacyLayoutError(
                f"cannot migrate the checkpoint of key {keys[index]!r} in group {group_id!r}: "
                f"with the header naming the key it is over {MAX_METADATA_BYTES} bytes"
            )
        commits.append(
            CommitTopic(slot.topic, (CommitPartition(slot.partition, offset, metadata),))
        )
        copied += 1
    result = await offsets.commit(commits)
    errors = sorted(
        {p.error.name for t in result.topics for p in t.partitions if p.error is not ErrorCode.NONE}
    )
    if errors:
        raise LegacyLayoutError(
            f"migrating the lease state of group {group_id!r} was refused ({', '.join(errors)}): "
            "the group must have no members while it is migrated; " + HOW_TO_MIGRATE
        )
    log.info(
        "lease.layout_migrated",
        group=group_id,
        copied=copied,
        kept=len(legacy) - copied,
        topic=topic,
    )
    return copied


def _raise_unless_fine(error: ErrorCode, what: str) -> None:
    # Nothing committed, or no such topic: no legacy state.
    if error not in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        raise WorkgroupError(f"{what}: {error.name}", retriable=error.retriable)


__all__ = [
    "MIGRATED_METADATA",
    "MIGRATED_OFFSET",
    "AdminOffsets",
    "GroupOffsets",
    "check_lease_layout",
]
