"""Who owns a resource, and where to reach it: owner lookup for request routing.

A daemon started with ``--advertise HOST:PORT`` names that endpoint in its
member metadata (tag :data:`ENDPOINT_TAG`).  A :class:`Directory` reads the
group from outside through the client layer's
:class:`~workgroup.client.reader.GroupReader`, as ``workgroup describe`` and the
console do: DescribeGroups gives each member's metadata (its endpoint) and
assignment (what it owns, and the generation), the lease slots each
resource's fencing token, and :mod:`workgroup.client.owners` who owns what.

Rules:

1. :meth:`Directory.owner` answers from memory: no request per call, so it can
   be called per routed request.
2. The directory polls DescribeGroups every ``refresh_ms`` of its clock (the
   :class:`~workgroup.clock.Clock` it is given; one small request, on one
   connection kept open) and rebuilds its map whenever the generation
   (or the members) change.  Who owns a resource follows the client layer's
   one rule (:mod:`workgroup.client.owners`): while two assignments name it
   mid-hand-over, the newer assignment's member owns it; in a cooperative
   round that withholds it, nobody holds it and :meth:`owner` says ``None``
   (retry shortly).
3. Tokens: every slot is read once; after a change only the slots of the
   resources that moved are read, again on every poll while their new owners'
   tokens are pending (``settle_ms`` at most).  A new owner is never paired
   with its predecessor's token: :attr:`Owner.token` is ``None`` until its own
   is committed.
4. **Keyspaces** (:mod:`workgroup.client.keyspaces`): for a keyspace the
   group's members carry a map of, :meth:`Directory.owner` takes any ``str``
   or ``int`` key of the keyspace (not a slice id): the key's slice in the
   newest map, its holder by the client layer's rule, and the slice's token
   (the key's fencing token), with :attr:`Owner.slice`.  A key whose slice is
   moving is owned by nobody (``None``), as a listed resource mid-move.  The
   lookup hashes the key and bisects the map in memory: over a million a
   second (``benchmarks/keyspace_lookup.py``).  A group that carries keyspace
   maps has no other kinds: a kind that is none of its keyspaces is refused
   (:class:`~workgroup.client.keyspaces.UnknownKeyspaceError`), as is a key
   that is neither a ``str`` nor an ``int``
   (:class:`~workgroup.keyspaces.KeyspaceError`).
5. An answer can be stale by up to ``refresh_ms`` plus the time a move takes:
   the owner it names may already have been revoked.  Routing is therefore a
   hint, never a lock: the owner checks its lease (and its token fences what it
   writes), and a caller that reaches a member that no longer owns the key
   retries after :meth:`Directory.refresh`.
"""

from __future__ import annotations

import asyncio
import contextlib
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from workgroup.client.connection import ClientConnection
from workgroup.client.keyspaces import SliceHolder, UnknownKeyspaceError
from workgroup.client.owners import ResourceOwner
from workgroup.client.reader import GroupReader, GroupSnapshot
from workgroup.clock import SYSTEM_CLOCK, Clock, wait_within
from workgroup.collector import collector_paused
from workgroup.errors import ConfigError, WorkgroupError
from workgroup.keyspaces.errors import KeyspaceError
from workgroup.keyspaces.hashing import key_hash
from workgroup.keyspaces.slices import Slice, SliceMap
from workgroup.log import get_logger
from workgroup.protocol.endpoint import ENDPOINT_TAG, check_endpoint
from workgroup.security import PLAINTEXT, Security
from workgroup.types import Key

log = get_logger(__name__)

DEFAULT_REFRESH_MS = 500
DEFAULT_SETTLE_MS = 5_000


@dataclass(frozen=True, slots=True)
class Owner:
    """The member that owns a resource now, as the directory last saw it."""

    member_id: str
    instance_id: str | None
    #: ``HOST:PORT`` the member advertised (``None``: it advertised none).
    endpoint: str | None
    #: The resource's fencing token as committed (``None``: not read yet, or a
    #: broker that keeps no commit metadata).
    token: int | None
    generation: int | None
    #: For a keyspace's key, the slice that holds it (its ``token`` is
    #: :attr:`token`); ``None`` for a listed resource.
    slice: Slice | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "member_id": self.member_id,
            "instance_id": self.instance_id,
            "endpoint": self.endpoint,
            "token": self.token,
            "generation": self.generation,
        }
        piece = self.slice
        if piece is not None:
            out["slice"] = {"id": piece.id, "start": piece.start, "end": piece.end}
        return out


#: From this many slices a route keeps its starts and buckets in machine arrays:
#: a list's ints no longer stay in the processor's caches (at 100,000 slices
#: the search runs three times faster; below 20,000 the list is faster).
ARRAY_FROM = 20_000


class KeyRoute:
    """One keyspace's owners by slice, for :meth:`Directory.owner` (rule 4): the
    key's point, the slice's position in the map (its bisection inlined: a
    lookup is a hash and a few comparisons), the owner made beforehand."""

    __slots__ = ("buckets", "map", "owners", "shift", "starts")

    def __init__(self, smap: SliceMap, holders: list[SliceHolder]) -> None:
        self.map = smap
        count = len(smap.slices)
        starts = [piece.start for piece in smap.slices]
        # About two buckets a slice (as SliceMap does), up to 2**18.
        bits = min(18, count.bit_length() + 1)
        self.shift = 64 - bits
        #: Per bucket of the hash's top bits, the position of the slice holding
        #: its first point, and a last entry, the last slice's position.
        buckets = [smap.index_of(bucket << self.shift) for bucket in range(1 << bits)]
        buckets.append(count - 1)
        self.starts: Sequence[int] = starts
        self.buckets: Sequence[int] = buckets
        if count >= ARRAY_FROM:
            self.starts, self.buckets = array("Q", starts), array("l", buckets)
        #: Per slice position, its owner now (``None``: moving, or unassigned).
        self.owners: list[Owner | None] = [
            None
            if h.holder is None
            else Owner(
                h.holder.member_id,
                h.holder.instance_id,
                h.holder.endpoint,
                h.slice.token,
                h.holder.generation,
                h.slice,
            )
            for h in holders
        ]


class Directory:
    """Owner lookup for one group (see the module's rules).

    Use it as ``async with Directory(bootstrap, group) as directory:``, then
    ``directory.owner(kind, key)``; or call :meth:`refresh` yourself and never
    start the poller.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group: str,
        *,
        security: Security = PLAINTEXT,
        refresh_ms: int = DEFAULT_REFRESH_MS,
        settle_ms: int = DEFAULT_SETTLE_MS,
        timeout_s: float = 10.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if refresh_ms <= 0:
            raise ConfigError(f"refresh_ms must be positive, got {refresh_ms}")
        self.bootstrap = bootstrap
        self.group = group
        self._security = security
        self._refresh_ms = refresh_ms
        self._settle_ms = settle_ms
        self._timeout_s = timeout_s
        #: Times the polls and the reader's settling (a test passes a FakeClock).
        self._clock = clock
        self._connection = ClientConnection(
            bootstrap, security=security, timeout_s=timeout_s, client_id="workgroup-directory"
        )
        self._reader = GroupReader(self._connection, group, settle_s=settle_ms / 1000, clock=clock)
        #: ``(kind, key type, key) -> Owner`` with its token: what :meth:`owner` reads.
        self._answers: dict[tuple[str, type, Key], Owner] = {}
        #: The reading's resources :attr:`_answers` were made from.
        self._answered: list[ResourceOwner] | None = None
        #: Per keyspace the members carry a map of, its owners by slice (rule 4).
        self._routes: dict[str, KeyRoute] = {}
        self._poller: asyncio.Task[None] | None = None
        self._refreshed = asyncio.Event()
        #: How many times the map changed (a new generation or assignment).
        self.changes = 0
        #: The last refresh's error (``None`` after a good one).
        self.error: WorkgroupError | None = None

    async def __aenter__(self) -> Directory:
        await self.refresh()
        self._poller = asyncio.create_task(self._poll(), name=f"directory-{self.group}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        await self._connection.close()

    @property
    def snapshot(self) -> GroupSnapshot | None:
        """The last reading of the group (:class:`~workgroup.client.reader.GroupSnapshot`)."""
        return self._reader.last

    def owner(self, kind: str, key: Key) -> Owner | None:
        """Who owns ``kind``/``key`` now (``None``: nobody, as last seen); for a
        keyspace, who owns the key ``key`` of keyspace ``kind`` (rule 4)."""
        route = self._routes.get(kind)
        if route is not None:
            # Inlined (rule 4's rate): the key's point, its bucket, the slice.
            try:
                point = key_hash(key)
            except TypeError as exc:  # a bool, a float, None, bytes...
                raise KeyspaceError(f"keyspace {kind!r}: {exc}") from None
            bucket = point >> route.shift
            buckets = route.buckets
            return route.owners[
                bisect_right(route.starts, point, buckets[bucket], buckets[bucket + 1] + 1) - 1
            ]
        if self._routes:
            raise UnknownKeyspaceError(
                f"group {self.group!r} has no keyspace {kind!r} "
                f"(keyspaces: {', '.join(sorted(self._routes))})"
            )
        return self._answers.get((kind, type(key), key))

    def keyspaces(self) -> dict[str, SliceMap]:
        """The newest map of each keyspace the group's members carry, by name."""
        return {name: route.map for name, route in self._routes.items()}

    def owners(self) -> dict[tuple[str, Key], Owner]:
        """Every resource owned now, with its owner."""
        return {(kind, key): owner for (kind, _, key), owner in self._answers.items()}

    async def wait_changed(self, timeout_s: float | None = None) -> None:
        """Return after the next refresh (whatever it found); ``TimeoutError`` once
        ``timeout_s`` seconds of the directory's clock passed without one."""
        self._refreshed.clear()
        refreshed = asyncio.ensure_future(self._refreshed.wait())
        try:
            if timeout_s is None:
                await refreshed
            elif not await wait_within(self._clock, refreshed, timeout_s):
                raise TimeoutError(f"directory {self.group!r}: no refresh within {timeout_s} s")
        finally:
            refreshed.cancel()

    async def refresh(self) -> None:
        """Read the group now (rule 2) and, while it settles, its tokens (rule 3)."""
        try:
            snapshot = await self._reader.read()
        except WorkgroupError as exc:
            self.error = exc
            self._refreshed.set()
            raise
        self.take(snapshot)
        self.error = None
        self._refreshed.set()

    def take(self, snapshot: GroupSnapshot) -> None:
        """Answer from ``snapshot`` from now on (:meth:`refresh` reads one; a
        reader of the group elsewhere may hand its own)."""
        if snapshot.changed:
            self.changes += 1
            log.debug("directory.changed", group=self.group, generation=snapshot.generation)
        if snapshot.resources is not self._answered:  # the same list: nothing changed
            with collector_paused():  # a big group's 100,000 answers, no cycles
                self._answers = _answers(snapshot.resources)
                self._routes = {
                    name: KeyRoute(smap, snapshot.slices(name))
                    for name, smap in snapshot.keyspaces.items()
                }
            self._answered = snapshot.resources

    async def _poll(self) -> None:
        while True:
            await self._clock.sleep(self._refresh_ms / 1000)
            try:
                await self.refresh()
            except WorkgroupError as exc:
                log.debug("directory.refresh_failed", group=self.group, error=str(exc))


def _answers(resources: list[ResourceOwner]) -> dict[tuple[str, type, Key], Owner]:
    """What :meth:`Directory.owner` reads: each owned resource's owner and token."""
    answers: dict[tuple[str, type, Key], Owner] = {}
    # One Owner per member and token, shared (it is immutable): a member's
    # resources mostly hold tokens of a few values (each take adds one).
    made: dict[tuple[int, int | None], Owner] = {}
    for r in resources:
        m = r.owner
        if m is None or r.kind is None:
            continue
        same = (id(m), r.token)
        owner = made.get(same)
        if owner is None:
            owner = made[same] = Owner(
                m.member_id, m.instance_id, m.endpoint, r.token, m.generation
            )
        answers[r.kind, type(r.key), r.key] = owner
    return answers


async def lookup_owner(
    bootstrap: str | Sequence[str],
    group: str,
    kind: str,
    key: Key,
    *,
    security: Security = PLAINTEXT,
    timeout_s: float = 10.0,
) -> Owner | None:
    """One lookup, without keeping a directory (``workgroup whois``)."""
    directory = Directory(bootstrap, group, security=security, timeout_s=timeout_s)
    try:
        await directory.refresh()
    finally:
        await directory.close()
    return directory.owner(kind, key)


__all__ = [
    "DEFAULT_REFRESH_MS",
    "ENDPOINT_TAG",
    "Directory",
    "Owner",
    "check_endpoint",
    "lookup_owner",
]
