"""The resource catalog: resources grouped by kind, with ordered keys and attributes.

A catalog maps each kind to its ordered keys.  A key may carry attributes: give
a :class:`ResourceSpec` (or a mapping ``{"key": K, "racks": [...],
"attributes": {...}}``, as in JSON inputs) instead of the bare key.  Racks feed
rack-aware assignors; attributes are free-form strings for custom assignors.

Members put the hash of the catalog they saw into their metadata so that the
leader can detect disagreements (stale views of a changing source).  The
leader's catalog wins; disagreements are logged, never fatal.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workgroup.errors import ConfigError
from workgroup.protocol.binary import Writer
from workgroup.types import Key, Resource


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """One key of a kind, with where its data lives and free-form attributes."""

    key: Key
    racks: frozenset[str] = frozenset()
    attributes: tuple[tuple[str, str], ...] = ()


CatalogEntry = Key | ResourceSpec | Mapping[str, Any]
Catalog = Mapping[str, Sequence[CatalogEntry]]

#: 16 bytes of SHA-256: collisions are irrelevant at this size, blobs stay small.
HASH_SIZE = 16


@dataclass(frozen=True)
class FrozenCatalog:
    """A private, validated copy of a catalog (sources may mutate what they return)."""

    keys: dict[str, tuple[Key, ...]] = field(default_factory=dict)
    racks: dict[Resource, frozenset[str]] = field(default_factory=dict)
    attributes: dict[Resource, dict[str, str]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(len(keys) for keys in self.keys.values())


def _spec(kind: str, entry: CatalogEntry) -> ResourceSpec:
    if isinstance(entry, ResourceSpec):
        spec = entry
    elif isinstance(entry, Mapping):
        unknown = set(entry) - {"key", "racks", "attributes"}
        if "key" not in entry or unknown:
            raise ConfigError(
                f"resource of kind {kind!r}: expected {{'key', 'racks', 'attributes'}}, "
                f"got {sorted(entry)}"
            )
        attributes = entry.get("attributes") or {}
        spec = ResourceSpec(
            entry["key"],
            frozenset(str(r) for r in entry.get("racks") or ()),
            tuple(sorted((str(k), str(v)) for k, v in dict(attributes).items())),
        )
    else:
        spec = ResourceSpec(entry)
    if isinstance(spec.key, bool) or not isinstance(spec.key, int | str):
        raise ConfigError(f"resource keys are str or int, got {spec.key!r} (kind {kind!r})")
    return spec


def freeze_catalog(catalog: Catalog) -> FrozenCatalog:
    frozen = FrozenCatalog()
    for kind, entries in catalog.items():
        if not isinstance(kind, str):
            raise ConfigError(f"resource kinds are strings, got {kind!r}")
        keys: list[Key] = []
        seen: set[Key] = set()
        for entry in entries:
            spec = _spec(kind, entry)
            if spec.key in seen:
                raise ConfigError(f"resource ({kind!r}, {spec.key!r}) is listed twice")
            seen.add(spec.key)
            keys.append(spec.key)
            if spec.racks:
                frozen.racks[(kind, spec.key)] = spec.racks
            if spec.attributes:
                frozen.attributes[(kind, spec.key)] = dict(spec.attributes)
        frozen.keys[kind] = tuple(keys)
    return frozen


def catalog_hash(catalog: Catalog | FrozenCatalog) -> bytes:
    """A digest of the catalog that does not depend on the order of kinds."""
    frozen = catalog if isinstance(catalog, FrozenCatalog) else freeze_catalog(catalog)
    w = Writer()
    for kind in sorted(frozen.keys):
        keys = frozen.keys[kind]
        w.string(kind)
        w.i32(len(keys))
        for key in keys:
            w.key(key)
            # Attributes are hashed only where present, so plain catalogs keep
            # the digest they always had.
            racks = frozen.racks.get((kind, key))
            attributes = frozen.attributes.get((kind, key))
            if racks or attributes:
                w.u8(1)
                w.strings(sorted(racks or ()))
                w.strings([f"{k}={v}" for k, v in sorted((attributes or {}).items())])
    return hashlib.sha256(w.getvalue()).digest()[:HASH_SIZE]
