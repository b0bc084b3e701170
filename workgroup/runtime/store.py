"""Lease slots committed and read through a group member's coordinator."""

from __future__ import annotations

from workgroup.errors import CoordinatorError, ErrorCode, ProtocolError
from workgroup.kafka.messages import CommitPartition, CommitTopic, FetchTopic
from workgroup.member.driver import GroupMember
from workgroup.runtime.lease import Committed, Slot


class MemberSlotStore:
    """OffsetCommit and OffsetFetch of lease slots, as ``member`` (its generation,
    member id and instance id: the coordinator's fence)."""

    def __init__(self, member: GroupMember) -> None:
        self._member = member

    async def commit(self, slot: Slot, offset: int, metadata: str | None) -> ErrorCode:
        result = await self._member.commit_offsets(
            [CommitTopic(slot.topic, (CommitPartition(slot.partition, offset, metadata),))]
        )
        for topic in result.topics:
            for partition in topic.partitions:
                if topic.name == slot.topic and partition.partition == slot.partition:
                    return partition.error
        raise ProtocolError(f"OffsetCommit answered without {slot.topic}-{slot.partition}")

    async def fetch(self, slot: Slot) -> Committed:
        group = await self._member.fetch_offsets([FetchTopic(slot.topic, (slot.partition,))])
        if group.error is not ErrorCode.NONE:
            raise CoordinatorError(group.error, f"reading lease {slot}: {group.error.name}")
        for topic in group.topics:
            for partition in topic.partitions:
                if topic.name == slot.topic and partition.partition == slot.partition:
                    if partition.error is not ErrorCode.NONE:
                        raise CoordinatorError(
                            partition.error, f"reading lease {slot}: {partition.error.name}"
                        )
                    return Committed(partition.offset, partition.metadata)
        raise ProtocolError(f"OffsetFetch answered without {slot.topic}-{slot.partition}")


__all__ = ["MemberSlotStore"]
