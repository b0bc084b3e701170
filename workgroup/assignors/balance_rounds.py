"""Heading for a placement over rounds: the balancing stage's plan for a balance
that ``max_moves`` moves at a time cannot reach while each round lowers the peak.

A placement afresh (:func:`~workgroup.assignors.balance.balance`, rule 3) may
find an assignment within the tolerance that needs more moves than one round
allows, where no round's worth of those moves lowers the busiest member's
utilisation (the *peak*) by itself: three moves that only help together, with
``max_moves=2``.  The stage then makes a :class:`Heading`: the target, the
loads, members and catalog it was found for, and a bound.  The leader keeps it
and each round moves up to ``max_moves`` resources toward it.

Rules:

1. **Schedule.**  A heading is made only when the moves toward the target can be
   split into rounds of at most ``max_moves`` moves each ending with no member
   above the bound (:func:`schedule`: a depth-first search, larger rounds and
   lower peaks first, with a fixed budget of rounds looked at); each round
   carries out the first round of a schedule found afresh from where the group
   is.  Only where a round ends counts: its moves happen together (a revoked
   resource is nobody's until it is handed out).
2. **Bound.**  No round ends with the peak above the one the heading was made
   from (as a ratio to the mean), though an intermediate round need not lower it;
   within the loads' resolution (the metadata's two bytes) counts as at it, so
   that a round ending at the bound is not refused for a rounding.
3. **No way back.**  While the heading is held, the stage moves nothing but
   resources not yet where the target puts them, each to that member: a
   resource once there is never moved again (the leader passes them as pinned,
   so that the assignor's count balance gives them back too).
4. **Premises.**  The heading is dropped when its members (those counted in
   the mean: a member that takes and holds nothing, leaving or draining, is
   none), their capacities or kinds, or the resources change, when any
   member's load under the target moved by more than the tolerance of the
   mean, when the target is no longer within the tolerance, when no schedule
   is found from where the group is, or when the group is within the
   tolerance (then the group stays quiet).
5. Deterministic: pending moves are taken busiest giver first, largest first,
   then by :func:`~workgroup.types.resource_sort_key`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from workgroup.types import Resource, resource_sort_key

#: Groups of moves :func:`schedule` looks at, in all (its cost is bounded).
_SCHEDULE_GROUPS = 20_000
#: Groups of one size :func:`schedule` looks at from one state.
_GROUPS_PER_SIZE = 2_000


@dataclass(frozen=True, slots=True)
class PendingMove:
    """A resource not yet where the target puts it."""

    load: float
    resource: Resource
    giver: str
    taker: str


@dataclass(frozen=True, slots=True)
class Heading:
    """A target placement the stage moves toward over rounds (the module's rules)."""

    #: ``resource -> member`` for every resource held when it was made.
    placement: Mapping[Resource, str]
    #: The resources the target moves (those not on their holder then).
    moving: frozenset[Resource]
    #: The loads it was made from (every resource in ``placement``).
    loads: Mapping[Resource, float]
    #: ``member id -> capacity`` and ``member id -> kinds taken`` (None: all),
    #: of the members counted in the mean.
    capacities: Mapping[str, float]
    kinds: Mapping[str, frozenset[str] | None]
    #: No round ends with the largest utilisation above ``bound`` times the mean.
    bound: float
    tolerance: float

    def member_totals(self, loads: Mapping[Resource, float], default: float) -> dict[str, float]:
        """Each member's load under the target, with ``loads``."""
        totals = dict.fromkeys(self.capacities, 0.0)
        for resource, home in self.placement.items():
            value = loads.get(resource)
            totals[home] += default if value is None else value
        return totals

    def holds(
        self,
        out: Mapping[str, Sequence[Resource]],
        loads: Mapping[Resource, float],
        capacities: Mapping[str, float],
        kinds: Mapping[str, frozenset[str] | None],
        default: float,
    ) -> bool:
        """Rule 4's premises, with the round's assignment, loads and members."""
        if dict(capacities) != dict(self.capacities) or dict(kinds) != dict(self.kinds):
            return False
        if sum(map(len, out.values())) != len(self.placement):
            return False
        if any(r not in self.placement for held in out.values() for r in held):
            return False
        old = self.member_totals(self.loads, default)
        new = self.member_totals(loads, default)
        total_capacity = sum(self.capacities.values())
        old_mean = sum(old.values()) / total_capacity
        new_mean = sum(new.values()) / total_capacity
        if old_mean <= 0 or new_mean <= 0:
            return False
        for mid, cap in self.capacities.items():
            if abs(new[mid] - old[mid]) > self.tolerance * old_mean * cap:
                return False
        peak = max(new[mid] / cap for mid, cap in self.capacities.items())
        return peak <= new_mean * (1 + self.tolerance) * (1 + 1e-12)

    def at_home(self, out: Mapping[str, Collection[Resource]]) -> frozenset[Resource]:
        """The resources the target moves that are where it puts them (rule 3)."""
        return frozenset(
            r
            for mid, held in out.items()
            for r in held
            if r in self.moving and self.placement[r] == mid
        )

    def pending(
        self, out: Mapping[str, Sequence[Resource]], load_of: Callable[[Resource], float]
    ) -> list[PendingMove]:
        """The moves left: each resource not where the target puts it, to that member."""
        return [
            PendingMove(load_of(r), r, mid, self.placement[r])
            for mid, held in out.items()
            for r in held
            if self.placement[r] != mid
        ]


def schedule(
    pending: Sequence[PendingMove],
    member_load: Mapping[str, float],
    capacity: Mapping[str, float],
    limit: float,
    budget: int,
) -> tuple[PendingMove, ...] | None:
    """The first round of a schedule of ``pending`` in rounds of at most
    ``budget`` moves, each ending with every member at or below ``limit``
    (rule 1); None when none is found within the search's budget."""
    if budget <= 0 or not pending:
        return None
    members = sorted(capacity)
    ordered = sorted(
        pending,
        key=lambda p: (
            -member_load[p.giver] / capacity[p.giver],
            -p.load,
            resource_sort_key(p.resource),
        ),
    )
    failed: set[int] = set()  # states (the moves done, as bits) no schedule ends from
    looked = 0

    def search(done: int, base: dict[str, float]) -> tuple[int, ...] | None:
        nonlocal looked
        left = [i for i in range(len(ordered)) if not done >> i & 1]
        if not left:
            return ()
        if done in failed:
            return None
        utils = sorted(((base[m] / capacity[m], m) for m in members), reverse=True)
        for size in range(min(budget, len(left)), 0, -1):
            groups: list[tuple[float, tuple[int, ...]]] = []
            for seen, group in enumerate(combinations(left, size)):
                if seen >= _GROUPS_PER_SIZE or looked >= _SCHEDULE_GROUPS:
                    break
                looked += 1
                peak = _peak(base, utils, capacity, [ordered[i] for i in group])
                if peak <= limit:
                    groups.append((peak, group))
            groups.sort()
            for _, group in groups:
                mask = done
                after = dict(base)
                for i in group:
                    mask |= 1 << i
                    after[ordered[i].giver] -= ordered[i].load
                    after[ordered[i].taker] += ordered[i].load
                if search(mask, after) is not None:
                    return group
                if looked >= _SCHEDULE_GROUPS:
                    return None
        failed.add(done)
        return None

    first = search(0, dict(member_load))
    if first is None:
        return None
    return tuple(ordered[i] for i in first)


def _peak(
    base: Mapping[str, float],
    utils: list[tuple[float, str]],
    capacity: Mapping[str, float],
    group: Collection[PendingMove],
) -> float:
    """The largest utilisation after ``group`` from ``base`` (``utils``: its
    utilisations, largest first): only the members it touches change."""
    touched: dict[str, float] = {}
    for move in group:
        touched[move.giver] = touched.get(move.giver, base[move.giver]) - move.load
        touched[move.taker] = touched.get(move.taker, base[move.taker]) + move.load
    worst = max((x / capacity[m] for m, x in touched.items()), default=-math.inf)
    for util, m in utils:
        if m not in touched:
            return max(worst, util)
    return worst


__all__ = ["Heading", "PendingMove", "schedule"]
