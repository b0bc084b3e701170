"""A group as every outside reader sees it: :class:`GroupReader` and its :class:`GroupSnapshot`.

Rules:

1. A snapshot is the group's description (DescribeGroups, :mod:`.describe`),
   its lease slots (one batched OffsetFetch, :mod:`.slots`) and who owns each
   resource (:mod:`.owners`, the one rule).  The CLI's ``describe``, the
   console, :class:`~workgroup.directory.Directory` and ``whois`` all show it.
2. Incremental: every :meth:`GroupReader.read` describes the group (one
   request).  The first read fetches every slot.  After that slots are read
   only when the group's generation or members changed, and then only the slots
   of the resources whose owner changed, again on every read while their new
   owners' tokens are pending (``settle_s`` after the change), then once every
   ``settle_s`` while any still is (a handler that takes long to start commits
   its token late: it is seen then, not never).  The same holds for a resource
   owned with no token yet (its first owner's handler is starting; the group
   may have been read between the assignment and the token), for
   ``FIRST_TOKEN_WAIT_S`` after the change: a group that takes no leases has
   none to wait for.  ``full_every_s``
   (the console's checkpoint ages) re-reads every slot that often, and no more
   often than keeps full reads within ``full_share`` of the time (a big group's
   full read takes seconds of the coordinator's time).  These times are read
   from ``clock=`` (a :class:`~workgroup.clock.Clock`, the system's by default).
3. Members' current loads (:mod:`workgroup.runtime.loads`, another group's
   offsets) are read when asked (``loads=True``) and the group has members.
4. Keyspaces (:mod:`.keyspaces`): the newest slice map of each keyspace the
   members carry, read again only when the generation or members changed (a
   map changes only with a round), each distinct map decoded once.
5. A group the coordinator does not know is read as no description (``None``);
   its slots may still be there.  Slots that cannot be read leave the last ones
   in place and say why (``slots_error``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from workgroup.client.connection import ClientConnection
from workgroup.client.describe import GroupDescription, GroupNotFoundError, decode_description
from workgroup.client.keyspaces import (
    SliceHolder,
    UnknownKeyspaceError,
    newest_maps,
    slice_holders,
)
from workgroup.client.owners import (
    Memory,
    ResourceOwner,
    TypedKey,
    join_and_remember,
    typed,
)
from workgroup.client.slots import LeaseSlot, decode_slots, fetch_request
from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.collector import collector_paused
from workgroup.errors import ErrorCode, WorkgroupError
from workgroup.kafka.messages import (
    DescribeGroups,
    DescribeGroupsResult,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
)
from workgroup.keyspaces.slices import SliceMap
from workgroup.runtime.keyspace_slots import slice_slot
from workgroup.runtime.loads import CommittedLoads
from workgroup.runtime.slots import Slot, decode_metadata, slot_of
from workgroup.types import Key

DEFAULT_SETTLE_S = 5.0
#: How long after a change an owned resource without a token is read again for
#: its first token (rule 2); a group that takes no leases costs nothing after.
FIRST_TOKEN_WAIT_S = 120.0


async def describe(connection: ClientConnection, group: str) -> GroupDescription:
    """DescribeGroups of ``group``; :class:`GroupNotFoundError` if unknown."""
    result = await connection.request(
        group, DescribeGroups((group,)), what=f"describing group {group!r}"
    )
    assert isinstance(result, DescribeGroupsResult)
    with collector_paused():  # a big group's assignments: 100,000 keys
        return decode_description(result, group)


async def read_slots(
    connection: ClientConnection,
    group: str,
    keys: Iterable[Key] | None = None,
    *,
    in_order: bool = True,
    keyspaces: Mapping[str, SliceMap] | None = None,
) -> list[LeaseSlot]:
    """``group``'s committed lease slots (of ``keys`` only, if given), by key
    (``in_order`` false: as the coordinator answered them).  ``keyspaces``: the
    group's maps, where a slice id's slot is the slice's slot in the pool
    (:func:`~workgroup.runtime.keyspace_slots.slice_slot`)."""
    slots = None if keys is None else {_slot_for(group, keys, keyspaces)(key) for key in keys}
    if slots is not None and not slots:
        return []
    result = await connection.request(
        group, fetch_request(group, slots), what=f"reading the lease slots of group {group!r}"
    )
    assert isinstance(result, OffsetFetchResult)
    with collector_paused():  # a big group's 100,000 slots
        return decode_slots(result, group, in_order=in_order)


def _slot_for(
    group: str, keys: Iterable[Key], keyspaces: Mapping[str, SliceMap] | None
) -> Callable[[Key], Slot]:
    """Where each of ``keys`` has its slot: a slice's pool slot, else the key's own."""
    if not keyspaces:
        return lambda key: slot_of(group, key)
    pooled: dict[Key, Slot] = {}
    for smap in keyspaces.values():
        by_id = smap.by_id()
        for key in keys:
            piece = by_id.get(key) if type(key) is int else None
            if piece is not None:
                pooled[key] = slice_slot(group, smap, piece)
    return lambda key: pooled.get(key) or slot_of(group, key)


async def read_loads(connection: ClientConnection, group: str) -> CommittedLoads:
    """The loads ``group``'s members reported since they joined, by slot topic,
    with the key each slot's header names (a keyspace's pool slot names its slice)."""
    from workgroup.runtime.loads import decode_load, load_group

    companion = load_group(group)
    result = await connection.request(
        companion,
        OffsetFetch(groups=(OffsetFetchGroup(companion, None),)),
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
    loads: dict[str, float] = {}
    named: dict[str, Key] = {}
    for topic in fetched.topics:
        for p in topic.partitions:
            if p.error is not ErrorCode.NONE or p.offset < 0:
                continue
            loads[topic.name] = decode_load(p.offset)
            try:
                key = decode_metadata(p.metadata).key
            except ValueError:
                continue  # not a slot header: the load stands, naming nothing
            if key is not None:
                named[topic.name] = key
    return CommittedLoads(loads, named)


@dataclass(frozen=True)
class GroupSnapshot:
    """One reading of a group (see the module's rules)."""

    group: str
    #: ``None``: the coordinator does not know the group (no members).
    description: GroupDescription | None
    slots: list[LeaseSlot]
    #: Every resource with its owner, owned ones first (:mod:`.owners`).
    resources: list[ResourceOwner]
    loads: Mapping[str, float] = field(default_factory=dict)
    slots_error: str | None = None
    #: Whether the generation or the members changed since the previous reading.
    changed: bool = False
    #: The newest slice map of each keyspace the members carry (rule 4), by name.
    keyspaces: Mapping[str, SliceMap] = field(default_factory=dict)
    _index: dict[tuple[str, TypedKey], ResourceOwner] = field(
        default_factory=dict, repr=False, compare=False
    )

    @property
    def generation(self) -> int | None:
        return None if self.description is None else self.description.generation

    def resource(self, kind: str, key: Key) -> ResourceOwner | None:
        """``kind``/``key`` as this reading shows it (``None``: no assignment names it)."""
        if not self._index and self.resources:  # built on first use: most readers never ask
            self._index.update(
                ((r.kind, typed(r.key)), r) for r in self.resources if r.kind is not None
            )
        return self._index.get((kind, typed(key)))

    def keyspace(self, name: str) -> SliceMap:
        """The newest map of keyspace ``name``; :class:`UnknownKeyspaceError` if
        no member carries one."""
        smap = self.keyspaces.get(name)
        if smap is None:
            known = ", ".join(sorted(self.keyspaces)) or "none"
            raise UnknownKeyspaceError(
                f"group {self.group!r} carries no map of keyspace {name!r} (keyspaces: {known})"
            )
        return smap

    def slices(self, name: str) -> list[SliceHolder]:
        """Every slice of keyspace ``name`` in hash order, with its holder, token
        and load (:func:`~workgroup.client.keyspaces.slice_holders`)."""
        return slice_holders(self.group, self.keyspace(name), self.resource, self.loads)


def _by_key(slots: list[LeaseSlot]) -> dict[Key, LeaseSlot]:
    """The slots by the key each names; of two naming one key (a header naming
    another key's slot), the one of the later topic, as in key order."""
    by_key: dict[Key, LeaseSlot] = {}
    for slot in slots:
        key = slot.key
        if key is None:
            continue
        seen = by_key.get(key)
        if seen is None or seen.topic <= slot.topic:
            by_key[key] = slot
    return by_key


def _in_key_order(keys: Iterable[Key]) -> list[Key]:
    """Int keys in order, then str keys in order (no key function per key)."""
    ints: list[int] = []
    strs: list[str] = []
    for key in keys:
        if isinstance(key, str):
            strs.append(key)
        else:
            ints.append(key)
    ints.sort()
    strs.sort()
    return [*ints, *strs]


def _shape(description: GroupDescription | None) -> object:
    """What a change is seen by: the generation and each member's id and generation."""
    if description is None:
        return None
    return (description.generation, tuple((m.member_id, m.generation) for m in description.members))


class GroupReader:
    """Reads one group incrementally over a shared :class:`ClientConnection`."""

    def __init__(
        self,
        connection: ClientConnection,
        group: str,
        *,
        loads: bool = False,
        settle_s: float = DEFAULT_SETTLE_S,
        full_every_s: float | None = None,
        full_share: float = 0.05,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.connection = connection
        self.group = group
        self._loads = loads
        self._settle_s = settle_s
        self._full_every_s = full_every_s
        self._full_share = full_share
        self._full_took = 0.0
        self._clock = clock
        self._last: GroupSnapshot | None = None
        self._shape: object = ()
        self._slots: dict[Key, LeaseSlot] = {}
        self._full_at: float | None = None
        self._changed_at = 0.0
        #: When pending slots were last read after the settling time (rule 2).
        self._pending_read_at = 0.0
        self._pending: set[Key] = set()
        #: Owned resources with no token yet (rule 2: their first token).
        self._unstarted: set[Key] = set()
        self._memory: Memory | None = None
        #: The slice maps the last reading read, by the bytes that carried them.
        self._maps_read: dict[bytes, SliceMap] = {}
        self._keyspaces: dict[str, SliceMap] = {}
        #: ``self._slots`` in key order (``None``: to sort again), and where each
        #: key is in it (a few slots read again replace theirs in a copy).
        self._sorted_slots: list[LeaseSlot] | None = None
        self._slot_at: dict[Key, int] = {}
        #: Slots fetched by the last read (what rule 2 keeps low).
        self.slots_fetched: int | None = None

    @property
    def last(self) -> GroupSnapshot | None:
        return self._last

    async def read(self) -> GroupSnapshot:
        """The group now (rules 1-4)."""
        try:
            description: GroupDescription | None = await describe(self.connection, self.group)
        except GroupNotFoundError:
            description = None
        now = self._clock.monotonic()
        shape = _shape(description)
        changed = shape != self._shape
        if changed:
            self._changed_at = now
        if changed or self._last is None:
            # Before the slots: a slice's slot is in its keyspace's pool.
            self._keyspaces, self._maps_read = newest_maps(description, self._maps_read)
        slots_error = None
        slots_read = True
        try:
            wanted = self._wanted(now, changed, description)
            if wanted is None:
                # In the reader's own key order below: not sorted twice.
                fetched = await read_slots(self.connection, self.group, in_order=False)
                self._slots = _by_key(fetched)
                self._sorted_slots = None
                self._full_at = now
                self._full_took = self._clock.monotonic() - now
                self.slots_fetched = len(fetched)
            else:
                slots_read = bool(wanted)
                fetched = await read_slots(
                    self.connection,
                    self.group,
                    wanted,
                    in_order=False,
                    keyspaces=self._keyspaces,
                )
                found = _by_key(fetched)
                self._update_slots(wanted, found)
                self.slots_fetched = len(wanted)
        except WorkgroupError as exc:
            slots_error = str(exc)
            slots_read = False
        last = self._last
        if last is not None and not changed and not slots_read:
            # Rule 2's common case: the same members and generation, no slot read
            # again: who owns what is as last read (a big group's join is seconds).
            resources = last.resources
        else:
            with collector_paused():  # a big group's join: 100,000 resources, no cycles
                joined = join_and_remember(description, self._slots.values(), before=self._memory)
            resources, self._memory, self._pending, self._unstarted = joined
        if self._sorted_slots is None:
            order = _in_key_order(self._slots)
            self._sorted_slots = [self._slots[k] for k in order]
            self._slot_at = {k: at for at, k in enumerate(order)}
        loads: dict[str, float] = {}
        if self._loads and description is not None and description.members:
            try:
                loads = await read_loads(self.connection, self.group)
            except WorkgroupError:
                loads = {}  # the loads of the last join are shown instead
        self._shape = shape
        snapshot = GroupSnapshot(
            self.group,
            description,
            self._sorted_slots,
            resources,
            loads,
            slots_error,
            changed,
            self._keyspaces,
        )
        self._last = snapshot
        return snapshot

    def _update_slots(self, wanted: set[Key], found: dict[Key, LeaseSlot]) -> None:
        """The slots of ``wanted`` as read again (``found``; a key not in it has no
        slot now).  Slots that only changed are replaced in a copy of the sorted
        list (the last snapshot keeps its own); a slot come or gone sorts again."""
        if not wanted:
            return
        replaced = []
        for key in wanted:
            slot = found.get(key)
            if slot is None:
                if self._slots.pop(key, None) is not None:
                    self._sorted_slots = None
            else:
                if key not in self._slots:
                    self._sorted_slots = None
                self._slots[key] = slot
                replaced.append(key)
        if self._sorted_slots is not None:
            sorted_slots = list(self._sorted_slots)
            for key in replaced:
                sorted_slots[self._slot_at[key]] = self._slots[key]
            self._sorted_slots = sorted_slots

    def _wanted(
        self, now: float, changed: bool, description: GroupDescription | None
    ) -> set[Key] | None:
        """Rule 2: ``None`` to read every slot, else the resources' keys to read."""
        if self._full_at is None:
            return None
        if self._full_every_s is not None:
            every = max(self._full_every_s, self._full_took / self._full_share)
            if now - self._full_at >= every:
                return None
        keys: set[Key] = set()
        if changed and self._memory is not None:
            # Who held each resource, as remembered (a resource whose token is still
            # pending is remembered with its last holder: its slot is read again).
            previous = self._memory
            for m in description.members if description is not None else ():
                member_id = m.member_id
                for kind, member_keys in (m.assignment or {}).items():
                    seen_of_kind = previous.get(kind, {})
                    for key in member_keys:
                        seen = seen_of_kind.get(key)
                        if seen is None or seen[0] != member_id:
                            keys.add(key)
        since_change = now - self._changed_at
        settling = since_change <= self._settle_s
        starting = self._unstarted if since_change <= FIRST_TOKEN_WAIT_S else ()
        if (self._pending or starting) and (
            settling or now - self._pending_read_at >= self._settle_s
        ):
            if not settling:
                self._pending_read_at = now
            keys.update(self._pending)
            keys.update(starting)
        return keys


__all__ = [
    "DEFAULT_SETTLE_S",
    "GroupReader",
    "GroupSnapshot",
    "describe",
    "read_loads",
    "read_slots",
]
