"""What a member owns: the resources, the generation they were assigned in, and
what an eager rebalance made it revoke.

Every change goes through one method that returns what changed, so the machine
reports each change (callbacks, logs) exactly once.  Sans-I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from workgroup.member.generation import NO_GENERATION_ID
from workgroup.protocol.protocol import RebalanceMode
from workgroup.types import Resource, sorted_resources


class Ownership:
    """The resources one member owns."""

    def __init__(self) -> None:
        self.resources: frozenset[Resource] = frozenset()
        #: The generation ``resources`` were assigned in (``-1``: nothing owned).
        self.generation = NO_GENERATION_ID
        # What an eager rebalance revoked, and its generation: eager metadata
        # reports it so that sticky assignors keep it in place (as Kafka's
        # StickyAssignor does through its user data).
        self._eager_previous: tuple[tuple[Resource, ...], int] = ((), NO_GENERATION_ID)

    def __bool__(self) -> bool:
        return bool(self.resources)

    def give_up(self, resources: Iterable[Resource]) -> tuple[Resource, ...]:
        """Stop owning ``resources`` (revoked or released); returns those that were
        owned, in resource order."""
        gone = sorted_resources(self.resources & frozenset(resources))
        if gone:
            self.resources = self.resources - set(gone)
            if not self.resources:
                self.generation = NO_GENERATION_ID
        return gone

    def give_up_before_eager_join(self) -> tuple[tuple[Resource, ...], int]:
        """Everything is revoked before an eager JoinGroup and remembered for its
        metadata; returns what was owned and its generation."""
        owned = (sorted_resources(self.resources), self.generation)
        self._eager_previous = owned
        self.give_up(self.resources)
        return owned

    def lose(self) -> tuple[tuple[Resource, ...], int]:
        """Everything is lost (no revocation: it may be someone else's already);
        returns what was owned and its generation.  Nothing is reported from it."""
        owned = (sorted_resources(self.resources), self.generation)
        self.resources = frozenset()
        self.generation = NO_GENERATION_ID
        self._eager_previous = ((), NO_GENERATION_ID)
        return owned

    def assign(self, assigned: Iterable[Resource], generation: int) -> tuple[Resource, ...]:
        """Own ``assigned`` from ``generation`` on (give up first what it leaves
        out, to report it); returns what was added, in ``assigned``'s order."""
        ordered = tuple(assigned)
        added = tuple(r for r in ordered if r not in self.resources)
        self.resources = frozenset(ordered)
        self.generation = generation if ordered else NO_GENERATION_ID
        self._eager_previous = ((), NO_GENERATION_ID)
        return added

    def report(self, mode: RebalanceMode) -> tuple[tuple[Resource, ...], int]:
        """What the member's metadata says it owns, and the generation: cooperative
        members what they own, eager members what the last rebalance revoked."""
        if mode == "cooperative":
            return sorted_resources(self.resources), self.generation
        return self._eager_previous


__all__ = ["Ownership"]
