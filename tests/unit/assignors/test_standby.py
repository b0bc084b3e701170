"""The standby assignor: active holders from the base, standbys apart from them,
standbys promoted when an active holder leaves."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.assignors.registry import get_assignor
from workgroup.assignors.standby import StandbyAssignor, is_standby_kind, standby_kind
from workgroup.types import Resource

KIND = "shard"
TWIN = standby_kind(KIND)


def group(
    members: list[str], keys: int, owned: Assignment | None = None, generation: int = 1
) -> AssignmentInput:
    owned = owned or {}
    return AssignmentInput(
        resources={KIND: list(range(keys)), TWIN: list(range(keys))},
        members={
            m: MemberInfo(
                m,
                frozenset({KIND, TWIN}),
                owned=tuple(owned.get(m, ())),
                generation=generation if m in owned else -1,
            )
            for m in members
        },
    )


def assignor(standbys: int) -> StandbyAssignor:
    return StandbyAssignor(get_assignor("cooperative-sticky"), standbys)


def active_of(assignment: Assignment) -> dict[Resource, list[str]]:
    holders: dict[Resource, list[str]] = {}
    for mid, resources in assignment.items():
        for kind, key in resources:
            if not is_standby_kind(kind):
                holders.setdefault((kind, key), []).append(mid)
    return holders


def standbys_of(assignment: Assignment) -> dict[Resource, list[str]]:
    holders: dict[Resource, list[str]] = {}
    for mid, resources in assignment.items():
        for kind, key in resources:
            if is_standby_kind(kind):
                holders.setdefault((KIND, key), []).append(mid)
    return holders


def check(assignment: Assignment, members: list[str], keys: int, standbys: int) -> None:
    active = active_of(assignment)
    assert sorted(active) == [(KIND, k) for k in range(keys)]
    assert all(len(h) == 1 for h in active.values())
    wanted = min(standbys, len(members) - 1)
    standby = standbys_of(assignment)
    for resource in active:
        holders = standby.get(resource, [])
        assert len(holders) == wanted
        assert len(set(holders)) == len(holders)
        assert active[resource][0] not in holders


@settings(max_examples=60, deadline=None)
@given(
    members=st.integers(min_value=1, max_value=8),
    keys=st.integers(min_value=0, max_value=40),
    standbys=st.integers(min_value=0, max_value=3),
)
def test_every_resource_has_one_active_holder_and_distinct_standbys(
    members: int, keys: int, standbys: int
) -> None:
    ids = [f"m{i}" for i in range(members)]
    assignment = assignor(standbys).assign(group(ids, keys))
    check(assignment, ids, keys, standbys)
    # Loads (active + standby) stay within one of each other.
    loads = Counter({m: len(assignment[m]) for m in ids})
    assert max(loads.values()) - min(loads.values()) <= 2
    assert assignor(standbys).assign(group(ids, keys)) == assignment  # deterministic


@settings(max_examples=40, deadline=None)
@given(
    members=st.integers(min_value=2, max_value=7),
    keys=st.integers(min_value=1, max_value=30),
    leaver=st.integers(min_value=0, max_value=6),
)
def test_a_departure_leaves_a_valid_assignment(members: int, keys: int, leaver: int) -> None:
    ids = [f"m{i}" for i in range(members)]
    before = assignor(1).assign(group(ids, keys))
    survivors = [m for m in ids if m != ids[leaver % members]]
    check(assignor(1).assign(group(survivors, keys, owned=before)), survivors, keys, 1)


def test_a_departed_holders_resources_go_to_their_standbys() -> None:
    ids = ["a", "b", "c", "d"]
    before = assignor(1).assign(group(ids, 12))
    survivors = ["a", "c", "d"]
    after = assignor(1).assign(group(survivors, 12, owned=before))
    check(after, survivors, 12, 1)
    standby_before = standbys_of(before)
    moved = [r for r, holders in active_of(before).items() if holders == ["b"]]
    assert len(moved) == 3
    # Every one of b's resources went to the member that held its standby, and
    # nothing else moved.
    assert all(active_of(after)[r][0] in standby_before[r] for r in moved)
    for member in survivors:
        kept = {r for r in before[member] if r[0] == KIND}
        assert kept <= set(after[member])


def test_standbys_stay_where_they_are_when_nothing_changes() -> None:
    ids = ["a", "b", "c", "d"]
    first = assignor(2).assign(group(ids, 12))
    again = assignor(2).assign(group(ids, 12, owned=first))
    assert {m: sorted(r) for m, r in again.items()} == {m: sorted(r) for m, r in first.items()}


def test_members_without_the_standby_kind_hold_no_standbys() -> None:
    data = group(["a", "b", "c"], 6)
    members = dict(data.members)
    members["c"] = MemberInfo("c", frozenset({KIND}))
    assignment = assignor(1).assign(AssignmentInput(resources=data.resources, members=members))
    assert all(kind == KIND for kind, _ in assignment["c"])
    assert sorted(active_of(assignment)) == [(KIND, k) for k in range(6)]
    assert all(len(holders) == 1 for holders in standbys_of(assignment).values())
    assert all("c" not in holders for holders in standbys_of(assignment).values())


# --- ready standbys (a leader's standbys warm up: MemberInfo.ready) ------------------------

LEADER = "leader"
LEADER_TWIN = standby_kind(LEADER)


def leader_group(
    members: dict[str, list[Resource]],
    ready: dict[str, list[Resource]] | None = None,
    handing_over: frozenset[str] = frozenset(),
) -> AssignmentInput:
    """One leader resource; ``handing_over`` members take no kind (drain, leave)."""
    ready = ready or {}
    return AssignmentInput(
        resources={LEADER: ["boss"], LEADER_TWIN: ["boss"]},
        members={
            m: MemberInfo(
                m,
                frozenset() if m in handing_over else frozenset({LEADER, LEADER_TWIN}),
                owned=tuple(owned),
                generation=3 if owned else -1,
                ready=frozenset(ready.get(m, ())),
            )
            for m, owned in members.items()
        },
    )


BOSS: Resource = (LEADER, "boss")
BOSS_TWIN: Resource = (LEADER_TWIN, "boss")


def leader_of(assignment: Assignment) -> list[str]:
    return [m for m, rs in assignment.items() if BOSS in rs]


def test_after_a_crash_the_ready_standby_leads_whatever_the_member_order() -> None:
    # "a" (the leader) is gone; "b" and "c" stand by; only "c" is ready.  Without
    # readiness "b" would win (same claims, lower id).
    owned: dict[str, list[Resource]] = {"b": [BOSS_TWIN], "c": [BOSS_TWIN]}
    ready = {"c": [BOSS_TWIN]}
    assert leader_of(assignor(2).assign(leader_group(owned, ready))) == ["c"]
    assert leader_of(assignor(2).assign(leader_group(owned))) == ["b"]  # none ready: as before
    assert leader_of(assignor(2).assign(leader_group(owned, {"b": [BOSS_TWIN]}))) == ["b"]


def test_a_leader_that_hands_over_goes_to_its_ready_standby() -> None:
    owned: dict[str, list[Resource]] = {"a": [BOSS], "b": [BOSS_TWIN], "c": [BOSS_TWIN]}
    ready = {"c": [BOSS_TWIN]}
    result = assignor(2).assign(leader_group(owned, ready, handing_over=frozenset({"a"})))
    assert leader_of(result) == ["c"]
    assert result["a"] == []  # it takes nothing while it hands over
    assert BOSS_TWIN not in result["c"]  # the leader holds no standby of itself


def test_a_leader_in_place_keeps_leading_however_ready_its_standbys() -> None:
    owned: dict[str, list[Resource]] = {"a": [BOSS], "b": [BOSS_TWIN], "c": [BOSS_TWIN]}
    ready = {"b": [BOSS_TWIN], "c": [BOSS_TWIN]}
    result = assignor(2).assign(leader_group(owned, ready))
    assert leader_of(result) == ["a"]
    assert sorted(m for m, rs in result.items() if BOSS_TWIN in rs) == ["b", "c"]


def test_readiness_of_another_resource_does_not_count() -> None:
    owned: dict[str, list[Resource]] = {"b": [BOSS_TWIN], "c": [BOSS_TWIN]}
    ready = {"c": [(LEADER_TWIN, "other"), BOSS]}  # not the twin of the leader's resource
    assert leader_of(assignor(2).assign(leader_group(owned, ready))) == ["b"]
