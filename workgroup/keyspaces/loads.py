"""What the planner knows of a keyspace's load: per slice, and sampled per key."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from workgroup.keyspaces.errors import KeyspaceError
from workgroup.keyspaces.hashing import HASH_SPACE, key_hash
from workgroup.types import Key


@dataclass(frozen=True, slots=True)
class KeyspaceLoads:
    """Loads reported by the slices' owners (any unit, the same for all).

    ``slices`` maps a slice id to its load; ``keys`` maps a key's hash point to
    the load of that key (the hot keys an owner sampled).  A slice's load is
    taken as at least the sum of its sampled keys.
    """

    slices: Mapping[int, float] = field(default_factory=dict)
    keys: Mapping[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for slice_id, load in self.slices.items():
            _check_load(f"slice {slice_id}", load)
        for point, load in self.keys.items():
            if not 0 <= point < HASH_SPACE:
                raise KeyspaceError(f"key load at {point}: outside the hash space [0, 2**64)")
            _check_load(f"key at {point:#x}", load)

    @classmethod
    def of_keys(cls, slices: Mapping[int, float], keys: Mapping[Key, float]) -> KeyspaceLoads:
        """Loads with the sampled keys given as keys (hashed here; a key's loads add up
        if two keys share a point)."""
        points: dict[int, float] = {}
        for key, load in keys.items():
            point = key_hash(key)
            points[point] = points.get(point, 0.0) + load
        return cls(slices, points)


def _check_load(what: str, load: float) -> None:
    if not (math.isfinite(load) and load >= 0):
        raise KeyspaceError(f"load of {what} must be a finite number >= 0, not {load}")


__all__ = ["KeyspaceLoads"]
