"""MemberSlotStore: commits batched per loop pass, one request per generation."""

from __future__ import annotations

import asyncio
from typing import Any

from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    CommitPartitionResult,
    CommitTopic,
    CommitTopicResult,
    OffsetCommitResult,
)
from workgroup.runtime.lease import Slot
from workgroup.runtime.store import MemberSlotStore


class FakeMember:
    def __init__(self) -> None:
        self.requests: list[tuple[int | None, list[tuple[str, int, str | None]]]] = []

    async def commit_offsets(
        self, topics: list[CommitTopic], *, generation: int | None = None
    ) -> OffsetCommitResult:
        parts = [(t.name, p.partition, p.metadata) for t in topics for p in t.partitions]
        self.requests.append((generation, parts))
        # The coordinator refuses the old generation: the group moved on.
        error = ErrorCode.ILLEGAL_GENERATION if generation == 3 else ErrorCode.NONE
        return OffsetCommitResult(
            tuple(
                CommitTopicResult(
                    t.name, tuple(CommitPartitionResult(p.partition, error) for p in t.partitions)
                )
                for t in topics
            )
        )


async def test_commits_of_one_pass_go_in_one_request_per_generation() -> None:
    member = FakeMember()
    store = MemberSlotStore(member)  # type: ignore[arg-type]
    calls: list[Any] = [
        store.commit(Slot("leases", 0), 5, "a"),
        store.commit(Slot("leases", 1), 6, "b"),
        store.commit(Slot("leases", 2), 2, "c", generation=3),
    ]
    errors = await asyncio.gather(*calls)
    assert errors == [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.ILLEGAL_GENERATION]
    assert sorted(member.requests, key=lambda r: str(r[0])) == [
        (3, [("leases", 2, "c")]),
        (None, [("leases", 0, "a"), ("leases", 1, "b")]),
    ]
