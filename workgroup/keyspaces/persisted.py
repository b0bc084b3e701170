"""A keyspace's state as kept across a full restart: its highest token, epoch and map.

Kept in the group's lease slots (:mod:`workgroup.runtime.keyspace_slots`) and
read before the first round, so that a leader after a full restart issues
tokens above every token issued before it, at epochs above the maps a member
from before it may still carry, and (when the map was kept) keeps the slices'
ranges.
"""

from __future__ import annotations

from dataclasses import dataclass

from workgroup.keyspaces.partial import PartialMap
from workgroup.keyspaces.slices import SliceMap


@dataclass(frozen=True, slots=True)
class PersistedKeyspace:
    """A keyspace's state as read back: its highest token, its epoch, and its map
    (``None``: none kept, or none readable)."""

    max_token: int = 0
    epoch: int = 0
    map: SliceMap | None = None

    def covers(self, smap: SliceMap | PartialMap) -> bool:
        """Whether this state proves every token ``smap`` issued, at its epoch."""
        return self.max_token >= smap.max_token and self.epoch >= smap.epoch


__all__ = ["PersistedKeyspace"]
