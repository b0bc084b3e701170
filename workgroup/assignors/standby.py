"""Standby holders on top of any exclusive assignor (Kafka Streams' standby tasks).

Every resource ``(kind, key)`` of the catalog has a twin ``(kind + ".standby",
key)`` (:func:`standby_kind`).  The base assignor places the resources: one
active holder each.  Then each resource gets ``min(standbys, subscribers - 1)``
standby holders, all different from its active holder and from each other.

Rules:

1. **Promotion.** A resource whose active holder left (no member in the group
   reports it), or hands it over (it no longer takes the kind: it drains or
   leaves), goes to one of its standby holders: before the base assignor
   runs, the standby holder that reported its standby ready
   (``MemberInfo.ready``: it warmed up), then with the fewest claims, then by
   member id, is given it as a claim (the old holder's claim dropped), so a
   sticky base keeps it there unless balance forbids it.  With no standby
   holder ready, any standby holder is picked, as before.
2. **Sticky standbys.** A standby holder keeps its standbys while it holds fewer
   than ``ceil(resources * standbys / eligible members)`` of them and is not the
   resource's active holder; the rest go to the eligible members that hold the
   fewest standbys of the same active holder (so that a departed member's
   resources are promoted on many members, not all on one), then with the fewest
   resources (active and standby), then by member id.
3. Deterministic: the same input gives the same output.

Members subscribe to both kinds (``kind`` and ``kind.standby``); members that
subscribe to ``kind`` only never hold standbys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from workgroup.assignors.base import Assignment, AssignmentInput, Assignor, MemberInfo
from workgroup.errors import ConfigError
from workgroup.types import Resource, resource_sort_key

STANDBY_SUFFIX = ".standby"


def standby_kind(kind: str) -> str:
    return kind + STANDBY_SUFFIX


def is_standby_kind(kind: str) -> bool:
    return kind.endswith(STANDBY_SUFFIX)


def active_kind(kind: str) -> str:
    return kind[: -len(STANDBY_SUFFIX)] if is_standby_kind(kind) else kind


class StandbyAssignor:
    """``standbys`` standby holders per resource on top of ``base``."""

    supports_cooperative: bool
    #: A resource's standby twin has several holders.
    exclusive = False

    def __init__(self, base: Assignor, standbys: int) -> None:
        if isinstance(standbys, bool) or not isinstance(standbys, int) or standbys < 0:
            raise ConfigError(f"standbys must be an integer >= 0, got {standbys!r}")
        self.base = base
        self.standbys = standbys
        self.name = f"{base.name}+standby{standbys}"
        self.supports_cooperative = base.supports_cooperative

    def assign(self, data: AssignmentInput) -> Assignment:
        active_kinds = {k for k in data.resources if not is_standby_kind(k)}
        members = sorted(data.members)
        active_owner: dict[Resource, str] = {}
        standby_claims = claimed_standbys(data)
        for mid in members:
            for kind, key in data.members[mid].owned:
                if not is_standby_kind(kind) and kind in active_kinds:
                    active_owner.setdefault((kind, key), mid)
        promoted: dict[str, list[Resource]] = {}
        handed_over: set[Resource] = set()
        claimed = Counter(active_owner.values())
        for resource in sorted(standby_claims, key=resource_sort_key):
            owner = active_owner.get(resource)
            if owner is not None and resource[0] in data.members[owner].kinds:
                continue  # its holder keeps it
            holders = [m for m in standby_claims[resource] if resource[0] in data.members[m].kinds]
            if holders:  # rule 1: a ready standby holder first, then the fewest claims
                twin = (standby_kind(resource[0]), resource[1])
                pick = min(
                    holders,
                    key=lambda m: (twin not in data.members[m].ready, claimed[m], m),
                )
                claimed[pick] += 1
                promoted.setdefault(pick, []).append(resource)
                if owner is not None:
                    handed_over.add(resource)
        base_members: dict[str, MemberInfo] = {}
        for mid in members:
            info = data.members[mid]
            owned = [
                r for r in info.owned if r[0] in active_kinds and r not in handed_over
            ] + promoted.get(mid, [])
            base_members[mid] = replace(info, kinds=info.kinds & active_kinds, owned=tuple(owned))
        base_input = AssignmentInput(
            resources={k: v for k, v in data.resources.items() if k in active_kinds},
            members=base_members,
            resource_racks=data.resource_racks,
            resource_attributes=data.resource_attributes,
        )
        active = self.base.assign(base_input)
        result: Assignment = {mid: list(active.get(mid, [])) for mid in members}
        if self.standbys:
            add_standbys(data, active_kinds, result, standby_claims, self.standbys)
        return result


def claimed_standbys(data: AssignmentInput) -> dict[Resource, list[str]]:
    """``resource -> the members that report holding its standby twin``, by member id."""
    claims: dict[Resource, list[str]] = {}
    for mid in sorted(data.members):
        for kind, key in data.members[mid].owned:
            if is_standby_kind(kind):
                claims.setdefault((active_kind(kind), key), []).append(mid)
    return claims


def add_standbys(
    data: AssignmentInput,
    active_kinds: set[str],
    result: Assignment,
    standby_claims: Mapping[Resource, list[str]],
    standbys: int,
) -> None:
    """Rule 2: add to ``result`` (every resource of ``active_kinds`` in
    ``data.resources`` placed, or not) the standby twins, ``standbys`` holders
    per resource (at most eligible members - 1), none of them its active holder;
    ``standby_claims``: :func:`claimed_standbys`.  Members subscribing to both
    kinds are eligible."""
    owner = {r: mid for mid, rs in result.items() for r in rs}
    load = Counter({mid: len(rs) for mid, rs in result.items()})
    standby_load: Counter[str] = Counter()
    #: (active holder, standby holder) -> resources they share: spread them so
    #: that a departed member's resources are promoted on many members.
    paired: Counter[tuple[str | None, str]] = Counter()
    for kind in sorted(active_kinds):
        twin = standby_kind(kind)
        eligible = sorted(
            m for m, info in data.members.items() if kind in info.kinds and twin in info.kinds
        )
        if not eligible:
            continue
        keys = data.resources[kind]
        wanted = min(standbys, max(len(eligible) - 1, 0))
        if not wanted:
            continue
        # Rule 2: ceil(resources * standbys / eligible members) per member.
        cap = -(-len(keys) * wanted // len(eligible))
        for key in sorted(keys, key=lambda k: resource_sort_key((kind, k))):
            resource = (kind, key)
            active_holder = owner.get(resource)
            chosen: list[str] = []
            for mid in standby_claims.get(resource, []):
                if (
                    len(chosen) < wanted
                    and mid != active_holder
                    and mid in eligible
                    and standby_load[mid] < cap
                ):
                    chosen.append(mid)
                    standby_load[mid] += 1
            while len(chosen) < wanted:
                candidates = [m for m in eligible if m != active_holder and m not in chosen]
                if not candidates:
                    break
                # Spread pairs apart, but never at the cost of balance: only
                # candidates within one of the least loaded are considered.
                least = min(load[m] for m in candidates)
                near = [m for m in candidates if load[m] <= least + 1]
                pick = min(near, key=lambda m: (paired[active_holder, m], load[m], m))
                chosen.append(pick)
                standby_load[pick] += 1
            for mid in chosen:
                load[mid] += 1
                paired[active_holder, mid] += 1
                result[mid].append((twin, key))


__all__ = [
    "STANDBY_SUFFIX",
    "StandbyAssignor",
    "active_kind",
    "add_standbys",
    "claimed_standbys",
    "is_standby_kind",
    "standby_kind",
]
