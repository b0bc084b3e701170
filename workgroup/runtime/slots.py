"""Where a lease keeps its fencing token and checkpoint: one committed offset per key.

A lease is one resource of one group.  Its state lives in the group's committed
offsets, so that the coordinator validates every write against the group's
generation and the writer's member id (the fence).

Rules:

1. **A slot is a function of its key alone**, never of the key's position in
   the catalog: partition 0 of the topic ``workgroup-leases.<group>.<digest>``,
   where ``<digest>`` is the first 32 hex digits of SHA-256 over the key's typed
   encoding (its JSON: the int ``1`` and the str ``"1"`` differ).  Removing,
   reordering, inserting or restoring keys leaves every key's slot where it
   was; 128 bits make two keys sharing a slot practically impossible.  A
   standby twin shares its resource's slot; a leader lease is one key.
2. The committed **offset is the fencing token**: the next owner reads it and
   commits it plus one before its handler starts, so it increases every time the
   resource changes hands and survives coordinator restarts with the offsets.
   A key restored within the offsets retention continues from its own token and
   checkpoint; a new key, or one restored after the retention, starts afresh.
3. The committed **metadata is self-describing**: a header naming the key
   (:func:`slot_header`), then the checkpoint.  A holder reads the header
   before its handler starts and refuses a slot that names another key or that
   it cannot read (:class:`SlotMismatchError`): it never reads another key's
   checkpoint silently.  Tansu keeps no commit metadata: there the check sees
   nothing (and checkpoints read back as ``None``), while tokens still rise.
4. A removed key's slot is never reused by another key (there is nothing to
   decide at reuse time); on a Kafka broker its topic costs one partition until
   deleted.  The exception is a keyspace's pool of slots
   (:mod:`workgroup.keyspaces.slot_pool`): a pool slot passes from a slice
   merged away to a slice born later, and its new holder reads a header
   naming an earlier slice as a slot with no checkpoint for it
   (:func:`read_slot`'s ``earlier``).
5. The checkpoint limit is Kafka's ``offset.metadata.max.bytes`` (4096) minus
   the key's header; :class:`CheckpointError` says the exact limit for the key.

A Kafka broker accepts commits only for an existing topic-partition: the key
topics are created in batches (:mod:`workgroup.runtime.topics`); the embedded
coordinator accepts any topic (it hosts none).

The layout before this one (the *legacy* layout) kept key ``i`` of the catalog in
partition ``i`` of ``workgroup-leases.<group>`` (:func:`legacy_lease_topic`):
see :mod:`workgroup.runtime.legacy`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from workgroup.errors import ConfigError
from workgroup.runtime.errors import CheckpointError, SlotMismatchError
from workgroup.types import Key

#: Kafka's default ``offset.metadata.max.bytes``; checked in UTF-8 bytes, which
#: is never less than Kafka's count (UTF-16 code units).
MAX_METADATA_BYTES = 4096
#: A topic name Kafka accepts (``Topic.validate``): at most 249 of these.
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]+")
MAX_TOPIC_LENGTH = 249
LEASE_TOPIC_PREFIX = "workgroup-leases."
#: Hex digits of the key digest in a slot's topic name (128 bits).
DIGEST_CHARS = 32
#: The longest group id whose key topics are valid names: prefix, ".", digest.
MAX_GROUP_ID_LENGTH = MAX_TOPIC_LENGTH - len(LEASE_TOPIC_PREFIX) - 1 - DIGEST_CHARS
#: The offset committed for a slot nobody took yet.
NO_TOKEN = 0
#: Starts every slot header; the key's JSON and a newline follow.
HEADER_MAGIC = "wg-key:"


@dataclass(frozen=True, slots=True)
class Slot:
    """Where a lease's token and checkpoint are committed."""

    topic: str
    partition: int


def check_group_id(group_id: str) -> str:
    """``group_id`` if its lease topics can be named, else a one-line :class:`ConfigError`."""
    if not _TOPIC_CHARS.fullmatch(group_id) or len(group_id) > MAX_GROUP_ID_LENGTH:
        raise ConfigError(
            f"group id {group_id!r} cannot name lease topics: use letters, digits, "
            f"'.', '_' and '-', at most {MAX_GROUP_ID_LENGTH} characters (a lease topic "
            f"is {LEASE_TOPIC_PREFIX!r} + the group id + '.' + a {DIGEST_CHARS}-digit key digest)"
        )
    return group_id


def encode_key(key: Key) -> str:
    """The key's typed encoding: its JSON (``1`` and ``"1"`` differ), on one line."""
    if type(key) is int:  # an int's JSON is its decimal form (no json call per key)
        return str(key)
    if isinstance(key, bool) or not isinstance(key, int | str):
        raise TypeError(f"a key is a str or an int, got {type(key).__name__}")
    return json.dumps(key, ensure_ascii=False, separators=(",", ":"))


def key_digest(key: Key) -> str:
    """The first :data:`DIGEST_CHARS` hex digits of SHA-256 over the key's encoding."""
    import hashlib  # on first use: it costs the fence's import 9 ms

    return hashlib.sha256(encode_key(key).encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def slot_of(group_id: str, key: Key) -> Slot:
    """The slot of ``key`` in ``group_id`` (rule 1); the group id is checked."""
    return Slot(f"{LEASE_TOPIC_PREFIX}{check_group_id(group_id)}.{key_digest(key)}", 0)


def legacy_lease_topic(group_id: str) -> str:
    """The topic of the legacy layout, whose partition ``i`` held catalog key ``i``."""
    return LEASE_TOPIC_PREFIX + check_group_id(group_id)


def slot_header(key: Key) -> str:
    """The metadata prefix that names ``key`` (rule 3)."""
    return f"{HEADER_MAGIC}{encode_key(key)}\n"


@dataclass(frozen=True, slots=True)
class SlotContents:
    """A slot's metadata read back: the key it names (``None``: never committed)
    and its checkpoint (``None``: none)."""

    key: Key | None
    checkpoint: str | None


def decode_metadata(metadata: str | None) -> SlotContents:
    """The key and checkpoint in a slot's committed metadata.

    Empty metadata (never committed, or a broker that keeps none) names no key.
    Anything else must start with a header: :class:`ValueError` otherwise.
    """
    if not metadata:
        return SlotContents(None, None)
    if not metadata.startswith(HEADER_MAGIC):
        raise ValueError("no slot header")
    end = metadata.find("\n", len(HEADER_MAGIC))
    if end < 0:
        raise ValueError("slot header not terminated")
    text = metadata[len(HEADER_MAGIC) : end]
    if text.isdigit() and text.isascii() and (text[0] != "0" or text == "0"):
        # An int key in JSON's own form (most slots): no JSON parser per slot.
        return SlotContents(int(text), metadata[end + 1 :] or None)
    try:
        key = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"slot header is not JSON: {exc.msg}") from None
    if isinstance(key, bool) or not isinstance(key, int | str):
        raise ValueError(f"slot header names a {type(key).__name__}, not a key")
    return SlotContents(key, metadata[end + 1 :] or None)


def read_slot(
    metadata: str | None,
    key: Key,
    slot: Slot,
    earlier: Callable[[Key], bool] | None = None,
) -> str | None:
    """The checkpoint of ``key`` in its slot's metadata; :class:`SlotMismatchError`
    if the slot names another key or cannot be read (rule 3).  ``earlier``: for
    a pool slot (rule 4), whether a key the slot names held it before ``key``;
    such a slot holds no checkpoint of ``key``."""
    try:
        contents = decode_metadata(metadata)
    except ValueError as exc:
        raise SlotMismatchError(key, slot.topic, None, str(exc)) from None
    if contents.key is not None and not same_key(contents.key, key):
        if earlier is not None and earlier(contents.key):
            return None
        raise SlotMismatchError(key, slot.topic, contents.key, "it names another key")
    return contents.checkpoint


def same_key(a: Key, b: Key) -> bool:
    """Equal keys of the same type (``1 != "1"``; ``True`` is no key)."""
    return type(a) is type(b) and a == b


def checkpoint_limit(key: Key) -> int:
    """The largest checkpoint, in UTF-8 bytes, that ``key``'s slot can hold (rule 5)."""
    return MAX_METADATA_BYTES - len(slot_header(key).encode("utf-8"))


def check_value(value: str, key: Key | None = None) -> str:
    """``value`` if it can be ``key``'s checkpoint, else :class:`CheckpointError`."""
    if not isinstance(value, str):
        raise CheckpointError(f"a checkpoint is a str, got {type(value).__name__}")
    if not value:
        # Kafka stores no metadata as "": an empty value would read back as None.
        raise CheckpointError("a checkpoint cannot be empty")
    limit = MAX_METADATA_BYTES if key is None else checkpoint_limit(key)
    size = len(value.encode("utf-8"))
    if size > limit:
        raise CheckpointError(
            f"checkpoint of {size} bytes is over the limit of {limit} for key {key!r} "
            f"(Kafka's offset.metadata.max.bytes, {MAX_METADATA_BYTES}, less the "
            f"{MAX_METADATA_BYTES - limit}-byte header naming the key); store large "
            "state elsewhere and commit a reference to it"
        )
    return value


def read_value(metadata: str | None) -> str | None:
    """The checkpoint stored in a committed offset's metadata, whichever key it
    names (``None``: none); for tools that list slots.  Unreadable metadata is
    returned as it is."""
    try:
        return decode_metadata(metadata).checkpoint
    except ValueError:
        return metadata


__all__ = [
    "DIGEST_CHARS",
    "LEASE_TOPIC_PREFIX",
    "MAX_GROUP_ID_LENGTH",
    "MAX_METADATA_BYTES",
    "NO_TOKEN",
    "Slot",
    "SlotContents",
    "check_group_id",
    "check_value",
    "checkpoint_limit",
    "decode_metadata",
    "encode_key",
    "key_digest",
    "legacy_lease_topic",
    "read_slot",
    "read_value",
    "same_key",
    "slot_header",
    "slot_of",
]
