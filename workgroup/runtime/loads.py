"""Current loads between rebalances: what ``top`` and the console show.

A member's metadata carries the loads it measured when it last joined (the
leader balances with them); they are as old as the last rebalance.  The readers
want the loads of now, and a group does not rebalance to tell them.

Rules:

1. **A companion group holds them**: ``workgroup-loads.<group>``
   (:func:`load_group`), which never has members, so a simple commit
   (generation -1, no member id) is accepted by the embedded coordinator, Kafka
   and Tansu, as for the drain requests (:mod:`workgroup.runtime.drains`).
2. **One slot per resource, in the lease slot's topic**: the resource's load is
   committed to the topic-partition of its lease slot
   (:func:`~workgroup.runtime.slots.slot_of`), in the companion group: no topic
   to create (the lease topics exist), and as many slots as resources however
   often members restart.  The load belongs to the resource: after a move, the
   new owner overwrites it.
3. **The committed offset is the load** in thousandths (:func:`encode_load`),
   so it works on Tansu, which keeps no commit metadata; the metadata names the
   key (the lease slot's header), for whoever reads it by hand.
4. **Each group runner reports its own** (:class:`LoadReporter`): every
   :data:`LOAD_REPORT_S` it reads the smoothed load of each active resource its
   member owns (``GroupMember.measured_load``) and commits, in one request, the
   loads that changed materially (:func:`changed_materially`) since it last
   wrote them; nothing when nothing did.  A failed write is logged once per
   failure streak and retried at the next report.
   **A keyspace's slices** (:mod:`workgroup.runtime.keyspaces`) write to
   their slots in the keyspace's pool, the slot each slice holds in the map
   (a slot per slice id would be a topic per slice ever born on Kafka), the
   header naming the slice: a reader takes a pool slot's load for the slice
   the map gives the slot only if the header names it (:func:`slice_load`), so
   a slot handed on to a new slice shows no load of the slice before it (on
   Tansu, which keeps no commit metadata, until the new slice's first report).
5. **Readers join them with the assignment** (:func:`current_load`): a
   member's load is the sum over the active resources it owns of the committed
   load, or of the load its metadata reported when it joined where none was
   committed (an older release).  (Tansu's DescribeGroups shows no
   assignments: there the loads are written, and readable by slot topic only.)
6. **Authorisation**: the embedded coordinator checks a commit to the
   companion group against ``commit`` on ``<group>`` and a read against
   ``describe`` (:mod:`workgroup.coordinator.acl`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from workgroup.assignors.standby import is_standby_kind
from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.coordinator.acl import LOAD_GROUP_PREFIX
from workgroup.errors import ErrorCode, WorkgroupError
from workgroup.kafka.messages import CommitPartition, CommitTopic, OffsetCommitResult
from workgroup.keyspaces.slices import Slice, SliceMap
from workgroup.log import get_logger
from workgroup.protocol.metadata import MemberMetadata
from workgroup.runtime.keyspace_slots import slice_slot
from workgroup.runtime.slots import Slot, check_group_id, slot_header, slot_of
from workgroup.types import Key, Resource

log = get_logger(__name__)

#: How often a runner reports its loads (rule 4): at most one commit per period.
LOAD_REPORT_S = 2.0
#: Committed offsets are loads in these units (rule 3).
LOAD_UNITS_PER_1 = 1000
#: A load that moved less than this fraction is not written again (rule 4).
MATERIAL_CHANGE = 0.05
#: Kafka's largest offset: a larger load is written as this.
MAX_OFFSET = 2**63 - 1


def load_group(group_id: str) -> str:
    """The companion group that holds ``group_id``'s current loads (rule 1)."""
    return LOAD_GROUP_PREFIX + check_group_id(group_id)


def encode_load(load: float) -> int:
    """``load`` (finite, >= 0) as a committed offset (rule 3)."""
    return min(round(load * LOAD_UNITS_PER_1), MAX_OFFSET)


def decode_load(offset: int) -> float:
    return offset / LOAD_UNITS_PER_1


def changed_materially(written: float | None, load: float) -> bool:
    """Whether ``load`` is worth writing over ``written`` (rule 4): nothing written
    yet, or a change of more than :data:`MATERIAL_CHANGE` of the larger one (and
    more than the offset's resolution)."""
    if written is None:
        return True
    change = abs(load - written)
    return change > MATERIAL_CHANGE * max(written, load) and change >= 1 / LOAD_UNITS_PER_1


class CommittedLoads(dict[str, float]):
    """The companion group's loads by lease slot topic, and the key each slot's
    header names (``named``; absent where the coordinator keeps no metadata)."""

    def __init__(
        self, loads: Mapping[str, float] | None = None, named: Mapping[str, Key] | None = None
    ) -> None:
        super().__init__(loads or {})
        self.named: dict[str, Key] = dict(named or {})


def slice_load(
    group_id: str, piece: Slice, smap: SliceMap, committed: Mapping[str, float]
) -> float | None:
    """The load committed for ``piece`` of ``smap`` (rule 2), ``None`` if none:
    a pool slot whose header names another slice holds that slice's load."""
    topic = slice_slot(group_id, smap, piece).topic
    load = committed.get(topic)
    if load is None or piece.slot is None:
        return load
    named = committed.named.get(topic) if isinstance(committed, CommittedLoads) else None
    return load if named is None or named == piece.id else None


def current_load(
    group_id: str,
    assignment: Mapping[str, Iterable[Key]] | None,
    metadata: MemberMetadata | None,
    committed: Mapping[str, float],
    keyspaces: Mapping[str, SliceMap] | None = None,
) -> float | None:
    """A member's load now (rule 5): ``committed`` maps lease slot topics to the
    loads of the companion group; ``keyspaces``: the maps of the group's
    keyspaces by name (a slice's load is in its pool slot); ``None`` when
    nothing is known."""
    joined: dict[Resource, float] = {}
    if metadata is not None and metadata.loads:
        joined = dict(zip(metadata.owned, metadata.loads, strict=False))
    if not committed and not joined:
        return None  # nothing reported: no slot need be named (a big group's refresh)
    total, known = 0.0, False
    for kind, keys in (assignment or {}).items():
        if is_standby_kind(kind):
            continue
        smap = keyspaces.get(kind) if keyspaces else None
        slices = smap.by_id() if smap is not None else {}
        for key in keys:
            piece = slices.get(key) if type(key) is int else None
            if smap is not None and piece is not None:
                load = slice_load(group_id, piece, smap, committed)
                if load is None:
                    load = joined.get((kind, key))
            else:
                load = committed.get(slot_of(group_id, key).topic, joined.get((kind, key)))
            if load is not None and not math.isnan(load):
                total += load
                known = True
    return round(total, 3) if known else None


class Offsets(Protocol):
    """Commits to the companion group (:class:`~workgroup.runtime.legacy.AdminOffsets`)."""

    async def commit(self, topics: Sequence[CommitTopic]) -> OffsetCommitResult: ...

    async def close(self) -> None: ...


class MeasuredMember(Protocol):
    """What the reporter reads of a member."""

    @property
    def assignment(self) -> frozenset[Resource]: ...

    def measured_load(self, resource: Resource) -> float | None: ...


class LoadReporter:
    """Commits one member's current loads to the companion group (rule 4)."""

    def __init__(
        self,
        member: MeasuredMember,
        group_id: str,
        kind: str,
        offsets: Offsets,
        *,
        interval_s: float = LOAD_REPORT_S,
        clock: Clock = SYSTEM_CLOCK,
        slot_for: Callable[[Key], Slot] | None = None,
    ) -> None:
        self._member = member
        self.group_id = check_group_id(group_id)
        #: Where a key's load goes: its lease slot (a keyspace's pool slot).
        self._slot_for = slot_for or (lambda key: slot_of(self.group_id, key))
        self._kind = kind
        self._offsets = offsets
        self._interval_s = interval_s
        self._clock = clock
        #: The loads last committed, per key.
        self._written: dict[Key, float] = {}
        self._failing = False
        #: Commits made (the cost of reporting).
        self.commits = 0

    async def follow(self) -> None:
        """Report every ``interval_s`` until cancelled."""
        while True:
            await self._clock.sleep(self._interval_s)
            await self.report()

    async def report(self) -> None:
        """Commit the loads that changed materially, if any (one request)."""
        changed: dict[Key, float] = {}
        owned = {key for kind, key in self._member.assignment if kind == self._kind}
        # A resource that left and comes back is written afresh.
        self._written = {k: v for k, v in self._written.items() if k in owned}
        for key in owned:
            load = self._member.measured_load((self._kind, key))
            if load is not None and changed_materially(self._written.get(key), load):
                changed[key] = load
        if not changed:
            return
        topics = [
            CommitTopic(
                self._slot_for(key).topic,
                (CommitPartition(0, encode_load(load), slot_header(key)),),
            )
            for key, load in changed.items()
        ]
        try:
            result = await self._offsets.commit(topics)
            errors = sorted(
                {
                    p.error.name
                    for t in result.topics
                    for p in t.partitions
                    if p.error is not ErrorCode.NONE
                }
            )
            if errors:
                raise WorkgroupError(f"the coordinator refused the loads: {', '.join(errors)}")
        except WorkgroupError as exc:
            if not self._failing:
                log.warning(
                    "load.report_failed",
                    group=self.group_id,
                    error=str(exc),
                    why="top and the console show older loads; reporting again",
                )
            self._failing = True
            return
        if self._failing:
            log.info("load.report_recovered", group=self.group_id)
        self._failing = False
        self._written.update(changed)
        self.commits += 1

    async def close(self) -> None:
        await self._offsets.close()


__all__ = [
    "LOAD_REPORT_S",
    "CommittedLoads",
    "LoadReporter",
    "changed_materially",
    "current_load",
    "decode_load",
    "encode_load",
    "load_group",
    "slice_load",
]
