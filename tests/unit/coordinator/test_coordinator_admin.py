"""DescribeGroups, ListGroups, DeleteGroups and the lifetime of Empty groups."""

from __future__ import annotations

from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.coordinator import EMPTY_GROUP_CLEANUP_MS, TimerKind
from workgroup.coordinator.group import GroupState
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    CommitPartition,
    CommitTopic,
    DeleteGroups,
    DeleteGroupsResult,
    DescribedGroup,
    DescribeGroups,
    DescribeGroupsResult,
    FetchTopic,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    LeavingMember,
    ListGroups,
    ListGroupsResult,
    OffsetCommit,
    OffsetCommitResult,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
)
from workgroup.testing.coordinator import CoordinatorHarness, join_request


def harness() -> CoordinatorHarness:
    return CoordinatorHarness(CoordinatorConfig(initial_rebalance_delay_ms=100))


def describe(h: CoordinatorHarness, *group_ids: str) -> tuple[DescribedGroup, ...]:
    return h.call(DescribeGroups(group_ids), DescribeGroupsResult).groups


def listed(h: CoordinatorHarness, *states: str, types: tuple[str, ...] = ()) -> dict[str, str]:
    result = h.call(ListGroups(states, types), ListGroupsResult)
    assert result.error is ErrorCode.NONE
    return {g.group_id: g.state for g in result.groups}


def commit_outside(h: CoordinatorHarness, group_id: str) -> None:
    request = OffsetCommit(group_id, -1, "", (CommitTopic("t", (CommitPartition(0, 1),)),))
    assert h.call(request, OffsetCommitResult).topics[0].partitions[0].error is ErrorCode.NONE


def test_describe_a_stable_group_with_metadata_and_assignments() -> None:
    h = harness()
    formed = h.form_group("g", 2, protocols=(("range", b"subscription"),))
    (group,) = describe(h, "g")
    assert group.error is ErrorCode.NONE
    assert group.state == "Stable"
    assert group.protocol_type == "consumer"
    assert group.protocol_data == "range"
    assert [m.member_id for m in group.members] == formed.member_ids
    for member in group.members:
        assert member.metadata == b"subscription"
        assert member.assignment == formed.assignments[member.member_id]
        assert member.client_id == "client"
        assert member.client_host == "/127.0.0.1"


def test_describe_a_rebalancing_group_without_protocol_or_metadata() -> None:
    h = harness()
    formed = h.form_group("g", 2)
    h.send(join_request("g", formed.leader))
    (group,) = describe(h, "g")
    assert group.state == "PreparingRebalance"
    assert group.protocol_data == ""
    assert all(m.metadata == b"" for m in group.members)
    # Assignments are still the last generation's.
    assert {m.assignment for m in group.members} == set(formed.assignments.values())


def test_describe_completing_rebalance_and_unknown_and_invalid_groups() -> None:
    h = harness()
    _, token = h.join_new_member("g")
    h.advance_until_answered(token)
    completing, unknown, invalid = describe(h, "g", "nope", "")
    assert completing.state == "CompletingRebalance"
    assert completing.protocol_data == ""
    assert (unknown.error, unknown.state, unknown.members) == (ErrorCode.NONE, "Dead", ())
    assert invalid.error is ErrorCode.INVALID_GROUP_ID


def test_list_groups_with_state_and_type_filters() -> None:
    h = harness()
    h.form_group("stable", 1)
    h.join_new_member("joining")
    commit_outside(h, "offsets-only")
    assert listed(h) == {
        "stable": "Stable",
        "joining": "PreparingRebalance",
        "offsets-only": "Empty",
    }
    assert listed(h, "stable", "EMPTY") == {"stable": "Stable", "offsets-only": "Empty"}
    assert listed(h, "Dead") == {}
    assert listed(h, types=("Classic",)) == listed(h)
    assert listed(h, types=("consumer",)) == {}
    groups = h.call(ListGroups(), ListGroupsResult).groups
    assert {g.group_id: g.protocol_type for g in groups}["offsets-only"] == ""


def test_delete_groups() -> None:
    h = harness()
    h.form_group("busy", 1)
    commit_outside(h, "idle")
    result = h.call(DeleteGroups(("busy", "idle", "nope", "", "idle")), DeleteGroupsResult)
    assert [(g.group_id, g.error) for g in result.groups] == [
        ("busy", ErrorCode.NON_EMPTY_GROUP),
        ("idle", ErrorCode.NONE),
        ("nope", ErrorCode.GROUP_ID_NOT_FOUND),
        ("", ErrorCode.INVALID_GROUP_ID),
        ("idle", ErrorCode.GROUP_ID_NOT_FOUND),
    ]
    assert h.coordinator.group("idle") is None
    # The group's tombstone and its offsets' tombstones are persisted.
    persisted = h.persisted[-1]
    assert persisted.groups[0].deleted
    assert [(o.topic, o.partition, o.deleted) for o in persisted.offsets] == [("t", 0, True)]
    fetched = h.call(
        OffsetFetch((OffsetFetchGroup("idle", (FetchTopic("t", (0,)),)),)), OffsetFetchResult
    )
    assert fetched.groups[0].topics[0].partitions[0].offset == -1


def test_a_group_emptied_by_its_members_can_be_deleted() -> None:
    h = harness()
    formed = h.form_group("g", 1)
    h.call(LeaveGroup("g", (LeavingMember(formed.leader),)), LeaveGroupResult)
    result = h.call(DeleteGroups(("g",)), DeleteGroupsResult)
    assert result.groups[0].error is ErrorCode.NONE
    # A new JoinGroup starts from scratch.
    _, token = h.join_new_member("g")
    h.advance_until_answered(token)
    assert h.result(token, JoinGroupResult).generation_id == 1


def test_empty_groups_without_offsets_are_dropped_after_the_cleanup_interval() -> None:
    h = harness()
    formed = h.form_group("g", 1, session_timeout_ms=6_000)
    commit_outside(h, "keep")
    h.advance(6_000)  # g's member expires; g is Empty without offsets
    assert h.group("g").generation_id == formed.generation_id + 1
    h.advance(EMPTY_GROUP_CLEANUP_MS)
    assert h.coordinator.group("g") is None
    assert h.persisted[-1].groups[0].group_id == "g"
    assert h.persisted[-1].groups[0].deleted
    assert h.coordinator.group("keep") is not None


def test_a_group_created_by_a_refused_join_does_not_linger() -> None:
    h = harness()
    h.call(join_request("g", protocols=()), JoinGroupResult)
    assert listed(h) == {"g": "Empty"}
    h.advance(EMPTY_GROUP_CLEANUP_MS)
    assert listed(h) == {}


def test_deleting_a_group_cancels_its_pending_members_session_timers() -> None:
    h = harness()
    pending = h.call(join_request("g", session_timeout_ms=6_000), JoinGroupResult)
    assert pending.error is ErrorCode.MEMBER_ID_REQUIRED
    group = h.group("g")
    assert group.is_pending(pending.member_id)
    assert group.is_in(GroupState.EMPTY)
    assert h.coordinator.next_deadline_ms() == 6_000  # the pending member's session
    result = h.call(DeleteGroups(("g",)), DeleteGroupsResult)
    assert result.groups[0].error is ErrorCode.NONE
    assert (TimerKind.SESSION, "g", pending.member_id) not in h.coordinator._timers
    # Only the offsets-retention sweep is left to wake the coordinator.
    assert (h.coordinator.next_deadline_ms() or 0) > 6_000
