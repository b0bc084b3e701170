"""What Kafka's code depends on from the JVM: ``String.hashCode`` and ``HashMap`` order.

Some of Kafka's choices are left to the iteration order of a
``java.util.HashMap<String, ?>`` (the broker's protocol vote, the sticky
assignors' "one extra" slots).  Reproducing Kafka's result there means
reproducing that order, which follows from the strings' Java hash codes.
"""

from __future__ import annotations

from collections.abc import Iterable

_INT_MASK = 0xFFFFFFFF
_INT_SIGN = 0x80000000
#: ``HashMap``'s default initial capacity and load factor (3/4).
_INITIAL_CAPACITY = 16


def java_string_hash(text: str) -> int:
    """``java.lang.String#hashCode()``: a signed 32-bit ``int``, as Java returns it.

    Java hashes UTF-16 code units, so a character outside the Basic Multilingual
    Plane counts as its two surrogates; lone surrogates (legal in both Java and
    Python strings) are hashed as they are.
    """
    h = 0
    raw = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(raw), 2):
        h = (31 * h + (raw[i] << 8 | raw[i + 1])) & _INT_MASK
    return h - (1 << 32) if h & _INT_SIGN else h


def java_hashmap_order(keys: Iterable[str]) -> list[str]:
    """The order in which a ``new HashMap<String, ?>()`` that had ``keys`` put into
    it, in this order, iterates them.

    A key's bucket is ``(h ^ (h >>> 16)) & (capacity - 1)`` with ``h`` its hash
    code; the table starts at 16 buckets and doubles whenever it holds more than
    3/4 of its capacity.  Iteration goes bucket by bucket and, within a bucket,
    in insertion order (resizing keeps that order).  A key put twice keeps its
    first place.  Not reproduced: buckets that Java turns into trees (8 or more
    colliding keys in a table of 64 buckets or more), whose order differs.
    """
    unique = list(dict.fromkeys(keys))
    capacity = _INITIAL_CAPACITY
    while len(unique) > capacity * 3 // 4:
        capacity *= 2
    mask = capacity - 1

    def bucket(key: str) -> int:
        h = java_string_hash(key) & _INT_MASK  # ``>>>`` shifts the unsigned bits
        return (h ^ (h >> 16)) & mask

    return sorted(unique, key=bucket)  # stable: insertion order within a bucket
