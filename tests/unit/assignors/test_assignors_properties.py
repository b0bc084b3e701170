"""Properties every assignor must keep, on random groups (hypothesis)."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from assignor_inputs import (
    check_kafka_balance,
    check_valid,
    inputs,
    is_uniform,
    member,
    shuffled,
    spread,
    subscribers,
    surviving_claims,
    with_previous,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workgroup.assignors import sticky as sticky_module
from workgroup.assignors._common import RackInfo
from workgroup.assignors.base import Assignment, AssignmentInput, Assignor, MemberInfo
from workgroup.assignors.registry import get_assignor
from workgroup.assignors.stats import assignment_stats
from workgroup.assignors.weighted import proportional_shares

# Applied test by test (a loaded profile would change every other module's tests).
# WORKGROUP_ASSIGNOR_EXAMPLES=2000 for a long hunt for counterexamples.
SETTINGS = settings(
    max_examples=int(os.environ.get("WORKGROUP_ASSIGNOR_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

SINGLE_OWNER = [
    "range",
    "round-robin",
    "sticky",
    "cooperative-sticky",
    "consistent-hash",
    "rack-aware",
    "weighted",
    "leader",
]
BALANCED = ["round-robin", "sticky", "cooperative-sticky", "rack-aware", "weighted"]
STICKY = ["sticky", "cooperative-sticky", "weighted"]


def assign(name: str, data: AssignmentInput, **options: object) -> Assignment:
    assignor: Assignor = get_assignor(name, **options)
    return assignor.assign(data)


@pytest.mark.parametrize("name", SINGLE_OWNER)
@SETTINGS
@given(data=inputs(racks=True), seed=st.integers(0, 1000))
def test_valid_and_deterministic(name: str, data: AssignmentInput, seed: int) -> None:
    assignment = assign(name, data)
    check_valid(data, assignment)
    assert assign(name, data) == assignment
    assert assign(name, shuffled(data, seed)) == assignment


@pytest.mark.parametrize("name", BALANCED)
@SETTINGS
@given(data=inputs(uniform=True, racks=True))
def test_balanced_with_identical_subscriptions(name: str, data: AssignmentInput) -> None:
    assert spread(assign(name, data)) <= 1


def test_range_balances_each_kind() -> None:
    @SETTINGS
    @given(data=inputs(uniform=True, racks=True))
    def check(data: AssignmentInput) -> None:
        assignment = assign("range", data)
        for kind in data.resources:
            loads = [sum(1 for r in rs if r[0] == kind) for rs in assignment.values()]
            assert max(loads) - min(loads) <= 1

    check()


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky", "rack-aware"])
@SETTINGS
@given(data=inputs(uniform=False, racks=True))
def test_sticky_general_path_cannot_improve_by_one_move(name: str, data: AssignmentInput) -> None:
    assignment = assign(name, data)
    load = {mid: len(rs) for mid, rs in assignment.items()}
    for mid, resources in assignment.items():
        for resource in resources:
            for other in subscribers(data, resource[0]):
                assert load[mid] <= load[other] + 1, (resource, mid, other)
    check_kafka_balance(assignment)


def smallest_possible_max_load(data: AssignmentInput) -> int:
    """Hall's bound: for every set S of kinds, the resources of S must fit on the
    members subscribing to some kind of S; the worst S decides."""
    from itertools import combinations

    kinds = [k for k in data.resources if subscribers(data, k)]
    best = 0
    for size in range(1, len(kinds) + 1):
        for chosen in combinations(kinds, size):
            count = sum(len(data.resources[k]) for k in chosen)
            holders = {m for k in chosen for m in subscribers(data, k)}
            best = max(best, -(-count // len(holders)))
    return best


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky", "rack-aware"])
@SETTINGS
@given(data=inputs(uniform=False, racks=True))
def test_sticky_general_path_largest_load_is_optimal(name: str, data: AssignmentInput) -> None:
    """Different subscriptions: the busiest member holds no more than the
    subscriptions force on someone (balanced as far as subscriptions allow).
    With rack matching in use, placing resources on their rack may give a member
    more than that, as Kafka's assignor does; Kafka's balance criterion
    still holds (the test above)."""
    assignment = assign(name, data)
    largest = max(len(rs) for rs in assignment.values())
    if RackInfo.build(data).enabled:
        assert largest >= smallest_possible_max_load(data)
    else:
        assert largest == smallest_possible_max_load(data)


@SETTINGS
@given(data=inputs(uniform=False, racks=True))
def test_sticky_raises_the_largest_load_only_for_fewer_off_rack(data: AssignmentInput) -> None:
    """With racks, the load search keeps other loads than the balanced ones only
    when fewer resources end off their member's rack than without it."""
    racks = RackInfo.build(data)

    def off_rack(assignment: Assignment) -> int:
        return sum(
            1
            for mid, rs in assignment.items()
            for r in rs
            if (rack := racks.member_racks.get(mid)) is not None
            and (on := racks.resource_racks.get(r))
            and rack not in on
        )

    searched = assign("sticky", data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sticky_module, "_SEARCH_LIMIT", 0)
        balanced = assign("sticky", data)
    assert off_rack(searched) <= off_rack(balanced)
    if max(len(rs) for rs in searched.values()) > smallest_possible_max_load(data):
        assert off_rack(searched) < off_rack(balanced)


def max_kept(data: AssignmentInput, total: int) -> int:
    """Most resources that can stay put in a balanced assignment (identical
    subscriptions): everyone keeps up to q, and r members up to q + 1."""
    n = len(data.members)
    q, r = divmod(total, n)
    owned = surviving_claims(data)
    base = sum(min(len(v), q) for v in owned.values())
    return base + min(r, sum(1 for v in owned.values() if len(v) > q))


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
@SETTINGS
@given(data=inputs(uniform=True))
def test_sticky_moves_exactly_the_minimum(name: str, data: AssignmentInput) -> None:
    """With arbitrary claims (stale, conflicting, for gone resources) the sticky
    assignors keep as many owned resources as a balanced assignment allows."""
    assignment = assign(name, data)
    total = sum(len(rs) for rs in assignment.values())
    owned = surviving_claims(data)
    kept = sum(len(set(rs) & owned[mid]) for mid, rs in assignment.items())
    assert kept == max_kept(data, total)
    for mid, resources in assignment.items():
        # Each member keeps min(owned, target) of its own resources.
        assert len(set(resources) & owned[mid]) == min(len(owned[mid]), len(resources))
    stats = assignment_stats(data, assignment)
    assert stats.moves == stats.min_moves == total - kept


@pytest.mark.parametrize("name", [*STICKY, "consistent-hash", "leader"])
@SETTINGS
@given(data=inputs(uniform=True, claims=False, max_members=8), pick=st.integers(0, 100))
def test_one_member_leaves_only_its_resources_move(
    name: str, data: AssignmentInput, pick: int
) -> None:
    before = assign(name, data)
    if len(data.members) < 2:
        return
    gone = sorted(data.members)[pick % len(data.members)]
    previous = with_previous(data, before)
    members = {mid: m for mid, m in previous.members.items() if mid != gone}
    after_data = AssignmentInput(data.resources, members)
    after = assign(name, after_data)
    check_valid(after_data, after)
    for mid in members:
        assert set(before[mid]) <= set(after[mid]), mid
    moved = sum(1 for mid, rs in after.items() for r in rs if r not in set(before[mid]))
    assert moved == len(before[gone])


@pytest.mark.parametrize("name", ["sticky", "cooperative-sticky"])
@SETTINGS
@given(data=inputs(uniform=True, claims=False, max_members=8))
def test_one_member_joins_moves_exactly_the_minimum(name: str, data: AssignmentInput) -> None:
    before = assign(name, data)
    previous = with_previous(data, before)
    kinds = next(iter(data.members.values())).kinds
    members = dict(previous.members)
    members["newcomer"] = member("newcomer", kinds)
    joined = AssignmentInput(data.resources, members)
    after = assign(name, joined)
    check_valid(joined, after)
    assert spread(after) <= 1
    total = sum(len(rs) for rs in after.values())
    moved = sum(1 for mid, rs in after.items() for r in rs if r not in set(before.get(mid, [])))
    # total - sum over members of min(owned, target)
    assert moved == total - sum(min(len(before.get(mid, [])), len(rs)) for mid, rs in after.items())
    # Only the newcomer gains; nobody else receives anything new.
    for mid in data.members:
        assert set(after[mid]) <= set(before[mid])


@SETTINGS
@given(data=inputs(uniform=True))
def test_block_fill_equals_kafka_one_by_one(data: AssignmentInput) -> None:
    """The O(resources) block fill hands out exactly what Kafka's resource-by-
    resource round robin does."""
    fast = sticky_module.sticky_assign(data)
    original = sticky_module._fill_in_blocks

    def one_by_one(unassigned, keep, under_min, at_min, min_quota):  # type: ignore[no-untyped-def]
        max_quota = min_quota + 1
        return sticky_module._fill_one_by_one(
            unassigned, keep, under_min, at_min, min_quota, max_quota, None
        )

    sticky_module._fill_in_blocks = one_by_one  # type: ignore[assignment]
    try:
        slow = sticky_module.sticky_assign(data)
    finally:
        sticky_module._fill_in_blocks = original
    assert fast == slow


@SETTINGS
@given(data=inputs(uniform=True, racks=True))
def test_rack_aware_no_trade_improves_locality(data: AssignmentInput) -> None:
    assignment = assign("rack-aware", data)
    racks = data.resource_racks

    def local(mid: str, r: tuple[str, object]) -> bool:
        rack = data.members[mid].rack
        on = racks.get(r)  # type: ignore[call-overload]
        return on is None or (rack is not None and rack in on)

    for a, ra in assignment.items():
        for r in ra:
            if local(a, r):
                continue
            for b, rb in assignment.items():
                if b == a or not local(b, r):
                    continue
                for s in rb:
                    gain = 1 + local(a, s) - local(b, s)
                    assert gain <= 0, f"trading {r} ({a}) for {s} ({b}) adds locality"


@SETTINGS
@given(data=inputs(uniform=True), capacities=st.lists(st.integers(1, 5), min_size=8, max_size=8))
def test_weighted_loads_are_proportional(data: AssignmentInput, capacities: list[int]) -> None:
    members = {
        mid: MemberInfo(mid, m.kinds, m.instance_id, m.owned, m.generation, m.rack, float(c))
        for (mid, m), c in zip(data.members.items(), capacities, strict=False)
    }
    weighted = AssignmentInput(data.resources, members)
    assignment = assign("weighted", weighted)
    check_valid(weighted, assignment)
    total = sum(len(rs) for rs in assignment.values())
    shares = proportional_shares(total, {mid: m.capacity for mid, m in members.items()})
    assert {mid: len(rs) for mid, rs in assignment.items()} == shares
    owned = surviving_claims(weighted)
    for mid, resources in assignment.items():
        assert len(set(resources) & owned[mid]) == min(len(owned[mid]), shares[mid])


@SETTINGS
@given(data=inputs(racks=True))
def test_leader_keeps_current_owner(data: AssignmentInput) -> None:
    assignment = assign("leader", data)
    owner = {r: mid for mid, rs in assignment.items() for r in rs}
    for resource, claimants in _best_claims(data).items():
        assert owner.get(resource) in claimants


def _best_claims(data: AssignmentInput) -> dict[tuple[str, object], set[str]]:
    """Valid claims of the newest generation per resource (ties: any of them)."""
    best: dict[tuple[str, object], tuple[int, set[str]]] = {}
    for mid, m in data.members.items():
        for r in m.owned:
            kind, key = r
            if kind not in m.kinds or kind not in data.resources or key not in data.resources[kind]:
                continue
            g, who = best.get(r, (-(10**9), set()))
            if m.generation > g:
                best[r] = (m.generation, {mid})
            elif m.generation == g:
                who.add(mid)
    return {r: who for r, (_, who) in best.items()}


@pytest.mark.parametrize("replicas", [1, 2, 3])
@SETTINGS
@given(data=inputs(racks=True), seed=st.integers(0, 1000))
def test_replicated_owners_distinct_and_complete(
    replicas: int, data: AssignmentInput, seed: int
) -> None:
    assignment = assign("replicated", data, replicas=replicas)
    assert set(assignment) == set(data.members)
    holders: Counter[tuple[str, object]] = Counter()
    for mid, resources in assignment.items():
        assert len(set(resources)) == len(resources)
        for kind, key in resources:
            assert kind in data.members[mid].kinds
            assert key in data.resources[kind]
            holders[(kind, key)] += 1
    for kind, keys in data.resources.items():
        n = len(subscribers(data, kind))
        for key in keys:
            assert holders[(kind, key)] == min(replicas, n)
    if is_uniform(data):
        assert spread(assignment) <= 1
    assert assign("replicated", shuffled(data, seed), replicas=replicas) == assignment


@SETTINGS
@given(data=inputs(uniform=True, claims=False, max_members=8), pick=st.integers(0, 100))
def test_replicated_mostly_keeps_replicas_when_a_member_leaves(
    data: AssignmentInput, pick: int
) -> None:
    before = assign("replicated", data, replicas=2)
    if len(data.members) < 3:
        return
    gone = sorted(data.members)[pick % len(data.members)]
    previous = with_previous(data, before)
    after_data = AssignmentInput(
        data.resources, {mid: m for mid, m in previous.members.items() if mid != gone}
    )
    after = assign("replicated", after_data, replicas=2)
    # Usually nothing of the others moves; when the departed member shared many
    # resources with the same few members, balance may force a few moves, never
    # more than the replicas that had to be re-created.
    lost = sum(len(set(before[mid]) - set(after[mid])) for mid in after_data.members)
    assert lost <= len(before[gone])
    assert spread(after) <= 1


@SETTINGS
@given(data=inputs(uniform=True, claims=False, max_members=8))
def test_consistent_hash_join_moves_only_to_newcomer(data: AssignmentInput) -> None:
    before = assign("consistent-hash", data)
    kinds = next(iter(data.members.values())).kinds
    joined = AssignmentInput(data.resources, {**data.members, "zz-new": member("zz-new", kinds)})
    after = assign("consistent-hash", joined)
    for mid in data.members:
        assert set(after[mid]) <= set(before[mid])


def test_consistent_hash_prefers_instance_id() -> None:
    data = AssignmentInput(
        {"k": range(50)},
        {
            "a-1": member("a-1", ["k"], instance_id="host-a"),
            "b-1": member("b-1", ["k"], instance_id="host-b"),
            "c-1": member("c-1", ["k"]),
        },
    )
    before = assign("consistent-hash", data)
    # host-a restarts and comes back with a new member id.
    members = dict(data.members)
    del members["a-1"]
    members["a-2"] = member("a-2", ["k"], instance_id="host-a")
    after = assign("consistent-hash", AssignmentInput(data.resources, members))
    assert after["a-2"] == before["a-1"]
    assert after["b-1"] == before["b-1"]


@SETTINGS
@given(data=inputs(racks=True))
def test_cooperative_rounds_never_hand_out_an_owned_resource(data: AssignmentInput) -> None:
    """Kafka's CooperativeStickyAssignorTest check, as a property: a round never
    gives a member a resource another member still owns; members then revoke what
    they lost, and follow-up rounds converge to a valid target.  Kafka's test
    allows 4 rounds; with racks and different subscriptions ours needs 5 in about
    one group in 1,500 (3,000 random groups of this strategy: 1 round 1,022, 2
    rounds 1,672, 3 rounds 231, 4 rounds 73, 5 rounds 2), never more."""
    current = data
    for _ in range(5):
        target = assign("cooperative-sticky", current)
        given_now = sticky_module.first_round(current, target)
        owned_by = {mid: set(m.owned) for mid, m in current.members.items()}
        for mid, resources in given_now.items():
            assert set(resources) <= set(target[mid])
            for resource in resources:
                others = [o for o, rs in owned_by.items() if o != mid and resource in rs]
                assert not others, f"{resource} handed to {mid} while {others} own it"
        if given_now == target:
            break
        current = with_previous(
            current,
            given_now,
            generation=max([m.generation for m in current.members.values()] + [0]) + 1,
        )
    else:
        raise AssertionError("cooperative rebalancing did not converge in 5 rounds")
    check_valid(current, target)
    if is_uniform(current):
        assert spread(target) <= 1
