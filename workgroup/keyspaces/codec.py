"""The slice map's binary encoding, compact enough for JoinGroup metadata.

Members carry the latest map they know in their metadata, so that a new leader
(or a whole group restarted) takes the map up where it was, fencing tokens
included.  Layout (version 1), with the readers and writers of
``workgroup.protocol.binary`` (LEB128 varints for every number):

- ``u8`` format version, ``u8`` hash scheme (``workgroup.keyspaces.hashing``);
- the keyspace name (``string``), ``epoch``, ``max_token``;
- the owners, once each: a count, then their names (``string``);
- the slice count, then per slice in hash order: its start as the distance from
  the previous start (the first slice starts at 0 and writes none), its id, its
  token, its owner as an index into the owners plus one (0: unowned), and its
  lease slot plus one (0: none);
- the retired slots: a count, then per slot the slot and the slice id.

Version 1 (no slots) was never released.

A part of a map (:class:`~workgroup.keyspaces.partial.PartialMap`) has the same
layout with its own version byte (:data:`PARTIAL_MAP_VERSION`), its slices
only, and per slice its start as the distance from the previous slice's end
and its width less one, since its slices need not touch.

10,000 slices take about 130 kB (13 bytes a slice) (``benchmarks/keyspace_lookup.py`` prints it).
Whatever the bytes, decoding either returns a valid :class:`SliceMap` or raises
:class:`~workgroup.errors.ProtocolError` with one line saying what is wrong.
"""

from __future__ import annotations

from workgroup.errors import ProtocolError, UnsupportedVersionError
from workgroup.keyspaces.errors import InvalidSliceMapError
from workgroup.keyspaces.hashing import HASH_SCHEME, HASH_SPACE
from workgroup.keyspaces.partial import PartialMap
from workgroup.keyspaces.slices import Slice, SliceMap
from workgroup.protocol.binary import Reader, Writer

#: The format version :func:`encode_slice_map` writes.
SLICE_MAP_VERSION = 2
#: The format version :func:`encode_partial_map` writes.
PARTIAL_MAP_VERSION = 1
_WHAT = "slice map"
_WHAT_PART = "part of a slice map"
#: The fewest bytes one encoded slice takes (start, id, token, owner, slot).
_MIN_SLICE_BYTES = 5


def encode_slice_map(smap: SliceMap) -> bytes:
    out = Writer()
    owner_index = _write_head(out, SLICE_MAP_VERSION, smap)
    out.uvarint(len(smap.slices))
    previous = 0
    for position, piece in enumerate(smap.slices):
        if position:
            out.uvarint(piece.start - previous)
        previous = piece.start
        _write_fields(out, piece, owner_index)
    out.uvarint(len(smap.retired))
    for slot, piece_id in smap.retired:
        out.uvarint(slot)
        out.uvarint(piece_id)
    return out.getvalue()


def decode_slice_map(data: bytes) -> SliceMap:
    """The map ``data`` encodes; :class:`ProtocolError` (one line) if it encodes none."""
    r = Reader(data, _WHAT)
    keyspace, epoch, max_token, owners = _read_head(r, _WHAT, SLICE_MAP_VERSION)
    count = r.uvarint()
    if count < 1 or (count - 1) * _MIN_SLICE_BYTES + 5 > r.remaining:
        raise ProtocolError(f"{_WHAT} is corrupt: {count} slices in {r.remaining} bytes")
    starts = [0]
    fields: list[tuple[int, int, str | None, int | None]] = []
    for position in range(count):
        if position:
            step = r.uvarint()
            if step == 0:
                raise ProtocolError(f"{_WHAT} is corrupt: slice {position} is empty")
            starts.append(starts[-1] + step)
        fields.append(_read_fields(r, _WHAT, position, owners))
    retired_count = r.uvarint()
    if retired_count * 2 > r.remaining:
        raise ProtocolError(
            f"{_WHAT} is corrupt: {retired_count} retired slots in {r.remaining} bytes"
        )
    retired = tuple((r.uvarint(), r.uvarint()) for _ in range(retired_count))
    if r.remaining:
        raise ProtocolError(f"{_WHAT} is corrupt: {r.remaining} unexpected trailing bytes")
    if starts[-1] >= HASH_SPACE:
        raise ProtocolError(f"{_WHAT} is corrupt: a slice starts past the hash space")
    starts.append(HASH_SPACE)
    slices = tuple(
        Slice(piece_id, starts[i], starts[i + 1], token, owner, slot)
        for i, (piece_id, token, owner, slot) in enumerate(fields)
    )
    try:
        return SliceMap(keyspace, slices, max_token=max_token, epoch=epoch, retired=retired)
    except InvalidSliceMapError as exc:
        raise ProtocolError(f"{_WHAT} is corrupt: {exc}") from exc


def _write_head(out: Writer, version: int, smap: SliceMap | PartialMap) -> dict[str, int]:
    """The layout's head (version to owners); each owner's index plus one."""
    owners = sorted({piece.owner for piece in smap.slices if piece.owner is not None})
    out.u8(version)
    out.u8(HASH_SCHEME)
    out.string(smap.keyspace)
    out.uvarint(smap.epoch)
    out.uvarint(smap.max_token)
    out.uvarint(len(owners))
    for owner in owners:
        out.string(owner)
    return {owner: i + 1 for i, owner in enumerate(owners)}


def _read_head(r: Reader, what: str, expected: int) -> tuple[str, int, int, list[str | None]]:
    """The layout's head: keyspace, epoch, ``max_token``, and the owners after ``None``."""
    version = r.u8()
    if version != expected:
        raise UnsupportedVersionError(
            f"{what} version {version} is not supported (this side reads {expected})"
        )
    scheme = r.u8()
    if scheme != HASH_SCHEME:
        raise UnsupportedVersionError(
            f"{what} hashes keys with scheme {scheme}; this side knows scheme {HASH_SCHEME}"
        )
    keyspace = r.string()
    epoch = r.uvarint()
    max_token = r.uvarint()
    owner_count = r.uvarint()
    if owner_count * 4 > r.remaining:
        raise ProtocolError(f"{what} is corrupt: {owner_count} owners in {r.remaining} bytes")
    owners: list[str | None] = [None]
    for _ in range(owner_count):
        name = r.string()
        if name in owners:
            raise ProtocolError(f"{what} is corrupt: owner {name!r} is listed twice")
        owners.append(name)
    return keyspace, epoch, max_token, owners


def _write_fields(out: Writer, piece: Slice, owner_index: dict[str, int]) -> None:
    """A slice's id, token, owner (its index plus one, 0: none), slot (plus one, 0: none)."""
    out.uvarint(piece.id)
    out.uvarint(piece.token)
    out.uvarint(0 if piece.owner is None else owner_index[piece.owner])
    out.uvarint(0 if piece.slot is None else piece.slot + 1)


def _read_fields(
    r: Reader, what: str, position: int, owners: list[str | None]
) -> tuple[int, int, str | None, int | None]:
    """What :func:`_write_fields` wrote: id, token, owner, slot."""
    piece_id, token, owner, slot = r.uvarint(), r.uvarint(), r.uvarint(), r.uvarint()
    if owner >= len(owners):
        raise ProtocolError(f"{what} is corrupt: slice {position} names owner {owner}")
    return piece_id, token, owners[owner], slot - 1 if slot else None


def encode_partial_map(part: PartialMap) -> bytes:
    out = Writer()
    owner_index = _write_head(out, PARTIAL_MAP_VERSION, part)
    out.uvarint(len(part.slices))
    end = 0
    for piece in part.slices:
        out.uvarint(piece.start - end)
        out.uvarint(piece.end - piece.start - 1)  # below 2**64, a whole space's too
        end = piece.end
        _write_fields(out, piece, owner_index)
    return out.getvalue()


def decode_partial_map(data: bytes) -> PartialMap:
    """The part of a map ``data`` encodes; :class:`ProtocolError` (one line) if none."""
    r = Reader(data, _WHAT_PART)
    keyspace, epoch, max_token, owners = _read_head(r, _WHAT_PART, PARTIAL_MAP_VERSION)
    count = r.uvarint()
    if count * (_MIN_SLICE_BYTES + 1) > r.remaining:
        raise ProtocolError(f"{_WHAT_PART} is corrupt: {count} slices in {r.remaining} bytes")
    slices: list[Slice] = []
    end = 0
    for position in range(count):
        start = end + r.uvarint()
        end = start + r.uvarint() + 1
        piece_id, token, owner, slot = _read_fields(r, _WHAT_PART, position, owners)
        slices.append(Slice(piece_id, start, end, token, owner, slot))
    if r.remaining:
        raise ProtocolError(f"{_WHAT_PART} is corrupt: {r.remaining} unexpected trailing bytes")
    try:
        return PartialMap(keyspace, tuple(slices), max_token=max_token, epoch=epoch)
    except InvalidSliceMapError as exc:
        raise ProtocolError(f"{_WHAT_PART} is corrupt: {exc}") from exc


__all__ = [
    "PARTIAL_MAP_VERSION",
    "SLICE_MAP_VERSION",
    "decode_partial_map",
    "decode_slice_map",
    "encode_partial_map",
    "encode_slice_map",
]
