"""JoinGroup rules of Kafka's classic group coordinator, one test per rule."""

from __future__ import annotations

import pytest

from workgroup.coordinator.actions import Persist
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.coordinator import NEW_MEMBER_JOIN_TIMEOUT_MS
from workgroup.coordinator.group import GroupState
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    DescribeGroups,
    DescribeGroupsResult,
    JoinGroupResult,
    SyncGroupResult,
)
from workgroup.testing.coordinator import CoordinatorHarness, join_request

DELAY = 100


def harness(**config: int) -> CoordinatorHarness:
    return CoordinatorHarness(CoordinatorConfig(initial_rebalance_delay_ms=DELAY, **config))


def join_error(h: CoordinatorHarness, **kwargs: object) -> JoinGroupResult:
    group_id = str(kwargs.pop("group_id", "g"))
    return h.call(join_request(group_id, **kwargs), JoinGroupResult)  # type: ignore[arg-type]


# --- validation ---------------------------------------------------------------------


def test_empty_group_id_is_invalid() -> None:
    h = harness()
    result = join_error(h, group_id="", member_id="m-1")
    assert result.error is ErrorCode.INVALID_GROUP_ID
    assert result.member_id == "m-1"
    assert h.coordinator.group_ids() == []


@pytest.mark.parametrize(
    ("session_timeout_ms", "ok"),
    [(5_999, False), (6_000, True), (1_800_000, True), (1_800_001, False)],
)
def test_session_timeout_must_be_within_bounds(session_timeout_ms: int, ok: bool) -> None:
    h = harness()
    result = join_error(h, session_timeout_ms=session_timeout_ms)
    expected = ErrorCode.MEMBER_ID_REQUIRED if ok else ErrorCode.INVALID_SESSION_TIMEOUT
    assert result.error is expected


def test_member_id_for_a_group_that_does_not_exist_is_unknown() -> None:
    h = harness()
    result = join_error(h, member_id="ghost")
    assert result.error is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.coordinator.group("g") is None


def test_empty_protocol_type_or_list_is_inconsistent() -> None:
    h = harness()
    assert join_error(h, protocol_type="").error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert join_error(h, protocols=()).error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_protocol_type_must_match_the_groups_for_that_member_alone() -> None:
    h = harness()
    formed = h.form_group("g", 2)
    assert join_error(h, protocol_type="connect").error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    group = h.coordinator.group("g")
    assert group is not None
    assert group.is_in(GroupState.STABLE)
    assert group.generation_id == formed.generation_id


def test_member_is_admitted_only_with_a_protocol_every_member_supports() -> None:
    h = harness()
    h.form_group("g", 2, protocols=(("range", b"r"), ("roundrobin", b"rr")))
    lonely = join_error(h, protocols=(("sticky", b"s"),))
    assert lonely.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # One shared protocol is enough, even if it is not the member's favourite.
    admitted = join_error(h, protocols=(("sticky", b"s"), ("roundrobin", b"rr")))
    assert admitted.error is ErrorCode.MEMBER_ID_REQUIRED


# --- member ids ---------------------------------------------------------------------


def test_new_dynamic_member_on_v4_plus_must_rejoin_with_the_given_id() -> None:
    h = harness()
    result = join_error(h, api_version=4)
    assert result.error is ErrorCode.MEMBER_ID_REQUIRED
    assert result.member_id
    group = h.coordinator.group("g")
    assert group is not None
    assert group.is_pending(result.member_id)
    assert group.is_in(GroupState.EMPTY)
    assert group.num_members == 0


def test_pending_member_that_does_not_rejoin_is_dropped_after_its_session_timeout() -> None:
    h = harness()
    result = join_error(h, session_timeout_ms=6_000)
    h.advance(5_999)
    group = h.coordinator.group("g")
    assert group is not None
    assert group.is_pending(result.member_id)
    h.advance(1)
    assert not group.is_pending(result.member_id)
    late = join_error(h, member_id=result.member_id)
    assert late.error is ErrorCode.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("api_version", [0, 1, 2, 3])
def test_new_member_before_v4_gets_its_id_at_once(api_version: int) -> None:
    h = harness()
    token = h.send(join_request("g", api_version=api_version))
    assert not h.answered(token)  # parked in the initial rebalance straight away
    h.advance(DELAY)
    result = h.result(token, JoinGroupResult)
    assert result.error is ErrorCode.NONE
    assert result.member_id == "client-1"
    assert result.leader == "client-1"


def test_default_member_ids_follow_kafka() -> None:
    from workgroup.coordinator.coordinator import kafka_member_id

    assert kafka_member_id("consumer-1", "").startswith("consumer-1-")
    assert kafka_member_id("consumer-1", "host-a").startswith("host-a-")
    assert len(kafka_member_id("c", "")) == len("c-") + 36


# --- generations, leader, vote --------------------------------------------------------


def test_generation_is_0_when_empty_and_1_after_the_first_rebalance() -> None:
    h = harness()
    join_error(h)
    group = h.coordinator.group("g")
    assert group is not None
    assert group.generation_id == 0
    formed = h.form_group("other", 1)
    assert formed.generation_id == 1


def test_only_the_leader_receives_the_members_metadata_for_the_chosen_protocol() -> None:
    h = harness()
    a, ta = h.join_new_member("g", protocols=(("range", b"a-range"), ("rr", b"a-rr")))
    b, tb = h.join_new_member("g", protocols=(("rr", b"b-rr"), ("range", b"b-range")))
    c, tc = h.join_new_member("g", protocols=(("rr", b"c-rr"),))
    h.advance_until_answered(ta, tb, tc)
    results = {r.member_id: r for r in (h.result(t, JoinGroupResult) for t in (ta, tb, tc))}
    leader = results[a]
    assert leader.leader == a
    assert leader.protocol_name == "rr"  # the only protocol everyone supports
    assert {(m.member_id, m.metadata) for m in leader.members} == {
        (a, b"a-rr"),
        (b, b"b-rr"),
        (c, b"c-rr"),
    }
    for follower in (results[b], results[c]):
        assert follower.members == ()
        assert follower.leader == a
        assert follower.generation_id == 1
        assert follower.protocol_type == "consumer"


def test_preference_vote_picks_the_most_preferred_common_protocol() -> None:
    h = harness()
    tokens = [
        h.join_new_member("g", protocols=(("sticky", b""), ("range", b"")))[1],
        h.join_new_member("g", protocols=(("sticky", b""), ("range", b"")))[1],
        h.join_new_member("g", protocols=(("range", b""), ("sticky", b"")))[1],
    ]
    h.advance_until_answered(*tokens)
    assert {h.result(t, JoinGroupResult).protocol_name for t in tokens} == {"sticky"}


def test_rolling_upgrade_switches_protocol_once_every_member_prefers_it() -> None:
    h = harness()
    formed = h.form_group("g", 2, protocols=(("v1", b""),))
    upgraded = (("v2", b""), ("v1", b""))
    first, second = formed.member_ids
    # First member upgrades: v2 is not yet supported by everyone.
    t1 = h.send(join_request("g", first, protocols=upgraded))
    t2 = h.send(join_request("g", second, protocols=(("v1", b""),)))
    assert h.result(t1, JoinGroupResult).protocol_name == "v1"
    assert h.result(t2, JoinGroupResult).protocol_name == "v1"
    # Second member upgrades: now both prefer v2.
    generation = h.result(t1, JoinGroupResult).generation_id
    t2 = h.send(join_request("g", second, protocols=upgraded))  # changed: rebalance
    t1 = h.send(join_request("g", first, protocols=upgraded))
    assert h.result(t1, JoinGroupResult).protocol_name == "v2"
    assert h.result(t2, JoinGroupResult).generation_id == generation + 1


# --- initial rebalance delay ------------------------------------------------------------


def test_initial_rebalance_waits_for_the_delay() -> None:
    h = harness()
    _, token = h.join_new_member("g")
    h.advance(DELAY - 1)
    assert not h.answered(token)
    h.advance(1)
    assert h.result(token, JoinGroupResult).error is ErrorCode.NONE


def test_initial_rebalance_does_not_complete_early_even_if_everyone_joined() -> None:
    h = harness()
    tokens = [h.join_new_member("g")[1] for _ in range(3)]
    assert not any(h.answered(t) for t in tokens)
    # Newcomers arrived after the delay was armed: it is extended once more.
    h.advance(DELAY)
    assert not any(h.answered(t) for t in tokens)
    h.advance(DELAY)
    assert all(h.answered(t) for t in tokens)


def test_each_new_joiner_extends_the_initial_delay() -> None:
    h = harness()
    _, first = h.join_new_member("g")
    h.advance(50)
    _, second = h.join_new_member("g")
    h.advance(50)  # t=100: the first delay ends, but a member arrived meanwhile
    assert not h.answered(first)
    h.advance(99)
    assert not h.answered(first)
    h.advance(1)  # t=200: no newcomer during the extension
    assert h.result(first, JoinGroupResult).generation_id == 1
    assert h.result(second, JoinGroupResult).generation_id == 1


def test_initial_delay_is_capped_by_the_rebalance_timeout() -> None:
    h = CoordinatorHarness(CoordinatorConfig(initial_rebalance_delay_ms=3_000))
    _, first = h.join_new_member("g", rebalance_timeout_ms=5_000)
    # Newcomers keep arriving every second; the phase still ends at 5 s.
    for _ in range(4):
        h.advance(1_000)
        h.join_new_member("g", rebalance_timeout_ms=5_000)
    assert not h.answered(first)
    h.advance(999)  # t=4999
    assert not h.answered(first)
    h.advance(1)  # t=5000
    assert h.result(first, JoinGroupResult).error is ErrorCode.NONE


def test_zero_initial_delay_completes_at_the_next_expiry() -> None:
    h = CoordinatorHarness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    _, token = h.join_new_member("g")
    assert h.coordinator.next_deadline_ms() == 0
    h.advance(0)
    assert h.result(token, JoinGroupResult).generation_id == 1


# --- rebalances of a running group ---------------------------------------------------------


def test_rebalance_completes_as_soon_as_every_member_rejoined() -> None:
    h = harness()
    formed = h.form_group("g", 3)
    tokens = [h.send(join_request("g", m)) for m in formed.member_ids]
    assert all(h.answered(t) for t in tokens)
    assert {h.result(t, JoinGroupResult).generation_id for t in tokens} == {2}


def test_members_that_miss_the_rebalance_timeout_are_removed() -> None:
    h = harness()
    a, ta = h.join_new_member("g", rebalance_timeout_ms=10_000)
    b, tb = h.join_new_member("g", rebalance_timeout_ms=30_000)
    c, tc = h.join_new_member("g", rebalance_timeout_ms=20_000)
    h.advance_until_answered(ta, tb, tc)
    generation = h.result(ta, JoinGroupResult).generation_id
    for m in (b, c, a):
        h.sync("g", m, generation, ((a, b"x"), (b, b"y"), (c, b"z")) if m == a else ())
    start = h.now_ms
    # The leader rejoins, which starts a rebalance; b rejoins too, c only heartbeats.
    ja = h.send(join_request("g", a, rebalance_timeout_ms=10_000))
    jb = h.send(join_request("g", b, rebalance_timeout_ms=30_000))
    for _ in range(5):
        h.advance(5_000)
        assert h.heartbeat("g", c, generation) is ErrorCode.REBALANCE_IN_PROGRESS
    # The group's rebalance timeout is the largest member's: 30 s.
    h.advance_to(start + 29_999)
    assert not h.answered(ja)
    h.advance_to(start + 30_000)
    result = h.result(ja, JoinGroupResult)
    assert result.generation_id == generation + 1
    assert {m.member_id for m in result.members} == {a, b}
    assert h.heartbeat("g", c, generation) is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.result(jb, JoinGroupResult).leader == a


def test_a_new_leader_is_elected_when_the_leader_misses_the_rebalance() -> None:
    h = harness()
    formed = h.form_group("g", 3, rebalance_timeout_ms=10_000)
    followers = [m for m in formed.member_ids if m != formed.leader]
    tokens = [h.send(join_request("g", m, rebalance_timeout_ms=10_000)) for m in followers]
    # A follower rejoining while Stable with unchanged metadata gets the current generation.
    assert all(h.result(t, JoinGroupResult).generation_id == 1 for t in tokens)
    # A metadata change forces a rebalance; the leader never rejoins.
    changed = (("range", b"new"),)
    tokens = [
        h.send(join_request("g", m, protocols=changed, rebalance_timeout_ms=10_000))
        for m in followers
    ]
    h.advance(10_000)
    results = [h.result(t, JoinGroupResult) for t in tokens]
    assert results[0].leader in followers
    assert results[0].generation_id == 2
    assert sum(1 for r in results if r.members) == 1


def test_rejoin_with_same_metadata_during_completing_rebalance_repeats_the_answer() -> None:
    h = harness()
    a, ta = h.join_new_member("g")
    b, tb = h.join_new_member("g")
    h.advance_until_answered(ta, tb)
    first = h.result(ta, JoinGroupResult)
    again = h.call(join_request("g", a), JoinGroupResult)
    assert again == first  # the leader gets the member list again
    follower = h.call(join_request("g", b), JoinGroupResult)
    assert follower == h.result(tb, JoinGroupResult)
    group = h.coordinator.group("g")
    assert group is not None
    assert group.is_in(GroupState.COMPLETING_REBALANCE)


def test_leader_rejoining_while_stable_triggers_a_rebalance() -> None:
    h = harness()
    formed = h.form_group("g", 2)
    token = h.send(join_request("g", formed.leader))
    group = h.coordinator.group("g")
    assert group is not None
    assert group.is_in(GroupState.PREPARING_REBALANCE)
    assert not h.answered(token)


def test_a_new_member_during_the_sync_phase_sends_pending_syncs_back_to_join() -> None:
    h = harness()
    _a, ta = h.join_new_member("g")
    b, tb = h.join_new_member("g")
    h.advance_until_answered(ta, tb)
    parked_sync = h.sync("g", b, 1)
    assert not h.answered(parked_sync)
    h.join_new_member("g")
    answer = h.result(parked_sync, SyncGroupResult)
    assert answer.error is ErrorCode.REBALANCE_IN_PROGRESS
    assert answer.protocol_name is None
    group = h.coordinator.group("g")
    assert group is not None
    assert group.is_in(GroupState.PREPARING_REBALANCE)


def test_a_superseded_parked_join_is_answered() -> None:
    h = harness()
    formed = h.form_group("g", 2)
    first = h.send(join_request("g", formed.leader))
    second = h.send(join_request("g", formed.leader))
    assert h.result(first, JoinGroupResult).error is ErrorCode.REBALANCE_IN_PROGRESS
    assert not h.answered(second)
    other = next(m for m in formed.member_ids if m != formed.leader)
    h.send(join_request("g", other))
    assert h.result(second, JoinGroupResult).generation_id == 2


def test_new_member_parked_too_long_is_dropped_with_unknown_member_id() -> None:
    h = harness()
    formed = h.form_group("g", 1, rebalance_timeout_ms=600_000, session_timeout_ms=60_000)
    member, token = h.join_new_member("g", rebalance_timeout_ms=600_000)
    # The old member keeps its session alive but never rejoins.
    while h.now_ms < NEW_MEMBER_JOIN_TIMEOUT_MS + DELAY * 10:
        h.advance(30_000)
        h.heartbeat("g", formed.leader, formed.generation_id)
        if h.answered(token):
            break
    result = h.result(token, JoinGroupResult)
    assert result.error is ErrorCode.UNKNOWN_MEMBER_ID
    group = h.coordinator.group("g")
    assert group is not None
    assert not group.has_member(member)


# --- group size ----------------------------------------------------------------------------


def test_join_beyond_the_group_max_size_is_refused() -> None:
    h = harness(group_max_size=2)
    h.form_group("g", 2)
    result = join_error(h)
    assert result.error is ErrorCode.GROUP_MAX_SIZE_REACHED
    assert result.member_id == ""


def test_while_rebalancing_the_limit_counts_parked_members() -> None:
    h = harness(group_max_size=2)
    _, ta = h.join_new_member("g")
    # Pending members are not parked: both get ids.
    second = join_error(h)
    third = join_error(h)
    assert second.error is third.error is ErrorCode.MEMBER_ID_REQUIRED
    tb = h.send(join_request("g", second.member_id))
    assert not h.answered(tb)
    # Two members are parked: the last one to come back is turned away and forgotten.
    refused = h.call(join_request("g", third.member_id), JoinGroupResult)
    assert refused.error is ErrorCode.GROUP_MAX_SIZE_REACHED
    group = h.coordinator.group("g")
    assert group is not None
    assert not group.is_pending(third.member_id)
    assert join_error(h).error is ErrorCode.GROUP_MAX_SIZE_REACHED
    h.advance_until_answered(ta, tb)
    assert len(h.result(ta, JoinGroupResult).members) == 2


# --- Dead groups -----------------------------------------------------------------------------


def test_join_to_a_dead_group_is_coordinator_not_available() -> None:
    h = harness()
    formed = h.form_group("g", 1)
    h.coordinator.unload(h.now_ms)
    assert join_error(h).error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    known = join_error(h, member_id=formed.leader)
    assert known.error is ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_unload_answers_parked_joins_with_not_coordinator() -> None:
    h = harness()
    _, token = h.join_new_member("g")
    actions = h.coordinator.unload(h.now_ms)
    h._record(actions)
    assert h.result(token, JoinGroupResult).error is ErrorCode.NOT_COORDINATOR
    described = h.call(DescribeGroups(("g",)), DescribeGroupsResult).groups[0]
    assert described.state == "Dead"


def test_the_first_stable_generation_is_persisted_before_the_sync_answers() -> None:
    h = harness()
    formed = h.form_group("g", 2)
    persist_index = next(i for i, a in enumerate(h.actions) if isinstance(a, Persist))
    sync_indexes = [
        i
        for i, a in enumerate(h.actions)
        if not isinstance(a, Persist) and isinstance(a.result, SyncGroupResult)
    ]
    assert persist_index < min(sync_indexes)
    stored = h.persisted[-1].groups[0]
    assert stored.generation_id == formed.generation_id
    assert stored.leader == formed.leader
    assert {m.member_id: m.assignment for m in stored.members} == formed.assignments


def test_a_member_rejoining_with_no_protocol_the_others_support_is_refused_but_kept() -> None:
    h = harness()
    formed = h.form_group("g", 2, protocols=(("range", b""),))
    result = h.call(join_request("g", formed.leader, protocols=(("sticky", b""),)), JoinGroupResult)
    assert result.error is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert result.member_id == formed.leader
    group = h.group("g")
    assert group.has_member(formed.leader)
    assert group.is_in(GroupState.STABLE)
