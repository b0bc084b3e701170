"""Where a lease keeps its fencing token and checkpoint: one committed offset.

A lease is one resource of one group.  Its state lives in the group's committed
offsets, so that the coordinator validates every write against the group's
generation and the writer's member id (the fence):

* the slot is the topic-partition ``(lease_topic(group), index)``, where
  ``index`` is the resource's position in its kind's catalog (a leader lease
  has one slot, 0).  Like a Kafka topic's partitions, a catalog may grow at the
  end; reordering it or removing keys from the middle moves checkpoints to other
  resources.
* the committed **offset is the fencing token**: the next owner reads it and
  commits it plus one before its handler starts, so it increases every time the
  resource changes hands, whichever process, and survives coordinator restarts
  with the offsets;
* the committed **metadata is the checkpoint**: the last value committed, by
  whoever held the lease.

A Kafka broker accepts commits only for an existing topic-partition: the lease
topic is created (compacted, partitions = the catalog's size) and grown with the
admin client; the embedded coordinator accepts any topic (it hosts none).
"""

from __future__ import annotations

import re

from workgroup.runtime.errors import CheckpointError

#: Kafka's default ``offset.metadata.max.bytes``; checked in UTF-8 bytes, which
#: is never less than Kafka's count (UTF-16 code units).
MAX_CHECKPOINT_BYTES = 4096
#: A topic name Kafka accepts (``Topic.validate``): at most 249 of these.
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]+")
MAX_TOPIC_LENGTH = 249
LEASE_TOPIC_PREFIX = "workgroup-leases."
#: The offset committed for a slot nobody took yet.
NO_TOKEN = 0


def lease_topic(group_id: str) -> str:
    """The topic whose partitions hold the leases of ``group_id``."""
    name = LEASE_TOPIC_PREFIX + group_id
    if not _TOPIC_CHARS.fullmatch(group_id) or len(name) > MAX_TOPIC_LENGTH:
        raise ValueError(
            f"group id {group_id!r} cannot name a lease topic: use letters, digits, "
            f"'.', '_' and '-', at most {MAX_TOPIC_LENGTH - len(LEASE_TOPIC_PREFIX)} characters"
        )
    return name


def check_value(value: str) -> str:
    """``value`` if it can be a checkpoint, else :class:`CheckpointError`."""
    if not isinstance(value, str):
        raise CheckpointError(f"a checkpoint is a str, got {type(value).__name__}")
    if not value:
        # Kafka stores no metadata as "": an empty value would read back as None.
        raise CheckpointError("a checkpoint cannot be empty")
    size = len(value.encode("utf-8"))
    if size > MAX_CHECKPOINT_BYTES:
        raise CheckpointError(
            f"checkpoint of {size} bytes is over the limit of {MAX_CHECKPOINT_BYTES} "
            "(Kafka's offset.metadata.max.bytes); store large state elsewhere and "
            "commit a reference to it"
        )
    return value


def read_value(metadata: str | None) -> str | None:
    """The checkpoint stored in a committed offset's metadata (``None``: none)."""
    return metadata or None


__all__ = [
    "LEASE_TOPIC_PREFIX",
    "MAX_CHECKPOINT_BYTES",
    "NO_TOKEN",
    "check_value",
    "lease_topic",
    "read_value",
]
