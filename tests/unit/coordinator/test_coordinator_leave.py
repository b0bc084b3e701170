"""LeaveGroup: single member (v0-v2) and batches by member identity (v3+)."""

from __future__ import annotations

from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.group import GroupState
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import JoinGroupResult, LeaveGroup, LeaveGroupResult, LeavingMember
from workgroup.testing.coordinator import CoordinatorHarness, join_request


def harness() -> CoordinatorHarness:
    return CoordinatorHarness(CoordinatorConfig(initial_rebalance_delay_ms=100))


def leave(
    h: CoordinatorHarness, *members: LeavingMember, group_id: str = "g", api_version: int = 5
) -> LeaveGroupResult:
    return h.call(LeaveGroup(group_id, members, api_version=api_version), LeaveGroupResult)


def test_group_level_errors() -> None:
    h = harness()
    assert leave(h, LeavingMember("m"), group_id="").error is ErrorCode.INVALID_GROUP_ID
    assert leave(h, LeavingMember("m"), group_id="nope").error is ErrorCode.UNKNOWN_MEMBER_ID
    formed = h.form_group("g", 1)
    h.coordinator.unload(h.now_ms)
    result = leave(h, LeavingMember(formed.leader))
    assert result.error is ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_v0_to_v2_report_the_members_error_at_top_level() -> None:
    h = harness()
    formed = h.form_group("g", 2)
    unknown = leave(h, LeavingMember("ghost"), api_version=1)
    assert unknown.error is ErrorCode.UNKNOWN_MEMBER_ID
    ok = leave(h, LeavingMember(formed.member_ids[1]), api_version=0)
    assert ok.error is ErrorCode.NONE
    assert h.group("g").is_in(GroupState.PREPARING_REBALANCE)


def test_v3_batch_answers_each_member_separately() -> None:
    h = harness()
    formed = h.form_group("g", 3)
    a, b, _ = formed.member_ids
    result = leave(h, LeavingMember(a), LeavingMember("ghost"), LeavingMember(b))
    assert result.error is ErrorCode.NONE
    assert [(m.member_id, m.error) for m in result.members] == [
        (a, ErrorCode.NONE),
        ("ghost", ErrorCode.UNKNOWN_MEMBER_ID),
        (b, ErrorCode.NONE),
    ]
    group = h.group("g")
    assert set(group.members) == {formed.member_ids[2]}
    assert group.is_in(GroupState.PREPARING_REBALANCE)


def test_leaving_by_instance_id_alone_and_fenced_instances() -> None:
    h = harness()
    tokens = [h.send(join_request("g", group_instance_id=f"host-{i}")) for i in range(3)]
    h.advance_until_answered(*tokens)
    ids = [h.result(t, JoinGroupResult).member_id for t in tokens]
    result = leave(
        h,
        LeavingMember("", "host-0"),  # administrative removal: no member id
        LeavingMember("wrong-id", "host-1"),  # fenced
        LeavingMember("", "host-9"),  # unknown instance
        LeavingMember(ids[2], "host-2"),
    )
    assert [m.error for m in result.members] == [
        ErrorCode.NONE,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.NONE,
    ]
    assert set(h.group("g").members) == {ids[1]}


def test_a_pending_member_can_leave() -> None:
    h = harness()
    pending = h.call(join_request("g"), JoinGroupResult).member_id
    assert h.group("g").is_pending(pending)
    result = leave(h, LeavingMember(pending))
    assert result.members[0].error is ErrorCode.NONE
    assert not h.group("g").is_pending(pending)


def test_leader_leaving_hands_leadership_to_another_member() -> None:
    h = harness()
    formed = h.form_group("g", 3)
    leave(h, LeavingMember(formed.leader))
    others = [m for m in formed.member_ids if m != formed.leader]
    tokens = [h.send(join_request("g", m)) for m in others]
    results = [h.result(t, JoinGroupResult) for t in tokens]
    assert results[0].leader in others
    assert results[0].generation_id == formed.generation_id + 1


def test_a_leaving_members_parked_join_is_answered_and_the_phase_completes() -> None:
    h = harness()
    formed = h.form_group("g", 2)
    a, b = formed.member_ids
    parked_a = h.send(join_request("g", a))
    parked_b = h.send(join_request("g", b))
    assert h.answered(parked_b)  # both rejoined: generation 2 in CompletingRebalance
    generation = h.result(parked_b, JoinGroupResult).generation_id
    h.sync("g", a, generation, ((a, b"x"), (b, b"y")))
    h.sync("g", b, generation)
    # Now b rejoins with new metadata (rebalance), then a leaves: b's join completes alone.
    parked_b = h.send(join_request("g", b, protocols=(("range", b"v2"),)))
    assert not h.answered(parked_b)
    leave(h, LeavingMember(a))
    result = h.result(parked_b, JoinGroupResult)
    assert result.leader == b
    assert [m.member_id for m in result.members] == [b]
    assert h.answered(parked_a)


def test_parked_join_of_a_leaving_member_gets_unknown_member_id() -> None:
    h = harness()
    formed = h.form_group("g", 2)
    a, b = formed.member_ids
    parked = h.send(join_request("g", a))
    leave(h, LeavingMember(a))
    assert h.result(parked, JoinGroupResult).error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.group("g").has_member(b)


def test_everyone_leaving_empties_the_group_and_persists_it() -> None:
    h = harness()
    formed = h.form_group("g", 2)
    before = len(h.actions)
    result = leave(h, *(LeavingMember(m) for m in formed.member_ids))
    group = h.group("g")
    assert group.is_in(GroupState.EMPTY)
    assert group.generation_id == formed.generation_id + 1
    assert group.protocol_name is None
    assert result.error is ErrorCode.NONE
    # The Empty state is persisted before the LeaveGroup answer.
    kinds = [type(a).__name__ for a in h.actions[before:]]
    assert kinds == ["Persist", "Reply"]
    assert h.persisted[-1].groups[0].members == ()
