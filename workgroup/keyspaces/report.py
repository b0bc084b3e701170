"""What a member tells its keyspace's leader: the newest map it knows and its hot keys.

A member carries a :class:`KeyspaceReport` in its JoinGroup metadata (the
``user_data`` field), so that whichever member leads the next round, and
whenever, starts from the newest map any member knows (its slices, owners and
``max_token``: tokens keep rising across a change of leader).  The two members
that carry the whole map report it whole; every other member reports the part
it was handed (:class:`~workgroup.keyspaces.partial.PartialMap`: its slices,
the map's epoch and ``max_token``).  Loads per slice travel in the metadata's
own loads (one per owned resource); the report adds the keys a member sampled
as hot, by hash point.

The leader hands the next map back in each member's assignment, whole or in
part (:func:`encode_map_only`: the same layout without keys).

Layout (version 2), with ``workgroup.protocol.binary``: ``u8`` version; ``u8``
what follows (0: no map, 1: a whole map, 2: a part); the encoded map or part as
a length-prefixed blob; the sampled key count (``uvarint``), then per key its
point (``uvarint``) and load (``f64``).  Version 1 (always a whole map) was
never released.  Whatever the bytes, decoding returns a valid report or raises
a one-line :class:`~workgroup.errors.ProtocolError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from workgroup.errors import ProtocolError, UnsupportedVersionError
from workgroup.keyspaces.codec import (
    decode_partial_map,
    decode_slice_map,
    encode_partial_map,
    encode_slice_map,
)
from workgroup.keyspaces.hashing import HASH_SPACE
from workgroup.keyspaces.partial import PartialMap
from workgroup.keyspaces.slices import SliceMap
from workgroup.protocol.binary import Reader, Writer

#: The format version :func:`encode_report` writes.
REPORT_VERSION = 2
_WHAT = "keyspace report"
#: What a report's blob holds.
_NO_MAP, _WHOLE, _PART = 0, 1, 2
#: The fewest bytes one sampled key takes (point, load).
_MIN_KEY_BYTES = 9


@dataclass(frozen=True, slots=True)
class KeyspaceReport:
    """The newest map a member knows, whole or in part (``None``: none yet),
    and its sampled hot keys."""

    map: SliceMap | PartialMap | None = None
    #: Hash point of a sampled key -> its load.
    keys: Mapping[int, float] = field(default_factory=dict)

    @property
    def whole(self) -> SliceMap | None:
        """The map, if the report has it whole."""
        return self.map if isinstance(self.map, SliceMap) else None


def encode_report(report: KeyspaceReport) -> bytes:
    out = Writer()
    out.u8(REPORT_VERSION)
    if report.map is None:
        out.u8(_NO_MAP)
        out.bytes_(b"")
    elif isinstance(report.map, SliceMap):
        out.u8(_WHOLE)
        out.bytes_(encode_slice_map(report.map))
    else:
        out.u8(_PART)
        out.bytes_(encode_partial_map(report.map))
    out.uvarint(len(report.keys))
    for point, load in sorted(report.keys.items()):
        out.uvarint(point)
        out.f64(load)
    return out.getvalue()


def encode_map_only(smap: SliceMap | PartialMap) -> bytes:
    """The report of ``smap`` (a whole map or a part) without keys: what the
    leader hands a member."""
    return encode_report(KeyspaceReport(smap))


def decode_report(data: bytes, maps: dict[bytes, SliceMap] | None = None) -> KeyspaceReport:
    """The report ``data`` encodes; :class:`ProtocolError` (one line) if it encodes none.

    ``maps``: whole maps decoded before, by their encoding (members that carry
    the map carry the same one: 38 ms at 10,000 slices); the map decoded here
    is added."""
    r = Reader(data, _WHAT)
    version = r.u8()
    if version != REPORT_VERSION:
        raise UnsupportedVersionError(
            f"{_WHAT} version {version} is not supported (this side reads {REPORT_VERSION})"
        )
    what = r.u8()
    blob = r.bytes_()
    smap: SliceMap | PartialMap | None = None
    if what == _WHOLE:
        smap = maps.get(blob) if maps is not None else None
        if smap is None:
            smap = decode_slice_map(blob)
            if maps is not None:
                maps[blob] = smap
    elif what == _PART:
        smap = decode_partial_map(blob)
    elif what != _NO_MAP or blob:
        raise ProtocolError(f"{_WHAT} is corrupt: it holds a map of unknown form {what}")
    count = r.uvarint()
    if count * _MIN_KEY_BYTES > r.remaining:
        raise ProtocolError(f"{_WHAT} is corrupt: {count} keys in {r.remaining} bytes")
    keys: dict[int, float] = {}
    for _ in range(count):
        point, load = r.uvarint(), r.f64()
        if point >= HASH_SPACE:
            raise ProtocolError(f"{_WHAT} is corrupt: a key's point is past the hash space")
        if not (math.isfinite(load) and load >= 0):
            raise ProtocolError(f"{_WHAT} is corrupt: a key's load is {load}")
        keys[point] = load
    if r.remaining:
        raise ProtocolError(f"{_WHAT} is corrupt: {r.remaining} unexpected trailing bytes")
    return KeyspaceReport(smap, keys)


__all__ = [
    "REPORT_VERSION",
    "KeyspaceReport",
    "decode_report",
    "encode_map_only",
    "encode_report",
]
