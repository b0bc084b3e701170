"""``round-robin``: deal resources out one by one (Kafka's ``RoundRobinAssignor``).

All resources, kinds in name order and keys in order, are dealt to the members
in a circle (static members first by instance id, then dynamic members by member
id: KIP-345); a member that does not subscribe to a resource's kind is skipped.

Guarantees: valid; with identical subscriptions member loads differ by at most
one; deterministic, and with static members and an unchanged group size the same
instance ids get the same resources after a restart.  Not sticky otherwise:
prefer ``cooperative-sticky`` for groups whose membership changes.
"""

from __future__ import annotations

from workgroup.assignors._common import empty_assignment, sorted_kinds, static_first_key
from workgroup.assignors.base import Assignment, AssignmentInput


class RoundRobinAssignor:
    """Kafka's round-robin assignment (see the module documentation)."""

    name = "round-robin"
    supports_cooperative = False

    def assign(self, data: AssignmentInput) -> Assignment:
        assignment = empty_assignment(data)
        circle = sorted(data.members.values(), key=static_first_key)
        if not circle:
            return assignment
        subscribed = set().union(*(m.kinds for m in circle))
        n = len(circle)
        turn = 0
        for kind in sorted_kinds(data):
            if kind not in subscribed:
                continue
            for key in data.resources[kind]:
                while kind not in circle[turn].kinds:
                    turn = (turn + 1) % n
                assignment[circle[turn].member_id].append((kind, key))
                turn = (turn + 1) % n
        return assignment
