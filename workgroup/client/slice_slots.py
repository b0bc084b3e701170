"""A keyspace's slice named from outside the group: its lease slot in the pool.

A slice's lease slot is a slot of its keyspace's pool
(:mod:`workgroup.keyspaces.slot_pool`), not the slot of its id, so a tool that
names a slice (``workgroup reset``) finds the slot through a map.

Rules:

1. **The map** is the newest of those the members carry
   (:func:`~workgroup.client.keyspaces.newest_maps`) and the one kept in the
   group's slots (:mod:`workgroup.runtime.keyspace_slots`: what a group with
   no members still has; Tansu keeps none).
2. **A keyspace** is one whose map is known, or whose highest token the slots
   keep (it had slices once).  A name that is neither is refused:
   :class:`~workgroup.client.keyspaces.UnknownKeyspaceError`.
3. **A slice** is named by its id, or by a key of the keyspace (the slice
   that holds the key in the map).  An id that is not in the map is refused:
   :class:`UnknownSliceError`.  Both errors are one line, exit status 2.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from workgroup.client.keyspaces import UnknownKeyspaceError
from workgroup.client.slots import LeaseSlot
from workgroup.keyspaces.errors import KeyspaceError
from workgroup.keyspaces.slices import Slice, SliceMap
from workgroup.member.keyspace import newer
from workgroup.runtime.keyspace_slots import (
    chunk_key,
    epoch_key,
    read_persisted,
    slice_slot,
)
from workgroup.runtime.slots import Slot, slot_header
from workgroup.types import Key

#: A keyspace's token slot names ``~keyspace/<name>/max-token``.
_TOKEN_KEY = re.compile(r"~keyspace/(.+)/max-token")


class UnknownSliceError(KeyspaceError):
    """A slice id that is not in the keyspace's map (rule 3)."""

    exit_code = 2


def kept_keyspaces(slots: Iterable[LeaseSlot]) -> dict[str, SliceMap | None]:
    """Rule 1: the keyspaces whose state the group's ``slots`` keep, with the map
    kept (``None``: none readable, e.g. on Tansu or too large to keep)."""
    by_key: dict[str, LeaseSlot] = {}
    for slot in slots:
        if isinstance(slot.key, str):
            by_key[slot.key] = slot
    out: dict[str, SliceMap | None] = {}
    for key, slot in by_key.items():
        match = _TOKEN_KEY.fullmatch(key)
        if match is None:
            continue
        name = match[1]
        epoch = by_key.get(str(epoch_key(name)))
        epoch_offset = epoch.token if epoch is not None else -1
        token = (slot.token, _metadata(slot, key))
        found = read_persisted(name, token, epoch_offset)
        if found.chunks:
            keys = [str(chunk_key(name, i)) for i in range(found.chunks)]
            chunks = [_metadata(by_key.get(k), k) for k in keys]
            found = read_persisted(name, token, epoch_offset, chunks)
        out[name] = found.state.map
    return out


def _metadata(slot: LeaseSlot | None, key: Key) -> str | None:
    """``slot``'s committed metadata as written (``None``: nothing readable)."""
    if slot is None or slot.key is None:
        return None
    return slot_header(key) + (slot.checkpoint or "")


def keyspace_map(
    group: str,
    keyspace: str,
    carried: Mapping[str, SliceMap],
    kept: Mapping[str, SliceMap | None],
) -> SliceMap:
    """Rules 1-2: the newest map of ``keyspace`` the members carry (``carried``)
    or the slots keep (``kept``, :func:`kept_keyspaces`)."""
    newest = carried.get(keyspace)
    stored = kept.get(keyspace)
    if stored is not None and newer(stored, newest):
        newest = stored
    if newest is not None:
        return newest
    known = sorted({*carried, *kept})
    if keyspace in kept:
        raise UnknownKeyspaceError(
            f"keyspace {keyspace!r} of group {group!r} has no map to find its slices in: no "
            "member carries one and its slots keep none (Tansu keeps no commit metadata); "
            "start a process of the app"
        )
    raise UnknownKeyspaceError(
        f"group {group!r} has no keyspace {keyspace!r} "
        f"(its keyspaces: {', '.join(known) or 'none'})"
    )


def find_slice(
    group: str, smap: SliceMap, *, slice_id: int | None = None, key: Key | None = None
) -> tuple[Slice, Slot]:
    """Rule 3: the slice of ``smap`` with id ``slice_id``, or the one holding
    ``key`` (exactly one of them), and its lease slot in ``group``."""
    if (slice_id is None) == (key is None):
        raise KeyspaceError("name a slice by its id or by a key, not both or neither")
    if key is not None:
        piece = smap.slice_for_key(key)  # a key of no str or int type: a one-line error
    else:
        found = smap.by_id().get(slice_id) if slice_id is not None else None
        if found is None:
            raise UnknownSliceError(
                f"keyspace {smap.keyspace!r} of group {group!r} has no slice {slice_id!r} "
                f"in its map (epoch {smap.epoch}, {len(smap.slices)} slices: "
                f"{_some_ids(smap)})"
            )
        piece = found
    return piece, slice_slot(group, smap, piece)


def _some_ids(smap: SliceMap, shown: int = 8) -> str:
    ids = [str(piece.id) for piece in smap.slices[:shown]]
    return ", ".join(ids) + (", ..." if len(smap.slices) > shown else "")


__all__ = [
    "UnknownSliceError",
    "find_slice",
    "kept_keyspaces",
    "keyspace_map",
]
