"""A keyspace's state kept in its group's slots: read before joining, committed
before a slice's handler uses a token the slots do not prove yet.

The slots and their contents are :mod:`workgroup.runtime.keyspace_slots`'s.

Rules:

1. **Read before joining** (:meth:`KeyspaceState.read`): the process reads the
   token and epoch slots, then the map's chunk slots, and hands the state to
   its member (:meth:`~workgroup.member.driver.GroupMember.start`), whose
   rounds start above it when it leads.  What cannot be read is dropped with
   one logged line (``keyspace.state_unreadable``); the token and epoch
   offsets always can.
2. **No token before it is kept** (:meth:`KeyspaceState.cover`): a slice's
   handler starts only once the slots hold a highest token at or above the
   slice's, so a full restart at any moment finds every token a handler could
   have written with.  The member commits its map itself (every member of the
   round holds the same map or part of it, so which one commits first does
   not matter: a part commits the map's highest token and epoch only,
   :mod:`~workgroup.runtime.keyspace_slots` rule 2b), as
   one OffsetCommit, under the generation whose assignment handed it the map
   (:attr:`~workgroup.member.keyspace.MemberKeyspace.taken_in`) and only while
   that is the member's generation: the coordinator's fence refuses it once
   the group moved on, so the slots never go back to an older map.  One
   commit at a time per process; a refused one is retried every
   :data:`RETRY_S` while the slice's lease is held.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

from workgroup.client.slots import fetch_topics
from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.errors import CoordinatorError, ErrorCode, WorkgroupError
from workgroup.kafka.messages import CommitPartition, CommitTopic, FetchedGroup
from workgroup.keyspaces.persisted import PersistedKeyspace
from workgroup.keyspaces.slices import SliceMap
from workgroup.log import get_logger
from workgroup.member.driver import GroupMember, member_keyspace
from workgroup.runtime.keyspace_slots import (
    chunk_key,
    encode_persisted,
    epoch_key,
    part_token_key,
    read_persisted,
    token_key,
)
from workgroup.runtime.legacy import GroupOffsets
from workgroup.runtime.slots import Slot, slot_of
from workgroup.runtime.topics import LeaseTopics
from workgroup.types import Key

log = get_logger(__name__)

#: How long a refused commit of the state waits before the next try (rule 2).
RETRY_S = 0.2


class KeyspaceState:
    """The kept state of keyspace ``name`` in group ``group_id`` (see the module docstring)."""

    def __init__(
        self,
        group_id: str,
        name: str,
        member: GroupMember,
        topics: LeaseTopics,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.group_id = group_id
        self.name = name
        self._member = member
        self._topics = topics
        self._clock = clock
        #: The commit under way (rule 2: one at a time).
        self._committing: asyncio.Task[None] | None = None

    def slot(self, key: Key) -> Slot:
        return slot_of(self.group_id, key)

    async def read(self, offsets: GroupOffsets) -> PersistedKeyspace:
        """Rule 1: the state the slots hold."""
        head = [
            self.slot(token_key(self.name)),
            self.slot(epoch_key(self.name)),
            self.slot(part_token_key(self.name)),
        ]
        await self._topics.ensure(slot.topic for slot in head)
        first = _by_slot(await offsets.fetch(fetch_topics(head)), self.group_id)
        token, epoch = first.get(head[0], (-1, None)), first.get(head[1], (-1, None))
        part_token = first.get(head[2], (-1, None))[0]
        found = read_persisted(self.name, token, epoch[0], part_token=part_token)
        if found.chunks and found.error is None:
            chunks = [self.slot(chunk_key(self.name, i)) for i in range(found.chunks)]
            await self._topics.ensure(slot.topic for slot in chunks)
            read = _by_slot(await offsets.fetch(fetch_topics(chunks)), self.group_id)
            texts = [read.get(slot, (-1, None))[1] for slot in chunks]
            found = read_persisted(self.name, token, epoch[0], texts, part_token)
        if found.error is not None:
            log.error("keyspace.state_unreadable", group=self.group_id, error=found.error)
        state = found.state
        log.info(
            "keyspace.state_read",
            group=self.group_id,
            keyspace=self.name,
            max_token=state.max_token,
            epoch=state.epoch,
            slices=None if state.map is None else len(state.map),
        )
        return state

    async def cover(self, token: int, held: _Held) -> bool:
        """Rule 2: once the kept state proves ``token``, true; false if the lease
        (``held``) ends first."""
        view = member_keyspace(self._member)
        if view is None:
            return True
        while True:
            kept = view.persisted
            if kept is not None and kept.max_token >= token:
                return True
            if not held.held:
                return False
            if self._committing is None or self._committing.done():
                self._committing = asyncio.create_task(self._commit())
            await asyncio.shield(self._committing)
            kept = view.persisted
            if kept is not None and kept.max_token >= token:
                return True
            if not held.held:
                return False
            await self._clock.sleep(RETRY_S)

    async def _commit(self) -> None:
        """One commit of the member's map, if it may (rule 2); never raises."""
        member, view = self._member, member_keyspace(self._member)
        smap = view.map if view is not None else None
        if view is None or smap is None:
            return
        commit = encode_persisted(smap)
        slots = {key: self.slot(key) for key in commit.slots}
        try:
            await self._topics.ensure(slot.topic for slot in slots.values())
        except WorkgroupError as exc:
            log.warning("keyspace.state_not_kept", group=self.group_id, error=str(exc))
            return
        if view.map is not smap or view.taken_in != member.generation:
            return  # a newer round under way: its map is the one to commit
        # No await between the check above and the commit: the member commits
        # under the generation that handed it this map.
        try:
            result = await member.commit_offsets(
                [
                    CommitTopic(slots[key].topic, (CommitPartition(slots[key].partition, *value),))
                    for key, value in commit.slots.items()
                ]
            )
        except WorkgroupError as exc:  # the connection lost, the member closed
            log.info("keyspace.state_refused", group=self.group_id, error=str(exc))
            return
        errors = {p.error for t in result.topics for p in t.partitions}
        errors.discard(ErrorCode.NONE)
        if errors:
            log.info(
                "keyspace.state_refused",
                group=self.group_id,
                epoch=smap.epoch,
                errors=sorted(e.name for e in errors),
            )
            return
        kept = view.persisted
        if kept is None or not kept.covers(smap):
            if isinstance(smap, SliceMap):
                whole = smap if commit.map_kept else None
            else:  # a part keeps no map: the one kept before stays the fallback
                whole = None if kept is None else kept.map
            view.persisted = PersistedKeyspace(smap.max_token, smap.epoch, whole)
        if not commit.map_kept and isinstance(smap, SliceMap):
            log.warning(
                "keyspace.map_not_kept",
                group=self.group_id,
                slices=len(smap),
                why="the map is too large for its slots: a full restart keeps its tokens only",
            )


class _Held(Protocol):
    """What :meth:`KeyspaceState.cover` asks of a lease."""

    @property
    def held(self) -> bool: ...


def _by_slot(group: FetchedGroup, group_id: str) -> Mapping[Slot, tuple[int, str | None]]:
    """``slot -> (offset, metadata)`` of an OffsetFetch answer; a one-line
    :class:`CoordinatorError` for an error."""
    if group.error is not ErrorCode.NONE:
        raise CoordinatorError(
            group.error, f"reading the keyspace state of {group_id!r}: {group.error.name}"
        )
    out: dict[Slot, tuple[int, str | None]] = {}
    for topic in group.topics:
        for p in topic.partitions:
            if p.error is not ErrorCode.NONE:
                raise CoordinatorError(
                    p.error, f"reading the keyspace state of {group_id!r}: {p.error.name}"
                )
            out[Slot(topic.name, p.partition)] = (p.offset, p.metadata)
    return out


__all__ = ["RETRY_S", "KeyspaceState"]
