"""Errors of the worker runtime."""

from __future__ import annotations

from workgroup.errors import ConfigError, WorkgroupError
from workgroup.types import Key


class LeaseLostError(WorkgroupError):
    """The lease is no longer held: revoked, lost with the session, or fenced by
    the coordinator (a commit under a generation or member id that is no longer
    current).  Stop acting on the resource; it may already run elsewhere."""


class IllegalLeaseTransitionError(WorkgroupError):
    """A lease tried a state change its rules forbid (a bug; see
    :mod:`workgroup.runtime.lease_states`)."""


class CheckpointError(WorkgroupError):
    """A checkpoint value that cannot be stored (empty, or over the 4 KiB limit
    less the header naming the key).  Nothing was sent."""


class SlotMismatchError(WorkgroupError):
    """A lease's slot names another key, or its header cannot be read: the holder
    refuses it (its handler does not start, the checkpoint is not read).  Not
    retriable: the slot's contents will not change by asking again."""

    def __init__(self, key: Key, topic: str, found: Key | None, why: str) -> None:
        self.key = key
        self.topic = topic
        self.found = found
        super().__init__(
            f"lease slot {topic} of key {key!r} cannot be used: {why}"
            + (f" ({found!r})" if found is not None else "")
        )


class ResourceFunctionError(ConfigError):
    """An app's resource function raised (or returned something that is not a
    list of keys).  At start it ends ``workgroup run`` with exit 2, like any
    other error in the app's declarations; while running the member keeps its
    last list and reports it (``member.resource_source_failed``)."""

    def __init__(
        self, group: str, function: str, error: str, frames: str, *, what: str = "failed"
    ) -> None:
        self.group = group
        self.function = function
        self.error = error
        self.frames = frames
        #: The first line alone (the frames are logged apart).
        self.summary = f"group {group!r}: the resource function {function} {what}: {error}"
        super().__init__(self.summary + (f"\n{frames}" if frames else ""), retriable=True)


class HandlerFailedError(WorkgroupError):
    """A handler failed ``max_failures`` times in a row under
    ``on_failure="stop"``: the daemon stops (exit 3)."""

    exit_code = 3


class LegacyLayoutError(ConfigError):
    """Lease state written by the position-based layout (partition ``i`` of
    ``workgroup-leases.<group>`` for catalog key ``i``) was found and migration
    was not requested, or could not run."""


__all__ = [
    "CheckpointError",
    "HandlerFailedError",
    "IllegalLeaseTransitionError",
    "LeaseLostError",
    "LegacyLayoutError",
    "ResourceFunctionError",
    "SlotMismatchError",
]
