"""A placement reachable by construction: the balancing stage's last candidate
target, for when the placements afresh cannot be reached.

The stage's placements afresh (:func:`~workgroup.assignors.balance.balance`,
rule 3) are found without regard to where the group is; with ``max_moves`` a
round and no round ending above the peak it starts from, none of them may be
reachable, while another placement within the tolerance is.  :func:`local_search`
walks from where the group is instead.

Rules:

1. **Steps.**  A step is a move (a resource to another member) or a swap (the
   busiest member gives a resource and takes back a lighter one from another
   member); no step ends with the largest utilisation (the *peak*) above the
   one it starts from.  A resource moves once at most (the stage's heading
   never moves a resource back), so the moves, in the order found, are a
   schedule for the heading's rounds.
2. **Progress.**  Each step taken improves the group: it lowers the peak by
   more than the loads' resolution, or takes a member off the peak.  Where no
   step does, one step that keeps the peak (a *sideways* step: it makes room)
   followed by one that improves is taken as a pair.
3. **Rounds.**  Steps are laid into rounds of at most ``max_moves`` moves (the
   first round has ``budget``); a swap does not straddle two rounds.
4. **Bounded.**  At most ``_NODES`` steps are looked at in all; at most
   ``_TAKERS`` of the least utilised members are tried for a move.
5. Deterministic: members by utilisation then id, resources by load then
   :func:`~workgroup.types.resource_sort_key`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from workgroup.types import Resource, resource_sort_key

#: Steps :func:`local_search` looks at, in all.
_NODES = 20_000
#: Least utilised members a move is tried to.
_TAKERS = 4
#: Loads closer than this (relative) are not told apart (the metadata's two bytes).
_RESOLUTION = 1e-3


@dataclass(frozen=True, slots=True)
class _Step:
    """One or two moves: ``(resource, giver, taker, load)`` each."""

    moves: tuple[tuple[Resource, str, str, float], ...]


def local_search(
    members: Sequence[str],
    holdings: Mapping[str, Sequence[tuple[float, Resource]]],
    member_load: Mapping[str, float],
    capacity: Mapping[str, float],
    may_take: Callable[[str, Resource, str], bool],
    settled: float,
    trigger: float,
    budget: int,
    max_moves: int,
) -> dict[Resource, str] | None:
    """``resource -> member`` for the resources the walk moves (the module's
    rules), when it ends with every member at or below ``trigger``; None when
    it does not.  ``holdings``: each member's movable resources with their
    loads; ``member_load``: each member's load (its unmovable ones included).
    The walk stops at ``settled`` (the stage's target)."""
    if budget <= 0 or max_moves <= 0:
        return None
    load = dict(member_load)
    held: dict[str, list[tuple[float, Resource]]] = {
        m: sorted(holdings.get(m, ()), key=lambda item: (item[0], resource_sort_key(item[1])))
        for m in members
    }
    moved: dict[Resource, str] = {}
    looked = 0
    round_left = budget

    def util(m: str) -> float:
        return load[m] / capacity[m]

    def shape(changes: Mapping[str, float]) -> tuple[float, int]:
        """The peak and how many members are at it (within the resolution)."""
        utils = [(load[m] + changes.get(m, 0.0)) / capacity[m] for m in members]
        peak = max(utils)
        return peak, sum(1 for u in utils if u >= peak * (1 - _RESOLUTION))

    def changes_of(step: _Step) -> dict[str, float]:
        delta: dict[str, float] = {}
        for _, giver, taker, x in step.moves:
            delta[giver] = delta.get(giver, 0.0) - x
            delta[taker] = delta.get(taker, 0.0) + x
        return delta

    def steps(room: int) -> list[tuple[tuple[float, int], float, int, _Step]]:
        """Every step of at most ``room`` moves that does not raise the peak,
        with its shape, spread (sum of squared utilisations) and moves."""
        nonlocal looked
        peak = max(util(m) for m in members)
        limit = peak * (1 + 1e-12)
        by_util = sorted(members, key=lambda m: (util(m), m))
        found: list[tuple[tuple[float, int], float, int, _Step]] = []

        def consider(step: _Step) -> None:
            nonlocal looked
            looked += 1
            delta = changes_of(step)
            after = shape(delta)
            if after[0] > limit:
                return
            spread = sum((load[m] + x) ** 2 / capacity[m] for m, x in delta.items()) - sum(
                load[m] ** 2 / capacity[m] for m in delta
            )
            found.append((after, spread, len(step.moves), step))

        for giver in reversed(by_util):  # the busiest first
            for x, r in reversed(held[giver]):
                if looked >= _NODES:
                    return found
                if x <= 0:
                    continue
                takers = [m for m in by_util if m != giver and may_take(m, r, giver)][:_TAKERS]
                for taker in takers:
                    consider(_Step(((r, giver, taker, x),)))
        if room < 2:
            return found
        for giver in [m for m in members if util(m) >= peak * (1 - _RESOLUTION)]:
            for x, r in held[giver]:
                for partner in by_util:
                    if partner == giver or not may_take(partner, r, giver):
                        continue
                    for y, s in held[partner]:
                        if looked >= _NODES:
                            return found
                        if y >= x or not may_take(giver, s, partner):
                            continue
                        consider(_Step(((r, giver, partner, x), (s, partner, giver, y))))
        return found

    def improves(before: tuple[float, int], after: tuple[float, int]) -> bool:
        if after[0] < before[0] * (1 - _RESOLUTION):
            return True
        return after[0] <= before[0] * (1 + 1e-12) and after[1] < before[1]

    def best_improving(room: int) -> _Step | None:
        now = shape({})
        options = [o for o in steps(room) if improves(now, o[0])]
        if not options:
            return None
        return min(options, key=_order)[3]

    def take(step: _Step) -> None:
        nonlocal round_left
        if len(step.moves) > round_left:
            round_left = max_moves  # a new round: the last one ended no higher
        round_left -= len(step.moves)
        for r, giver, taker, x in step.moves:
            load[giver] -= x
            load[taker] += x
            held[giver].remove((x, r))
            moved[r] = taker

    def undo(step: _Step) -> None:
        for r, giver, taker, x in step.moves:
            load[giver] += x
            load[taker] -= x
            held[giver].append((x, r))
            held[giver].sort(key=lambda item: (item[0], resource_sort_key(item[1])))
            del moved[r]

    while max(util(m) for m in members) > settled and looked < _NODES:
        room = max(round_left, max_moves)
        step = best_improving(room)
        if step is not None:
            take(step)
            continue
        # Rule 2: a sideways step that makes room, then one that improves.
        now = shape({})
        sideways = sorted((o for o in steps(room) if not improves(now, o[0])), key=_order)
        pair: tuple[_Step, _Step] | None = None
        saved = round_left
        for _, _, _, first in sideways:
            if looked >= _NODES:
                break
            take(first)
            second = best_improving(max(round_left, max_moves))
            if second is not None:
                pair = (first, second)
            undo(first)
            round_left = saved
            if pair is not None:
                break
        if pair is None:
            break
        take(pair[0])
        take(pair[1])
    if not moved or max(util(m) for m in members) > trigger:
        return None
    return moved


def _order(option: tuple[tuple[float, int], float, int, _Step]) -> tuple[object, ...]:
    """Lowest peak, fewest members at it, fewest moves, lowest spread, then the
    resources' order."""
    (peak, at_peak), spread, moves, step = option
    return (peak, at_peak, moves, spread, [resource_sort_key(m[0]) for m in step.moves])


__all__ = ["local_search"]
