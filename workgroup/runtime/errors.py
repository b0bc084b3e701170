"""Errors of the worker runtime."""

from __future__ import annotations

from workgroup.errors import WorkgroupError


class LeaseLostError(WorkgroupError):
    """The lease is no longer held: revoked, lost with the session, or fenced by
    the coordinator (a commit under a generation or member id that is no longer
    current).  Stop acting on the resource; it may already run elsewhere."""


class CheckpointError(WorkgroupError):
    """A checkpoint value that cannot be stored (empty, or over the 4 KiB limit).
    Nothing was sent."""


__all__ = ["CheckpointError", "LeaseLostError"]
