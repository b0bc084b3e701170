"""What a member asks of its leader beyond what it owns: drain, refusals,
warm-ups and the static-restart probe.  Sans-I/O.

Each intent gives its metadata tags (:meth:`Intents.tags`) and reacts to an
assignment; the member machine (rules 10, 14 and 15) issues the callbacks and
asks for the rounds that follow.

Rules:

1. Refusal: a refused resource is named in the tag
   :data:`~workgroup.member.round_plan.REFUSES_TAG` until its refusal ends; an
   ended refusal is forgotten when the tags are next written.
2. Draining: the tag :data:`~workgroup.member.round_plan.DRAINING_TAG`, and a
   draining member warms nothing up (it takes nothing).
3. Warm-ups: an assignment's ``warming`` that it does not assign is warmed up
   (unless the member is draining or hands everything over); a warm-up the
   assignment then assigns is *promoted* (it stops being a warm-up, no callback
   but ``on_assigned``); one it neither assigns nor warms *ends*.  Ready marks
   (:meth:`Intents.mark_ready`) belong to warm-ups or owned resources only.
   A warm-up ready while others are not yet holds the member's next JoinGroup
   until ``GATHER_MS`` after it, or until none is left unready
   (:attr:`Intents.ready_window_until`): warm-ups that share a session get
   ready together, and one that just misses a round's JoinGroup needs a
   cut-over round of its own.
4. Static-restart probe: a static member's first assignment in a process that
   is empty, withholds nothing and warms nothing, while its catalog lists work
   of its kinds, asks for one round: the count of such asks is the tag
   :data:`~workgroup.member.round_plan.ASKS_TAG` (new metadata makes the coordinator
   rebalance).
5. No intent keeps a timer: refusals end by the clock when the tags are written,
   and the JoinGroup's timing reads the ready window, so
   :meth:`Intents.next_deadline` is always ``None`` (the machine asks anyway).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from workgroup.member.holdings import GATHER_MS
from workgroup.member.round_plan import ASKS_TAG, DRAINING_TAG, REFUSES_TAG, encode_refusals
from workgroup.protocol.metadata import AssignmentData
from workgroup.types import Resource, sorted_resources


class Intents:
    """One member's drain, refusals, warm-ups and restart probe."""

    def __init__(self) -> None:
        #: Resources refused, until when (rule 1).
        self._refused: dict[Resource, int] = {}
        self.draining = False
        #: Warming up here, and reported ready (rule 3).
        self._warming: set[Resource] = set()
        self._ready: set[Resource] = set()
        #: A JoinGroup waits until then for the warm-ups not ready yet (rule 3).
        self.ready_window_until = 0
        #: No assignment was applied yet in this process (rule 4).
        self._first_assignment = True
        #: Rounds asked for with metadata changed only to be seen (rule 4).
        self._asked_rounds = 0

    # --- views ------------------------------------------------------------------

    @property
    def warming(self) -> frozenset[Resource]:
        return frozenset(self._warming)

    def warming_sorted(self) -> tuple[Resource, ...]:
        return sorted_resources(self._warming)

    def ready_sorted(self) -> tuple[Resource, ...]:
        return sorted_resources(self._ready)

    @property
    def unready(self) -> bool:
        """Some warm-up is not ready yet (rule 3)."""
        return not self._warming <= self._ready

    def refused(self, now: int) -> frozenset[Resource]:
        return frozenset(r for r, until in self._refused.items() if until > now)

    def tags(self, now: int) -> dict[str, str]:
        """The metadata tags of the intents (rules 1, 2 and 4)."""
        self._refused = {r: until for r, until in self._refused.items() if until > now}
        tags: dict[str, str] = {}
        if self.draining:
            tags[DRAINING_TAG] = "1"
        if self._refused:
            tags[REFUSES_TAG] = encode_refusals(self._refused)
        if self._asked_rounds:
            tags[ASKS_TAG] = str(self._asked_rounds)
        return tags

    def next_deadline(self) -> int | None:
        """Rule 5: no intent wakes the member."""
        return None

    # --- changes ----------------------------------------------------------------

    def refuse(self, resources: Iterable[Resource], until: int) -> None:
        for resource in resources:
            self._refused[resource] = until

    def drain(self, draining: bool) -> bool:
        """Start or end draining; ``True`` if that changed anything (rule 2)."""
        changed = draining != self.draining
        self.draining = draining
        return changed

    def mark_ready(
        self, resources: Iterable[Resource], owned: frozenset[Resource], now: int
    ) -> set[Resource]:
        """Mark warm-ups (or owned resources) ready; returns those newly marked.
        With others still unready, the ready window opens (rule 3)."""
        fresh = {
            r for r in resources if (r in self._warming or r in owned) and r not in self._ready
        }
        self._ready.update(fresh)
        if fresh and self.unready:
            self.ready_window_until = max(self.ready_window_until, now + GATHER_MS)
        return fresh

    def end_warmups(self, keep: Iterable[Resource] = ()) -> tuple[Resource, ...]:
        """End the warm-ups not in ``keep``; returns them, in resource order."""
        ended = self._warming.difference(keep)
        self._warming.difference_update(ended)
        self._ready.difference_update(ended)
        return sorted_resources(ended)

    def offered(
        self, data: AssignmentData, assigned: frozenset[Resource], *, warm_up: bool, taking: bool
    ) -> set[Resource]:
        """The warm-ups an assignment asks of this member (rule 3); ``taking``:
        neither draining nor handing everything over."""
        if not warm_up or not taking or self.draining:
            return set()
        return set(data.warming).difference(assigned)

    def promote(
        self, assigned: frozenset[Resource], offered: set[Resource]
    ) -> tuple[Resource, ...]:
        """Warm-ups now assigned stop being warm-ups; the others not ``offered``
        end: returns those that end (rule 3)."""
        promoted = self._warming.intersection(assigned)
        self._warming.difference_update(promoted)
        self._ready.difference_update(promoted)
        return self.end_warmups(keep=offered)

    def start(self, assigned: frozenset[Resource], offered: set[Resource]) -> tuple[Resource, ...]:
        """After the assignment is owned: ready marks only for what is warming or
        owned; start the warm-ups offered that do not run yet (returned)."""
        self._ready.intersection_update(self._warming.union(assigned))
        started = sorted_resources(offered.difference(self._warming))
        self._warming.update(started)
        return started

    def probe_after_first(
        self,
        data: AssignmentData,
        *,
        static: bool,
        may_take: bool,
        catalog: Mapping[str, tuple[str | int, ...]],
        kinds: Iterable[str] | None,
    ) -> bool:
        """Rule 4 on each assignment: ``True`` once, when the first one calls for
        a round (``may_take``: STABLE, not draining, not handing everything over)."""
        if not self._first_assignment:
            return False
        self._first_assignment = False
        if not static or data.assigned or data.warming or data.pending or not may_take:
            return False
        if not any(keys for kind, keys in catalog.items() if kinds is None or kind in kinds):
            return False
        self._asked_rounds += 1
        return True


__all__ = ["Intents"]
