"""Errors of keyspaces (each derives from :class:`~workgroup.errors.WorkgroupError`).

Bytes that do not decode to a slice map raise
:class:`~workgroup.errors.ProtocolError` (``workgroup.keyspaces.codec``); bad
planner settings raise :class:`~workgroup.errors.ConfigError`.
"""

from __future__ import annotations

from workgroup.errors import WorkgroupError


class KeyspaceError(WorkgroupError):
    """A keyspace operation that cannot be done with the values given."""


class InvalidSliceMapError(KeyspaceError):
    """Slices that do not cut the hash space exactly (a gap, an overlap, a
    repeated id, a token above the map's highest)."""


class KeyMovedError(KeyspaceError):
    """A key is no longer in the slice (with the token) its holder asked with: a
    split, a merge or a move gave it to another slice.  Not retriable: the
    key's new holder writes it."""


__all__ = ["InvalidSliceMapError", "KeyMovedError", "KeyspaceError"]
