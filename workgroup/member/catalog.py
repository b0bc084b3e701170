"""The resource catalog a member reads, as the member machine keeps it.  Sans-I/O.

Rules:

1. The catalog is frozen when given (:func:`~workgroup.protocol.catalog.freeze_catalog`);
   its digest goes in the member's metadata, and the leader's in each
   assignment.
2. A catalog whose digest differs replaces it and is logged
   (``member.resources_changed``); one with the same digest changes nothing.
3. The digest the current assignment was computed with is remembered only when
   this member led the round: once the leader's catalog changed since, a round
   is due (the machine asks for it while STABLE).
"""

from __future__ import annotations

from collections.abc import Mapping

from workgroup.log import get_logger
from workgroup.protocol.catalog import Catalog, FrozenCatalog, catalog_hash, freeze_catalog

log = get_logger(__name__)


class MemberCatalog:
    """The catalog one member reads (see the module docstring)."""

    def __init__(self, catalog: Catalog | None) -> None:
        self.frozen: FrozenCatalog = freeze_catalog(catalog or {})
        self.digest = catalog_hash(self.frozen)
        #: Whether :attr:`frozen` is part of the catalog :attr:`digest` names.
        self._part = False
        #: The digest the current assignment was computed with (as leader; rule 3).
        self._assigned_with = b""

    @property
    def keys(self) -> Mapping[str, tuple[str | int, ...]]:
        return self.frozen.keys

    def change(self, catalog: Catalog, *, digest: bytes | None = None) -> bool:
        """Rule 2: ``True`` if ``catalog`` replaced the one read so far.

        ``digest``: the digest of a larger catalog that ``catalog`` is the part
        of this member reads (a keyspace's part of its map), instead of its own."""
        frozen = freeze_catalog(catalog)
        part = digest is not None
        if digest is None:
            digest = catalog_hash(frozen)
        if digest == self.digest and ((not part and not self._part) or frozen == self.frozen):
            return False
        self.frozen, self.digest, self._part = frozen, digest, part
        log.info("member.resources_changed", kinds=len(frozen.keys), resources=frozen.size)
        return True

    def assigned(self, digest: bytes, *, led: bool) -> None:
        """An assignment computed with the leader's catalog ``digest`` (rule 3)."""
        self._assigned_with = digest if led else b""

    @property
    def changed_since_assignment(self) -> bool:
        """Rule 3: this member led, and its catalog changed since."""
        return bool(self._assigned_with) and self._assigned_with != self.digest


__all__ = ["MemberCatalog"]
