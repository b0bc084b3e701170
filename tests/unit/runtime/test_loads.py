"""Current loads between rebalances (:mod:`workgroup.runtime.loads`): encoding,
what is worth writing, how readers join them with the assignment, and the
reporter's one commit per changed value."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from workgroup.coordinator.acl import LOAD_GROUP_PREFIX, GroupAcl
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    CommitPartitionResult,
    CommitTopic,
    CommitTopicResult,
    OffsetCommitResult,
)
from workgroup.keyspaces.hashing import HASH_SPACE
from workgroup.keyspaces.slices import Slice, SliceMap
from workgroup.protocol.metadata import MemberMetadata
from workgroup.runtime.keyspace_slots import pool_slot_key
from workgroup.runtime.loads import (
    CommittedLoads,
    LoadReporter,
    changed_materially,
    current_load,
    decode_load,
    encode_load,
    load_group,
    slice_load,
)
from workgroup.runtime.slots import slot_header, slot_of
from workgroup.types import Resource

GROUP = "app.shard"


def test_a_load_is_an_offset_in_thousandths() -> None:
    assert encode_load(7.5) == 7500
    assert decode_load(encode_load(0.0)) == 0.0
    assert decode_load(encode_load(12.3456)) == 12.346
    assert encode_load(1e300) == 2**63 - 1
    assert load_group(GROUP) == "workgroup-loads.app.shard"


@pytest.mark.parametrize(
    ("written", "load", "worth"),
    [
        (None, 0.0, True),
        (10.0, 10.4, False),  # 4 %: noise
        (10.0, 10.6, True),
        (10.0, 9.4, True),
        (0.0, 0.0005, False),  # below the offset's resolution
        (0.0, 0.002, True),
    ],
)
def test_only_a_material_change_is_written(written: float | None, load: float, worth: bool) -> None:
    assert changed_materially(written, load) is worth


def test_a_member_load_prefers_the_committed_one_over_the_join() -> None:
    joined = MemberMetadata(
        kinds=("shard",), owned=(("shard", 0), ("shard", 1)), loads=(1.0, math.nan)
    )
    assignment = {"shard": [0, 1], "shard.standby": [2]}
    committed = {slot_of(GROUP, 1).topic: 4.0, slot_of(GROUP, 2).topic: 100.0}
    # 0 from the join, 1 committed since; the standby twin is no active load.
    assert current_load(GROUP, assignment, joined, committed) == 5.0
    assert current_load(GROUP, assignment, joined, {}) == 1.0
    assert current_load(GROUP, assignment, None, {}) is None
    assert current_load(GROUP, None, joined, committed) is None


class FakeMember:
    def __init__(self) -> None:
        self.assignment: frozenset[Resource] = frozenset({("shard", 0), ("shard", 1)})
        self.loads: dict[Resource, float] = {}

    def measured_load(self, resource: Resource) -> float | None:
        return self.loads.get(resource)


class FakeOffsets:
    def __init__(self) -> None:
        self.commits: list[dict[str, tuple[int, str]]] = []
        self.error = ErrorCode.NONE

    async def commit(self, topics: Sequence[CommitTopic]) -> OffsetCommitResult:
        self.commits.append(
            {t.name: (t.partitions[0].offset, t.partitions[0].metadata or "") for t in topics}
        )
        return OffsetCommitResult(
            topics=tuple(
                CommitTopicResult(t.name, (CommitPartitionResult(0, self.error),)) for t in topics
            )
        )

    async def close(self) -> None:
        pass


async def test_the_reporter_commits_once_per_material_change() -> None:
    member, offsets = FakeMember(), FakeOffsets()
    reporter = LoadReporter(member, GROUP, "shard", offsets)
    await reporter.report()
    assert offsets.commits == []  # nothing measured
    member.loads = {("shard", 0): 2.0, ("shard", 1): 3.0}
    await reporter.report()
    assert offsets.commits == [
        {
            slot_of(GROUP, 0).topic: (2000, slot_header(0)),
            slot_of(GROUP, 1).topic: (3000, slot_header(1)),
        }
    ]
    member.loads = {("shard", 0): 2.01, ("shard", 1): 6.0}
    await reporter.report()
    await reporter.report()
    assert offsets.commits[1:] == [{slot_of(GROUP, 1).topic: (6000, slot_header(1))}]
    assert reporter.commits == 2
    # A resource that moves away and back is written afresh.
    member.assignment = frozenset({("shard", 1)})
    await reporter.report()
    member.assignment = frozenset({("shard", 0), ("shard", 1)})
    await reporter.report()
    assert offsets.commits[2:] == [{slot_of(GROUP, 0).topic: (2010, slot_header(0))}]


async def test_a_refused_report_is_written_again_next_time() -> None:
    member, offsets = FakeMember(), FakeOffsets()
    member.loads = {("shard", 0): 2.0}
    reporter = LoadReporter(member, GROUP, "shard", offsets)
    offsets.error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    await reporter.report()
    assert reporter.commits == 0
    offsets.error = ErrorCode.NONE
    await reporter.report()
    assert reporter.commits == 1
    assert len(offsets.commits) == 2


def test_loads_are_authorised_as_the_commits_of_their_group() -> None:
    acl = GroupAcl.parse(
        """
        [[allow]]
        principals = ["alice"]
        groups = ["orders"]
        operations = ["join", "commit"]
        """
    )
    companion = LOAD_GROUP_PREFIX + "orders"
    assert acl.allows("User:alice", "commit", companion)
    assert acl.allows("User:alice", "describe", companion)
    assert not acl.allows("User:bob", "commit", companion)
    assert not acl.allows("User:alice", "commit", LOAD_GROUP_PREFIX + "payments")


# --- a keyspace's slices: loads in their pool slots -------------------------------------

KEYSPACE_GROUP = "app.users"
HALF = HASH_SPACE // 2
#: Slices 40 and 41 in pool slots 1 and 0 (slice ids are never reused; slots are).
USERS = SliceMap(
    "users",
    (Slice(40, 0, HALF, 40, "m0", slot=1), Slice(41, HALF, HASH_SPACE, 41, "m0", slot=0)),
    max_token=41,
)


def pool_topic(slot: int) -> str:
    return slot_of(KEYSPACE_GROUP, pool_slot_key("users", slot)).topic


async def test_a_slice_s_load_is_written_to_its_pool_slot_naming_the_slice() -> None:
    member, offsets = FakeMember(), FakeOffsets()
    member.assignment = frozenset({("users", 40), ("users", 41)})
    member.loads = {("users", 40): 1.5, ("users", 41): 2.0}
    slots = {piece.id: piece.slot for piece in USERS.slices}
    reporter = LoadReporter(
        member,
        KEYSPACE_GROUP,
        "users",
        offsets,
        slot_for=lambda key: slot_of(KEYSPACE_GROUP, pool_slot_key("users", slots[key])),
    )
    await reporter.report()
    assert offsets.commits == [
        {pool_topic(1): (1500, slot_header(40)), pool_topic(0): (2000, slot_header(41))}
    ]


def test_readers_take_a_slice_s_load_from_its_pool_slot_only_if_it_names_the_slice() -> None:
    assignment = {"users": [40, 41]}
    joined = MemberMetadata(
        kinds=("users",), owned=(("users", 40), ("users", 41)), loads=(0.5, 0.25)
    )
    committed = CommittedLoads(
        {pool_topic(1): 1.5, pool_topic(0): 2.0}, {pool_topic(1): 40, pool_topic(0): 41}
    )
    keyspaces = {"users": USERS}
    assert current_load(KEYSPACE_GROUP, assignment, joined, committed, keyspaces) == 3.5
    # Without the maps the slots are looked for by slice id: the join's loads.
    assert current_load(KEYSPACE_GROUP, assignment, joined, committed) == 0.75
    # Slot 0 still holds the load of slice 12, which held it before slice 41.
    handed_on = CommittedLoads(
        {pool_topic(1): 1.5, pool_topic(0): 9.0}, {pool_topic(1): 40, pool_topic(0): 12}
    )
    first, second = USERS.slices
    assert slice_load(KEYSPACE_GROUP, second, USERS, handed_on) is None
    assert slice_load(KEYSPACE_GROUP, first, USERS, handed_on) == 1.5
    assert current_load(KEYSPACE_GROUP, assignment, joined, handed_on, keyspaces) == 1.75
    # A coordinator that keeps no commit metadata (Tansu) names nothing: the load stands.
    plain = {pool_topic(1): 1.5, pool_topic(0): 2.0}
    assert current_load(KEYSPACE_GROUP, assignment, None, plain, keyspaces) == 3.5
    # A slice given no pool slot keeps the slot of its id.
    unpooled = SliceMap("users", (Slice(7, 0, HASH_SPACE, 7, "m0"),), max_token=7)
    assert (
        slice_load(
            KEYSPACE_GROUP,
            unpooled.slices[0],
            unpooled,
            CommittedLoads({slot_of(KEYSPACE_GROUP, 7).topic: 4.0}),
        )
        == 4.0
    )
