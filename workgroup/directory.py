"""Who owns a resource, and where to reach it: owner lookup for request routing.

A daemon started with ``--advertise HOST:PORT`` names that endpoint in its
member metadata (tag :data:`ENDPOINT_TAG`).  A :class:`Directory` reads the
group from outside, as ``workgroup describe`` does: DescribeGroups gives each
member's metadata (its endpoint) and assignment (what it owns, and the
generation), and the lease slots give each resource's fencing token.

Rules:

1. :meth:`Directory.owner` answers from memory: no request per call, so it can
   be called per routed request.
2. The directory polls DescribeGroups every ``refresh_ms`` (one small request)
   and rebuilds its map whenever the generation (or any member's assignment)
   changes.  A resource is answered only while exactly one member's assignment
   holds it; in a cooperative round that withholds it, nobody holds it and
   :meth:`owner` says ``None`` (retry shortly).
3. Tokens: a new owner commits its token just after it is assigned the
   resource, so the slots are read again on every poll for ``settle_ms``
   after each change; then they stay as read until the next change.
4. An answer can be stale by up to ``refresh_ms`` plus the time a move takes:
   the owner it names may already have been revoked.  Routing is therefore a
   hint, never a lock: the owner checks its lease (and its token fences what it
   writes), and a caller that reaches a member that no longer owns the key
   retries after :meth:`Directory.refresh`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from workgroup.admin import (
    GroupDescription,
    GroupNotFoundError,
    LeaseSlot,
    describe_group,
    read_lease_slots,
)
from workgroup.clock import monotonic_ms
from workgroup.errors import ConfigError, WorkgroupError
from workgroup.log import get_logger
from workgroup.protocol.endpoint import ENDPOINT_TAG, check_endpoint
from workgroup.runtime.slots import encode_key
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

    def as_json(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "instance_id": self.instance_id,
            "endpoint": self.endpoint,
            "token": self.token,
            "generation": self.generation,
        }


@dataclass(frozen=True, slots=True)
class _Snapshot:
    #: ``(kind, encoded key) -> Owner`` (the encoding keeps ``1`` and ``"1"`` apart).
    owners: dict[tuple[str, str], Owner]
    #: What a change is detected by: the generation and every member's assignment.
    shape: tuple[object, ...]


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
    ) -> None:
        if refresh_ms <= 0:
            raise ConfigError(f"refresh_ms must be positive, got {refresh_ms}")
        self.bootstrap = bootstrap
        self.group = group
        self._security = security
        self._refresh_ms = refresh_ms
        self._settle_ms = settle_ms
        self._timeout_s = timeout_s
        self._snapshot = _Snapshot({}, ())
        self._changed_at: int | None = None
        self._slots: dict[str, LeaseSlot] = {}
        #: ``(kind, key type, key) -> Owner`` with its token: what :meth:`owner` reads.
        self._answers: dict[tuple[str, type, Key], Owner] = {}
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

    def owner(self, kind: str, key: Key) -> Owner | None:
        """Who owns ``kind``/``key`` now (``None``: nobody, as last seen)."""
        return self._answers.get((kind, type(key), key))

    def owners(self) -> dict[tuple[str, Key], Owner]:
        """Every resource owned now, with its owner."""
        return {(kind, key): owner for (kind, _, key), owner in self._answers.items()}

    async def wait_changed(self, timeout_s: float | None = None) -> None:
        """Return after the next refresh (whatever it found)."""
        self._refreshed.clear()
        async with asyncio.timeout(timeout_s):
            await self._refreshed.wait()

    async def refresh(self) -> None:
        """Read the group now (rule 2) and, while it settles, its tokens (rule 3)."""
        try:
            described: GroupDescription | None = await describe_group(
                self.bootstrap, self.group, security=self._security, timeout_s=self._timeout_s
            )
        except GroupNotFoundError:
            described = None  # no member yet: nobody owns anything
        except WorkgroupError as exc:
            self.error = exc
            self._refreshed.set()
            raise
        now = monotonic_ms()
        owners: dict[tuple[str, str], Owner] = {}
        held_twice: set[tuple[str, str]] = set()
        members = [] if described is None else described.members
        shape: list[object] = [None if described is None else described.generation]
        for m in members:
            shape.append((m.member_id, repr(m.assignment)))
            for kind, keys in (m.assignment or {}).items():
                for key in keys:
                    where = (kind, encode_key(key))
                    if where in owners:
                        held_twice.add(where)
                    owners[where] = Owner(
                        m.member_id, m.instance_id, m.endpoint, None, m.generation
                    )
        for where in held_twice:  # mid-hand-over: nobody answers for it (rule 2)
            del owners[where]
        snapshot = _Snapshot(owners, tuple(shape))
        if snapshot.shape != self._snapshot.shape:
            self.changes += 1
            self._changed_at = now
            log.debug("directory.changed", group=self.group, generation=shape[0])
        self._snapshot = snapshot
        if self._changed_at is not None and now - self._changed_at <= self._settle_ms:
            with contextlib.suppress(WorkgroupError):  # tokens are a bonus, not the answer
                self._slots = {
                    encode_key(s.key): s
                    for s in await read_lease_slots(
                        self.bootstrap,
                        self.group,
                        security=self._security,
                        timeout_s=self._timeout_s,
                    )
                    if s.key is not None
                }
        self._answers = {}
        for (kind, encoded), found in self._snapshot.owners.items():
            slot = self._slots.get(encoded)
            key = _decode_key(encoded)
            self._answers[kind, type(key), key] = _with_token(
                found, None if slot is None else slot.token
            )
        self.error = None
        self._refreshed.set()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_ms / 1000)
            try:
                await self.refresh()
            except WorkgroupError as exc:
                log.debug("directory.refresh_failed", group=self.group, error=str(exc))


def _with_token(owner: Owner, token: int | None) -> Owner:
    return Owner(owner.member_id, owner.instance_id, owner.endpoint, token, owner.generation)


def _decode_key(encoded: str) -> Key:
    value = json.loads(encoded)
    assert isinstance(value, int | str)
    return value


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
    await directory.refresh()
    return directory.owner(kind, key)


__all__ = [
    "DEFAULT_REFRESH_MS",
    "ENDPOINT_TAG",
    "Directory",
    "Owner",
    "check_endpoint",
    "lookup_owner",
]
