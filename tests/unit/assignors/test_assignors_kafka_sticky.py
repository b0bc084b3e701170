"""Cases ported from Kafka's ``AbstractStickyAssignorTest`` (same inputs, same
expected outputs), run against ``sticky`` and ``cooperative-sticky``.

Kafka's topics are kinds, partitions keys ``0..N-1``.  Where Kafka's test compares
lists the order is compared too; where it compares sets, sets.  Kafka's
``partitionsTransferringOwnership`` is what :func:`first_round` withholds.
"""

from __future__ import annotations

import pytest
from assignor_inputs import check_kafka_balance, check_valid, member, spread

from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.assignors.sticky import (
    CooperativeStickyAssignor,
    StickyAssignor,
    first_round,
)
from workgroup.types import Resource

ASSIGNORS = [StickyAssignor(), CooperativeStickyAssignor()]
T, T1, T2, T3 = "topic", "topic1", "topic2", "topic3"
C1, C2, C3, C4 = "consumer1", "consumer2", "consumer3", "consumer4"
GENERATION = 1


def tp(topic: str, partition: int) -> Resource:
    return (topic, partition)


def group(partitions: dict[str, int], *members: MemberInfo) -> AssignmentInput:
    return AssignmentInput(
        resources={t: range(n) for t, n in partitions.items()},
        members={m.member_id: m for m in members},
    )


def transferring(data: AssignmentInput, assignment: Assignment) -> dict[Resource, str]:
    """Kafka's ``partitionsTransferringOwnership``: what the first cooperative round
    holds back, and from whom."""
    first = first_round(data, assignment)
    return {r: mid for mid, rs in assignment.items() for r in rs if r not in first[mid]}


def check(data: AssignmentInput, assignment: Assignment) -> None:
    check_valid(data, assignment)
    check_kafka_balance(assignment)


@pytest.fixture(params=ASSIGNORS, ids=lambda a: a.name)
def assignor(request: pytest.FixtureRequest) -> StickyAssignor:
    chosen: StickyAssignor = request.param
    return chosen


def test_one_consumer_no_topic(assignor: StickyAssignor) -> None:
    data = group({}, member("consumer", []))
    assert assignor.assign(data) == {"consumer": []}


def test_one_consumer_nonexistent_topic(assignor: StickyAssignor) -> None:
    data = group({T: 0}, member("consumer", [T]))
    assert assignor.assign(data) == {"consumer": []}


def test_one_consumer_one_topic(assignor: StickyAssignor) -> None:
    data = group({T: 3}, member("consumer", [T]))
    assert assignor.assign(data) == {"consumer": [tp(T, 0), tp(T, 1), tp(T, 2)]}


def test_only_assigns_partitions_from_subscribed_topics(assignor: StickyAssignor) -> None:
    owned = [tp(T, 0), tp(T, 1), tp("other", 0), tp("other", 1)]
    data = group({T: 2}, member("consumer", [T], owned, GENERATION))
    assignment = assignor.assign(data)
    assert assignment == {"consumer": [tp(T, 0), tp(T, 1)]}
    assert transferring(data, assignment) == {}


def test_one_consumer_multiple_topics(assignor: StickyAssignor) -> None:
    data = group({T1: 1, T2: 2}, member("consumer", [T1, T2]))
    assert assignor.assign(data) == {"consumer": [tp(T1, 0), tp(T2, 0), tp(T2, 1)]}


def test_two_consumers_one_topic_one_partition(assignor: StickyAssignor) -> None:
    data = group({T: 1}, member(C1, [T]), member(C2, [T]))
    assignment = assignor.assign(data)
    check(data, assignment)
    assert sorted(len(v) for v in assignment.values()) == [0, 1]


def test_two_consumers_one_topic_two_partitions(assignor: StickyAssignor) -> None:
    data = group({T: 2}, member(C1, [T]), member(C2, [T]))
    assert assignor.assign(data) == {C1: [tp(T, 0)], C2: [tp(T, 1)]}


def test_multiple_consumers_mixed_topic_subscriptions(assignor: StickyAssignor) -> None:
    data = group({T1: 3, T2: 2}, member(C1, [T1]), member(C2, [T1, T2]), member(C3, [T1]))
    assert assignor.assign(data) == {
        C1: [tp(T1, 0), tp(T1, 2)],
        C2: [tp(T2, 0), tp(T2, 1)],
        C3: [tp(T1, 1)],
    }


def test_two_consumers_two_topics_six_partitions(assignor: StickyAssignor) -> None:
    data = group({T1: 3, T2: 3}, member(C1, [T1, T2]), member(C2, [T1, T2]))
    assert assignor.assign(data) == {
        C1: [tp(T1, 0), tp(T1, 2), tp(T2, 1)],
        C2: [tp(T1, 1), tp(T2, 0), tp(T2, 2)],
    }


def test_consumer_owning_min_quota_expected_max_quota(assignor: StickyAssignor) -> None:
    topics = [T1, T2]
    data = group(
        {T1: 2, T2: 3},
        member(C1, topics, [tp(T1, 0), tp(T2, 1)], GENERATION),
        member(C2, topics, [tp(T1, 1), tp(T2, 2)], GENERATION),
    )
    assignment = assignor.assign(data)
    assert assignment == {C1: [tp(T1, 0), tp(T2, 1), tp(T2, 0)], C2: [tp(T1, 1), tp(T2, 2)]}
    assert transferring(data, assignment) == {}


def test_max_quota_consumer_more_than_num_expected_max_capacity_members(
    assignor: StickyAssignor,
) -> None:
    topics = [T1, T2]
    data = group(
        {T1: 2, T2: 2},
        member(C1, topics, [tp(T1, 0), tp(T2, 0)], GENERATION),
        member(C2, topics, [tp(T1, 1), tp(T2, 1)], GENERATION),
        member(C3, topics, [], GENERATION),
    )
    assignment = assignor.assign(data)
    assert transferring(data, assignment) == {tp(T2, 0): C3}
    assert assignment == {C1: [tp(T1, 0)], C2: [tp(T1, 1), tp(T2, 1)], C3: [tp(T2, 0)]}


def test_all_consumers_are_under_min_quota(assignor: StickyAssignor) -> None:
    topics = [T1, T2]
    data = group(
        {T1: 2, T2: 3},
        member(C1, topics, [tp(T1, 0)], GENERATION),
        member(C2, topics, [tp(T1, 1)], GENERATION),
        member(C3, topics, [], GENERATION),
    )
    assignment = assignor.assign(data)
    assert transferring(data, assignment) == {}
    assert assignment == {
        C1: [tp(T1, 0), tp(T2, 1)],
        C2: [tp(T1, 1), tp(T2, 2)],
        C3: [tp(T2, 0)],
    }


def test_add_remove_consumer_one_topic(assignor: StickyAssignor) -> None:
    data = group({T: 3}, member(C1, [T]))
    assignment = assignor.assign(data)
    assert assignment == {C1: [tp(T, 0), tp(T, 1), tp(T, 2)]}

    data = group({T: 3}, member(C1, [T], assignment[C1], GENERATION), member(C2, [T]))
    assignment = assignor.assign(data)
    assert transferring(data, assignment) == {tp(T, 2): C2}
    assert assignment == {C1: [tp(T, 0), tp(T, 1)], C2: [tp(T, 2)]}

    data = group({T: 3}, member(C2, [T], assignment[C2], GENERATION))
    assignment = assignor.assign(data)
    assert set(assignment[C2]) == {tp(T, 0), tp(T, 1), tp(T, 2)}
    assert transferring(data, assignment) == {}


def test_topic_balance_after_reassignment(assignor: StickyAssignor) -> None:
    topics = [T1, T2]
    partitions = {T1: 12, T2: 12}

    def per_topic(assignment: Assignment, expected: int) -> None:
        for resources in assignment.values():
            assert sum(1 for r in resources if r[0] == T1) == expected
            assert sum(1 for r in resources if r[0] == T2) == expected

    data = group(partitions, member(C1, topics))
    assignment = assignor.assign(data)
    per_topic(assignment, 12)

    data = group(partitions, member(C1, topics, assignment[C1], GENERATION), member(C2, topics))
    assignment = assignor.assign(data)
    check(data, assignment)
    per_topic(assignment, 6)

    data = group(
        partitions,
        member(C1, topics, assignment[C1], GENERATION),
        member(C2, topics, assignment[C2], GENERATION),
        member(C3, topics),
        member(C4, topics),
    )
    assignment = assignor.assign(data)
    check(data, assignment)
    per_topic(assignment, 3)

    data = group(
        partitions,
        member(C3, topics, assignment[C3], GENERATION),
        member(C4, topics, assignment[C4], GENERATION),
    )
    assignment = assignor.assign(data)
    check(data, assignment)
    per_topic(assignment, 6)
    assert transferring(data, assignment) == {}


def test_add_remove_two_consumers_two_topics(assignor: StickyAssignor) -> None:
    topics = [T1, T2]
    partitions = {T1: 3, T2: 4}
    data = group(partitions, member(C1, topics), member(C2, topics))
    assignment = assignor.assign(data)
    assert assignment == {
        C1: [tp(T1, 0), tp(T1, 2), tp(T2, 1), tp(T2, 3)],
        C2: [tp(T1, 1), tp(T2, 0), tp(T2, 2)],
    }

    data = group(
        partitions,
        member(C1, topics, assignment[C1], GENERATION),
        member(C2, topics, assignment[C2], GENERATION),
        member(C3, topics, [], GENERATION),
        member(C4, topics, [], GENERATION),
    )
    assignment = assignor.assign(data)
    assert transferring(data, assignment) == {tp(T1, 2): C3, tp(T2, 3): C3, tp(T2, 2): C4}
    assert assignment == {
        C1: [tp(T1, 0), tp(T2, 1)],
        C2: [tp(T2, 0), tp(T1, 1)],
        C3: [tp(T1, 2), tp(T2, 3)],
        C4: [tp(T2, 2)],
    }

    data = group(
        partitions,
        member(C3, topics, assignment[C3], GENERATION),
        member(C4, topics, assignment[C4], GENERATION),
    )
    assignment = assignor.assign(data)
    assert assignment == {
        C3: [tp(T1, 2), tp(T2, 3), tp(T1, 0), tp(T2, 1)],
        C4: [tp(T2, 2), tp(T1, 1), tp(T2, 0)],
    }
    assert transferring(data, assignment) == {}


def test_poor_round_robin_assignment_scenario(assignor: StickyAssignor) -> None:
    partitions = {f"topic{i}": (i % 2) + 1 for i in range(1, 6)}
    every = list(partitions)
    odd = ["topic1", "topic3", "topic5"]
    data = group(partitions, member(C1, every), member(C2, odd), member(C3, odd), member(C4, every))
    assignment = assignor.assign(data)
    check(data, assignment)
    assert spread(assignment) <= 1


def test_add_remove_topic_two_consumers(assignor: StickyAssignor) -> None:
    data = group({T: 3}, member(C1, [T]), member(C2, [T]))
    first = assignor.assign(data)
    assert sorted(len(v) for v in first.values()) == [1, 2]

    data = group(
        {T: 3, T2: 3},
        member(C1, [T, T2], first[C1], GENERATION),
        member(C2, [T, T2], first[C2], GENERATION),
    )
    second = assignor.assign(data)
    assert transferring(data, second) == {}
    assert [len(second[C1]), len(second[C2])] == [3, 3]
    assert set(first[C1]) <= set(second[C1])
    assert set(first[C2]) <= set(second[C2])

    data = group(
        {T2: 3},
        member(C1, [T2], second[C1], GENERATION),
        member(C2, [T2], second[C2], GENERATION),
    )
    third = assignor.assign(data)
    assert transferring(data, third) == {}
    assert sorted(len(v) for v in third.values()) == [1, 2]
    assert set(third[C1]) <= set(second[C1])
    assert set(third[C2]) <= set(second[C2])


def _topic(i: int, width: int) -> str:
    return "t" + str(i).zfill(len(str(width)))


def _consumer(i: int, width: int) -> str:
    return "c" + str(i).zfill(len(str(width)))


def test_reassignment_after_one_consumer_leaves(assignor: StickyAssignor) -> None:
    partitions = {_topic(i, 20): i for i in range(1, 20)}
    members = [
        member(_consumer(i, 20), [_topic(j, 20) for j in range(1, i + 1)]) for i in range(1, 20)
    ]
    data = group(partitions, *members)
    assignment = assignor.assign(data)
    check(data, assignment)
    data = group(
        partitions,
        *(
            member(m.member_id, m.kinds, assignment[m.member_id], GENERATION)
            for m in members
            if m.member_id != "c10"
        ),
    )
    after = assignor.assign(data)
    check(data, after)


def test_reassignment_after_one_consumer_added(assignor: StickyAssignor) -> None:
    members = [member(_consumer(i, 10), ["topic"]) for i in range(1, 10)]
    data = group({"topic": 20}, *members)
    assignment = assignor.assign(data)
    check(data, assignment)
    data = group({"topic": 20}, *members, member(_consumer(10, 10), ["topic"]))
    after = assignor.assign(data)
    check(data, after)
    assert spread(after) <= 1
    assert transferring(data, after) == {}  # nobody reported owning anything


def test_same_subscriptions(assignor: StickyAssignor) -> None:
    partitions = {_topic(i, 15): i for i in range(1, 15)}
    topics = list(partitions)
    members = [member(_consumer(i, 9), topics) for i in range(1, 9)]
    data = group(partitions, *members)
    assignment = assignor.assign(data)
    check(data, assignment)
    gone = _consumer(5, 9)
    data = group(
        partitions,
        *(
            member(m.member_id, topics, assignment[m.member_id], GENERATION)
            for m in members
            if m.member_id != gone
        ),
    )
    after = assignor.assign(data)
    check(data, after)
    assert spread(after) <= 1
    assert transferring(data, after) == {}
    for mid in data.members:
        assert set(assignment[mid]) <= set(after[mid])


@pytest.mark.parametrize(
    "generations", [(1, 2, 3), (1, 3, 2), (2, 1, 3), (2, 3, 1), (3, 1, 2), (3, 2, 1)]
)
def test_subscription_not_equal_and_assign_same_partition_with_3_generation(
    assignor: StickyAssignor, generations: tuple[int, int, int]
) -> None:
    data = group(
        {T: 6, T1: 1},
        member(C1, [T], [tp(T, 0), tp(T, 2)], generations[0]),
        member(C2, [T], [tp(T, 1), tp(T, 2), tp(T, 3)], generations[1]),
        member(C3, [T], [tp(T, 2), tp(T, 4), tp(T, 5)], generations[2]),
        member(C4, [T1], [tp(T1, 0)], 2),
    )
    assignment = assignor.assign(data)
    check(data, assignment)
    for resources in assignment.values():
        assert 1 <= len(resources) <= 2


def test_move_existing_assignments(assignor: StickyAssignor) -> None:
    partitions = {f"topic{i}": 1 for i in range(1, 7)}
    data = group(
        partitions,
        member(C1, [T1, T2], [tp(T1, 0)], GENERATION),
        member(C2, [T1, T2, T3, "topic4"], [tp(T2, 0), tp(T3, 0)], GENERATION),
        member(
            C3,
            [T2, T3, "topic4", "topic5", "topic6"],
            [tp("topic4", 0), tp("topic5", 0), tp("topic6", 0)],
            GENERATION,
        ),
    )
    assignment = assignor.assign(data)
    check(data, assignment)
    # Kafka stops at loads 1, 2, 3; a chain of moves balances it fully.
    assert spread(assignment) == 0
    assert assignment[C1] == [tp(T1, 0), tp(T2, 0)]


def test_stickiness(assignor: StickyAssignor) -> None:
    members = [member(c, [T1]) for c in (C1, C2, C3, C4)]
    data = group({T1: 3}, *members)
    assignment = assignor.assign(data)
    assert all(len(v) <= 1 for v in assignment.values())
    before = {mid: rs[0] for mid, rs in assignment.items() if rs}

    data = group({T1: 3}, *(member(c, [T1], assignment[c], GENERATION) for c in (C2, C3, C4)))
    after = assignor.assign(data)
    assert transferring(data, after) == {}
    for mid, resources in after.items():
        assert len(resources) == 1
        assert mid not in before or before[mid] in resources


def test_assignment_updated_for_deleted_topic(assignor: StickyAssignor) -> None:
    data = group({T1: 1, T3: 100}, member("consumer", [T1, T2, T3]))
    assignment = assignor.assign(data)
    assert len(assignment["consumer"]) == 101


def test_no_exception_thrown_when_only_subscribed_topic_deleted(assignor: StickyAssignor) -> None:
    data = group({T: 3}, member("consumer", [T]))
    assignment = assignor.assign(data)
    data = group({}, member("consumer", [T], assignment["consumer"], GENERATION))
    assert assignor.assign(data) == {"consumer": []}


def test_all_consumers_reach_expected_quota_and_are_considered_filled(
    assignor: StickyAssignor,
) -> None:
    data = group(
        {T: 4},
        member(C1, [T], [tp(T, 0), tp(T, 1)], GENERATION),
        member(C2, [T], [tp(T, 2)], GENERATION),
        member(C3, [T], [], GENERATION),
    )
    assignment = assignor.assign(data)
    assert assignment == {C1: [tp(T, 0), tp(T, 1)], C2: [tp(T, 2)], C3: [tp(T, 3)]}
    assert transferring(data, assignment) == {}


@pytest.mark.parametrize("stale_generation", [9, -1], ids=["older", "none"])
def test_owned_partitions_are_invalidated_for_consumer_with_stale_generation(
    assignor: StickyAssignor, stale_generation: int
) -> None:
    owned = [tp(T, 0), tp(T, 2), tp(T2, 1)]
    data = group(
        {T: 3, T2: 3},
        member(C1, [T, T2], owned, 10),
        member(C2, [T, T2], owned, stale_generation),
    )
    assignment = assignor.assign(data)
    assert set(assignment[C1]) == set(owned)
    assert set(assignment[C2]) == {tp(T, 1), tp(T2, 0), tp(T2, 2)}


def test_partitions_claimed_by_multiple_consumers_in_same_generation(
    assignor: StickyAssignor,
) -> None:
    data = group(
        {T: 3},
        member(C1, [T], [tp(T, 0), tp(T, 1)], GENERATION),
        member(C2, [T], [tp(T, 0), tp(T, 2)], GENERATION),
        member(C3, [T], [], GENERATION),
    )
    assignment = assignor.assign(data)
    assert transferring(data, assignment) == {tp(T, 0): C3}
    assert assignment == {C1: [tp(T, 1)], C2: [tp(T, 2)], C3: [tp(T, 0)]}


def test_ensure_partitions_assigned_to_highest_generation(assignor: StickyAssignor) -> None:
    topics = [T, T2, T3]
    data = group(
        {T: 3, T2: 3, T3: 3},
        member(C1, topics, [tp(T, 0), tp(T2, 0), tp(T3, 0)], 10),
        member(C2, topics, [tp(T, 1), tp(T2, 1), tp(T3, 1)], 9),
        member(C3, topics, [tp(T2, 1), tp(T3, 0), tp(T3, 2)], 8),
    )
    assignment = assignor.assign(data)
    assert set(assignment[C1]) == {tp(T, 0), tp(T2, 0), tp(T3, 0)}
    assert set(assignment[C2]) == {tp(T, 1), tp(T2, 1), tp(T3, 1)}
    assert set(assignment[C3]) == {tp(T, 2), tp(T2, 2), tp(T3, 2)}


def test_no_reassignment_on_current_members(assignor: StickyAssignor) -> None:
    topics = [T, T2, T3, T1]
    data = group(
        {T: 3, T1: 3, T2: 3, T3: 3},
        member(C1, topics, [], -1),
        member(C2, topics, [tp(T, 0), tp(T2, 0), tp(T1, 0)], 9),
        member(C3, topics, [tp(T3, 2), tp(T2, 2), tp(T1, 1)], 8),
        member(C4, topics, [tp(T3, 1), tp(T, 1), tp(T, 2)], 7),
    )
    assignment = assignor.assign(data)
    assert set(assignment[C1]) == {tp(T1, 2), tp(T2, 1), tp(T3, 0)}
    assert transferring(data, assignment) == {}
    assert spread(assignment) == 0


def test_owned_partitions_are_invalidated_for_consumer_with_multiple_generation(
    assignor: StickyAssignor,
) -> None:
    data = group(
        {T: 3, T2: 3},
        member(C1, [T, T2], [tp(T, 0), tp(T2, 1), tp(T, 1)], 10),
        member(C2, [T, T2], [tp(T, 0), tp(T2, 1), tp(T2, 2)], 8),
    )
    assignment = assignor.assign(data)
    assert set(assignment[C1]) == {tp(T, 0), tp(T2, 1), tp(T, 1)}
    assert set(assignment[C2]) == {tp(T, 2), tp(T2, 2), tp(T2, 0)}


def test_large_uniform_group_then_one_leaves(assignor: StickyAssignor) -> None:
    """Kafka's testLargeAssignmentAndGroupWithUniformSubscription, scaled down
    (Kafka: 500 topics x 2,000 partitions, 2,000 consumers; see benchmarks/)."""
    topics = [_topic(i, 50) for i in range(50)]
    partitions = dict.fromkeys(topics, 200)
    members = [member(_consumer(i, 200), topics) for i in range(200)]
    data = group(partitions, *members)
    assignment = assignor.assign(data)
    check(data, assignment)
    data = group(
        partitions,
        *(member(m.member_id, topics, assignment[m.member_id], GENERATION) for m in members[1:]),
    )
    after = assignor.assign(data)
    check(data, after)
    moved = sum(1 for mid, rs in after.items() for r in rs if r not in set(assignment[mid]))
    assert moved == len(assignment[members[0].member_id])
