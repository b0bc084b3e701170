"""Sticky assignors with different subscriptions (Kafka's general path): validity,
balance by Kafka's ``isBalanced`` and stickiness on small versions of the
benchmark's uneven groups, and moves against a brute-force minimum on tiny ones."""

from __future__ import annotations

import os
import random
from itertools import product

import pytest
from assignor_inputs import (
    KINDS,
    check_kafka_balance,
    check_valid,
    inputs,
    member,
    with_previous,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workgroup.assignors.base import Assignment, AssignmentInput
from workgroup.assignors.stats import assignment_stats
from workgroup.assignors.sticky import sticky_assign
from workgroup.types import Resource

SETTINGS = settings(
    max_examples=int(os.environ.get("WORKGROUP_ASSIGNOR_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def random_group(members: int, kinds: int, keys: int, share: float, seed: int) -> AssignmentInput:
    """Each member subscribes to a random ``share`` of the kinds."""
    rng = random.Random(seed)
    names = [f"kind-{k:03d}" for k in range(kinds)]
    count = max(1, round(kinds * share))
    return AssignmentInput(
        {name: range(keys) for name in names},
        {
            f"m{i:03d}": member(f"m{i:03d}", rng.sample(names, count), generation=-1)
            for i in range(members)
        },
    )


def kafka_uneven_group(members: int, kinds: int, keys: int) -> AssignmentInput:
    """Kafka's ``testLargeAssignmentAndGroupWithNonEqualSubscription``, smaller: the
    last member subscribes to the first kind only, the others to all."""
    names = [f"kind-{k:03d}" for k in range(kinds)]
    ids = [f"m{i:03d}" for i in range(members)]
    return AssignmentInput(
        {name: range(keys) for name in names},
        {mid: member(mid, names[:1] if mid == ids[-1] else names, generation=-1) for mid in ids},
    )


GROUPS = {
    "random-20": lambda: random_group(25, 50, 4, 0.2, seed=1),
    "random-10": lambda: random_group(40, 60, 5, 0.1, seed=2),
    "kafka-uneven": lambda: kafka_uneven_group(30, 10, 60),
}


def moves(data: AssignmentInput, assignment: Assignment) -> int:
    return assignment_stats(data, assignment).moves


def check_balanced(data: AssignmentInput, assignment: Assignment) -> None:
    """Valid, and Kafka's ``isBalanced``: no member holds a resource of a kind to
    which a member with two fewer subscribes."""
    check_valid(data, assignment)
    check_kafka_balance(assignment)
    load = {mid: len(rs) for mid, rs in assignment.items()}
    for mid, resources in assignment.items():
        for kind in {r[0] for r in resources}:
            for other, info in data.members.items():
                if kind in info.kinds:
                    assert load[mid] <= load[other] + 1, (mid, other, kind)


@pytest.mark.parametrize("shape", list(GROUPS))
def test_fresh_group_is_valid_and_balanced(shape: str) -> None:
    data = GROUPS[shape]()
    assignment = sticky_assign(data)
    check_balanced(data, assignment)
    assert sticky_assign(data) == assignment


# In random-10 the departed member's kinds have few subscribers, so balance needs
# chains through other members too; the tiny brute-force property covers that.
@pytest.mark.parametrize("shape", ["random-20", "kafka-uneven"])
def test_one_member_leaves_only_its_resources_move(shape: str) -> None:
    data = GROUPS[shape]()
    before = sticky_assign(data)
    previous = with_previous(data, before)
    gone = sorted(data.members)[len(data.members) // 2]
    left = AssignmentInput(
        data.resources, {mid: m for mid, m in previous.members.items() if mid != gone}
    )
    after = sticky_assign(left)
    check_balanced(left, after)
    for mid in left.members:
        assert set(before[mid]) <= set(after[mid]), f"{mid} lost a resource"
    assert moves(left, after) == len(before[gone])


@pytest.mark.parametrize("shape", list(GROUPS))
def test_one_member_joins_and_takes_only_what_balance_requires(shape: str) -> None:
    data = GROUPS[shape]()
    before = sticky_assign(data)
    every_kind = list(data.resources)
    joined = with_previous(data, before)
    joined = AssignmentInput(
        data.resources, {**joined.members, "newcomer": member("newcomer", every_kind)}
    )
    after = sticky_assign(joined)
    check_balanced(joined, after)
    # Only the newcomer receives anything; each resource it takes moves once.
    for mid in data.members:
        assert set(after[mid]) <= set(before[mid]), f"{mid} received a resource"
    assert moves(joined, after) == len(after["newcomer"])
    stats = assignment_stats(joined, after)
    assert stats.moves == stats.min_moves


def test_joining_newcomer_takes_from_the_busiest_members() -> None:
    # a and b hold 4 each of x, c holds 3 of y; the newcomer subscribes to x only:
    # it takes one from a and one from b (3, 3, 3, 2), never from c.
    data = AssignmentInput(
        {"x": range(8), "y": range(3)},
        {
            "a": member("a", ["x"], owned=[("x", k) for k in range(4)]),
            "b": member("b", ["x"], owned=[("x", k) for k in range(4, 8)]),
            "c": member("c", ["x", "y"], owned=[("y", k) for k in range(3)]),
            "n": member("n", ["x"], generation=-1),
        },
    )
    after = sticky_assign(data)
    check_balanced(data, after)
    assert sorted(len(rs) for rs in after.values()) == [2, 3, 3, 3]
    assert set(after["c"]) == {("y", 0), ("y", 1), ("y", 2)}
    assert moves(data, after) == 2


def test_chain_of_moves_balances_where_single_moves_cannot() -> None:
    # Loads 4, 3, 2 satisfy Kafka's isBalanced (a and c share no kind, the others
    # differ by one), but a chain a -> b -> c evens them out with two moves.
    data = AssignmentInput(
        {"x": range(4), "y": range(5)},
        {
            "a": member("a", ["x"], owned=[("x", k) for k in range(4)]),
            "b": member("b", ["x", "y"], owned=[("y", k) for k in range(3)]),
            "c": member("c", ["y"], owned=[("y", 3), ("y", 4)]),
        },
    )
    after = sticky_assign(data)
    check_balanced(data, after)
    assert sorted(len(rs) for rs in after.values()) == [3, 3, 3]
    assert moves(data, after) == 2


def fewest_moves(data: AssignmentInput, loads: list[int]) -> int | None:
    """The fewest moves of any valid assignment whose sorted loads are ``loads``
    (every balanced, optimal semi-matching has the same sorted loads)."""
    resources: list[Resource] = [
        (kind, key) for kind, keys in data.resources.items() for key in keys
    ]
    ids = sorted(data.members)
    options = [[m for m in ids if r[0] in data.members[m].kinds] for r in resources]
    placed = [(r, subs) for r, subs in zip(resources, options, strict=True) if subs]
    best: int | None = None
    for choice in product(*(subs for _, subs in placed)):
        candidate: Assignment = {mid: [] for mid in ids}
        for (resource, _), mid in zip(placed, choice, strict=True):
            candidate[mid].append(resource)
        if sorted(len(rs) for rs in candidate.values()) != loads:
            continue
        count = moves(data, candidate)
        if best is None or count < best:
            best = count
    return best


@st.composite
def tiny_groups(draw: st.DrawFn) -> AssignmentInput:
    """At most 4 members and 7 resources, random subscriptions and claims (stale
    and conflicting ones included): small enough to try every assignment."""
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    while sum(sizes) > 7:
        sizes.pop()
    resources = {kind: range(size) for kind, size in zip(KINDS, sizes, strict=False)}
    every = [(kind, key) for kind, keys in resources.items() for key in keys]
    members = {}
    for mid in ["a", "b", "c", "d"][: draw(st.integers(1, 4))]:
        kinds = draw(st.lists(st.sampled_from(list(resources)), min_size=1, unique=True))
        owned = draw(st.lists(st.sampled_from(every), max_size=4, unique=True))
        members[mid] = member(mid, kinds, owned, generation=draw(st.integers(-1, 2)))
    return AssignmentInput(resources, members)


@SETTINGS
@given(data=tiny_groups())
def test_moves_are_the_brute_force_minimum(data: AssignmentInput) -> None:
    """No valid assignment with the same (optimal) loads moves fewer resources."""
    assignment = sticky_assign(data)
    check_balanced(data, assignment)
    best = fewest_moves(data, sorted(len(rs) for rs in assignment.values()))
    assert moves(data, assignment) == best


@SETTINGS
@given(data=inputs(uniform=False, claims=False))
def test_newcomer_to_every_kind_is_the_only_member_that_receives(data: AssignmentInput) -> None:
    before = sticky_assign(data)
    previous = with_previous(data, before)
    joined = AssignmentInput(
        data.resources, {**previous.members, "zz-new": member("zz-new", list(data.resources))}
    )
    after = sticky_assign(joined)
    check_balanced(joined, after)
    for mid in data.members:
        assert set(after[mid]) <= set(before[mid]), f"{mid} received a resource"


def test_a_member_given_a_resource_before_its_counts_were_read_gives_only_what_it_holds() -> None:
    """Found by hypothesis: ``0`` takes ``b0`` from ``1`` before the balancer had
    read what ``0`` holds; its counts then showed ``b0`` twice, and the chain
    that passed ``beta`` on from ``0`` a second time found nothing to give."""
    abg, ab = ["alpha", "beta", "gamma"], ["alpha", "beta"]
    owned: list[Resource] = [("beta", "b0"), ("gamma", "g0"), ("gamma", "g1"), ("gamma", "g2")]
    data = AssignmentInput(
        {"alpha": [], "beta": ["b0"], "gamma": ["g0", "g1", "g2"], "delta": []},
        {
            "0": member("0", abg, generation=0),
            "1": member("1", abg, owned, generation=0),
            "2": member("2", [], generation=0),
            "3": member("3", [], generation=0),
            "00": member("00", [], generation=0),
            "000": member("000", ab, generation=0),
            "0000": member("0000", ab, generation=0),
        },
    )
    assignment = sticky_assign(data)
    check_valid(data, assignment)
    check_kafka_balance(assignment)
    assert sorted(len(rs) for rs in assignment.values() if rs) == [1, 1, 2]
