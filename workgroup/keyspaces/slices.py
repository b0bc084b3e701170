"""The slice map: a keyspace's hash space cut into slices, each with its token and owner.

A :class:`Slice` is a contiguous range ``[start, end)`` of the hash space
(``workgroup.keyspaces.hashing``).  It is the resource the group assigns: its
``id`` names it (a slice keeps its id while its range is unchanged) and its
``token`` fences it (every birth and every change of owner takes a token above
all the map had issued, :attr:`SliceMap.max_token`).

A :class:`SliceMap` is immutable and always valid: its slices, in hash order,
cover ``[0, HASH_SPACE)`` with neither gap nor overlap, ids are distinct, and no
token is above ``max_token``.  ``epoch`` counts the maps the leader made: of two
maps of one keyspace, the higher epoch is the newer.

Lookups (:meth:`SliceMap.slice_of`, :meth:`SliceMap.slice_for_key`) bisect the
slices' starts within a bucket: a table indexed by a hash's top bits (about two
buckets a slice, at most 2**16) gives the few slices a bucket touches, so a
lookup compares a handful of starts instead of log2(n) (0.14 us instead of
0.34 us at 10,000 slices).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from workgroup.keyspaces.errors import InvalidSliceMapError
from workgroup.keyspaces.hashing import HASH_SPACE, key_hash
from workgroup.types import Key


@dataclass(frozen=True, slots=True)
class Slice:
    """One contiguous range ``[start, end)`` of a keyspace's hash space."""

    #: The token it was born with: its name as a resource of the group.
    id: int
    start: int
    end: int
    token: int
    #: The member that owns it (``None``: not assigned yet).
    owner: str | None = None
    #: Its lease slot in the keyspace's pool (``None``: none given yet): unique
    #: among the map's slices and retired slots, kept for the slice's life
    #: (:mod:`workgroup.keyspaces.slot_pool`).
    slot: int | None = None

    @property
    def width(self) -> int:
        """How many hash points it holds."""
        return self.end - self.start

    def holds(self, point: int) -> bool:
        return self.start <= point < self.end

    def __str__(self) -> str:
        return (
            f"slice {self.id} [{self.start:#018x}, {self.end:#018x}) "
            f"token {self.token} owner {self.owner or '-'}"
        )


@dataclass(frozen=True, slots=True)
class SliceMap:
    """A keyspace's slices, in hash order, covering the hash space exactly."""

    keyspace: str
    slices: tuple[Slice, ...]
    #: The highest token this keyspace ever issued (fencing: the next is above it).
    max_token: int
    #: The number of maps made before this one.
    epoch: int = 0
    #: Slots of slices merged away whose holders may not have let go yet:
    #: ``(slot, slice id)`` pairs, not given to a new slice until no member
    #: holds the slice (:mod:`workgroup.keyspaces.slot_pool`).
    retired: tuple[tuple[int, int], ...] = ()
    _starts: list[int] = field(init=False, repr=False, compare=False)
    #: How far a hash shifts right to give its bucket.
    _shift: int = field(init=False, repr=False, compare=False)
    #: Per bucket, the position of the slice holding its first point (and a last
    #: entry, the last slice's position).
    _buckets: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check(self.keyspace, self.slices, self.max_token, self.epoch)
        _check_slots(self.keyspace, self.slices, self.retired)
        starts = [s.start for s in self.slices]
        bits = min(16, len(starts).bit_length() + 1)
        shift = 64 - bits
        buckets = []
        position = 0
        last = len(starts) - 1
        for bucket in range(1 << bits):
            point = bucket << shift
            while position < last and starts[position + 1] <= point:
                position += 1
            buckets.append(position)
        buckets.append(last)
        object.__setattr__(self, "_starts", starts)
        object.__setattr__(self, "_shift", shift)
        object.__setattr__(self, "_buckets", buckets)

    @classmethod
    def uniform(cls, keyspace: str, count: int, *, first_token: int = 1) -> SliceMap:
        """``count`` slices of (almost) equal width, unowned, tokens from ``first_token``."""
        if count < 1 or count > HASH_SPACE:
            raise InvalidSliceMapError(f"a slice map needs 1 to 2**64 slices, not {count}")
        if first_token < 1:
            raise InvalidSliceMapError(f"tokens start at 1 or above, not {first_token}")
        bounds = [HASH_SPACE * i // count for i in range(count + 1)]
        slices = tuple(
            Slice(first_token + i, bounds[i], bounds[i + 1], first_token + i, slot=i)
            for i in range(count)
        )
        return cls(keyspace, slices, max_token=first_token + count - 1)

    def __len__(self) -> int:
        return len(self.slices)

    def __iter__(self) -> Iterator[Slice]:
        return iter(self.slices)

    def index_of(self, point: int) -> int:
        """The position in :attr:`slices` of the slice holding hash ``point``."""
        if not 0 <= point < HASH_SPACE:
            raise KeyError(f"{point} is outside the hash space [0, 2**64)")
        bucket = point >> self._shift
        buckets = self._buckets
        return bisect_right(self._starts, point, buckets[bucket], buckets[bucket + 1] + 1) - 1

    def slice_of(self, point: int) -> Slice:
        """The slice holding hash ``point``."""
        return self.slices[self.index_of(point)]

    def slice_for_key(self, key: Key) -> Slice:
        """The slice holding ``key``."""
        point = key_hash(key)
        bucket = point >> self._shift
        buckets = self._buckets
        return self.slices[
            bisect_right(self._starts, point, buckets[bucket], buckets[bucket + 1] + 1) - 1
        ]

    def owners(self) -> dict[str, tuple[Slice, ...]]:
        """Each owner's slices, in hash order (unowned slices are left out)."""
        out: dict[str, list[Slice]] = {}
        for piece in self.slices:
            if piece.owner is not None:
                out.setdefault(piece.owner, []).append(piece)
        return {owner: tuple(pieces) for owner, pieces in sorted(out.items())}

    def by_id(self) -> dict[int, Slice]:
        return {piece.id: piece for piece in self.slices}


def _check(keyspace: str, slices: Iterable[Slice], max_token: int, epoch: int) -> None:
    if not keyspace:
        raise InvalidSliceMapError("a slice map needs a keyspace name")
    if epoch < 0:
        raise InvalidSliceMapError(f"slice map of {keyspace!r}: epoch {epoch} is negative")
    expected = 0
    ids: set[int] = set()
    for piece in slices:
        if piece.start != expected:
            what = "a gap" if piece.start > expected else "an overlap"
            raise InvalidSliceMapError(
                f"slice map of {keyspace!r}: {what} at {expected:#x} "
                f"(slice {piece.id} starts at {piece.start:#x})"
            )
        check_slice(f"slice map of {keyspace!r}", piece, max_token, ids)
        expected = piece.end
    if expected != HASH_SPACE:
        raise InvalidSliceMapError(
            f"slice map of {keyspace!r}: the slices end at {expected:#x}, not at 2**64"
        )


def check_slice(where: str, piece: Slice, max_token: int, ids: set[int]) -> None:
    """What every slice of a map (or a part of one, ``where``) must be: not
    empty, its id new among ``ids`` (added to them) and a token it held, its
    token at most ``max_token``, its owner named."""
    if piece.end <= piece.start:
        raise InvalidSliceMapError(f"{where}: slice {piece.id} is empty or reversed")
    if piece.id in ids:
        raise InvalidSliceMapError(f"{where}: slice id {piece.id} repeats")
    if not 1 <= piece.id <= piece.token:
        raise InvalidSliceMapError(
            f"{where}: slice id {piece.id} is not a token it held (1..{piece.token})"
        )
    if not 1 <= piece.token <= max_token:
        raise InvalidSliceMapError(
            f"{where}: slice {piece.id} has token {piece.token}, outside 1..{max_token}"
        )
    if piece.owner == "":
        raise InvalidSliceMapError(f"{where}: slice {piece.id} has an empty owner name")
    ids.add(piece.id)


def _check_slots(
    keyspace: str, slices: Iterable[Slice], retired: tuple[tuple[int, int], ...]
) -> None:
    ids = {piece.id for piece in slices}
    taken: set[int] = set()
    held = [(piece.slot, piece.id) for piece in slices if piece.slot is not None]
    for slot, piece_id in [*held, *retired]:
        if slot < 0:
            raise InvalidSliceMapError(
                f"slice map of {keyspace!r}: slice {piece_id} has slot {slot}, below 0"
            )
        if slot in taken:
            raise InvalidSliceMapError(f"slice map of {keyspace!r}: slot {slot} is given twice")
        taken.add(slot)
    for _, piece_id in retired:
        if piece_id in ids:
            raise InvalidSliceMapError(
                f"slice map of {keyspace!r}: slice {piece_id} is live and retired"
            )


__all__ = ["Slice", "SliceMap", "check_slice"]
