"""Where a key lands in a keyspace's 64-bit hash space.

The hash is part of the keyspace's contract: every process, on every Python
version, must place a key at the same point, or two members would each think
they own it.  Python's ``hash()`` is salted per process, so it is never used.

- ``int`` keys in the signed 64-bit range (the range the metadata codec carries)
  are multiplied by 2**64 over the golden ratio, modulo 2**64 (Knuth's
  multiplicative hashing): a bijection of 64-bit words, so distinct such keys
  never collide, and consecutive keys spread evenly over the ranges slices cut
  (the high bits).  One multiplication costs about 0.1 us where a digest costs
  0.4 us and SplitMix64's finaliser, three multiplications of Python ints,
  0.6 us: the Directory's budget is 1 us a lookup.
- Other ``int`` keys and ``str`` keys take an 8-byte BLAKE2b digest of a
  canonical encoding (UTF-8 for strings; signed big-endian two's complement,
  shortest form, for integers), each under its own personalisation so that
  ``"1"`` and ``1`` are hashed apart.

:data:`HASH_SCHEME` names this scheme in every encoded slice map: a map hashed
another way is refused instead of misrouting keys.
"""

from __future__ import annotations

from hashlib import blake2b

from workgroup.types import Key

#: The number of points of the hash space: hashes are ``0 <= h < HASH_SPACE``.
HASH_SPACE = 1 << 64
#: The hashing scheme this module implements (carried in encoded slice maps).
HASH_SCHEME = 1

_MASK = HASH_SPACE - 1
#: 2**64 / the golden ratio, made odd (so multiplying by it is a bijection).
_GOLDEN = 0x9E3779B97F4A7C15
_I64_MIN = -(1 << 63)
_I64_END = 1 << 63
_STR_DIGEST = blake2b(digest_size=8, person=b"wg-key-str")
_INT_DIGEST = blake2b(digest_size=8, person=b"wg-key-int")


#: Bound once: a lookup's budget is under a microsecond, hashing included.
_str_digest = _STR_DIGEST.copy
_from_bytes = int.from_bytes


def key_hash(key: Key) -> int:
    """The point of the hash space ``key`` lands on (``0 <= point < HASH_SPACE``)."""
    # The common cases first, with no isinstance call (exact types: a bool or a
    # subclass takes the checks below).
    if type(key) is str:
        digest = _str_digest()
        digest.update(key.encode("utf-8", "surrogatepass"))
        return _from_bytes(digest.digest(), "big")
    if type(key) is int and _I64_MIN <= key < _I64_END:
        return (key * _GOLDEN) & _MASK
    if isinstance(key, str):
        digest = _str_digest()
        digest.update(key.encode("utf-8", "surrogatepass"))
        return _from_bytes(digest.digest(), "big")
    if isinstance(key, int) and not isinstance(key, bool):
        if _I64_MIN <= key < _I64_END:
            return (key * _GOLDEN) & _MASK
        digest = _INT_DIGEST.copy()
        digest.update(key.to_bytes((key.bit_length() + 8) // 8, "big", signed=True))
        return _from_bytes(digest.digest(), "big")
    raise TypeError(f"keyspace keys are str or int, not {type(key).__name__}")


__all__ = ["HASH_SCHEME", "HASH_SPACE", "key_hash"]
