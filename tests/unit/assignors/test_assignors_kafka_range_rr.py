"""Cases ported from Kafka's ``RangeAssignorTest`` and ``RoundRobinAssignorTest``
(same inputs, same expected outputs; Kafka compares these as sets)."""

from __future__ import annotations

import pytest
from assignor_inputs import check_valid, member

from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.assignors.range import RangeAssignor
from workgroup.assignors.round_robin import RoundRobinAssignor
from workgroup.types import Resource

T1, T2 = "topic1", "topic2"
C1, C2, C3, C4 = "consumer1", "consumer2", "consumer3", "consumer4"


def tp(topic: str, partition: int) -> Resource:
    return (topic, partition)


def group(partitions: dict[str, int], *members: MemberInfo) -> AssignmentInput:
    return AssignmentInput(
        {t: range(n) for t, n in partitions.items()}, {m.member_id: m for m in members}
    )


def as_sets(assignment: Assignment) -> dict[str, set[Resource]]:
    return {mid: set(rs) for mid, rs in assignment.items()}


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor()], ids=lambda a: a.name)
class TestCommon:
    def test_one_consumer_no_topic(self, assignor: RangeAssignor) -> None:
        assert assignor.assign(group({}, member(C1, [T1]))) == {C1: []}

    def test_one_consumer_nonexistent_topic(self, assignor: RangeAssignor) -> None:
        assert assignor.assign(group({T1: 0}, member(C1, [T1]))) == {C1: []}

    def test_one_consumer_one_topic(self, assignor: RangeAssignor) -> None:
        result = assignor.assign(group({T1: 3}, member(C1, [T1])))
        assert as_sets(result) == {C1: {tp(T1, 0), tp(T1, 1), tp(T1, 2)}}

    def test_only_assigns_partitions_from_subscribed_topics(self, assignor: RangeAssignor) -> None:
        result = assignor.assign(group({T1: 3, "other": 3}, member(C1, [T1])))
        assert as_sets(result) == {C1: {tp(T1, 0), tp(T1, 1), tp(T1, 2)}}

    def test_one_consumer_multiple_topics(self, assignor: RangeAssignor) -> None:
        result = assignor.assign(group({T1: 1, T2: 2}, member(C1, [T1, T2])))
        assert as_sets(result) == {C1: {tp(T1, 0), tp(T2, 0), tp(T2, 1)}}

    def test_two_consumers_one_topic_one_partition(self, assignor: RangeAssignor) -> None:
        result = assignor.assign(group({T1: 1}, member(C1, [T1]), member(C2, [T1])))
        assert as_sets(result) == {C1: {tp(T1, 0)}, C2: set()}

    def test_two_consumers_one_topic_two_partitions(self, assignor: RangeAssignor) -> None:
        result = assignor.assign(group({T1: 2}, member(C1, [T1]), member(C2, [T1])))
        assert as_sets(result) == {C1: {tp(T1, 0)}, C2: {tp(T1, 1)}}


def test_range_multiple_consumers_mixed_topics() -> None:
    data = group({T1: 3, T2: 2}, member(C1, [T1]), member(C2, [T1, T2]), member(C3, [T1]))
    assert as_sets(RangeAssignor().assign(data)) == {
        C1: {tp(T1, 0)},
        C2: {tp(T1, 1), tp(T2, 0), tp(T2, 1)},
        C3: {tp(T1, 2)},
    }


def test_range_two_consumers_two_topics_six_partitions() -> None:
    data = group({T1: 3, T2: 3}, member(C1, [T1, T2]), member(C2, [T1, T2]))
    assert as_sets(RangeAssignor().assign(data)) == {
        C1: {tp(T1, 0), tp(T1, 1), tp(T2, 0), tp(T2, 1)},
        C2: {tp(T1, 2), tp(T2, 2)},
    }


def test_range_two_static_consumers_two_topics_six_partitions() -> None:
    # consumer-b sorts after consumer-a, but its instance id sorts first.
    data = group(
        {T1: 3, T2: 3},
        member("consumer-b", [T1, T2], instance_id="instance1"),
        member("consumer-a", [T1, T2], instance_id="instance2"),
    )
    assert as_sets(RangeAssignor().assign(data)) == {
        "consumer-b": {tp(T1, 0), tp(T1, 1), tp(T2, 0), tp(T2, 1)},
        "consumer-a": {tp(T1, 2), tp(T2, 2)},
    }


def test_range_one_static_consumer_and_one_dynamic_consumer() -> None:
    data = group(
        {T1: 3, T2: 3},
        member("consumer-b", [T1, T2], instance_id="instance1"),
        member("consumer-a", [T1, T2]),
    )
    assert as_sets(RangeAssignor().assign(data)) == {
        "consumer-b": {tp(T1, 0), tp(T1, 1), tp(T2, 0), tp(T2, 1)},
        "consumer-a": {tp(T1, 2), tp(T2, 2)},
    }


STATIC = [(C1, "instance1"), (C2, "instance2"), (C3, "instance3")]


def test_range_static_member_assignment_persistent() -> None:
    statics = [member(mid, [T1, T2], instance_id=iid) for mid, iid in STATIC]
    data = group({T1: 5, T2: 4}, *statics, member(C4, [T1, T2]))
    expected = {
        C1: {tp(T1, 0), tp(T1, 1), tp(T2, 0)},
        C2: {tp(T1, 2), tp(T2, 1)},
        C3: {tp(T1, 3), tp(T2, 2)},
        C4: {tp(T1, 4), tp(T2, 3)},
    }
    assert as_sets(RangeAssignor().assign(data)) == expected
    # Replace the dynamic member with another one: the static members keep theirs.
    data = group({T1: 5, T2: 4}, *statics, member("consumer5", [T1, T2]))
    expected["consumer5"] = expected.pop(C4)
    assert as_sets(RangeAssignor().assign(data)) == expected


def by_instance(data: AssignmentInput, assignment: Assignment) -> dict[str, set[Resource]]:
    return {
        m.instance_id: set(assignment[mid])
        for mid, m in data.members.items()
        if m.instance_id is not None
    }


@pytest.mark.parametrize("assignor", [RangeAssignor(), RoundRobinAssignor()], ids=lambda a: a.name)
def test_static_member_assignment_persistent_after_member_id_changes(
    assignor: RangeAssignor,
) -> None:
    data = group({T1: 5, T2: 5}, *(member(mid, [T1, T2], instance_id=iid) for mid, iid in STATIC))
    before = by_instance(data, assignor.assign(data))
    if isinstance(assignor, RangeAssignor):
        assert before == {
            "instance1": {tp(T1, 0), tp(T1, 1), tp(T2, 0), tp(T2, 1)},
            "instance2": {tp(T1, 2), tp(T1, 3), tp(T2, 2), tp(T2, 3)},
            "instance3": {tp(T1, 4), tp(T2, 4)},
        }
    # Restarted static members come back with new member ids.
    renamed = group(
        {T1: 5, T2: 5},
        member(C1, [T1, T2], instance_id="instance1"),
        member("consumer5", [T1, T2], instance_id="instance2"),
        member(C4, [T1, T2], instance_id="instance3"),
    )
    assert by_instance(renamed, assignor.assign(renamed)) == before


def test_round_robin_multiple_consumers_mixed_topics() -> None:
    data = group({T1: 3, T2: 2}, member(C1, [T1]), member(C2, [T1, T2]), member(C3, [T1]))
    assert as_sets(RoundRobinAssignor().assign(data)) == {
        C1: {tp(T1, 0)},
        C2: {tp(T1, 1), tp(T2, 0), tp(T2, 1)},
        C3: {tp(T1, 2)},
    }


def test_round_robin_two_consumers_two_topics_six_partitions() -> None:
    data = group({T1: 3, T2: 3}, member(C1, [T1, T2]), member(C2, [T1, T2]))
    assert as_sets(RoundRobinAssignor().assign(data)) == {
        C1: {tp(T1, 0), tp(T1, 2), tp(T2, 1)},
        C2: {tp(T1, 1), tp(T2, 0), tp(T2, 2)},
    }


def test_round_robin_documented_example() -> None:
    # RoundRobinAssignor's javadoc: C0 on t0; C1 on t0, t1; C2 on t0, t1, t2.
    data = group(
        {"t0": 1, "t1": 2, "t2": 3},
        member("C0", ["t0"]),
        member("C1", ["t0", "t1"]),
        member("C2", ["t0", "t1", "t2"]),
    )
    assert as_sets(RoundRobinAssignor().assign(data)) == {
        "C0": {tp("t0", 0)},
        "C1": {tp("t1", 0)},
        "C2": {tp("t1", 1), tp("t2", 0), tp("t2", 1), tp("t2", 2)},
    }


def test_round_robin_static_members_first() -> None:
    data = group(
        {T1: 3, T2: 3},
        member("consumer-b", [T1, T2], instance_id="instance1"),
        member("consumer-a", [T1, T2]),
    )
    assert as_sets(RoundRobinAssignor().assign(data)) == {
        "consumer-b": {tp(T1, 0), tp(T1, 2), tp(T2, 1)},
        "consumer-a": {tp(T1, 1), tp(T2, 0), tp(T2, 2)},
    }


def test_range_rack_matching_keeps_shares_and_co_partitioning() -> None:
    # Two co-partitioned kinds, three members on racks a, b, c; key i lives on
    # rack "abc"[i % 3].  Each member takes the keys on its rack, in step across
    # the two kinds, and shares stay at two keys per kind.
    racks = {(k, i): frozenset("abc"[i % 3]) for k in (T1, T2) for i in range(6)}
    data = AssignmentInput(
        {T1: range(6), T2: range(6)},
        {mid: member(mid, [T1, T2], rack=rack) for mid, rack in ((C1, "a"), (C2, "b"), (C3, "c"))},
        racks,
    )
    assignment = RangeAssignor().assign(data)
    check_valid(data, assignment)
    assert as_sets(assignment) == {
        C1: {tp(T1, 0), tp(T1, 3), tp(T2, 0), tp(T2, 3)},
        C2: {tp(T1, 1), tp(T1, 4), tp(T2, 1), tp(T2, 4)},
        C3: {tp(T1, 2), tp(T1, 5), tp(T2, 2), tp(T2, 5)},
    }
    # Output is sorted by kind, then key, like Kafka's rack-aware range.
    assert assignment[C1] == [tp(T1, 0), tp(T1, 3), tp(T2, 0), tp(T2, 3)]
