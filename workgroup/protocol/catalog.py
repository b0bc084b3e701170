"""The resource catalog: ``kind -> ordered keys``, and its hash.

Members put the hash of the catalog they saw into their metadata so that the
leader can detect disagreements (stale views of a changing source).  The
leader's catalog wins; disagreements are logged, never fatal.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

from workgroup.assignors.base import Key
from workgroup.protocol.binary import Writer

Catalog = Mapping[str, Sequence[Key]]

#: 16 bytes of SHA-256: collisions are irrelevant at this size, blobs stay small.
HASH_SIZE = 16


def catalog_hash(catalog: Catalog) -> bytes:
    """A digest of the catalog that does not depend on the order of kinds."""
    w = Writer()
    for kind in sorted(catalog):
        keys = catalog[kind]
        w.string(kind)
        w.i32(len(keys))
        for key in keys:
            w.key(key)
    return hashlib.sha256(w.getvalue()).digest()[:HASH_SIZE]


def freeze_catalog(catalog: Catalog) -> dict[str, tuple[Key, ...]]:
    """A private copy (sources may mutate what they return)."""
    return {str(kind): tuple(keys) for kind, keys in catalog.items()}
