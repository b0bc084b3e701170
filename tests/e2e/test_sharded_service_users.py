"""examples/sharded_service, keyspace mode: each key answered by the process whose
slice owns it, with the slice's token; a key sent to a process that does not own
it is refused with 421, and the sender refreshes and reaches the owner."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

import workgroup
from examples.sharded_service.users import GROUP, KEYSPACE, Router
from workgroup.testing import run_coordinator
from workgroup.testing.servers import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

ROOT = Path(__file__).resolve().parents[2]
KEYS = [f"user-{i}" for i in range(64)]
#: No rebalance for load during the test: the slices move only when the test
#: drains a process, so a first try that reaches its owner is never a race.
BALANCE_INTERVAL_MS = 600_000


class Service:
    def __init__(self, bootstrap: str, name: str, log: Path) -> None:
        self.name = name
        self.port = free_port()
        with log.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "examples.sharded_service.users",
                 "--port", str(self.port), "--instance-id", name, "--bootstrap", bootstrap,
                 "--session-timeout-ms", "2000", "--balance-interval-ms", str(BALANCE_INTERVAL_MS)],
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


async def answered_by_owners(
    directory: workgroup.Directory, session: aiohttp.ClientSession
) -> dict[str, str] | None:
    """Each key's owner's endpoint, if every key's owner answers it now (``None``:
    a slice is moving, or its new owner has not taken it yet)."""
    await directory.refresh()
    routes = {}
    for key in KEYS:
        owner = directory.owner(KEYSPACE, key)
        if owner is None or owner.endpoint is None:
            return None
        async with session.get(f"http://{owner.endpoint}/users/{key}") as reply:
            if reply.status != 200:
                return None
        routes[key] = owner.endpoint
    return routes


async def wait_settled(
    directory: workgroup.Directory, session: aiohttp.ClientSession, endpoints: set[str]
) -> None:
    """Until every key is answered by the owner the directory names, the owners
    are ``endpoints``, and two readings half a second apart agree."""
    async with asyncio.timeout(60):
        while True:
            routes = await answered_by_owners(directory, session)
            if routes is not None and set(routes.values()) == endpoints:
                await asyncio.sleep(0.5)
                if await answered_by_owners(directory, session) == routes:
                    return
            await asyncio.sleep(0.2)


async def test_a_key_not_owned_gets_421_and_the_sender_retries_to_the_owner(
    bootstrap: str, tmp_path: Path
) -> None:
    a = Service(bootstrap, "a", tmp_path / "a.log")
    b = Service(bootstrap, "b", tmp_path / "b.log")
    try:
        # The directory reads the group only when asked: the test decides when
        # the sender's view goes stale.
        async with (
            workgroup.Directory(bootstrap, GROUP, refresh_ms=600_000) as directory,
            aiohttp.ClientSession() as session,
        ):
            await wait_settled(directory, session, {a.endpoint, b.endpoint})
            router = Router(directory, session)
            first = {key: await router.get(key) for key in KEYS}
            for key, reply in first.items():
                owner = directory.owner(KEYSPACE, key)
                assert owner is not None
                assert owner.slice is not None
                assert (reply["served_by"], reply["slice"], reply["token"]) == (
                    owner.instance_id, owner.slice.id, owner.token
                )  # fmt: skip
                assert reply["tries"] == 1
            assert router.misdirected == 0
            on_a = [k for k, r in first.items() if r["served_by"] == "a"]
            assert on_a
            assert len(on_a) < len(KEYS)

            # Sent to a process that does not own it: 421.
            async with session.get(f"http://{b.endpoint}/users/{on_a[0]}") as refused:
                assert refused.status == 421
                assert "not owned by b" in (await refused.json())["error"]

            # a is drained: its slices go to b.  The sender still routes a's keys
            # to a, which refuses them; it refreshes and reaches b.
            drained = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "workgroup", "drain", GROUP, "--instance-id", "a",
                 "--bootstrap", bootstrap, "--wait", "--wait-timeout-s", "60"],
                cwd=ROOT, capture_output=True, text=True, timeout=90, check=False,
            )  # fmt: skip
            assert drained.returncode == 0, drained.stdout + drained.stderr
            moved = await router.get(on_a[0], deadline_s=60)
            assert moved["served_by"] == "b"
            assert int(moved["tries"]) >= 2
            assert router.misdirected >= 1
            assert int(moved["token"]) > int(first[on_a[0]]["token"])
            for key in on_a[1:]:
                assert (await router.get(key, deadline_s=60))["served_by"] == "b"
    finally:
        for service in (a, b):
            with contextlib.suppress(Exception):
                service.stop()
