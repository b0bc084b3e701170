"""The service's keyspace mode: millions of users, each request answered by its key's owner.

Run two or more (point them at a coordinator, ``workgroup coordinator``), then
the load generator (``load.py``)::

    python -m examples.sharded_service.users --port 8081 --instance-id a
    python -m examples.sharded_service.users --port 8082 --instance-id b
    python -m examples.sharded_service.load --seconds 60 --move-every-s 20

Instead of a few listed shards, the users are a keyspace (``@app.keyspace``):
their keys are hashed into slices, and the group's leader splits hot slices and
merges cold ones as the load moves.  A sender routes each key with
``Directory.owner("users", key)`` (:class:`Router`); the receiver answers only
for a key one of its slices ``owns`` (with the slice's token) and with HTTP 421
otherwise: the key moved with a split, a merge or a move the sender has not
seen yet, so it refreshes its directory and retries.  Each slice reports its
request rate (``report_load``) and the rates of its busiest keys, sampled
(``report_key_load``), so the leader cuts a hot key into a slice of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import signal
import sys
import time
from collections import Counter
from typing import Any

import aiohttp
from aiohttp import web

import workgroup
from workgroup.keyspaces import PlannerSettings
from workgroup.runtime.keyspaces import SliceLease

KEYSPACE = "users"
GROUP = "kvu.users"  # the app's group for its keyspace "users"
#: One request in this many counts towards its key's sampled load.
KEY_SAMPLE_EVERY = 8
#: The busiest keys of a slice reported at each load report.
HOT_KEYS_PER_SLICE = 4
REPORT_EVERY_S = 1.0

app = workgroup.App("kvu", grace_ms=500)
#: The slice leases this process holds, by slice id.
leases: dict[int, SliceLease] = {}


class SliceTraffic:
    """Requests counted per slice and (sampled) per key since the last report."""

    def __init__(self) -> None:
        self.requests: Counter[int] = Counter()
        self.keys: dict[int, Counter[str]] = {}
        self.seen = 0

    def count(self, slice_id: int, key: str) -> None:
        self.requests[slice_id] += 1
        self.seen += 1
        if self.seen % KEY_SAMPLE_EVERY == 0:
            self.keys.setdefault(slice_id, Counter())[key] += 1

    def take(self, slice_id: int) -> tuple[int, list[tuple[str, int]]]:
        """The slice's requests and its busiest sampled keys since the last take."""
        sampled = self.keys.pop(slice_id, Counter())
        hot = heapq.nlargest(HOT_KEYS_PER_SLICE, sampled.items(), key=lambda kv: kv[1])
        return self.requests.pop(slice_id, 0), hot


traffic = SliceTraffic()


@app.keyspace(
    KEYSPACE,
    settings=PlannerSettings(imbalance_tolerance=0.1, min_slices_per_member=8),
)
async def users(lease: SliceLease) -> None:
    """Hold the slice: report its load until the lease ends (requests are answered
    by :func:`answer`, which finds the slice that owns each key)."""
    leases[lease.slice.id] = lease
    reported: set[str] = set()
    last = time.monotonic()
    try:
        while lease.held:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(lease.wait_revoked(), REPORT_EVERY_S)
            now = time.monotonic()
            requests, hot = traffic.take(lease.slice.id)
            elapsed = max(now - last, 1e-3)
            last = now
            if not lease.held:
                break
            lease.report_load(requests / elapsed)
            # A key no longer among the busiest reports 0: the leader forgets it.
            for key in reported - {k for k, _ in hot}:
                if lease.owns(key):
                    lease.report_key_load(key, 0.0)
            for key, sampled in hot:
                if lease.owns(key):
                    lease.report_key_load(key, sampled * KEY_SAMPLE_EVERY / elapsed)
            reported = {k for k, _ in hot}
    finally:
        if leases.get(lease.slice.id) is lease:
            del leases[lease.slice.id]


def owning_lease(key: str) -> SliceLease | None:
    """The lease of the slice that owns ``key`` here now (``None``: not this process's)."""
    # Every lease of the process reads the one map the process knows (whole,
    # or the part of it this process works on).
    smap = next((lease.map for lease in list(leases.values())), None)
    piece = None if smap is None else smap.slice_for_key(key)
    if piece is None:
        return None
    held = leases.get(piece.id)
    return held if held is not None and held.owns(key) else None


class Receiver:
    """The HTTP side of a process: answer a key it owns, 421 for any other."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def get(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        lease = owning_lease(key)
        if lease is None:
            # Moved (or never here): the sender refreshes its directory and retries.
            return web.json_response(
                {"error": f"key {key!r} is not owned by {self.name}"}, status=421
            )
        traffic.count(lease.slice.id, key)
        return web.json_response(
            {"key": key, "slice": lease.slice.id, "token": lease.token, "served_by": self.name}
        )

    async def start(self, port: int) -> web.AppRunner:
        http = web.Application()
        http.router.add_get("/users/{key}", self.get)
        runner = web.AppRunner(http, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner


class Router:
    """The sending side: route a key to its owner, refresh and retry on 421 or a move."""

    def __init__(self, directory: workgroup.Directory, session: aiohttp.ClientSession) -> None:
        self.directory = directory
        self.session = session
        #: Answers refused with 421 (the receiver no longer owned the key).
        self.misdirected = 0

    async def get(self, key: str, deadline_s: float = 20.0) -> dict[str, Any]:
        """The owner's answer for ``key``, with ``tries`` (1: the first owner answered)."""
        tries = 0
        async with asyncio.timeout(deadline_s):
            while True:
                tries += 1
                owner = self.directory.owner(KEYSPACE, key)
                if owner is not None and owner.endpoint is not None:
                    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                        async with self.session.get(
                            f"http://{owner.endpoint}/users/{key}",
                            timeout=aiohttp.ClientTimeout(total=2),
                        ) as reply:
                            if reply.status == 200:
                                body: dict[str, Any] = await reply.json()
                                return {**body, "tries": tries}
                            if reply.status == 421:
                                self.misdirected += 1
                # Moving, gone or moved away: read the group again, then retry.
                with contextlib.suppress(workgroup.WorkgroupError):
                    await self.directory.refresh()
                await asyncio.sleep(min(0.02 * tries, 0.5))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--instance-id", required=True)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--balance-interval-ms", type=int, default=2000)
    args = parser.parse_args()
    runner = await Receiver(args.instance_id).start(args.port)
    print(f"listening on 127.0.0.1:{args.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await app.serve(
            stop,
            bootstrap=args.bootstrap,
            instance_id=args.instance_id,
            advertise=f"127.0.0.1:{args.port}",
            session_timeout_ms=args.session_timeout_ms,
            heartbeat_interval_ms=max(args.session_timeout_ms // 10, 100),
            balance_interval_ms=args.balance_interval_ms,
            leave_on_stop=True,
        )
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except workgroup.WorkgroupError as exc:  # one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
