"""Worked examples for the assignors that are not Kafka's."""

from __future__ import annotations

import pytest
from assignor_inputs import check_valid, member

from workgroup.assignors.base import AssignmentInput
from workgroup.assignors.consistent_hash import ConsistentHashAssignor, stable_hash
from workgroup.assignors.leader import LeaderAssignor
from workgroup.assignors.rack_aware import RackAwareAssignor
from workgroup.assignors.replicated import ReplicatedAssignor
from workgroup.assignors.weighted import WeightedAssignor, proportional_shares
from workgroup.errors import ConfigError


def test_stable_hash_is_fixed_across_processes() -> None:
    # BLAKE2b with an 8-byte digest: a constant, unlike Python's salted hash().
    assert stable_hash("workgroup") == 0xB65FB6D635AC4358


def test_consistent_hash_spreads_load() -> None:
    data = AssignmentInput({"k": range(3000)}, {m: member(m, ["k"]) for m in "abcdef"})
    assignment = ConsistentHashAssignor().assign(data)
    check_valid(data, assignment)
    for resources in assignment.values():
        assert 350 < len(resources) < 650  # 500 expected


def test_leader_keeps_leadership_despite_imbalance() -> None:
    data = AssignmentInput(
        {"role": ["scheduler", "compactor", "janitor"]},
        {
            "a": member("a", ["role"], [("role", "scheduler"), ("role", "compactor")], 4),
            "b": member("b", ["role"]),
        },
    )
    assert LeaderAssignor().assign(data) == {
        "a": [("role", "scheduler"), ("role", "compactor")],
        "b": [("role", "janitor")],
    }


def test_leader_settles_split_brain_by_generation_then_order() -> None:
    resources = {"role": ["scheduler"]}
    newer = AssignmentInput(
        resources,
        {
            "a": member("a", ["role"], [("role", "scheduler")], 3),
            "b": member("b", ["role"], [("role", "scheduler")], 4),
        },
    )
    assert LeaderAssignor().assign(newer)["b"] == [("role", "scheduler")]
    same = AssignmentInput(
        resources,
        {
            "a": member("a", ["role"], [("role", "scheduler")], 4),
            "b": member("b", ["role"], [("role", "scheduler")], 4, instance_id="static-b"),
        },
    )
    # Static members come first in the member order.
    assert LeaderAssignor().assign(same) == {"a": [], "b": [("role", "scheduler")]}


def test_weighted_shares() -> None:
    assert proportional_shares(10, {"a": 1, "b": 1, "c": 3}) == {"a": 2, "b": 2, "c": 6}
    assert proportional_shares(10, {"a": 1, "b": 1, "c": 1}) == {"a": 4, "b": 3, "c": 3}
    data = AssignmentInput(
        {"k": range(12)},
        {"big": member("big", ["k"], capacity=3.0), "small": member("small", ["k"])},
    )
    assignment = WeightedAssignor().assign(data)
    assert len(assignment["big"]) == 9
    assert len(assignment["small"]) == 3


def test_weighted_rejects_non_positive_capacity() -> None:
    data = AssignmentInput({"k": range(2)}, {"a": member("a", ["k"], capacity=0.0)})
    with pytest.raises(ConfigError, match="positive capacity"):
        WeightedAssignor().assign(data)


def test_replicated_spreads_replicas_over_racks() -> None:
    members = {
        "a1": member("a1", ["k"], rack="a"),
        "a2": member("a2", ["k"], rack="a"),
        "b1": member("b1", ["k"], rack="b"),
        "b2": member("b2", ["k"], rack="b"),
    }
    data = AssignmentInput({"k": range(8)}, members)
    assignment = ReplicatedAssignor(replicas=2).assign(data)
    for key in range(8):
        holders = [mid for mid, rs in assignment.items() if ("k", key) in rs]
        assert len(holders) == 2
        assert {members[h].rack for h in holders} == {"a", "b"}
    assert {len(rs) for rs in assignment.values()} == {4}


def test_replicated_caps_replicas_at_subscribers() -> None:
    data = AssignmentInput({"k": range(3)}, {"a": member("a", ["k"]), "b": member("b", [])})
    assignment = ReplicatedAssignor(replicas=3).assign(data)
    assert assignment == {"a": [("k", 0), ("k", 1), ("k", 2)], "b": []}


def test_rack_aware_places_resources_on_their_racks() -> None:
    # Six resources, two per rack; members own the wrong ones to begin with.
    racks = {("k", i): frozenset({"abc"[i % 3]}) for i in range(6)}
    members = {
        "x": member("x", ["k"], [("k", 1), ("k", 2)], rack="a"),
        "y": member("y", ["k"], [("k", 0), ("k", 5)], rack="b"),
        "z": member("z", ["k"], [("k", 3), ("k", 4)], rack="c"),
    }
    data = AssignmentInput({"k": range(6)}, members, racks)
    assignment = RackAwareAssignor().assign(data)
    check_valid(data, assignment)
    for mid, resources in assignment.items():
        assert len(resources) == 2
        assert all(members[mid].rack in racks[r] for r in resources)
