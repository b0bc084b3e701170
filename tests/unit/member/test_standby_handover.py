"""A planned move to a member holding the resource's standby twin
(:mod:`workgroup.member.warmup` rule 6): once the twin is ready the move is cut
over at once; until then it is staged as a warm-up and the resource stays with
its owner; the twin stays with the next owner until it is handed the resource.
Played with the standby assignor and the leader's round planning, round by round."""

from __future__ import annotations

from dataclasses import replace

from workgroup.assignors.base import AssignmentInput, MemberInfo
from workgroup.assignors.registry import get_assignor
from workgroup.assignors.standby import StandbyAssignor, standby_kind
from workgroup.member.round_plan import RoundPlan, plan_round
from workgroup.member.warmup import WARMUP_VERSION, Staged, stage_warmups
from workgroup.protocol.metadata import MemberMetadata
from workgroup.types import Resource

LEADER = "leader"
TWIN_KIND = standby_kind(LEADER)
BOSS: Resource = (LEADER, "boss")
TWIN: Resource = (TWIN_KIND, "boss")
KINDS = (LEADER, TWIN_KIND)


def meta(
    owned: tuple[Resource, ...] = (),
    ready: tuple[Resource, ...] = (),
    warming: tuple[Resource, ...] = (),
    *,
    draining: bool = False,
    warms_up: bool = True,
) -> MemberMetadata:
    return MemberMetadata(
        kinds=KINDS,
        owned=owned,
        owned_generation=3 if owned else -1,
        tags=(("workgroup.draining", "1"),) if draining else (),
        warms_up=warms_up and not draining,
        warming=warming,
        ready=ready,
    )


def play(
    metadata: dict[str, MemberMetadata], *, standbys: int = 1, max_warmups: int = 4
) -> tuple[RoundPlan, Staged]:
    """One cooperative round as the leader plays it: assignor, plan, staging."""
    members = {
        mid: MemberInfo(
            mid,
            frozenset() if dict(m.tags).get("workgroup.draining") else frozenset(m.kinds),
            owned=m.owned,
            generation=m.owned_generation,
            ready=frozenset(m.ready),
        )
        for mid, m in metadata.items()
    }
    data = AssignmentInput(resources={LEADER: ["boss"], TWIN_KIND: ["boss"]}, members=members)
    target = StandbyAssignor(get_assignor("cooperative-sticky"), standbys).assign(data)
    plan = plan_round(sorted(metadata), target, {mid: m.owned for mid, m in metadata.items()})
    return stage_warmups(plan, metadata, max_warmups=max_warmups, common_version=WARMUP_VERSION)


def owners(plan: RoundPlan, resource: Resource) -> list[str]:
    return [mid for mid, rs in plan.assigned.items() if resource in rs]


def apply(metadata: dict[str, MemberMetadata], plan: RoundPlan) -> dict[str, MemberMetadata]:
    """Each member's next JoinGroup: it owns what it was handed (readiness kept
    for what it still owns or warms)."""
    out = {}
    for mid, m in metadata.items():
        owned = plan.assigned.get(mid, ())
        warming = plan.warming.get(mid, ())
        keep = set(owned) | set(warming)
        out[mid] = replace(
            m,
            owned=owned,
            owned_generation=4 if owned else -1,
            warming=warming,
            ready=tuple(r for r in m.ready if r in keep),
        )
    return out


def test_a_drained_leader_keeps_leading_while_its_standby_is_not_ready() -> None:
    group = {"a": meta((BOSS,), draining=True), "b": meta((TWIN,))}
    plan, staged = play(group)
    assert owners(plan, BOSS) == ["a"]  # it stays put
    assert plan.revoked["a"] == ()
    assert plan.warming == {"b": (BOSS,)}  # b warms up for it...
    assert TWIN in plan.assigned["b"]  # ...with its standby, which it keeps
    assert plan.revoked["b"] == ()
    assert not plan.pending  # nothing withheld: no round until b is ready
    assert staged == Staged(started=1)
    # Still not ready, rounds later (another member joined): still put.
    group = apply(group, plan) | {"c": meta()}
    plan, staged = play(group)
    assert owners(plan, BOSS) == ["a"]
    assert TWIN in plan.assigned["b"]
    assert staged == Staged(continuing=1)


def test_once_the_standby_is_ready_the_leader_cuts_over_in_two_rounds() -> None:
    group = {"a": meta((BOSS,), draining=True), "b": meta((TWIN,), ready=(TWIN,))}
    plan, staged = play(group)
    assert staged == Staged(cut_over=1)  # its standby is its warm-up: no wait
    assert plan.revoked["a"] == (BOSS,)  # the owner lets go now
    assert owners(plan, BOSS) == []  # never two leaders: b gets it next round
    assert plan.withheld["b"] == (BOSS,)
    assert plan.pending
    assert TWIN in plan.assigned["b"]  # b's standby run goes on until it leads
    # The follow-up round: a revoked it, b is handed it and gives up the twin.
    group = apply(group, plan)
    plan, staged = play(group)
    assert owners(plan, BOSS) == ["b"]
    assert plan.revoked["b"] == (TWIN,)
    assert staged == Staged()


def test_the_ready_standby_is_chosen_and_the_other_keeps_standing_by() -> None:
    group = {
        "a": meta((BOSS,), draining=True),
        "b": meta((TWIN,)),
        "c": meta((TWIN,), ready=(TWIN,)),
    }
    plan, staged = play(group, standbys=2)
    assert staged == Staged(cut_over=1)
    assert plan.withheld["c"] == (BOSS,)
    assert TWIN in plan.assigned["b"]
    assert TWIN in plan.assigned["c"]
    assert plan.revoked["b"] == ()
    group = apply(group, plan)
    plan, _ = play(group, standbys=2)
    assert owners(plan, BOSS) == ["c"]


def test_a_standby_twin_moving_is_never_warmed_up() -> None:
    # b leads now; the twin b gave up goes to c: a plain move, no warm-up.
    group = {"b": meta((BOSS, TWIN)), "c": meta()}
    plan, staged = play(group)
    assert staged == Staged()
    assert plan.warming == {}
    assert plan.withheld["c"] == (TWIN,)


def test_members_that_do_not_warm_up_get_plain_moves() -> None:
    # A rolling upgrade: b's release knows no warm-ups; a drains: the move is plain.
    group = {"a": meta((BOSS,), draining=True), "b": meta((TWIN,), warms_up=False)}
    plan, staged = play(group)
    assert staged == Staged()
    assert plan.revoked["a"] == (BOSS,)
    assert plan.withheld["b"] == (BOSS,)
    _, staged = play({"a": meta((BOSS,), draining=True), "b": meta((TWIN,))}, max_warmups=0)
    assert staged == Staged()  # max_warmups=0: plain moves
