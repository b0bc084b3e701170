"""Versioned member metadata and assignment blobs (what JoinGroup and SyncGroup carry).

Layout of both blobs::

    header  magic "wg" (2 bytes) | used version i16 | latest supported version i16 | flags u8
    body    the fields of ``used version`` (zlib-compressed when flags & 1)

The header never changes, so any reader can tell which version a blob uses and
the newest version its writer understands (as Kafka Streams' SubscriptionInfo).
Every version's body is the previous version's body plus fields appended at
the end, which gives the compatibility rules:

* a reader accepts every version from 1 up to its own latest;
* a reader given a *newer* version reads the fields it knows and ignores the
  trailing ones (so an old leader can still assign a newer member);
* version 0 and blobs without the magic are rejected with
  :class:`~workgroup.errors.UnsupportedVersionError`; truncated or garbage bodies
  with :class:`~workgroup.errors.ProtocolError`; blobs (or decompressed bodies)
  above the size limit with :class:`~workgroup.errors.MessageTooLargeError`.

Metadata versions:  v1 kinds, owned resources, owned generation, rack, capacity,
instance id, user data, catalog hash;  v2 adds free-form string tags;  v3 adds
the measured load of each owned resource (:func:`encode_loads`);  v4 adds
warm-ups: a flags byte (bit 0: the member warms resources up before it takes
them), the resources it is warming up, and those of them that are ready.
Assignment versions: v1 assigned, revoked, generation, leader's catalog hash,
common version (version probing), flags;  v2 adds assignor user data;  v3 is
v2 (the version rose with the metadata's: both share the header's numbers);
v4 adds the resources the member is to warm up (planned moves: the current
owner keeps them meanwhile).

Loads (v3) are compact: a count (0: the member reports none, else one per owned
resource, in the same order), then the largest load as a float64 and each load
as a 16-bit fraction of it (65535: not measured).  A fraction keeps 1/65534 of
the largest load, plenty for balancing, in two bytes per resource.

The assignment's flags byte (every version has it) carries booleans: bit 0
*rejoin*, bit 1 *pending* (the leader withheld resources: a follow-up round
is due), bit 2 *loads known* (the leader needs no first loads from a member
that published none: it has seen the load of all it gives it, or probes).
Readers ignore the bits they do not know, so a new bit needs no new version:
an older reader decodes a blob with it exactly as one without, and a
newer reader given an older blob sees the bit clear.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from workgroup.errors import MessageTooLargeError, ProtocolError, UnsupportedVersionError
from workgroup.protocol.binary import Reader, Writer
from workgroup.types import NO_GENERATION_ID, Resource

MAGIC = b"wg"
HEADER_SIZE = 7
FLAG_COMPRESSED = 0x01
#: The newest metadata / assignment body version this code reads and writes.
LATEST_VERSION = 4
MIN_VERSION = 1
DEFAULT_MAX_BYTES = 1024 * 1024
DEFAULT_COMPRESS_ABOVE = 1024
#: Bodies above this many bytes are compressed at zlib's fastest level: a
#: leader encodes one per member each round (a keyspace's map in each), and
#: level 1 takes half the time of level 6 for about the same size there.
FAST_COMPRESS_ABOVE = 64 * 1024

_ASSIGNMENT_REJOIN = 0x01
_ASSIGNMENT_PENDING = 0x02
_ASSIGNMENT_LOADS_KNOWN = 0x04
_METADATA_WARMS_UP = 0x01
#: A load's 16-bit fraction that means "not measured".
_LOAD_UNKNOWN = 0xFFFF
_LOAD_STEPS = 0xFFFE

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Header:
    used_version: int
    latest_supported_version: int
    compressed: bool = False


@dataclass(frozen=True, slots=True)
class Decoded(Generic[T]):
    header: Header
    value: T


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """What a member tells the leader about itself (JoinGroup protocol metadata)."""

    kinds: tuple[str, ...] = ()
    owned: tuple[Resource, ...] = ()
    #: Generation in which ``owned`` was assigned; -1 when nothing is owned.
    owned_generation: int = NO_GENERATION_ID
    rack: str | None = None
    capacity: float = 1.0
    instance_id: str | None = None
    user_data: bytes = b""
    #: Hash of the resource catalog the member saw (:func:`catalog_hash`).
    catalog_hash: bytes = b""
    tags: tuple[tuple[str, str], ...] = field(default=())  # v2
    #: Smoothed load of each ``owned`` resource, in the same order (NaN: not
    #: measured); empty when the member reports none.  v3.
    loads: tuple[float, ...] = field(default=())
    #: The member warms resources up before it takes them (planned moves).  v4.
    warms_up: bool = False
    #: Resources it is warming up (handed to it to warm, owned by another).  v4.
    warming: tuple[Resource, ...] = field(default=())
    #: Those of ``warming`` that are ready: the next round may cut them over.  v4.
    ready: tuple[Resource, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class AssignmentData:
    """What the leader hands one member (SyncGroup assignment)."""

    assigned: tuple[Resource, ...] = ()
    #: Resources the member owned and must give up (cooperative protocols).
    revoked: tuple[Resource, ...] = ()
    generation: int = NO_GENERATION_ID
    catalog_hash: bytes = b""
    #: Highest version every member supports: members re-encode with it and rejoin.
    common_version: int = LATEST_VERSION
    #: The leader asks this member to rejoin once it has applied the assignment.
    rejoin: bool = False
    user_data: bytes = b""  # v2
    #: The leader withheld resources still owned by other members (cooperative
    #: protocols): the group's rebalance ends only with a follow-up round.  A flag
    #: bit, so it is readable in every version (see the module docstring).
    pending: bool = False
    #: Resources to warm up while their current owner keeps them (v4).
    warming: tuple[Resource, ...] = ()
    #: The leader has seen the load of every resource it gives this member (or
    #: probes for them itself): a member that published no load need not rejoin
    #: to bring its first ones.  A flag bit, readable in every version.
    loads_known: bool = False


class BinaryCodec:
    """workgroup's codec for metadata and assignments (see the module docstring).

    ``latest_version`` may be lowered to behave as an older release (rolling
    upgrade tests); ``max_bytes`` bounds blobs and decompressed bodies;
    bodies above ``compress_above`` bytes are zlib-compressed when that helps
    (``None``: never compress).
    """

    def __init__(
        self,
        *,
        latest_version: int = LATEST_VERSION,
        max_bytes: int = DEFAULT_MAX_BYTES,
        compress_above: int | None = DEFAULT_COMPRESS_ABOVE,
    ) -> None:
        if not MIN_VERSION <= latest_version <= LATEST_VERSION:
            raise ValueError(f"latest_version must be in {MIN_VERSION}..{LATEST_VERSION}")
        self.latest_version = latest_version
        self.max_bytes = max_bytes
        self.compress_above = compress_above

    # --- metadata -------------------------------------------------------------

    def encode_metadata(self, meta: MemberMetadata, version: int | None = None) -> bytes:
        version = self._check_write_version(version)
        w = Writer()
        w.strings(meta.kinds)
        w.resources(meta.owned)
        w.i32(meta.owned_generation)
        w.nullable_string(meta.rack)
        w.f64(meta.capacity)
        w.nullable_string(meta.instance_id)
        w.bytes_(meta.user_data)
        w.bytes_(meta.catalog_hash)
        if version >= 2:
            w.i32(len(meta.tags))
            for name, value in meta.tags:
                w.string(name)
                w.string(value)
        if version >= 3:
            encode_loads(w, meta.owned, meta.loads)
        if version >= 4:
            w.u8(_METADATA_WARMS_UP if meta.warms_up else 0)
            w.resources(meta.warming)
            w.resources(meta.ready)
        return self._frame(version, w.getvalue(), "member metadata")

    def decode_metadata(self, data: bytes) -> Decoded[MemberMetadata]:
        header, r = self._open(data, "member metadata")
        kinds = r.strings()
        owned = r.resources()
        owned_generation = r.i32()
        rack = r.nullable_string()
        capacity = r.f64()
        instance_id = r.nullable_string()
        user_data = r.bytes_()
        catalog = r.bytes_()
        tags: tuple[tuple[str, str], ...] = ()
        if min(header.used_version, self.latest_version) >= 2:
            tags = tuple((r.string(), r.string()) for _ in range(r.count(8)))
        loads: tuple[float, ...] = ()
        if min(header.used_version, self.latest_version) >= 3:
            loads = decode_loads(r, len(owned))
        warms_up = False
        warming: tuple[Resource, ...] = ()
        ready: tuple[Resource, ...] = ()
        if min(header.used_version, self.latest_version) >= 4:
            warms_up = bool(r.u8() & _METADATA_WARMS_UP)  # other bits: newer versions'
            warming = r.resources()
            ready = r.resources()
        self._finish(header, r, "member metadata")
        meta = MemberMetadata(
            kinds=kinds,
            owned=owned,
            owned_generation=owned_generation,
            rack=rack,
            capacity=capacity,
            instance_id=instance_id,
            user_data=user_data,
            catalog_hash=catalog,
            tags=tags,
            loads=loads,
            warms_up=warms_up,
            warming=warming,
            ready=ready,
        )
        return Decoded(header, meta)

    # --- assignment -----------------------------------------------------------

    def encode_assignment(self, assignment: AssignmentData, version: int | None = None) -> bytes:
        version = self._check_write_version(version)
        w = Writer()
        w.resources(assignment.assigned)
        w.resources(assignment.revoked)
        w.i32(assignment.generation)
        w.bytes_(assignment.catalog_hash)
        w.i16(assignment.common_version)
        w.u8(
            (_ASSIGNMENT_REJOIN if assignment.rejoin else 0)
            | (_ASSIGNMENT_PENDING if assignment.pending else 0)
            | (_ASSIGNMENT_LOADS_KNOWN if assignment.loads_known else 0)
        )
        if version >= 2:
            w.bytes_(assignment.user_data)
        if version >= 4:
            w.resources(assignment.warming)
        return self._frame(version, w.getvalue(), "assignment")

    def decode_assignment(self, data: bytes) -> Decoded[AssignmentData]:
        header, r = self._open(data, "assignment")
        assigned = r.resources()
        revoked = r.resources()
        generation = r.i32()
        catalog = r.bytes_()
        common_version = r.i16()
        flags = r.u8()
        user_data = b""
        if min(header.used_version, self.latest_version) >= 2:
            user_data = r.bytes_()
        warming: tuple[Resource, ...] = ()
        if min(header.used_version, self.latest_version) >= 4:
            warming = r.resources()
        self._finish(header, r, "assignment")
        value = AssignmentData(
            assigned=assigned,
            revoked=revoked,
            generation=generation,
            catalog_hash=catalog,
            common_version=common_version,
            rejoin=bool(flags & _ASSIGNMENT_REJOIN),
            user_data=user_data,
            pending=bool(flags & _ASSIGNMENT_PENDING),
            warming=warming,
            loads_known=bool(flags & _ASSIGNMENT_LOADS_KNOWN),
        )
        return Decoded(header, value)

    # --- framing --------------------------------------------------------------

    def _check_write_version(self, version: int | None) -> int:
        if version is None:
            return self.latest_version
        if not MIN_VERSION <= version <= self.latest_version:
            raise UnsupportedVersionError(
                f"cannot write version {version}: this codec writes {MIN_VERSION}.."
                f"{self.latest_version}"
            )
        return version

    def _frame(self, version: int, body: bytes, what: str) -> bytes:
        flags = 0
        if self.compress_above is not None and len(body) > self.compress_above:
            packed = zlib.compress(body, 1 if len(body) > FAST_COMPRESS_ABOVE else 6)
            if len(packed) < len(body):
                body, flags = packed, FLAG_COMPRESSED
        w = Writer()
        w.raw(MAGIC)
        w.i16(version)
        w.i16(self.latest_version)
        w.u8(flags)
        w.raw(body)
        blob = w.getvalue()
        if len(blob) > self.max_bytes:
            raise MessageTooLargeError(
                f"{what} is {len(blob)} bytes, above the limit of {self.max_bytes} bytes "
                "(fewer owned resources per member, compression or a larger limit help)"
            )
        return blob

    def _open(self, data: bytes, what: str) -> tuple[Header, Reader]:
        if len(data) > self.max_bytes:
            raise MessageTooLargeError(
                f"{what} is {len(data)} bytes, above the limit of {self.max_bytes} bytes"
            )
        if len(data) < HEADER_SIZE or data[:2] != MAGIC:
            raise UnsupportedVersionError(
                f"{what} is not in workgroup's format (no 'wg' header; {len(data)} bytes)"
            )
        r = Reader(data, what)
        r.skip(len(MAGIC))
        used, latest, flags = r.i16(), r.i16(), r.u8()
        if used < MIN_VERSION:
            raise UnsupportedVersionError(f"{what} has unsupported version {used}")
        if latest < used:
            raise ProtocolError(
                f"{what} is corrupt: used version {used} above its latest supported {latest}"
            )
        if flags & ~FLAG_COMPRESSED:
            raise ProtocolError(f"{what} is corrupt: unknown flags {flags:#x}")
        header = Header(used, latest, bool(flags & FLAG_COMPRESSED))
        if header.compressed:
            body = _inflate(r.rest(), self.max_bytes, what)
            r = Reader(body, what)
        return header, r

    def _finish(self, header: Header, r: Reader, what: str) -> None:
        # Trailing bytes are fields of a newer version; in a blob of a version we
        # know they can only be corruption.
        if r.remaining and header.used_version <= self.latest_version:
            raise ProtocolError(f"{what} is corrupt: {r.remaining} unexpected trailing bytes")


def encode_loads(w: Writer, owned: tuple[Resource, ...], loads: tuple[float, ...]) -> None:
    """Write ``loads`` (one per ``owned`` resource, in its order, or none)
    compactly: see the module docstring.  Negative, infinite and NaN loads count
    as not measured."""
    if len(loads) != len(owned):
        w.i32(0)
        return
    # ``Writer.resources`` groups the owned resources by kind: follow its order.
    positions: dict[str, list[int]] = {}
    for index, (kind, _) in enumerate(owned):
        positions.setdefault(kind, []).append(index)
    usable = [
        x if x >= 0 and x != math.inf else math.nan
        for x in (loads[i] for kind_positions in positions.values() for i in kind_positions)
    ]
    if not usable or all(math.isnan(x) for x in usable):
        w.i32(0)
        return
    largest = max(x for x in usable if not math.isnan(x))
    w.i32(len(usable))
    w.f64(largest)
    w.u16s(
        [
            _LOAD_UNKNOWN if math.isnan(x) else round(x / largest * _LOAD_STEPS) if largest else 0
            for x in usable
        ]
    )


def decode_loads(r: Reader, owned: int) -> tuple[float, ...]:
    """Read what :func:`encode_loads` wrote for ``owned`` resources."""
    count = r.count(2)
    if count == 0:
        return ()
    if count != owned:
        raise ProtocolError(
            f"member metadata is corrupt: {count} loads for {owned} owned resources"
        )
    largest = r.f64()
    if not largest >= 0 or largest == float("inf"):
        raise ProtocolError(f"member metadata is corrupt: largest load {largest}")
    # Fraction first, then scale: ``largest / steps`` underflows for tiny loads.
    return tuple(
        math.nan if q == _LOAD_UNKNOWN else q / _LOAD_STEPS * largest for q in r.u16s(count)
    )


def _inflate(data: bytes, limit: int, what: str) -> bytes:
    inflater = zlib.decompressobj()
    try:
        body = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise ProtocolError(f"{what} is corrupt: bad compressed body ({exc})") from exc
    if len(body) > limit or inflater.unconsumed_tail:
        raise MessageTooLargeError(f"{what} decompresses to more than {limit} bytes")
    if not inflater.eof:
        raise ProtocolError(f"{what} is corrupt: compressed body is truncated")
    return body
