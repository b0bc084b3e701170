"""Planned moves with a warm-up: the leader's staging, without I/O.

A *planned move* is a resource the assignor moves from a member that is still
in the group and owns it (a member joined, balancing, a drain, a member that
hands over before it leaves) to another.  Without a warm-up it is revoked from
its owner first and handed to the next one in the follow-up round, which then
starts cold.  With one, the next owner prepares while the current owner keeps
working, and the cut-over waits until it is ready.

Rules:

1. Only members that warm up (metadata v4, ``warms_up``) are given warm-ups,
   and only when every member reads v4 assignments (the round's common
   version): in a rolling upgrade from an older release, moves stay plain.
2. A planned move whose next owner is not ready yet is *staged*: the current
   owner keeps the resource (it is neither revoked nor withheld), and the next
   owner is handed it to warm up (its assignment's ``warming``).  At most
   ``max_warmups`` warm-ups run in the group at once; those already under way
   count first (never cancelled for a new one), and moves beyond the limit
   wait with their current owner until a warm-up ends.
3. A move whose next owner reports the resource ready is *cut over*: the
   owner revokes it and the next owner is handed it in the follow-up round,
   as a plain cooperative move; it keeps warming meanwhile, so that its
   handler carries on as the active one.  The token rises then, fencing the
   old holder.
4. A warm-up ends when its move goes away (the target changed, the next
   owner left or its warm-up is cancelled): nothing was handed over, the
   current owner never stopped.  A warm-up that fails or times out reports
   ready on the member's side: the move falls back to a plain one.
5. A resource nobody owns (its owner crashed or left without a hand-over)
   is not a planned move: it is handed out at once, as before.
6. Standby twins (:mod:`workgroup.assignors.standby`) are never warmed up:
   they move as before.  A planned move of a resource to a member that holds
   its standby twin is staged as any other, with two differences: the twin
   reported ready counts as the resource ready (the move is cut over at once),
   and the member keeps the twin until it is handed the resource, so that its
   standby work goes on (a leader's standby run is its warm-up, and goes on as
   the active one: the runtime's runner, rule 8).  Other holders of that twin
   keep theirs meanwhile, and the twin is withheld from no one.

Nothing here logs: :class:`Staged` says what was done, the caller reports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from workgroup.assignors.standby import is_standby_kind, standby_kind
from workgroup.member.round_plan import RoundPlan
from workgroup.protocol.metadata import MemberMetadata
from workgroup.types import Resource, sorted_resources

#: The lowest metadata / assignment version that carries warm-ups.
WARMUP_VERSION = 4


@dataclass(frozen=True, slots=True)
class Staged:
    """What :func:`stage_warmups` did in one round (counts of resources)."""

    #: Warm-ups begun in this round.
    started: int = 0
    #: Warm-ups under way that go on.
    continuing: int = 0
    #: Ready warm-ups cut over (revoked from their owner this round).
    cut_over: int = 0
    #: Planned moves waiting for a free warm-up (``max_warmups``).
    waiting: int = 0

    @property
    def warming(self) -> int:
        """Warm-ups running after this round (cut-overs included until handed out)."""
        return self.started + self.continuing + self.cut_over


def stage_warmups(
    plan: RoundPlan,
    metadata: Mapping[str, MemberMetadata],
    *,
    max_warmups: int,
    common_version: int,
) -> tuple[RoundPlan, Staged]:
    """``plan`` with its planned moves staged (the module's rules), and what was done.

    ``plan`` is the plan of a cooperative round; ``metadata`` what each member
    sent with its JoinGroup.
    """
    if max_warmups <= 0 or common_version < WARMUP_VERSION:
        return plan, Staged()
    # Who must give up what: a withheld resource whose claimant revokes it is a planned move.
    giver: dict[Resource, str] = {}
    for member_id, revoked in plan.revoked.items():
        for resource in revoked:
            giver.setdefault(resource, member_id)
    continuing: list[tuple[str, Resource]] = []
    fresh: list[tuple[str, Resource]] = []
    cut: list[tuple[str, Resource]] = []
    #: Rule 6: standby twins their holder keeps (member, twin).
    twins_kept: list[tuple[str, Resource]] = []
    for member_id, held in plan.withheld.items():
        meta = metadata.get(member_id)
        if meta is None or not meta.warms_up or not held:
            continue
        warming = set(meta.warming)
        ready = warming.intersection(meta.ready)
        owned_twins = {r for r in meta.owned if is_standby_kind(r[0])}
        for resource in held:
            if resource not in giver or is_standby_kind(resource[0]):
                continue
            twin = (standby_kind(resource[0]), resource[1])
            if twin in owned_twins:
                twins_kept.append((member_id, twin))
                if twin in meta.ready:
                    ready.add(resource)
            if resource in ready:
                cut.append((member_id, resource))
            elif resource in warming:
                continuing.append((member_id, resource))
            else:
                fresh.append((member_id, resource))
    if not (continuing or fresh or cut):
        return plan, Staged()
    budget = max(max_warmups - len(cut) - len(continuing), 0)
    started, waiting = fresh[:budget], fresh[budget:]
    warming_out: dict[str, list[Resource]] = {}
    kept: dict[str, set[Resource]] = {}  # member -> resources it keeps this round
    unheld: dict[str, set[Resource]] = {}  # next owner -> resources no longer withheld
    for member_id, resource in cut:
        warming_out.setdefault(member_id, []).append(resource)
    for member_id, resource in [*continuing, *started]:
        warming_out.setdefault(member_id, []).append(resource)
        kept.setdefault(giver[resource], set()).add(resource)
        unheld.setdefault(member_id, set()).add(resource)
    for member_id, resource in waiting:
        kept.setdefault(giver[resource], set()).add(resource)
        unheld.setdefault(member_id, set()).add(resource)
    twins = {twin for _, twin in twins_kept}
    for member_id, twin in twins_kept:
        kept.setdefault(member_id, set()).add(twin)
    for member_id, held in plan.withheld.items():
        meta = metadata.get(member_id)
        for twin in twins.intersection(held):
            if meta is not None and twin in meta.owned:  # another standby holder keeps its own
                kept.setdefault(member_id, set()).add(twin)
    assigned = dict(plan.assigned)
    revoked_out = dict(plan.revoked)
    withheld = dict(plan.withheld)
    for member_id, resources in kept.items():
        given = set(assigned.get(member_id, ()))
        assigned[member_id] = (
            *assigned.get(member_id, ()),
            *sorted_resources(r for r in resources if r not in given),
        )
        revoked_out[member_id] = tuple(
            r for r in revoked_out.get(member_id, ()) if r not in resources
        )
    for member_id, resources in unheld.items():
        withheld[member_id] = tuple(r for r in withheld[member_id] if r not in resources)
    if twins:
        withheld = {mid: tuple(r for r in rs if r not in twins) for mid, rs in withheld.items()}
    staged = replace(
        plan,
        assigned=assigned,
        revoked=revoked_out,
        withheld=withheld,
        warming={mid: sorted_resources(rs) for mid, rs in warming_out.items()},
    )
    return staged, Staged(len(started), len(continuing), len(cut), len(waiting))


__all__ = ["WARMUP_VERSION", "Staged", "stage_warmups"]
