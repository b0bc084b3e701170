"""Part of a slice map: the slices one member works on, with the map's epoch and highest token.

A keyspace's map travels once per round (:mod:`workgroup.member.keyspace`):
two members carry it whole, every other member is handed only the slices it
works on, as a :class:`PartialMap`.  A Kafka broker keeps a group's metadata
and assignments as one record (1 MiB by default), so a map in every member's
metadata and assignment would not fit past a few dozen members.

A :class:`PartialMap` is immutable and valid: its slices, in hash order, lie in
``[0, HASH_SPACE)`` without overlapping, ids are distinct, and no token is
above ``max_token``.  Between its slices are ranges it does not know: a lookup
there answers ``None``.  ``epoch`` and ``max_token`` are the whole map's, so
that a part and a map compare by age as two maps do
(:func:`~workgroup.member.keyspace.newer`).

:func:`rebuild_map` makes a whole map from the parts of one map (a leader
whose members carried no whole copy of the newest map): each part's slices
keep their range, owner, token and slot; each range no part knows becomes one
unowned slice with a token above every token issued, so that its next owner
fences every earlier one.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field

from workgroup.keyspaces.errors import InvalidSliceMapError
from workgroup.keyspaces.hashing import HASH_SPACE, key_hash
from workgroup.keyspaces.slices import Slice, SliceMap, check_slice
from workgroup.types import Key


@dataclass(frozen=True, slots=True)
class PartialMap:
    """Some slices of a keyspace's map, in hash order, with the map's epoch and ``max_token``."""

    keyspace: str
    slices: tuple[Slice, ...]
    #: The whole map's highest token.
    max_token: int
    #: The whole map's epoch.
    epoch: int = 0
    _starts: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check(self.keyspace, self.slices, self.max_token, self.epoch)
        object.__setattr__(self, "_starts", [piece.start for piece in self.slices])

    def __len__(self) -> int:
        return len(self.slices)

    def __iter__(self) -> Iterator[Slice]:
        return iter(self.slices)

    def slice_of(self, point: int) -> Slice | None:
        """The slice holding hash ``point``, if this part knows it."""
        position = bisect_right(self._starts, point) - 1
        if position < 0:
            return None
        piece = self.slices[position]
        return piece if point < piece.end else None

    def slice_for_key(self, key: Key) -> Slice | None:
        """The slice holding ``key``, if this part knows it."""
        return self.slice_of(key_hash(key))

    def by_id(self) -> dict[int, Slice]:
        return {piece.id: piece for piece in self.slices}


def part_of(smap: SliceMap, ids: Collection[int]) -> PartialMap:
    """The part of ``smap`` made of the slices whose ids are in ``ids``."""
    slices = tuple(piece for piece in smap.slices if piece.id in ids)
    return PartialMap(smap.keyspace, slices, smap.max_token, smap.epoch)


def rebuild_map(parts: Iterable[PartialMap]) -> tuple[SliceMap, int]:
    """A whole map from ``parts`` of one map (same keyspace, epoch and
    ``max_token``), and how many unknown ranges became new slices (see the
    module docstring).  A slice overlapping one already taken is left out."""
    parts = list(parts)
    if not parts:
        raise InvalidSliceMapError("a map is rebuilt from one part at least")
    first = parts[0]
    which = (first.keyspace, first.epoch, first.max_token)
    if any((p.keyspace, p.epoch, p.max_token) != which for p in parts):
        raise InvalidSliceMapError("a map is rebuilt from parts of one map only")
    known: dict[int, Slice] = {}
    for part in parts:
        for piece in part.slices:
            known.setdefault(piece.id, piece)
    token = first.max_token
    slices: list[Slice] = []
    gaps = 0
    end = 0
    for piece in sorted(known.values(), key=lambda p: p.start):
        if piece.start < end:
            continue  # overlaps a slice taken already: parts of one map never do
        if piece.start > end:
            token += 1
            slices.append(Slice(token, end, piece.start, token))
            gaps += 1
        slices.append(piece)
        end = piece.end
    if end < HASH_SPACE:
        token += 1
        slices.append(Slice(token, end, HASH_SPACE, token))
        gaps += 1
    return SliceMap(first.keyspace, tuple(slices), max_token=token, epoch=first.epoch), gaps


def _check(keyspace: str, slices: Iterable[Slice], max_token: int, epoch: int) -> None:
    where = f"part of the map of {keyspace!r}"
    if not keyspace:
        raise InvalidSliceMapError("a part of a slice map needs a keyspace name")
    if epoch < 0:
        raise InvalidSliceMapError(f"{where}: epoch {epoch} is negative")
    end = 0
    ids: set[int] = set()
    for piece in slices:
        if piece.start < end:
            raise InvalidSliceMapError(
                f"{where}: slice {piece.id} overlaps the one before or is out of order"
            )
        if piece.end > HASH_SPACE:
            raise InvalidSliceMapError(f"{where}: slice {piece.id} ends past the hash space")
        if piece.slot is not None and piece.slot < 0:
            raise InvalidSliceMapError(f"{where}: slice {piece.id} has slot {piece.slot}")
        check_slice(where, piece, max_token, ids)
        end = piece.end


__all__ = ["PartialMap", "part_of", "rebuild_map"]
