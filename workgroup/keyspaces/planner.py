"""The leader's round for a keyspace: the next slice map from the current one.

:func:`plan_next_map` is pure and deterministic (the same inputs give the same
map, byte for byte).  One round, in order (``reshaping``, then ``balancing``):

1. slices whose owner left the group lose it, to the member warming them up
   or else to their first live standby holder (``warming``, ``standby``), if any;
2. hot slices split (a hot key ends in a one-point slice of its own), and
   slices split until the group has its lower bound of slices;
3. cold neighbours merge;
4. slices with no owner are placed, then slices move from the busiest members
   to the idlest while the budget lasts (a slice that would move but for its
   width is cut to the budget left, within the upper bound of slices);
5. every slice born in 2, 3 or 4, and every slice whose owner changed, takes a new
   token above every token the keyspace issued (``SliceMap.max_token``, or the
   ``max_token`` given if higher): tokens are fencing tokens, and a key's token
   never goes down;
6. every slice has a lease slot from the keyspace's bounded pool
   (:func:`~workgroup.keyspaces.slot_pool.assign_slots`).

The share of the hash space whose owner changed from one live member to another
is at most ``churn_budget`` (:func:`moved_share` measures it).

**A hand-over under way** (``claimed`` names what members hold, and a slice the
current map gives a live member is held by nobody: its former owner let go,
its new one has not taken it yet, as in a cooperative round's follow-up): the
round places orphans and does nothing else (steps 2, 3 and the moves of 4 wait).
Such a slice's load and sampled keys are nobody's to report, so it would count
as cold: its new owner would look idle and be given more at once, round after
round, each one pushing the member that is taking work further above the mean.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from workgroup.keyspaces.balancing import balance
from workgroup.keyspaces.errors import KeyspaceError
from workgroup.keyspaces.hashing import HASH_SPACE
from workgroup.keyspaces.loads import KeyspaceLoads
from workgroup.keyspaces.pieces import ChurnBudget, Piece, TokenCounter
from workgroup.keyspaces.reshaping import merge_pieces, split_pieces
from workgroup.keyspaces.settings import PlannerSettings
from workgroup.keyspaces.slices import Slice, SliceMap
from workgroup.keyspaces.slot_pool import assign_slots


@dataclass(frozen=True, slots=True)
class Plan:
    """A round's outcome: the next map, and what changed to make it."""

    map: SliceMap
    splits: int
    merges: int
    #: Slices that moved from one member to another (placing an orphan is not one).
    moves: int
    #: The share of the hash space whose owner changed between live members.
    moved: float
    #: The map differs from the current one (its epoch is one higher).
    changed: bool
    #: A hand-over was under way: the round only placed orphans.
    waited: bool = False


def plan_next_map(
    current: SliceMap,
    loads: KeyspaceLoads,
    members: Mapping[str, float],
    settings: PlannerSettings | None = None,
    *,
    max_token: int = 0,
    claimed: Collection[int] = (),
    warming: Mapping[int, str] | None = None,
    standby: Mapping[int, Sequence[str]] | None = None,
    refused: Mapping[int, Collection[str]] | None = None,
) -> Plan:
    """The next map of ``current``'s keyspace for ``members`` (name -> capacity > 0);
    ``claimed``: the slice ids members hold now (their slots stay taken:
    :mod:`~workgroup.keyspaces.slot_pool`); ``warming``: ``slice id -> the
    member warming it up``, which keeps a slice whose owner is gone (a drain
    or a departure with a hand-over) rather than it being placed afresh;
    ``standby``: ``slice id -> its standby holders, preferred first``: a slice
    whose owner is gone (and that nobody warms) goes to the first live one;
    ``refused``: ``slice id -> the members refusing it`` (their handler of it
    kept failing): its owner, a warming member or a standby holder that
    refuses it does not keep it, and nobody that refuses it is given it (nor
    any piece split from it) while a member that does not can take it."""
    settings = settings or PlannerSettings()
    for member, capacity in members.items():
        if not member:
            raise KeyspaceError("a member of a keyspace needs a name")
        if not (capacity > 0 and capacity < float("inf")):
            raise KeyspaceError(f"capacity of member {member!r} must be above 0, not {capacity}")
    live = frozenset(members)
    tokens = TokenCounter(max(current.max_token, max_token))
    waited = handing_over(current, live, claimed)
    # A zero budget leaves every live member's slices where they are (orphans cost none).
    budget = ChurnBudget(0 if waited else int(settings.churn_budget * HASH_SPACE), live)
    pieces = _pieces(current, loads, live, warming or {}, standby or {}, refused or {})
    splits = merges = 0
    n_members = max(len(members), 1)
    high = settings.max_slices_per_member * n_members
    if not waited:
        total = sum(piece.load for piece in pieces)
        low = settings.min_slices_per_member * n_members
        split_load = settings.imbalance_tolerance * total / n_members if total > 0 else float("inf")
        pieces, splits = split_pieces(pieces, split_load, low, high, tokens)
        pieces, merges = merge_pieces(pieces, split_load / 4, low, high, tokens, budget)
    moves, cuts = balance(
        pieces, members, settings.imbalance_tolerance, budget, tokens, high - len(pieces)
    )
    splits += cuts
    old = current.by_id()
    slices = []
    for piece in pieces:
        before = old.get(piece.id)
        token = piece.token
        if not piece.born and before is not None and before.owner != piece.owner:
            token = tokens.next()
        slices.append(Slice(piece.id, piece.start, piece.end, token, piece.owner))
    placed, retired = assign_slots(current, slices, claimed)
    if placed == current.slices:
        # Freed slots alone make no new map: they wait for the next change
        # (slot_pool rule 2), so a hand-over's follow-up rounds are no epochs.
        retired = current.retired
    changed = placed != current.slices or retired != current.retired
    next_map = SliceMap(
        current.keyspace,
        placed,
        max_token=tokens.max_token,
        epoch=current.epoch + 1 if changed else current.epoch,
        retired=retired,
    )
    moved = moved_share(current, next_map, live)
    return Plan(next_map, splits, merges, moves, moved, changed, waited)


def handing_over(current: SliceMap, live: frozenset[str], claimed: Collection[int]) -> bool:
    """Whether a slice ``current`` gives a live member is held by no member
    (``claimed``: the slice ids members hold; none at all: nothing is known of
    who holds what, and nothing is waited for)."""
    if not claimed:
        return False
    held = claimed if isinstance(claimed, frozenset | set) else frozenset(claimed)
    return any(piece.owner in live and piece.id not in held for piece in current.slices)


def _pieces(
    current: SliceMap,
    loads: KeyspaceLoads,
    live: frozenset[str],
    warming: Mapping[int, str],
    standby: Mapping[int, Sequence[str]],
    refused: Mapping[int, Collection[str]],
) -> list[Piece]:
    points = sorted(loads.keys.items())
    pieces = []
    position = 0
    for piece in current.slices:
        keys = []
        while position < len(points) and points[position][0] < piece.end:
            keys.append(points[position])
            position += 1
        sampled = sum(load for _, load in keys)
        refusing = frozenset(refused.get(piece.id, ())) & live
        if not live - refusing:
            refusing = frozenset()  # every member refuses it: better run than idle
        # A member refusing it keeps it not (an owner) nor takes it (a warming
        # member, a standby holder): placed afresh, on a member that takes it.
        holder = _holder(piece, live - refusing, warming, standby)
        pieces.append(
            Piece(
                piece.start,
                piece.end,
                piece.id,
                piece.token,
                holder,
                max(loads.slices.get(piece.id, 0.0), sampled),
                keys,
                refused_by=refusing,
            )
        )
    return pieces


def _holder(
    piece: Slice,
    live: frozenset[str],
    warming: Mapping[int, str],
    standby: Mapping[int, Sequence[str]],
) -> str | None:
    """Who holds ``piece`` as the round starts: its owner if live, else the
    live member warming it up (placed there by an earlier round: placing it
    afresh could pick another member and call the warm-up off), else its first
    live standby holder (warm already), else nobody."""
    if piece.owner in live:
        return piece.owner
    warmer = warming.get(piece.id)
    if warmer in live:
        return warmer
    return next((holder for holder in standby.get(piece.id, ()) if holder in live), None)


def moved_share(before: SliceMap, after: SliceMap, members: frozenset[str]) -> float:
    """The share of the hash space owned by one of ``members`` in ``before`` and by
    someone else (or no one) in ``after``."""
    moved = 0
    i = j = 0
    position = 0
    old, new = before.slices, after.slices
    while position < HASH_SPACE:
        end = min(old[i].end, new[j].end)
        owner = old[i].owner
        if owner is not None and owner in members and new[j].owner != owner:
            moved += end - position
        position = end
        if old[i].end == end:
            i += 1
        if new[j].end == end:
            j += 1
    return moved / HASH_SPACE


__all__ = ["Plan", "handing_over", "moved_share", "plan_next_map"]
