"""Numbers that describe an assignment: load balance and movement."""

from __future__ import annotations

from dataclasses import dataclass

from workgroup.assignors._common import Claims, settle_claims
from workgroup.assignors.base import Assignment, AssignmentInput


@dataclass(frozen=True, slots=True)
class AssignmentStats:
    #: ``member id -> number of resources``.
    load: dict[str, int]
    #: Max minus min load (0 when there are no members).
    spread: int
    #: Resources handed out.
    assigned: int
    #: Resources with a subscriber that nobody got.
    unassigned: int
    #: Assigned resources their new owner did not hold before: it had no claim, or
    #: its claim lost (older generation than another claim, or contested by a
    #: member of the same generation, so both had to give it up).
    moves: int
    #: The fewest moves that reach these loads: ``assigned - sum(min(owned, load))``
    #: with ``owned`` the member's claims that survive generation checks.
    min_moves: int

    def as_dict(self) -> dict[str, object]:
        return {
            "load": self.load,
            "max_minus_min": self.spread,
            "assigned": self.assigned,
            "unassigned": self.unassigned,
            "moves": self.moves,
            "min_moves": self.min_moves,
        }


def assignment_stats(
    data: AssignmentInput, assignment: Assignment, exclusive: bool = True
) -> AssignmentStats:
    """Balance and movement of ``assignment``.

    ``exclusive``: resources have one owner, so conflicting claims are settled
    as the sticky assignors settle them; pass False for assignors that give a
    resource several owners (``replicated``), whose claims all count.
    """
    members = [data.members[mid] for mid in sorted(data.members)]
    existing = {(kind, key): None for kind, keys in data.resources.items() for key in keys}
    if exclusive:
        claims = settle_claims(members, existing, subscribed_only=True)
    else:
        claims = Claims(
            owned={
                m.member_id: [
                    r for r in dict.fromkeys(m.owned) if r in existing and r[0] in m.kinds
                ]
                for m in members
            }
        )
    load = {mid: len(assignment.get(mid, [])) for mid in sorted(data.members)}
    assigned = sum(load.values())
    moves = 0
    kept_possible = 0
    for member in members:
        mine = assignment.get(member.member_id, [])
        owned = set(claims.owned[member.member_id])
        moves += sum(1 for r in mine if r not in owned)
        kept_possible += min(len(claims.owned[member.member_id]), len(mine))
    subscribed = set().union(*(m.kinds for m in members)) if members else set()
    distinct = {r for rs in assignment.values() for r in rs}
    with_subscriber = sum(len(keys) for kind, keys in data.resources.items() if kind in subscribed)
    return AssignmentStats(
        load=load,
        spread=(max(load.values()) - min(load.values())) if load else 0,
        assigned=assigned,
        unassigned=with_subscriber - len(distinct),
        moves=moves,
        min_moves=max(0, assigned - kept_possible),
    )
