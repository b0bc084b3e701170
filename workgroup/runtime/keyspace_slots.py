"""What outlives every process of a keyspace: its highest token, its epoch and its map.

The map travels with the members (:mod:`workgroup.keyspaces.report`), which
covers a change of leader but not a full restart: when every process stops, no
member carries a map, and a leader starting from nothing would issue tokens
from 1 again, below the tokens of a holder from before the restart.  So the
keyspace's state is also committed in the group's lease slots
(:mod:`workgroup.runtime.slots`, one slot per key below), under the fence of
the group's generation, and read before the first round.

Rules:

1. **The token slot** (:func:`token_key`): its committed offset is the highest
   token the keyspace issued (``SliceMap.max_token``); its metadata, after the
   slot header, says the map's epoch and how many chunk slots hold the map
   (``v1 epoch=<e> chunks=<n>``).  Offsets survive where metadata does not
   (Tansu keeps none): the token alone is enough for fencing.
2. **The epoch slot** (:func:`epoch_key`): its offset is the map's epoch, so
   that maps made after a restart are newer than any map a member from before
   it may still carry.
2b. **The parts' token slot** (:func:`part_token_key`): a member handed only
   its part of the map (:mod:`workgroup.member.keyspace` rule 1) cannot commit
   the map, so it commits the map's highest token there, and its epoch in the
   epoch slot; the token slot and the chunks stay as the last carrier wrote
   them.  The highest token kept is the higher of the two token slots'.
3. **The chunk slots** (:func:`chunk_key`): the encoded map
   (:func:`~workgroup.keyspaces.codec.encode_slice_map`), zlib-compressed and
   base64-encoded, cut into at most :data:`MAX_CHUNKS` pieces of
   :data:`CHUNK_CHARS` characters, each after the slot header and its epoch
   (``<e>:``).  A map too large for them is not kept (the tokens are).
4. **The pool slots** (:func:`pool_slot_key`): slot ``k`` of the keyspace's
   pool of lease slots (:mod:`workgroup.keyspaces.slot_pool`), where the
   slices' leases keep their tokens and checkpoints.
5. **Reading never fails** (:func:`read_persisted`): what cannot be read is
   dropped with a one-line reason, and the state falls back to what the
   offsets prove (the token slot's offset, the epoch slot's); the map is kept
   only if every chunk names the token slot's epoch and the whole decodes to a
   map of this keyspace with that epoch.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from workgroup.errors import ProtocolError
from workgroup.keyspaces.codec import decode_slice_map, encode_slice_map
from workgroup.keyspaces.partial import PartialMap
from workgroup.keyspaces.persisted import PersistedKeyspace
from workgroup.keyspaces.slices import Slice, SliceMap
from workgroup.runtime.slots import (
    MAX_METADATA_BYTES,
    Slot,
    decode_metadata,
    same_key,
    slot_header,
    slot_of,
)
from workgroup.types import Key

#: The most chunk slots a keyspace's map takes (rule 3).
MAX_CHUNKS = 64
#: Characters of the map per chunk: Kafka's metadata limit less the header and epoch.
CHUNK_CHARS = MAX_METADATA_BYTES - 160
#: Starts every state key; slice keys are ints, so none is ever a slice's.
STATE_PREFIX = "~keyspace/"
_TOKEN_FORMAT = re.compile(r"v1 epoch=(\d{1,19}) chunks=(\d{1,3})")


def token_key(keyspace: str) -> Key:
    """The key of the slot whose offset is the keyspace's highest token (rule 1)."""
    return f"{STATE_PREFIX}{keyspace}/max-token"


def part_token_key(keyspace: str) -> Key:
    """The key of the slot whose offset is the highest token a member handed
    part of the map committed (rule 2b)."""
    return f"{STATE_PREFIX}{keyspace}/max-token-of-parts"


def epoch_key(keyspace: str) -> Key:
    """The key of the slot whose offset is the keyspace's epoch (rule 2)."""
    return f"{STATE_PREFIX}{keyspace}/epoch"


def pool_slot_key(keyspace: str, slot: int) -> Key:
    """The key of the slot ``slot`` of the keyspace's pool of lease slots
    (:mod:`workgroup.keyspaces.slot_pool`); the slot's header names the slice
    that holds it."""
    return f"{STATE_PREFIX}{keyspace}/slot/{slot}"


def slice_slot(group_id: str, smap: SliceMap, piece: Slice) -> Slot:
    """The lease slot of ``piece`` of ``smap`` in ``group_id``: its pool slot,
    or the slot of its id when the map gave it none."""
    if piece.slot is None:
        return slot_of(group_id, piece.id)
    return slot_of(group_id, pool_slot_key(smap.keyspace, piece.slot))


def chunk_key(keyspace: str, index: int) -> Key:
    """The key of the slot holding chunk ``index`` of the map (rule 3)."""
    return f"{STATE_PREFIX}{keyspace}/map/{index}"


@dataclass(frozen=True, slots=True)
class StateCommit:
    """What to commit for a map: ``key -> (offset, metadata)`` per slot (rules 1-3)."""

    slots: dict[Key, tuple[int, str]]
    #: Whether the map itself is kept (``False``: too large; tokens only).
    map_kept: bool


def encode_persisted(smap: SliceMap | PartialMap) -> StateCommit:
    """The slots' offsets and metadata that keep ``smap`` (rules 1-3), or of
    a part of a map, its highest token and epoch (rule 2b)."""
    name = smap.keyspace
    epoch_slot = (smap.epoch, slot_header(epoch_key(name)) + str(smap.epoch))
    if isinstance(smap, PartialMap):
        key = part_token_key(name)
        return StateCommit(
            {key: (smap.max_token, slot_header(key)), epoch_key(name): epoch_slot}, False
        )
    text = base64.b64encode(zlib.compress(encode_slice_map(smap), 6)).decode("ascii")
    chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]
    kept = len(chunks) <= MAX_CHUNKS
    if not kept:
        chunks = []
    slots: dict[Key, tuple[int, str]] = {
        token_key(name): (
            smap.max_token,
            f"{slot_header(token_key(name))}v1 epoch={smap.epoch} chunks={len(chunks)}",
        ),
        epoch_key(name): epoch_slot,
    }
    for index, chunk in enumerate(chunks):
        key = chunk_key(name, index)
        slots[key] = (0, f"{slot_header(key)}{smap.epoch}:{chunk}")
    return StateCommit(slots, kept)


@dataclass(frozen=True, slots=True)
class ReadState:
    """:func:`read_persisted`'s answer: the state, and why part of it was dropped."""

    state: PersistedKeyspace
    #: One line saying what could not be read (``None``: everything could).
    error: str | None = None
    #: The chunk slots to read for the map (from the token slot's metadata).
    chunks: int = 0


def chunk_count(keyspace: str, token_metadata: str | None) -> tuple[int, int | None, str | None]:
    """From the token slot's metadata: the chunk count, the epoch it names
    (``None``: none readable) and why it cannot be read (``None``: it can)."""
    try:
        contents = decode_metadata(token_metadata)
    except ValueError as exc:
        return 0, None, f"its token slot's metadata is unreadable ({exc})"
    if contents.key is None:
        return 0, None, None  # never committed, or a broker that keeps no metadata
    if not same_key(contents.key, token_key(keyspace)):
        return 0, None, f"its token slot names another key ({contents.key!r})"
    match = _TOKEN_FORMAT.fullmatch(contents.checkpoint or "")
    if match is None:
        return 0, None, "its token slot's metadata is not 'v1 epoch=<e> chunks=<n>'"
    count = int(match[2])
    if count > MAX_CHUNKS:
        return 0, None, f"its token slot names {count} chunks, more than {MAX_CHUNKS}"
    return count, int(match[1]), None


def read_persisted(
    keyspace: str,
    token: tuple[int, str | None],
    epoch_offset: int,
    chunks: Sequence[str | None] = (),
    part_token: int = -1,
) -> ReadState:
    """The state the slots hold (rule 5): ``token`` is the token slot's offset
    (-1: never committed) and metadata, ``epoch_offset`` the epoch slot's,
    ``chunks`` the chunk slots' metadata in order, ``part_token`` the parts'
    token slot's offset (rule 2b).  Never raises."""
    max_token = max(token[0], part_token, 0)
    epoch = max(epoch_offset, 0)
    count, named_epoch, error = chunk_count(keyspace, token[1])
    if error is not None or count == 0:
        return ReadState(PersistedKeyspace(max_token, epoch), _say(keyspace, error), count)
    assert named_epoch is not None
    if len(chunks) != count:
        return ReadState(PersistedKeyspace(max_token, epoch), None, count)
    try:
        smap = _decode_chunks(keyspace, named_epoch, chunks)
    except ProtocolError as exc:
        return ReadState(PersistedKeyspace(max_token, epoch), _say(keyspace, str(exc)), count)
    if smap.max_token > max_token:
        # The token slot's offset is the proof: a map claiming more is not its map.
        error = f"its map issued token {smap.max_token}, above the token slot's {max_token}"
        return ReadState(PersistedKeyspace(max_token, epoch), _say(keyspace, error), count)
    return ReadState(PersistedKeyspace(max_token, max(epoch, smap.epoch), smap), None, count)


def _decode_chunks(keyspace: str, epoch: int, chunks: Sequence[str | None]) -> SliceMap:
    parts = []
    for index, metadata in enumerate(chunks):
        key = chunk_key(keyspace, index)
        try:
            contents = decode_metadata(metadata)
        except ValueError as exc:
            raise ProtocolError(f"map chunk {index} is unreadable ({exc})") from None
        if contents.key is None or not same_key(contents.key, key):
            raise ProtocolError(f"map chunk {index} is missing or names another key")
        tag, _, text = (contents.checkpoint or "").partition(":")
        if tag != str(epoch):
            raise ProtocolError(f"map chunk {index} is of epoch {tag!r}, not {epoch}")
        parts.append(text)
    try:
        blob = zlib.decompress(base64.b64decode("".join(parts), validate=True))
    except (binascii.Error, zlib.error, ValueError) as exc:
        raise ProtocolError(f"the map's chunks do not decode ({exc})") from None
    smap = decode_slice_map(blob)
    if smap.keyspace != keyspace or smap.epoch != epoch:
        raise ProtocolError(
            f"the chunks hold the map of {smap.keyspace!r} at epoch {smap.epoch}, "
            f"not of {keyspace!r} at epoch {epoch}"
        )
    return smap


def _say(keyspace: str, error: str | None) -> str | None:
    if error is None:
        return None
    return (
        f"keyspace {keyspace!r}: the kept map is dropped, {error}; "
        "the next map starts above the kept token"
    )


__all__ = [
    "CHUNK_CHARS",
    "MAX_CHUNKS",
    "ReadState",
    "StateCommit",
    "chunk_count",
    "chunk_key",
    "encode_persisted",
    "epoch_key",
    "part_token_key",
    "pool_slot_key",
    "read_persisted",
    "slice_slot",
    "token_key",
]
