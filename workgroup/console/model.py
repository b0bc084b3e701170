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
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from workgroup.assignors.standby import STANDBY_SUFFIX, is_standby_kind
from workgroup.client.describe import GroupDescription
from workgroup.client.owners import ResourceOwner, TypedKey, join_owners, typed
from workgroup.client.slots import LeaseSlot
from workgroup.runtime.loads import current_load
from workgroup.runtime.slots import encode_key

TIMELINE_LIMIT = 500


@dataclass
class _SlotSeen:
    token: int
    checkpoint: str | None
    since: float
    #: Seen as it is at the console's first read: its age is a lower bound.
    at_start: bool


@dataclass
class _GroupMemory:
    #: ``(kind, typed key) -> member id``.
    owners: dict[tuple[str, TypedKey], str] = field(default_factory=dict)
    members: dict[str, str] = field(default_factory=dict)  # member id -> name
    generation: int | None = None
    slots: dict[TypedKey, _SlotSeen] = field(default_factory=dict)
    #: ``(kind, typed key, member) -> (first seen warming, seen at the group's first read)``.
    warming: dict[tuple[str, TypedKey, str], tuple[float, bool]] = field(default_factory=dict)


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
        members_out = []
        owners: dict[tuple[str, TypedKey], str] = {}
        names: dict[str, str] = {}
        resources: list[dict[str, Any]] = []
        slots = {typed(s.key): s for s in read.slots if s.key is not None}
        ages = self._ages(memory, slots, now, first)
        warming_by: dict[tuple[str, TypedKey], tuple[str, bool]] = {}
        for m in d.members if d is not None else []:
            ready = m.ready
            for kind, keys in m.warming.items():
                for key in keys:
                    warming_by[kind, typed(key)] = (
                        m.instance_id or m.member_id,
                        key in ready.get(kind, ()),
                    )
        for m in d.members if d is not None else []:
            names[m.member_id] = m.instance_id or m.member_id
        joined = read.resources if read.resources is not None else join_owners(d, read.slots)
        owns: dict[str, int] = {}
        for owned in joined:
            if owned.kind is not None and owned.owner is not None:
                owners[owned.kind, typed(owned.key)] = owned.owner.member_id
                owns[owned.owner.member_id] = owns.get(owned.owner.member_id, 0) + 1
            resources.append(self._resource(owned, names, ages))
        for m in d.members if d is not None else []:
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
                    "load": current_load(read.group, m.assignment, meta, read.loads),
                    "capacity": 1.0 if meta is None else meta.capacity,
                    "owns": owns.get(m.member_id, 0),
                    "status": m.status,
                    "warming": sum(len(keys) for keys in m.warming.values()),
                    "ready": sum(len(keys) for keys in m.ready.values()),
                    "assignment_error": m.assignment_error,
                }
            )
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
        elif owners != memory.owners or set(names) != set(memory.members):
            self._timeline.append(self._rebalance(read.group, memory, owners, names, d, now))
        memory.owners, memory.members = owners, names
        memory.generation = None if d is None else d.generation
        warming_seen: dict[tuple[str, TypedKey, str], tuple[float, bool]] = {}
        for (warm_kind, warm_key), (warmer, _) in warming_by.items():
            seen = (warm_kind, warm_key, warmer)
            warming_seen[seen] = memory.warming.get(seen, (now, first))
        memory.warming = warming_seen
        for r in resources:
            r["warming_by"], r["warming_ready"] = None, False
            r["warming_for_s"], r["warming_at_least"] = None, False
        if warming_by:  # planned moves under way: name each warm-up on its resource
            for r in resources:
                if r["kind"] is None:
                    continue
                kind = r["kind"] if r["role"] == "active" else r["kind"] + STANDBY_SUFFIX
                encoded = typed(r["key"])
                found = warming_by.get((kind, encoded))
                if found is not None:
                    by, is_ready = found
                    since, at_least = warming_seen[kind, encoded, by]
                    r["warming_by"], r["warming_ready"] = by, is_ready
                    r["warming_for_s"], r["warming_at_least"] = now - since, at_least
        return {
            "group": read.group,
            "state": "Empty" if d is None else d.state,
            "protocol_type": None if d is None else d.protocol_type,
            "protocol": None if d is None else d.protocol,
            "generation": None if d is None else d.generation,
            "members": members_out,
            "resources": resources,
            "unowned": sum(1 for r in resources if r["owner"] is None),
            "error": read.error,
        }

    def _ages(
        self, memory: _GroupMemory, slots: dict[TypedKey, LeaseSlot], now: float, first: bool
    ) -> dict[TypedKey, tuple[float, bool]]:
        """Rule 2: ``typed key -> (age in seconds, whether it is a lower bound)``."""
        out = {}
        for encoded, slot in slots.items():
            seen = memory.slots.get(encoded)
            if seen is None or (seen.token, seen.checkpoint) != (slot.token, slot.checkpoint):
                # In the group's first reading a slot may be any age: at least this old.
                seen = _SlotSeen(slot.token, slot.checkpoint, now, seen is None and first)
                memory.slots[encoded] = seen
            out[encoded] = (now - seen.since, seen.at_start)
        for encoded in set(memory.slots) - set(slots):
            del memory.slots[encoded]
        return out

    def _resource(
        self, r: ResourceOwner, names: dict[str, str], ages: dict[TypedKey, tuple[float, bool]]
    ) -> dict[str, Any]:
        role, shown_kind = _role(r.kind)
        age: float | None
        age, at_least = ages.get(typed(r.key), (None, False))
        owner = None if r.owner is None else r.owner.member_id
        return {
            "kind": shown_kind,
            "key": r.key,
            "role": role,
            "owner": owner,
            "owner_name": None if owner is None else names.get(owner, owner),
            "releasing": [names.get(m.member_id, m.member_id) for m in r.releasing],
            "token": r.token,
            "token_pending": r.token_pending,
            "checkpoint": r.checkpoint,
            "checkpoint_age_s": age,
            "age_at_least": at_least,
        }

    def _rebalance(
        self,
        group: str,
        memory: _GroupMemory,
        owners: dict[tuple[str, TypedKey], str],
        names: dict[str, str],
        d: GroupDescription | None,
        now: float,
    ) -> dict[str, Any]:
        everyone = {**memory.members, **names}
        moved = []
        changed = [
            w for w in set(owners) | set(memory.owners) if memory.owners.get(w) != owners.get(w)
        ]
        for where in sorted(changed, key=lambda w: (w[0], encode_key(w[1][1]))):
            before, after = memory.owners.get(where), owners.get(where)
            if before != after:
                moved.append(
                    {
                        "kind": where[0],
                        "key": where[1][1],
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


@functools.cache
def _role(kind: str | None) -> tuple[str, str | None]:
    """Rule 5: a kind's role and the kind it is shown as."""
    if kind is None:
        return "active", None
    if is_standby_kind(kind):
        return "standby", kind.removesuffix(STANDBY_SUFFIX)
    return "active", kind


__all__ = ["TIMELINE_LIMIT", "ConsoleModel", "GroupRead"]
