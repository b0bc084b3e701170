"""OffsetCommit validation (the fencing primitive) and OffsetFetch."""

from __future__ import annotations

import pytest

from workgroup.coordinator.actions import Persist, Reply
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    FENCE_CLIENT_ID,
    ClientInfo,
    CommitPartition,
    CommitTopic,
    FetchTopic,
    Heartbeat,
    HeartbeatResult,
    JoinGroupResult,
    OffsetCommit,
    OffsetCommitResult,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
)
from workgroup.testing.coordinator import CoordinatorHarness, FormedGroup, join_request


def harness(**config: int) -> CoordinatorHarness:
    return CoordinatorHarness(CoordinatorConfig(initial_rebalance_delay_ms=100, **config))


def commit(
    h: CoordinatorHarness,
    generation_id: int,
    member_id: str,
    *partitions: CommitPartition,
    topic: str = "orders",
    group_id: str = "g",
    instance: str | None = None,
    api_version: int = 8,
) -> list[ErrorCode]:
    request = OffsetCommit(
        group_id,
        generation_id,
        member_id,
        (CommitTopic(topic, partitions or (CommitPartition(0, 42, "meta"),)),),
        group_instance_id=instance,
        api_version=api_version,
    )
    result = h.call(request, OffsetCommitResult)
    return [p.error for t in result.topics for p in t.partitions]


def fetch(
    h: CoordinatorHarness, group_id: str = "g", topics: tuple[FetchTopic, ...] | None = None
) -> OffsetFetchResult:
    return h.call(OffsetFetch((OffsetFetchGroup(group_id, topics),)), OffsetFetchResult)


def test_member_of_the_current_generation_commits_and_the_commit_is_persisted_first() -> None:
    h = harness()
    formed = h.form_group("g", 2)
    before = len(h.actions)
    errors = commit(h, formed.generation_id, formed.leader, CommitPartition(3, 100, "checkpoint"))
    assert errors == [ErrorCode.NONE]
    persist, reply = h.actions[before:]
    assert isinstance(persist, Persist)
    assert isinstance(reply, Reply)
    stored = persist.offsets[0]
    assert (stored.group_id, stored.topic, stored.partition, stored.offset) == (
        "g",
        "orders",
        3,
        100,
    )
    assert stored.metadata == "checkpoint"
    assert stored.commit_timestamp_ms == h.now_ms
    fetched = fetch(h, topics=(FetchTopic("orders", (3,)),)).groups[0].topics[0].partitions[0]
    assert (fetched.offset, fetched.metadata) == (100, "checkpoint")


def test_a_stale_generation_is_fenced_with_illegal_generation() -> None:
    h = harness()
    formed = h.form_group("g", 2)
    a, b = formed.member_ids
    # A rebalance completes without b noticing it yet.
    ta = h.send(join_request("g", a))
    tb = h.send(join_request("g", b))
    new_generation = h.result(tb, JoinGroupResult).generation_id
    h.sync("g", a, new_generation, ((a, b"x"), (b, b"y")))
    assert commit(h, formed.generation_id, b) == [ErrorCode.ILLEGAL_GENERATION]
    assert commit(h, new_generation, a) == [ErrorCode.NONE]
    assert h.answered(ta)


def test_commit_validation_errors() -> None:
    h = harness()
    formed = h.form_group("g", 1)
    generation = formed.generation_id
    assert commit(h, generation, "ghost") == [ErrorCode.UNKNOWN_MEMBER_ID]
    assert commit(h, generation, formed.leader, group_id="") == [ErrorCode.INVALID_GROUP_ID]
    # Generation -1 without member id is only for Empty groups.
    assert commit(h, -1, "") == [ErrorCode.UNKNOWN_MEMBER_ID]
    # Generation -1 *with* a member id is validated like any other commit.
    assert commit(h, -1, formed.leader) == [ErrorCode.ILLEGAL_GENERATION]


def test_static_member_with_a_replaced_id_cannot_commit() -> None:
    h = harness()
    first = h.send(join_request("g", group_instance_id="host-a"))
    h.advance_until_answered(first)
    old = h.result(first, JoinGroupResult)
    h.sync("g", old.member_id, old.generation_id, ((old.member_id, b"x"),))
    h.call(join_request("g", group_instance_id="host-a"), JoinGroupResult)
    errors = commit(h, old.generation_id, old.member_id, instance="host-a")
    assert errors == [ErrorCode.FENCED_INSTANCE_ID]


def test_commit_from_outside_any_membership_creates_an_empty_group() -> None:
    h = harness()
    assert commit(h, -1, "", group_id="tool") == [ErrorCode.NONE]
    group = h.group("tool")
    assert group.protocol_type is None
    assert group.generation_id == 0
    assert (
        fetch(h, "tool", (FetchTopic("orders", (0,)),)).groups[0].topics[0].partitions[0].offset
        == 42
    )


@pytest.mark.parametrize(
    ("api_version", "error"), [(8, ErrorCode.ILLEGAL_GENERATION), (9, ErrorCode.GROUP_ID_NOT_FOUND)]
)
def test_commit_with_a_generation_to_a_missing_group(api_version: int, error: ErrorCode) -> None:
    h = harness()
    assert commit(h, 1, "m", group_id="nope", api_version=api_version) == [error]
    assert h.coordinator.group("nope") is None


def test_generation_minus_one_is_accepted_while_the_group_is_empty() -> None:
    h = harness()
    formed = h.form_group("g", 1, session_timeout_ms=6_000)
    h.advance(6_000)  # the member expires: the group is Empty again
    assert commit(h, -1, "") == [ErrorCode.NONE]
    assert commit(h, formed.generation_id, formed.leader) == [ErrorCode.UNKNOWN_MEMBER_ID]


def test_commit_during_completing_rebalance_is_rebalance_in_progress() -> None:
    h = harness()
    member, token = h.join_new_member("g")
    h.advance_until_answered(token)
    generation = h.result(token, JoinGroupResult).generation_id
    assert commit(h, generation, member) == [ErrorCode.REBALANCE_IN_PROGRESS]


def test_commit_during_preparing_rebalance_is_accepted_and_keeps_the_session() -> None:
    h = harness()
    formed = h.form_group("g", 2, session_timeout_ms=10_000)
    a, b = formed.member_ids
    h.send(join_request("g", a))  # rebalance; b does not rejoin yet
    h.advance(9_000)
    assert commit(h, formed.generation_id, b) == [ErrorCode.NONE]
    h.advance(9_000)  # 18 s after the last heartbeat, 9 s after the commit
    assert h.group("g").has_member(b)


def test_a_fence_commits_and_heartbeats_but_never_keeps_the_session() -> None:
    # A remote writer committing with a portable fence must not keep a dead
    # daemon's member alive (workgroup.fence, rule 5).
    h = harness()
    formed = h.form_group("g", 2, session_timeout_ms=10_000)
    a, b = formed.member_ids
    fence = ClientInfo(FENCE_CLIENT_ID, "127.0.0.1")
    for _ in range(4):  # b's daemon is gone: only its fence speaks, every 3 s
        h.advance(3_000)
        h.heartbeat("g", a, formed.generation_id)
        if not h.group("g").has_member(b):
            break
        commit_request = OffsetCommit(
            "g",
            formed.generation_id,
            b,
            (CommitTopic("orders", (CommitPartition(0, 7, "fenced"),)),),
            client=fence,
        )
        result = h.call(commit_request, OffsetCommitResult)
        assert [p.error for t in result.topics for p in t.partitions] == [ErrorCode.NONE]
        beat = Heartbeat("g", formed.generation_id, b, client=fence)
        assert h.call(beat, HeartbeatResult).error is ErrorCode.NONE
    assert not h.group("g").has_member(b)
    assert h.group("g").has_member(a)
    assert commit(h, formed.generation_id, b) == [ErrorCode.UNKNOWN_MEMBER_ID]


def test_metadata_limit_is_per_partition_and_counts_utf16_units() -> None:
    h = harness(offset_metadata_max_bytes=4)
    formed = h.form_group("g", 1)
    errors = commit(
        h,
        formed.generation_id,
        formed.leader,
        CommitPartition(0, 1, "abcd"),  # exactly at the limit
        CommitPartition(1, 1, "abcde"),
        CommitPartition(2, 1, "éééé"),  # 4 UTF-16 units, 8 UTF-8 bytes: accepted as in Kafka
        CommitPartition(3, 1, "😀😀😀"),  # 6 UTF-16 units (surrogate pairs)
    )
    assert errors == [
        ErrorCode.NONE,
        ErrorCode.OFFSET_METADATA_TOO_LARGE,
        ErrorCode.NONE,
        ErrorCode.OFFSET_METADATA_TOO_LARGE,
    ]
    stored = h.persisted[-1].offsets
    assert [o.partition for o in stored] == [0, 2]


def test_null_metadata_is_kept_as_empty_string_and_any_topic_name_is_accepted() -> None:
    h = harness()
    formed = h.form_group("g", 1)
    errors = commit(
        h, formed.generation_id, formed.leader, CommitPartition(7, 5, None), topic="no/such topic!"
    )
    assert errors == [ErrorCode.NONE]
    fetched = fetch(h, topics=(FetchTopic("no/such topic!", (7,)),)).groups[0].topics[0]
    assert fetched.partitions[0].metadata == ""
    assert fetched.partitions[0].offset == 5


def test_fetch_all_unknown_partitions_and_missing_groups() -> None:
    h = harness()
    formed = h.form_group("g", 1)
    commit(h, formed.generation_id, formed.leader, CommitPartition(1, 10, "a"), topic="t1")
    commit(h, formed.generation_id, formed.leader, CommitPartition(0, 20, "b"), topic="t0")
    everything = fetch(h).groups[0]
    assert everything.error is ErrorCode.NONE
    assert [
        (t.name, [(p.partition, p.offset) for p in t.partitions]) for t in everything.topics
    ] == [
        ("t0", [(0, 20)]),
        ("t1", [(1, 10)]),
    ]
    some = fetch(h, topics=(FetchTopic("t1", (1, 2)), FetchTopic("zz", (0,)))).groups[0]
    assert [[p.offset for p in t.partitions] for t in some.topics] == [[10, -1], [-1]]
    assert some.topics[0].partitions[1].metadata == ""
    # A missing group is not an error for classic groups: nothing committed.
    missing = fetch(h, "nope", (FetchTopic("t1", (1,)),)).groups[0]
    assert missing.error is ErrorCode.NONE
    assert missing.topics[0].partitions[0].offset == -1
    assert fetch(h, "nope").groups[0].topics == ()
    assert fetch(h, "").groups[0].error is ErrorCode.INVALID_GROUP_ID


def test_fetching_everything_answers_by_topic_then_partition_whatever_the_commit_order() -> None:
    h = harness()
    formed = h.form_group("g", 1)
    for topic, partition in (("t2", 3), ("t1", 2), ("t2", 0), ("t10", 1), ("t1", 0), ("t2", 1)):
        commit(
            h,
            formed.generation_id,
            formed.leader,
            CommitPartition(partition, 100 + partition, f"{topic}/{partition}"),
            topic=topic,
        )
    everything = fetch(h).groups[0]
    assert [
        (t.name, [(p.partition, p.metadata) for p in t.partitions]) for t in everything.topics
    ] == [
        ("t1", [(0, "t1/0"), (2, "t1/2")]),
        ("t10", [(1, "t10/1")]),
        ("t2", [(0, "t2/0"), (1, "t2/1"), (3, "t2/3")]),
    ]


def test_fetch_several_groups_in_one_request() -> None:
    h = harness()
    commit(h, -1, "", CommitPartition(0, 1), group_id="a")
    commit(h, -1, "", CommitPartition(0, 2), group_id="b")
    result = h.call(
        OffsetFetch((OffsetFetchGroup("a", None), OffsetFetchGroup("b", None))), OffsetFetchResult
    )
    assert [g.topics[0].partitions[0].offset for g in result.groups] == [1, 2]


def test_commit_to_a_dead_group_is_coordinator_not_available() -> None:
    h = harness()
    formed = h.form_group("g", 1)
    h.coordinator.unload(h.now_ms)
    assert commit(h, formed.generation_id, formed.leader) == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    # Offsets of a Dead group read as absent, as in Kafka.
    assert fetch(h).groups[0].topics == ()


# --- retention (offsets.retention.minutes, KIP-211) -----------------------------------

MINUTE = 60_000


def retention(minutes: int = 60, check_ms: int = MINUTE) -> CoordinatorHarness:
    return harness(
        offsets_retention_ms=minutes * MINUTE, offsets_retention_check_interval_ms=check_ms
    )


def committed(h: CoordinatorHarness, group_id: str = "g") -> list[int]:
    topics = fetch(h, group_id, (FetchTopic("orders", (0, 1)),)).groups[0].topics
    return [p.offset for p in topics[0].partitions]


def keep_alive(h: CoordinatorHarness, formed: FormedGroup, minutes: int) -> None:
    for _ in range(minutes // 4):
        h.advance(4 * MINUTE)
        for member in formed.member_ids:
            assert h.heartbeat("g", member, formed.generation_id) is ErrorCode.NONE


def leave_all(h: CoordinatorHarness, formed: FormedGroup) -> None:
    from workgroup.kafka.messages import LeaveGroup, LeaveGroupResult, LeavingMember

    members = tuple(LeavingMember(m, None) for m in formed.member_ids)
    h.call(LeaveGroup("g", members, api_version=3), LeaveGroupResult)


def test_a_group_with_members_keeps_its_offsets_past_the_retention() -> None:
    h = retention(minutes=60)
    formed = h.form_group("g", 1, session_timeout_ms=300_000)
    commit(h, formed.generation_id, formed.leader, CommitPartition(0, 7, "c"))
    for _ in range(30):  # two hours, heartbeating
        h.advance(4 * MINUTE)
        h.heartbeat("g", formed.leader, formed.generation_id)
    assert committed(h) == [7, -1]


def test_an_empty_group_loses_its_offsets_a_retention_after_it_became_empty() -> None:
    h = retention(minutes=60)
    formed = h.form_group("g", 2, session_timeout_ms=300_000)
    commit(h, formed.generation_id, formed.leader, CommitPartition(0, 7, "c"))
    keep_alive(h, formed, 52)  # old commits, but the group was not Empty: they count from now
    leave_all(h, formed)
    assert h.group("g").state.value == "Empty"
    h.advance(59 * MINUTE)
    assert committed(h) == [7, -1]
    fired = h.advance(2 * MINUTE)
    assert committed(h) == [-1, -1]
    tombstones = [o for a in fired if isinstance(a, Persist) for o in a.offsets]
    assert [(o.partition, o.deleted) for o in tombstones] == [(0, True)]
    # Without offsets the Empty group itself goes (DescribeGroups: Dead).
    with pytest.raises(AssertionError, match="does not exist"):
        h.group("g")


def test_a_group_that_comes_back_before_the_retention_keeps_its_offsets() -> None:
    h = retention(minutes=60)
    formed = h.form_group("g", 1)
    commit(h, formed.generation_id, formed.leader, CommitPartition(0, 7, "c"))
    leave_all(h, formed)
    h.advance(40 * MINUTE)
    again = h.form_group("g", 1, session_timeout_ms=300_000)
    keep_alive(h, again, 12)
    leave_all(h, again)
    h.advance(55 * MINUTE)  # 107 minutes since the commit, 55 since Empty again
    assert committed(h) == [7, -1]
    h.advance(6 * MINUTE)
    assert committed(h) == [-1, -1]


def test_commits_from_outside_any_membership_expire_one_by_one() -> None:
    h = retention(minutes=60)
    commit(h, -1, "", CommitPartition(0, 1, "a"))
    h.advance(30 * MINUTE)
    commit(h, -1, "", CommitPartition(1, 2, "b"))
    h.advance(31 * MINUTE)
    assert committed(h) == [-1, 2]
    h.advance(30 * MINUTE)
    assert committed(h) == [-1, -1]


def test_retention_minus_one_keeps_offsets_forever() -> None:
    h = harness(offsets_retention_ms=-1)
    commit(h, -1, "", CommitPartition(0, 1, "a"))
    assert h.coordinator.next_deadline_ms() is None or h.advance(10**10) is not None
    h.advance(365 * 24 * 60 * MINUTE)
    assert committed(h) == [1, -1]


def test_restored_offsets_count_their_retention_from_the_restart() -> None:
    from workgroup.coordinator.actions import StoredOffset

    h = retention(minutes=60)
    old = StoredOffset("g", "orders", 0, 5, "x", -1, commit_timestamp_ms=-(10**9))
    h.advance(MINUTE)
    h.coordinator.restore(h.now_ms, [], [old])
    h.advance(59 * MINUTE)
    assert committed(h) == [5, -1]
    h.advance(2 * MINUTE)
    assert committed(h) == [-1, -1]


@pytest.mark.parametrize(
    "config",
    [
        {"offsets_retention_ms": 0},
        {"offsets_retention_ms": -2},
        {"offsets_retention_check_interval_ms": 0},
    ],
)
def test_bad_retention_settings_are_refused(config: dict[str, int]) -> None:
    from workgroup.errors import ConfigError

    with pytest.raises(ConfigError, match="retention"):
        CoordinatorConfig(**config)
