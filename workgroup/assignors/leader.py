"""``leader``: exactly one owner per singleton resource, and it stays put.

Every resource is a singleton role (a partition leader, a scheduler, a
single-writer lock).  Its current owner keeps it for as long as it is in the
group and subscribes to its kind, whatever the balance; only when a resource has
no owner does it go to the subscriber holding the fewest resources (ties: static
members first by instance id, then member ids).  Conflicting claims are settled
by generation: the newest claim wins; between claims of the same generation the
first member in that same order wins (two members believing they lead is
exactly what this assignor exists to end).

Guarantees: valid; exactly one owner for every resource with a subscriber;
leadership never moves while its holder stays; deterministic.  Use it for
single-writer roles, where a needless hand-over costs more than imbalance.
"""

from __future__ import annotations

from workgroup.assignors._common import empty_assignment, sorted_kinds, static_first_key
from workgroup.assignors.base import Assignment, AssignmentInput
from workgroup.types import Resource


class LeaderAssignor:
    """Sticky singleton ownership (see the module documentation)."""

    name = "leader"
    supports_cooperative = True

    def assign(self, data: AssignmentInput) -> Assignment:
        assignment = empty_assignment(data)
        order = sorted(data.members.values(), key=static_first_key)
        rank = {m.member_id: i for i, m in enumerate(order)}
        # resource -> (generation, -rank, member id): the best claim so far.
        best: dict[Resource, tuple[int, int, str]] = {}
        for member in order:
            claim = (member.generation, -rank[member.member_id], member.member_id)
            for resource in member.owned:
                if resource[0] not in member.kinds:
                    continue
                current = best.get(resource)
                if current is None or claim[:2] > current[:2]:
                    best[resource] = claim
        load = dict.fromkeys(assignment, 0)
        unowned: list[Resource] = []
        for kind in sorted_kinds(data):
            for key in data.resources[kind]:
                resource = (kind, key)
                winner = best.get(resource)
                if winner is None:
                    unowned.append(resource)
                else:
                    assignment[winner[2]].append(resource)
                    load[winner[2]] += 1
        for resource in unowned:
            subscribers = [m.member_id for m in order if resource[0] in m.kinds]
            if not subscribers:
                continue
            chosen = min(subscribers, key=lambda mid: (load[mid], rank[mid]))
            assignment[chosen].append(resource)
            load[chosen] += 1
        return assignment
