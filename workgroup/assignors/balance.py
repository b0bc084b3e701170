"""Load-aware balancing: a stage after any exclusive assignor that evens out
measured load by moving the fewest resources.

Assignors balance counts; real resources are skewed.  :func:`balance` takes the
assignor's target, each resource's load (records/s, bytes/s: any non-negative
number the handlers report) and each member's capacity, and moves resources
from the most utilised member (load / capacity) to less utilised ones.

Rules:

1. **Utilisation.**  A member's utilisation is its resources' load over its
   capacity; the mean is the total load over the total capacity of the members
   that take some kind.  A resource without a reported load counts as the mean
   of the reported loads (members that send no load, new resources); standby
   twins (``kind.standby``) count as 0 unless reported.
2. **Trigger and target (hysteresis).**  Nothing moves while the most utilised
   member is within ``tolerance`` of the mean (``max <= mean * (1 +
   tolerance)``).  Above it, resources move until the most utilised member is
   within ``target`` (default ``tolerance / 2``), so that noise around the
   tolerance does not trigger a move at every rebalance.
3. **Fewest moves.**  Each move takes a resource from the most utilised member:
   the lightest resource that brings both members within the target if one
   does (one move settles that member), else the one that lowers the larger
   of the two members' utilisations most.  When no single move lowers it (its
   resources are all too big for anyone), a swap with one of the lightest
   members may: it gives a resource and takes back a lighter one (two moves).
   A swap or chain counts as lowering it only by more than the loads'
   resolution (the metadata's two bytes): else it exchanges equal resources
   or mirrors two members, and rounds would do so back and forth.
   When no swap does either, room is made: the busiest member's resource goes
   to a light member that gives its own, largest first, to members that stay
   within the target (a chain of moves, as many as ``max_moves`` leaves).
   When the chain needs more moves than are left, the room is made this round
   (the light member's resources go to members that stay within the target)
   and the busiest member's resource moves in the next (the leader probes):
   a balance that exists is reached over rounds.  When no chain helps either
   (a few large resources), every movable resource is placed afresh, largest
   first, and the moves head for that placement if it is within the
   tolerance (over rounds, ``max_moves`` at a time).  When no round's worth
   of those moves lowers the peak by itself, the stage holds the placement as
   a target (:mod:`~workgroup.assignors.balance_rounds`): each round moves
   toward it, none ending above the peak it was made from.  When no such
   placement can be reached that way, a walk from where the group is (moves
   and swaps, none raising the peak: :mod:`~workgroup.assignors.balance_local`)
   gives the target, if it ends within the tolerance.  Never more than
   ``max_moves`` moves; a move never makes the most utilised member busier,
   so the largest utilisation never rises (but for a held target's bound) and
   the total load is unchanged.
4. **The assignor's guarantees.**  A resource moves only to a member that takes
   its kind, that does not refuse it (``refused``), that does not hold it or
   its standby twin already, and, when the resource sits on its holder's rack
   (rack matching as in
   :class:`~workgroup.assignors._common.RackInfo`), on that rack too.  Resources
   held by several members (standbys, replicas) and ``pinned`` resources (moved
   recently: the leader's hysteresis) never move.
5. **Stickiness.**  Given what each member runs now (``owned``), a resource the
   assignor took from its owner (to even out counts) goes back first when that
   keeps the owner at or below the most utilised member and the assignor's
   choice at or above ``mean * (1 - tolerance)``, and either the assignor's
   target is above the tolerance or the resource is pinned: load balance
   replaces count balance where count balance is not good enough, and an
   unrelated rebalance does not undo recent moves; within the tolerance (a
   tolerance large enough turns balancing off) count balance stands.  A
   resource the stage itself put on its owner (``placed``: the leader keeps
   it while the members stay the same) goes back without the floor: giving it
   back keeps the largest utilisation where the assignor's target has it, and
   the count balance does not undo a load decision (else the stage moves it
   again once its pin expires, and the rounds alternate between two
   placements).  Such a return is not a move (the resource stays where it
   runs).
6. Deterministic: members are taken by utilisation then id, resources by load
   then :func:`~workgroup.types.resource_sort_key`.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, filterfalse, repeat
from operator import itemgetter

from workgroup.assignors._common import RackInfo
from workgroup.assignors.balance_local import local_search
from workgroup.assignors.balance_rounds import Heading, PendingMove, schedule
from workgroup.assignors.base import Assignment, AssignmentInput, Assignor
from workgroup.assignors.standby import (
    STANDBY_SUFFIX,
    StandbyAssignor,
    active_kind,
    is_standby_kind,
)
from workgroup.collector import collector_paused
from workgroup.errors import ConfigError
from workgroup.types import Resource, resource_sort_key

#: Default allowed excess of the most utilised member over the mean (10 %).
DEFAULT_TOLERANCE = 0.10
#: Default cap on the moves of one rebalance.
DEFAULT_MAX_MOVES = 16


@dataclass(frozen=True, slots=True)
class Move:
    """One resource given from one member to another."""

    resource: Resource
    giver: str
    taker: str
    load: float


@dataclass(frozen=True, slots=True)
class Balanced:
    """What :func:`balance` did."""

    assignment: Assignment
    #: The moves, in the order made (at most ``max_moves``).
    moves: tuple[Move, ...] = ()
    #: Resources given back to their owner (rule 5): not moves.
    returned: tuple[Move, ...] = ()
    #: ``member id -> load`` before (the assignor's target) and after.
    before: dict[str, float] = field(default_factory=dict)
    after: dict[str, float] = field(default_factory=dict)
    #: Mean utilisation (total load / total capacity).
    mean: float = 0.0
    #: ``member id -> capacity`` of the members counted in the mean.
    capacities: dict[str, float] = field(default_factory=dict)
    #: ``max_moves`` ran out (or what it left was too few for the swap or chain
    #: that would help), or pinned resources were in the way.
    stopped_early: bool = False
    #: The placement the next rounds head for (:mod:`~workgroup.assignors.balance_rounds`).
    heading: Heading | None = None
    #: The assignor gave a member that published its loads (``owned_loads``) a
    #: resource it did not own whose load was not measured (counted as the
    #: average): its new owner measures it.
    gained_unmeasured: bool = False

    def ratio(self, loads: Mapping[str, float] | None = None) -> float:
        """Largest utilisation over the mean (1.0 when there is no load)."""
        loads = self.after if loads is None else loads
        if not self.mean or not self.capacities:
            return 1.0
        return max(loads.get(m, 0.0) / c for m, c in self.capacities.items()) / self.mean

    @property
    def ratio_before(self) -> float:
        return self.ratio(self.before)

    def over(self, tolerance: float) -> bool:
        """The result is still above ``tolerance``."""
        return self.ratio() > 1 + tolerance + 1e-12

    def unfinished(self, tolerance: float) -> bool:
        """Above ``tolerance`` because ``max_moves`` or pinned resources stopped
        the stage, not because no move could help: another round may do better
        (the leader probes).  When no move helps (a resource alone above the
        mean, say), only changed loads can: the next rebalance sees them."""
        return self.over(tolerance) and self.stopped_early


def check_settings(tolerance: float, max_moves: int, target: float | None = None) -> None:
    """Raise :class:`ConfigError` for settings :func:`balance` cannot use."""
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float):
        raise ConfigError(f"imbalance_tolerance must be a number, got {tolerance!r}")
    if not 0 <= tolerance < math.inf:
        raise ConfigError(f"imbalance_tolerance must be >= 0, got {tolerance}")
    if isinstance(max_moves, bool) or not isinstance(max_moves, int) or max_moves < 0:
        raise ConfigError(f"max_moves must be an integer >= 0, got {max_moves!r}")
    if target is not None and not 0 <= target <= tolerance:
        raise ConfigError(f"the balancing target must be in 0..tolerance, got {target}")


def balance(
    assignment: Assignment,
    loads: Mapping[Resource, float],
    capacities: Mapping[str, float],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    target: float | None = None,
    max_moves: int = DEFAULT_MAX_MOVES,
    kinds: Mapping[str, Collection[str]] | None = None,
    owned: Mapping[str, Collection[Resource]] | None = None,
    pinned: Collection[Resource] = frozenset(),
    racks: RackInfo | None = None,
    exclusive: bool = True,
    owned_loads: Mapping[str, float] | None = None,
    refused: Mapping[str, Collection[Resource]] | None = None,
    heading: Heading | None = None,
    placed: Mapping[Resource, str] | None = None,
) -> Balanced:
    """Even out ``assignment`` by load (see the module's rules).

    ``loads`` are finite and >= 0 (:func:`clean_loads`); ``capacities`` lists
    the members (a member absent from it has capacity 1); ``kinds`` what each
    takes (``None``: every kind); ``owned`` what each runs now (rule 5).
    ``exclusive``: only standby twins may have several holders (any assignor
    but ``replicated``); otherwise resources with several holders are found
    and never moved.  ``owned_loads``: each member's total load over ``owned``
    where known (what it reported): its load is then that, less what it lost
    and plus what it gained, without looking up every resource (at a million
    resources, those lookups cost more than the assignor).  ``refused``: what
    each member refuses (the leader's refusals); it is never given those.
    ``assignment`` is not modified; the result shares the lists of members
    nothing moved from or to.  ``heading``: the placement earlier rounds headed
    for (:mod:`~workgroup.assignors.balance_rounds`); while its premises hold,
    this round moves only toward it.  ``placed``: ``resource -> member`` the
    stage moved it to in earlier rounds, for the same members (rule 5).
    """
    check_settings(tolerance, max_moves, target)
    goal = tolerance / 2 if target is None else target
    members = sorted(set(assignment) | set(capacities))
    # Copied on first change (shift): copying a million entries costs more than
    # the rest of a rebalance that moves nothing.
    out: Assignment = {mid: assignment.get(mid) or [] for mid in members}
    copied: set[str] = set()
    if not loads or not members:
        return Balanced(out)
    default = sum(loads.values()) / len(loads)
    index: _LoadIndex | None = None

    def load_of(resource: Resource) -> float:
        if index is not None:
            return index.load(resource)
        value = loads.get(resource)
        if value is not None:
            return value
        return 0.0 if is_standby_kind(resource[0]) else default

    def loads_of(resources: list[Resource]) -> list[float]:
        if index is not None:
            return index.values(resources)
        return list(map(load_of, resources))

    capacity = {mid: _positive(capacities.get(mid, 1.0)) for mid in members}
    changes = {m: _changes(owned.get(m, ()), out[m]) for m in members} if owned else {}
    # Unmeasured resources handed to a member that owned them not, seen where
    # the totals look them up anyway: the gains of a member whose published
    # loads are used, everything a member that owns nothing holds.  (A member
    # that owns some but published no load rejoins by itself once it
    # measures: the member's rule 2.)
    gained_unmeasured = False
    found: dict[str, float] = {}
    unknown: list[str] = []  # members whose total is summed resource by resource
    for mid in members:
        known = owned_loads.get(mid) if owned_loads is not None else None
        if known is None or not owned or not owned.get(mid):
            unknown.append(mid)
            continue
        gained, lost = changes[mid]
        gained_load, guessed = _sum_gained(gained, loads, default)
        gained_unmeasured = gained_unmeasured or guessed
        found[mid] = known - _sum_loads(lost, loads, default) + gained_load
    empty_handed = [mid for mid in unknown if owned and not owned.get(mid)]
    if sum(len(out[mid]) for mid in unknown) >= _INDEX_FROM:
        # As the assignors: no cycles are made, and each collection would walk
        # every tuple of a large assignment.
        with collector_paused():
            index = _LoadIndex(loads, default)
            totals = index.totals([out[mid] for mid in unknown])
            if index.missing and empty_handed:
                gained_unmeasured = gained_unmeasured or any(
                    index.unmeasured_in(out[mid]) for mid in empty_handed
                )
        found.update(zip(unknown, totals, strict=True))
    else:
        for mid in unknown:
            total, guessed = _sum_gained(out[mid], loads, default)
            found[mid] = total
            if guessed and mid in empty_handed:
                gained_unmeasured = True
    member_load = {mid: found[mid] for mid in members}
    takes = {mid: (None if kinds is None else frozenset(kinds.get(mid, ()))) for mid in members}
    counted = {
        mid: capacity[mid] for mid in members if takes[mid] is None or takes[mid] or out[mid]
    }
    total_capacity = sum(counted.values())
    mean = sum(member_load.values()) / total_capacity if total_capacity else 0.0
    before = dict(member_load)
    if mean <= 0:
        return Balanced(
            out,
            before=before,
            after=dict(member_load),
            capacities=counted,
            gained_unmeasured=gained_unmeasured,
        )

    util = {mid: member_load[mid] / capacity[mid] for mid in members}
    taken = _taken_from_owners(changes) if changes else []
    trigger = mean * (1 + tolerance) * (1 + 1e-12)

    def balanced(
        moves: Sequence[Move] = (),
        returned: Sequence[Move] = (),
        *,
        stopped_early: bool = False,
        heading: Heading | None = None,
    ) -> Balanced:
        """The stage's result, with the loads as they stand now."""
        return Balanced(
            out,
            tuple(moves),
            tuple(returned),
            before=before,
            after=dict(member_load),
            mean=mean,
            capacities=counted,
            stopped_early=stopped_early,
            heading=heading,
            gained_unmeasured=gained_unmeasured,
        )

    if not taken and max(util.values()) <= trigger:
        # Within tolerance, nothing to give back: skip the indexes below (at a
        # million resources they cost as much as summing the loads).
        return balanced()
    held_kinds: set[str] = set()
    if kinds is not None:  # what members take bounds what they hold: no scan
        held_kinds = held_kinds.union(*{frozenset(ks) for ks in kinds.values()})
    else:
        for mid in members:
            held_kinds.update(map(itemgetter(0), out[mid]))
    standby_kinds = {k for k in held_kinds if is_standby_kind(k)}
    standby_of: dict[Resource, set[str]] = {}
    if standby_kinds:
        for mid in members:
            for kind, key in out[mid]:
                if kind in standby_kinds:
                    standby_of.setdefault((active_kind(kind), key), set()).add(mid)
    shared: set[Resource] = set()  # resources with several holders: never moved
    if not exclusive:
        seen: set[Resource] = set()
        for mid in members:
            mine = set(out[mid])
            shared |= seen & mine
            seen |= mine

    refusing = {mid: rs for mid, rs in refused.items() if rs} if refused else {}

    def may_take(mid: str, resource: Resource, giver: str) -> bool:
        wanted = takes[mid]
        if wanted is not None and resource[0] not in wanted:
            return False
        if refusing and resource in refusing.get(mid, ()):
            return False
        if mid in standby_of.get(resource, ()):
            return False
        if racks is not None and racks.enabled and racks.matches(giver, resource):
            return racks.matches(mid, resource)
        return True

    def shift(resource: Resource, giver: str, taker: str, load: float) -> None:
        for mid in (giver, taker):
            if mid not in copied:
                out[mid] = list(out[mid])
                copied.add(mid)
        out[giver].remove(resource)
        out[taker].append(resource)
        member_load[giver] -= load
        member_load[taker] += load
        util[giver] = member_load[giver] / capacity[giver]
        util[taker] = member_load[taker] / capacity[taker]

    if heading is not None and not heading.holds(
        out, loads, counted, {mid: takes[mid] for mid in counted}, default
    ):
        heading = None  # its premises changed
    if heading is not None and any(
        heading.placement.get(r) == mid for mid, rs in refusing.items() for r in rs
    ):
        heading = None  # a member now refuses what the target gives it
    if heading is not None:
        # Rule 3 of balance_rounds: what reached the target stays there, even
        # where the assignor's count balance took it (rule 5 gives it back).
        pinned = frozenset(pinned) | heading.at_home(owned if owned else out)

    returned: list[Move] = []
    # Count balance stands while the target is within the tolerance (a tolerance
    # that large turns balancing off); only resources moved recently go back then,
    # so that the assignor does not undo the stage's moves within the pin time.
    over = max(util.values()) > trigger
    if taken:
        floor = mean * (1 - tolerance)
        for resource, owner, holder in taken:
            if resource in shared or is_standby_kind(resource[0]):
                continue
            if not over and resource not in pinned:
                continue
            load = load_of(resource)
            peak = max(util.values())
            # The stage's own placement: giving it back is no worse (the peak
            # stays), whatever the floor says of the assignor's choice.
            stages_own = placed is not None and placed.get(resource) == owner
            if (
                may_take(owner, resource, holder)
                and (member_load[owner] + load) / capacity[owner] <= peak
                and (stages_own or (member_load[holder] - load) / capacity[holder] >= floor)
            ):
                shift(resource, holder, owner, load)
                returned.append(Move(resource, holder, owner, load))

    moves: list[Move] = []
    settled = mean * (1 + goal) * (1 + 1e-12)
    stopped_early = False
    #: The moves left were too few, or pinned resources in the way, for the
    #: swap or chain that would help.
    blocked = False

    def heads_for(
        aims: list[dict[Resource, str]], pins: frozenset[Resource], budget: int
    ) -> tuple[Heading | None, tuple[Move, ...]]:
        """A heading for the first of ``aims`` whose moves can be scheduled
        in rounds of ``budget`` from here, and its first round of moves."""
        for aim in aims:
            made = _make_heading(aim, members, out, util, counted, takes, load_of, mean,
                                 tolerance, pins)  # fmt: skip
            if made is None:
                continue
            first = _toward_heading(made, out, member_load, capacity, pins, load_of, mean, budget)
            if first:
                return made, first
        return None, ()

    def walk(pins: frozenset[Resource], budget: int) -> dict[Resource, str] | None:
        """The placement a walk of moves and swaps from here reaches within the
        tolerance (:func:`~workgroup.assignors.balance_local.local_search`)."""
        holdings: dict[str, list[tuple[float, Resource]]] = {}
        count = 0
        for mid in members:
            mine = [
                r
                for r in out[mid]
                if r not in pins and r not in shared and not is_standby_kind(r[0])
            ]
            count += len(mine)
            if count > _REPARTITION_MAX:
                return None  # with that many, moves, swaps and chains have small resources
            holdings[mid] = list(zip(loads_of(mine), mine, strict=True))
        return local_search(
            members, holdings, member_load, capacity, may_take, settled, trigger, budget, max_moves
        )

    def repartition_helps(
        found: tuple[tuple[Move, ...], bool, list[dict[Resource, str]]] | None,
    ) -> bool:
        """A placement afresh gives a round of moves (or a heading's first)."""
        if found is None:
            return False
        steps, _, aims = found
        return bool(steps) or bool(heads_for(aims, frozenset(), max_moves)[1])

    if heading is not None and max(util.values()) > trigger:
        toward = _toward_heading(
            heading, out, member_load, capacity, pinned, load_of, mean, max_moves
        )
        if toward is None:
            heading = None  # no schedule from here: the stage decides afresh
        else:
            for step in toward:
                shift(step.resource, step.giver, step.taker, step.load)
                moves.append(step)
            if max(util.values()) <= trigger or not heading.pending(out, load_of):
                heading = None
            return balanced(moves, returned, stopped_early=heading is not None, heading=heading)
    heading = None
    if max(util.values()) > trigger:
        frozen = frozenset(pinned)
        while len(moves) < max_moves:
            # ``members`` is in id order and max keeps the first: ties go to the lowest id.
            giver = max(members, key=util.__getitem__)
            if util[giver] <= settled:
                break
            move = _best_move(
                giver,
                out[giver],
                sorted([m for m in members if m != giver], key=util.__getitem__),
                util,
                member_load,
                capacity,
                shared,
                frozen,
                loads_of,
                may_take,
                settled,
            )
            if move is not None:
                shift(move.resource, move.giver, move.taker, move.load)
                moves.append(move)
                continue
            swap = None
            if len(moves) + 2 <= max_moves:
                swap = _best_swap(
                    giver,
                    out,
                    sorted([m for m in members if m != giver], key=util.__getitem__),
                    util,
                    member_load,
                    capacity,
                    shared,
                    frozen,
                    load_of,
                    may_take,
                )
            chain_moves: tuple[Move, ...] | None = swap
            if chain_moves is None:
                chain_moves = _best_repack(
                    giver,
                    out,
                    sorted([m for m in members if m != giver], key=util.__getitem__),
                    util,
                    member_load,
                    capacity,
                    shared,
                    frozen,
                    load_of,
                    may_take,
                    settled,
                    max_moves - len(moves),
                )
            if chain_moves is None and len(moves) < max_moves:
                # A resource moves once per round at most.
                moved = frozen.union(move.resource for move in moves)
                repacked = _toward_repartition(
                    members, out, util, member_load, capacity, shared, moved,
                    load_of, may_take, settled, trigger, max_moves - len(moves),
                )  # fmt: skip
                steps: tuple[Move, ...] = ()
                if repacked is not None:
                    steps, reached, aims = repacked
                    if aims:
                        # No round's worth of moves lowers the peak: head for
                        # a placement over rounds, if they can be scheduled.
                        heading, steps = heads_for(aims, moved, max_moves - len(moves))
                        reached = False
                if steps:
                    for step in steps:
                        shift(step.resource, step.giver, step.taker, step.load)
                        moves.append(step)
                    blocked = not reached
                    break
            if chain_moves is None and len(moves) < max_moves:
                # The placements afresh cannot be reached: walk from here.
                moved = frozen.union(move.resource for move in moves)
                walked = walk(moved, max_moves - len(moves))
                if walked is not None:
                    heading, steps = heads_for([walked], moved, max_moves - len(moves))
                    if steps:
                        for step in steps:
                            shift(step.resource, step.giver, step.taker, step.load)
                            moves.append(step)
                        blocked = True
                        break
            if chain_moves is None:
                # Nothing the busiest member holds can go anywhere useful with
                # the moves left and the pins as they are.  A later round, with
                # all of ``max_moves`` and the pins expired, may do better.
                if moves or frozen:
                    lighter = sorted([m for m in members if m != giver], key=util.__getitem__)
                    blocked = (
                        _best_swap(
                            giver,
                            out,
                            lighter,
                            util,
                            member_load,
                            capacity,
                            shared,
                            frozenset(),
                            load_of,
                            may_take,
                        )
                        is not None
                        or _best_repack(
                            giver,
                            out,
                            lighter,
                            util,
                            member_load,
                            capacity,
                            shared,
                            frozenset(),
                            load_of,
                            may_take,
                            settled,
                            max_moves,
                        )
                        is not None
                        or repartition_helps(
                            _toward_repartition(
                                members,
                                out,
                                util,
                                member_load,
                                capacity,
                                shared,
                                frozenset(),
                                load_of,
                                may_take,
                                settled,
                                trigger,
                                max_moves,
                            )
                        )
                        or walk(frozenset(), max_moves) is not None
                    )
                break
            for step in chain_moves:
                shift(step.resource, step.giver, step.taker, step.load)
                moves.append(step)
        busiest = max(members, key=util.__getitem__)
        stopped_early = util[busiest] > settled and (
            len(moves) >= max_moves
            or blocked
            or (bool(frozen) and not frozen.isdisjoint(out[busiest]))
        )
        if heading is not None and (util[busiest] <= trigger or not heading.pending(out, load_of)):
            heading = None  # reached (or near enough) in this round
    return balanced(moves, returned, stopped_early=stopped_early, heading=heading)


def _make_heading(
    aim: Mapping[Resource, str],
    members: list[str],
    out: Assignment,
    util: dict[str, float],
    counted: Mapping[str, float],
    takes: Mapping[str, frozenset[str] | None],
    load_of: Callable[[Resource], float],
    mean: float,
    tolerance: float,
    pinned: frozenset[Resource],
) -> Heading | None:
    """A :class:`Heading` for the placement ``aim`` (``resource -> member``
    for those it moves) from where ``out`` is now, bounded by the peak now;
    None when a moving resource is pinned (a later round looks again).  It is
    made for the members counted in the mean (``counted``: their capacities):
    one that takes nothing and holds nothing (leaving, draining) is no premise."""
    if not pinned.isdisjoint(aim):
        return None
    placement = {r: aim.get(r, mid) for mid in members for r in out[mid]}
    return Heading(
        placement=placement,
        moving=frozenset(aim),
        loads={r: load_of(r) for r in placement},
        capacities=dict(counted),
        kinds={m: takes[m] for m in counted},
        bound=max(util.values()) / mean,
        tolerance=tolerance,
    )


def _toward_heading(
    heading: Heading,
    out: Assignment,
    member_load: dict[str, float],
    capacity: dict[str, float],
    pinned: Collection[Resource],
    load_of: Callable[[Resource], float],
    mean: float,
    budget: int,
) -> tuple[Move, ...] | None:
    """This round's moves toward ``heading``: the first round of a schedule
    (:func:`~workgroup.assignors.balance_rounds.schedule`) that keeps every
    round's end at or below its bound; () while a resource it moves is pinned
    (the moves wait for the pin); None when no schedule is found."""
    pending: list[PendingMove] = heading.pending(out, load_of)
    if not pending:
        return ()
    if any(p.resource in pinned for p in pending):
        return ()
    limit = heading.bound * mean * (1 + _LOAD_RESOLUTION)  # rule 2: at it, within a rounding
    first = schedule(pending, member_load, capacity, limit, budget)
    if first is None:
        return None
    return tuple(Move(p.resource, p.giver, p.taker, p.load) for p in first)


def _best_move(
    giver: str,
    held: list[Resource],
    by_utilisation: list[str],
    util: dict[str, float],
    member_load: dict[str, float],
    capacity: dict[str, float],
    shared: set[Resource],
    pinned: frozenset[Resource],
    loads_of: Callable[[list[Resource]], list[float]],
    may_take: Callable[[str, Resource, str], bool],
    settled: float,
) -> Move | None:
    """The move rule 3 picks for ``giver``, or None."""
    peak = util[giver]
    finishing: tuple[float, tuple[object, ...], Resource, str] | None = None
    best: tuple[float, float, tuple[object, ...], Resource, str] | None = None
    taker_for_kind: dict[str, str | None] = {}
    giver_load, giver_capacity = member_load[giver], capacity[giver]
    for resource, load in zip(held, loads_of(held), strict=True):
        if load <= 0 or resource in pinned or resource in shared or is_standby_kind(resource[0]):
            continue
        taker: str | None
        kind = resource[0]
        cached = kind in taker_for_kind
        taker = taker_for_kind.get(kind) if cached else None
        if not cached or (taker is not None and not may_take(taker, resource, giver)):
            taker = next((m for m in by_utilisation if may_take(m, resource, giver)), None)
            if not cached:
                taker_for_kind[kind] = taker
        if taker is None:
            continue
        giver_after = (giver_load - load) / giver_capacity
        taker_after = (member_load[taker] + load) / capacity[taker]
        worst = max(giver_after, taker_after)
        if worst >= peak:
            continue  # would not lower the peak
        if giver_after <= settled and taker_after <= settled:
            if finishing is None or load <= finishing[0]:
                order = resource_sort_key(resource)
                if finishing is None or (load, order) < finishing[:2]:
                    finishing = (load, order, resource, taker)
        elif finishing is None and (best is None or worst <= best[0]):
            order = resource_sort_key(resource)
            if best is None or (worst, -load, order) < best[:3]:
                best = (worst, -load, order, resource, taker)
    if finishing is not None:
        load, _, resource, taker = finishing
        return Move(resource, giver, taker, load)
    if best is not None:
        worst, negative, _, resource, taker = best
        return Move(resource, giver, taker, -negative)
    return None


#: Lightest members :func:`_best_swap` tries as partners.
_SWAP_PARTNERS = 4


#: Loads closer than this (relative) are not told apart: the metadata carries
#: each in two bytes, scaled to its member's largest, so two equal loads
#: published by different members differ by about that much.  A swap or chain
#: that gains less exchanges equal resources, or mirrors two members.
_LOAD_RESOLUTION = 1e-3


def _best_swap(
    giver: str,
    out: Assignment,
    by_utilisation: list[str],
    util: dict[str, float],
    member_load: dict[str, float],
    capacity: dict[str, float],
    shared: set[Resource],
    pinned: frozenset[Resource],
    load_of: Callable[[Resource], float],
    may_take: Callable[[str, Resource, str], bool],
) -> tuple[Move, Move] | None:
    """When no single move lowers the busiest member (all its resources are too
    big for anyone), a swap may: ``giver`` gives ``r`` and takes back a lighter
    ``s``, moving ``load(r) - load(s)``.  Among the lightest partners, the pair
    whose difference comes nearest to evening the two members out (found by
    bisection on the partner's sorted loads), if it lowers the larger of the two."""

    def movable(resource: Resource) -> bool:
        return (
            resource not in pinned and resource not in shared and not is_standby_kind(resource[0])
        )

    peak = util[giver]
    mine = [(load_of(r), resource_sort_key(r), r) for r in out[giver] if movable(r)]
    best: tuple[float, tuple[object, ...], Move, Move] | None = None
    for taker in by_utilisation[:_SWAP_PARTNERS]:
        theirs = sorted((load_of(s), resource_sort_key(s), s) for s in out[taker] if movable(s))
        if not theirs or not mine:
            continue
        weights = [x for x, _, _ in theirs]
        # Moving ``delta`` evens the two out when both end at the same utilisation.
        even = (member_load[giver] * capacity[taker] - member_load[taker] * capacity[giver]) / (
            capacity[giver] + capacity[taker]
        )
        for load_r, order_r, r in mine:
            if not may_take(taker, r, giver):
                continue
            index = bisect.bisect_left(weights, load_r - even)
            for j in (index - 1, index):
                if not 0 <= j < len(theirs):
                    continue
                load_s, order_s, s = theirs[j]
                delta = load_r - load_s
                if delta <= 0 or not may_take(giver, s, taker):
                    continue
                worst = max(
                    (member_load[giver] - delta) / capacity[giver],
                    (member_load[taker] + delta) / capacity[taker],
                )
                if worst >= peak * (1 - _LOAD_RESOLUTION):
                    continue  # two moves for a gain below what loads can tell
                key = (order_r, order_s)
                if best is None or (worst, key) < best[:2]:
                    best = (
                        worst,
                        key,
                        Move(r, giver, taker, load_r),
                        Move(s, taker, giver, load_s),
                    )
    return (best[2], best[3]) if best is not None else None


#: Heaviest resources of the busiest member :func:`_best_repack` tries to place.
_REPACK_CANDIDATES = 4


def _best_repack(
    giver: str,
    out: Assignment,
    by_utilisation: list[str],
    util: dict[str, float],
    member_load: dict[str, float],
    capacity: dict[str, float],
    shared: set[Resource],
    pinned: frozenset[Resource],
    load_of: Callable[[Resource], float],
    may_take: Callable[[str, Resource, str], bool],
    settled: float,
    budget: int,
) -> tuple[Move, ...] | None:
    """When neither a move nor a swap lowers the busiest member (a big resource
    fits nowhere as things are), make room for it: ``giver`` gives ``r`` to a
    light ``taker``, which gives its own resources, largest first, to members
    that stay within the target (``giver`` included), until it is within the
    target too.  The chain that lowers the largest utilisation among the members
    it touches most, in at most ``budget`` moves (fewest moves on a tie); when
    every such chain is longer than ``budget``, the room-making part of one
    (:func:`_room_for`; the fewest moves), so that a later round finishes it;
    or None."""

    def movable(resource: Resource) -> bool:
        return (
            resource not in pinned and resource not in shared and not is_standby_kind(resource[0])
        )

    peak = util[giver]
    mine = sorted(
        ((load_of(r), resource_sort_key(r), r) for r in out[giver] if movable(r)),
        key=lambda item: (-item[0], item[1]),
    )[:_REPACK_CANDIDATES]
    best: tuple[float, int, tuple[object, ...], tuple[Move, ...]] | None = None
    #: When no whole chain fits ``budget``: the room-making part of one (rule 3).
    first_room: tuple[Move, ...] | None = None
    for load_r, order_r, r in mine:
        if load_r <= 0:
            continue
        for taker in by_utilisation[:_SWAP_PARTNERS]:
            if not may_take(taker, r, giver):
                continue
            load = dict(member_load)
            load[giver] -= load_r
            load[taker] += load_r
            chain = [Move(r, giver, taker, load_r)]
            receivers = [m for m in (giver, *by_utilisation) if m != taker]
            chain += _give_away(
                taker, out, receivers, load, capacity, movable, load_of, may_take,
                settled, extra=0.0, limit=budget - 1,
            )  # fmt: skip
            worst = max(load[m] / capacity[m] for m in {move.taker for move in chain} | {giver})
            if len(chain) <= budget and worst < peak * (1 - _LOAD_RESOLUTION):
                key = (worst, len(chain), order_r)
                if best is None or key < best[:3]:
                    best = (worst, len(chain), order_r, tuple(chain))
            elif best is None:
                room = _room_for(
                    r, load_r, giver, taker, out, by_utilisation, member_load, capacity,
                    movable, load_of, may_take, settled, budget,
                )  # fmt: skip
                if room is not None and (first_room is None or len(room) < len(first_room)):
                    first_room = room
    if best is not None:
        return best[3]
    return first_room


def _room_for(
    r: Resource,
    load_r: float,
    giver: str,
    taker: str,
    out: Assignment,
    by_utilisation: list[str],
    member_load: dict[str, float],
    capacity: dict[str, float],
    movable: Callable[[Resource], bool],
    load_of: Callable[[Resource], float],
    may_take: Callable[[str, Resource, str], bool],
    settled: float,
    budget: int,
) -> tuple[Move, ...] | None:
    """The room-making part of a chain too long for ``budget``: ``taker`` gives
    its own resources, largest first, to members other than ``giver`` that stay
    within the target, until ``r`` fits on it within the target; ``r`` itself
    moves in a later round (a single move then).  No member rises above the
    target, so the busiest member is no busier; None when the room cannot be
    made in ``budget`` moves."""
    load = dict(member_load)
    receivers = [m for m in by_utilisation if m not in (taker, giver)]
    room = _give_away(
        taker, out, receivers, load, capacity, movable, load_of, may_take,
        settled, extra=load_r, limit=budget,
    )  # fmt: skip
    if not room or (load[taker] + load_r) / capacity[taker] > settled:
        return None
    return tuple(room)


def _give_away(
    taker: str,
    out: Assignment,
    receivers: list[str],
    load: dict[str, float],
    capacity: dict[str, float],
    movable: Callable[[Resource], bool],
    load_of: Callable[[Resource], float],
    may_take: Callable[[str, Resource, str], bool],
    settled: float,
    *,
    extra: float,
    limit: int,
) -> list[Move]:
    """``taker``'s own resources, largest first, each to the least utilised of
    ``receivers`` that stays within the target, until ``taker`` with ``extra``
    more is within it, at most ``limit`` moves; ``load`` is updated."""
    moves: list[Move] = []
    theirs = sorted(
        ((load_of(s), resource_sort_key(s), s) for s in out[taker] if movable(s)),
        key=lambda item: (-item[0], item[1]),
    )
    for load_s, _, s in theirs:
        if load[taker] + extra <= settled * capacity[taker] or len(moves) >= limit:
            break
        if load_s <= 0:
            continue
        fits = [
            m
            for m in receivers
            if (load[m] + load_s) / capacity[m] <= settled and may_take(m, s, taker)
        ]
        if not fits:
            continue
        receiver = min(fits, key=lambda m: (load[m] / capacity[m], m))
        load[taker] -= load_s
        load[receiver] += load_s
        moves.append(Move(s, taker, receiver, load_s))
    return moves


#: Above this many movable resources, :func:`_toward_repartition` is not tried:
#: its placement walks them all, and with that many the moves, swaps and chains
#: have small resources to work with.
_REPARTITION_MAX = 5_000


def _toward_repartition(
    members: list[str],
    out: Assignment,
    util: dict[str, float],
    member_load: dict[str, float],
    capacity: dict[str, float],
    shared: set[Resource],
    pinned: frozenset[Resource],
    load_of: Callable[[Resource], float],
    may_take: Callable[[str, Resource, str], bool],
    settled: float,
    trigger: float,
    budget: int,
) -> tuple[tuple[Move, ...], bool, list[dict[Resource, str]]] | None:
    """When no move, swap or chain lowers the busiest member, place every movable
    resource afresh, largest first (rule 3): on its holder while that stays
    within the target, else on the member it leaves least utilised; or on the
    least utilised member (LPT); or as :func:`_search_placement` finds.  Of
    those within the tolerance, the one with the fewest moves: all of them when
    ``budget`` allows (a round's moves happen together), else those that each
    keep their taker below the busiest member's utilisation (or a pair that
    together does), busiest giver first, only if together they lower the peak
    (a later round goes on: the placements depend only on the loads); with
    whether they reach it.  When no such moves lower the peak: no moves and the
    placements within the tolerance (``resource -> member`` for those each
    moves; fewest moves first, then the search's fewest within the tolerance),
    for the stage to head for over rounds.  None when no placement is within
    the tolerance or nothing can move."""
    movable: list[tuple[float, tuple[object, ...], Resource, str]] = []
    placed = {m: 0.0 for m in members}
    for mid in members:
        for resource in out[mid]:
            load = load_of(resource)
            if resource in pinned or resource in shared or is_standby_kind(resource[0]):
                placed[mid] += load
            else:
                movable.append((load, resource_sort_key(resource), resource, mid))
            if len(movable) > _REPARTITION_MAX:
                return None
    movable.sort(key=lambda item: (-item[0], item[1]))

    def place(sticky: bool) -> tuple[dict[Resource, str], float]:
        """Largest first: on its holder while that stays within the target
        (``sticky``), else where it leaves the member least utilised."""
        total = dict(placed)
        target: dict[Resource, str] = {}
        for load, _, resource, holder in movable:
            if sticky and (total[holder] + load) / capacity[holder] <= settled:
                home = holder
            else:
                # Nobody may take it (its kind is no longer taken): it stays.
                fits = [m for m in members if may_take(m, resource, holder)] or [holder]
                home = min(fits, key=lambda m: ((total[m] + load) / capacity[m], m != holder, m))
            total[home] += load
            if home != holder:
                target[resource] = home
        return target, max(total[m] / capacity[m] for m in members)

    # The sticky placement moves less; the plain one (LPT) balances better; a
    # search finds what both miss where there are few enough resources.
    placements = [place(sticky=True), place(sticky=False)]
    if len(movable) <= _SEARCH_MAX:
        found = _search_placement(members, movable, placed, capacity, may_take, settled)
        if found is not None:
            placements.append(found)
    within = sorted(
        ((len(target), peak, i, target) for i, (target, peak) in enumerate(placements)
         if target and peak <= trigger),
        key=itemgetter(0, 1, 2),
    )  # fmt: skip
    if not within:
        return None
    target = within[0][3]
    load_now = dict(member_load)
    pending = [
        (load, resource, holder, target[resource])
        for load, _, resource, holder in movable
        if resource in target
    ]
    if len(pending) <= budget:
        # A round's moves happen together: only where it ends counts.
        return tuple(Move(r, giver, taker, load) for load, r, giver, taker in pending), True, []
    steps: list[Move] = []
    start_peak = max(load_now[m] / capacity[m] for m in members)

    def peak_after(*items: tuple[float, Resource, str, str]) -> float:
        after = dict(load_now)
        for load, _, giver, taker in items:
            after[giver] -= load
            after[taker] += load
        return max(after[m] / capacity[m] for m in members)

    while pending and len(steps) < budget:
        peak = max(load_now[m] / capacity[m] for m in members)
        feasible = [
            item for item in pending if (load_now[item[3]] + item[0]) / capacity[item[3]] < peak
        ]
        chosen: tuple[tuple[float, Resource, str, str], ...]
        if feasible:
            # The busiest giver first, its largest resource first (``pending`` is in that order).
            chosen = (max(feasible, key=lambda item: load_now[item[2]] / capacity[item[2]]),)
        elif len(steps) + 2 <= budget and len(pending) <= _PAIRS_FROM:
            # Two moves that only help together (a swap): the first pair, in
            # ``pending``'s order, that leaves nobody above the peak.
            pairs = (
                (first, second)
                for i, first in enumerate(pending)
                for second in pending[i + 1 :]
                if peak_after(first, second) < peak
            )
            chosen = next(pairs, ())
        else:
            chosen = ()
        if not chosen:
            break
        for item in chosen:
            load, resource, giver, taker = item
            pending.remove(item)
            load_now[giver] -= load
            load_now[taker] += load
            steps.append(Move(resource, giver, taker, load))
    if not steps or (pending and peak_after() >= start_peak * (1 - 1e-9)):
        # Moves that do not lower the peak yet cost and gain nothing by themselves.
        aims = [aim for _, _, _, aim in within]
        if len(movable) <= _SEARCH_MAX:
            # Fewer moves than the lowest peak needs: easier to split into rounds.
            near = _search_placement(members, movable, placed, capacity, may_take, trigger)
            if near is not None and near[0] and near[1] <= trigger and near[0] not in aims:
                aims.append(near[0])
        return (), False, aims
    return tuple(steps), not pending, []


#: :func:`_search_placement` is tried for at most this many movable resources
#: (its depth), and visits at most ``_SEARCH_NODES`` placements.
_SEARCH_MAX = 64
_SEARCH_NODES = 20_000


def _search_placement(
    members: list[str],
    movable: list[tuple[float, tuple[object, ...], Resource, str]],
    placed: dict[str, float],
    capacity: dict[str, float],
    may_take: Callable[[str, Resource, str], bool],
    settled: float,
) -> tuple[dict[Resource, str], float] | None:
    """Branch and bound over ``movable`` (largest first), each on its holder
    first, then on the members it leaves least utilised, in two passes of at
    most ``_SEARCH_NODES`` placements each: the lowest peak that can be
    reached (the first placement within the target ends the pass), then the
    placement reaching it (or the target) with the fewest moves.
    ``(resource -> its new member, peak)``, or None."""
    start = max(placed[m] / capacity[m] for m in members)

    def run(limit: float | None) -> tuple[float, int, list[str]] | None:
        """``limit`` None: the lowest peak; else the fewest moves within ``limit``."""
        total = dict(placed)
        homes: list[str] = []
        best: tuple[float, int, list[str]] | None = None
        visited = 0

        def search(index: int, worst: float, moves: int) -> bool:
            nonlocal best, visited
            if limit is None:
                if best is not None and worst >= best[0]:
                    return False
            elif worst > limit or (best is not None and moves >= best[1]):
                return False
            if index == len(movable):
                best = (worst, moves, list(homes))
                return worst <= settled if limit is None else moves == 0
            visited += 1
            if visited > _SEARCH_NODES:
                return True
            load, _, resource, holder = movable[index]
            options = sorted(
                (m for m in members if may_take(m, resource, holder)),
                key=lambda m: ((total[m] + load) / capacity[m], m),
            ) or [holder]  # nobody may take it: it stays
            if holder in options and (
                limit is not None or (total[holder] + load) / capacity[holder] <= settled
            ):
                options.remove(holder)
                options.insert(0, holder)
            tried: set[tuple[float, float]] = set()
            for m in options:
                shape = (total[m], capacity[m])
                if m != holder and shape in tried:
                    continue  # a member like one tried: the same placements
                tried.add(shape)
                total[m] += load
                homes.append(m)
                over = search(index + 1, max(worst, total[m] / capacity[m]), moves + (m != holder))
                homes.pop()
                total[m] -= load
                if over:
                    return True
            return False

        search(0, start, 0)
        return best

    lowest = run(None)
    if lowest is None:
        return None
    fewest = run(max(lowest[0], settled) * (1 + 1e-12))
    peak, _, chosen = fewest if fewest is not None else lowest
    target = {
        resource: home
        for (_, _, resource, holder), home in zip(movable, chosen, strict=True)
        if home != holder
    }
    return target, peak


#: :func:`_toward_repartition` looks for pairs of moves among at most this many.
_PAIRS_FROM = 200


def _changes(
    mine: Collection[Resource], held: list[Resource]
) -> tuple[list[Resource], list[Resource]]:
    """What a member gained and lost: ``held`` against ``mine`` (what it owned).

    Sticky assignors keep what a member owned, as the very same objects, first
    and often in its order: a prefix comparison (identity first, at C speed)
    settles most members; only the others build a set.
    """
    if not mine:
        return held, []
    owned = list(mine)
    if len(held) >= len(owned) and held[: len(owned)] == owned:
        return held[len(owned) :], []
    owned_set = set(owned)
    return list(filterfalse(owned_set.__contains__, held)), list(owned_set.difference(held))


def _taken_from_owners(
    changes: Mapping[str, tuple[list[Resource], list[Resource]]],
) -> list[tuple[Resource, str, str]]:
    """``(resource, owner, holder)`` for each resource the assignor gave a member
    other than its owner (the owner still being a member), in resource order:
    what one member lost and another gained."""
    lost_by: dict[Resource, str] = {}
    for owner, (_, lost) in changes.items():
        lost_by.update(zip(lost, repeat(owner)))
    if not lost_by:
        return []
    taken = [
        (resource, lost_by[resource], holder)
        for holder, (gained, _) in changes.items()
        for resource in gained
        if lost_by.get(resource, holder) != holder
    ]
    taken.sort(key=lambda item: (resource_sort_key(item[0]), item[1]))
    return taken


#: Resources to sum from scratch from which :class:`_LoadIndex` pays off.
_INDEX_FROM = 20_000


class _LoadIndex:
    """Loads by kind, then key: ``loads`` re-read for summing many resources.

    At a million resources, looking each resource up in ``loads`` costs several
    times the assignor: a tuple's hash is computed at every lookup and each
    probe of a table that large misses the cache.  One pass over ``loads``
    (in its own order, so its memory is read in sequence) files every value
    under its kind; a lookup is then two probes of small, cached tables.
    """

    def __init__(self, loads: Mapping[Resource, float], default: float) -> None:
        by_kind: defaultdict[str, dict[object, float]] = defaultdict(dict)
        for (kind, key), value in loads.items():
            by_kind[kind][key] = value
        self.by_kind = by_kind
        self.default = default
        #: ``kind -> load of its unmeasured resources`` (standby twins: 0).
        self.unmeasured = {kind: self._unmeasured(kind) for kind in by_kind}
        #: Some resource summed was not measured.
        self.missing = False

    def _unmeasured(self, kind: str) -> float:
        return 0.0 if is_standby_kind(kind) else self.default

    def load(self, resource: Resource) -> float:
        kind, key = resource
        value = self.by_kind[kind].get(key)
        return self._unmeasured(kind) if value is None else value

    def totals(self, lists: list[list[Resource]]) -> list[float]:
        """The total load of each list.

        The lists are read side by side (row by row): an assignor deals
        resources round robin, so rows visit them in the order they were
        created and laid out in memory, where list by list strides through it.
        """
        if not lists:
            return []
        rows = min(map(len, lists))
        width = len(lists)
        by_kind = self.by_kind
        try:
            values = [
                by_kind[kind][key] for kind, key in chain.from_iterable(zip(*lists, strict=False))
            ]
        except KeyError:  # some resource is not measured
            self.missing = True
            values = self.values(list(chain.from_iterable(zip(*lists, strict=False))))
        # fsum: exact, so a total does not depend on the order it is summed in
        # (the same as _sum_loads's, and so the same moves).
        return [
            math.fsum(chain(values[column::width], self.values(resources[rows:])))
            for column, resources in enumerate(lists)
        ]

    def unmeasured_in(self, resources: list[Resource]) -> bool:
        """Some resource of ``resources`` (not a standby twin) is not measured."""
        by_kind = self.by_kind
        empty: dict[object, float] = {}
        return any(
            key not in by_kind.get(kind, empty) and not is_standby_kind(kind)
            for kind, key in resources
        )

    def values(self, resources: list[Resource]) -> list[float]:
        by_kind = self.by_kind
        try:
            return [by_kind[kind][key] for kind, key in resources]
        except KeyError:  # some resource is not measured
            self.missing = True
            unmeasured = self.unmeasured
            for kind in {kind for kind, _ in resources}.difference(unmeasured):
                unmeasured[kind] = self._unmeasured(kind)
            return [by_kind[kind].get(key, unmeasured[kind]) for kind, key in resources]


def _sum_gained(
    resources: list[Resource], loads: Mapping[Resource, float], default: float
) -> tuple[float, bool]:
    """:func:`_sum_loads`, and whether some resource (not a standby twin) is
    not measured."""
    values = list(map(loads.get, resources))
    if None not in values:
        return math.fsum(values), False  # type: ignore[arg-type]
    guessed = any(
        value is None and not resource[0].endswith(STANDBY_SUFFIX)
        for resource, value in zip(resources, values, strict=True)
    )
    return _sum_loads(resources, loads, default), guessed


def _sum_loads(resources: list[Resource], loads: Mapping[Resource, float], default: float) -> float:
    values = list(map(loads.get, resources))
    if None not in values:
        return math.fsum(values)  # type: ignore[arg-type]
    return math.fsum(
        value if value is not None else (0.0 if resource[0].endswith(STANDBY_SUFFIX) else default)
        for resource, value in zip(resources, values, strict=True)
    )


def fewest_moves(
    assignment: Assignment,
    loads: Mapping[Resource, float],
    capacities: Mapping[str, float],
    limit: float,
) -> int:
    """A lower bound on the moves that bring every member to a utilisation of at
    most ``limit``: each member above it must give away at least as many
    resources as it takes when it gives its largest first."""
    needed = 0
    for mid, resources in assignment.items():
        room = limit * _positive(capacities.get(mid, 1.0))
        held = sorted((loads.get(r, 0.0) for r in resources), reverse=True)
        total = math.fsum(held)
        for load in held:
            if total <= room * (1 + 1e-12):
                break
            total -= load
            needed += 1
    return needed


def clean_loads(loads: Mapping[Resource, float]) -> dict[Resource, float]:
    """``loads`` without the values :func:`balance` cannot use (negative, NaN,
    infinite): those resources count as unmeasured."""
    return {r: x for r, x in loads.items() if 0 <= x < math.inf}


def _positive(value: float) -> float:
    return value if value > 0 and value < math.inf else 1.0


class LoadBalancing:
    """``base`` followed by :func:`balance` with the input's resource loads.

    The live leader and ``workgroup assign`` wrap their assignor in one for each
    round (:mod:`workgroup.member.pipeline`).  ``carry`` is what an earlier
    round of the same rebalance decided, whose premises the leader found still
    hold (:class:`~workgroup.member.round_plan.RoundPlan`): the round carries it out
    (neither the assignor nor the stage decides again; ``carry_stopped_early``
    is whether the deciding round was stopped early).  :attr:`decided` says
    whether the stage changed the assignor's target (or carried a decision).
    ``pinned`` lists recently moved resources; ``heading`` is the placement
    earlier rounds headed for (:mod:`~workgroup.assignors.balance_rounds`).
    The last result is kept in :attr:`last`.
    """

    def __init__(
        self,
        base: Assignor,
        *,
        tolerance: float = DEFAULT_TOLERANCE,
        target: float | None = None,
        max_moves: int = DEFAULT_MAX_MOVES,
        carry: Assignment | None = None,
        carry_stopped_early: bool = False,
        pinned: Collection[Resource] = frozenset(),
        loads: Mapping[Resource, float] | None = None,
        heading: Heading | None = None,
    ) -> None:
        check_settings(tolerance, max_moves, target)
        self.base = base
        self.name = base.name
        self.supports_cooperative = base.supports_cooperative
        self.tolerance = tolerance
        self.target = target
        self.max_moves = max_moves
        self.carry = carry
        self.carry_stopped_early = carry_stopped_early
        self.pinned = frozenset(pinned)
        self.heading = heading
        #: Loads the leader remembers from earlier rounds (the input's win); only
        #: read, so not copied (the leader's event loop builds this object).
        self.remembered: Mapping[Resource, float] = loads or {}
        self.last: Balanced | None = None
        #: The last round's target is a decision to carry out in the follow-up
        #: rounds: the stage changed the assignor's target, or carried one out.
        self.decided = False
        #: The loads the last round used (remembered ones and the input's).
        self.loads_seen: Mapping[Resource, float] = self.remembered
        #: The last round's stage moved resources between members holding a
        #: resource whose load was not measured (counted as the average): a
        #: round with every load measured may decide otherwise.
        self.guessed = False

    @property
    def exclusive(self) -> bool:
        return bool(getattr(self.base, "exclusive", True))

    def assign(self, data: AssignmentInput) -> Assignment:
        loads: Mapping[Resource, float] = data.resource_loads
        if self.remembered:
            # Only read, so shared when nobody reported (a fresh group): copying
            # a million loads costs more than summing them.
            loads = {**self.remembered, **loads} if loads else self.remembered
        self.loads_seen = loads
        self.decided = False
        self.guessed = False
        capacities = {mid: m.capacity for mid, m in data.members.items()}
        kinds = {mid: m.kinds for mid, m in data.members.items()}
        if self.carry is not None:
            carried = {mid: list(self.carry.get(mid, ())) for mid in data.members}
            if not loads:
                self.last = None
                return carried
            # Measured only (no moves: max_moves=0), as the plan decided it.
            measured = balance(
                carried, loads, capacities, tolerance=self.tolerance, max_moves=0, kinds=kinds
            )
            self.last = replace(measured, stopped_early=self.carry_stopped_early)
            self.decided = True
            return self.last.assignment
        target = self.base.assign(data)
        if not loads:
            self.last = None
            return target
        owned: dict[str, Collection[Resource]] = {mid: m.owned for mid, m in data.members.items()}
        owned_loads = {
            mid: m.owned_load for mid, m in data.members.items() if m.owned_load is not None
        }
        self.last = balance(
            target,
            loads,
            capacities,
            tolerance=self.tolerance,
            target=self.target,
            max_moves=self.max_moves,
            kinds=kinds,
            owned=owned,
            pinned=self.pinned,
            racks=RackInfo.build(data),
            exclusive=self.exclusive or isinstance(self.base, StandbyAssignor),
            owned_loads=owned_loads,
            heading=self.heading,
        )
        self.decided = bool(self.last.moves or self.last.returned)
        # The members the moves touched are where a guess decided anything (a
        # million resources over 2,000 members: 500 lookups each, not a million).
        touched = {mid for move in self.last.moves for mid in (move.giver, move.taker)}
        out = self.last.assignment
        self.guessed = self.last.gained_unmeasured or any(
            r not in loads for mid in touched for r in out.get(mid, ())
        )
        return self.last.assignment


__all__ = [
    "DEFAULT_MAX_MOVES",
    "DEFAULT_TOLERANCE",
    "Balanced",
    "LoadBalancing",
    "Move",
    "balance",
    "check_settings",
    "clean_loads",
    "fewest_moves",
]
