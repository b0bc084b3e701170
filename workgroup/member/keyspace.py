"""A member of a keyspace's group: the map it knows and the hot keys it reports.  Sans-I/O.

A group may serve one keyspace (:class:`KeyspaceConfig`): its resources are the
slices of the keyspace's map, ``(keyspace, slice id)``, and the leader's
keyspace stage (:mod:`~workgroup.member.keyspace_stage`) plans the map and
places the slices.

Rules:

1. **The map travels once per round.**  Every assignment carries the map the
   leader made (``AssignmentData.user_data``): whole to the map's two
   *carriers* (the leader and one other member), and to every other member
   the part it works on (:class:`~workgroup.keyspaces.partial.PartialMap`:
   the slices it owns, warms up, holds standby or is withheld, with the map's
   epoch and ``max_token``), so that a Kafka broker's group record holds about
   one copy of the map however many members there are.  The member keeps the
   newest it was handed (highest ``epoch``, then highest ``max_token``; of the
   same map, the form handed last) and its catalog becomes the map's slices
   (:func:`keyspace_catalog`; of a part, the part's slices under the leader's
   digest), before the assignment is taken, so that the leader's catalog and
   the member's agree.
2. **The member reports it back**: its JoinGroup metadata's ``user_data`` is a
   :class:`~workgroup.keyspaces.report.KeyspaceReport` with that map, whole or
   in part, and its sampled hot keys, so that any next leader starts from the
   newest map (from a carrier's copy, or rebuilt from the parts).
3. **Sampled keys**: the application records a key's load by hash point; the
   report keeps the :attr:`KeyspaceConfig.max_sampled_keys` heaviest of those
   in slices the map gives this member (a key whose slice moved away is the new
   owner's to report, and is forgotten here).  The member keeps at most twice
   that many: past it, the heaviest half stays.
4. An assignment without a readable map changes nothing (logged): the member
   keeps the map it had.
5. **The kept state** (:class:`~workgroup.keyspaces.persisted.PersistedKeyspace`):
   what this member's process read from the group's slots before it joined,
   then what it committed itself; the leader's keyspace stage starts above it
   (a full restart).  The member remembers the generation whose assignment
   handed it its map (:attr:`MemberKeyspace.taken_in`): the map it may commit
   under that generation, and no other.
6. **Standbys** (:attr:`KeyspaceConfig.standbys`): each slice of the map has a
   standby twin, ``(keyspace + ".standby", slice id)``
   (:func:`~workgroup.assignors.standby.standby_kind`), in the catalog beside
   it; the leader's keyspace stage places the twins on members other than the
   slice's owner.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from threading import Lock

from workgroup.assignors.standby import standby_kind
from workgroup.errors import ConfigError, ProtocolError
from workgroup.keyspaces.partial import PartialMap
from workgroup.keyspaces.persisted import PersistedKeyspace
from workgroup.keyspaces.report import KeyspaceReport, decode_report, encode_report
from workgroup.keyspaces.settings import PlannerSettings
from workgroup.keyspaces.slices import SliceMap
from workgroup.log import get_logger
from workgroup.protocol.catalog import Catalog

log = get_logger(__name__)

#: The most sampled keys a member reports by default.
DEFAULT_MAX_SAMPLED_KEYS = 64


@dataclass(frozen=True, slots=True)
class KeyspaceConfig:
    """The keyspace a group serves: its name (the resources' kind) and the planner's settings."""

    name: str
    settings: PlannerSettings = field(default_factory=PlannerSettings)
    max_sampled_keys: int = DEFAULT_MAX_SAMPLED_KEYS
    #: Standby holders per slice (rule 6).
    standbys: int = 0

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a keyspace needs a name")
        if (
            isinstance(self.standbys, bool)
            or not isinstance(self.standbys, int)
            or self.standbys < 0
        ):
            raise ConfigError(f"standbys must be an integer >= 0, got {self.standbys!r}")
        if isinstance(self.max_sampled_keys, bool) or self.max_sampled_keys < 0:
            raise ConfigError(
                f"max_sampled_keys must be an integer >= 0, got {self.max_sampled_keys!r}"
            )


#: A keyspace's map as a member knows it: whole, or the part it works on (rule 1).
KnownMap = SliceMap | PartialMap


def keyspace_catalog(smap: KnownMap, standbys: int = 0) -> Catalog:
    """The catalog of a keyspace's group under ``smap``: one resource per slice,
    and its standby twin when slices have ``standbys`` (rule 6)."""
    ids = [piece.id for piece in smap.slices]
    if standbys:
        return {smap.keyspace: ids, standby_kind(smap.keyspace): list(ids)}
    return {smap.keyspace: ids}


def newer(candidate: KnownMap, than: KnownMap | None) -> bool:
    """Whether ``candidate`` is newer than ``than`` (rule 1)."""
    if than is None:
        return True
    return (candidate.epoch, candidate.max_token) > (than.epoch, than.max_token)


def same_map(one: KnownMap, other: KnownMap | None) -> bool:
    """Whether ``one`` and ``other`` are (parts of) the same map."""
    return other is not None and (one.epoch, one.max_token) == (other.epoch, other.max_token)


class MemberKeyspace:
    """One member's view of its keyspace (see the module docstring)."""

    def __init__(self, config: KeyspaceConfig) -> None:
        self.config = config
        #: The newest map this member was handed, whole or in part (``None``: none yet).
        self.map: KnownMap | None = None
        #: The generation whose assignment carried :attr:`map` (rule 5; -1: none).
        self.taken_in = -1
        #: The state kept across restarts, as this process knows it (rule 5).
        self.persisted: PersistedKeyspace | None = None
        #: Sampled key loads by hash point (rule 3); written from any thread.
        self._keys: dict[int, float] = {}
        self._lock = Lock()

    @property
    def carrier(self) -> bool:
        """Whether this member was handed the whole map (rule 1)."""
        return isinstance(self.map, SliceMap)

    def take(self, user_data: bytes, *, group_id: str, generation: int = -1) -> Catalog | None:
        """Rule 1: the catalog of the map an assignment of ``generation`` carries,
        if it is newer than the one kept or another form of it (``None``:
        nothing changes)."""
        if not user_data:
            return None
        try:
            smap = decode_report(user_data).map
        except ProtocolError as exc:
            log.error("member.keyspace_map_unreadable", group=group_id, error=str(exc))
            return None
        if smap is None or smap.keyspace != self.config.name:
            if smap is not None:
                log.error(
                    "member.keyspace_map_foreign",
                    group=group_id,
                    keyspace=smap.keyspace,
                    expected=self.config.name,
                )
            return None
        if self.map is not None and not newer(smap, self.map):
            if not same_map(smap, self.map):
                return None  # older
            self.taken_in = generation  # the same map, handed again (rule 5)
            if smap == self.map:
                return None
            # The same map in another form: whole to a carrier, or another part.
        self.map = smap
        self.taken_in = generation
        return keyspace_catalog(smap, self.config.standbys)

    def record_key_load(self, point: int, load: float) -> None:
        """Rule 3: ``load`` (finite, >= 0) is the current load of the key at ``point``."""
        if not (math.isfinite(load) and load >= 0):
            raise ConfigError(f"a key's load must be a finite number >= 0, not {load}")
        limit = 2 * max(self.config.max_sampled_keys, 1)
        with self._lock:
            self._keys[point] = load
            if len(self._keys) > limit:
                heaviest = heapq.nlargest(limit // 2, self._keys.items(), key=lambda kv: kv[1])
                self._keys = dict(heaviest)

    def user_data(self, member_id: str) -> bytes:
        """Rule 2: this member's report for its JoinGroup metadata."""
        smap = self.map
        keys: dict[int, float] = {}
        if smap is not None:
            with self._lock:
                self._keys = {
                    point: load
                    for point, load in self._keys.items()
                    if (piece := smap.slice_of(point)) is not None and piece.owner == member_id
                }
                mine = list(self._keys.items())
            limit = self.config.max_sampled_keys
            keys = dict(heapq.nlargest(limit, mine, key=lambda kv: kv[1]))
        return encode_report(KeyspaceReport(smap, keys))


__all__ = [
    "DEFAULT_MAX_SAMPLED_KEYS",
    "KeyspaceConfig",
    "KnownMap",
    "MemberKeyspace",
    "keyspace_catalog",
    "newer",
    "same_map",
]
