"""What a member owns: the resources, the generation they were assigned in,
what it is still releasing, and what an eager rebalance made it revoke.

Every change goes through one method that returns what changed, so the machine
reports each change (callbacks, logs) exactly once.  Sans-I/O.

Rules:

1. A revoked resource is *releasing* until the application says its work on it
   stopped (:meth:`Ownership.released`): it is no longer owned, but a
   cooperative member still reports it as owned, so that a leader withholds it
   from everyone else meanwhile.
2. A releasing resource assigned to the member again is owned again (it is
   reported as added: its work starts again once the old work has stopped).
3. Losing everything (:meth:`Ownership.lose`) drops what is releasing too.
4. A releasing resource remembers the generation it was given up in (the
   generation whose assignment, or close, revoked it): its commits go under
   that generation, or the current one once a cooperative member joined a
   later one (:meth:`Ownership.given_up_in`, the machine's rule 11).
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
        #: Revoked, the application not yet done with them (rule 1).
        self.releasing: frozenset[Resource] = frozenset()
        self._releasing_generation = NO_GENERATION_ID
        #: Releasing resource -> the generation it was given up in (rule 4).
        self._given_up_in: dict[Resource, int] = {}
        # What an eager rebalance revoked, and its generation: eager metadata
        # reports it so that sticky assignors keep it in place (as Kafka's
        # StickyAssignor does through its user data).
        self._eager_previous: tuple[tuple[Resource, ...], int] = ((), NO_GENERATION_ID)

    def __bool__(self) -> bool:
        """Something is owned or still releasing."""
        return bool(self.resources or self.releasing)

    def start_release(
        self, resources: Iterable[Resource], given_up_in: int | None = None
    ) -> tuple[Resource, ...]:
        """Revoke ``resources`` in generation ``given_up_in`` (``None``: the one
        they were assigned in): no longer owned, releasing until :meth:`released`;
        returns those that were owned, in resource order."""
        generation = self.generation
        gone = self.give_up(resources)
        if gone:
            self.releasing = self.releasing | set(gone)
            self._releasing_generation = max(self._releasing_generation, generation)
            for resource in gone:
                self._given_up_in[resource] = generation if given_up_in is None else given_up_in
        return gone

    def given_up_in(self, resource: Resource) -> int | None:
        """The generation releasing ``resource`` was given up in (rule 4); ``None``
        if it is not releasing."""
        return self._given_up_in.get(resource)

    def released(self, resources: Iterable[Resource]) -> tuple[Resource, ...]:
        """The application stopped working on ``resources``; returns those that
        were releasing, in resource order."""
        done = sorted_resources(self.releasing & frozenset(resources))
        if done:
            self.releasing = self.releasing - set(done)
            for resource in done:
                del self._given_up_in[resource]
            if not self.releasing:
                self._releasing_generation = NO_GENERATION_ID
        return done

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
        self.start_release(self.resources)
        return owned

    def lose(self) -> tuple[tuple[Resource, ...], tuple[Resource, ...], int]:
        """Everything is lost (no revocation: it may be someone else's already);
        returns what was owned, what was releasing, and the generation.  Nothing
        is reported from it."""
        generation = max(self.generation, self._releasing_generation)
        lost = (sorted_resources(self.resources), sorted_resources(self.releasing), generation)
        self.resources = frozenset()
        self.generation = NO_GENERATION_ID
        self.releasing = frozenset()
        self._releasing_generation = NO_GENERATION_ID
        self._given_up_in.clear()
        self._eager_previous = ((), NO_GENERATION_ID)
        return lost

    def assign(self, assigned: Iterable[Resource], generation: int) -> tuple[Resource, ...]:
        """Own ``assigned`` from ``generation`` on (give up first what it leaves
        out, to report it); returns what was added, in ``assigned``'s order."""
        ordered = tuple(assigned)
        added = tuple(r for r in ordered if r not in self.resources)
        self.resources = frozenset(ordered)
        self.released(self.resources)  # owned again (rule 2)
        self.generation = generation if ordered else NO_GENERATION_ID
        self._eager_previous = ((), NO_GENERATION_ID)
        return added

    def report(self, mode: RebalanceMode) -> tuple[tuple[Resource, ...], int]:
        """What the member's metadata says it owns, and the generation: cooperative
        members what they own and what they are still releasing (rule 1), eager
        members what the last rebalance revoked."""
        if mode == "cooperative":
            if not self.releasing:
                return sorted_resources(self.resources), self.generation
            generation = max(self.generation, self._releasing_generation)
            return sorted_resources(self.resources | self.releasing), generation
        return self._eager_previous


__all__ = ["Ownership"]
