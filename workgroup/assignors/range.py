"""``range``: contiguous key ranges per kind (Kafka's ``RangeAssignor``).

For each kind, the members subscribing to it are ordered (static members first
by instance id, then dynamic members by member id: KIP-345) and the kind's keys,
in order, are cut into consecutive ranges; the first ``keys % members`` members
get one key more.  Kinds with the same number of keys and the same subscribers
therefore line up ("co-partitioning"): member *i* gets the same key positions of
every such kind, which is what joins between kinds need.

With racks (KIP-881): when members have racks and resources live on a subset of
racks, each member first takes keys on its own rack, up to its share, keeping
co-partitioned kinds aligned; the rest is filled by plain ranges.  Shares never
change, so the result is as balanced as without racks.

Guarantees: valid (only subscribed kinds, one owner per resource); per kind,
member loads differ by at most one; deterministic.  Not sticky: adding a member
shifts every range, so prefer it for eager groups that need co-partitioning.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workgroup.assignors._common import (
    RackInfo,
    empty_assignment,
    resources_of,
    sorted_kinds,
    static_first_key,
)
from workgroup.assignors.base import Assignment, AssignmentInput
from workgroup.types import Resource


@dataclass(slots=True)
class _KindState:
    kind: str
    #: Subscribers in assignment order.
    members: list[str]
    #: Unassigned resources, in key order (dict as an ordered set).
    unassigned: dict[Resource, None]
    per_member: int
    with_extra: int
    needs_racks: bool
    assigned: dict[str, int] = field(default_factory=dict)

    def max_assignable(self, member_id: str) -> int:
        extra = 1 if self.with_extra > 0 else 0
        return max(0, self.per_member + extra - self.assigned.get(member_id, 0))

    def on_assigned(self, member_id: str, resources: list[Resource]) -> None:
        before = self.assigned.get(member_id, 0)
        after = before + len(resources)
        self.assigned[member_id] = after
        if before <= self.per_member < after:
            self.with_extra -= 1
        for resource in resources:
            del self.unassigned[resource]


class RangeAssignor:
    """Kafka's range assignment (see the module documentation)."""

    name = "range"
    supports_cooperative = False

    def assign(self, data: AssignmentInput) -> Assignment:
        assignment = empty_assignment(data)
        order = sorted(data.members.values(), key=static_first_key)
        racks = RackInfo.build(data)
        states: list[_KindState] = []
        for kind in sorted_kinds(data):
            members = [m.member_id for m in order if kind in m.kinds]
            if not members:
                continue
            resources = resources_of(kind, data.resources[kind])
            per_member, with_extra = divmod(len(resources), len(members))
            needs_racks = racks.enabled and _kind_needs_racks(racks, members, resources)
            states.append(
                _KindState(
                    kind, members, dict.fromkeys(resources), per_member, with_extra, needs_racks
                )
            )
        rack_aware = any(s.needs_racks for s in states)
        if not rack_aware:
            # Plain ranges: member i takes a contiguous slice of each kind.
            for state in states:
                keys = list(state.unassigned)
                start = 0
                for i, member_id in enumerate(state.members):
                    length = state.per_member + (1 if i < state.with_extra else 0)
                    if length:
                        assignment[member_id].extend(keys[start : start + length])
                    start += length
            return assignment
        self._assign_with_rack_matching(states, racks, assignment)
        for state in states:
            _assign_ranges(state, assignment, None)
        positions = {
            kind: {key: i for i, key in enumerate(data.resources[kind])} for kind in data.resources
        }
        for resources in assignment.values():
            resources.sort(key=lambda r: (r[0], positions[r[0]][r[1]]))
        return assignment

    @staticmethod
    def _assign_with_rack_matching(
        states: list[_KindState], racks: RackInfo, assignment: Assignment
    ) -> None:
        groups: dict[tuple[tuple[str, ...], int], list[_KindState]] = {}
        for state in states:
            size = len(state.unassigned)
            groups.setdefault((tuple(state.members), size), []).append(state)
        for (members, size), group in groups.items():
            if len(group) > 1:
                _assign_co_partitioned(list(members), size, group, racks, assignment)
            elif group[0].needs_racks:
                _assign_ranges(group[0], assignment, racks)


def _kind_needs_racks(racks: RackInfo, members: list[str], resources: list[Resource]) -> bool:
    member_racks = {racks.member_racks[m] for m in members if m in racks.member_racks}
    if not member_racks:
        return False
    per_resource = [racks.resource_racks.get(r) for r in resources]
    every_rack: set[str] = set()
    for rs in per_resource:
        if rs is not None:
            every_rack.update(rs)
    if member_racks.isdisjoint(every_rack):
        return False
    return any(rs is not None and rs != every_rack for rs in per_resource)


def _racks_match(racks: RackInfo, member_id: str, resource: Resource) -> bool:
    return not racks.mismatch(member_id, resource)


def _assign_ranges(state: _KindState, assignment: Assignment, racks: RackInfo | None) -> None:
    for member_id in state.members:
        if not state.unassigned:
            break
        limit = state.max_assignable(member_id)
        if limit == 0:
            continue
        chosen: list[Resource] = []
        for resource in state.unassigned:
            if len(chosen) == limit:
                break
            if racks is None or _racks_match(racks, member_id, resource):
                chosen.append(resource)
        if chosen:
            assignment[member_id].extend(chosen)
            state.on_assigned(member_id, chosen)


def _assign_co_partitioned(
    members: list[str],
    size: int,
    states: list[_KindState],
    racks: RackInfo,
    assignment: Assignment,
) -> None:
    remaining = list(members)
    keys = [list(s.unassigned) for s in states]
    for position in range(size):
        for member_id in remaining:
            if all(
                _racks_match(racks, member_id, keys[i][position])
                and state.max_assignable(member_id) > 0
                for i, state in enumerate(states)
            ):
                for i, state in enumerate(states):
                    resource = keys[i][position]
                    assignment[member_id].append(resource)
                    state.on_assigned(member_id, [resource])
                if all(state.max_assignable(member_id) == 0 for state in states):
                    remaining.remove(member_id)
                break
        if not remaining:
            break
