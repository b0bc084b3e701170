"""``weighted``: load proportional to each member's capacity, sticky.

A member's capacity (``MemberInfo.capacity``, from its metadata; > 0) sets its
share: with identical subscriptions member *m* gets ``total * capacity_m /
sum(capacities)`` resources, rounded by largest remainder (ties: member id), so
shares sum exactly to the total.  Members keep what they own up to their share
(claims settled by generation as in ``sticky``); the rest goes, resource by
resource, to the subscriber whose load after taking it is the smallest fraction
of its capacity.  With different subscriptions members keep what they own and
each other resource goes, greedily (kinds with the fewest subscribers first), to
the subscriber with the lowest load relative to its capacity; that is close to
proportional but not guaranteed optimal.

Guarantees: valid; with identical subscriptions every member's load equals its
rounded share exactly (so it never differs from ``total * capacity / sum`` by a
full resource); only resources above a member's share, or of departed members,
move.  Use it for heterogeneous workers (a big machine next to small ones).
"""

from __future__ import annotations

import heapq
from fractions import Fraction

from workgroup.assignors._common import (
    all_resources,
    empty_assignment,
    settle_claims,
    sorted_kinds,
    subscribers_by_kind,
)
from workgroup.assignors.base import Assignment, AssignmentInput
from workgroup.errors import ConfigError
from workgroup.types import Resource


def proportional_shares(total: int, capacities: dict[str, float]) -> dict[str, int]:
    """``total`` split proportionally to ``capacities`` by largest remainder."""
    weights = {mid: Fraction(c) for mid, c in capacities.items()}
    whole = sum(weights.values())
    if not weights or whole == 0:
        return dict.fromkeys(capacities, 0)
    exact = {mid: total * w / whole for mid, w in weights.items()}
    shares = {mid: int(x) for mid, x in exact.items()}
    left = total - sum(shares.values())
    by_remainder = sorted(exact, key=lambda mid: (-(exact[mid] - shares[mid]), mid))
    for mid in by_remainder[:left]:
        shares[mid] += 1
    return shares


class WeightedAssignor:
    """Capacity-proportional, sticky assignment (see the module documentation)."""

    name = "weighted"
    supports_cooperative = True

    def assign(self, data: AssignmentInput) -> Assignment:
        for member in data.members.values():
            if not member.capacity > 0:
                raise ConfigError(
                    f"member {member.member_id!r} has capacity {member.capacity!r}; "
                    "the weighted assignor needs a positive capacity"
                )
        assignment = empty_assignment(data)
        if not assignment:
            return assignment
        members = [data.members[mid] for mid in assignment]
        kinds = sorted_kinds(data)
        subscribers = subscribers_by_kind(data, kinds)
        kinds = [k for k in kinds if subscribers[k]]
        ordered = all_resources(data, kinds)
        claims = settle_claims(members, dict.fromkeys(ordered), subscribed_only=True)
        capacity = {m.member_id: m.capacity for m in members}
        uniform = len({m.kinds for m in members}) == 1
        if uniform:
            share = proportional_shares(len(ordered), capacity)
        else:
            share = {mid: len(ordered) for mid in capacity}  # relative load decides alone
        owner: dict[Resource, str] = {}
        for member in members:
            mid = member.member_id
            kept = claims.owned[mid][: share[mid]]
            assignment[mid].extend(kept)
            owner.update(dict.fromkeys(kept, mid))
        load = {mid: len(rs) for mid, rs in assignment.items()}
        by_kind: dict[str, list[Resource]] = {}
        for resource in ordered:
            if resource not in owner:
                by_kind.setdefault(resource[0], []).append(resource)
        # Kinds with the fewest subscribers first: they have the fewest choices.
        for kind in sorted(by_kind, key=lambda k: (len(subscribers[k]), k)):
            heap = [
                (self._priority(load[mid], share[mid], capacity[mid]), mid)
                for mid in subscribers[kind]
            ]
            heapq.heapify(heap)
            for resource in by_kind[kind]:
                _, mid = heap[0]
                assignment[mid].append(resource)
                load[mid] += 1
                heapq.heapreplace(heap, (self._priority(load[mid], share[mid], capacity[mid]), mid))
        return assignment

    @staticmethod
    def _priority(load: int, share: int, capacity: float) -> tuple[bool, Fraction]:
        # Members still below their share come first; then the lowest load after
        # one more resource, relative to capacity.
        return (load >= share, Fraction(load + 1) / Fraction(capacity))
