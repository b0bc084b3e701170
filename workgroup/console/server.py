"""The console's web server: reads the coordinator, serves the page and its updates.

Rules:

1. Every ``refresh_ms`` the server lists the groups and reads each one with a
   :class:`~workgroup.client.reader.GroupReader` (at most
   :data:`READ_CONCURRENCY` groups at a time, all on one kept connection),
   reads what the event logs gained since the last refresh, and updates the
   :class:`~workgroup.console.model.ConsoleModel`.  A group's lease slots are
   read whole at first and every :data:`SLOTS_EVERY_S`, or less often for a
   group so big that its full read would take over :data:`FULL_READ_SHARE` of
   the time (checkpoint ages are as precise as that); after its generation or
   members changed, only the slots of the resources that moved, while their
   new owners' tokens are pending (:data:`SETTLE_S` at most).  The next
   refresh waits at least twice as long as the last one took, so the console
   never takes more than a third of the coordinator's time however big the
   groups are.  The members' current loads
   (:mod:`workgroup.runtime.loads`: one OffsetFetch of the companion group) are
   read at every refresh of a group that has members.
2. ``GET /api/stream`` is a server-sent event stream: the summary (every group
   without its resource list, and the timeline) at once and after every
   refresh, so the page updates without a reload.  ``GET /api/groups/NAME``
   gives one group's resources, filtered by ``q`` and cut at ``limit`` (the
   page asks for the group it shows), and its keyspaces' slices (the model's
   rule 8), so the stream stays small however many resources or slices a
   group has.
3. The page is ``static/``: files shipped in the package, no build step, no
   third-party origin (the Content-Security-Policy allows only this origin).
4. It listens on a loopback address only, unless TLS is configured (certificate
   and key): like the coordinator, it shows who owns what to whoever connects.
5. A coordinator that cannot be read is shown, not fatal: the page says so and
   keeps the last view; the console goes on trying.
6. Its waits between refreshes, the readers' settling times and the view's
   timestamps are read from ``clock=`` (:mod:`workgroup.clock`, the system's by
   default).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import ssl
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from workgroup.admin import list_groups_on
from workgroup.client.connection import ClientConnection
from workgroup.client.reader import GroupReader
from workgroup.clock import SYSTEM_CLOCK, Clock
from workgroup.console.model import ConsoleModel, GroupRead
from workgroup.errors import ConfigError, WorkgroupError
from workgroup.log import get_logger
from workgroup.security import PLAINTEXT, Security

log = get_logger(__name__)

READ_CONCURRENCY = 8
#: Slots are read again this long after a group changed, and at least this often.
SETTLE_S = 5.0
SLOTS_EVERY_S = 10.0
#: Full reads of a group's slots take at most this share of the time.
FULL_READ_SHARE = 0.05
DEFAULT_REFRESH_MS = 1_000
#: Resources of one group sent per request at most.
MAX_LIMIT = 5_000
STATIC_FILES = {
    "index.html": "text/html",
    "console.js": "text/javascript",
    "console.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
CSP = "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'"


def check_listen(host: str, *, tls: bool) -> None:
    """Rule 4: a non-loopback address needs TLS (:class:`ConfigError` otherwise)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not tls:
        raise ConfigError(
            f"the console listens on {host!r}, which is not a loopback address: give "
            "--tls-cert and --tls-key to serve it to other hosts over TLS, or listen on "
            "127.0.0.1"
        )


class ConsoleServer:
    """Reads ``bootstrap``'s groups and serves the console (see the rules)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        security: Security = PLAINTEXT,
        host: str = "127.0.0.1",
        port: int = 8080,
        refresh_ms: int = DEFAULT_REFRESH_MS,
        event_logs: Sequence[Path] = (),
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        timeout_s: float = 10.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if (tls_cert is None) != (tls_key is None):
            raise ConfigError("give both --tls-cert and --tls-key, or neither")
        check_listen(host, tls=tls_cert is not None)
        if refresh_ms < 100:
            raise ConfigError(f"refresh_ms must be at least 100, got {refresh_ms}")
        self.bootstrap = bootstrap
        self.host = host
        self.port = port
        self._security = security
        self._refresh_s = refresh_ms / 1000
        self._timeout_s = timeout_s
        self._tls = (tls_cert, tls_key) if tls_cert is not None and tls_key is not None else None
        self._logs = {Path(p): 0 for p in event_logs}
        #: Times the polls, the readers' settling and the view's timestamps.
        self._clock = clock
        self.model = ConsoleModel(bootstrap, clock.wall())
        self._connection = ClientConnection(
            bootstrap, security=security, timeout_s=timeout_s, client_id="workgroup-console"
        )
        #: group -> its reader (rule 1: what it remembers decides what is read again).
        self._readers: dict[str, GroupReader] = {}
        self._summary = b"{}"
        self._subscribers: set[asyncio.Queue[bytes]] = set()
        self._runner: web.AppRunner | None = None
        self._poller: asyncio.Task[None] | None = None
        self.error: str | None = None
        #: Refreshes done, and the last one's duration (the console's own cost).
        self.refreshes = 0
        self.last_refresh_s = 0.0

    @property
    def url(self) -> str:
        scheme = "https" if self._tls else "http"
        return f"{scheme}://{self.host}:{self.port}/"

    async def start(self) -> None:
        await self.refresh()
        app = web.Application(middlewares=[_headers])
        app.router.add_get("/", self._index)
        app.router.add_get("/static/{name}", self._static)
        # Browsers ask for /favicon.ico whatever the page links: answer it too.
        app.router.add_get("/favicon.ico", self._favicon)
        app.router.add_get("/api/view", self._view)
        app.router.add_get("/api/groups/{group}", self._group)
        app.router.add_get("/api/stream", self._stream)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        context = None
        if self._tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(str(self._tls[0]), str(self._tls[1]))
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=context)
        await site.start()
        if self.port == 0:  # the port the system picked
            self.port = int(self._runner.addresses[0][1])
        self._poller = asyncio.create_task(self._poll(), name="console-poll")
        log.info("console.listening", url=self.url, coordinator=self.bootstrap)

    async def close(self) -> None:
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        for queue in list(self._subscribers):
            queue.put_nowait(b"")  # ends the stream
        if self._runner is not None:
            await self._runner.cleanup()
        await self._connection.close()

    # --- reading ------------------------------------------------------------------

    async def refresh(self) -> None:
        """Read the coordinator once and update the view (rules 1 and 5)."""
        started = self._clock.monotonic()
        try:
            listed = await list_groups_on(self._connection)
            limit = asyncio.Semaphore(READ_CONCURRENCY)

            async def read(group: str) -> GroupRead:
                async with limit:
                    return await self._read_group(group)

            reads = await asyncio.gather(*(read(g.group) for g in listed))
            self.error = None
        except WorkgroupError as exc:
            self.error = str(exc)
            log.warning("console.coordinator_unreadable", error=self.error)
            self._publish()
            return
        for gone in set(self._readers) - {g.group for g in listed}:
            del self._readers[gone]
        self.model.add_events(self._new_events())
        self.model.update(list(reads), self._clock.wall())
        self.refreshes += 1
        self.last_refresh_s = self._clock.monotonic() - started
        self._publish()

    async def _read_group(self, group: str) -> GroupRead:
        reader = self._readers.get(group)
        if reader is None:
            reader = self._readers[group] = GroupReader(
                self._connection,
                group,
                loads=True,
                settle_s=SETTLE_S,
                full_every_s=SLOTS_EVERY_S,
                full_share=FULL_READ_SHARE,
                clock=self._clock,
            )
        try:
            snapshot = await reader.read()
        except WorkgroupError as exc:
            return GroupRead(group, None, [], str(exc))
        error = (
            None
            if snapshot.slots_error is None
            else f"lease slots not read: {snapshot.slots_error}"
        )
        keyspaces = {
            name: (smap, snapshot.slices(name)) for name, smap in snapshot.keyspaces.items()
        }
        return GroupRead(
            group,
            snapshot.description,
            snapshot.slots,
            error,
            snapshot.loads,
            snapshot.resources,
            keyspaces,
        )

    def _new_events(self) -> list[dict[str, Any]]:
        """The lines each event log gained since the last read (a torn line waits)."""
        events = []
        for path, offset in list(self._logs.items()):
            try:
                with path.open("rb") as f:
                    f.seek(offset)
                    data = f.read()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1
            for line in data[:end].splitlines():
                with contextlib.suppress(ValueError):
                    events.append(json.loads(line))
            self._logs[path] = offset + end
        return events

    async def _poll(self) -> None:
        while True:
            await self._clock.sleep(max(self._refresh_s, 2 * self.last_refresh_s))
            try:
                await self.refresh()
            except Exception as exc:  # never let the page go stale silently
                self.error = f"{type(exc).__name__}: {exc}"
                log.exception("console.refresh_failed")
                self._publish()

    # --- serving ------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """Rule 2's stream document: every group without its resource list."""
        view = self.model.view
        groups = [
            {
                **{k: v for k, v in g.items() if k not in ("resources", "keyspaces")},
                # Rule 2: a keyspace's slices are the group's page's, like its resources.
                "keyspaces": [
                    {k: v for k, v in ks.items() if k != "slices"} for ks in g.get("keyspaces", [])
                ],
            }
            for g in view.get("groups", [])
        ]
        return {
            "coordinator": self.bootstrap,
            "time": view.get("time"),
            "error": self.error,
            "groups": groups,
            "timeline": view.get("timeline", [])[:200],
        }

    def _publish(self) -> None:
        self._summary = json.dumps(self.summary()).encode()
        for queue in self._subscribers:
            if queue.qsize() < 2:  # a slow page skips views instead of piling them up
                queue.put_nowait(self._summary)

    async def _index(self, _request: web.Request) -> web.StreamResponse:
        return _file("index.html")

    async def _favicon(self, _request: web.Request) -> web.StreamResponse:
        return _file("favicon.svg")

    async def _static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in STATIC_FILES:
            raise web.HTTPNotFound()
        return _file(name)

    async def _view(self, _request: web.Request) -> web.Response:
        return web.Response(body=self._summary, content_type="application/json")

    async def _group(self, request: web.Request) -> web.Response:
        name = request.match_info["group"]
        group = next((g for g in self.model.view.get("groups", []) if g["group"] == name), None)
        if group is None:
            raise web.HTTPNotFound(text=f"no group {name!r}")
        try:
            limit = min(int(request.query.get("limit", "500")), MAX_LIMIT)
        except ValueError:
            raise web.HTTPBadRequest(text="limit must be an integer") from None
        needle = request.query.get("q", "").lower()
        # The view's rows are made when read (the model's rule 7): only this page's,
        # or every row for a search.
        rows = group["resources"]
        if needle:
            rows = [r for r in rows if needle in _searchable(r)]
        body = {
            "group": name,
            "generation": group["generation"],
            "total": len(rows),
            "resources": rows[:limit],
            # Every slice (the heat strip draws them all), in hash order.
            "keyspaces": group.get("keyspaces", []),
        }
        return web.json_response(body)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        queue.put_nowait(self._summary)
        self._subscribers.add(queue)
        try:
            while True:
                data = await queue.get()
                if not data:
                    break
                await response.write(b"data: " + data + b"\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._subscribers.discard(queue)
        return response


def _searchable(row: dict[str, Any]) -> str:
    return " ".join(
        str(row.get(k) or "")
        for k in ("kind", "key", "owner_name", "checkpoint", "role", "warming_by")
    ).lower()


def _file(name: str) -> web.Response:
    data = resources.files("workgroup.console").joinpath("static", name).read_bytes()
    return web.Response(body=data, content_type=STATIC_FILES[name])


@web.middleware
async def _headers(request: web.Request, handler: Any) -> web.StreamResponse:
    response: web.StreamResponse = await handler(request)
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    return response


__all__ = ["DEFAULT_REFRESH_MS", "ConsoleServer", "check_listen"]
