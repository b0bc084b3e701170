"""Lease state of the legacy (position) layout: refused with one line, or migrated."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    CommitPartitionResult,
    CommitTopic,
    CommitTopicResult,
    FetchedGroup,
    FetchedPartition,
    FetchedTopic,
    FetchTopic,
    OffsetCommitResult,
)
from workgroup.runtime.errors import LegacyLayoutError
from workgroup.runtime.legacy import MIGRATED_OFFSET, check_lease_layout
from workgroup.runtime.slots import decode_metadata, legacy_lease_topic, slot_header, slot_of
from workgroup.testing import capture_logs

GROUP = "app.shard"
OLD = legacy_lease_topic(GROUP)
KEYS = ["a", "b", "c"]


class FakeOffsets:
    """A group's committed offsets; commits from outside are refused while it has members."""

    def __init__(self, offsets: dict[tuple[str, int], tuple[int, str]] | None = None) -> None:
        self.offsets = dict(offsets or {})
        self.has_members = False
        self.requests = 0

    async def fetch(self, topics: Sequence[FetchTopic]) -> FetchedGroup:
        self.requests += 1
        return FetchedGroup(
            GROUP,
            tuple(
                FetchedTopic(
                    t.name,
                    tuple(
                        FetchedPartition(p, *self.offsets.get((t.name, p), (-1, "")))
                        for p in t.partitions
                    ),
                )
                for t in topics
            ),
        )

    async def commit(self, topics: Sequence[CommitTopic]) -> OffsetCommitResult:
        self.requests += 1
        error = ErrorCode.UNKNOWN_MEMBER_ID if self.has_members else ErrorCode.NONE
        if not self.has_members:
            for t in topics:
                for p in t.partitions:
                    self.offsets[(t.name, p.partition)] = (p.offset, p.metadata or "")
        return OffsetCommitResult(
            tuple(
                CommitTopicResult(
                    t.name, tuple(CommitPartitionResult(p.partition, error) for p in t.partitions)
                )
                for t in topics
            )
        )


def slot_state(offsets: FakeOffsets, key: str) -> tuple[int, str | None]:
    offset, metadata = offsets.offsets[(slot_of(GROUP, key).topic, 0)]
    contents = decode_metadata(metadata)
    assert contents.key == key
    return offset, contents.checkpoint


async def test_nothing_in_the_legacy_topic_costs_one_fetch() -> None:
    offsets = FakeOffsets()
    assert await check_lease_layout(offsets, GROUP, KEYS, migrate=False) == 0
    assert offsets.requests == 1


async def test_legacy_state_is_refused_with_one_line_saying_what_to_do() -> None:
    offsets = FakeOffsets({(OLD, 0): (4, "pos=1"), (OLD, 2): (2, "pos=9")})
    before = dict(offsets.offsets)
    with capture_logs() as logs, pytest.raises(LegacyLayoutError, match="--migrate-lease-layout"):
        await check_lease_layout(offsets, GROUP, KEYS, migrate=False)
    assert [e["event"] for e in logs] == ["lease.legacy_layout"]
    assert logs[0]["slots"] == 2
    assert offsets.offsets == before  # nothing changed
    assert LegacyLayoutError("x").exit_code == 2


async def test_migration_copies_each_position_to_its_key_and_marks_the_old_slots() -> None:
    offsets = FakeOffsets(
        {
            (OLD, 0): (4, "pos=1"),
            (OLD, 1): (1, ""),
            (OLD, 2): (2, "pos=9"),
            # Key c already has state of its own: it is kept.
            (slot_of(GROUP, "c").topic, 0): (7, slot_header("c") + "own"),
        }
    )
    assert await check_lease_layout(offsets, GROUP, KEYS, migrate=True) == 2
    assert slot_state(offsets, "a") == (4, "pos=1")
    assert slot_state(offsets, "b") == (1, None)
    assert slot_state(offsets, "c") == (7, "own")
    assert all(offsets.offsets[(OLD, i)][0] == MIGRATED_OFFSET for i in range(3))
    # The check passes from now on, migration asked or not.
    assert await check_lease_layout(offsets, GROUP, KEYS, migrate=False) == 0


async def test_migration_needs_a_group_without_members() -> None:
    offsets = FakeOffsets({(OLD, 0): (4, "pos=1")})
    offsets.has_members = True
    with pytest.raises(LegacyLayoutError, match=r"UNKNOWN_MEMBER_ID.*no members"):
        await check_lease_layout(offsets, GROUP, KEYS, migrate=True)
    assert offsets.offsets == {(OLD, 0): (4, "pos=1")}


async def test_positions_beyond_the_catalog_are_not_read() -> None:
    offsets = FakeOffsets({(OLD, 5): (4, "pos=1")})
    assert await check_lease_layout(offsets, GROUP, KEYS, migrate=False) == 0
