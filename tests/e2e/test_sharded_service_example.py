"""examples/sharded_service: requests routed to the owner of their key, through a
SIGKILL and a graceful stop of an owner; no request is lost, and each answer
carries the token of the lease it was served under."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

import workgroup
from examples.sharded_service.service import GROUP, KIND, SHARDS, shard_of
from workgroup.testing import run_coordinator
from workgroup.testing.servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

ROOT = Path(__file__).resolve().parents[2]
SESSION_MS = 2_000


class Service:
    def __init__(self, bootstrap: str, name: str, log: Path) -> None:
        self.name = name
        self.port = free_port()
        with log.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "examples.sharded_service.service",
                 "--port", str(self.port), "--instance-id", name, "--bootstrap", bootstrap,
                 "--session-timeout-ms", str(SESSION_MS), "--deadline-s", "30"],
                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                env=os.environ.copy(),
            )  # fmt: skip

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture
def bootstrap(tmp_path: Path) -> Iterator[str]:
    with run_coordinator(
        "--min-session-timeout-ms", "500", log=tmp_path / "coordinator.log"
    ) as coordinator:
        yield coordinator.bootstrap


async def owned_by(directory: workgroup.Directory, endpoints: set[str]) -> bool:
    """Every shard owned by one of ``endpoints``, each owner's token read (the
    test compares it with what the owner answers)."""
    await directory.refresh()
    owners = directory.owners()
    return (
        len(owners) == SHARDS
        and {o.endpoint for o in owners.values()} == endpoints
        and all(o.token is not None for o in owners.values())
    )


async def wait_owned(directory: workgroup.Directory, endpoints: set[str]) -> None:
    async with asyncio.timeout(60):
        while not await owned_by(directory, endpoints):  # noqa: ASYNC110
            await asyncio.sleep(0.2)


async def ask(session: aiohttp.ClientSession, service: Service, key: str) -> dict[str, object]:
    async with session.get(f"http://{service.endpoint}/kv/{key}") as reply:
        assert reply.status == 200, await reply.text()
        body: dict[str, object] = await reply.json()
        return body


async def test_requests_reach_the_owner_through_a_kill_and_a_stop(
    bootstrap: str, tmp_path: Path
) -> None:
    a = Service(bootstrap, "a", tmp_path / "a.log")
    b = Service(bootstrap, "b", tmp_path / "b.log")
    services = [a, b]
    keys = [f"key-{i}" for i in range(64)]
    try:
        async with (
            workgroup.Directory(bootstrap, GROUP, refresh_ms=200) as directory,
            aiohttp.ClientSession() as session,
        ):
            await wait_owned(directory, {a.endpoint, b.endpoint})
            # Routed: every answer comes from the shard's owner, with its token.
            before = {k: await ask(session, a, k) for k in keys}
            served = {str(r["served_by"]) for r in before.values()}
            assert served == {"a", "b"}
            for key, reply in before.items():
                owner = directory.owner(KIND, shard_of(key))
                assert owner is not None
                assert reply["served_by"] == owner.instance_id
                assert reply["token"] == owner.token
            moved = {shard_of(k) for k, r in before.items() if r["served_by"] == "b"}
            # SIGKILL b while requests for its shards arrive at a: they wait out
            # b's session, then reach a, the new owner; none is lost.
            b.process.send_signal(signal.SIGKILL)
            during = await asyncio.gather(*(ask(session, a, k) for k in keys))
            assert {r["served_by"] for r in during} == {"a"}
            for key, reply in zip(keys, during, strict=True):
                if shard_of(key) in moved:
                    assert int(str(reply["token"])) > int(str(before[key]["token"]))
            assert max(int(str(r["tries"])) for r in during) > 1  # retried through the move
            # A third process joins, then stops gracefully while requests flow.
            c = Service(bootstrap, "c", tmp_path / "c.log")
            services.append(c)
            await wait_owned(directory, {a.endpoint, c.endpoint})
            flowing = asyncio.gather(*(ask(session, a, k) for k in keys * 3))
            await asyncio.sleep(0.2)
            c.process.send_signal(signal.SIGTERM)
            replies = await flowing
            assert len(replies) == len(keys) * 3
            assert c.process.wait(timeout=30) == 0
            await wait_owned(directory, {a.endpoint})
            assert directory.changes >= 3
    finally:
        for service in services:
            with contextlib.suppress(Exception):
                service.stop()
