"""Building blocks shared by the assignors: member ordering, resource ordering,
ownership claims and rack information.

Everything here is deterministic: results depend on the *contents* of an
:class:`~workgroup.assignors.base.AssignmentInput`, never on the insertion order
of its dictionaries (kinds are taken in name order, members in id order).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter

from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.types import Key, Resource


def static_first_key(member: MemberInfo) -> tuple[int, str, str]:
    """Kafka's member order (KIP-345): static members first, by instance id; then
    dynamic members by member id.  Static members keep their place across restarts
    even though the coordinator hands them a new member id."""
    if member.instance_id is not None:
        return (0, member.instance_id, member.member_id)
    return (1, member.member_id, "")


def sorted_kinds(data: AssignmentInput) -> list[str]:
    """Kinds with at least one key, in name order (Kafka sorts topics by name)."""
    return sorted(kind for kind, keys in data.resources.items() if len(keys) > 0)


def resources_of(kind: str, keys: Sequence[Key]) -> list[Resource]:
    """``[(kind, key), ...]`` built at C speed."""
    return list(zip(repeat(kind), keys, strict=False))


def all_resources(data: AssignmentInput, kinds: Iterable[str]) -> list[Resource]:
    """Every resource of ``kinds``, kind by kind, keys in their given order."""
    out: list[Resource] = []
    for kind in kinds:
        out.extend(_kind_resources(kind, data.resources[kind]))
    return out


#: ``(kind, keys) -> [(kind, key), ...]`` for recently seen catalogs.  A leader
#: assigns the same catalog again at every rebalance; reusing the tuples saves
#: allocating (and later garbage-collecting) one object per resource each time.
_RESOURCE_CACHE: OrderedDict[tuple[str, object], list[Resource]] = OrderedDict()
_RESOURCE_CACHE_LIMIT = 4_000_000
_resource_cache_size = 0


def _kind_resources(kind: str, keys: Sequence[Key]) -> list[Resource]:
    global _resource_cache_size
    signature: object = keys if isinstance(keys, range) else tuple(keys)
    cache_key = (kind, signature)
    cached = _RESOURCE_CACHE.get(cache_key)
    if cached is not None:
        _RESOURCE_CACHE.move_to_end(cache_key)
        return cached
    made = list(zip(repeat(kind), keys, strict=False))
    _RESOURCE_CACHE[cache_key] = made
    _resource_cache_size += len(made)
    while _resource_cache_size > _RESOURCE_CACHE_LIMIT and len(_RESOURCE_CACHE) > 1:
        _, evicted = _RESOURCE_CACHE.popitem(last=False)
        _resource_cache_size -= len(evicted)
    return made


@dataclass(slots=True)
class Claims:
    """Who may keep what, after settling conflicting ownership claims."""

    #: ``member id -> resources it owned and may keep`` (in the order it reported them).
    owned: dict[str, list[Resource]]
    #: Resources claimed by two or more members of the same, highest generation:
    #: nobody keeps them (all claimants must give them up first).
    contested: set[Resource] = field(default_factory=set)


def settle_claims(
    members: Sequence[MemberInfo],
    is_valid: Mapping[Resource, object] | None = None,
    subscribed_only: bool = True,
) -> Claims:
    """Settle ownership claims the way Kafka's sticky assignors do.

    A claim on a resource is honoured when its member reports the strictly highest
    generation among all members claiming that resource; claims from older
    generations lose (the member was fenced or missed a rebalance).  When two or
    more members claim a resource in the same highest generation the resource is
    *contested* and nobody keeps it.  Claims on resources that do not exist
    (``is_valid`` is a mapping whose keys are the existing resources) or, with
    ``subscribed_only``, whose kind the member no longer subscribes to are dropped.
    """
    # Fast path: nobody claims anything twice, so nothing needs settling.
    first_claim: dict[Resource, str] = {}
    total = 0
    for member in members:
        first_claim.update(zip(member.owned, repeat(member.member_id), strict=False))
        total += len(member.owned)
    owned: dict[str, list[Resource]] = {}
    contested: set[Resource] = set()
    if len(first_claim) == total:
        for member in members:
            owned[member.member_id] = list(member.owned)
    else:
        best: dict[Resource, tuple[int, list[str]]] = {}
        for member in members:
            generation = member.generation
            for resource in dict.fromkeys(member.owned):
                current = best.get(resource)
                if current is None or generation > current[0]:
                    best[resource] = (generation, [member.member_id])
                elif generation == current[0]:
                    current[1].append(member.member_id)
        for member in members:
            mine: list[Resource] = []
            for resource in dict.fromkeys(member.owned):
                winners = best[resource][1]
                if len(winners) > 1:
                    contested.add(resource)
                elif winners[0] == member.member_id:
                    mine.append(resource)
            owned[member.member_id] = mine
    all_valid = is_valid is None or first_claim.keys() <= is_valid.keys()
    for member in members:
        mine = owned[member.member_id]
        if not mine:
            continue
        if not all_valid:
            assert is_valid is not None
            mine = [r for r in mine if r in is_valid]
        if subscribed_only and not member.kinds.issuperset(map(itemgetter(0), mine)):
            kinds = member.kinds
            mine = [r for r in mine if r[0] in kinds]
        owned[member.member_id] = mine
    return Claims(owned=owned, contested=contested)


@dataclass(frozen=True, slots=True)
class RackInfo:
    """Rack matching as Kafka's rack-aware assignors decide it (KIP-881).

    Rack matching is used when some member has a rack, those racks meet the
    racks of the resources, and not every resource is on every rack (otherwise
    every member matches every resource and racks add nothing).  A resource with
    no entry in ``resource_racks`` is available on any rack.
    """

    #: ``member id -> rack``; empty when rack matching is off.
    member_racks: dict[str, str]
    resource_racks: Mapping[Resource, frozenset[str]]
    #: Members on each rack (all members with a rack, whether or not matching is on).
    members_by_rack: dict[str, int]

    @property
    def enabled(self) -> bool:
        return bool(self.member_racks)

    @staticmethod
    def build(data: AssignmentInput, member_ids: Iterable[str] | None = None) -> RackInfo:
        ids = data.members.keys() if member_ids is None else member_ids
        racks = {mid: data.members[mid].rack for mid in ids}
        member_racks = {mid: rack for mid, rack in racks.items() if rack}
        by_rack: dict[str, int] = {}
        for rack in member_racks.values():
            by_rack[rack] = by_rack.get(rack, 0) + 1
        resource_racks = data.resource_racks
        if not use_rack_matching(set(by_rack), resource_racks):
            return RackInfo({}, resource_racks, by_rack)
        return RackInfo(member_racks, resource_racks, by_rack)

    def mismatch(self, member_id: str, resource: Resource) -> bool:
        """True when the member has a rack and the resource is not on it."""
        rack = self.member_racks.get(member_id)
        if rack is None:
            return False
        racks = self.resource_racks.get(resource)
        return racks is not None and rack not in racks

    def matches(self, member_id: str, resource: Resource) -> bool:
        """True when the resource has racks and the member sits on one of them."""
        racks = self.resource_racks.get(resource)
        rack = self.member_racks.get(member_id)
        return bool(racks) and rack is not None and rack in racks  # type: ignore[operator]

    def members_on_racks_of(self, resource: Resource) -> int:
        """How many members could read the resource locally (fewest first is fairest)."""
        racks = self.resource_racks.get(resource)
        if racks is None:
            return sum(self.members_by_rack.values())
        return sum(self.members_by_rack.get(rack, 0) for rack in racks)


def use_rack_matching(
    member_racks: set[str], resource_racks: Mapping[Resource, frozenset[str]]
) -> bool:
    if not member_racks or not resource_racks:
        return False
    every_rack: set[str] = set()
    for racks in resource_racks.values():
        every_rack.update(racks)
    if member_racks.isdisjoint(every_rack):
        return False
    return any(racks != every_rack for racks in resource_racks.values())


def empty_assignment(data: AssignmentInput) -> Assignment:
    return {mid: [] for mid in sorted(data.members)}


def subscribers_by_kind(data: AssignmentInput, kinds: Iterable[str]) -> dict[str, list[str]]:
    """``kind -> ids of the members subscribing to it`` (in id order)."""
    out: dict[str, list[str]] = {kind: [] for kind in kinds}
    for mid in sorted(data.members):
        for kind in data.members[mid].kinds:
            if kind in out:
                out[kind].append(mid)
    return out
