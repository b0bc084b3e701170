"""``rack-aware``: resources go to members on one of their racks, balanced.

A member's rack comes from its metadata (``MemberInfo.rack``); a resource's racks
from ``AssignmentInput.resource_racks`` (absent: any rack).  The assignment
starts from the sticky one with Kafka's rack matching (KIP-881:
owned resources on the wrong rack are given up, members below their share take
resources on their own rack first), then trades resources between pairs of
members whenever the trade makes more resources local; trades never change a
member's load.

Guarantees: everything ``sticky`` guarantees for balance (max - min <= 1 with
identical subscriptions, Kafka's balance criterion: a trade never gives a
member a kind that a subscriber with two fewer takes) and validity; no
pairwise trade within that criterion could make more resources local; among
equally local assignments, owned resources stay put.
Balance wins over locality: a member on a rack without data still gets its
share.  Use it when reading a resource off-rack costs money or latency (cloud
availability zones).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from workgroup.assignors.base import Assignment, AssignmentInput
from workgroup.assignors.sticky import sticky_assign
from workgroup.collector import collector_paused
from workgroup.types import Resource


class RackAwareAssignor:
    """Balanced, rack-local assignment (see the module documentation)."""

    name = "rack-aware"
    supports_cooperative = True

    def assign(self, data: AssignmentInput) -> Assignment:
        assignment = sticky_assign(data)
        racks = {mid: m.rack for mid, m in data.members.items() if m.rack}
        if not racks or not data.resource_racks:
            return assignment
        with collector_paused():
            _trade_for_locality(data, assignment, racks)
        return assignment


def _trade_for_locality(
    data: AssignmentInput, assignment: Assignment, racks: dict[str, str]
) -> None:
    resource_racks = data.resource_racks

    def local(mid: str, resource: Resource) -> bool:
        on = resource_racks.get(resource)
        return on is None or (mid in racks and racks[mid] in on)

    members_on: dict[str, list[str]] = {}
    for mid in sorted(racks):
        members_on.setdefault(racks[mid], []).append(mid)
    kinds = {mid: m.kinds for mid, m in data.members.items()}
    # Trades keep every load, so Kafka's balance criterion (nobody holds a kind
    # that a subscriber with two fewer takes) depends only on who gets which kind.
    load = {mid: len(resources) for mid, resources in assignment.items()}
    lightest: dict[str, int] = {}
    for mid, taken in kinds.items():
        for kind in taken:
            lightest[kind] = min(lightest.get(kind, load.get(mid, 0)), load.get(mid, 0))

    def may_hold(mid: str, kind: str) -> bool:
        return kind in kinds[mid] and load.get(mid, 0) <= lightest[kind] + 1

    improved = True
    while improved:
        improved = False
        for a in sorted(assignment):
            for r in list(assignment[a]):
                if local(a, r):
                    continue
                partner = _find_trade(a, r, assignment, members_on, resource_racks, may_hold, local)
                if partner is None:
                    continue
                b, s = partner
                assignment[a][assignment[a].index(r)] = s
                assignment[b][assignment[b].index(s)] = r
                improved = True


def _find_trade(
    a: str,
    r: Resource,
    assignment: Assignment,
    members_on: dict[str, list[str]],
    resource_racks: Mapping[Resource, frozenset[str]],
    may_hold: Callable[[str, str], bool],
    local: Callable[[str, Resource], bool],
) -> tuple[str, Resource] | None:
    on = resource_racks.get(r)
    for rack in sorted(on or ()):
        for b in members_on.get(rack, ()):
            if b == a or not may_hold(b, r[0]):
                continue
            # ``b`` gives back something ``a`` may hold and that loses nothing:
            # local to ``a``, or not local to ``b`` anyway.  Prefer the former.
            fallback: Resource | None = None
            for s in assignment[b]:
                if not may_hold(a, s[0]):
                    continue
                if local(a, s):
                    return b, s
                if fallback is None and not local(b, s):
                    fallback = s
            if fallback is not None:
                return b, fallback
    return None
