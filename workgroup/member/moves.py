"""Moves by reason: the leader's classification of each round's moves, without I/O.

A *move* is a resource that goes to a member that did not own it.  The leader
counts each move once, in the round it begins, and says why it happens and
how (``member.moves``, ``workgroup_moves_total{group,reason,how}``).

Rules:

1. **When.**  A move begins when its owner is told to revoke it for another
   member (a plain cooperative move), when the next owner starts warming it up
   (:mod:`~workgroup.member.warmup`: the cut-over later is the same move), or,
   under an eager protocol, when it is handed to a member other than the one
   that reported it (members revoke before they join).  A resource nobody
   owns begins and ends its move in the round that hands it out.  The
   follow-up hand-out of a move begun earlier (a revoked resource, a cut-over)
   is not counted again, nor a revocation repeated before the hand-out, nor a
   resource that waits for a free warm-up
   (``max_warmups``) until its warm-up starts.
2. **How.**  ``warmup`` when the next owner warms the resource up first,
   ``plain`` otherwise.
3. **Why** (the first that applies): ``leave`` (its owner is closing:
   ``workgroup.leaving``), ``drain`` (its owner drains: ``workgroup.draining``),
   ``balance`` (the load balancing stage moved it), ``join`` (the next owner
   joined during this rebalance), ``rebalance`` (the assignor moved it
   otherwise); for a resource nobody owns: ``failover`` (it was assigned
   before, its owner is gone) or ``catalog`` (a new resource, or the group's
   first assignment).
4. **Memory.**  :class:`MoveCounter` remembers, from round to round, the
   members seen, the newcomers of the rebalance under way (until a round with
   nothing withheld and no warm-up), the resources revoked for a move until
   they are handed out (rule 1's continuation) and those assigned (to tell
   ``failover`` from ``catalog``).  A leader with no memory yet (its first
   round) calls a resource nobody owns ``failover`` when other members own
   something (the group was running), ``catalog`` otherwise, and a member that
   owns and warms nothing a newcomer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Container, Iterable, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Literal, get_args

from workgroup.member.round_plan import DRAINING_TAG, LEAVING_TAG, RoundPlan
from workgroup.protocol.metadata import MemberMetadata
from workgroup.types import Resource

MoveReason = Literal["join", "rebalance", "balance", "drain", "leave", "failover", "catalog"]
MoveHow = Literal["warmup", "plain"]
#: Every reason and every way, in a stable order (metrics series start at 0).
MOVE_REASONS: tuple[MoveReason, ...] = get_args(MoveReason)
MOVE_HOWS: tuple[MoveHow, ...] = get_args(MoveHow)


@dataclass(frozen=True, slots=True)
class Move:
    """One move begun this round (``giver`` ``None``: nobody owned it)."""

    resource: Resource
    giver: str | None
    taker: str
    reason: MoveReason
    how: MoveHow


def classify_moves(
    plan: RoundPlan,
    metadata: Mapping[str, MemberMetadata],
    *,
    balanced: Collection[Resource] = (),
    newcomers: Collection[str] = (),
    continuing: Collection[Resource] = (),
    assigned_before: Container[Resource] | None = None,
) -> tuple[Move, ...]:
    """The moves ``plan`` begins (rules 1-3): warm-ups first, then plain moves.

    ``plan`` is the round's final plan (warm-ups staged); ``metadata`` what each
    member sent; ``balanced`` the resources the balancing stage moved this
    round; ``newcomers`` the members that joined during this rebalance;
    ``continuing`` resources revoked for a move in an earlier round;
    ``assigned_before`` what the previous round assigned (``None``: not known).
    """
    # One claimant per resource, built at C speed; those several members claim
    # (rare: assignors with several owners, a stale claim) also in ``shared``.
    owner: dict[Resource, str] = {}
    total = 0
    for member_id, member_meta in metadata.items():
        owner.update(zip(member_meta.owned, repeat(member_id), strict=False))
        total += len(member_meta.owned)
    shared: dict[Resource, list[str]] = {}
    if total != len(owner):
        for member_id, member_meta in metadata.items():
            for resource in dict.fromkeys(member_meta.owned):
                shared.setdefault(resource, []).append(member_id)

    def claimants(resource: Resource) -> list[str]:
        if resource in shared:
            return shared[resource]
        claimant = owner.get(resource)
        return [] if claimant is None else [claimant]

    # Who a revoked resource goes to: the member it is withheld from (cooperative).
    takers: dict[Resource, list[str]] = {}
    for member_id, held in plan.withheld.items():
        for resource in held:
            takers.setdefault(resource, []).append(member_id)
    target_sets: dict[str, set[Resource]] = {}

    def keeps(member_id: str, resource: Resource) -> bool:
        """``member_id``'s target has ``resource``."""
        if member_id not in target_sets:
            target_sets[member_id] = set(plan.target.get(member_id, ()))
        return resource in target_sets[member_id]

    warming_now = {r for rs in plan.warming.values() for r in rs}
    running = assigned_before is None and bool(owner)

    handing_over: dict[str, MoveReason | None] = {}

    def why(giver: str, taker: str, resource: Resource) -> MoveReason:
        if giver not in handing_over:
            tags = dict(metadata[giver].tags)
            handing_over[giver] = (
                "leave" if LEAVING_TAG in tags else "drain" if DRAINING_TAG in tags else None
            )
        state = handing_over[giver]
        if state is not None:
            return state
        if resource in balanced:
            return "balance"
        return "join" if taker in newcomers else "rebalance"

    found: dict[tuple[Resource, str], Move] = {}

    def add(resource: Resource, giver: str | None, taker: str, how: MoveHow) -> None:
        if giver is None:
            gone = running if assigned_before is None else resource in assigned_before
            reason: MoveReason = "failover" if gone else "catalog"
        else:
            reason = why(giver, taker, resource)
        found.setdefault((resource, taker), Move(resource, giver, taker, reason, how))

    for taker, warming in plan.warming.items():
        meta = metadata.get(taker)
        already = set(meta.warming) if meta is not None else set()
        for resource in warming:
            givers = [c for c in claimants(resource) if c != taker]
            if resource not in already and givers:
                add(resource, givers[0], taker, "warmup")
    for giver, revoked in plan.revoked.items():
        for resource in revoked:
            if resource in warming_now or resource in continuing:
                continue  # a cut-over (counted when its warm-up began), or revoked before
            # Not withheld: a new copy beside an owner that keeps its own (several
            # owners per resource), found in the targets.
            candidates = takers.get(resource) or [m for m in plan.target if keeps(m, resource)]
            for taker in candidates:
                if taker != giver:
                    add(resource, giver, taker, "plain")
                    break
    for taker, given in plan.assigned.items():
        meta = metadata.get(taker)
        fresh = set(given).difference(meta.owned) if meta is not None else set(given)
        if not fresh:
            continue
        warmed = set(meta.warming) if meta is not None else set()
        for resource in (r for r in given if r in fresh):
            owners = [c for c in claimants(resource) if c != taker]
            if owners:
                # Eager: reported by a member that revoked it; a member that
                # keeps it too shares it (several owners): not a move.
                if not any(keeps(c, resource) for c in owners):
                    add(resource, owners[0], taker, "plain")
            elif resource not in continuing and resource not in warmed:
                add(resource, None, taker, "plain")
    return tuple(found.values())


def count_moves(moves: Iterable[Move]) -> dict[str, int]:
    """``{reason: count}`` for a log line (reasons with no move are left out)."""
    return dict(Counter(m.reason for m in moves))


class _Union(Container[Resource]):
    """Membership in the union of resource lists, built on first use (a leader's
    round rarely asks: only for a resource nobody owns)."""

    def __init__(self, parts: Iterable[Iterable[Resource]]) -> None:
        self._parts = parts
        self._set: frozenset[Resource] | None = None

    def __contains__(self, resource: object) -> bool:
        if self._set is None:
            self._set = frozenset[Resource]().union(*self._parts)
        return resource in self._set


class MoveCounter:
    """The leader's memory between rounds (rule 4) and its running totals."""

    def __init__(self) -> None:
        self._members: frozenset[str] | None = None
        self._newcomers: set[str] = set()
        self._revoked: frozenset[Resource] = frozenset()
        self._assigned: Container[Resource] | None = None
        #: ``(reason, how) -> moves begun`` while this member led.
        self.totals: Counter[tuple[str, str]] = Counter()

    def observe(
        self,
        plan: RoundPlan,
        metadata: Mapping[str, MemberMetadata],
        *,
        balanced: Collection[Resource] = (),
    ) -> tuple[Move, ...]:
        """Classify round ``plan``'s moves, count them and remember the round."""
        members = frozenset(plan.target)
        if self._members is None:
            fresh = {mid for mid, meta in metadata.items() if not meta.owned and not meta.warming}
        else:
            fresh = set(members - self._members)
        self._newcomers = (self._newcomers | fresh) & members
        moves = classify_moves(
            plan,
            metadata,
            balanced=balanced,
            newcomers=self._newcomers,
            continuing=self._revoked,
            assigned_before=self._assigned,
        )
        self.totals.update((m.reason, m.how) for m in moves)
        self._members = members
        revoked = frozenset[Resource]().union(*plan.revoked.values())
        if self._revoked:  # those not handed out yet stay in flight
            handed = frozenset[Resource]().union(*plan.assigned.values())
            revoked |= self._revoked - handed
        self._revoked = revoked
        self._assigned = _Union(plan.target.values())
        if not plan.pending and not any(plan.warming.values()):
            self._newcomers = set()  # the rebalance is over: nobody is new any more
        return moves


__all__ = [
    "MOVE_HOWS",
    "MOVE_REASONS",
    "Move",
    "MoveCounter",
    "MoveHow",
    "MoveReason",
    "classify_moves",
    "count_moves",
]
