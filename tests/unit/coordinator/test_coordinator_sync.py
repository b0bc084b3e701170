"""SyncGroup rules: followers wait for the leader, validation, the sync timeout."""

from __future__ import annotations

import pytest

from workgroup.coordinator.actions import Persist, Reply
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.group import GroupState
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import JoinGroupResult, SyncGroupResult
from workgroup.testing.coordinator import CoordinatorHarness, Token, join_request


def harness() -> CoordinatorHarness:
    return CoordinatorHarness(CoordinatorConfig(initial_rebalance_delay_ms=100))


def joined(
    h: CoordinatorHarness, size: int, rebalance_timeout_ms: int = 30_000
) -> tuple[int, str, list[str]]:
    """Members that have their JoinGroup answers (group in CompletingRebalance).

    Sessions (60 s) outlast the rebalance timeout so that only the sync timeout acts.
    """
    joins = [
        h.join_new_member("g", rebalance_timeout_ms=rebalance_timeout_ms, session_timeout_ms=60_000)
        for _ in range(size)
    ]
    h.advance_until_answered(*(token for _, token in joins))
    first = h.result(joins[0][1], JoinGroupResult)
    return first.generation_id, first.leader, [member for member, _ in joins]


def sync_answer(h: CoordinatorHarness, token: Token) -> SyncGroupResult:
    return h.result(token, SyncGroupResult)


def test_empty_group_id_is_invalid() -> None:
    h = harness()
    assert sync_answer(h, h.sync("", "m", 1)).error is ErrorCode.INVALID_GROUP_ID


def test_missing_or_empty_group_is_unknown_member() -> None:
    h = harness()
    assert sync_answer(h, h.sync("nope", "m", 1)).error is ErrorCode.UNKNOWN_MEMBER_ID
    h.call(join_request("g"), JoinGroupResult)  # creates the Empty group (pending member)
    assert sync_answer(h, h.sync("g", "m", 0)).error is ErrorCode.UNKNOWN_MEMBER_ID


def test_followers_wait_for_the_leader_whose_assignment_everyone_then_gets() -> None:
    h = harness()
    generation, leader, members = joined(h, 3)
    followers = [m for m in members if m != leader]
    parked = [h.sync("g", m, generation) for m in followers]
    assert not any(h.answered(t) for t in parked)
    assignments = tuple((m, f"work-{m}".encode()) for m in members)
    before = len(h.actions)
    leader_token = h.sync("g", leader, generation, assignments)
    for member, token in zip([*followers, leader], [*parked, leader_token], strict=True):
        answer = sync_answer(h, token)
        assert answer.error is ErrorCode.NONE
        assert answer.assignment == f"work-{member}".encode()
        assert answer.protocol_type == "consumer"
        assert answer.protocol_name == "range"
    assert h.group("g").is_in(GroupState.STABLE)
    # The assignment is persisted before any of these answers goes out.
    new_actions = h.actions[before:]
    assert isinstance(new_actions[0], Persist)
    assert all(isinstance(a, Reply) for a in new_actions[1:])


def test_members_left_out_of_the_assignment_get_an_empty_one() -> None:
    h = harness()
    generation, leader, members = joined(h, 2)
    follower = next(m for m in members if m != leader)
    token = h.sync("g", follower, generation)
    h.sync("g", leader, generation, ((leader, b"all"), ("stranger", b"x")))
    assert sync_answer(h, token).assignment == b""
    stored = h.persisted[-1].groups[0]
    assert {m.member_id: m.assignment for m in stored.members} == {leader: b"all", follower: b""}


def test_sync_after_the_group_is_stable_returns_the_assignment_at_once() -> None:
    h = harness()
    generation, leader, members = joined(h, 2)
    follower = next(m for m in members if m != leader)
    h.sync("g", leader, generation, ((follower, b"late"),))
    answer = sync_answer(h, h.sync("g", follower, generation))
    assert answer.error is ErrorCode.NONE
    assert answer.assignment == b"late"


def test_validation_errors() -> None:
    h = harness()
    generation, leader, _ = joined(h, 2)
    assert sync_answer(h, h.sync("g", "ghost", generation)).error is ErrorCode.UNKNOWN_MEMBER_ID
    stale = h.sync("g", leader, generation - 1)
    assert sync_answer(h, stale).error is ErrorCode.ILLEGAL_GENERATION


@pytest.mark.parametrize(
    ("protocol_type", "protocol_name", "error"),
    [
        (None, None, ErrorCode.NONE),
        ("consumer", "range", ErrorCode.NONE),
        ("connect", "range", ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
        ("consumer", "roundrobin", ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
    ],
)
def test_v5_protocol_type_and_name_must_match(
    protocol_type: str | None, protocol_name: str | None, error: ErrorCode
) -> None:
    h = harness()
    generation, leader, _ = joined(h, 1)
    token = h.sync(
        "g", leader, generation, protocol_type=protocol_type, protocol_name=protocol_name
    )
    assert sync_answer(h, token).error is error


def test_sync_during_preparing_rebalance_is_rebalance_in_progress() -> None:
    h = harness()
    formed = h.form_group("g", 2)
    h.send(join_request("g", formed.leader))  # leader rejoin: rebalance
    answer = sync_answer(h, h.sync("g", formed.leader, formed.generation_id))
    assert answer.error is ErrorCode.REBALANCE_IN_PROGRESS


def test_static_member_with_a_replaced_id_is_fenced() -> None:
    h = harness()
    first = h.send(join_request("g", group_instance_id="host-a"))
    h.advance_until_answered(first)
    old = h.result(first, JoinGroupResult)
    restarted = h.send(join_request("g", group_instance_id="host-a"))
    new = h.result(restarted, JoinGroupResult)
    assert new.member_id != old.member_id
    token = h.sync("g", old.member_id, new.generation_id, group_instance_id="host-a")
    assert sync_answer(h, token).error is ErrorCode.FENCED_INSTANCE_ID


def test_members_that_do_not_sync_in_time_are_removed_and_the_group_rebalances() -> None:
    h = harness()
    generation, leader, members = joined(h, 3, rebalance_timeout_ms=20_000)
    completed_at = h.now_ms
    follower, silent = (m for m in members if m != leader)
    parked = h.sync("g", follower, generation)
    h.advance(10_000)
    assert h.heartbeat("g", follower, generation) is ErrorCode.NONE
    h.advance_to(completed_at + 19_999)
    assert not h.answered(parked)
    h.advance_to(completed_at + 20_000)
    # The leader and the silent member never synced: both are gone.
    assert sync_answer(h, parked).error is ErrorCode.REBALANCE_IN_PROGRESS
    group = h.group("g")
    assert set(group.members) == {follower}
    assert group.is_in(GroupState.PREPARING_REBALANCE)
    assert h.heartbeat("g", silent, generation) is ErrorCode.UNKNOWN_MEMBER_ID
    # The survivor rejoins and leads the next generation.
    token = h.send(
        join_request("g", follower, rebalance_timeout_ms=20_000, session_timeout_ms=60_000)
    )
    result = h.result(token, JoinGroupResult)
    assert result.leader == follower
    assert result.generation_id == generation + 1


def test_sync_timer_is_cancelled_once_everyone_synced() -> None:
    h = harness()
    generation, leader, members = joined(h, 2, rebalance_timeout_ms=20_000)
    for member in members:
        h.sync("g", member, generation, ((leader, b"a"),) if member == leader else ())
    h.advance(20_000)
    for member in members:
        assert h.heartbeat("g", member, generation) is ErrorCode.NONE
    assert h.group("g").is_in(GroupState.STABLE)


def test_a_superseded_parked_sync_is_answered() -> None:
    h = harness()
    generation, leader, members = joined(h, 2)
    follower = next(m for m in members if m != leader)
    first = h.sync("g", follower, generation)
    second = h.sync("g", follower, generation)
    assert sync_answer(h, first).error is ErrorCode.REBALANCE_IN_PROGRESS
    h.sync("g", leader, generation, ((follower, b"f"),))
    assert sync_answer(h, second).assignment == b"f"


def test_a_member_removed_with_a_parked_sync_gets_unknown_member_id() -> None:
    from workgroup.kafka.messages import LeaveGroup, LeaveGroupResult, LeavingMember

    h = harness()
    generation, leader, members = joined(h, 2)
    follower = next(m for m in members if m != leader)
    parked = h.sync("g", follower, generation)
    h.call(LeaveGroup("g", (LeavingMember(follower),)), LeaveGroupResult)
    assert sync_answer(h, parked).error is ErrorCode.UNKNOWN_MEMBER_ID
