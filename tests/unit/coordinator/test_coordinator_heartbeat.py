"""Heartbeat errors and per-member session timeouts."""

from __future__ import annotations

from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.group import GroupState
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import Heartbeat, HeartbeatResult, JoinGroupResult
from workgroup.testing.coordinator import CoordinatorHarness, join_request


def harness() -> CoordinatorHarness:
    return CoordinatorHarness(CoordinatorConfig(initial_rebalance_delay_ms=100))


def test_heartbeat_errors_outside_the_group() -> None:
    h = harness()
    formed = h.form_group("g", 1)
    assert h.heartbeat("", "m", 1) is ErrorCode.INVALID_GROUP_ID
    assert h.heartbeat("nope", formed.leader, 1) is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", "ghost", formed.generation_id) is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", formed.leader, formed.generation_id + 1) is ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat("g", formed.leader, formed.generation_id) is ErrorCode.NONE


def test_heartbeat_during_each_state() -> None:
    h = harness()
    a, ta = h.join_new_member("g")
    b, tb = h.join_new_member("g")
    h.advance_until_answered(ta, tb)
    result = h.result(ta, JoinGroupResult)
    # CompletingRebalance: members may heartbeat before their SyncGroup.
    assert h.heartbeat("g", b, result.generation_id) is ErrorCode.NONE
    h.sync("g", a, result.generation_id, ((a, b"x"), (b, b"y")))
    assert h.heartbeat("g", b, result.generation_id) is ErrorCode.NONE  # Stable
    h.send(join_request("g", a))  # the leader rejoins: PreparingRebalance
    assert h.heartbeat("g", b, result.generation_id) is ErrorCode.REBALANCE_IN_PROGRESS


def test_static_member_heartbeat_with_a_replaced_member_id_is_fenced() -> None:
    h = harness()
    first = h.send(join_request("g", group_instance_id="host-a"))
    h.advance_until_answered(first)
    old = h.result(first, JoinGroupResult)
    h.sync("g", old.member_id, old.generation_id, ((old.member_id, b"x"),))
    new = h.call(join_request("g", group_instance_id="host-a"), JoinGroupResult)
    error = h.heartbeat("g", old.member_id, old.generation_id, group_instance_id="host-a")
    assert error is ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat("g", new.member_id, new.generation_id, "host-a") is ErrorCode.NONE
    # An unknown instance id is an unknown member.
    assert (
        h.heartbeat("g", new.member_id, new.generation_id, "host-b") is ErrorCode.UNKNOWN_MEMBER_ID
    )


def test_heartbeat_to_a_dead_group_is_coordinator_not_available() -> None:
    h = harness()
    formed = h.form_group("g", 1)
    h.coordinator.unload(h.now_ms)
    assert h.heartbeat("g", formed.leader, 1) is ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_timeout() -> None:
    h = harness()
    formed = h.form_group("g", 2, session_timeout_ms=10_000)
    alive, silent = formed.member_ids
    start = h.now_ms
    for _ in range(2):
        h.advance(4_000)
        assert h.heartbeat("g", alive, formed.generation_id) is ErrorCode.NONE
    # silent's session (restarted by its SyncGroup answer at `start`) ends at start + 10 s.
    h.advance_to(start + 9_999)
    assert h.group("g").has_member(silent)
    h.advance_to(start + 10_000)
    group = h.group("g")
    assert not group.has_member(silent)
    assert group.is_in(GroupState.PREPARING_REBALANCE)
    assert h.heartbeat("g", alive, formed.generation_id) is ErrorCode.REBALANCE_IN_PROGRESS


def test_each_heartbeat_restarts_the_session() -> None:
    h = harness()
    formed = h.form_group("g", 1, session_timeout_ms=10_000)
    h.advance(9_000)
    h.heartbeat("g", formed.leader, formed.generation_id)
    h.advance(9_999)
    assert h.group("g").has_member(formed.leader)
    h.advance(1)
    assert not h.group("g").has_member(formed.leader)


def test_session_timeouts_are_per_member() -> None:
    h = harness()
    short, t1 = h.join_new_member("g", session_timeout_ms=6_000)
    long, t2 = h.join_new_member("g", session_timeout_ms=20_000)
    h.advance_until_answered(t1, t2)
    generation = h.result(t1, JoinGroupResult).generation_id
    for member in (long, short):
        h.sync("g", member, generation, ((short, b"s"), (long, b"l")) if member == short else ())
    h.advance(6_000)
    group = h.group("g")
    assert not group.has_member(short)
    assert group.has_member(long)


def test_the_last_member_expiring_empties_the_group_and_persists_it() -> None:
    h = harness()
    formed = h.form_group("g", 1, session_timeout_ms=6_000)
    h.advance(6_000)
    group = h.group("g")
    assert group.is_in(GroupState.EMPTY)
    assert group.generation_id == formed.generation_id + 1
    stored = h.persisted[-1].groups[0]
    assert stored.members == ()
    assert stored.generation_id == formed.generation_id + 1


def test_parked_members_are_not_expired_while_they_wait() -> None:
    h = harness()
    formed = h.form_group("g", 2, session_timeout_ms=6_000, rebalance_timeout_ms=60_000)
    leader, other = formed.member_ids
    token = h.send(join_request("g", leader, session_timeout_ms=6_000, rebalance_timeout_ms=60_000))
    for _ in range(10):  # 30 s: far beyond the parked leader's session timeout
        h.advance(3_000)
        assert h.heartbeat("g", other, formed.generation_id) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.group("g").has_member(leader)
    assert not h.answered(token)
    h.send(join_request("g", other, session_timeout_ms=6_000, rebalance_timeout_ms=60_000))
    assert {m.member_id for m in h.result(token, JoinGroupResult).members} == {leader, other}


def test_heartbeats_do_not_grow_the_timer_heap() -> None:
    h = harness()
    formed = h.form_group("g", 50)
    timers = h.coordinator._timers
    size = len(timers._heap)
    for _ in range(20):
        for member in formed.member_ids:
            assert (
                h.call(Heartbeat("g", formed.generation_id, member), HeartbeatResult).error
                is ErrorCode.NONE
            )
        h.advance(1)
    assert len(timers._heap) <= size


def test_completing_the_join_phase_and_answering_a_parked_sync_restart_sessions() -> None:
    h = harness()
    formed = h.form_group("g", 2, session_timeout_ms=10_000)
    leader, other = formed.member_ids
    start = h.now_ms
    h.advance(8_000)
    h.send(join_request("g", leader, session_timeout_ms=10_000))
    h.advance(1_000)
    joined = h.send(join_request("g", other, session_timeout_ms=10_000))  # completes at +9 s
    generation = h.result(joined, JoinGroupResult).generation_id
    h.advance(6_000)  # +15 s: other's session (restarted at +9 s) is still running
    parked = h.sync("g", other, generation)
    h.advance(1_000)  # +16 s: the leader's assignment answers the parked sync
    h.sync("g", leader, generation, ((leader, b"a"), (other, b"b")))
    assert h.answered(parked)
    h.advance_to(start + 25_999)
    group = h.group("g")
    assert set(group.members) == {leader, other}
    h.advance_to(start + 26_000)
    assert set(group.members) == set()
