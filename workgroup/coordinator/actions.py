"""What the coordinator's sans-I/O core asks its driver to do, and what it stores.

The core (``coordinator.py``) answers each request record
(:mod:`workgroup.kafka.messages`) with a list of actions: :class:`Reply` sends a
result, :class:`Persist` writes group and offset records durably before the
actions after it are carried out.
"""

from __future__ import annotations

from dataclasses import dataclass

from workgroup.kafka.messages import GroupResult

#: Opaque handle the driver passes with a request and gets back with its reply
#: (a JoinGroup or SyncGroup reply may come much later, from another call).
ReplyToken = object


@dataclass(frozen=True, slots=True)
class Reply:
    """Send ``result`` as the answer to the request that came with ``token``."""

    token: ReplyToken
    result: GroupResult


@dataclass(frozen=True, slots=True)
class StoredMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes


@dataclass(frozen=True, slots=True)
class StoredGroup:
    """A group's durable state: written when it becomes Stable or Empty, or is deleted."""

    group_id: str
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str | None
    members: tuple[StoredMember, ...]
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class StoredOffset:
    group_id: str
    topic: str
    partition: int
    offset: int
    metadata: str | None
    leader_epoch: int
    commit_timestamp_ms: int
    deleted: bool = False  # offsets removed with their group


@dataclass(frozen=True, slots=True)
class Persist:
    """Write these records durably *before* carrying out the actions after it."""

    groups: tuple[StoredGroup, ...] = ()
    offsets: tuple[StoredOffset, ...] = ()


Action = Reply | Persist
