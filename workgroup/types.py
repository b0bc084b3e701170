"""Types every layer shares: what a resource is, and the one order resources sort in.

Resources are ``(kind, key)`` tuples: kinds group resources (a Kafka topic is a
kind, its partitions the keys), keys are JSON scalars so that inputs can be
written by hand.  Member, coordinator-independent protocol codecs, assignors and
tools all import them from here.
"""

from __future__ import annotations

from collections.abc import Iterable

#: A key within a kind: JSON scalars so that inputs can be written by hand.
Key = str | int
#: ``(kind, key)``.
Resource = tuple[str, Key]
#: The generation id of a member that has none, and the generation reported for
#: owning nothing (Kafka's ``NO_GENERATION``).
NO_GENERATION_ID = -1


def resource_sort_key(resource: Resource) -> tuple[str, bool, str | int]:
    """Kind by name, then integer keys (numerically) before string keys.

    Integer and string keys of one kind never compare with each other, so a kind
    may mix them; this is the order every listing and encoding uses.
    """
    kind, key = resource
    return (kind, isinstance(key, str), key)


def sorted_resources(resources: Iterable[Resource]) -> tuple[Resource, ...]:
    """``resources`` in :func:`resource_sort_key` order."""
    return tuple(sorted(resources, key=resource_sort_key))


__all__ = ["NO_GENERATION_ID", "Key", "Resource", "resource_sort_key", "sorted_resources"]
