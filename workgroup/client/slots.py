"""Lease slots read back from OffsetFetch, once for every reader (sans-I/O).

A group's lease slots are its committed offsets on ``workgroup-leases.GROUP.*``
topics (:mod:`workgroup.runtime.slots`): the offset is the fencing token, the
metadata a header naming the key and then the checkpoint.  Every reader asks for
them in one batched OffsetFetch (:func:`fetch_request`: all of a group's
offsets, or only the slots named) and decodes the answer here
(:func:`decode_slots`).  They outlive the group's members.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from workgroup.errors import ErrorCode, ProtocolError, WorkgroupError
from workgroup.kafka.messages import (
    FetchTopic,
    OffsetFetch,
    OffsetFetchGroup,
    OffsetFetchResult,
)
from workgroup.runtime.slots import (
    LEASE_TOPIC_PREFIX,
    Slot,
    decode_metadata,
    encode_key,
    key_digest,
)
from workgroup.types import Key


@dataclass(frozen=True)
class LeaseSlot:
    """One lease slot of a group, read back from its committed offsets.

    ``key`` is the key its header names (``None``: no header, e.g. a broker that
    keeps no commit metadata, or unreadable: see ``error``); ``token`` the
    fencing token (the committed offset); ``checkpoint`` the last checkpoint.
    """

    topic: str
    key: Key | None
    token: int
    checkpoint: str | None
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "topic": self.topic,
            "key": self.key,
            "token": self.token,
            "checkpoint": self.checkpoint,
        }
        if self.error is not None:
            out["error"] = self.error
        return out


def fetch_request(group: str, slots: Iterable[Slot] | None = None) -> OffsetFetch:
    """One OffsetFetch of ``slots`` of ``group`` (``None``: every committed offset)."""
    if slots is None:
        return OffsetFetch(groups=(OffsetFetchGroup(group, None),))
    return OffsetFetch(groups=(OffsetFetchGroup(group, fetch_topics(slots)),))


def fetch_topics(slots: Iterable[Slot]) -> tuple[FetchTopic, ...]:
    """``slots`` as an OffsetFetch names them: one entry per topic, in order."""
    topics: dict[str, list[int]] = {}
    for slot in slots:
        topics.setdefault(slot.topic, []).append(slot.partition)
    return tuple(FetchTopic(name, tuple(parts)) for name, parts in topics.items())


def decode_slots(
    result: OffsetFetchResult, group: str, *, in_order: bool = True
) -> list[LeaseSlot]:
    """The lease slots of ``group`` in an OffsetFetch answer, sorted by key
    (``in_order`` false: as answered, for a reader that keeps its own order):
    committed ones only (a slot never committed is not in the list); offsets of
    other topics (the legacy layout's, a consumer's) are passed over."""
    if len(result.groups) != 1:
        raise ProtocolError(f"OffsetFetch answered {len(result.groups)} groups, asked for 1")
    fetched = result.groups[0]
    if fetched.error not in (ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND):
        raise WorkgroupError(
            f"reading the lease slots of group {group!r}: {fetched.error.name}",
            retriable=fetched.error.retriable,
        )
    prefix = f"{LEASE_TOPIC_PREFIX}{group}."
    slots = []
    for topic in fetched.topics:
        if not topic.name.startswith(prefix):
            continue  # the legacy layout's topic, or a consumer's offsets
        for p in topic.partitions:
            if p.error is not ErrorCode.NONE or p.offset < 0:
                continue
            try:
                contents = decode_metadata(p.metadata)
            except ValueError as exc:
                slots.append(LeaseSlot(topic.name, None, p.offset, None, str(exc)))
                continue
            error = None
            # The topic of the key's slot (slot_of's, without checking the group per slot).
            if contents.key is not None and topic.name != prefix + key_digest(contents.key):
                error = "its header names a key whose slot is another one"
            slots.append(LeaseSlot(topic.name, contents.key, p.offset, contents.checkpoint, error))
    if not in_order:
        return slots
    return sorted(slots, key=lambda s: (s.key is None, encode_key(s.key or ""), s.topic))


__all__ = ["LeaseSlot", "decode_slots", "fetch_request", "fetch_topics"]
