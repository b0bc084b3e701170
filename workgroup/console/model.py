"""What the console shows, computed from what it reads (no I/O, no clock of its own).

The server (:mod:`workgroup.console.server`) reads every group's description and
lease slots each refresh and feeds them here with the time; this module keeps
what must be remembered between refreshes and builds the JSON the page renders.

Rules:

1. A *view* is one JSON document: every group with its members (instance id,
   process, host, advertised endpoint, how many resources each owns, its load
   now (what it reports between rebalances, :mod:`workgroup.runtime.loads`,
   else what it reported when it joined) and its capacity), its resources
   (kind, key, role, owner, token, checkpoint and checkpoint age) and how many
   resources nobody owns now, plus the timeline.
2. Checkpoint age: a slot's token and checkpoint are remembered with the time
   they were first seen as they are; the age is the time since.  A slot that has
   not changed since the console started is shown as at least that old
   (``age_at_least``): a committed offset carries no time of its own.
3. Timeline, the coordinator's view: one entry per change of a group's
   generation or assignments (``rebalance``): the members that joined and left
   and each resource that moved (from, to; ``null`` for nobody).  The first view
   of a group is an ``appeared`` entry; a group no longer listed, ``gone``.
4. Timeline, the daemons' view: ownership events read from event logs
   (``--event-log``), merged by time.  The timeline keeps the newest
   :data:`TIMELINE_LIMIT` entries.
5. Role: resources of a standby kind (``KIND.standby``, see
   :mod:`workgroup.assignors.standby`) are ``standby`` of ``KIND``; every other
   resource is ``active``.
6. Planned moves: each member's ``status`` (``member``, ``warming``,
   ``draining`` or ``leaving``) and how many resources it warms up
   (``warming``) and reported ready (``ready``); each resource names the
   member warming it up for a move (``warming_by``; ``warming_ready`` once it
   reported ready), while its owner keeps it, and for how long
   (``warming_for_s``: since the console first saw it, a lower bound
   ``warming_at_least`` for a warm-up seen in the group's first reading).
7. Rows are built when read: a group's ``resources`` in the view is a
   :class:`ResourceRows` sequence that makes a resource's row when it is read
   (the page asks for one page of one group), so a refresh of a group of
   100,000 resources builds none of their rows.  Owners are compared with the
   last refresh (the timeline) only for a new reading (the client layer's
   reader gives the same resources again when nothing changed), and checkpoint
   ages only for the slots read again.
8. Keyspaces (:mod:`workgroup.client.keyspaces`): a keyspace's group shows
   each keyspace's newest map (``keyspaces``: name, epoch, highest token, how
   many slices, how many move now, the loads' total and largest) and its
   slices in hash order: hash range (hex: 64-bit numbers do not survive a
   JavaScript number), where each starts and how much of the space it holds
   (shares of 1, what the heat strip draws), its holder (``null`` while it
   moves, with the owner the map names), its token, its load and its heat (its
   load over the largest slice load, 0 to 1; ``null`` when unknown).  The
   summary stream carries the keyspaces without their slices.
"""

from __future__ import annotations

import functools
from collections import Counter, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from workgroup.assignors.standby import STANDBY_SUFFIX, is_standby_kind
from workgroup.client.describe import GroupDescription
from workgroup.client.keyspaces import SliceHolder
from workgroup.client.owners import ResourceOwner, TypedKey, join_owners, typed
from workgroup.client.slots import LeaseSlot
from workgroup.collector import collector_paused
from workgroup.keyspaces.hashing import HASH_SPACE
from workgroup.keyspaces.slices import SliceMap
from workgroup.runtime.loads import current_load
from workgroup.runtime.slots import encode_key
from workgroup.types import Key

TIMELINE_LIMIT = 500


@dataclass
class _SlotSeen:
    token: int
    checkpoint: str | None
    since: float
    #: Seen as it is at the console's first read: its age is a lower bound.
    at_start: bool
    #: The slot last read (the same object again: nothing to compare).
    slot: LeaseSlot | None = None


@dataclass
class _GroupMemory:
    #: ``kind -> key -> member id`` (by the key itself: a key is a str or an int,
    #: never a bool; a big group's 100,000 make no tuple each).
    owners: dict[str, dict[Key, str]] = field(default_factory=dict)
    members: dict[str, str] = field(default_factory=dict)  # member id -> name
    generation: int | None = None
    slots: dict[Key, _SlotSeen] = field(default_factory=dict)
    #: ``(kind, typed key, member) -> (first seen warming, seen at the group's first read)``.
    warming: dict[tuple[str, TypedKey, str], tuple[float, bool]] = field(default_factory=dict)
    #: The last reading's resources and slots (the same lists again: nothing changed).
    resources: list[ResourceOwner] | None = None
    slot_list: list[LeaseSlot] | None = None
    #: member id -> how many resources it owns, and how many nobody owns, in ``resources``.
    owns: dict[str, int] = field(default_factory=dict)
    unowned: int = 0


@dataclass(frozen=True)
class GroupRead:
    """One refresh's reading of one group (``description`` ``None``: no members)."""

    group: str
    description: GroupDescription | None
    slots: list[LeaseSlot]
    error: str | None = None
    #: The loads members reported since they joined, by lease slot topic
    #: (:mod:`workgroup.runtime.loads`).
    loads: Mapping[str, float] = field(default_factory=dict)
    #: Who owns what, by the client layer's rule (:mod:`workgroup.client.owners`,
    #: as a :class:`~workgroup.client.reader.GroupReader` read it); ``None``: joined
    #: here from ``description`` and ``slots`` as a first reading.
    resources: list[ResourceOwner] | None = None
    #: Each keyspace's newest map and its slices' holders (rule 8), by name.
    keyspaces: Mapping[str, tuple[SliceMap, list[SliceHolder]]] = field(default_factory=dict)


class ConsoleModel:
    """Remembers what the console saw and builds its views (see the rules)."""

    def __init__(self, coordinator: str, started: float) -> None:
        self.coordinator = coordinator
        self.started = started
        self._groups: dict[str, _GroupMemory] = {}
        self._timeline: deque[dict[str, Any]] = deque(maxlen=TIMELINE_LIMIT)
        self._view: dict[str, Any] = {"groups": [], "timeline": []}

    @property
    def view(self) -> dict[str, Any]:
        return self._view

    def add_events(self, events: list[dict[str, Any]]) -> None:
        """Ownership events from daemons' event logs (rule 4)."""
        for e in events:
            self._timeline.append(
                {
                    "time": e.get("time"),
                    "source": "event-log",
                    "group": e.get("group"),
                    "what": e.get("event"),
                    "member": e.get("member"),
                    "kind": e.get("kind"),
                    "key": e.get("key"),
                    "token": e.get("token"),
                }
            )
        self._sort_timeline()

    def update(self, reads: list[GroupRead], now: float) -> dict[str, Any]:
        """Take one refresh's readings; the new view."""
        listed = {r.group for r in reads}
        for gone in sorted(set(self._groups) - listed):
            del self._groups[gone]
            self._timeline.append(
                {"time": now, "source": "coordinator", "group": gone, "what": "gone"}
            )
        with collector_paused():  # a big group's owners: 100,000 entries, no cycles
            groups = [self._group_view(read, now) for read in sorted(reads, key=lambda r: r.group)]
        self._sort_timeline()
        self._view = {
            "coordinator": self.coordinator,
            "time": now,
            "started": self.started,
            "groups": groups,
            "timeline": list(self._timeline)[::-1],
        }
        return self._view

    def _sort_timeline(self) -> None:
        ordered = sorted(self._timeline, key=lambda e: e.get("time") or 0.0)
        self._timeline.clear()
        self._timeline.extend(ordered)

    def _group_view(self, read: GroupRead, now: float) -> dict[str, Any]:
        first = read.group not in self._groups
        memory = self._groups.setdefault(read.group, _GroupMemory())
        d = read.description
        members = d.members if d is not None else []
        names = {m.member_id: m.instance_id or m.member_id for m in members}
        self._ages(memory, read.slots, now, first)
        warming_by: dict[tuple[str, TypedKey], tuple[str, bool]] = {}
        for m in members:
            ready = m.ready
            for kind, keys in m.warming.items():
                for key in keys:
                    warming_by[kind, typed(key)] = (
                        m.instance_id or m.member_id,
                        key in ready.get(kind, ()),
                    )
        joined = read.resources if read.resources is not None else join_owners(d, read.slots)
        if joined is not memory.resources:  # rule 7: a new reading
            owners, owns, memory.unowned = _owners_of(joined)
            memory.resources, memory.owns = joined, owns
        else:
            owners = memory.owners
        if first:
            self._timeline.append(
                {
                    "time": now,
                    "source": "coordinator",
                    "group": read.group,
                    "what": "appeared",
                    "generation": None if d is None else d.generation,
                    "members": sorted(names.values()),
                }
            )
        elif (owners is not memory.owners and owners != memory.owners) or (
            set(names) != set(memory.members)
        ):
            self._timeline.append(self._rebalance(read.group, memory, owners, names, d, now))
        memory.owners, memory.members = owners, names
        memory.generation = None if d is None else d.generation
        warming_seen: dict[tuple[str, TypedKey, str], tuple[float, bool]] = {}
        for (warm_kind, warm_key), (warmer, _) in warming_by.items():
            seen = (warm_kind, warm_key, warmer)
            warming_seen[seen] = memory.warming.get(seen, (now, first))
        memory.warming = warming_seen
        maps = {name: smap for name, (smap, _) in read.keyspaces.items()}
        members_out = []
        for m in members:
            meta = m.workgroup_metadata()
            members_out.append(
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "name": names[m.member_id],
                    "client_id": m.client_id,
                    "host": m.client_host,
                    "process": m.process,
                    "endpoint": m.endpoint,
                    # What it reports now, else what it reported as it joined.
                    "load": current_load(read.group, m.assignment, meta, read.loads, maps),
                    "capacity": 1.0 if meta is None else meta.capacity,
                    "owns": memory.owns.get(m.member_id, 0),
                    "status": m.status,
                    "warming": sum(len(keys) for keys in m.warming.values()),
                    "ready": sum(len(keys) for keys in m.ready.values()),
                    "assignment_error": m.assignment_error,
                }
            )
        return {
            "group": read.group,
            "state": "Empty" if d is None else d.state,
            "protocol_type": None if d is None else d.protocol_type,
            "protocol": None if d is None else d.protocol,
            "generation": None if d is None else d.generation,
            "members": members_out,
            "resources": ResourceRows(
                joined, names, dict(memory.slots), warming_by, warming_seen, now
            ),
            "resource_count": len(joined),
            "unowned": memory.unowned,
            "keyspaces": [
                keyspace_view(smap, holders, names)
                for smap, holders in (read.keyspaces[name] for name in sorted(read.keyspaces))
            ],
            "error": read.error,
        }

    def _ages(self, memory: _GroupMemory, slots: list[LeaseSlot], now: float, first: bool) -> None:
        """Rule 2: when each slot was first seen as it is (rule 7: a slot read
        again is compared; the same slots as last time are not looked at)."""
        if slots is memory.slot_list:
            return
        memory.slot_list = slots
        remembered = memory.slots
        present = 0
        for slot in slots:
            if slot.key is None:
                continue
            present += 1
            seen = remembered.get(slot.key)
            if seen is not None and seen.slot is slot:
                continue
            if seen is None or (seen.token, seen.checkpoint) != (slot.token, slot.checkpoint):
                # In the group's first reading a slot may be any age: at least this old.
                remembered[slot.key] = _SlotSeen(
                    slot.token, slot.checkpoint, now, seen is None and first, slot
                )
            else:
                seen.slot = slot
        if present != len(remembered):  # slots gone (a slot list names each key once)
            for key in set(remembered) - {s.key for s in slots}:
                del remembered[key]

    def _rebalance(
        self,
        group: str,
        memory: _GroupMemory,
        owners: dict[str, dict[Key, str]],
        names: dict[str, str],
        d: GroupDescription | None,
        now: float,
    ) -> dict[str, Any]:
        everyone = {**memory.members, **names}
        moved = []
        changed: list[tuple[str, Key, str | None, str | None]] = []
        for kind in owners.keys() | memory.owners.keys():
            now_of, before_of = owners.get(kind, {}), memory.owners.get(kind, {})
            if now_of == before_of:
                continue
            changed += [
                (kind, k, before_of.get(k), v) for k, v in now_of.items() if before_of.get(k) != v
            ]
            changed += [(kind, k, v, None) for k, v in before_of.items() if k not in now_of]
        changed.sort(key=lambda c: (c[0], encode_key(c[1])))
        for kind, key, before, after in changed:
            moved.append(
                {
                    "kind": kind,
                    "key": key,
                    "from": None if before is None else everyone.get(before, before),
                    "to": None if after is None else everyone.get(after, after),
                }
            )
        return {
            "time": now,
            "source": "coordinator",
            "group": group,
            "what": "rebalance",
            "generation": None if d is None else d.generation,
            "joined": sorted(names[m] for m in set(names) - set(memory.members)),
            "left": sorted(memory.members[m] for m in set(memory.members) - set(names)),
            "moved": moved,
        }


class ResourceRows(Sequence[dict[str, Any]]):
    """A group's resources as the page shows them, each row made when read (rule 7).

    What a row shows is fixed when the sequence is made (the slots' ages, the
    warm-ups, the time of the refresh): a row read later is that refresh's.
    """

    def __init__(
        self,
        resources: list[ResourceOwner],
        names: dict[str, str],
        slots: dict[Key, _SlotSeen],
        warming_by: dict[tuple[str, TypedKey], tuple[str, bool]],
        warming_seen: dict[tuple[str, TypedKey, str], tuple[float, bool]],
        now: float,
    ) -> None:
        self._resources = resources
        self._names = names
        self._slots = slots
        self._warming_by = warming_by
        self._warming_seen = warming_seen
        self._now = now

    def __len__(self) -> int:
        return len(self._resources)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self._row(r) for r in self._resources[index]]
        return self._row(self._resources[index])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return map(self._row, self._resources)

    def _row(self, r: ResourceOwner) -> dict[str, Any]:
        role, shown_kind = _role(r.kind)
        tkey = (type(r.key), r.key)
        seen = self._slots.get(r.key)
        names = self._names
        owner = None if r.owner is None else r.owner.member_id
        row = {
            "kind": shown_kind,
            "key": r.key,
            "role": role,
            "owner": owner,
            "owner_name": None if owner is None else names.get(owner, owner),
            "releasing": [names.get(m.member_id, m.member_id) for m in r.releasing],
            "token": r.token,
            "token_pending": r.token_pending,
            "checkpoint": r.checkpoint,
            "checkpoint_age_s": None if seen is None else self._now - seen.since,
            "age_at_least": False if seen is None else seen.at_start,
            "warming_by": None,
            "warming_ready": False,
            "warming_for_s": None,
            "warming_at_least": False,
        }
        if r.kind is not None and self._warming_by:
            # Rule 6: a warm-up names the kind as assigned (a standby kind included).
            found = self._warming_by.get((r.kind, tkey))
            if found is not None:
                by, is_ready = found
                since, at_least = self._warming_seen[r.kind, tkey, by]
                row["warming_by"], row["warming_ready"] = by, is_ready
                row["warming_for_s"], row["warming_at_least"] = self._now - since, at_least
        return row


def keyspace_view(
    smap: SliceMap, holders: list[SliceHolder], names: Mapping[str, str]
) -> dict[str, Any]:
    """Rule 8: one keyspace's map, with its slices in hash order."""
    loads = [h.load for h in holders if h.load is not None]
    largest = max(loads, default=None)
    slices = []
    for h in holders:
        piece, holder = h.slice, h.holder
        owner = None if holder is None else holder.member_id
        slices.append(
            {
                "id": piece.id,
                "range": f"[{piece.start:#018x}, {piece.end:#018x})",
                "offset": piece.start / HASH_SPACE,
                "share": piece.width / HASH_SPACE,
                "owner": owner,
                "owner_name": None if owner is None else names.get(owner, owner),
                "map_owner": None if piece.owner is None else names.get(piece.owner, piece.owner),
                "token": piece.token,
                "load": h.load,
                "heat": None
                if h.load is None or largest is None
                else (h.load / largest if largest > 0 else 0.0),
            }
        )
    return {
        "name": smap.keyspace,
        "epoch": smap.epoch,
        "max_token": smap.max_token,
        "slice_count": len(holders),
        "moving": sum(1 for h in holders if h.holder is None),
        "total_load": round(sum(loads), 3) if loads else None,
        "max_load": largest,
        "slices": slices,
    }


def _owners_of(
    resources: list[ResourceOwner],
) -> tuple[dict[str, dict[Key, str]], dict[str, int], int]:
    """Who owns what (``kind -> key -> member id``), how many each member owns,
    and how many resources nobody owns: one pass over a reading's resources."""
    owners: dict[str, dict[Key, str]] = {}
    owns: Counter[str] = Counter()
    unowned = 0
    kind: str | None = None
    of_kind: dict[Key, str] = {}
    for r in resources:
        if r.owner is None:
            unowned += 1
            continue
        if r.kind is None:
            continue
        if r.kind != kind:
            kind = r.kind
            of_kind = owners.setdefault(kind, {})
        of_kind[r.key] = r.owner.member_id
    for of_kind in owners.values():
        owns.update(of_kind.values())
    return owners, dict(owns), unowned


@functools.cache
def _role(kind: str | None) -> tuple[str, str | None]:
    """Rule 5: a kind's role and the kind it is shown as."""
    if kind is None:
        return "active", None
    if is_standby_kind(kind):
        return "standby", kind.removesuffix(STANDBY_SUFFIX)
    return "active", kind


__all__ = ["TIMELINE_LIMIT", "ConsoleModel", "GroupRead", "ResourceRows", "keyspace_view"]
