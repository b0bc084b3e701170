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
   Deadlines count from the start of the round that saw the departure; one
   that passed while the round's stages ran is due when the round is
   recorded (:meth:`ReassignDelay.record`).
4. The memory is this leader's: a member that is not the leader of a round
   forgets it, so a new leader starts without delays (as Connect's does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from workgroup.assignors.base import Assignment
from workgroup.types import Resource


@dataclass(frozen=True, slots=True)
class DelayMemory:
    """What the leader remembers between its rounds to delay reassignments."""

    #: ``member -> the resources`` it was handed in the previous round (the
    #: round's target, kept as it is: only departed members' lists are read).
    handed: Mapping[str, Sequence[Resource]] = field(default_factory=dict)
    #: The previous round's members (``None``: no round yet).
    members: frozenset[str] | None = None
    #: ``resource -> when it may be handed out``.
    until: Mapping[Resource, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Delayed:
    """The delay stage's output: the target without delayed resources, and the
    memory for the next round."""

    target: Assignment
    memory: DelayMemory


def delay_target(
    memory: DelayMemory,
    delay_ms: int,
    now: int,
    members: Iterable[str],
    target: Assignment,
    claimed: Iterable[Resource],
) -> Delayed:
    """``target`` without the resources delayed this round (rules 1-2)."""
    if delay_ms <= 0:
        return Delayed(target, memory)
    current = frozenset(members)
    until = dict(memory.until)
    if memory.members is not None:
        if current - memory.members:
            until.clear()  # rule 2
        else:
            departed = [rs for m, rs in memory.handed.items() if m not in current and rs]
            owned = set(claimed) if departed else set()
            for resources in departed:
                for resource in resources:
                    if resource not in owned:
                        until.setdefault(resource, now + delay_ms)
    until = {r: at for r, at in until.items() if at > now}
    if until:
        target = {m: [r for r in rs if r not in until] for m, rs in target.items()}
    return Delayed(target, DelayMemory(target, current, until))


class ReassignDelay:
    """The leader's delay memory, carried from round to round."""

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self.memory = DelayMemory()

    @property
    def next_at(self) -> int | None:
        """When the earliest delayed resource may be handed out (rule 3)."""
        until = self.memory.until
        return min(until.values()) if until else None

    @property
    def delayed(self) -> frozenset[Resource]:
        return frozenset(self.memory.until)

    def apply(
        self, now: int, members: Iterable[str], target: Assignment, claimed: Iterable[Resource]
    ) -> Assignment:
        """``target`` without the resources delayed this round (rules 1-2)."""
        out = delay_target(self.memory, self.delay_ms, now, members, target, claimed)
        self.memory = out.memory
        return out.target

    def record(self, memory: DelayMemory, now: int) -> None:
        """Keep ``memory``, a round's output recorded at ``now`` (rule 3)."""
        until = memory.until
        if until and min(until.values()) < now:
            memory = replace(memory, until={r: max(at, now) for r, at in until.items()})
        self.memory = memory

    def forget(self) -> None:
        """Not the leader any more (rule 4)."""
        self.memory = DelayMemory()


__all__ = ["DelayMemory", "Delayed", "ReassignDelay", "delay_target"]
