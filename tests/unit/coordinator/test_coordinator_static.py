"""Static membership (KIP-345) and the static leader's rejoin (KIP-814)."""

from __future__ import annotations

from workgroup.coordinator.actions import Persist, Reply
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.group import GroupState
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import JoinGroupResult, SyncGroupResult
from workgroup.testing.coordinator import CoordinatorHarness, Token, join_request

PROTOCOLS = (("range", b"r"), ("roundrobin", b"rr"))


def harness() -> CoordinatorHarness:
    return CoordinatorHarness(CoordinatorConfig(initial_rebalance_delay_ms=100))


def static_join(h: CoordinatorHarness, instance: str, member_id: str = "", **kw: object) -> Token:
    kw.setdefault("protocols", PROTOCOLS)
    return h.send(join_request("g", member_id, group_instance_id=instance, **kw))  # type: ignore[arg-type]


def stable_static_group(
    h: CoordinatorHarness, size: int, session_timeout_ms: int = 10_000
) -> dict[str, str]:
    """A Stable group of static members host-0..; returns instance id -> member id."""
    tokens = {
        f"host-{i}": static_join(h, f"host-{i}", session_timeout_ms=session_timeout_ms)
        for i in range(size)
    }
    h.advance_until_answered(*tokens.values())
    results = {i: h.result(t, JoinGroupResult) for i, t in tokens.items()}
    leader = results["host-0"].leader
    generation = results["host-0"].generation_id
    ids = {i: r.member_id for i, r in results.items()}
    assignment = tuple((m, f"work-{i}".encode()) for i, m in ids.items())
    for instance, member_id in ids.items():
        h.sync(
            "g",
            member_id,
            generation,
            assignment if member_id == leader else (),
            group_instance_id=instance,
        )
    assert h.group("g").is_in(GroupState.STABLE)
    return ids


def test_static_members_join_without_member_id_required() -> None:
    h = harness()
    token = static_join(h, "host-a", api_version=9)
    assert not h.answered(token)  # admitted at once (parked in the initial rebalance)
    h.advance_until_answered(token)
    assert h.result(token, JoinGroupResult).member_id.startswith("host-a-")


def test_restart_gets_a_new_id_fences_the_old_one_and_does_not_rebalance() -> None:
    h = harness()
    ids = stable_static_group(h, 3)
    group = h.group("g")
    generation = group.generation_id
    before = len(h.actions)
    restarted = h.result(static_join(h, "host-1"), JoinGroupResult)
    assert restarted.error is ErrorCode.NONE
    assert restarted.member_id != ids["host-1"]
    assert restarted.generation_id == generation
    assert restarted.members == ()
    assert group.is_in(GroupState.STABLE)
    assert group.generation_id == generation
    # The new id is durable before the member learns it.
    new_actions = h.actions[before:]
    assert isinstance(new_actions[0], Persist)
    assert isinstance(new_actions[1], Reply)
    stored_ids = {m.group_instance_id: m.member_id for m in new_actions[0].groups[0].members}
    assert stored_ids["host-1"] == restarted.member_id
    # The old incarnation is fenced, the others are untouched.
    fenced = h.heartbeat("g", ids["host-1"], generation, group_instance_id="host-1")
    assert fenced is ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat("g", ids["host-0"], generation, "host-0") is ErrorCode.NONE
    # The restarted member picks its old assignment up with SyncGroup.
    answer = h.result(
        h.sync("g", restarted.member_id, generation, group_instance_id="host-1"), SyncGroupResult
    )
    assert answer.assignment == b"work-host-1"


def test_restart_that_changes_the_chosen_protocol_rebalances() -> None:
    h = harness()
    stable_static_group(h, 2)
    token = static_join(h, "host-1", protocols=(("roundrobin", b"rr"),))
    assert not h.answered(token)
    assert h.group("g").is_in(GroupState.PREPARING_REBALANCE)


def test_static_leader_rejoin_v9_skips_assignment_but_gets_the_members() -> None:
    h = harness()
    ids = stable_static_group(h, 3)
    leader_instance = next(i for i, m in ids.items() if h.group("g").is_leader(m))
    result = h.result(static_join(h, leader_instance, api_version=9), JoinGroupResult)
    assert result.skip_assignment is True
    assert result.leader == result.member_id
    assert len(result.members) == 3
    assert h.group("g").is_in(GroupState.STABLE)


def test_static_leader_rejoin_before_v9_is_told_the_old_leader_id() -> None:
    h = harness()
    ids = stable_static_group(h, 2)
    leader_instance = next(i for i, m in ids.items() if h.group("g").is_leader(m))
    result = h.result(static_join(h, leader_instance, api_version=8), JoinGroupResult)
    # As in Kafka: the rejoined leader sees another leader id and acts as a follower.
    assert result.leader == ids[leader_instance]
    assert result.member_id != result.leader
    assert result.members == ()
    assert result.skip_assignment is False


def test_restart_during_the_sync_phase_fences_the_old_sync_and_rebalances() -> None:
    h = harness()
    tokens = {f"host-{i}": static_join(h, f"host-{i}") for i in range(2)}
    h.advance_until_answered(*tokens.values())
    results = {i: h.result(t, JoinGroupResult) for i, t in tokens.items()}
    follower = next(i for i, r in results.items() if r.member_id != r.leader)
    parked_follower = h.sync(
        "g",
        results[follower].member_id,
        results[follower].generation_id,
        group_instance_id=follower,
    )
    # Before the leader's SyncGroup, the follower restarts.
    restart = static_join(h, follower)
    assert h.result(parked_follower, SyncGroupResult).error is ErrorCode.FENCED_INSTANCE_ID
    assert not h.answered(restart)
    assert h.group("g").is_in(GroupState.PREPARING_REBALANCE)


def test_restart_during_the_join_phase_fences_the_old_parked_join() -> None:
    h = harness()
    ids = stable_static_group(h, 2)
    old = static_join(h, "host-1", ids["host-1"], protocols=(("range", b"changed"),))
    assert not h.answered(old)
    new = static_join(h, "host-1")
    fenced = h.result(old, JoinGroupResult)
    assert fenced.error is ErrorCode.FENCED_INSTANCE_ID
    assert fenced.member_id == ids["host-1"]
    static_join(h, "host-0", ids["host-0"])
    result = h.result(new, JoinGroupResult)
    assert result.error is ErrorCode.NONE
    assert result.member_id != ids["host-1"]


def test_known_member_id_with_wrong_or_unknown_instance() -> None:
    h = harness()
    ids = stable_static_group(h, 2)
    fenced = h.result(static_join(h, "host-1", ids["host-0"]), JoinGroupResult)
    assert fenced.error is ErrorCode.FENCED_INSTANCE_ID
    unknown = h.result(static_join(h, "host-7", ids["host-0"]), JoinGroupResult)
    assert unknown.error is ErrorCode.UNKNOWN_MEMBER_ID


def test_static_members_that_miss_a_rebalance_are_kept_until_their_session_ends() -> None:
    h = harness()
    tokens = {
        f"host-{i}": static_join(
            h, f"host-{i}", session_timeout_ms=60_000, rebalance_timeout_ms=10_000
        )
        for i in range(2)
    }
    h.advance_until_answered(*tokens.values())
    results = {i: h.result(t, JoinGroupResult) for i, t in tokens.items()}
    generation = results["host-0"].generation_id
    leader = results["host-0"].leader
    for i, r in results.items():
        h.sync(
            "g",
            r.member_id,
            generation,
            ((leader, b"x"),) if r.member_id == leader else (),
            group_instance_id=i,
        )
    # host-0 rejoins with new metadata; host-1 is away (restarting) past the rebalance timeout.
    rejoin = static_join(
        h,
        "host-0",
        results["host-0"].member_id,
        protocols=(("range", b"v2"),),
        session_timeout_ms=60_000,
        rebalance_timeout_ms=10_000,
    )
    h.advance(10_000)
    result = h.result(rejoin, JoinGroupResult)
    # The absent static member stays in the group and in the leader's view.
    assert result.generation_id == generation + 1
    assert {m.group_instance_id for m in result.members} == {"host-0", "host-1"}
    assert h.group("g").static_member_id("host-1") == results["host-1"].member_id


def test_a_static_leader_that_misses_the_rebalance_hands_leadership_to_a_rejoined_member() -> None:
    h = harness()
    kw = {"session_timeout_ms": 60_000, "rebalance_timeout_ms": 10_000}
    ids = stable_static_group(h, 2, session_timeout_ms=60_000)
    leader_instance = next(i for i, m in ids.items() if h.group("g").is_leader(m))
    other = next(i for i in ids if i != leader_instance)
    token = static_join(h, other, ids[other], protocols=(("range", b"v2"),), **kw)
    h.advance(30_000)
    result = h.result(token, JoinGroupResult)
    assert result.leader == ids[other]
    # The absent static leader is kept (as a member) for the sync phase.
    assert {m.member_id for m in result.members} == set(ids.values())


def test_when_only_absent_static_members_remain_the_join_phase_waits_again() -> None:
    from workgroup.kafka.messages import LeaveGroup, LeaveGroupResult, LeavingMember

    h = harness()
    ids = stable_static_group(h, 2, session_timeout_ms=120_000)
    dynamic, token = h.join_new_member("g")
    # host-0/1 rejoin unchanged while the newcomer's rebalance runs.
    for instance, member_id in ids.items():
        static_join(h, instance, member_id, session_timeout_ms=120_000)
    h.advance_until_answered(token)
    generation = h.result(token, JoinGroupResult).generation_id
    leader = h.result(token, JoinGroupResult).leader
    members = h.result(token, JoinGroupResult).members
    if leader == dynamic:
        h.sync("g", dynamic, generation, tuple((m.member_id, b"") for m in members))
    else:
        instance = next(i for i, m in ids.items() if m == leader)
        h.sync(
            "g",
            leader,
            generation,
            tuple((m.member_id, b"") for m in members),
            group_instance_id=instance,
        )
    # The dynamic member leaves: a rebalance in which nobody rejoins.
    h.call(LeaveGroup("g", (LeavingMember(dynamic),)), LeaveGroupResult)
    group = h.group("g")
    assert group.is_in(GroupState.PREPARING_REBALANCE)
    timeout = group.rebalance_timeout_ms()
    h.advance(timeout)
    # Static members are never dropped for missing a rebalance: the phase waits again.
    assert group.is_in(GroupState.PREPARING_REBALANCE)
    assert set(group.members) == set(ids.values())
    rejoin = static_join(h, "host-0", ids["host-0"], session_timeout_ms=120_000)
    h.advance(timeout)
    result = h.result(rejoin, JoinGroupResult)
    assert result.generation_id == generation + 1
    assert result.leader == ids["host-0"]


def test_a_pending_member_id_cannot_be_claimed_by_a_static_member() -> None:
    h = harness()
    pending = h.call(join_request("g"), JoinGroupResult).member_id
    result = h.result(static_join(h, "host-a", pending), JoinGroupResult)
    assert result.error is ErrorCode.UNKNOWN_SERVER_ERROR  # Kafka fails the same request
    assert h.group("g").is_pending(pending)


def test_a_static_member_replaced_before_its_sync_settles_it_with_the_new_id() -> None:
    h = harness()
    kw = {"session_timeout_ms": 60_000, "rebalance_timeout_ms": 10_000}
    tokens = {i: static_join(h, i, **kw) for i in ("host-0", "host-1")}
    h.advance_until_answered(*tokens.values())
    results = {i: h.result(t, JoinGroupResult) for i, t in tokens.items()}
    leader = next(i for i, r in results.items() if r.member_id == r.leader)
    follower = next(i for i in results if i != leader)
    generation = results[leader].generation_id
    h.sync("g", results[leader].member_id, generation, (), group_instance_id=leader)
    assert h.group("g").is_in(GroupState.STABLE)
    # The follower restarts before it ever sent SyncGroup, then syncs with its new id.
    new = h.result(static_join(h, follower, **kw), JoinGroupResult)
    h.sync("g", new.member_id, generation, group_instance_id=follower)
    h.advance(10_000)  # the sync timeout passes
    group = h.group("g")
    assert group.is_in(GroupState.STABLE)
    assert group.generation_id == generation
