"""MemberSlotStore: commits batched per loop pass, each partition naming its resource
(the member's machine chooses the generations: tests/unit/member/test_member_commits.py)."""

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
from workgroup.runtime.batched_slots import MemberSlotStore
from workgroup.runtime.lease import Slot
from workgroup.types import Resource


class FakeMember:
    def __init__(self) -> None:
        self.requests: list[tuple[list[tuple[str, int, str | None]], dict[Any, Resource]]] = []

    async def commit_offsets(
        self, topics: list[CommitTopic], *, resources: dict[Any, Resource] | None = None
    ) -> OffsetCommitResult:
        parts = [(t.name, p.partition, p.metadata) for t in topics for p in t.partitions]
        self.requests.append((parts, dict(resources or {})))

        def error(topic: str, partition: int) -> ErrorCode:
            # As the machine answers a resource given up in a generation the group left.
            resource = (resources or {}).get((topic, partition))
            return ErrorCode.ILLEGAL_GENERATION if resource == ("shard", "c") else ErrorCode.NONE

        return OffsetCommitResult(
            tuple(
                CommitTopicResult(
                    t.name,
                    tuple(
                        CommitPartitionResult(p.partition, error(t.name, p.partition))
                        for p in t.partitions
                    ),
                )
                for t in topics
            )
        )


async def test_commits_of_one_pass_go_in_one_request_naming_each_partitions_resource() -> None:
    member = FakeMember()
    store = MemberSlotStore(member)  # type: ignore[arg-type]
    calls: list[Any] = [
        store.commit(Slot("leases", 0), 5, "a", resource=("shard", "a")),
        store.commit(Slot("leases", 1), 6, "b"),
        store.commit(Slot("leases", 2), 2, "c", resource=("shard", "c")),
    ]
    errors = await asyncio.gather(*calls)
    assert errors == [ErrorCode.NONE, ErrorCode.NONE, ErrorCode.ILLEGAL_GENERATION]
    assert member.requests == [
        (
            [("leases", 0, "a"), ("leases", 1, "b"), ("leases", 2, "c")],
            {("leases", 0): ("shard", "a"), ("leases", 2): ("shard", "c")},
        )
    ]
