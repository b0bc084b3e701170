"""A key-value service sharded over workgroup: each request goes to the owner of its key.

Run two or more on one machine (the first starts nothing else; point them at a
coordinator, ``workgroup coordinator`` or any Kafka cluster)::

    python -m examples.sharded_service.service --port 8081 --instance-id a
    python -m examples.sharded_service.service --port 8082 --instance-id b
    curl localhost:8081/kv/paris          # answered by whichever process owns paris's shard

Every process is a workgroup daemon (``app.serve``) and an HTTP server.  A key
belongs to one of :data:`SHARDS` shards (CRC-32 of the key); the shards are the
group's resources.  A request for a key whose shard this process holds is
answered here, with the lease's token (``served_by``, ``token``); any other is
forwarded to the owner that :class:`workgroup.Directory` names (each process
advertises its HTTP address with ``advertise=``).  A move, a kill or a stop is
seen as "owned by nobody" or as a refusal from a member that no longer holds the
shard (HTTP 421): the request is retried, after a directory refresh, until
``--deadline-s`` passes, so it reaches the new owner instead of being lost.

For millions of keys, the keyspace mode (``users.py``) cuts them into slices
that follow the load instead of a fixed number of shards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import zlib
from typing import Any

import aiohttp
from aiohttp import web

import workgroup

SHARDS = 8
KIND = "shard"
GROUP = "kv.shard"  # the app's group for kind "shard"
#: Set on forwarded requests: the receiver answers only for shards it holds.
FORWARDED = "X-Workgroup-Forwarded"

app = workgroup.App("kv", grace_ms=500)
#: The leases this process holds, by shard.
held: dict[int, workgroup.Lease] = {}
#: Requests answered per shard by this process (the shard's state, for the demo).
counts: dict[int, int] = {}


def shard_of(key: str) -> int:
    return zlib.crc32(key.encode("utf-8")) % SHARDS


@app.resources(KIND)
def shards() -> list[int]:
    return list(range(SHARDS))


@app.worker(KIND)
async def own(lease: workgroup.Lease) -> None:
    """Hold the shard: serve its keys until the lease ends."""
    shard = int(lease.key)
    counts[shard] = int(await lease.checkpoint() or 0)
    held[shard] = lease
    try:
        while not lease.revoked:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(lease.wait_revoked(), 1.0)
            if lease.held:
                await lease.commit(str(counts[shard]))
    finally:
        if held.get(shard) is lease:
            del held[shard]


class Service:
    """The HTTP side: answer, or forward to the owner and retry through moves."""

    def __init__(self, name: str, bootstrap: str, deadline_s: float) -> None:
        self.name = name
        self.directory = workgroup.Directory(bootstrap, GROUP, refresh_ms=200)
        self.deadline_s = deadline_s
        self.session: aiohttp.ClientSession | None = None

    def answer(self, key: str, shard: int) -> dict[str, Any] | None:
        """The answer if this process holds ``shard`` (``None``: it does not)."""
        lease = held.get(shard)
        if lease is None or not lease.held:
            return None
        counts[shard] = counts.get(shard, 0) + 1
        return {"key": key, "shard": shard, "served_by": self.name, "token": lease.token}

    async def get(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        shard = shard_of(key)
        local = self.answer(key, shard)
        if local is not None:
            return web.json_response({**local, "tries": 1})
        if FORWARDED in request.headers:
            # Not ours (any more): the sender refreshes its directory and retries.
            return web.json_response({"error": f"shard {shard} is not held here"}, status=421)
        return await self.forward(key, shard)

    async def forward(self, key: str, shard: int) -> web.Response:
        assert self.session is not None
        tries = 0
        async with asyncio.timeout(self.deadline_s):
            while True:
                tries += 1
                local = self.answer(key, shard)
                if local is not None:
                    return web.json_response({**local, "tries": tries})
                owner = self.directory.owner(KIND, shard)
                if owner is not None and owner.endpoint is not None:
                    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                        async with self.session.get(
                            f"http://{owner.endpoint}/kv/{key}",
                            headers={FORWARDED: self.name},
                            timeout=aiohttp.ClientTimeout(total=2),
                        ) as reply:
                            if reply.status == 200:
                                body: dict[str, Any] = await reply.json()
                                return web.json_response({**body, "tries": tries})
                # Nobody owns it now, the owner is gone, or it moved: look again.
                with contextlib.suppress(workgroup.WorkgroupError):
                    await self.directory.refresh()
                await asyncio.sleep(min(0.05 * tries, 0.5))

    async def start(self, port: int) -> web.AppRunner:
        await self.directory.__aenter__()
        self.session = aiohttp.ClientSession()
        http = web.Application()
        http.router.add_get("/kv/{key}", self.get)
        runner = web.AppRunner(http, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        return runner

    async def close(self, runner: web.AppRunner) -> None:
        await runner.cleanup()
        if self.session is not None:
            await self.session.close()
        await self.directory.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--instance-id", required=True)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--deadline-s", type=float, default=20.0)
    args = parser.parse_args()
    service = Service(args.instance_id, args.bootstrap, args.deadline_s)
    runner = await service.start(args.port)
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
            leave_on_stop=True,
        )
    finally:
        await service.close(runner)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except workgroup.WorkgroupError as exc:  # one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
