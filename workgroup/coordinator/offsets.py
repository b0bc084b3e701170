"""Committed offsets of the embedded coordinator, and Kafka's rules for committing them.

Rules (Kafka's ``OffsetMetadataManager`` and ``ClassicGroup.validateOffsetCommit``):

* A commit names a generation and a member.  The group must know the member
  (UNKNOWN_MEMBER_ID, or FENCED_INSTANCE_ID for a replaced static member) and
  the generation must be the group's current one (ILLEGAL_GENERATION).  This is
  the fencing primitive: a member that missed a rebalance cannot commit.
* Generation -1 with no member id and no instance id is a commit from outside
  the group (an admin client or a "simple" consumer).  It is accepted only while
  the group is Empty; for a group that does not exist, an Empty group without
  protocol type is created to hold the offsets.  With a member id or instance
  id, a commit for generation -1 on a non-empty group is validated like any
  other (and fails with UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION).
* A commit for a generation >= 0 to a group that does not exist gets
  GROUP_ID_NOT_FOUND from OffsetCommit v9 on and ILLEGAL_GENERATION before.
* During CompletingRebalance a valid member's commit gets REBALANCE_IN_PROGRESS;
  during PreparingRebalance and Stable it is accepted and also counts as a
  heartbeat.  A Dead group answers COORDINATOR_NOT_AVAILABLE.
* Each partition's metadata string is kept as given; longer than
  ``offset_metadata_max_bytes`` it is refused with OFFSET_METADATA_TOO_LARGE for
  that partition alone.  Like Kafka, the limit counts UTF-16 code units (Java's
  ``String.length()``), not encoded bytes.

Deliberate differences from Kafka:

* **Any topic name is accepted.**  The embedded coordinator hosts no topics (its
  Metadata lists none), so it cannot check that a topic or partition exists;
  workgroup uses commits to record progress on arbitrary resources.  A broker
  would answer UNKNOWN_TOPIC_OR_PARTITION.
* **Retention counts from the coordinator's restart** for offsets loaded from
  its data directory: their commit times come from a monotonic clock that
  does not survive a reboot.  Expiry is therefore never early, at most late.

Offset retention (Kafka's ``offsets.retention.minutes``, KIP-211): an Empty
group's offsets all expire once it has been Empty for the retention time; a
group that never had members (commits from outside any membership) loses each
offset the retention time after its commit; a group with members keeps them.
An Empty group left without offsets is deleted.  ``-1`` keeps offsets forever.

OffsetFetch: for each requested partition the committed offset, or -1 with
empty metadata when nothing was committed.  With ``topics=None`` every
committed offset of the group.  A group that does not exist (or is Dead) is not
an error for classic groups: Kafka answers -1 for every requested partition (or
no topics at all for ``topics=None``) and never GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from dataclasses import replace

from workgroup.collector import collector_paused
from workgroup.coordinator.actions import StoredOffset
from workgroup.coordinator.group import Group, GroupState
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import FetchedPartition, FetchedTopic, FetchTopic, OffsetCommit

#: OffsetCommit version from which a missing group is GROUP_ID_NOT_FOUND.
GROUP_ID_NOT_FOUND_COMMIT_VERSION = 9


def metadata_length(metadata: str) -> int:
    """Length as Java's ``String.length()`` counts it (UTF-16 code units)."""
    return len(metadata.encode("utf-16-le")) // 2


def validate_commit(group: Group | None, request: OffsetCommit) -> ErrorCode:
    """The error every partition of ``request`` gets, or NONE if the commit may proceed.

    ``group`` is None when the group does not exist; NONE is then returned only
    for a commit from outside the group (generation < 0), and the caller creates
    an Empty group for it.
    """
    if group is None:
        if request.generation_id < 0:
            return ErrorCode.NONE
        if request.api_version >= GROUP_ID_NOT_FOUND_COMMIT_VERSION:
            return ErrorCode.GROUP_ID_NOT_FOUND
        return ErrorCode.ILLEGAL_GENERATION
    if group.is_in(GroupState.DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if request.generation_id < 0 and group.is_in(GroupState.EMPTY):
        return ErrorCode.NONE
    if request.generation_id >= 0 or request.member_id or request.group_instance_id is not None:
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
    elif not group.is_in(GroupState.EMPTY):
        return ErrorCode.UNKNOWN_MEMBER_ID
    if group.is_in(GroupState.COMPLETING_REBALANCE):
        return ErrorCode.REBALANCE_IN_PROGRESS
    return ErrorCode.NONE


class OffsetStore:
    """Committed offsets by group, topic and partition (in memory; durability is the driver's)."""

    __slots__ = ("_by_group",)

    def __init__(self) -> None:
        self._by_group: dict[str, dict[tuple[str, int], StoredOffset]] = {}

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._by_group.get(group_id))

    def group_ids(self) -> list[str]:
        return [group_id for group_id, offsets in self._by_group.items() if offsets]

    def put(self, offset: StoredOffset) -> None:
        if offset.deleted:
            offsets = self._by_group.get(offset.group_id)
            if offsets is not None:
                offsets.pop((offset.topic, offset.partition), None)
            return
        self._by_group.setdefault(offset.group_id, {})[(offset.topic, offset.partition)] = offset

    def get(self, group_id: str, topic: str, partition: int) -> StoredOffset | None:
        offsets = self._by_group.get(group_id)
        return None if offsets is None else offsets.get((topic, partition))

    def delete_group(self, group_id: str) -> tuple[StoredOffset, ...]:
        """Drop every offset of the group and return their tombstones."""
        offsets = self._by_group.pop(group_id, {})
        return tuple(
            StoredOffset(
                group_id=o.group_id,
                topic=o.topic,
                partition=o.partition,
                offset=o.offset,
                metadata=o.metadata,
                leader_epoch=o.leader_epoch,
                commit_timestamp_ms=o.commit_timestamp_ms,
                deleted=True,
            )
            for o in offsets.values()
        )

    def expire(self, group_id: str, older_than_ms: int | None) -> tuple[StoredOffset, ...]:
        """Drop the group's offsets committed before ``older_than_ms`` (``None``:
        all of them); their tombstones."""
        offsets = self._by_group.get(group_id)
        if not offsets:
            return ()
        gone = [
            key
            for key, o in offsets.items()
            if older_than_ms is None or o.commit_timestamp_ms < older_than_ms
        ]
        tombstones = tuple(replace(offsets.pop(key), deleted=True) for key in gone)
        if not offsets:
            del self._by_group[group_id]
        return tombstones

    def fetch(
        self, group_id: str, topics: tuple[FetchTopic, ...] | None, *, group_known: bool
    ) -> tuple[FetchedTopic, ...]:
        """OffsetFetch for one group (``group_known`` False: missing or Dead group)."""
        offsets = self._by_group.get(group_id, {}) if group_known else {}
        if topics is None:
            with collector_paused():  # a big group's 100,000 slots: records, no cycles
                return _every_offset(offsets)
        return tuple(
            FetchedTopic(
                topic.name,
                tuple(
                    _fetched(partition, offsets.get((topic.name, partition)))
                    for partition in topic.partitions
                ),
            )
            for topic in topics
        )


def _every_offset(offsets: dict[tuple[str, int], StoredOffset]) -> tuple[FetchedTopic, ...]:
    """Every offset of a group, by topic and then partition: sorted by name, not
    as (topic, partition) tuples (a big group's 100,000 slots took 0.9 s that way)."""
    by_topic: dict[str, list[tuple[int, StoredOffset]]] = {}
    for (topic, partition), stored in offsets.items():
        found = by_topic.get(topic)
        if found is None:
            by_topic[topic] = [(partition, stored)]
        else:
            found.append((partition, stored))
    fetched = []
    for name in sorted(by_topic):
        parts = by_topic[name]
        if len(parts) > 1:  # a lease slot's topic has one
            parts.sort(key=_partition_index)
        partitions = [FetchedPartition(p, o.offset, o.metadata, o.leader_epoch) for p, o in parts]
        fetched.append(FetchedTopic(name, tuple(partitions)))
    return tuple(fetched)


def _partition_index(entry: tuple[int, StoredOffset]) -> int:
    return entry[0]


def _fetched(partition: int, stored: StoredOffset | None) -> FetchedPartition:
    if stored is None:
        return FetchedPartition(partition=partition, offset=-1, metadata="", leader_epoch=-1)
    return FetchedPartition(
        partition=partition,
        offset=stored.offset,
        metadata=stored.metadata,
        leader_epoch=stored.leader_epoch,
    )
