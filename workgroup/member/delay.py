"""The leader's reassignment delay (Kafka Connect's scheduled rebalance delay).

With ``reassign_delay_ms`` > 0, resources whose member left the group are not
handed to the others at once: they wait up to the delay, so that a process that
restarts (a new member) gets its work back without moving anything else.

Rules:

1. A resource is *delayed* when the member it was handed to in this leader's
   previous round is no longer in the group and no member reports owning it.
   It is left out of the assignment until its deadline (departure + delay).
2. A round in which new members join hands every delayed resource out at once
   (the assignor gives them to the newcomers, who own least): a restarted
   process is a new member.
3. Once the earliest deadline passes, the leader asks for a rebalance
   (:attr:`ReassignDelay.next_at`), and expired resources are handed out.
4. The memory is this leader's: a member that is not the leader of a round
   forgets it, so a new leader starts without delays (as Connect's does).
"""

from __future__ import annotations

from collections.abc import Iterable

from workgroup.assignors.base import Assignment
from workgroup.types import Resource


class ReassignDelay:
    """What the leader remembers between its rounds to delay reassignments."""

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self._owners: dict[Resource, str] = {}
        self._members: frozenset[str] | None = None
        self._until: dict[Resource, int] = {}

    @property
    def next_at(self) -> int | None:
        """When the earliest delayed resource may be handed out (rule 3)."""
        return min(self._until.values()) if self._until else None

    @property
    def delayed(self) -> frozenset[Resource]:
        return frozenset(self._until)

    def apply(
        self, now: int, members: Iterable[str], target: Assignment, claimed: Iterable[Resource]
    ) -> Assignment:
        """``target`` without the resources delayed this round (rules 1-2)."""
        if self.delay_ms <= 0:
            return target
        current = frozenset(members)
        if self._members is not None:
            if current - self._members:
                self._until.clear()  # rule 2
            else:
                owned = set(claimed)
                for resource, owner in self._owners.items():
                    if owner not in current and resource not in owned:
                        self._until.setdefault(resource, now + self.delay_ms)
        self._until = {r: at for r, at in self._until.items() if at > now}
        if self._until:
            target = {m: [r for r in rs if r not in self._until] for m, rs in target.items()}
        self._owners = {r: m for m, rs in target.items() for r in rs}
        self._members = current
        return target

    def forget(self) -> None:
        """Not the leader any more (rule 4)."""
        self._owners.clear()
        self._until.clear()
        self._members = None


__all__ = ["ReassignDelay"]
