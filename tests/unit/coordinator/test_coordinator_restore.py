"""Restoring persisted state after a coordinator restart."""

from __future__ import annotations

from workgroup.coordinator.actions import StoredGroup, StoredOffset
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.group import GroupState
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    CommitPartition,
    CommitTopic,
    DescribeGroups,
    DescribeGroupsResult,
    FetchTopic,
    JoinGroupResult,
    OffsetCommit,
    OffsetCommitResult,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
)
from workgroup.testing.coordinator import CoordinatorHarness, join_request


def replay(
    source: CoordinatorHarness, config: CoordinatorConfig | None = None, at_ms: int = 1_000_000
) -> CoordinatorHarness:
    """A new coordinator restored from everything ``source`` asked to persist."""
    groups: list[StoredGroup] = [g for p in source.persisted for g in p.groups]
    offsets: list[StoredOffset] = [o for p in source.persisted for o in p.offsets]
    restarted = CoordinatorHarness(config or source.config)
    restarted.clock.advance_to_ms(at_ms)
    restarted.coordinator.restore(at_ms, groups, offsets)
    return restarted


def test_a_stable_group_comes_back_stable_with_the_same_members_and_generation() -> None:
    h = CoordinatorHarness()
    formed = h.form_group("g", 3)
    commit = OffsetCommit(
        "g", formed.generation_id, formed.leader, (CommitTopic("t", (CommitPartition(0, 7, "m"),)),)
    )
    h.call(commit, OffsetCommitResult)
    r = replay(h)
    group = r.group("g")
    assert group.is_in(GroupState.STABLE)
    assert group.generation_id == formed.generation_id
    assert group.leader_id == formed.leader
    assert group.protocol_name == "range"
    for member in formed.member_ids:
        assert r.heartbeat("g", member, formed.generation_id) is ErrorCode.NONE
    (described,) = r.call(DescribeGroups(("g",)), DescribeGroupsResult).groups
    assert {m.member_id: m.assignment for m in described.members} == formed.assignments
    fetched = r.call(
        OffsetFetch((OffsetFetchGroup("g", (FetchTopic("t", (0,)),)),)), OffsetFetchResult
    )
    partition = fetched.groups[0].topics[0].partitions[0]
    assert (partition.offset, partition.metadata) == (7, "m")


def test_sessions_restart_when_the_state_is_restored() -> None:
    h = CoordinatorHarness()
    formed = h.form_group("g", 2, session_timeout_ms=10_000)
    r = replay(h, at_ms=5_000_000)
    alive, gone = formed.member_ids
    r.advance(9_000)
    assert r.heartbeat("g", alive, formed.generation_id) is ErrorCode.NONE
    r.advance(1_000)
    group = r.group("g")
    assert not group.has_member(gone)
    assert group.is_in(GroupState.PREPARING_REBALANCE)


def test_a_restarted_static_member_replacement_survives_a_restart() -> None:
    h = CoordinatorHarness()
    first = h.send(join_request("g", group_instance_id="host-a"))
    h.advance_until_answered(first)
    old = h.result(first, JoinGroupResult)
    h.sync("g", old.member_id, old.generation_id, ((old.member_id, b"x"),))
    new = h.call(join_request("g", group_instance_id="host-a"), JoinGroupResult)
    r = replay(h)
    assert r.heartbeat("g", new.member_id, new.generation_id, "host-a") is ErrorCode.NONE
    fenced = r.heartbeat("g", old.member_id, old.generation_id, "host-a")
    assert fenced is ErrorCode.FENCED_INSTANCE_ID


def test_an_oversized_group_rebalances_and_turns_the_last_rejoiners_away() -> None:
    h = CoordinatorHarness()
    formed = h.form_group("g", 3)
    r = replay(h, CoordinatorConfig(group_max_size=2))
    group = r.group("g")
    assert group.is_in(GroupState.PREPARING_REBALANCE)
    tokens = [r.send(join_request("g", m)) for m in formed.member_ids]
    assert r.result(tokens[2], JoinGroupResult).error is ErrorCode.GROUP_MAX_SIZE_REACHED
    # Turning the third away leaves everyone else joined: the rebalance completes.
    first = r.result(tokens[0], JoinGroupResult)
    assert first.generation_id == formed.generation_id + 1
    assert len(first.members) == 2


def test_empty_groups_deleted_groups_and_offsets_only_groups() -> None:
    h = CoordinatorHarness()
    h.form_group("emptied", 1, session_timeout_ms=6_000)
    h.advance(6_000)
    orphan = StoredOffset("simple", "t", 0, 9, "", -1, 0)
    restarted = CoordinatorHarness()
    restarted.coordinator.restore(
        0,
        [
            *(g for p in h.persisted for g in p.groups),
            StoredGroup("gone", 1, "consumer", "range", None, ()),
            StoredGroup("gone", 1, "consumer", "range", None, (), deleted=True),
        ],
        [
            orphan,
            StoredOffset("x", "t", 0, 1, "", -1, 0),
            StoredOffset("x", "t", 0, 1, "", -1, 0, deleted=True),
        ],
    )
    assert restarted.group("emptied").is_in(GroupState.EMPTY)
    assert restarted.group("emptied").generation_id == 2
    assert restarted.coordinator.group("gone") is None
    assert restarted.group("simple").is_in(GroupState.EMPTY)
    assert restarted.coordinator.group("x") is None
    assert restarted.coordinator.stored_offset("simple", "t", 0) == orphan
