"""Keyspaces: a space of str/int keys hashed into 64 bits and cut into slices.

Slices are the resources a group assigns for a keyspace; the leader splits hot
ones (down to one hot key in a slice of its own) and merges cold neighbours
within a churn budget.  This package is pure: the hash
(:func:`key_hash`), the immutable :class:`SliceMap` and its codec, and the
leader's planner (:func:`plan_next_map`).  See ``docs/keyspaces.md``.  The names
load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workgroup.lazy import lazy_attributes

if TYPE_CHECKING:
    from workgroup.keyspaces.codec import decode_slice_map, encode_slice_map
    from workgroup.keyspaces.errors import InvalidSliceMapError, KeyMovedError, KeyspaceError
    from workgroup.keyspaces.hashing import HASH_SPACE, key_hash
    from workgroup.keyspaces.loads import KeyspaceLoads
    from workgroup.keyspaces.planner import Plan, moved_share, plan_next_map
    from workgroup.keyspaces.settings import PlannerSettings
    from workgroup.keyspaces.slices import Slice, SliceMap

#: Public name -> the module that defines it, imported on first access.
_LAZY: dict[str, str] = {
    "HASH_SPACE": "workgroup.keyspaces.hashing",
    "InvalidSliceMapError": "workgroup.keyspaces.errors",
    "KeyMovedError": "workgroup.keyspaces.errors",
    "KeyspaceError": "workgroup.keyspaces.errors",
    "KeyspaceLoads": "workgroup.keyspaces.loads",
    "Plan": "workgroup.keyspaces.planner",
    "PlannerSettings": "workgroup.keyspaces.settings",
    "Slice": "workgroup.keyspaces.slices",
    "SliceMap": "workgroup.keyspaces.slices",
    "decode_slice_map": "workgroup.keyspaces.codec",
    "encode_slice_map": "workgroup.keyspaces.codec",
    "key_hash": "workgroup.keyspaces.hashing",
    "moved_share": "workgroup.keyspaces.planner",
    "plan_next_map": "workgroup.keyspaces.planner",
}

__all__ = [
    "HASH_SPACE",
    "InvalidSliceMapError",
    "KeyMovedError",
    "KeyspaceError",
    "KeyspaceLoads",
    "Plan",
    "PlannerSettings",
    "Slice",
    "SliceMap",
    "decode_slice_map",
    "encode_slice_map",
    "key_hash",
    "moved_share",
    "plan_next_map",
]


__getattr__ = lazy_attributes(__name__, _LAZY, globals())
